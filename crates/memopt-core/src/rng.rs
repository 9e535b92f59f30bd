//! Philox4x32-10, a counter-based generator: value `i` of a stream is a pure function of
//! (seed, offset + i), so the same [`RngState`] gives the same numbers on any device, in any
//! order, on any number of threads. Checkpointing saves and restores the state to replay dropout.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// One Philox4x32 block with 10 rounds: four 32-bit outputs for a 128-bit counter and a
/// 64-bit key.
#[inline]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(W0);
            k[1] = k[1].wrapping_add(W1);
        }
        let p0 = (M0 as u64) * (c[0] as u64);
        let p1 = (M1 as u64) * (c[2] as u64);
        let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
        let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// The position of a generator: its seed and how many values it has handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RngState {
    /// Key of the stream.
    pub seed: u64,
    /// Index of the next value in the stream (always a multiple of 4).
    pub offset: u64,
}

impl RngState {
    fn key(self) -> [u32; 2] {
        [self.seed as u32, (self.seed >> 32) as u32]
    }

    /// The 32 random bits of value `i` after this state.
    #[inline]
    pub fn bits_at(self, i: u64) -> u32 {
        let v = self.offset.wrapping_add(i);
        let block = v / 4;
        philox4x32_10([block as u32, (block >> 32) as u32, 0, 0], self.key())[(v % 4) as usize]
    }

    /// Value `i` after this state, uniform in `[0, 1)` with 24 bits of precision.
    #[inline]
    pub fn uniform_at(self, i: u64) -> f32 {
        (self.bits_at(i) >> 8) as f32 * (1.0 / 16_777_216.0)
    }
}

/// A generator handing out consecutive ranges of one Philox stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Philox {
    state: RngState,
}

impl Philox {
    /// A generator at the start of stream `seed`.
    pub fn new(seed: u64) -> Self {
        Philox {
            state: RngState { seed, offset: 0 },
        }
    }

    /// A generator at `state`.
    pub fn from_state(state: RngState) -> Self {
        Philox { state }
    }

    /// The current state (save it to replay what follows).
    pub fn state(&self) -> RngState {
        self.state
    }

    /// Moves the generator to `state`.
    pub fn set_state(&mut self, state: RngState) {
        self.state = state;
    }

    /// Reserves `n` values: returns the state to draw them from and advances past them (rounded
    /// up to whole blocks of 4, so every draw starts on a block boundary).
    pub fn reserve(&mut self, n: u64) -> RngState {
        let start = self.state;
        self.state.offset = self.state.offset.wrapping_add(n.div_ceil(4) * 4);
        start
    }

    /// The next uniform value in `[0, 1)`.
    pub fn next_uniform(&mut self) -> f32 {
        self.reserve(1).uniform_at(0)
    }
}

/// Fills `out` with values `0..out.len()` after `start`, scaled to `[low, high)`.
pub fn fill_uniform(start: RngState, out: &mut [f32], low: f32, high: f32) {
    const CHUNK: usize = 1 << 14;
    let scale = high - low;
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, chunk)| {
        let base = (c * CHUNK) as u64;
        for (j, v) in chunk.iter_mut().enumerate() {
            *v = low + scale * start.uniform_at(base + j as u64);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known-answer vectors of the Random123 distribution (kat_vectors, philox4x32_10).
    #[test]
    fn random123_known_answers() {
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn state_replays_the_same_values() {
        let mut g = Philox::new(7);
        let _ = g.reserve(10);
        let saved = g.state();
        let a: Vec<f32> = (0..9).map(|_| g.next_uniform()).collect();
        g.set_state(saved);
        let b: Vec<f32> = (0..9).map(|_| g.next_uniform()).collect();
        assert_eq!(a, b);
        assert_eq!(saved.offset, 12, "10 values round up to 3 blocks");
        let json = serde_json::to_string(&saved).unwrap();
        assert_eq!(serde_json::from_str::<RngState>(&json).unwrap(), saved);
    }

    #[test]
    fn fill_matches_pointwise_values_and_is_uniform() {
        let start = RngState { seed: 3, offset: 8 };
        let mut v = vec![0f32; 40_000];
        fill_uniform(start, &mut v, -1.0, 1.0);
        for (i, x) in v.iter().enumerate().step_by(997) {
            assert_eq!(*x, -1.0 + 2.0 * start.uniform_at(i as u64));
        }
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!(v.iter().all(|&x| (-1.0..1.0).contains(&x)));
    }
}
