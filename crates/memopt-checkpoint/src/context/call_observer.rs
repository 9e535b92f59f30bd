//! Observing module calls: every call dispatched by [`crate::Cx::call`] (and the root's
//! [`crate::Cx::call_here`]) is reported, on its thread, with the module, its path, the phase and
//! the shapes going in and out. Cost models use it to learn per-module shapes from a Meta run.
//! With no observer attached a call costs one thread-local flag check more.

use super::Module;
use memopt_core::memory::Phase;
use memopt_core::{DType, KnownValues, Shape, Tensor};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// Shape, dtype and known values (spike flag, pooled spikes) of a value passed to or returned
/// by a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueInfo {
    /// Dimensions.
    pub shape: Shape,
    /// Element type.
    pub dtype: DType,
    /// Whether the value is known to hold only 0 and 1.
    pub is_spike: bool,
    /// The spikes each value averages, when it is known to be pooled spikes
    /// ([`KnownValues::PooledSpikes`]).
    pub pooled_spike_window: Option<u16>,
}

impl ValueInfo {
    /// What is known about the values.
    pub fn known_values(&self) -> KnownValues {
        KnownValues::from_parts(self.is_spike, self.pooled_spike_window)
    }

    /// The description of `t`.
    pub fn of(t: &Tensor) -> ValueInfo {
        ValueInfo {
            shape: t.shape().clone(),
            dtype: t.dtype(),
            is_spike: t.is_spike(),
            pooled_spike_window: t.pooled_spike_window(),
        }
    }

    /// The description of a value passed to or returned by a module (packed spikes are
    /// described as the f32 tensor they hold).
    pub fn of_value(v: &crate::Var) -> ValueInfo {
        ValueInfo {
            shape: v.shape().clone(),
            dtype: v.dtype(),
            is_spike: v.is_spike(),
            pooled_spike_window: v.known_values().pooled_spike_window(),
        }
    }

    /// Size of the value in bytes.
    pub fn bytes(&self) -> u64 {
        self.shape.elem_count() as u64 * self.dtype.size_in_bytes() as u64
    }
}

/// One completed module call.
pub struct ModuleCall<'a> {
    /// Module path (`""` for the root).
    pub path: &'a str,
    /// Phase of the call (forward, or recompute inside backward).
    pub phase: Phase,
    /// The module called.
    pub module: &'a dyn Module,
    /// Whether the call's outputs are its parent module's outputs: it was made as the parent's
    /// final op ([`crate::Cx::final_op`]) or as the last child of a container. When the parent
    /// ends a recomputed segment, so does this call (its outputs are then read by no one).
    pub ends_parent: bool,
    /// The inputs, as passed.
    pub inputs: &'a [ValueInfo],
    /// The outputs, as returned.
    pub outputs: &'a [ValueInfo],
}

/// Told about every successful module call on the thread it was attached on. Children complete
/// before their parents, so calls arrive in post-order.
pub trait CallObserver {
    /// Called after the call returned.
    fn on_call(&self, call: &ModuleCall<'_>);
}

type ObserverList = Rc<[(u64, Rc<dyn CallObserver>)]>;

thread_local! {
    static OBSERVERS: RefCell<ObserverList> = RefCell::new(Rc::from(Vec::new()));
    static OBSERVING: Cell<bool> = const { Cell::new(false) };
    static NEXT: Cell<u64> = const { Cell::new(0) };
}

/// Keeps a call observer attached to this thread; detaches it when dropped.
#[must_use = "the observer is detached when the guard is dropped"]
pub struct CallObserverGuard {
    id: u64,
    // Observers are per thread: the guard must be dropped on the thread that attached it.
    _not_send: std::marker::PhantomData<Rc<()>>,
}

impl Drop for CallObserverGuard {
    fn drop(&mut self) {
        OBSERVERS.with(|o| {
            let mut o = o.borrow_mut();
            let kept: Vec<_> = o.iter().filter(|(i, _)| *i != self.id).cloned().collect();
            OBSERVING.with(|f| f.set(!kept.is_empty()));
            *o = Rc::from(kept);
        });
    }
}

/// Attaches `observer` to this thread's module calls until the guard drops.
pub fn observe_calls(observer: Rc<dyn CallObserver>) -> CallObserverGuard {
    let id = NEXT.with(|n| {
        let id = n.get();
        n.set(id + 1);
        id
    });
    OBSERVERS.with(|o| {
        let mut list: Vec<_> = o.borrow().iter().cloned().collect();
        list.push((id, observer));
        *o.borrow_mut() = Rc::from(list);
    });
    OBSERVING.with(|f| f.set(true));
    CallObserverGuard {
        id,
        _not_send: std::marker::PhantomData,
    }
}

/// Whether any observer is attached on this thread.
pub(crate) fn observing() -> bool {
    OBSERVING.with(Cell::get)
}

/// Reports one call to every observer of this thread.
pub(crate) fn notify(call: &ModuleCall<'_>) {
    let observers = OBSERVERS.with(|o| o.borrow().clone());
    for (_, observer) in observers.iter() {
        observer.on_call(call);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{Cx, Recording};
    use crate::module::{Conv2d, Init, Linear, ModuleCost, Sequential};
    use crate::policy::PolicyTable;
    use memopt_core::kernels::Conv2dParams;
    use memopt_core::memory::{Scope, enter_scope};
    use memopt_core::{Device, MemoryKind, Philox};

    /// Path, phase, type, input shapes, output shapes and cost of one call.
    type CallRow = (String, Phase, &'static str, Vec<Shape>, Vec<Shape>, ModuleCost);

    #[derive(Default)]
    struct Calls(RefCell<Vec<CallRow>>);

    impl CallObserver for Calls {
        fn on_call(&self, c: &ModuleCall<'_>) {
            let ins: Vec<Shape> = c.inputs.iter().map(|v| v.shape.clone()).collect();
            let outs: Vec<Shape> = c.outputs.iter().map(|v| v.shape.clone()).collect();
            let cost = crate::module::module_cost(c.module, &ins, &outs);
            self.0
                .borrow_mut()
                .push((c.path.to_string(), c.phase, c.module.type_name(), ins, outs, cost));
        }
    }

    #[test]
    fn every_call_is_reported_in_post_order_with_shapes_and_costs() {
        let mut init = Init::new(Device::META, 1);
        let pad = Conv2dParams {
            padding: [1, 1],
            ..Conv2dParams::default()
        };
        let root = Sequential::new()
            .push_named("conv", Conv2d::new(&mut init, 2, 3, 3, pad, true).unwrap())
            .push_named(
                "head",
                Sequential::new().push(Linear::new(&mut init, 3 * 4 * 4, 5, false).unwrap()),
            );
        let head_input = crate::module::Flatten::new(1);
        let table = PolicyTable::default();
        let calls = Rc::new(Calls::default());
        let guard = observe_calls(calls.clone());
        {
            let _fwd = enter_scope(Scope::new("", Phase::Forward));
            let mut cx = Cx::new(Device::META, &table, Philox::new(0), Recording::Off, true);
            let x = Tensor::zeros([2, 2, 4, 4], DType::F32, Device::META, MemoryKind::Input).unwrap();
            let conv = root.children()[0].1;
            let y = cx.call("conv", conv, vec![crate::Var::constant(x)]).unwrap();
            let y = cx.call("flatten", &head_input, y).unwrap();
            cx.call("head", root.children()[1].1, y).unwrap();
        }
        drop(guard);
        let calls = calls.0.borrow();
        let paths: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(paths, ["conv", "flatten", "head.0", "head"]);
        assert!(calls.iter().all(|c| c.1 == Phase::Forward));
        let conv = &calls[0];
        assert_eq!(conv.2, "Conv2d");
        assert_eq!(conv.4, vec![Shape::new([2, 3, 4, 4])]);
        // 96 outputs, each 2 * (2 * 3 * 3) FLOPs plus a bias add.
        assert_eq!(conv.5.flops, 96 * 36 + 96);
        assert_eq!(conv.5.bytes, 4 * (64 + 96 + 3 * 2 * 9 + 3));
        assert_eq!(calls[1].5, ModuleCost::ZERO, "flatten is a view");
        let linear = &calls[2];
        assert_eq!(linear.5.flops, 2 * 10 * 48);
        assert_eq!(linear.5.bytes, 4 * (96 + 10 + 5 * 48));
        assert_eq!(calls[3].5, ModuleCost::ZERO, "a container's own cost is zero");
    }

    #[test]
    fn nothing_is_reported_once_the_guard_is_dropped() {
        let calls = Rc::new(Calls::default());
        drop(observe_calls(calls.clone()));
        assert!(!observing());
        let table = PolicyTable::default();
        let relu = crate::module::Relu;
        let mut cx = Cx::new(Device::META, &table, Philox::new(0), Recording::Off, true);
        let x = Tensor::zeros([2, 3], DType::F32, Device::META, MemoryKind::Input).unwrap();
        cx.call("relu", &relu, vec![crate::Var::constant(x)]).unwrap();
        assert!(calls.0.borrow().is_empty());
    }
}
