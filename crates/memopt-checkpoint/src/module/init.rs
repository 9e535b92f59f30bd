//! Parameter initialisation (PyTorch's defaults) from the counter-based RNG.

use crate::Result;
use crate::param::{Buffer, Param};
use memopt_core::{Device, MemoryKind, Philox, Tensor};

/// Where and from which random stream new parameters are created. Building the same model with
/// the same seed on the CPU and on Meta gives the same parameters (none on Meta) and the same
/// allocation sequence.
#[derive(Debug, Clone)]
pub struct Init {
    /// Device of the parameters.
    pub device: Device,
    /// Random stream.
    pub rng: Philox,
}

impl Init {
    /// Parameters on `device` drawn from stream `seed`.
    pub fn new(device: Device, seed: u64) -> Self {
        Init {
            device,
            rng: Philox::new(seed),
        }
    }

    /// A parameter drawn uniformly from `[-bound, bound)`.
    pub fn uniform(&mut self, dims: &[usize], bound: f32) -> Result<Param> {
        Ok(Param::new(Tensor::rand_uniform(
            dims,
            -bound,
            bound,
            &mut self.rng,
            self.device,
            MemoryKind::Parameter,
        )?))
    }

    /// A parameter filled with `value`.
    pub fn constant(&mut self, dims: &[usize], value: f32) -> Result<Param> {
        Ok(Param::new(Tensor::full(
            dims,
            value,
            self.device,
            MemoryKind::Parameter,
        )?))
    }

    /// A buffer filled with `value`.
    pub fn buffer(&mut self, dims: &[usize], value: f32) -> Result<Buffer> {
        Ok(Buffer::new(Tensor::full(
            dims,
            value,
            self.device,
            MemoryKind::Buffer,
        )?))
    }
}
