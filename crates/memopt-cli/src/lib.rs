//! The `memopt` command: see where a training step's memory goes, plan recomputation and
//! bit-packing to cut it, check the plan with real steps, train with it, compare strategies and
//! chart it.
//!
//! The library holds the command-line definitions ([`Cli`]), the commands ([`commands`]) and
//! the pieces other tools reuse: model selection ([`selection`]), real steps ([`steps`]), the
//! strategy table ([`mod@bench`]), the per-kind timeline ([`timeline`]) and the SVG chart ([`svg`]).
//!
//! ```no_run
//! use clap::Parser;
//! let cli = memopt_cli::Cli::parse_from(["memopt", "optimize", "--model", "spiking-mlp"]);
//! memopt_cli::run(cli, &mut std::io::stdout()).unwrap();
//! ```
#![warn(missing_docs)]

pub mod align;
pub mod bench;
pub mod calibration;
pub mod commands;
pub mod device_arg;
pub mod error;
pub mod escape;
pub mod files;
pub mod format;
pub mod gpu_memory;
pub mod memory_limit;
pub mod option_space;
pub mod plan_file;
pub mod progress;
pub mod samples;
pub mod selection;
pub mod steps;
pub mod strategy;
pub mod svg;
pub mod timeline;
pub mod tree;

pub use error::{CliError, Result};

use clap::{Parser, Subcommand};
use std::io::Write;

const ABOUT: &str = "Make spiking-network training fit in memory: profile a step, plan recomputation \
and spike bit-packing, verify the plan, train with it.";

const LONG_ABOUT: &str = "\
Make spiking-network training fit in memory.

A training step holds parameters, optimizer state, the batch, gradients and, above all, the
activations saved for backward. memopt measures every byte of a step exactly (a tracker sees each
allocation and its kind), computes the peak of any plan without running it (a step on the Meta
device allocates exactly as on the CPU but computes nothing), and plans which modules to
checkpoint: keep only their input, bit-packed when it is spikes (1 bit per value), and recompute
them in backward. Gradients stay bit-identical to storing everything.

Every line under Examples runs as written, from any directory (examples/models/small-snn.json
is shipped in the binary); `cargo test -p memopt-cli --test help_examples` runs them all.

Sizes: every model runs at a small input by default so that commands finish in seconds on a
CPU; --published, --input, --timesteps and --batch select the published size or any other
(`memopt models` lists both).";

const EXAMPLES: &str = "\
Examples:
  memopt models                                  the zoo, sizes and parameter counts
  memopt profile --model spiking-mlp             where the memory of a step goes
  memopt optimize                                plan the CIFAR10-DVS VGG (the default model)
  memopt optimize --budget 80% --verify          fit 80% of the baseline's reserved peak, then check
  memopt optimize -m sew-resnet18 --out plan.json
  memopt train -m sew-resnet18 --plan plan.json --steps 20
  memopt bench -m toy-if --json                  every strategy side by side
  memopt plot -m examples/models/small-snn.json -o memory.svg";

/// The `memopt` command line.
#[derive(Debug, Parser)]
#[command(
    name = "memopt",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = EXAMPLES,
    arg_required_else_help = true
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Whether the caching allocator grows one address range per pool in place (true) or adds
    /// separate segments (false), as PyTorch's `expandable_segments` option; overrides
    /// MEMOPT_ALLOC_CONF=expandable_segments:True|False. Default: true (less reserved memory).
    #[arg(long, global = true, value_name = "BOOL")]
    pub expandable_segments: Option<bool>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the model zoo: parameter counts and the small and published input sizes.
    #[command(long_about = commands::models::LONG_ABOUT)]
    Models(commands::models::ModelsArgs),
    /// Measure one training step: per-module memory and time, the peak and who holds it.
    #[command(long_about = commands::profile::LONG_ABOUT)]
    Profile(commands::profile::ProfileArgs),
    /// Plan which modules to recompute so that a step needs less memory.
    #[command(long_about = commands::optimize::LONG_ABOUT)]
    Optimize(commands::optimize::OptimizeArgs),
    /// Train on synthetic data or a dataset (--data), with or without a plan.
    #[command(long_about = commands::train::LONG_ABOUT)]
    Train(commands::train::TrainArgs),
    /// Integrate raw event recordings into SpikingJelly's cached frame folders.
    #[command(long_about = commands::frames::LONG_ABOUT)]
    Frames(commands::frames::FramesArgs),
    /// Loss and accuracy of saved weights on a dataset; optionally the logits.
    #[command(long_about = commands::eval::LONG_ABOUT)]
    Eval(commands::eval::EvalArgs),
    /// Compare every strategy on one model: exact peak, measured step time and overhead.
    #[command(long_about = commands::bench::LONG_ABOUT)]
    Bench(commands::bench::BenchArgs),
    /// Measure this device's per-module-type time factors for the cost model.
    #[command(long_about = commands::calibrate::LONG_ABOUT)]
    Calibrate(commands::calibrate::CalibrateArgs),
    /// Chart a step's memory as SVG: the timeline by kind and the top modules at the peak.
    #[command(long_about = commands::plot::LONG_ABOUT)]
    Plot(commands::plot::PlotArgs),
}

/// Runs a parsed command line, writing its report to `out` (progress goes to stderr).
/// Control characters in names read from files reach `out` escaped ([`escape::TerminalSafe`]).
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<()> {
    let out = &mut escape::TerminalSafe::new(out);
    // A cap on the CPU kernels' vector path that names no path this CPU runs is refused up
    // front (the library would ignore it).
    memopt_core::CpuIsa::from_env()?;
    let mut allocator = memopt_core::AllocatorConfig::from_env()?.unwrap_or_default();
    if let Some(expandable) = cli.expandable_segments {
        allocator.expandable_segments = expandable;
    }
    allocator.set_process_default();
    match cli.command {
        Command::Models(a) => commands::models::run(&a, out),
        Command::Profile(a) => commands::profile::run(&a, out),
        Command::Optimize(a) => commands::optimize::run(&a, out),
        Command::Train(a) => commands::train::run(&a, out),
        Command::Frames(a) => commands::frames::run(&a, out),
        Command::Eval(a) => commands::eval::run(&a, out),
        Command::Bench(a) => commands::bench::run(&a, out),
        Command::Calibrate(a) => commands::calibrate::run(&a, out),
        Command::Plot(a) => commands::plot::run(&a, out),
    }
}
