//! Multi-step spiking neurons with explicit membrane state.

use super::GradTarget;
use crate::Result;
use crate::autograd::{Backward, BackwardGrads, Gradients, InputSlot, Record, SavedTensor, Var};
use crate::context::Cx;
use memopt_core::Tensor;
use memopt_core::kernels::{self, NeuronConfig};

/// Runs a neuron over `x [T, ...]` from the state stored for the current module path (reset
/// value when absent), stores the final state there ([`Cx::set_final_state`]: released at once
/// when nothing can read it) and returns the spikes. The state is an
/// explicit input and output on the tape, so gradients flow through it across checkpointed
/// segments and time chunks. `w` is the PLIF parameter (`1/tau = sigmoid(w)`). The input is
/// taken by value: when nothing else holds it, the membrane potentials kept for backward are
/// written over it instead of into a new buffer. When the spikes are read by no one
/// ([`Cx::take_output_unread`]) and the op records its backward, which keeps the potentials but
/// not the spikes, the spikes are an unmaterialised stand-in and never allocated.
pub fn neuron<'m>(cx: &mut Cx<'m>, cfg: &NeuronConfig, x: Var, w: Option<&Var>) -> Result<Var> {
    let unread = cx.take_output_unread();
    let v_init = cx.state();
    // Input slots x, v_init, w; the ids are taken now because x is handed to the kernel.
    let slots = [Some(&x), v_init.as_ref(), w];
    let needs_grad = cx.slots_need_grad(&slots);
    let input_ids = slots.map(|v| v.and_then(Var::id));
    let v_init_t = v_init.as_ref().map(Var::tensor).transpose()?;
    let wt = w.map(Var::tensor).transpose()?;
    let (x, v, w_t) = (x.into_tensor()?, v_init_t.as_deref(), wt.as_deref());
    let out = if unread && needs_grad {
        kernels::neuron_forward_for_backward(cfg, x, v, w_t)?
    } else {
        kernels::neuron_forward(cfg, x, v, w_t, needs_grad)?
    };
    let Some(h_seq) = out.h_seq.filter(|_| needs_grad) else {
        cx.set_final_state(Var::constant(out.v_final))?;
        return Ok(Var::constant(out.spikes));
    };
    let op = NeuronBackward {
        cfg: *cfg,
        h_seq: cx.save(&h_seq),
        v_init: v_init_t.as_deref().map(|v| cx.save(v)),
        w: wt.as_deref().map(|w| cx.save(w)),
    };
    drop(h_seq);
    let mut vars = cx.record(Record::from_ids(op, input_ids), vec![out.spikes, out.v_final]);
    let v_final = vars.pop().expect("two outputs recorded");
    cx.set_final_state(v_final)?;
    Ok(vars.pop().expect("two outputs recorded"))
}

struct NeuronBackward {
    cfg: NeuronConfig,
    h_seq: SavedTensor,
    v_init: Option<SavedTensor>,
    w: Option<SavedTensor>,
}

impl Backward<3> for NeuronBackward {
    fn name(&self) -> &'static str {
        "neuron"
    }

    fn backward(
        self,
        params: &mut Gradients,
        mut g: BackwardGrads<[InputSlot; 3]>,
    ) -> Result<[Option<Tensor>; 3]> {
        let h_seq = self.h_seq.tensor();
        let grad_spikes = g.take_output_or_zeros(0, h_seq)?;
        let grad_v_final = g.take_output(1);
        let [x, v_init, w] = g.inputs;
        let wt = match &self.w {
            Some(saved) => GradTarget::for_slot(params, w, saved.tensor().dims(), saved.tensor().device())?,
            None => None,
        };
        let r = kernels::neuron_backward(kernels::NeuronBackward {
            cfg: &self.cfg,
            grad_spikes: grad_spikes.into(),
            grad_v_final: grad_v_final.as_ref(),
            h_seq,
            v_init: self.v_init.as_ref().map(SavedTensor::tensor),
            w: self.w.as_ref().map(SavedTensor::tensor),
            want_v_init_grad: v_init.needs_grad,
            w_acc: wt.as_ref().map(GradTarget::acc),
        })?;
        Ok([
            x.needs_grad.then_some(r.x),
            r.v_init,
            wt.and_then(GradTarget::into_returned),
        ])
    }
}
