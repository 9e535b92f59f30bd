#!/usr/bin/env python3
"""PyTorch + SpikingJelly 2.0 side of the GPU benchmark: the CIFAR10-DVS VGG of SpikingJelly's
memopt example (8 VGG blocks of [AvgPool] Conv3x3-BN-LIF, dropout, linear), trained on synthetic
spikes (probability 0.3) with SGD momentum and cross-entropy of the mean over T, at memopt levels
0 (nothing), 1 and 4. For each level: peak and reserved CUDA bytes of a step
(torch.cuda.max_memory_allocated / max_memory_reserved after reset) and the median step time.

    python3 spikingjelly_vgg.py [--device cuda|cpu] [--batch 32] [--timesteps 10] [--steps 5]
                                [--levels 0,1,4] [--out FILE.json]

Without torch or spikingjelly it prints why and exits 0 (a benchmark that skips). On the CPU
(--device cpu, small sizes) it checks the script itself; memory figures are then null.
"""
import argparse
import json
import statistics
import sys
import time


def build_vgg(neuron, layer, surrogate, functional, nn, torch):
    class VGGBlock(nn.Module):
        def __init__(self, cin, cout, pool, **kw):
            super().__init__()
            seq = [layer.AvgPool2d(2)] if pool else []
            seq += [layer.Conv2d(cin, cout, 3, 1, 1), layer.BatchNorm2d(cout)]
            self.proj_bn = nn.Sequential(*seq)
            self.neuron = neuron.LIFNode(**kw)

        def forward(self, x):
            return self.neuron(self.proj_bn(x))

    class VGG(nn.Module):
        def __init__(self):
            super().__init__()
            kw = dict(tau=1.333, decay_input=False, detach_reset=True,
                      surrogate_function=surrogate.ATan(), step_mode="m")
            chans = [(2, 64, False), (64, 128, False), (128, 256, True), (256, 256, False),
                     (256, 512, True), (512, 512, False), (512, 512, True), (512, 512, False)]
            self.features = nn.Sequential(*[VGGBlock(a, b, p, **kw) for a, b, p in chans],
                                          layer.AvgPool2d(2))
            self.classifier = nn.Sequential(nn.Dropout(0.25), nn.Linear(512 * 3 * 3, 10))
            functional.set_step_mode(self, "m")

        def forward(self, x):  # x: [N, T, C, H, W]
            functional.reset_net(self)
            x = self.features(x.transpose(0, 1).contiguous())
            return self.classifier(torch.flatten(x, 2))  # [T, N, 10]

    return VGG, VGGBlock


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--timesteps", type=int, default=10)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--levels", default="0,1,4")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.batch < 1 or a.timesteps < 1 or a.steps < 1:
        ap.error("--batch, --timesteps and --steps must be at least 1")
    try:
        levels = [int(v) for v in a.levels.split(",")]
    except ValueError:
        ap.error("--levels is a comma-separated list of memopt levels 0..4")
    if any(l not in range(5) for l in levels):
        ap.error("--levels: memopt levels are 0..4")
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        from spikingjelly.activation_based import functional, layer, memopt, neuron, surrogate
    except ImportError as e:
        print(f"skipping: {e} (install torch and spikingjelly==2.0.0)")
        return 0
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("skipping: torch has no CUDA device (use --device cpu to check the script)")
        return 0
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    VGG, VGGBlock = build_vgg(neuron, layer, surrogate, functional, nn, torch)
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(a.batch, a.timesteps, 2, 48, 48, generator=g) < 0.3).float().to(dev)
    y = torch.randint(0, 10, (a.batch,), generator=g).to(dev)
    results = {"torch": torch.__version__, "device": str(dev),
               "gpu": torch.cuda.get_device_name(dev) if cuda else None,
               "batch": a.batch, "timesteps": a.timesteps, "levels": {}}
    for level in levels:
        torch.manual_seed(0)
        net = VGG().to(dev)
        entry = {}
        try:
            if level > 0:
                memopt.optimize_memory(
                    net, VGGBlock, lambda m: m(x), level=level,
                    split_fn=lambda m: (m.proj_bn, m.neuron),
                    can_chunk=lambda m: isinstance(m, neuron.BaseNode))
            opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)

            def step():
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(net(x).mean(0), y)
                loss.backward()
                opt.step()
                return loss.item()

            step()  # warm-up
            if cuda:
                torch.cuda.synchronize(dev)
                torch.cuda.reset_peak_memory_stats(dev)
            times = []
            for _ in range(a.steps):
                t = time.perf_counter()
                loss = step()
                if cuda:
                    torch.cuda.synchronize(dev)
                times.append((time.perf_counter() - t) * 1e3)
            entry = {"median_step_ms": statistics.median(times), "step_ms": times, "loss": loss,
                     "peak_bytes": torch.cuda.max_memory_allocated(dev) if cuda else None,
                     "reserved_bytes": torch.cuda.max_memory_reserved(dev) if cuda else None}
        except Exception as e:  # a level that fails is reported, the others still run
            entry = {"error": f"{type(e).__name__}: {e}"}
        results["levels"][str(level)] = entry
        print(f"level {level}: {entry}", flush=True)
        del net
        if cuda:
            torch.cuda.empty_cache()
    text = json.dumps(results, indent=2)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)
    return 1 if any("error" in e for e in results["levels"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
