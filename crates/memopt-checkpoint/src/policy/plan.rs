//! Plans: serialisable lists of (module path, policy).

use super::Policy;
use crate::{CheckpointError, Result};
use serde::{Deserialize, Serialize};

/// Version of the plan format written by this build.
pub const PLAN_VERSION: u32 = 1;

/// One assignment of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanEntry {
    /// Module path, e.g. `features.3`.
    pub path: String,
    /// Policy for that module.
    pub policy: Policy,
}

/// A memory plan: every module not listed is stored. Serialises to JSON as
/// `{"version": 1, "entries": [{"path": "features.0", "policy": {"kind": "checkpoint",
/// "compressor": "bit_spike", "chunks": 1}}]}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Plan {
    /// Format version ([`PLAN_VERSION`]).
    pub version: u32,
    /// Assignments, in any order; a path appears at most once.
    pub entries: Vec<PlanEntry>,
}

impl Plan {
    /// The empty plan (store everything).
    pub fn store_all() -> Plan {
        Plan {
            version: PLAN_VERSION,
            entries: Vec::new(),
        }
    }

    /// A plan from (path, policy) pairs.
    pub fn from_entries<S: Into<String>>(entries: impl IntoIterator<Item = (S, Policy)>) -> Plan {
        Plan {
            version: PLAN_VERSION,
            entries: entries
                .into_iter()
                .map(|(path, policy)| PlanEntry {
                    path: path.into(),
                    policy,
                })
                .collect(),
        }
    }

    /// Parses a plan from JSON, checking the version.
    pub fn from_json(s: &str) -> Result<Plan> {
        let plan: Plan = serde_json::from_str(s).map_err(|e| CheckpointError::InvalidPlan(e.to_string()))?;
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
