//! memopt-search (built in its own issue).
