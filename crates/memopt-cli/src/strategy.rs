//! `--strategy` and its settings, turned into a memopt-search [`Strategy`].

use crate::error::{CliError, Result};
use crate::format::bytes;
use memopt_search::{
    Budget, BudgetKind, BudgetStrategy, MaxOverhead, Memonger, MinMemory, Pipeline, Prefer, Profile,
    SearchError, Strategy,
};

/// The predicted slowdown the default strategy allows (20% of the baseline step time).
pub const DEFAULT_MAX_OVERHEAD: f64 = 0.2;

/// Strategy names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyName {
    /// The least peak whose predicted slowdown is at most --max-overhead (20%): the default.
    MaxOverhead,
    /// SpikingJelly's pipeline: wrap blocks, split, chunk time, unwrap (--level, --profile, --prefer).
    Pipeline,
    /// Chen et al.'s memonger: recompute segments cut by the sqrt threshold search.
    Memonger,
    /// The fastest plan whose exact reserved peak fits --budget (required).
    Budget,
    /// The least peak reachable, whatever the time.
    MinMemory,
}

/// `--budget-kind` and `--minimise`: the peak a budget bounds or a strategy minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BudgetKindName {
    /// The caching allocator's segments (blocks, cached free blocks, split remainders): what
    /// runs out on a device.
    Reserved,
    /// The blocks handed to tensors, each request rounded up to 512 B (memopt's budget before
    /// the caching allocator).
    Allocated,
    /// The bytes the tensors ask for, unrounded: the planned peak memopt prints first
    Requested,
}

impl BudgetKindName {
    /// The library's kind of peak.
    pub fn kind(self) -> BudgetKind {
        match self {
            BudgetKindName::Reserved => BudgetKind::Reserved,
            BudgetKindName::Allocated => BudgetKind::Allocated,
            BudgetKindName::Requested => BudgetKind::Requested,
        }
    }
}

/// `--profile` presets of the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProfileName {
    /// Level 1: wrap blocks only.
    Safe,
    /// Level 3: wrap, one spatial split pass, temporal splits.
    Balanced,
    /// Level 4: everything, then unwrap what does not help.
    Memory,
    /// Level 4, repeating splits until none helps and trying every chunk count.
    Exhaustive,
}

/// `--prefer` of the pipeline's level 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PreferName {
    /// Unwrap a segment when the peak rises by at most 5% of the baseline.
    Speed,
    /// Unwrap a segment when the peak does not rise.
    Balanced,
    /// Never unwrap.
    Memory,
}

/// Options choosing a strategy. Without --strategy it is inferred from the settings given
/// (--budget: budget; --level/--profile/--prefer/--max-wrapped: pipeline; otherwise
/// max-overhead at 20%).
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Strategy")]
pub struct StrategyArgs {
    /// How to plan [default: max-overhead, the least memory within 20% predicted slowdown].
    #[arg(short, long, value_enum)]
    pub strategy: Option<StrategyName>,
    /// Pipeline: highest level run, 0 (nothing) to 4 (wrap, split, chunk, unwrap) [default: 4].
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=4))]
    pub level: Option<u8>,
    /// Pipeline: a preset of level and search effort (overrides --level).
    #[arg(long, value_enum)]
    pub profile: Option<ProfileName>,
    /// Pipeline: what level 4 favours when unwrapping [default: balanced].
    #[arg(long, value_enum)]
    pub prefer: Option<PreferName>,
    /// Pipeline: wrap at most this many blocks (those with the largest inputs).
    #[arg(long, value_name = "N")]
    pub max_wrapped: Option<usize>,
    /// Budget: the reserved peak to fit (the caching allocator's segments: what runs out on a
    /// device), in bytes with a unit (2GiB, 512MiB, 300MB, 1TiB) or a share of the baseline's
    /// reserved peak (40%).
    #[arg(long, value_name = "BYTES|PCT", allow_hyphen_values = true)]
    pub budget: Option<String>,
    /// Budget: the peak --budget bounds [default: reserved].
    #[arg(long, value_enum, value_name = "KIND")]
    pub budget_kind: Option<BudgetKindName>,
    /// Max-overhead and min-memory: the peak minimised, the requested peak breaking ties
    /// [default: reserved, what runs out on a device].
    #[arg(long, value_enum, value_name = "KIND")]
    pub minimise: Option<BudgetKindName>,
    /// Max-overhead: the largest predicted slowdown, as a percentage (20%) or a fraction (0.2).
    #[arg(long, value_name = "PCT", allow_hyphen_values = true)]
    pub max_overhead: Option<String>,
}

/// Parses `20%` or `0.2` into a fraction >= 0. A bare number above 1 is refused as ambiguous
/// (`20` is far more likely to mean 20% than 2000%); above 100% it must be written with `%`.
pub fn parse_fraction(flag: &str, s: &str) -> Result<f64> {
    let t = s.trim();
    let (v, percent) = match t.strip_suffix('%') {
        Some(p) => (p.trim().parse::<f64>().map(|v| v / 100.0), true),
        None => (t.parse::<f64>(), false),
    };
    let v = v.ok().filter(|v| *v >= 0.0 && v.is_finite()).ok_or_else(|| {
        CliError::Usage(format!(
            "cannot read {flag} '{s}': write a percentage (20%) or a fraction (0.2), at least 0"
        ))
    })?;
    if !percent && v > 1.0 {
        return Err(CliError::Usage(format!(
            "{flag} {t} reads as a fraction, {:.0}% of the step time: for {t}% write {t}% or {}; \
             for {:.0}% write {:.0}%",
            v * 100.0,
            v / 100.0,
            v * 100.0,
            v * 100.0
        )));
    }
    Ok(v)
}

impl StrategyArgs {
    /// The strategy asked for (explicit or inferred from its settings).
    pub fn name(&self) -> StrategyName {
        if let Some(s) = self.strategy {
            return s;
        }
        if self.budget.is_some() {
            StrategyName::Budget
        } else if self.level.is_some()
            || self.profile.is_some()
            || self.prefer.is_some()
            || self.max_wrapped.is_some()
        {
            StrategyName::Pipeline
        } else {
            StrategyName::MaxOverhead
        }
    }

    /// Builds the strategy and a short description of its setting (`level 4, prefer balanced`,
    /// `20%`, `2.00 GiB`). Settings given for another strategy are usage errors.
    pub fn build(&self) -> Result<(Box<dyn Strategy>, String)> {
        let name = self.name();
        let misplaced = |flag: &str, valid: &str| {
            Err(CliError::Usage(format!(
                "{flag} applies to --strategy {valid}, not to --strategy {}",
                strategy_label(name)
            )))
        };
        let pipeline_flags = [
            ("--level", self.level.is_some()),
            ("--profile", self.profile.is_some()),
            ("--prefer", self.prefer.is_some()),
            ("--max-wrapped", self.max_wrapped.is_some()),
        ];
        if name != StrategyName::Pipeline
            && let Some((flag, _)) = pipeline_flags.iter().find(|(_, given)| *given)
        {
            return misplaced(flag, "pipeline");
        }
        if name != StrategyName::Budget && self.budget.is_some() {
            return misplaced("--budget", "budget");
        }
        if name != StrategyName::Budget && self.budget_kind.is_some() {
            return misplaced("--budget-kind", "budget");
        }
        if !matches!(name, StrategyName::MaxOverhead | StrategyName::MinMemory) && self.minimise.is_some() {
            return misplaced("--minimise", "max-overhead or min-memory");
        }
        let minimise = self.minimise.map_or(BudgetKind::Reserved, BudgetKindName::kind);
        if name != StrategyName::MaxOverhead && self.max_overhead.is_some() {
            return misplaced("--max-overhead", "max-overhead");
        }
        Ok(match name {
            StrategyName::MaxOverhead => {
                let max_overhead = match &self.max_overhead {
                    Some(s) => parse_fraction("--max-overhead", s)?,
                    None => DEFAULT_MAX_OVERHEAD,
                };
                (
                    Box::new(MaxOverhead {
                        max_overhead,
                        minimise,
                    }),
                    format!(
                        "least {minimise} peak within {:.0}% predicted slowdown",
                        max_overhead * 100.0
                    ),
                )
            }
            StrategyName::Pipeline => {
                let mut p = Pipeline {
                    level: self.level.unwrap_or(4),
                    max_wrapped: self.max_wrapped,
                    ..Pipeline::default()
                };
                p.profile = self.profile.map(|pr| match pr {
                    ProfileName::Safe => Profile::Safe,
                    ProfileName::Balanced => Profile::Balanced,
                    ProfileName::Memory => Profile::Memory,
                    ProfileName::Exhaustive => Profile::Exhaustive,
                });
                if let Some(pr) = self.prefer {
                    p.prefer = match pr {
                        PreferName::Speed => Prefer::Speed,
                        PreferName::Balanced => Prefer::Balanced,
                        PreferName::Memory => Prefer::Memory,
                    };
                }
                let setting = match p.profile {
                    Some(pr) => format!("profile {}", format!("{pr:?}").to_lowercase()),
                    None => format!("level {}", p.level),
                };
                let prefer = format!("{:?}", p.prefer).to_lowercase();
                let wrapped = p
                    .max_wrapped
                    .map(|n| format!(", at most {n} wrapped"))
                    .unwrap_or_default();
                (Box::new(p), format!("{setting}, prefer {prefer}{wrapped}"))
            }
            StrategyName::Memonger => (Box::new(Memonger::default()), "sqrt threshold search".into()),
            StrategyName::Budget => {
                let text = self.budget.as_deref().ok_or_else(|| {
                    CliError::Usage(
                        "--strategy budget needs --budget: bytes with a unit (2GiB, 512MiB) or a share of the baseline peak (40%)"
                            .into(),
                    )
                })?;
                let budget: Budget = text.parse().map_err(|e: SearchError| {
                    CliError::Usage(e.to_string().replace("invalid setting: ", ""))
                })?;
                let kind = self
                    .budget_kind
                    .map_or(BudgetKind::Reserved, BudgetKindName::kind);
                let setting = match budget {
                    Budget::Bytes(b) => format!("{kind} peak at most {}", bytes(b)),
                    Budget::Fraction(f) => {
                        format!("{kind} peak at most {:.0}% of the baseline's", f * 100.0)
                    }
                };
                (Box::new(BudgetStrategy { budget, kind }), setting)
            }
            StrategyName::MinMemory => (
                Box::new(MinMemory { minimise }),
                format!("least {minimise} peak reachable"),
            ),
        })
    }
}

/// The CLI spelling of a strategy.
pub fn strategy_label(name: StrategyName) -> &'static str {
    match name {
        StrategyName::MaxOverhead => "max-overhead",
        StrategyName::Pipeline => "pipeline",
        StrategyName::Memonger => "memonger",
        StrategyName::Budget => "budget",
        StrategyName::MinMemory => "min-memory",
    }
}

/// Rewrites an infeasible budget in MiB and says what to ask for instead; other errors pass.
pub fn explain(e: SearchError) -> CliError {
    match e {
        SearchError::Infeasible {
            budget, kind, best, ..
        } => CliError::Invalid(format!(
            "no plan fits a budget of {} ({budget} bytes) on the {kind} peak: the smallest {kind} peak \
             found is {} ({best} bytes); ask for at least that, or use --strategy min-memory",
            bytes(budget),
            bytes(best)
        )),
        e => e.into(),
    }
}
