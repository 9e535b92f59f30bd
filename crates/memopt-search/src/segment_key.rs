//! When two segments are the same for measuring: on Meta a segment's figures are a function of
//! what it runs (each module's type, configuration ([`PlannerHints::config_key`]), parameter and
//! buffer shapes, and children, in order), its inputs' shapes, dtypes and spike flags, the
//! policy, and whether its input is the batch; nothing depends on data or on module names.
//! A chain of repeated blocks measures each distinct segment once
//! ([`crate::builder::chain_model`]).

use crate::Result;
use crate::measure::{Figures, measure};
use crate::parallel::{Request, measure_distinct};
use crate::sites::Site;
use memopt_checkpoint::module::{ValueInfo, chain_links_in};
use memopt_checkpoint::{Model, Module, Policy};
use memopt_core::ModulePath;
use memopt_profiler::Workload;
use std::collections::{HashMap, HashSet};

/// The keys of one model's segments; module subtrees are described once each.
pub(crate) struct SegmentKeys<'m> {
    model: &'m Model,
    /// Each module's subtree as an interned number (`None`: a module in it is not described).
    by_path: HashMap<String, Option<u32>>,
    interned: HashMap<String, u32>,
}

impl<'m> SegmentKeys<'m> {
    pub(crate) fn new(model: &'m Model) -> Self {
        SegmentKeys {
            model,
            by_path: HashMap::new(),
            interned: HashMap::new(),
        }
    }

    fn intern(&mut self, description: String) -> u32 {
        let next = self.interned.len() as u32;
        *self.interned.entry(description).or_insert(next)
    }

    /// The number of the subtree at `path` (`None` when some module in it has no
    /// configuration key, or there is no module there).
    fn subtree(&mut self, path: &str) -> Option<u32> {
        if let Some(&id) = self.by_path.get(path) {
            return id;
        }
        let id = self.describe(path);
        self.by_path.insert(path.to_string(), id);
        id
    }

    fn describe(&mut self, path: &str) -> Option<u32> {
        let module = self.model.module(path)?;
        let own = own_description(module)?;
        let parent = ModulePath::from(path);
        let mut children = Vec::new();
        for (name, _) in module.children() {
            children.push(self.subtree(parent.child(&name).as_str())?);
        }
        Some(self.intern(format!("{own}{{{children:?}}}")))
    }

    /// The key of `site` measured under `policy` (`first`: its input is the batch), or `None`
    /// when it cannot be told apart from other segments safely (then it is measured alone).
    pub(crate) fn of(&mut self, site: &Site, policy: Policy, first: bool) -> Option<String> {
        let structure = match site.run {
            None => format!("module {}", self.subtree(&site.path)?),
            Some([start, end]) => {
                let container = self.model.module(&site.path)?;
                let own = own_description(container)?;
                let parent = ModulePath::from(site.path.as_str());
                let mut children = Vec::new();
                for link in chain_links_in(container, start, end) {
                    children.push(self.subtree(parent.child(&link.name).as_str())?);
                }
                // The next child's first links, when the run goes on into it.
                let mut next = Vec::new();
                if site.into_next > 0 {
                    let link = chain_links_in(container, end, end + 1).pop()?;
                    let path = parent.child(&link.name);
                    for inner in chain_links_in(link.module, 0, site.into_next) {
                        next.push(self.subtree(path.child(&inner.name).as_str())?);
                    }
                }
                format!("run of {own} {children:?} then {next:?}")
            }
        };
        Some(format!("{structure} | {:?} | {policy:?} | {first}", site.inputs))
    }
}

/// A module's type, configuration, parameter and buffer shapes (its children apart).
fn own_description(module: &dyn Module) -> Option<String> {
    let config = module.config_key()?;
    let params: Vec<(&str, ValueInfo)> = module
        .params()
        .into_iter()
        .map(|(name, p)| (name, ValueInfo::of(p.tensor())))
        .collect();
    let buffers: Vec<(&str, ValueInfo)> = module
        .buffers()
        .into_iter()
        .map(|(name, b)| (name, ValueInfo::of(b.tensor())))
        .collect();
    Some(format!("{}({config}) {params:?} {buffers:?}", module.type_name()))
}

/// Measurements of one model's segments, each distinct segment measured once.
pub(crate) struct Measurements<'m> {
    model: &'m Model,
    /// Whether every segment is measured in a step updating in backward (one choice per
    /// session, so not part of the keys).
    update_in_backward: bool,
    keys: SegmentKeys<'m>,
    /// Figures by key, and whether [`Self::of`] has answered with them yet.
    figures: HashMap<String, (Figures, bool)>,
    /// Segments measured (distinct ones and those without a key), in advance or on demand.
    pub(crate) measured: usize,
    /// Segments measured on demand by [`Self::of`] (not in advance by [`Self::prefetch`]).
    pub(crate) on_demand: usize,
    /// Segments whose figures were another's.
    pub(crate) reused: usize,
    /// Whether equal keys share figures (tests compare with measuring each).
    reuse: bool,
}

impl<'m> Measurements<'m> {
    pub(crate) fn new(model: &'m Model, update_in_backward: bool) -> Self {
        Measurements {
            model,
            update_in_backward,
            keys: SegmentKeys::new(model),
            figures: HashMap::new(),
            measured: 0,
            on_demand: 0,
            reused: 0,
            reuse: true,
        }
    }

    /// Every segment measured on its own (to check that sharing changes nothing).
    #[cfg(test)]
    pub(crate) fn measuring_each(model: &'m Model, update_in_backward: bool) -> Self {
        Measurements {
            reuse: false,
            ..Self::new(model, update_in_backward)
        }
    }

    /// The key `site` under `policy` is stored under: its segment key, or for a segment
    /// without one a key of its own (its place in the model: measured once, shared with none);
    /// `None` when nothing is shared.
    fn key(&mut self, site: &Site, policy: Policy, first: bool) -> Option<String> {
        if !self.reuse {
            return None;
        }
        Some(
            self.keys
                .of(site, policy, first)
                .unwrap_or_else(|| format!("at {} | {policy:?} | {first}", site.target())),
        )
    }

    /// Measures the distinct segments among `requests` in advance, on up to `threads` threads
    /// ([`measure_distinct`]), so that [`Self::of`] finds their figures. `workload` builds
    /// this measurement's model (each further thread measures on its own copy).
    pub(crate) fn prefetch(
        &mut self,
        workload: &Workload,
        requests: Vec<Request>,
        threads: usize,
    ) -> Result<()> {
        if !self.reuse {
            return Ok(());
        }
        let mut keys = Vec::new();
        let mut distinct = Vec::new();
        let mut seen = HashSet::new();
        for r in requests {
            let Some(key) = self.key(&r.site, r.policy, r.first) else {
                continue;
            };
            if !self.figures.contains_key(&key) && seen.insert(key.clone()) {
                keys.push(key);
                distinct.push(r);
            }
        }
        let figures = measure_distinct(workload, self.model, &distinct, threads)?;
        self.measured += figures.len();
        for (key, f) in keys.into_iter().zip(figures) {
            self.figures.insert(key, (f, false));
        }
        Ok(())
    }

    /// The figures of `site` under `policy` ([`measure`]), measured unless a segment with the
    /// same key was.
    pub(crate) fn of(&mut self, site: &Site, policy: Policy, first: bool) -> Result<Figures> {
        let key = self.key(site, policy, first);
        if let Some((f, answered)) = key.as_ref().and_then(|k| self.figures.get_mut(k)) {
            if *answered {
                self.reused += 1;
            }
            *answered = true;
            return Ok(*f);
        }
        let f = measure(self.model, site, policy, first, self.update_in_backward)?;
        self.measured += 1;
        self.on_demand += 1;
        if let Some(k) = key {
            self.figures.insert(k, (f, true));
        }
        Ok(f)
    }
}
