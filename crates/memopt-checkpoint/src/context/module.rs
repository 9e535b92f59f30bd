//! What a module is: a layer or a container of layers, run through the context ([`Cx`]) that
//! applies the memory policy assigned to its path ([`Module`]: its name, forward, children,
//! parameters and buffers), and what planners know of it besides ([`PlannerHints`]).

use super::Cx;
use crate::Forward;
use crate::autograd::Var;
use crate::module::ModuleCost;
use crate::param::{Buffer, Param};
use memopt_core::Shape;

/// A layer or a container of layers.
pub trait Module: PlannerHints {
    /// Type name as shown in tables and errors (`Conv2d`, `LIF`, `Sequential`, ...).
    fn type_name(&self) -> &'static str;

    /// The forward pass. Multi-step layers take `[T, N, ...]`; stateless layers fold `T` into
    /// the batch. Most modules take and return one value.
    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>>;

    /// Direct children with their names (path segments).
    fn children(&self) -> Vec<(String, &dyn Module)> {
        Vec::new()
    }

    /// How many direct children it has. Containers with many children override it (and
    /// [`Module::children_in`], [`Module::child`]) so that planning a run of children costs the
    /// run's length, not the container's.
    fn child_count(&self) -> usize {
        self.children().len()
    }

    /// Direct children `start..end` (clamped to [`Module::child_count`]) with their names.
    fn children_in(&self, start: usize, end: usize) -> Vec<(String, &dyn Module)> {
        self.children().into_iter().take(end).skip(start).collect()
    }

    /// The direct child named `name`.
    fn child(&self, name: &str) -> Option<&dyn Module> {
        self.children()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c)
    }

    /// This module's own parameters (not its children's), by name.
    fn params(&self) -> Vec<(&'static str, &Param)> {
        Vec::new()
    }

    /// This module's own buffers, by name.
    fn buffers(&self) -> Vec<(&'static str, &Buffer)> {
        Vec::new()
    }
}

/// What planners know of a module beyond running it: how it couples time steps, whether it
/// normalises over the batch, how its children form a chain, its configuration and its cost.
/// Every default fits a stateless layer, so a new layer writes `impl PlannerHints for MyLayer {}`
/// and overrides only what differs. Every [`Module`] has them.
pub trait PlannerHints {
    /// Why this module (itself, not its children) cannot run on a part of the time steps at a
    /// time, if it cannot (a dropout that draws an independent mask per time step). BatchNorm
    /// in training mode couples all time steps through its statistics, but chunked segments
    /// handle that exactly (see [`PlannerHints::batch_statistics`]), so it returns `None`.
    fn time_coupling(&self, _training: bool) -> Option<String> {
        None
    }

    /// Whether this module (itself) normalises with statistics over the whole batch in this
    /// mode (BatchNorm in training) through [`crate::ops::batch_norm`]. A checkpointed segment
    /// run in time chunks then computes those statistics in passes over its chunks, and the
    /// sums over the output gradient likewise in backward, so results stay bit-identical.
    fn batch_statistics(&self, _training: bool) -> bool {
        false
    }

    /// The children that receive this module's policy when it is split spatially, like
    /// SpikingJelly's `__spatial_split__`; `None` (the default): every direct child.
    fn split_children(&self) -> Option<Vec<String>> {
        None
    }

    /// Whether [`Module::forward`] runs the children one after the other, each taking exactly
    /// the previous one's outputs (the first takes the module's inputs, the last gives its
    /// outputs). Planners may then treat the children as a chain of segments.
    fn children_form_chain(&self) -> bool {
        false
    }

    /// Whether the module runs its children through [`crate::Cx::call_children`], so that a
    /// plan can give a run of consecutive children one policy (Sequential does).
    fn supports_child_ranges(&self) -> bool {
        false
    }

    /// For a module that runs its children through [`crate::Cx::call_children`]: the children
    /// it inlines in its chain of links ([`crate::module::chain_links`]). An inlined child (which must run its
    /// own children through `call_children`, as Sequential does) is called whole as usual, but
    /// runs of children in plans count its children one by one, so a run may start or end
    /// inside it; while a run covers part of it, its children run one by one in its place (so
    /// it cannot take a policy of its own then). Default: none.
    fn inlined_children(&self) -> &'static [usize] {
        &[]
    }

    /// For a module that runs its children through [`crate::Cx::call_children`]: what it does
    /// to the values just before child `index` runs (views only, such as the flatten before a
    /// classifier). `call_children` applies it before every child, and a run of children under
    /// one policy applies it inside the run, so runs may span it. Default: nothing.
    fn before_child<'m>(&'m self, _cx: &mut Cx<'m>, _index: usize, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        Ok(inputs)
    }

    /// Whether the module keeps a state across time steps (spiking neurons).
    fn is_stateful(&self) -> bool {
        false
    }

    /// This module's own configuration as text: every field that is not a parameter, a buffer
    /// or a child (a convolution's stride and padding, a neuron's constants, which children a
    /// block has when they differ in role), so that two modules of the same type with equal
    /// keys, equal parameter and buffer shapes and children of equal keys compute and allocate
    /// alike for inputs of equal shapes. Planners then measure such segments once. `None` (the
    /// default): not described, and every segment containing the module is measured on its own.
    fn config_key(&self) -> Option<String> {
        None
    }

    /// The cost of one forward call with these input and output shapes, this module's own work
    /// only (children report theirs through their own calls); `None` (the default) leaves it
    /// to [`module_cost`]: a leaf is elementwise, a module with children costs nothing itself.
    /// Layers with heavier arithmetic override it.
    fn cost(&self, _inputs: &[Shape], _outputs: &[Shape]) -> Option<ModuleCost> {
        None
    }
}

/// The cost of one forward call of `module` with these shapes: its [`PlannerHints::cost`], or
/// elementwise ([`ModuleCost::elementwise`]) for a leaf and nothing for a module with children.
pub fn module_cost(module: &dyn Module, inputs: &[Shape], outputs: &[Shape]) -> ModuleCost {
    match module.cost(inputs, outputs) {
        Some(cost) => cost,
        None if module.children().is_empty() => ModuleCost::elementwise(inputs, outputs),
        None => ModuleCost::ZERO,
    }
}

/// `(name, module)` pairs as [`Module::children`] lists them, from a container's own list.
pub(crate) fn named_children<N: AsRef<str>>(children: &[(N, Box<dyn Module>)]) -> Vec<(String, &dyn Module)> {
    children
        .iter()
        .map(|(n, m)| (n.as_ref().to_string(), m.as_ref() as &dyn Module))
        .collect()
}
