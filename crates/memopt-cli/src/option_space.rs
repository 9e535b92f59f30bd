//! The planners' option space as command-line flags, shared by `optimize` and `bench`.

use memopt_search::builder::OptionSpace;

/// What the planners may choose beyond the defaults' segments and policies.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct OptionSpaceArgs {
    /// Planning for a GPU, offer no offloading: every checkpointed segment keeps its saved
    /// input and boundary states in GPU memory (on the CPU nothing is offloaded anyway).
    #[arg(long)]
    pub no_offload: bool,
    /// Plan with the optimizer's update after backward (every gradient held until then), as
    /// the baseline does, instead of each parameter's update in backward.
    #[arg(long)]
    pub no_update_in_backward: bool,
}

impl OptionSpaceArgs {
    /// The default option space with these flags applied.
    pub fn space(&self) -> OptionSpace {
        OptionSpace {
            offload: !self.no_offload,
            update_in_backward: !self.no_update_in_backward,
            ..OptionSpace::default()
        }
    }
}
