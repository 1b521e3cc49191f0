#!/usr/bin/python3
"""export-resnet50: writes torchvision ResNet-50 weights as a safetensors file for inferd.

The file holds exactly torchvision's resnet50 state_dict: the tensor names are
its keys, in its (forward) order, with the floating tensors in the chosen dtype
(F32, F16 or BF16) and every BatchNorm's num_batches_tracked kept as an I64
scalar (inferd's reader ignores it). The weights come either from a .pth
state_dict or from a seeded random model whose BatchNorm parameters and
statistics are all randomised, so that a numerics test really exercises BN
folding. See --help.

The safetensors writer is our own (no safetensors package is needed): an
8-byte little-endian header length, a JSON header {name: {dtype, shape,
data_offsets}} plus "__metadata__", padded with spaces to a multiple of 8, then
the tensors' bytes back to back in header order.

It deliberately does not download anything (a trained model needs a .pth that
is already on disk), and it is not inferd's reader: that is src/core/st.c, and the
golden test's Python reader is tests/golden/st_read.py.
"""

import argparse
import collections
import json
import os
import pickle
import sys

EPILOG = """\
random model (--random --seed N):
  torch.manual_seed(N), then torchvision.models.resnet50(weights=None): convs
  kaiming-normal, fc uniform, as torchvision initialises them. Every BatchNorm
  is then randomised during one calibration pass over 8 normalised 224x224
  inputs made from the same seed (4 of white noise, N(0, 1), and 4 of smooth
  noise, random 4x4 to 28x28 grids upsampled): just before each BN runs, the
  per-channel mean m and variance v of its actual input are measured, and
      running_mean = m + 0.25 * sqrt(v) * N(0, 1)
      running_var  = v * U(0.5, 2)
      weight       = U(0.5, 1.5) for bn1/bn2 and the stem,
                     U(0.2, 0.6) for bn3 and downsample.1 (the residual
                     branches, as in trained nets), with a random sign on
                     10% of the channels
      bias         = N(0, 0.25)
  so each BN's output has roughly unit scale per channel (its statistics are
  off by a random factor, not by orders of magnitude) and the residual stream
  grows only slowly through each stage's blocks (block outputs stay at an rms
  of about 0.5 to 1.1 on these inputs; see --verbose). The exporter then checks
  that the model's logits on those inputs are finite, below 1e3 in magnitude
  and not flat, and refuses to write the file otherwise. Inputs far from the
  calibration set (e.g. saturated 0/255 noise) still give larger logits (tens
  to about a hundred), as frozen BN statistics do in any network.

  The file's bytes depend on torch's CPU arithmetic (thread count, version);
  a test must read the weights back from the file, never regenerate them.

dtypes:
  F32 (default), F16 and BF16 (round to nearest even) apply to every floating
  tensor; num_batches_tracked stays I64.

examples:
  export-resnet50.py --random --seed 1 --out /tmp/r50.safetensors
  export-resnet50.py --pth resnet50-0676ba61.pth --dtype BF16 \\
          --out r50-bf16.safetensors --labels imagenet.labels
"""


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="export-resnet50.py",
        description="Write torchvision ResNet-50 weights as a safetensors file "
                    "whose tensor names are torchvision's state_dict keys.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--pth", metavar="STATE_DICT.pth",
                     help="a torchvision resnet50 state_dict saved with torch.save "
                          "(loaded with map_location=cpu)")
    src.add_argument("--random", action="store_true",
                     help="a seeded random model with randomised BatchNorms (needs --seed)")
    p.add_argument("--seed", type=int, metavar="N",
                   help="seed for --random")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="the safetensors file to write (replaced atomically)")
    p.add_argument("--dtype", default="F32", choices=("F32", "F16", "BF16"),
                   help="dtype of the floating tensors (default F32)")
    p.add_argument("--labels", metavar="FILE",
                   help="also write the 1000 ImageNet class names, one per line, "
                        "from torchvision's ResNet50_Weights.IMAGENET1K_V1 metadata")
    p.add_argument("--verbose", action="store_true",
                   help="print the calibration statistics to stderr")
    a = p.parse_args(argv)
    if a.random and a.seed is None:
        p.error("--random needs --seed N")
    if a.pth and a.seed is not None:
        p.error("--seed goes with --random, not --pth")
    return a


def load_pth(torch, torchvision, path):
    """A resnet50 whose weights are the state_dict in path (names and shapes checked)."""
    try:
        sd = torch.load(path, map_location="cpu")
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
        raise ValueError(f"{path}: cannot be read by torch.load: {e}") from e
    if not isinstance(sd, dict):
        raise ValueError(f"{path}: not a state_dict (a {type(sd).__name__})")
    model = torchvision.models.resnet50(weights=None)
    want = model.state_dict()
    for name, t in want.items():
        if name not in sd:
            raise ValueError(f"{path}: not a torchvision resnet50 state_dict: '{name}' is missing")
        got = sd[name]
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(t.shape):
            shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise ValueError(f"{path}: not a torchvision resnet50 state_dict: '{name}' "
                             f"is {shape}, expected {list(t.shape)}")
    extra = [k for k in sd if k not in want]
    if extra:
        raise ValueError(f"{path}: not a torchvision resnet50 state_dict: "
                         f"unexpected '{extra[0]}' ({len(extra)} unexpected keys)")
    model.load_state_dict(sd, strict=True)
    return model.eval()


def random_model(torch, torchvision, seed, verbose):
    """A seeded resnet50 with every BN randomised around its measured input statistics."""
    torch.manual_seed(seed)
    model = torchvision.models.resnet50(weights=None).eval()
    gen = torch.Generator().manual_seed(seed + 0x5EED)
    # Calibration inputs (N, C, H, W), normalised: white noise and smooth
    # noise, so that neither kind drives activations far from unit scale.
    smooth = [torch.nn.functional.interpolate(
                  torch.randn(1, 3, cells, cells, generator=gen) * 1.5,
                  size=(224, 224), mode="bilinear", align_corners=False)
              for cells in (4, 7, 14, 28)]
    x = torch.cat([torch.randn(4, 3, 224, 224, generator=gen)] + smooth)

    residual_bns = set()
    for name, mod in model.named_modules():
        if name.endswith(".bn3") or name.endswith(".downsample.1"):
            residual_bns.add(mod)

    def randomise(mod, inputs):
        (t,) = inputs  # (N, C, H, W)
        c = t.shape[1]
        m = t.mean(dim=(0, 2, 3)).double()
        v = t.var(dim=(0, 2, 3), unbiased=False).double().clamp_min(1e-4)
        mean = m + 0.25 * v.sqrt() * torch.randn(c, generator=gen, dtype=torch.float64)
        var = v * (0.5 + 1.5 * torch.rand(c, generator=gen, dtype=torch.float64))
        lo, hi = (0.2, 0.6) if mod in residual_bns else (0.5, 1.5)
        w = lo + (hi - lo) * torch.rand(c, generator=gen, dtype=torch.float64)
        w = torch.where(torch.rand(c, generator=gen, dtype=torch.float64) < 0.1, -w, w)
        b = 0.25 * torch.randn(c, generator=gen, dtype=torch.float64)
        with torch.no_grad():
            mod.running_mean.copy_(mean)
            mod.running_var.copy_(var)
            mod.weight.copy_(w)
            mod.bias.copy_(b)

    def report(name):
        def hook(mod, inputs, out):
            print(f"export-resnet50: {name}: output rms {out.pow(2).mean().sqrt().item():.3f}",
                  file=sys.stderr)
        return hook

    handles = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            handles.append(mod.register_forward_pre_hook(randomise))
        elif verbose and (name.count(".") == 1 and name.startswith("layer")):
            handles.append(mod.register_forward_hook(report(name)))
    with torch.no_grad():
        logits = model(x)  # (N, 1000)
    for h in handles:
        h.remove()

    # Each hook set its BN just before that BN ran, so these logits are
    # already those of the final model.
    top2 = logits.topk(2, dim=1).values
    margin = (top2[:, 0] - top2[:, 1]) / top2[:, 0].abs().clamp_min(1e-30)
    if verbose:
        print(f"export-resnet50: logits std {logits.std().item():.3f}, "
              f"max |logit| {logits.abs().max().item():.3f}, "
              f"relative top-1 margins {[round(v, 4) for v in margin.tolist()]}",
              file=sys.stderr)
    if not torch.isfinite(logits).all():
        raise ValueError(f"seed {seed}: the randomised model gives non-finite logits")
    if logits.abs().max().item() >= 1e3:
        raise ValueError(f"seed {seed}: the randomised model's logits explode "
                         f"(max {logits.abs().max().item():.3g})")
    if logits.std().item() < 1e-2 or (margin > 1e-3).sum().item() < 2:
        raise ValueError(f"seed {seed}: the randomised model's logits are flat")
    return model


def tensor_bytes(torch, t, dtype):
    """(safetensors dtype name, little-endian bytes) of a state_dict tensor."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.int64:
        return "I64", t.numpy().astype("<i8").tobytes()
    if not t.is_floating_point():
        raise ValueError(f"unexpected tensor dtype {t.dtype}")
    if dtype == "F32":
        return "F32", t.float().numpy().astype("<f4").tobytes()
    if dtype == "F16":
        return "F16", t.half().numpy().astype("<f2").tobytes()
    # BF16: torch rounds to nearest even; numpy has no bfloat16, so move
    # the bits out as int16.
    return "BF16", t.bfloat16().view(torch.int16).numpy().astype("<i2").tobytes()


def write_safetensors(path, tensors, metadata):
    """Writes [(name, dtype, shape, bytes)] in the given order, atomically."""
    header = collections.OrderedDict()
    header["__metadata__"] = metadata
    offset = 0
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(len(h).to_bytes(8, "little"))
            f.write(h)
            for _, _, _, data in tensors:
                f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def main(argv):
    a = parse_args(argv)
    try:
        import torch
        import torchvision
    except ImportError as e:
        print(f"export-resnet50: torch and torchvision are needed "
              f"(Debian python3-torch, python3-torchvision): {e}", file=sys.stderr)
        return 1

    try:
        if a.pth:
            model = load_pth(torch, torchvision, a.pth)
            source = f"pth:{os.path.basename(a.pth)}"
        else:
            model = random_model(torch, torchvision, a.seed, a.verbose)
            source = f"random:seed={a.seed}"

        tensors = []
        for name, t in model.state_dict().items():
            dt, data = tensor_bytes(torch, t, a.dtype)
            tensors.append((name, dt, tuple(t.shape), data))
        metadata = {"format": "pt", "model": "resnet50", "source": source,
                    "dtype": a.dtype, "torchvision": torchvision.__version__,
                    "producer": "inferd tools/export-resnet50.py"}
        write_safetensors(a.out, tensors, metadata)

        if a.labels:
            cats = torchvision.models.ResNet50_Weights.IMAGENET1K_V1.meta["categories"]
            if len(cats) != 1000:
                raise ValueError(f"torchvision lists {len(cats)} categories, not 1000")
            with open(a.labels, "w", encoding="utf-8") as f:
                f.write("".join(c + "\n" for c in cats))
    except (OSError, ValueError, RuntimeError) as e:
        print(f"export-resnet50: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
