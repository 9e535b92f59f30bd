//! `memopt calibrate`: measure how fast this device runs each module type, for the cost model.

use crate::device_arg::{DEVICE_VALUES, parse_device};
use crate::error::{CliError, Result};
use crate::files::Outputs;
use crate::memory_limit::MemoryLimitArgs;
use crate::out;
use crate::selection::{DEFAULT_MODEL, ModelArgs};
use memopt_checkpoint::Plan;
use memopt_profiler::cost::{Calibration, Throughput, every_leaf_checkpointed};
use memopt_profiler::{CostModel, TimingProfiler};
use std::io::Write;
use std::path::PathBuf;

/// Long help of `memopt calibrate`.
pub const LONG_ABOUT: &str = "\
Measure the cost model's factors on --device and write them as a calibration file. It times
two plans of the model in turns on one model (--steps rounds after one warm-up round):
storing everything (each module type's forward and backward time against its FLOPs and bytes,
the time outside modules, the optimizer) and checkpointing every leaf module (each type's
recomputation as the module that ends its segment, timed in the recompute phase: such a module
materialises only what its backward keeps, so a convolution recomputes nothing; a recomputed
module whose outputs are read is priced at its forward factor). Then it times the exact spike compressors
(bit_spike, u8) packing and unpacking the model's largest spike input, and that tensor moving to host
memory and back (what the offload policy copies; on the CPU, whose memory is the host's, a copy).
Nothing is assumed: recomputation, packing and offload copies are measured. The factors are ratios, so a calibration made on one
model and size predicts others on the same device: pass it to `memopt optimize --calibration
FILE` or `memopt bench --calibration FILE`. The file records the device and what its times
depend on (CPU model, worker threads, build); using it with another is refused. A model with
module types the calibration never ran is priced at its overall factors, and the reports say
so. The report shows each type's factors, the compressors' speeds, and the two measured steps
against what the calibrated model predicts for them.";

/// Options of `memopt calibrate`.
#[derive(Debug, Clone, clap::Args)]
pub struct CalibrateArgs {
    /// The model measured [default model: cifar10dvs-vgg at its small size].
    #[command(flatten)]
    pub model: ModelArgs,
    /// Where the steps run: cpu, or cuda or cuda:N.
    #[arg(long, default_value = "cpu", value_name = DEVICE_VALUES)]
    pub device: String,
    /// Timed rounds, each one step storing everything and one checkpointing every leaf (after
    /// one warm-up round).
    #[arg(long, default_value_t = 5, value_name = "N", value_parser = crate::selection::whole, allow_hyphen_values = true)]
    pub steps: usize,
    /// Write the calibration as JSON to FILE (read by --calibration).
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print the calibration as JSON instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// The memory limit checked before the steps.
    #[command(flatten)]
    pub limit: MemoryLimitArgs,
}

/// Measures and reports a calibration.
pub fn run(args: &CalibrateArgs, out: &mut dyn Write) -> Result<()> {
    if args.steps == 0 {
        return Err(CliError::Usage("--steps must be at least 1".into()));
    }
    let device = parse_device(&args.device)?;
    if device.is_meta() {
        return Err(CliError::Usage(
            "calibrate times real steps: use --device cpu or cuda[:N]".into(),
        ));
    }
    let mut outputs = Outputs::new(&[("--out", args.out.as_deref())])?;
    let mut sel = args.model.resolve(Some(DEFAULT_MODEL))?;
    sel.workload.target = device.target();
    let workload = &sel.workload;
    args.limit.check(
        workload,
        &[&Plan::store_all()],
        device,
        &args.model.command_line(),
    )?;
    let run = Calibration::measure(workload, device, TimingProfiler::new(1, args.steps))?;
    let c = &run.calibration;
    let json = c.to_json();
    if let Some(path) = &args.out {
        outputs.stage(path, json.clone() + "\n");
    }
    if args.json {
        out!(out, "{json}")?;
        return outputs.commit();
    }
    // The calibrated model's predictions for the two measured steps.
    let mut model = CostModel::from_workload(workload, Throughput::cpu_default())?;
    c.apply(&mut model);
    let plan = every_leaf_checkpointed(&model);
    let base_pred = model.baseline_step_ms();
    let ckpt_pred = base_pred + model.plan_extra_ms(&plan);
    out!(out, "{}", sel.describe())?;
    out!(
        out,
        "calibrated on {} ({}), median of {} rounds after one warm-up\n",
        c.device,
        c.host.describe(),
        args.steps
    )?;
    out!(
        out,
        "{:<16} {:>9} {:>9} {:>10}",
        "module type",
        "forward",
        "backward",
        "recompute*"
    )?;
    let overall = [("(overall)".to_string(), c.overall)];
    for (ty, f) in c.factors.iter().map(|(t, f)| (t.clone(), *f)).chain(overall) {
        out!(
            out,
            "{:<16} {:>8.2}x {:>8.2}x {:>9.2}x",
            ty,
            f.forward,
            f.backward,
            f.recompute_last
        )?;
    }
    out!(
        out,
        "(measured over predicted from {:.0} GFLOP/s and {:.0} GB/s; backward predicted at {}x the forward;\n \
         *recompute: as the module that ends its recomputed segment, materialising only what its backward\n \
         keeps; a recomputation whose outputs are read is priced at the forward factor)\n",
        c.throughput.flops_per_s / 1e9,
        c.throughput.bytes_per_s / 1e9,
        c.backward_ratio
    )?;
    out!(
        out,
        "outside modules: forward +{:.1}%, backward +{:.1}%; optimizer {:.3} ms per MiB of parameters",
        c.forward_outside * 100.0,
        c.backward_outside * 100.0,
        c.optimizer_ms_per_byte * (1u64 << 20) as f64
    )?;
    if c.codecs.is_empty() {
        out!(
            out,
            "compressors: not timed (no module of this model takes spikes); packing stays priced by bytes moved"
        )?;
    } else {
        out!(out, "compressors, on {:?} spikes:", c.measured_on.codec_shape)?;
        for (name, speed) in &c.codecs {
            out!(
                out,
                "  {name:<9} pack {:>7.2} GB/s, unpack {:>7.2} GB/s (of unpacked bytes)",
                speed.compress_bytes_per_s / 1e9,
                speed.decompress_bytes_per_s / 1e9
            )?;
        }
        if let Some(link) = &c.host_link {
            out!(
                out,
                "  offload   to host {:>7.2} GB/s, back {:>7.2} GB/s",
                link.compress_bytes_per_s / 1e9,
                link.decompress_bytes_per_s / 1e9
            )?;
        }
    }
    out!(
        out,
        "\n{:<34} {:>11} {:>12}",
        "step",
        "measured ms",
        "predicted ms"
    )?;
    out!(
        out,
        "{:<34} {:>11.1} {:>12.1}",
        "storing everything",
        run.measurement.baseline.step_ms,
        base_pred
    )?;
    out!(
        out,
        "{:<34} {:>11.1} {:>12.1}",
        format!("every leaf checkpointed ({})", plan.entries.len()),
        run.measurement.checkpointed.step_ms,
        ckpt_pred
    )?;
    if let Some(path) = &args.out {
        out!(out, "\ncalibration written to {}", path.display())?;
    }
    outputs.commit()
}
