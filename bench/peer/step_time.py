"""One training step of PyTorch + SpikingJelly 2.0 on the CPU, for the side-by-side comparison
with memopt (`cargo xtask peer`). The models mirror memopt's zoo layer for layer (same module
structure, neurons, surrogates, loss and optimizer), multi-step mode, SpikingJelly's torch
backend, SGD (lr 0.1, momentum 0.9), cross-entropy of the output averaged over time, inputs 0 or 1
(probability 0.3) as memopt's synthetic batch. Prints one JSON object per workload:
{"workload", "step_ms" (the timed steps after one warm-up step), "median_step_ms", "threads",
"torch", "cpu_capability" (the vector path PyTorch's CPU kernels use, e.g. AVX512)}.

usage: step_time.py --threads K --steps S WORKLOAD...   (WORKLOAD = name:N:T, e.g. vgg:2:4)
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from spikingjelly.activation_based import functional, layer, neuron, surrogate
from spikingjelly.activation_based.model import sew_resnet, spike_driven_transformer, spikformer


def cifar10dvs_vgg(classes=10, hw=48):
    """memopt zoo `cifar10dvs-vgg`: 8 blocks of [AvgPool] Conv3x3-BN-LIF(tau 1.333, no input
    decay, detach reset, ATan), AvgPool, Flatten (per sample), Dropout(0.25), Linear."""
    plan = [(2, 64, False), (64, 128, False), (128, 256, True), (256, 256, False),
            (256, 512, True), (512, 512, False), (512, 512, True), (512, 512, False)]
    mods = []
    for cin, cout, pool in plan:
        if pool:
            mods.append(layer.AvgPool2d(2, 2))
        mods += [layer.Conv2d(cin, cout, 3, padding=1, bias=True), layer.BatchNorm2d(cout),
                 neuron.LIFNode(tau=1.333, decay_input=False, detach_reset=True,
                                surrogate_function=surrogate.ATan())]
    mods += [layer.AvgPool2d(2, 2), layer.Flatten(start_dim=1), layer.Dropout(0.25),
             layer.Linear(512 * (hw // 16) ** 2, classes)]
    return nn.Sequential(*mods), (2, hw, hw), classes


def sew_resnet18_32(classes=10):
    """memopt zoo `sew-resnet18` (connect function ADD, LIFNode tau 2) at 3x32x32."""
    net = sew_resnet.sew_resnet18(spiking_neuron=neuron.LIFNode, tau=2.0, cnf="ADD",
                                  num_classes=classes)
    return net, (3, 32, 32), classes


def toy_if(c=512, classes=10):
    """memopt zoo `toy-if`: three blocks of Linear(C,C)-IF-Linear(C,C)-IF, then Linear(C,K)."""
    mods = []
    for _ in range(3):
        mods += [layer.Linear(c, c), neuron.IFNode(), layer.Linear(c, c), neuron.IFNode()]
    mods.append(layer.Linear(c, classes))
    return nn.Sequential(*mods), (c,), classes


def spikformer_cifar10(classes=10):
    """memopt zoo `spikformer-cifar10`: SpikingJelly's spikformer_cifar10 at 3x32x32."""
    return spikformer.spikformer_cifar10(num_classes=classes), (3, 32, 32), classes


def spike_driven_cifar10(classes=10):
    """memopt zoo `spike-driven-transformer`: Spike-driven Transformer-2-512 at 3x32x32 (its
    output is already averaged over time)."""
    net = spike_driven_transformer.SpikeDrivenTransformer(
        T=4, num_classes=classes, embed_dims=512, num_heads=8, depths=2, mlp_ratio=4.0,
        pooling_stat="0011")
    return net, (3, 32, 32), classes


MODELS = {"vgg": cifar10dvs_vgg, "sew-resnet18": sew_resnet18_32, "toy-if": toy_if,
          "spikformer": spikformer_cifar10, "spike-driven": spike_driven_cifar10}


def step_times(name, n, t, steps):
    net, sample, classes = MODELS[name]()
    functional.set_step_mode(net, "m")
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    x = (torch.rand((t, n) + sample, generator=g) < 0.3).float()
    y = torch.randint(0, classes, (n,), generator=g)
    times = []
    for i in range(steps + 1):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = net(x)
        out = out.mean(0) if out.dim() == 3 else out
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        functional.reset_net(net)
        elapsed = (time.perf_counter() - start) * 1e3
        if i > 0:  # the first step warms up (allocations, thread pool)
            times.append(elapsed)
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("workloads", nargs="+")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    for w in a.workloads:
        name, n, t = w.split(":")
        times = step_times(name, int(n), int(t), a.steps)
        print(json.dumps({"workload": w, "step_ms": times,
                          "median_step_ms": statistics.median(times),
                          "threads": torch.get_num_threads(),
                          "torch": torch.__version__,
                          "cpu_capability": torch.backends.cpu.get_cpu_capability()}),
              flush=True)


if __name__ == "__main__":
    main()
