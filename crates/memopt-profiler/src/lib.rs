//! memopt-profiler (built in its own issue).
