//! memopt-search: memory plans and the strategies that find them.

pub mod builder;
pub mod chain;
pub mod dp;
mod error;
pub mod measure;
pub mod sites;

pub use error::{Result, SearchError};
