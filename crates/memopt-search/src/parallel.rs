//! Measuring a model's distinct segments on several threads. Each measurement runs its segment
//! on Meta on a fresh tracker installed on the thread that runs it ([`measure`]), and its
//! figures are a function of the segment, the policy and whether its input is the batch (see
//! `segment_key.rs`), never of which thread or which copy of the model ran it; the figures are
//! returned in the order asked, so the chain model is the one measuring on one thread gives.
//! Trackers, scopes and call observers are per thread, so measurements never see each other's
//! bytes.

use crate::Result;
use crate::measure::{Figures, measure};
use crate::sites::Site;
use memopt_checkpoint::{Model, Policy};
use memopt_core::MemoryTracker;
use memopt_profiler::Workload;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One measurement a chain model asks for: a segment under a policy.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// The segment.
    pub(crate) site: Site,
    /// Its policy.
    pub(crate) policy: Policy,
    /// Whether its input is the batch.
    pub(crate) first: bool,
    /// Whether the step updates each parameter in backward ([`crate::OptionSpace::update_in_backward`]).
    pub(crate) update_in_backward: bool,
}

/// Threads a planning session measures on: the machine's available parallelism (1 when the
/// system does not say).
pub(crate) fn measure_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// A rough size of a measurement, to start the largest first (the threads then finish close
/// together): the bytes its segment moves in forward, times the passes a chunked checkpoint
/// runs (its chunks, again per BatchNorm statistics and gradient-sums pass). Only the order
/// depends on it, never a figure.
fn weight(r: &Request) -> u128 {
    let passes = match r.policy.chunks() {
        chunks if chunks > 1 => 4 * chunks as u128,
        _ => 1,
    };
    (u128::from(r.site.cost.bytes) + 1) * passes
}

type Measured = Vec<(usize, Result<Figures>)>;

/// The figures of every request, in order. `model` is `workload`'s model on its Meta device
/// (built on this thread); with `threads` above 1, each further thread builds its own copy
/// from `workload` and the threads take the requests, largest first, from one queue. The first
/// error in request order is returned, as measuring in order would.
pub(crate) fn measure_distinct(
    workload: &Workload,
    model: &Model,
    requests: &[Request],
    threads: usize,
) -> Result<Vec<Figures>> {
    let threads = threads.clamp(1, requests.len().max(1));
    if threads == 1 {
        return requests
            .iter()
            .map(|r| measure(model, &r.site, r.policy, r.first, r.update_in_backward))
            .collect();
    }
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(weight(&requests[i])));
    let next = AtomicUsize::new(0);
    let run = |model: &Model| -> Measured {
        let mut out = Vec::new();
        while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
            let r = &requests[i];
            out.push((
                i,
                measure(model, &r.site, r.policy, r.first, r.update_in_backward),
            ));
        }
        out
    };
    let mut results: Vec<Option<Result<Figures>>> = (0..requests.len()).map(|_| None).collect();
    let mut build_error = None;
    std::thread::scope(|scope| {
        // A thread the system does not give leaves its share to the others.
        let workers: Vec<_> = (1..threads)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("memopt-measure".into())
                    .spawn_scoped(scope, || -> Result<Measured> {
                        let device = workload.meta_device();
                        // Declared first, dropped last: the copy's parameters live on it.
                        let _own = MemoryTracker::install(MemoryTracker::new(device));
                        let model = workload.build_model(device)?;
                        Ok(run(&model))
                    })
                    .ok()
            })
            .collect();
        let mut all = vec![Ok(run(model))];
        for worker in workers {
            match worker.join() {
                Ok(measured) => all.push(measured),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        for measured in all {
            match measured {
                Ok(measured) => {
                    for (i, f) in measured {
                        results[i] = Some(f);
                    }
                }
                Err(e) => {
                    build_error.get_or_insert(e);
                }
            }
        }
    });
    if let Some(e) = build_error {
        return Err(e);
    }
    results
        .into_iter()
        .zip(requests)
        // Every request is taken from the queue by some thread, and the calling thread runs
        // until the queue is empty; a missing one (impossible) is measured here.
        .map(|(f, r)| f.unwrap_or_else(|| measure(model, &r.site, r.policy, r.first, r.update_in_backward)))
        .collect()
}
