//! Bad input gets an error that names the problem, never a panic: CUDA requests without a
//! driver or device, kernels on devices that cannot run them, and random garbage shapes.

use memopt_core::kernels::{self, Conv2dParams, GradNeeds, NeuronConfig, Pool2dParams};
use memopt_core::{CoreError, DType, Device, MemoryKind, Tensor, cuda_device_count};
use proptest::prelude::*;

#[test]
fn cuda_requests_fail_clearly_without_a_gpu() {
    match cuda_device_count() {
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("CUDA is unavailable"), "{msg}");
            let t = Tensor::zeros([4], DType::F32, Device::Cuda(0), MemoryKind::Input).unwrap_err();
            assert!(matches!(t, CoreError::CudaUnavailable { .. }), "{t}");
            println!("no CUDA here ({msg}); checked the error path");
        }
        Ok(n) => {
            let e = Tensor::zeros([4], DType::F32, Device::Cuda(n + 3), MemoryKind::Input).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("CUDA device {} does not exist", n + 3)),
                "{msg}"
            );
        }
    }
}

/// The CUDA backend answers `Unsupported` naming the op for every op not ported yet.
#[test]
fn ops_without_a_cuda_kernel_answer_unsupported_on_a_gpu() {
    if !memopt_core::cuda::gpu_or_skip("ops_without_a_cuda_kernel_answer_unsupported_on_a_gpu") {
        return;
    }
    let x = Tensor::zeros([4], DType::F32, Device::Cuda(0), MemoryKind::Input).unwrap();
    let e = kernels::relu(&x).unwrap_err();
    assert!(matches!(e, CoreError::Unsupported { op: "relu", .. }), "{e}");
    assert!(e.to_string().contains("cuda:0"), "{e}");
}

/// The seam's dispatch on every device, without a GPU: the CPU half runs on the CPU, nothing
/// runs on Meta (of either target), and CUDA answers `Unsupported` naming the op.
#[test]
fn launch_dispatches_by_device() {
    use memopt_core::Target;
    use memopt_core::backend::launch;
    for (device, runs) in [
        (Device::Cpu, true),
        (Device::META, false),
        (Device::Meta(Target::Cuda), false),
    ] {
        let mut ran = false;
        launch("probe", device, || {
            ran = true;
            Ok(())
        })
        .unwrap();
        assert_eq!(ran, runs, "{device}");
    }
    let mut ran = false;
    let e = launch("probe", Device::Cuda(1), || {
        ran = true;
        Ok(())
    })
    .unwrap_err();
    assert!(!ran);
    assert!(
        matches!(
            e,
            CoreError::Unsupported {
                op: "probe",
                device: Device::Cuda(1),
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn meta_tensors_have_no_data_to_read() {
    let t = Tensor::zeros([2], DType::F32, Device::META, MemoryKind::Input).unwrap();
    let e = t.to_vec_f32().unwrap_err().to_string();
    assert!(e.contains("no data") && e.contains("meta"), "{e}");
    assert!(t.to_device(Device::Cpu).is_err());
}

#[test]
fn mismatched_devices_are_named() {
    let a = Tensor::zeros([2], DType::F32, Device::Cpu, MemoryKind::Input).unwrap();
    let b = Tensor::zeros([2], DType::F32, Device::META, MemoryKind::Input).unwrap();
    let e = kernels::add(&a, &b).unwrap_err().to_string();
    assert!(e.contains("cpu") && e.contains("meta"), "{e}");
}

fn any_tensor(dims: Vec<usize>, dtype_pick: u8) -> Tensor {
    let dtype = [DType::F32, DType::F32, DType::F32, DType::F16, DType::I64][dtype_pick as usize % 5];
    Tensor::zeros(dims, dtype, Device::Cpu, MemoryKind::Input).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Random (mostly wrong) shapes, dtypes and parameters: every kernel returns Ok or a
    /// CoreError; none panics.
    #[test]
    fn kernels_never_panic_on_garbage(
        a in proptest::collection::vec(0usize..5, 0..6),
        b in proptest::collection::vec(0usize..5, 0..6),
        c in proptest::collection::vec(0usize..5, 0..6),
        da in 0u8..5, db in 0u8..5,
        s in 0usize..4, p in 0usize..3, k in 0usize..4, g in 0usize..3, steps in 0usize..4,
    ) {
        let (x, w, y) = (any_tensor(a, da), any_tensor(b, db), any_tensor(c, 0));
        let conv = Conv2dParams { stride: [s, s], padding: [p, p], dilation: [1, k.max(1)], groups: g };
        let pool = Pool2dParams { kernel: [k, k], stride: [s, s], padding: [p, p] };
        let _ = kernels::conv2d(&x, &w, None, &conv, 1);
        let _ = kernels::conv2d(&x, &w, Some(&y), &conv, steps);
        let _ = kernels::conv2d_backward(kernels::Conv2dBackward { grad: &y, x: &x, w: &w, has_bias: true, params: &conv, needs: GradNeeds::ALL, acc: None });
        let _ = kernels::linear(&x, &w, Some(&y), 1);
        let _ = kernels::linear(&x, &w, None, steps);
        let _ = kernels::linear_backward(kernels::LinearBackward { grad: &y, x: &x, w: &w, has_bias: true, needs: GradNeeds::ALL, acc: None });
        let _ = kernels::matmul(&x, &w);
        let _ = kernels::max_pool2d(&x, &pool);
        let _ = kernels::avg_pool2d(&x, &pool, true);
        let _ = kernels::adaptive_avg_pool2d(&x, [k, s]);
        let _ = kernels::batch_norm_train(kernels::BatchNormTrain { x: &x, weight: Some(&w), bias: None, running: None, momentum: 0.1, eps: 1e-5 });
        let _ = kernels::neuron_forward(&NeuronConfig::lif(2.0), &x, Some(&w), None, true);
        let _ = kernels::neuron_backward(kernels::NeuronBackward { cfg: &NeuronConfig::lif(2.0), grad_spikes: (&x).into(), grad_v_final: None, h_seq: &y, v_init: None, w: None, want_v_init_grad: true, w_acc: None });
        let _ = kernels::cross_entropy(&x, &w);
        let _ = kernels::mse(&x, &w);
        let _ = kernels::mean_dim(&x, k);
        let _ = kernels::broadcast_dim(&x, k, s, 1.0);
        let _ = kernels::cat0(&[x.clone(), w.clone()], MemoryKind::Activation);
        let _ = kernels::add(&x, &w);
        let _ = x.reshape(w.dims().to_vec());
        let _ = x.narrow0(s, k);
    }
}

#[test]
fn shapes_too_large_to_address_are_errors_not_overflows() {
    let huge = [usize::MAX / 2, 3];
    for device in [Device::Cpu, Device::META] {
        let e = Tensor::zeros(huge, DType::F32, device, MemoryKind::Input).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("Tensor::zeros") && msg.contains("more elements than fit"),
            "{msg}"
        );
        let e = Tensor::full(huge, 1.0, device, MemoryKind::Input).unwrap_err();
        assert!(e.to_string().contains("Tensor::full"), "{e}");
        // The element count fits in usize but the bytes do not.
        let e = Tensor::zeros([usize::MAX / 2], DType::F32, device, MemoryKind::Input).unwrap_err();
        assert!(e.to_string().contains("exceed the address space"), "{e}");
    }
    let e = Tensor::from_vec(vec![0f32; 6], huge, Device::Cpu, MemoryKind::Input).unwrap_err();
    assert!(e.to_string().contains("more elements than fit"), "{e}");
    let x = Tensor::zeros([6], DType::F32, Device::META, MemoryKind::Input).unwrap();
    assert!(x.reshape(huge).is_err());
}

#[test]
fn a_host_allocation_the_machine_cannot_provide_is_an_error() {
    // 2^62 bytes: addressable in principle, far beyond any machine's memory and address space.
    let len = 1usize << 60;
    let e = Tensor::zeros([len], DType::F32, Device::Cpu, MemoryKind::Input).unwrap_err();
    assert!(
        matches!(e, CoreError::OutOfMemory { device: Device::Cpu, bytes } if bytes == 1 << 62),
        "{e}"
    );
    assert!(e.to_string().contains("smaller batch"), "{e}");
    let e = Tensor::full([len], 1.0, Device::Cpu, MemoryKind::Input).unwrap_err();
    assert!(matches!(e, CoreError::OutOfMemory { .. }), "{e}");
    // On Meta the same tensor is only counted.
    let meta = Tensor::zeros([len], DType::F32, Device::META, MemoryKind::Input).unwrap();
    assert_eq!(meta.view_bytes(), 1 << 62);
}
