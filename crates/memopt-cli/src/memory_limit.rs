//! How much memory this process may still use, and the refusal of a step that would not fit.
//!
//! The probe reads, on Linux, every limit that can kill or fail the process and keeps the
//! smallest room left under one of them:
//!
//! - cgroup v2: `memory.max - memory.current` of the process's cgroup and each ancestor;
//! - cgroup v1: `memory.limit_in_bytes - memory.usage_in_bytes` of its memory cgroup;
//! - `MemAvailable` of `/proc/meminfo`;
//! - the soft `RLIMIT_AS` (`Max address space` of `/proc/self/limits`) minus the address space
//!   in use (`VmSize` of `/proc/self/status`).
//!
//! `--memory-limit SIZE` (or the `MEMOPT_MEMORY_LIMIT` environment variable) replaces the probe
//! with a given figure, which is how tests exercise the refusal without cgroups;
//! `--ignore-memory-limit` runs anyway. Meta steps hold no data and are never refused. The
//! figure compared with the room is the step's exact reserved peak (the caching allocator's
//! segments, what the process really holds), computed on Meta with the device's target.
//!
//! On a GPU (`--device cuda[:N]`) the room is the GPU's free memory (`cuMemGetInfo`, after
//! memopt's CUDA context exists), or `MEMOPT_GPU_FREE_MEMORY` when set (to try a smaller GPU).
//! Memory the step adds outside the pool (kernel modules and cuBLAS handles loaded by the
//! first step) is not predicted; the `outside_pool_bytes` of `profile`/`train` on a GPU
//! measures it.

use crate::error::{CliError, Result};
use crate::format::bytes;
use memopt_checkpoint::Plan;
use memopt_core::Device;
use memopt_profiler::{Estimator, Workload};
use memopt_search::{Budget, BudgetStrategy, PlanningSession, SearchError, Strategy, parse_size};
use std::path::{Path, PathBuf};

/// Environment variable that sets the memory limit like `--memory-limit`.
pub const LIMIT_ENV: &str = "MEMOPT_MEMORY_LIMIT";

/// Options of the commands that run real steps.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Memory limit")]
pub struct MemoryLimitArgs {
    /// The memory this process may use, e.g. 6GiB or 6442450944 [default: probed from the
    /// cgroup limits, MemAvailable and RLIMIT_AS; also MEMOPT_MEMORY_LIMIT].
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub memory_limit: Option<String>,
    /// Run real steps even when their exact peak exceeds the memory limit, and read data without
    /// a limit on its predicted memory.
    #[arg(long)]
    pub ignore_memory_limit: bool,
}

/// Room left under one limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Room {
    /// Bytes this process may still allocate.
    pub bytes: u64,
    /// Where the figure comes from, e.g. `cgroup v2 memory.max of /sys/fs/cgroup/user.slice`.
    pub source: String,
}

impl MemoryLimitArgs {
    /// The room this process has: the given limit, else the smallest probed one (`None` when
    /// nothing could be read, e.g. not on Linux).
    pub fn room(&self) -> Result<Option<Room>> {
        if let Some(s) = &self.memory_limit {
            return given(s, "--memory-limit").map(Some);
        }
        if let Ok(s) = std::env::var(LIMIT_ENV) {
            return given(&s, LIMIT_ENV).map(Some);
        }
        Ok(probe())
    }

    /// The memory the data path may hold (frames being read, integrated, resized and batched):
    /// the room this process has, unlimited with `--ignore-memory-limit` or when nothing could
    /// be probed.
    pub fn data_budget(&self) -> Result<memopt_data::MemoryBudget> {
        if self.ignore_memory_limit {
            return Ok(memopt_data::MemoryBudget::unlimited());
        }
        Ok(match self.room()? {
            Some(room) => memopt_data::MemoryBudget::new(room.bytes, room.source),
            None => memopt_data::MemoryBudget::unlimited(),
        })
    }

    /// Refuses, before any real step, a step on `device` that would not fit: its exact reserved
    /// peak (the caching allocator's segments, computed on Meta with `device`'s target) against
    /// the room left on the CPU, or against the GPU's free memory on a GPU; naming both figures
    /// and, when a plan fits, the `memopt optimize --budget` command that finds it. Every plan
    /// in `plans` is checked; `how` is the rest of the command line that selects the model.
    pub fn check(&self, workload: &Workload, plans: &[&Plan], device: Device, how: &str) -> Result<()> {
        if self.ignore_memory_limit {
            return Ok(());
        }
        let room = match device {
            Device::Cpu => self.room()?,
            Device::Cuda(ordinal) => Some(gpu_room(ordinal)?),
            Device::Meta(_) => None,
        };
        match room {
            Some(room) => refuse_unless_fits(workload, plans, device, &room, how),
            None => Ok(()),
        }
    }
}

/// Environment variable that replaces the GPU's free memory in the check (bytes or a size such
/// as `8GiB`), to try how a step would fare on a smaller GPU.
pub const GPU_FREE_ENV: &str = "MEMOPT_GPU_FREE_MEMORY";

/// The room on GPU `ordinal`: [`GPU_FREE_ENV`] when set, else its free memory now.
pub fn gpu_room(ordinal: usize) -> Result<Room> {
    if let Ok(s) = std::env::var(GPU_FREE_ENV) {
        return given(&s, GPU_FREE_ENV);
    }
    let m = memopt_core::cuda::device_memory(ordinal)?;
    Ok(Room {
        bytes: m.free_bytes,
        source: format!(
            "free memory of cuda:{ordinal} (cuMemGetInfo: {} free of {})",
            bytes(m.free_bytes),
            bytes(m.total_bytes)
        ),
    })
}

/// The refusal itself, with the room given: `Ok` when the largest exact reserved peak over
/// `plans` (the caching allocator's segments, on Meta with `device`'s target) fits `room`, else
/// an error naming both figures and, when the budget strategy finds a plan that fits, the
/// `memopt optimize --budget` command that makes it (the strategy runs on Meta first, so the
/// command suggested really fits). Meta devices always fit.
pub fn refuse_unless_fits(
    workload: &Workload,
    plans: &[&Plan],
    device: Device,
    room: &Room,
    how: &str,
) -> Result<()> {
    if device.is_meta() {
        return Ok(());
    }
    let mut workload = workload.clone();
    workload.target = device.target();
    let peak = reserved_peak(&workload, plans)?;
    if peak <= room.bytes {
        return Ok(());
    }
    let (room_is, device_flag) = match device {
        Device::Cuda(_) => (format!("but {device} has only"), format!(" --device {device}")),
        _ => ("but this process may use only".to_string(), String::new()),
    };
    let over = format!(
        "a step of {} reserves {} ({peak} bytes) at its peak, {room_is} {} ({} bytes; {})",
        workload.name(),
        bytes(peak),
        bytes(room.bytes),
        room.bytes,
        room.source,
    );
    let fitting = PlanningSession::new(&workload)
        .and_then(|mut s| BudgetStrategy::reserved(Budget::Bytes(room.bytes)).plan(&mut s));
    let advice = match fitting {
        Ok(report) => format!(
            "a plan reserving {} fits: make it with `memopt optimize {how}{device_flag} --budget {} \
             --out plan.json` and train with --plan plan.json, or lower --batch",
            bytes(report.planned_peaks.reserved_bytes),
            room.bytes
        ),
        Err(SearchError::Infeasible { best, .. }) => format!(
            "no plan fits (the least reserved peak found is {} ({best} bytes)): lower --batch",
            bytes(best)
        ),
        Err(e) => return Err(e.into()),
    };
    Err(CliError::Invalid(format!(
        "{over}; {advice}; --ignore-memory-limit runs anyway"
    )))
}

/// The largest exact reserved peak of a step of `workload` over `plans`, in bytes (computed on
/// Meta with the workload's target).
pub fn reserved_peak(workload: &Workload, plans: &[&Plan]) -> Result<u64> {
    let mut estimator = Estimator::new(workload)?;
    let mut peak = 0;
    for plan in plans {
        peak = peak.max(estimator.peaks(plan)?.reserved_bytes);
    }
    Ok(peak)
}

fn given(s: &str, from: &str) -> Result<Room> {
    let bytes = parse_size(s).map_err(|e| CliError::Usage(format!("{from}: {e}")))?;
    Ok(Room {
        bytes,
        source: format!("{from} {s}"),
    })
}

/// The smallest room under the limits this machine reports (see the module documentation).
pub fn probe() -> Option<Room> {
    let mut rooms = Vec::new();
    rooms.extend(cgroup_rooms(
        Path::new("/proc/self/cgroup"),
        Path::new("/sys/fs/cgroup"),
    ));
    rooms.extend(mem_available(Path::new("/proc/meminfo")));
    rooms.extend(address_space_room());
    rooms.into_iter().min_by_key(|r| r.bytes)
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Rooms under the cgroup v2 limits of the process's cgroup and its ancestors, and under its
/// cgroup v1 memory limit, from `/proc/self/cgroup` (`cgroup_file`) and the cgroup mount.
pub fn cgroup_rooms(cgroup_file: &Path, mount: &Path) -> Vec<Room> {
    let Ok(text) = std::fs::read_to_string(cgroup_file) else {
        return Vec::new();
    };
    let mut rooms = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            // v2: the limit of every ancestor applies.
            let mut dir: PathBuf = mount.join(rel);
            loop {
                if let (Ok(max), Some(cur)) = (
                    std::fs::read_to_string(dir.join("memory.max")),
                    read_u64(&dir.join("memory.current")),
                ) && let Ok(max) = max.trim().parse::<u64>()
                {
                    rooms.push(Room {
                        bytes: max.saturating_sub(cur),
                        source: format!(
                            "cgroup v2 memory.max {max} minus memory.current {cur} of {}",
                            dir.display()
                        ),
                    });
                }
                if dir == mount || !dir.pop() || !dir.starts_with(mount) {
                    break;
                }
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            for dir in [mount.join("memory").join(rel), mount.join("memory")] {
                if let (Some(max), Some(cur)) = (
                    read_u64(&dir.join("memory.limit_in_bytes")),
                    read_u64(&dir.join("memory.usage_in_bytes")),
                ) {
                    // v1 writes "no limit" as a number near 2^63.
                    if max < 1 << 62 {
                        rooms.push(Room {
                            bytes: max.saturating_sub(cur),
                            source: format!(
                                "cgroup v1 memory.limit_in_bytes {max} minus memory.usage_in_bytes {cur} of {}",
                                dir.display()
                            ),
                        });
                    }
                    break;
                }
            }
        }
    }
    rooms
}

/// The bytes of a `Name:   123 kB` line of a /proc file.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(name))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// `MemAvailable` of a `/proc/meminfo` file.
pub fn mem_available(meminfo: &Path) -> Option<Room> {
    let text = std::fs::read_to_string(meminfo).ok()?;
    Some(Room {
        bytes: kib_field(&text, "MemAvailable:")?,
        source: format!("MemAvailable of {}", meminfo.display()),
    })
}

/// The soft address-space limit minus the address space in use.
fn address_space_room() -> Option<Room> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let soft = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max address space"))?
        .split_whitespace()
        .next()?;
    let limit: u64 = soft.parse().ok()?; // "unlimited" gives None: no limit
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let used = kib_field(&status, "VmSize:")?;
    Some(Room {
        bytes: limit.saturating_sub(used),
        source: format!("RLIMIT_AS {limit} minus the address space in use {used}"),
    })
}
