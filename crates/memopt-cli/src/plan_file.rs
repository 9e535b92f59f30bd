//! Plan files as `memopt optimize --out` writes them: the plan (the library's format, so that
//! `Plan::from_json` and `Model::apply_plan` read them) plus `made_for`, the workload and memopt
//! version it was planned for. A plan applied to another model, size or version still loads
//! (plans name module paths, not sizes) but its planned peak no longer holds, so the commands
//! that read one warn. Plans without `made_for` (older files, hand-written ones) load silently.

use crate::selection::Selection;
use memopt_checkpoint::{Plan, PlanEntry};
use serde::{Deserialize, Serialize};

/// What a plan was made for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MadeFor {
    /// Model name (zoo name, or the `name` of a JSON model).
    pub model: String,
    /// Time steps T.
    pub timesteps: usize,
    /// Shape of one sample.
    pub sample: Vec<usize>,
    /// Batch size N.
    pub batch: usize,
    /// Optimizer (`sgd` or `adam`).
    pub optimizer: String,
    /// The memopt version that made the plan.
    pub memopt_version: String,
}

impl MadeFor {
    /// The workload of `selection`, made by this build.
    pub fn of(selection: &Selection) -> Self {
        MadeFor {
            model: selection.name().to_string(),
            timesteps: selection.spec.time_steps,
            sample: selection.spec.sample.clone(),
            batch: selection.workload.batch_size,
            optimizer: selection.workload.optimizer.name().to_string(),
            memopt_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// `cifar10dvs-vgg T=4 N=4 [2, 48, 48] sgd`.
    pub fn describe(&self) -> String {
        format!(
            "{} T={} N={} {:?} {}",
            self.model, self.timesteps, self.batch, self.sample, self.optimizer
        )
    }

    /// How `now` differs from what the plan was made for, in words (empty: it does not).
    pub fn differences(&self, now: &MadeFor) -> Vec<String> {
        let mut out = Vec::new();
        if self.describe() != now.describe() {
            out.push(format!(
                "it was made for {}, not {}: its planned peak does not hold here",
                self.describe(),
                now.describe()
            ));
        }
        if self.memopt_version != now.memopt_version {
            out.push(format!(
                "it was made by memopt {} (this is {})",
                self.memopt_version, now.memopt_version
            ));
        }
        out
    }
}

#[derive(Serialize)]
struct PlanFileOut<'a> {
    version: u32,
    made_for: &'a MadeFor,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    update_in_backward: bool,
    entries: &'a [PlanEntry],
}

/// The JSON of a plan file: the plan with `made_for` between its version and its entries (and
/// `update_in_backward` before the entries when the plan updates in backward).
pub fn plan_file_json(plan: &Plan, made_for: &MadeFor) -> String {
    let file = PlanFileOut {
        version: plan.version,
        made_for,
        update_in_backward: plan.update_in_backward,
        entries: &plan.entries,
    };
    // A struct of strings, numbers and plan entries always serialises.
    serde_json::to_string_pretty(&file).unwrap_or_default()
}

#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    made_for: Option<MadeFor>,
}

/// The `made_for` of a plan file's text (`None` without one); a `made_for` with missing,
/// mistyped or unknown fields is an error saying why.
pub fn made_for(text: &str) -> Result<Option<MadeFor>, String> {
    serde_json::from_str::<Header>(text)
        .map(|h| h.made_for)
        .map_err(|e| format!("invalid made_for: {e}"))
}
