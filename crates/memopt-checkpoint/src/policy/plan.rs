//! Plans: serialisable lists of (module path, policy).

use super::Policy;
use crate::{CheckpointError, Result};
use serde::{Deserialize, Serialize};

/// Version of the plan format written by this build.
pub const PLAN_VERSION: u32 = 1;

/// One assignment of a plan: a module, or a run of consecutive children of a container whose
/// children form a chain (then they share one checkpoint: one saved input for the run). Runs
/// count the links of the container's chain ([`crate::module::chain_links`]): its children,
/// except that a child it inlines counts as its own children (a VGG block inlines `proj_bn`, so
/// `features.3` children `[2, 4]` is its BatchNorm and its neuron when `proj_bn` holds a pool,
/// a convolution and a BatchNorm). A run may also go on into the first links of the child after
/// it (`into_next`): `features` children `[1, 2]` with `into_next: 1` is block 1 and block 2's
/// first link, its pooling, so that the segment hands the pooled gradient (4x smaller) to the
/// block before it instead of the whole one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanEntry {
    /// Module path, e.g. `features.3`.
    pub path: String,
    /// Links `[start, end)` of that module's chain as one segment (absent: the module itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<[usize; 2]>,
    /// For a run of children: how many links of the next child's chain (child `end`, which
    /// must run its children as a chain) the run also covers, from its first (0: none). That
    /// child then runs its remaining links outside the run and cannot take a policy itself.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub into_next: usize,
    /// Policy for that module or run.
    pub policy: Policy,
}

impl PlanEntry {
    /// The entry's target as shown to people: `features.3`, or `features[2..5]` for a run of
    /// children.
    pub fn target(&self) -> String {
        run_target(&self.path, self.children, self.into_next)
    }
}

/// How a module or run is named to people: `features.3`, `features[2..5]`, or
/// `features[1..2]+next[0..1]` for a run that goes on into the first link of the next child.
pub fn run_target(path: &str, children: Option<[usize; 2]>, into_next: usize) -> String {
    match children {
        None => path.to_string(),
        Some([a, b]) if into_next == 0 => format!("{path}[{a}..{b}]"),
        Some([a, b]) => format!("{path}[{a}..{b}]+next[0..{into_next}]"),
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A memory plan: every module not listed is stored. Serialises to JSON as
/// `{"version": 1, "entries": [{"path": "features.0", "policy": {"kind": "checkpoint",
/// "compressor": "bit_spike", "chunks": 1}}, {"path": "features", "children": [2, 5],
/// "policy": {"kind": "checkpoint"}}]}`.
///
/// A plan file may also hold a `made_for` object (what the plan was made for, written by
/// `memopt optimize --out`); the library reads past it, and any other unknown field is an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "PlanFile")]
pub struct Plan {
    /// Format version ([`PLAN_VERSION`]).
    pub version: u32,
    /// Assignments, in any order; a path appears at most once.
    pub entries: Vec<PlanEntry>,
    /// Whether the optimizer updates each parameter during backward, as soon as its gradient is
    /// final (no op still to run reads the parameter), and frees that gradient there instead of
    /// holding every gradient until the update after backward (see
    /// [`crate::Trainer::step`]). The updated parameters are bit-identical; the step returns no
    /// gradients unless asked to keep them. In a plan file `"update_in_backward": true` (next to
    /// `version` and `entries`); absent: `false`. An error during such a step's backward can
    /// leave some parameters updated (see [`crate::Trainer::step`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub update_in_backward: bool,
}

/// The fields of a plan file: [`Plan`]'s, plus the `made_for` description tools may add.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    version: u32,
    entries: Vec<PlanEntry>,
    #[serde(default)]
    update_in_backward: bool,
    #[serde(default)]
    #[allow(dead_code)] // read past: its contents are the writer's business
    made_for: Option<serde::de::IgnoredAny>,
}

impl From<PlanFile> for Plan {
    fn from(f: PlanFile) -> Plan {
        Plan {
            version: f.version,
            entries: f.entries,
            update_in_backward: f.update_in_backward,
        }
    }
}

/// The empty plan of the current format: [`Plan::store_all`].
impl Default for Plan {
    fn default() -> Plan {
        Plan::store_all()
    }
}

impl Plan {
    /// The empty plan (store everything).
    pub fn store_all() -> Plan {
        Plan {
            update_in_backward: false,
            version: PLAN_VERSION,
            entries: Vec::new(),
        }
    }

    /// A plan from (path, policy) pairs.
    pub fn from_entries<S: Into<String>>(entries: impl IntoIterator<Item = (S, Policy)>) -> Plan {
        Plan {
            update_in_backward: false,
            version: PLAN_VERSION,
            entries: entries
                .into_iter()
                .map(|(path, policy)| PlanEntry {
                    path: path.into(),
                    children: None,
                    into_next: 0,
                    policy,
                })
                .collect(),
        }
    }

    /// Parses a plan from JSON ([`crate::strict_json`]: a byte-order mark is accepted, repeated
    /// keys and unknown fields are errors), checking the version.
    pub fn from_json(s: &str) -> Result<Plan> {
        let plan: Plan = crate::strict_json::from_str(s).map_err(CheckpointError::InvalidPlan)?;
        if plan.version != PLAN_VERSION {
            return Err(CheckpointError::InvalidPlan(format!(
                "plan version {} is not supported (this build reads version {PLAN_VERSION})",
                plan.version
            )));
        }
        Ok(plan)
    }

    /// The plan as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plans always serialise")
    }
}
