//! The top level of the zoo's spiking transformers: named children run in order, with the
//! `[T, N, C, H, W]` value flattened into tokens before the child named `tokens_before`.

use super::one_input;
use crate::autograd::Var;
use crate::context::Cx;
use crate::module::fold::flatten_from;
use crate::module::{Module, PlannerHints};
use crate::{CheckpointError, Forward};

/// A network whose children run one after the other. Just before the child named
/// `tokens_before`, the `[T, N, C, H, W]` value becomes tokens `[T, N, C, H * W]` (a view), as
/// SpikingJelly's `x.flatten(3)`.
pub(super) struct TokenNetwork {
    /// SpikingJelly's class name.
    pub(super) type_name: &'static str,
    /// `(name, module)` in forward order.
    pub(super) children: Vec<(&'static str, Box<dyn Module>)>,
    /// The child whose input is flattened into tokens.
    pub(super) tokens_before: &'static str,
}

impl Module for TokenNetwork {
    fn type_name(&self) -> &'static str {
        self.type_name
    }

    fn forward<'m>(&'m self, cx: &mut Cx<'m>, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        cx.call_children(self, inputs)
    }

    fn children(&self) -> Vec<(String, &dyn Module)> {
        crate::context::named_children(&self.children)
    }
}

impl PlannerHints for TokenNetwork {
    /// The tokens before `tokens_before`: `[T, N, C, H, W]` -> `[T, N, C, H * W]` (a view).
    fn before_child<'m>(&'m self, cx: &mut Cx<'m>, index: usize, inputs: Vec<Var>) -> Forward<Vec<Var>> {
        if self
            .children
            .get(index)
            .is_none_or(|(name, _)| *name != self.tokens_before)
        {
            return Ok(inputs);
        }
        let x = one_input(inputs, self.type_name)?;
        if x.dims().len() != 5 {
            let message = format!(
                "expected images [T, N, C, H, W] before {}, got {}",
                self.tokens_before,
                x.shape()
            );
            return Err(CheckpointError::in_module(self.type_name, message).into());
        }
        Ok(vec![flatten_from(cx, &x, 3)?])
    }

    fn children_form_chain(&self) -> bool {
        true
    }
}
