#!/usr/bin/env python3
"""PyTorch + SpikingJelly 2.0 against memopt on a frames dataset: the same logits, the same loop.

The model is SpikingJelly's CIFAR10-DVS VGG (CIFAR10DVSVGG of its memopt example), its last
linear layer refitted to the input size and the number of classes.

check: SpikingJelly loads the weights `memopt train --save` wrote (strict=True: the same
state_dict names and shapes), runs them in eval mode (BatchNorm running statistics, dropout off,
float32, no TF32) on the samples of `memopt eval --logits`, and compares its time-averaged
outputs with memopt's: max |sj - memopt| / max(max |memopt|, 1e-6) <= --tolerance, per sample.
A sample beyond the tolerance is a spike flip when some membrane of SpikingJelly's run came
within --flip-margin of the threshold (float rounding decided a spike, and the logits follow);
the check passes when no sample is beyond the tolerance without that explanation and at most
ceil(--max-flipped * samples) are spike flips (--max-flipped 0: the strict rule). The JSON has
both: relative_diff / strict_passed over every sample, and each sample beyond the tolerance.

    python3 spikingjelly_data.py check --frames DIR --weights W.safetensors --logits L.npz
        --classes K [--device cuda] [--batch 16] [--tolerance 1e-4] [--max-flipped 0.05]
        [--flip-margin 1e-4] [--input CxHxW] [--out F.json]

time: the training loop of `memopt train --data` in PyTorch + SpikingJelly: the same split (per
class, in listing order, the first ceil(count * R) samples train, as SpikingJelly's
split_to_train_test_set(random_split=False)), a DataLoader (shuffle, the last batch kept,
pinned memory on cuda), SGD with momentum, cross-entropy of the mean over T, reset_net after each
step, cudnn deterministic, the learning rate per epoch by --schedule (cosine: memopt's default).
Per epoch: wall seconds of the training loop, seconds waiting for the loader's next batch
(iter() starting the workers included), samples/s, loss and accuracy, then an untimed pass on
the test part (--no-test skips it); the first epoch is the warm-up, the rest are summarised.

    python3 spikingjelly_data.py time --frames DIR --classes K --timesteps T --batch N
        --train-ratio R --epochs E --lr LR --momentum M [--device cuda] [--workers 2]
        [--schedule cosine|constant] [--seed 0] [--no-test] [--input CxHxW] [--out F.json]

DIR is a frames dataset as memopt reads it: DIR/<class>/<name>.npz holding `frames`
[T, C, H, W]; class folders sorted by name (label = position), files sorted within each class,
sample indices counted class by class over that listing. The model's input is the frames' size
unless --input gives another (frames are then resized as memopt's --resize and SpikingJelly's
example do: bilinear, antialiased).

memopt resizes frames to its model's input (cifar10dvs-vgg: 2x48x48 unless --input says
otherwise), so give this script the same --input whenever the frames have another size (events
integrated at 128x128, say); `check` names the likely size when the classifier's shape differs.

Exit status: 0 when it ran and the check passed, 1 when a check failed (or the run broke, e.g.
CUDA out of memory), 2 on bad usage, bad input files or missing torch / spikingjelly; errors are
one line on stderr. `--device cpu` runs it all on
the CPU (to check the script itself).
"""
import argparse
import json
import math
import os
import struct
import sys
import time
import types
from pathlib import Path


class Usage(Exception):
    """Bad usage or bad input: exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (exit status 2)."""

    def error(self, message):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def parse_args(argv):
    ap = Parser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--frames", required=True, help="frames dataset DIR/<class>/<name>.npz")
        p.add_argument("--classes", type=int, required=True, help="outputs of the model, K")
        p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
        p.add_argument("--input", help="CxHxW the model takes (default: the frames' size)")
        p.add_argument("--out", help="write the figures as JSON to this file")

    c = sub.add_parser("check", help="SpikingJelly on memopt's weights gives memopt's logits")
    common(c)
    c.add_argument("--weights", required=True, help="safetensors from `memopt train --save`")
    c.add_argument("--logits", required=True, help="npz from `memopt eval --logits`")
    c.add_argument("--tolerance", type=float, default=1e-4)
    c.add_argument("--batch", type=int, default=16, help="samples per forward pass")
    c.add_argument("--max-flipped", type=float, default=0.05,
                   help="fraction of samples (rounded up) that may exceed the tolerance when a "
                        "spike flip explains it; 0: every sample within the tolerance")
    c.add_argument("--flip-margin", type=float, default=1e-4,
                   help="a sample beyond the tolerance is a spike flip when a membrane of "
                        "SpikingJelly's run came this close to threshold")

    t = sub.add_parser("time", help="the training loop in PyTorch + SpikingJelly, timed")
    common(t)
    t.add_argument("--timesteps", type=int, required=True)
    t.add_argument("--batch", type=int, required=True)
    t.add_argument("--train-ratio", type=float, required=True)
    t.add_argument("--epochs", type=int, required=True)
    t.add_argument("--lr", type=float, required=True)
    t.add_argument("--momentum", type=float, required=True)
    t.add_argument("--workers", type=int, default=2)
    t.add_argument("--schedule", choices=["cosine", "constant"], default="cosine",
                   help="learning rate per epoch: memopt train's default is cosine "
                        "(CosineAnnealingLR, T_max = --epochs)")
    t.add_argument("--seed", type=int, default=0, help="torch.manual_seed: weights, shuffling")
    t.add_argument("--no-test", action="store_true", help="skip the (untimed) test pass per epoch")
    a = ap.parse_args(argv)
    if a.classes < 1:
        ap.error("--classes must be at least 1")
    if a.batch < 1:
        ap.error("--batch must be at least 1")
    if a.cmd == "check" and not (a.tolerance >= 0 and 0 <= a.max_flipped <= 1 and a.flip_margin >= 0):
        ap.error("--tolerance and --flip-margin must be >= 0, --max-flipped in [0, 1]")
    if a.cmd == "time":
        if a.timesteps < 1 or a.epochs < 1 or a.workers < 0:
            ap.error("--timesteps and --epochs must be at least 1, --workers at least 0")
        if not 0.0 <= a.train_ratio <= 1.0:
            ap.error("--train-ratio must be in [0, 1]")
        if not (a.lr > 0 and a.momentum >= 0):
            ap.error("--lr must be > 0 and --momentum >= 0")
    if a.input is not None:
        try:
            a.input = tuple(int(v) for v in a.input.lower().split("x"))
        except ValueError:
            a.input = ()
        if len(a.input) != 3 or min(a.input) < 1:
            ap.error("--input is CxHxW, e.g. 2x48x48")
    return a


# --- dependencies ---------------------------------------------------------------------------


def import_deps():
    """torch, numpy, SpikingJelly and CIFAR10DVSVGG, as tools/fixtures/weights.py imports them."""
    try:
        import numpy as np
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        raise Usage(f"needs numpy and torch: {e}")
    try:
        import torchaudio  # noqa: F401
    except Exception:  # noqa: BLE001  (SpikingJelly imports it; a stand-in is enough)
        sys.modules["torchaudio"] = types.ModuleType("torchaudio")
    try:
        import spikingjelly
        from spikingjelly.activation_based import functional, layer, neuron
        sys.path.insert(0, str(Path(spikingjelly.__file__).parent / "activation_based/examples/memopt"))
        from models import CIFAR10DVSVGG
    except ImportError as e:
        raise Usage(f"needs spikingjelly==2.0.0 (with its examples/memopt/models.py): {e}")
    return types.SimpleNamespace(np=np, torch=torch, nn=nn, F=F, functional=functional, layer=layer,
                                 neuron=neuron, spikingjelly=spikingjelly, CIFAR10DVSVGG=CIFAR10DVSVGG)


def versions(d, dev):
    return {"device": str(dev), "torch": d.torch.__version__,
            "spikingjelly": getattr(d.spikingjelly, "__version__", None) or pkg_version("spikingjelly"),
            "gpu": d.torch.cuda.get_device_name(dev) if dev.type == "cuda" else None}


def pkg_version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001
        return None


def setup_device(d, name):
    torch = d.torch
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError) as e:
        raise Usage(f"--device {name}: {e}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise Usage(f"--device {name}: torch has no CUDA device (use --device cpu to check the script)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise Usage(f"--device {name}: only {torch.cuda.device_count()} CUDA devices")
        torch.cuda.set_device(dev)
    elif dev.type != "cpu":
        raise Usage(f"--device {name}: use cuda, cuda:N or cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    return dev


def sync(d, dev):
    if dev.type == "cuda":
        d.torch.cuda.synchronize(dev)


# --- the dataset as memopt lists it ---------------------------------------------------------


def list_frames(root):
    """[(path, label)] and class names: class folders sorted by name (bytes, as memopt's sorted
    paths), label = position; within a class, its .npz files sorted by name."""
    if not os.path.isdir(root):
        raise Usage(f"--frames {root}: not a folder")
    names = sorted(os.listdir(root), key=os.fsencode)
    classes, samples = [], []
    for c in names:
        cdir = os.path.join(root, c)
        if not os.path.isdir(cdir):
            continue
        label = len(classes)
        classes.append(c)
        for f in sorted(os.listdir(cdir), key=os.fsencode):
            p = os.path.join(cdir, f)
            if os.path.splitext(f)[1] == ".npz" and os.path.isfile(p):
                samples.append((p, label))
    if not samples:
        raise Usage(f"--frames {root}: no samples (expected class subfolders holding .npz files, "
                    f"{len(classes)} class folders found)")
    return samples, classes


def split_train_test(labels, classes, ratio):
    """SpikingJelly's split_to_train_test_set(ratio, dataset, classes, random_split=False): per
    class, the first ceil(count * ratio) indices train, the rest test; class by class."""
    per_class = [[] for _ in range(classes)]
    for i, l in enumerate(labels):
        per_class[l].append(i)
    train, test = [], []
    for idx in per_class:
        pos = min(math.ceil(len(idx) * ratio), len(idx))
        train += idx[:pos]
        test += idx[pos:]
    return train, test


def read_frames(path):
    """The array `frames` of an .npz as float32 [T, C, H, W] (numpy imported here: DataLoader
    workers call it)."""
    import numpy as np
    try:
        with np.load(path) as z:
            if "frames" not in z.files:
                raise Usage(f"{path}: no array `frames` (has {', '.join(z.files) or 'none'})")
            a = np.asarray(z["frames"], dtype=np.float32)
    except Usage:
        raise
    except Exception as e:  # noqa: BLE001
        raise Usage(f"{path}: cannot read frames: {e}")
    if a.ndim != 4 or 0 in a.shape:
        raise Usage(f"{path}: frames must be [T, C, H, W] with no dimension 0, got {list(a.shape)}")
    return a


def sample_tensor(path, t, c, size):
    """Frames of `path` as a float32 tensor [T, C, H, W], resized to size = (H, W) when they
    differ (torchvision's Resize on a tensor: bilinear, antialiased)."""
    import torch
    import torch.nn.functional as F
    a = read_frames(path)
    if a.shape[0] != t or a.shape[1] != c:
        raise Usage(f"{path}: frames {list(a.shape)}, but the first sample's are [T={t}, C={c}, ...]")
    x = torch.from_numpy(a)
    if tuple(x.shape[-2:]) != tuple(size):
        x = F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=False, antialias=True)
    return x.contiguous()


class FramesDataset:
    """A map-style dataset (torch.utils.data.Dataset's protocol) of the samples `idx` of the
    listing: (frames [T, C, H, W], label). Plain data only, so that workers can be spawned."""

    def __init__(self, samples, idx, t, c, size):
        self.samples, self.idx, self.t, self.c, self.size = samples, list(idx), t, c, size

    def __len__(self):
        return len(self.idx)

    def __getitem__(self, k):
        path, label = self.samples[self.idx[k]]
        return sample_tensor(path, self.t, self.c, self.size), label


def input_shape(d, samples, a):
    """[T, C, H, W] the model takes: the first sample's frames, or T of them with --input."""
    t, c, h, w = read_frames(samples[0][0]).shape
    if a.input is not None:
        if a.input[0] != c:
            raise Usage(f"--input {'x'.join(map(str, a.input))}: the frames have {c} channels")
        c, h, w = a.input
    return t, c, h, w


# --- the model ------------------------------------------------------------------------------


def build_model(d, c, h, w, classes):
    """CIFAR10DVSVGG with its first convolution taking C channels (2 as published) and its last
    linear layer refitted: in_features from a dummy forward of the features, out = classes."""
    torch, nn = d.torch, d.nn
    net = d.CIFAR10DVSVGG()
    if c != 2:
        conv = d.layer.Conv2d(c, 64, 3, 1, 1, step_mode="m")
        nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
        net.features[0].proj_bn[0] = conv
    with torch.no_grad():
        d.functional.reset_net(net)
        try:
            feat = torch.flatten(net.features(torch.zeros(1, 1, c, h, w)), 2).shape[-1]
        except RuntimeError as e:
            raise Usage(f"input {c}x{h}x{w} is too small for CIFAR10DVSVGG (4 pools of 2): {e}")
        d.functional.reset_net(net)
    if feat < 1:
        raise Usage(f"input {c}x{h}x{w} is too small for CIFAR10DVSVGG (4 pools of 2)")
    net.classifier[-1] = nn.Linear(feat, classes)
    d.functional.set_step_mode(net, "m")
    return net, feat


def load_safetensors(d, path):
    np, torch = d.np, d.torch
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise Usage(f"--weights {path}: {e.strerror or e}")
    try:
        (n,) = struct.unpack("<Q", raw[:8])
        if n > len(raw) - 8:
            raise ValueError(f"header of {n} bytes in a file of {len(raw)}")
        header = json.loads(raw[8 : 8 + n])
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except Exception as e:  # noqa: BLE001
        raise Usage(f"--weights {path}: not a safetensors file ({e or type(e).__name__})")
    meta = header.pop("__metadata__", None) or {}
    dtypes = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
              "I32": np.int32, "U8": np.uint8, "BOOL": np.bool_}
    out = {}
    for name, info in header.items():
        if info["dtype"] not in dtypes:
            raise Usage(f"--weights {path}: tensor {name} has dtype {info['dtype']} (not read here)")
        a, b = info["data_offsets"]
        arr = np.frombuffer(raw[8 + n + a : 8 + n + b], dtype=dtypes[info["dtype"]])
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out, meta


# --- check ----------------------------------------------------------------------------------


def cmd_check(a, d):
    np, torch = d.np, d.torch
    dev = setup_device(d, a.device)
    samples, classes = list_frames(a.frames)
    if len(classes) > a.classes:
        raise Usage(f"--classes {a.classes}: {a.frames} has {len(classes)} class folders")
    try:
        with np.load(a.logits) as z:
            missing = [k for k in ("logits", "labels", "indices") if k not in z.files]
            if missing:
                raise Usage(f"--logits {a.logits}: no array {', '.join(missing)} (has {', '.join(z.files)})")
            mo, labels, indices = (np.asarray(z[k]) for k in ("logits", "labels", "indices"))
    except Usage:
        raise
    except Exception as e:  # noqa: BLE001
        raise Usage(f"--logits {a.logits}: cannot read: {e}")
    mo = mo.astype(np.float32)
    if mo.ndim != 2 or mo.shape[1] != a.classes or labels.shape != (mo.shape[0],) \
            or indices.shape != (mo.shape[0],):
        raise Usage(f"--logits {a.logits}: logits {list(mo.shape)}, labels {list(labels.shape)}, "
                    f"indices {list(indices.shape)}; expected [S, {a.classes}], [S], [S]")
    if mo.shape[0] == 0:
        raise Usage(f"--logits {a.logits}: no samples")
    if indices.min() < 0 or indices.max() >= len(samples):
        raise Usage(f"--logits {a.logits}: sample index {int(indices.max())} is outside the "
                    f"{len(samples)} samples of {a.frames} (a different dataset?)")
    t, c, h, w = input_shape(d, samples, a)
    net, feat = build_model(d, c, h, w, a.classes)
    weights, meta = load_safetensors(d, a.weights)
    expected = {k: list(v.shape) for k, v in net.state_dict().items()}
    got = {k: list(v.shape) for k, v in weights.items()}
    names = {"missing": sorted(set(expected) - set(got)), "unexpected": sorted(set(got) - set(expected)),
             "shape_mismatch": {k: {"weights": got[k], "model": expected[k]}
                                for k in sorted(set(got) & set(expected)) if got[k] != expected[k]}}
    res = {"command": "check", **versions(d, dev), "frames": a.frames, "weights": a.weights,
           "weights_metadata": meta, "logits": a.logits, "classes": a.classes,
           "input": [t, c, h, w], "classifier_in_features": feat,
           "state_dict_tensors": len(expected), "weights_tensors": len(got),
           "names_equal": not names["missing"] and not names["unexpected"],
           "shapes_equal": not names["shape_mismatch"], "name_differences": names,
           "samples": int(mo.shape[0]), "tolerance": a.tolerance}
    try:
        net.load_state_dict(weights, strict=True)
        res["strict_load"] = True
    except RuntimeError as e:
        res.update(strict_load=False, load_error=str(e).splitlines()[0], passed=False)
        first = [f"missing {k}" for k in names["missing"][:1]] + \
            [f"unexpected {k}" for k in names["unexpected"][:1]] + \
            [f"{k}: weights {v['weights']}, model {v['model']}" for k, v in list(names["shape_mismatch"].items())[:1]]
        hint = ""
        cls = names["shape_mismatch"].get(f"classifier.{len(net.classifier) - 1}.weight")
        if cls and a.input is None and cls["weights"][1] % 512 == 0:
            side = math.isqrt(cls["weights"][1] // 512)
            if side * side * 512 == cls["weights"][1]:
                hint = (f"; the weights' classifier takes {cls['weights'][1]} features: was memopt's "
                        f"input --input {c}x{16 * side}x{16 * side} (frames resized)? Give it here too")
        return res, (f"check FAILED: load_state_dict(strict=True) refused {a.weights}: "
                     f"{len(names['missing'])} missing, {len(names['unexpected'])} unexpected, "
                     f"{len(names['shape_mismatch'])} shape mismatches (e.g. {'; '.join(first)}){hint}")
    net = net.to(dev).float().eval()
    listed = np.array([samples[i][1] for i in indices], dtype=np.int64)
    res["labels_match_listing"] = bool(np.array_equal(listed, labels.astype(np.int64)))
    margins = []  # per batch and LIF layer: [N], the membrane's closest approach to threshold
    hooks = [m.register_forward_hook(margin_hook(torch, margins))
             for m in net.modules() if isinstance(m, d.neuron.BaseNode)]
    outs, closest = [], []
    with torch.no_grad():
        for s in range(0, len(indices), a.batch):
            xs = [sample_tensor(samples[int(i)][0], t, c, (h, w)) for i in indices[s : s + a.batch]]
            x = torch.stack(xs).to(dev)  # [N, T, C, H, W]
            margins.clear()
            y = net(x)  # [T, N, K]: CIFAR10DVSVGG does not average over time
            outs.append(y.mean(0).float().cpu().numpy())
            closest.append(torch.stack(margins).amin(0).cpu().numpy())
            d.functional.reset_net(net)
    for hk in hooks:
        hk.remove()
    sj, closest = np.concatenate(outs), np.concatenate(closest)
    diff = np.abs(sj.astype(np.float64) - mo.astype(np.float64))
    scale = max(float(np.abs(mo).max()), 1e-6)
    per_sample = diff.max(1) / scale
    rel = float(per_sample.max())
    beyond = np.flatnonzero(per_sample > a.tolerance)
    flips = [int(k) for k in beyond if closest[k] < a.flip_margin]
    unexplained = [int(k) for k in beyond if closest[k] >= a.flip_margin]
    allowed = math.ceil(a.max_flipped * len(indices))
    inside = np.setdiff1d(np.arange(len(indices)), beyond)
    agree = sj.argmax(1) == mo.argmax(1)
    constant = bool((mo.max(0) - mo.min(0)).max() == 0) if mo.shape[0] > 1 else False
    res.update(
        max_abs_diff=float(diff.max()), max_abs_memopt=float(np.abs(mo).max()), relative_diff=rel,
        strict_passed=rel <= a.tolerance, worst_sample_index=int(indices[int(per_sample.argmax())]),
        relative_diff_within_tolerance_samples=float(per_sample[inside].max()) if len(inside) else None,
        samples_beyond_tolerance=int(len(beyond)), spike_flip_samples_allowed=allowed,
        flip_margin=a.flip_margin, max_flipped=a.max_flipped,
        beyond_tolerance=[{"index": int(indices[k]), "relative_diff": float(per_sample[k]),
                           "closest_membrane_to_threshold": float(closest[k]),
                           "possible_spike_flip": k in flips} for k in beyond],
        median_closest_membrane_to_threshold=float(np.median(closest)),
        argmax_agreement=float(agree.mean()), argmax_disagreements=int((~agree).sum()),
        accuracy_memopt=float((mo.argmax(1) == labels).mean()),
        accuracy_spikingjelly=float((sj.argmax(1) == labels).mean()), logits_constant=constant)
    res["passed"] = bool(res["labels_match_listing"] and not unexplained and len(flips) <= allowed)
    line = (f"{res['samples']} samples, input {t}x{c}x{h}x{w}, {len(expected)} tensors loaded strictly: "
            f"max |sj - memopt| {res['max_abs_diff']:.3g}, relative {rel:.3g} (tolerance {a.tolerance:g})")
    if len(beyond):
        line += (f"; {len(beyond)} samples beyond tolerance ({len(flips)} possible spike flips with a "
                 f"membrane within {a.flip_margin:g} of threshold, {allowed} allowed; "
                 f"{len(unexplained)} unexplained); the other {len(inside)} within "
                 + (f"{res['relative_diff_within_tolerance_samples']:.3g}" if len(inside) else "-"))
    line += (f"; argmax agreement {100 * res['argmax_agreement']:.1f}%, accuracy memopt "
             f"{100 * res['accuracy_memopt']:.1f}% / spikingjelly {100 * res['accuracy_spikingjelly']:.1f}%")
    if constant:
        print("warning: memopt's logits are the same for every sample (the network is silent in "
              "eval mode?): the comparison checks little more than the classifier's bias", file=sys.stderr)
    if not res["labels_match_listing"]:
        return res, f"check FAILED: the labels in {a.logits} are not those of {a.frames}'s listing; {line}"
    return res, ("check passed: " if res["passed"] else "check FAILED: ") + line


def margin_hook(torch, store):
    """A forward hook on a multi-step LIF node: appends, per sample, min |H - v_threshold| over
    its neurons and time steps (H: the membrane after charging, before firing), replaying
    SpikingJelly's LIF charge (decay_input or not) and reset (hard or soft). A sample whose
    logits differ only because a neuron this close to threshold fired on one side and not on
    the other differs by float rounding, not by a different computation."""

    def hook(m, inputs, _out):
        x = inputs[0].float()
        n = x.shape[1]
        vr = 0.0 if m.v_reset is None else float(m.v_reset)
        th, tau = float(m.v_threshold), float(m.tau)
        v = torch.full_like(x[0], vr)
        best = torch.full((n,), float("inf"), device=x.device)
        for xt in x:
            hv = v + (xt - (v - vr)) / tau if m.decay_input else v - (v - vr) / tau + xt
            best = torch.minimum(best, (hv - th).abs().reshape(n, -1).amin(1))
            spike = (hv >= th).to(hv.dtype)
            v = hv - spike * th if m.v_reset is None else hv * (1 - spike) + vr * spike
        store.append(best)

    return hook


# --- time -----------------------------------------------------------------------------------


def cmd_time(a, d):
    np, torch, F = d.np, d.torch, d.F
    dev = setup_device(d, a.device)
    cuda = dev.type == "cuda"
    samples, classes = list_frames(a.frames)
    if len(classes) > a.classes:
        raise Usage(f"--classes {a.classes}: {a.frames} has {len(classes)} class folders")
    t, c, h, w = input_shape(d, samples, a)
    if t != a.timesteps:
        raise Usage(f"{samples[0][0]} gives frames of T={t}, not --timesteps {a.timesteps}")
    train, test = split_train_test([l for _, l in samples], len(classes), a.train_ratio)
    if not train:
        raise Usage(f"--train-ratio {a.train_ratio}: no training samples")
    def loader(idx, shuffle):
        return torch.utils.data.DataLoader(
            FramesDataset(samples, idx, t, c, (h, w)), batch_size=a.batch, shuffle=shuffle,
            drop_last=False, num_workers=a.workers, pin_memory=cuda)

    torch.manual_seed(a.seed)
    net, feat = build_model(d, c, h, w, a.classes)
    net = net.to(dev).float()
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum)
    train_loader = loader(train, True)
    test_loader = loader(test, False) if test and not a.no_test else None
    res = {"command": "time", **versions(d, dev), "frames": a.frames, "classes": a.classes,
           "input": [t, c, h, w], "classifier_in_features": feat, "batch": a.batch,
           "train_samples": len(train), "test_samples": len(test), "train_ratio": a.train_ratio,
           "lr": a.lr, "momentum": a.momentum, "schedule": a.schedule, "workers": a.workers,
           "pin_memory": cuda, "seed": a.seed, "epochs": []}
    print(f"{len(train)} train / {len(test)} test samples, input {t}x{c}x{h}x{w}, batch {a.batch}, "
          f"{a.workers} workers, {dev}", flush=True)
    for epoch in range(a.epochs):
        lr = a.lr if a.schedule == "constant" else a.lr * (1 + math.cos(math.pi * epoch / a.epochs)) / 2
        for g in opt.param_groups:
            g["lr"] = lr
        net.train()
        loss_sum = torch.zeros((), device=dev)
        correct = torch.zeros((), dtype=torch.int64, device=dev)
        steps = wait = 0
        sync(d, dev)
        t0 = time.perf_counter()
        it = iter(train_loader)  # starts the workers: counted as waiting for data
        wait += time.perf_counter() - t0
        while True:
            tw = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            wait += time.perf_counter() - tw
            x = x.to(dev, non_blocking=True)
            y = y.to(dev, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            rate = net(x).mean(0)  # [T, N, K] -> [N, K], as memopt
            loss = F.cross_entropy(rate, y)
            loss.backward()
            opt.step()
            d.functional.reset_net(net)
            loss_sum += loss.detach() * y.shape[0]
            correct += (rate.detach().argmax(1) == y).sum()
            steps += 1
        sync(d, dev)
        wall = time.perf_counter() - t0
        e = {"epoch": epoch + 1, "lr": lr, "steps": steps, "samples": len(train), "wall_s": wall,
             "data_wait_s": wait, "data_wait_fraction": wait / wall if wall > 0 else None,
             "samples_per_s": len(train) / wall if wall > 0 else None,
             "train_loss": float(loss_sum) / len(train), "train_accuracy": float(correct) / len(train)}
        if test_loader is not None:
            e.update(evaluate(d, net, test_loader, dev))
        res["epochs"].append(e)
        print(f"epoch {epoch + 1}/{a.epochs}  lr {lr:.5f}  {e['wall_s']:.2f}s  "
              f"{e['samples_per_s']:.1f} samples/s  data wait {100 * e['data_wait_fraction']:.1f}%  "
              f"train loss {e['train_loss']:.4f} acc {100 * e['train_accuracy']:.1f}%"
              + (f"  test loss {e['test_loss']:.4f} acc {100 * e['test_accuracy']:.1f}%" if "test_loss" in e else ""),
              flush=True)
    if cuda:
        res["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(dev)
        res["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(dev)
    first, rest = res["epochs"][0], res["epochs"][1:]
    res["warmup_epoch"] = {k: first[k] for k in ("wall_s", "data_wait_s", "data_wait_fraction", "samples_per_s")}
    steady = rest or [first]
    walls = sum(e["wall_s"] for e in steady)
    res["steady_epochs"] = len(rest)
    res["steady_from"] = "epochs 2.." if rest else "epoch 1 (only one epoch: the warm-up)"
    res["samples_per_s"] = sum(e["samples"] for e in steady) / walls if walls > 0 else None
    res["data_wait_fraction"] = sum(e["data_wait_s"] for e in steady) / walls if walls > 0 else None
    sps = sorted(e["samples_per_s"] for e in steady)
    res["median_samples_per_s"] = sps[len(sps) // 2] if len(sps) % 2 else (sps[len(sps) // 2 - 1] + sps[len(sps) // 2]) / 2
    res["mean_epoch_s"] = walls / len(steady)
    res["final_train_loss"] = res["epochs"][-1]["train_loss"]
    res["passed"] = all(math.isfinite(e["train_loss"]) for e in res["epochs"])
    line = (f"{res['samples_per_s']:.1f} samples/s over {res['steady_from']}, data wait "
            f"{100 * res['data_wait_fraction']:.1f}%, mean epoch {res['mean_epoch_s']:.2f}s "
            f"(warm-up {first['wall_s']:.2f}s), final train loss {res['final_train_loss']:.4f}")
    return res, ("time: " if res["passed"] else "time FAILED (the loss is not finite): ") + line


def evaluate(d, net, loader, dev):
    torch, F = d.torch, d.F
    net.eval()
    loss_sum, correct, n = 0.0, 0, 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            rate = net(x).mean(0)
            d.functional.reset_net(net)
            loss_sum += float(F.cross_entropy(rate, y, reduction="sum"))
            correct += int((rate.argmax(1) == y).sum())
            n += y.shape[0]
    return {"test_loss": loss_sum / n, "test_accuracy": correct / n, "test_s": time.perf_counter() - t0}


def one_line(e):
    """An error as one line: a DataLoader worker's error arrives as 'Caught X in DataLoader
    worker process 0. Original Traceback ...'; its last line is the error itself."""
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    if not lines:
        return type(e).__name__
    last = lines[-1]
    for prefix in ("__main__.Usage: ", "Usage: "):
        if last.startswith(prefix):
            last = last[len(prefix):]
    return last


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)  # exits 2 on bad usage
    try:
        d = import_deps()
        res, line = (cmd_check if a.cmd == "check" else cmd_time)(a, d)
    except Usage as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001  (a run that breaks: CUDA out of memory, ...)
        print(f"error: {type(e).__name__}: {one_line(e)}", file=sys.stderr)
        return 1
    res["summary"] = line
    text = json.dumps(res, indent=2)
    if a.out:
        try:
            with open(a.out, "w") as f:
                f.write(text + "\n")
        except OSError as e:
            print(f"error: --out {a.out}: {e}", file=sys.stderr)
            return 2
    print(line, file=sys.stdout if res["passed"] else sys.stderr)
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
