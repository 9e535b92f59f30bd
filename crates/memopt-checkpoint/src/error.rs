//! The error type of memopt-checkpoint.

use memopt_compress::CompressError;
use memopt_core::CoreError;

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, CheckpointError>;

/// Everything that can go wrong when building, planning or running a model.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CheckpointError {
    /// A kernel rejected its inputs.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// A compressor rejected its input.
    #[error(transparent)]
    Compress(#[from] CompressError),
    /// A plan names a module path that the model does not have.
    #[error("unknown module path '{path}'{}", suggest(.suggestions))]
    UnknownPath {
        /// The path as given.
        path: String,
        /// Existing paths that look alike.
        suggestions: Vec<String>,
    },
    /// A policy cannot be applied to a module.
    #[error("policy {policy} cannot be applied to '{path}' ({module}): {reason}")]
    InvalidPolicy {
        /// Module path.
        path: String,
        /// Module type, e.g. `BatchNorm2d`.
        module: String,
        /// The policy, as written in plans.
        policy: String,
        /// Why, and what would be valid.
        reason: String,
    },
    /// A plan file or value is malformed.
    #[error("invalid plan: {0}")]
    InvalidPlan(String),
    /// A model description (the JSON format of [`crate::zoo::custom`]) is malformed.
    #[error("invalid model description: {0}")]
    InvalidModel(String),
    /// A training step was asked of a model with no parameters (and no input gradient).
    #[error(
        "nothing to train: model '{0}' has no parameters; add a layer with weights (linear, conv2d or batch_norm)"
    )]
    NothingToTrain(String),
    /// An input does not fit the model.
    #[error("input does not fit the model: {0}")]
    InvalidInput(String),
    /// A module was called in a way it does not support.
    #[error("{module} at '{path}': {message}")]
    Module {
        /// Module path.
        path: String,
        /// Module type.
        module: String,
        /// What went wrong.
        message: String,
    },
    /// The tape was used wrongly (e.g. backward twice).
    #[error("autograd: {0}")]
    Autograd(String),
}

impl CheckpointError {
    /// A [`CheckpointError::Module`] for the module of type `module` running now (its path is
    /// the current scope's).
    pub fn in_module(module: &str, message: impl Into<String>) -> CheckpointError {
        CheckpointError::Module {
            path: memopt_core::memory::current_scope().path().to_string(),
            module: module.to_string(),
            message: message.into(),
        }
    }

    /// Whether a device ran out of memory (see [`CoreError::is_out_of_memory`]).
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            CheckpointError::Core(e) => e.is_out_of_memory(),
            CheckpointError::Compress(e) => e.is_out_of_memory(),
            _ => false,
        }
    }
}

fn suggest(s: &[String]) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!(
            "; did you mean {}?",
            s.iter()
                .map(|p| format!("'{p}'"))
                .collect::<Vec<_>>()
                .join(" or ")
        )
    }
}
