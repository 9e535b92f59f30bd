//! memopt-search: memory plans and the strategies that find them.

pub mod chain;
pub mod dp;
