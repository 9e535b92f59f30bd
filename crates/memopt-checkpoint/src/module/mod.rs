//! The module tree: named children, parameters and buffers by path, and the forward pass.
//!
//! Containers call their children through [`crate::Cx::call`], never directly: that is where the
//! memory policy assigned to the child's path takes effect, and where its scope (module path) is
//! entered so that every allocation is attributed to it.

mod attention;
mod batch_norm;
mod conv;
mod cost;
pub(crate) mod fold;
mod init;
mod linear;
pub(crate) mod links;
mod neuron;
mod pool;
mod sequential;
mod simple;
mod spike_driven_attention;
mod tree;

pub use crate::context::{
    CallObserver, CallObserverGuard, Module, ModuleCall, PlannerHints, ValueInfo, module_cost, observe_calls,
};
pub use attention::{SpikingSelfAttention, conv1x1_bn, transformer_lif};
pub use batch_norm::BatchNorm;
pub use conv::{Conv1d, Conv2d};
pub use cost::{COMPUTE_ELEM_BYTES, ModuleCost};
pub use init::Init;
pub use linear::Linear;
pub use links::{ChainLink, chain_link_count, chain_links, chain_links_in};
pub use neuron::Neuron;
pub use pool::{Pool2d, PoolKind};
pub use sequential::Sequential;
pub use simple::{Dropout, Flatten, Mean, Relu};
pub use spike_driven_attention::SpikeDrivenSelfAttention;
pub use tree::{
    ModuleInfo, batch_statistics_in, find_module, module_infos, named_buffers, named_params, time_coupling_in,
};
