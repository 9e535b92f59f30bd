//! memopt-compress (built in its own issue).
