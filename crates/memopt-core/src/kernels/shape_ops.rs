//! Copies that change layout or role: concatenation along dimension 0 and contiguous copies with
//! a new [`MemoryKind`], for every dtype.

use crate::backend::{Compute, Init, compute};
use crate::cuda::copy_device;
use crate::memory::MemoryKind;
use crate::{CoreError, DType, Element, KernelBuffer, Result, Shape, Tensor, bf16, f16};
use rayon::prelude::*;

/// Elements per parallel task when copying large buffers.
const COPY_CHUNK: usize = 1 << 16;

/// Calls `$f::<T>($args)` with `T` the Rust type of `$dtype`.
macro_rules! by_dtype {
    ($dtype:expr, $f:ident($($arg:expr),*)) => {
        match $dtype {
            DType::F32 => $f::<f32>($($arg),*),
            DType::F16 => $f::<f16>($($arg),*),
            DType::BF16 => $f::<bf16>($($arg),*),
            DType::U8 => $f::<u8>($($arg),*),
            DType::U32 => $f::<u32>($($arg),*),
            DType::I64 => $f::<i64>($($arg),*),
        }
    };
}

fn copy<T: Element>(dst: &mut [T], src: &[T]) {
    if src.len() < COPY_CHUNK {
        dst.copy_from_slice(src);
    } else {
        dst.par_chunks_mut(COPY_CHUNK)
            .zip(src.par_chunks(COPY_CHUNK))
            .for_each(|(d, s)| d.copy_from_slice(s));
    }
}

/// Concatenates `parts` along dimension 0 into a new tensor recorded with `kind`. All parts must
/// have rank >= 1, the same other dimensions, dtype and device; there must be at least one. The
/// result is a spike tensor when every part is.
pub fn cat0(parts: &[Tensor], kind: MemoryKind) -> Result<Tensor> {
    const OP: &str = "cat0";
    let Some(first) = parts.first() else {
        return Err(CoreError::invalid(OP, "needs at least one tensor to concatenate"));
    };
    if first.rank() == 0 {
        return Err(CoreError::shape(OP, "parts of rank >= 1", first.shape()));
    }
    let rest = &first.dims()[1..];
    let mut rows = 0;
    for (i, p) in parts.iter().enumerate() {
        first.expect_same_device(OP, p)?;
        p.expect_dtype(OP, first.dtype())?;
        if p.rank() != first.rank() || &p.dims()[1..] != rest {
            return Err(CoreError::shape(
                OP,
                format!(
                    "part {i} with the other dimensions of part 0 {} (only dimension 0 may differ)",
                    first.shape()
                ),
                p.shape(),
            ));
        }
        rows += p.dims()[0];
    }
    let spike = parts.iter().all(Tensor::is_spike);
    let shape = first.shape().with_dim0(rows);
    Ok(by_dtype!(first.dtype(), cat0_typed(parts, shape, kind))?.with_spike_flag(spike))
}

fn cat0_typed<T: Element>(parts: &[Tensor], shape: Shape, kind: MemoryKind) -> Result<Tensor> {
    const OP: &str = "cat0";
    let device = parts[0].device();
    let mut out = KernelBuffer::<T>::new(OP, device, shape.elem_count(), kind, Init::Overwritten)?;
    let mut at = 0;
    // One part at a time: parts may be views of one storage, whose lock is not re-entered.
    for p in parts {
        let r = p.read::<T>(OP)?;
        let len = p.elem_count();
        compute(device, |backend| match backend {
            Compute::Cpu => {
                let (src, dst) = (r.host()?, out.host_mut()?);
                copy(&mut dst[at..at + src.len()], src);
                Ok(())
            }
            Compute::Cuda(gpu) => {
                let size = T::DTYPE.size_in_bytes();
                let dst = out.cuda_ptr()?.offset(at, size);
                copy_device(gpu, dst, r.cuda_ptr()?, len * size)
            }
        })?;
        at += p.elem_count();
    }
    out.into_tensor(shape)
}

/// A contiguous copy of `x` (of any dtype) in fresh storage recorded with `kind`; keeps the shape,
/// dtype and spike flag.
pub fn copy_as(x: &Tensor, kind: MemoryKind) -> Result<Tensor> {
    Ok(by_dtype!(x.dtype(), copy_typed(x, kind))?.with_known_values(x.known_values()))
}

fn copy_typed<T: Element>(x: &Tensor, kind: MemoryKind) -> Result<Tensor> {
    const OP: &str = "copy_as";
    let r = x.read::<T>(OP)?;
    let mut out = KernelBuffer::<T>::new(OP, x.device(), x.elem_count(), kind, Init::Overwritten)?;
    compute(x.device(), |backend| match backend {
        Compute::Cpu => {
            let (src, dst) = (r.host()?, out.host_mut()?);
            copy(dst, src);
            Ok(())
        }
        Compute::Cuda(gpu) => {
            let bytes = x.elem_count() * T::DTYPE.size_in_bytes();
            copy_device(gpu, out.cuda_ptr()?, r.cuda_ptr()?, bytes)
        }
    })?;
    out.into_tensor(x.shape().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;
    use crate::kernels::testkit::{assert_meta_matches_cpu, cpu, tensor, values};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn cat0_matches_naive(
            rest in prop::collection::vec(1usize..4, 0..3),
            rows in prop::collection::vec(0usize..4, 1..5),
            spikes in prop::collection::vec(any::<bool>(), 5),
        ) {
            let inner: usize = rest.iter().product();
            let mut want = Vec::new();
            let parts: Vec<Tensor> = rows
                .iter()
                .enumerate()
                .map(|(i, &r)| {
                    let v = values(r * inner, i as u64);
                    want.extend_from_slice(&v);
                    let mut dims = vec![r];
                    dims.extend(&rest);
                    cpu(&v, &dims).with_spike_flag(spikes[i])
                })
                .collect();
            let out = cat0(&parts, MemoryKind::SavedForBackward).unwrap();
            let mut dims = vec![rows.iter().sum::<usize>()];
            dims.extend(&rest);
            prop_assert_eq!(out.dims(), &dims[..]);
            prop_assert_eq!(out.kind(), MemoryKind::SavedForBackward);
            prop_assert_eq!(out.is_spike(), spikes[..rows.len()].iter().all(|&s| s));
            prop_assert_eq!(out.to_vec_f32().unwrap(), want);
        }
    }

    fn check_dtype<T: Element>(v: Vec<T>) {
        let n = v.len();
        let a = tensor(v.clone(), &[n / 2, 2], Device::Cpu);
        let c = cat0(&[a.clone(), a.narrow0(1, 1).unwrap()], MemoryKind::Packed).unwrap();
        let mut want = v.clone();
        want.extend_from_slice(&v[2..4]);
        assert_eq!(c.to_vec::<T>().unwrap(), want);
        assert_eq!(c.dtype(), T::DTYPE);
        let view = a.narrow0(1, 2).unwrap().with_spike_flag(true);
        let copied = copy_as(&view, MemoryKind::Offloaded).unwrap();
        assert_eq!(copied.to_vec::<T>().unwrap(), v[2..6].to_vec());
        assert!(copied.is_spike() && !copied.same_storage(&view));
        assert_eq!(
            (copied.kind(), copied.storage_offset(), copied.dims()),
            (MemoryKind::Offloaded, 0, &[2usize, 2][..])
        );
    }

    #[test]
    fn every_dtype_concatenates_and_copies_views() {
        check_dtype::<f32>(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        check_dtype::<f16>([1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].map(f16::from_f32).to_vec());
        check_dtype::<bf16>([1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].map(bf16::from_f32).to_vec());
        check_dtype::<u8>(vec![1, 2, 3, 4, 5, 255]);
        check_dtype::<u32>(vec![1, 2, 3, 4, 5, u32::MAX]);
        check_dtype::<i64>(vec![-1, 2, -3, 4, 5, i64::MIN]);
    }

    #[test]
    fn large_copies_are_exact() {
        let v = values(300_001, 3);
        let a = cpu(&v, &[300_001]);
        assert_eq!(
            copy_as(&a, MemoryKind::Activation).unwrap().to_vec_f32().unwrap(),
            v
        );
        let c = cat0(&[a.clone(), a.clone()], MemoryKind::Activation)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert_eq!((&c[..300_001], &c[300_001..]), (&v[..], &v[..]));
    }

    #[test]
    fn meta_records_the_same_events_as_cpu() {
        assert_meta_matches_cpu(|dev| {
            let a = tensor(values(3 * 40, 1), &[3, 40], dev);
            let b = tensor(vec![1u8; 5 * 40], &[5, 40], dev);
            let c = cat0(&[a.clone(), a.narrow0(1, 2).unwrap()], MemoryKind::Activation).unwrap();
            let d = cat0(&[b.clone(), b.clone()], MemoryKind::Packed).unwrap();
            let e = copy_as(&b.narrow0(1, 3).unwrap(), MemoryKind::Offloaded).unwrap();
            [&c, &d, &e].iter().map(|t| t.dims().to_vec()).collect()
        });
    }

    #[test]
    fn errors_name_the_problem() {
        let e = cat0(&[], MemoryKind::Activation).unwrap_err().to_string();
        assert!(e.contains("cat0") && e.contains("at least one"), "{e}");
        let a = cpu(&[0.0; 6], &[2, 3]);
        let e = cat0(&[a.clone(), cpu(&[0.0; 4], &[2, 2])], MemoryKind::Activation)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("part 1") && e.contains("[2, 3]") && e.contains("got [2, 2]"),
            "{e}"
        );
        let e = cat0(&[a.clone(), cpu(&[0.0; 6], &[6])], MemoryKind::Activation)
            .unwrap_err()
            .to_string();
        assert!(e.contains("part 1"), "{e}");
        let h = a.to_dtype(DType::F16).unwrap();
        let e = cat0(&[a.clone(), h], MemoryKind::Activation)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected dtype f32, got f16"), "{e}");
        let m = tensor(vec![0f32; 6], &[2, 3], Device::META);
        let e = cat0(&[a, m], MemoryKind::Activation).unwrap_err().to_string();
        assert!(e.contains("different devices"), "{e}");
        let s = cpu(&[1.0], &[]);
        assert!(
            cat0(&[s], MemoryKind::Activation)
                .unwrap_err()
                .to_string()
                .contains("rank >= 1")
        );
    }
}
