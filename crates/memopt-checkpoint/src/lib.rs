//! memopt-checkpoint (built in its own issue).
