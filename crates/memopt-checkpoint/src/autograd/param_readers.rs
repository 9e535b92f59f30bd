//! How many recorded ops still to run in backward read each parameter. When the count of a
//! parameter falls to zero its gradient is final: the update in backward
//! ([`crate::Plan::update_in_backward`]) applies the optimizer to it there and frees it.
//!
//! An op reads the parameters among its inputs; a checkpointed segment's node reads every
//! parameter its forward read without a tape (its recomputation reads them again, on tapes of
//! its own, while the node's backward runs). A parameter's last reader is therefore done only
//! when no recomputation can read it again, and the count cannot rise after reaching zero.

use crate::param::ParamId;
use std::collections::{BTreeMap, BTreeSet};

/// Pending readers per parameter, and the parameters the segment forward running without a
/// tape has read so far.
#[derive(Debug, Default)]
pub(crate) struct ParamReaders {
    pending: BTreeMap<ParamId, usize>,
    untaped: Option<BTreeSet<ParamId>>,
}

impl ParamReaders {
    /// A recorded op reads each of `params` (distinct).
    pub(crate) fn add(&mut self, params: &[ParamId]) {
        for p in params {
            *self.pending.entry(*p).or_default() += 1;
        }
    }

    /// An op reading each of `params` has run its backward (or will not run it); returns the
    /// parameters no reader is left for.
    pub(crate) fn done(&mut self, params: &[ParamId]) -> Vec<ParamId> {
        let mut finals = Vec::new();
        for p in params {
            match self.pending.get_mut(p) {
                Some(n) if *n > 1 => *n -= 1,
                Some(_) => {
                    self.pending.remove(p);
                    finals.push(*p);
                }
                None => {}
            }
        }
        finals
    }

    /// A parameter read while no tape records (inside a checkpointed segment's forward).
    pub(crate) fn read_untaped(&mut self, p: ParamId) {
        if let Some(set) = &mut self.untaped {
            set.insert(p);
        }
    }

    /// Starts collecting what a segment's forward reads without a tape; returns what the
    /// enclosing segment collected so far, for [`ParamReaders::end_segment`].
    pub(crate) fn begin_segment(&mut self) -> Option<BTreeSet<ParamId>> {
        self.untaped.replace(BTreeSet::new())
    }

    /// The parameters the segment read (in id order); the enclosing segment, if any, read them
    /// too.
    pub(crate) fn end_segment(&mut self, outer: Option<BTreeSet<ParamId>>) -> Vec<ParamId> {
        let mine = std::mem::replace(&mut self.untaped, outer).unwrap_or_default();
        if let Some(set) = &mut self.untaped {
            set.extend(mine.iter().copied());
        }
        mine.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_is_final_when_its_last_reader_is_done() {
        let (a, b) = (ParamId(1), ParamId(2));
        let mut r = ParamReaders::default();
        r.add(&[a, b]);
        r.add(&[a]);
        assert_eq!(r.done(&[a, b]), vec![b]);
        assert_eq!(r.done(&[a]), vec![a]);
        assert!(r.done(&[a]).is_empty(), "a parameter is final once");
    }

    #[test]
    fn nested_segments_read_what_their_inner_segments_read() {
        let (a, b) = (ParamId(1), ParamId(2));
        let mut r = ParamReaders::default();
        r.read_untaped(a);
        let outer = r.begin_segment();
        r.read_untaped(a);
        let inner = r.begin_segment();
        r.read_untaped(b);
        assert_eq!(r.end_segment(inner), vec![b]);
        assert_eq!(r.end_segment(outer), vec![a, b]);
    }
}
