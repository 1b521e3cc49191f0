#!/usr/bin/python3
"""export-resnet: writes torchvision ResNet weights as a safetensors file for inferd.

Every ResNet inferd runs: resnet18, resnet34 (basic blocks), resnet50,
resnet101, resnet152, wide_resnet50_2 and wide_resnet101_2 (bottlenecks),
with any number of classes from 1 to 100,000. The file holds exactly the
model's torchvision state_dict: the tensor names are its keys, in its (forward) order, with the floating tensors in the chosen dtype
(F32, F16 or BF16) and every BatchNorm's num_batches_tracked kept as an I64
scalar (inferd's reader ignores it). The weights come either from a .pth
state_dict, whose architecture and class count are detected from its keys and
shapes exactly as inferd detects them (src/core/model_arch.c: conv3 present
means bottlenecks, the blocks per stage come from the highest layerN.i, the
widths and classes from the shapes), or from a seeded random model (--arch,
--classes) whose BatchNorm parameters and statistics are all randomised, so
that a numerics test really exercises BN folding. A state_dict inferd would
refuse is refused here, with the same sentence. See --help.

tools/export-resnet50.py is the same program (its old name).

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
random model (--random --seed N [--arch A] [--classes K]):
  torch.manual_seed(N), then torchvision.models.A(weights=None, num_classes=K)
  (default resnet50 with 1000 classes): convs
  kaiming-normal, fc uniform, as torchvision initialises them. Every BatchNorm
  is then randomised during one calibration pass over 8 normalised 224x224
  inputs made from the same seed (4 of white noise, N(0, 1), and 4 of smooth
  noise, random 4x4 to 28x28 grids upsampled): just before each BN runs, the
  per-channel mean m and variance v of its actual input are measured, and
      running_mean = m + 0.25 * sqrt(v) * N(0, 1)
      running_var  = v * U(0.5, 2)
      weight       = U(0.5, 1.5) for bn1/bn2 and the stem,
                     U(0.2, 0.6) for the last BN of each block (bn3 of a
                     bottleneck, bn2 of a basic block) and downsample.1 (the
                     residual branches, as in trained nets), with a random sign on
                     10% of the channels
      bias         = N(0, 0.25)
  so each BN's output has roughly unit scale per channel (its statistics are
  off by a random factor, not by orders of magnitude) and the residual stream
  grows only slowly through each stage's blocks (block outputs stay at an rms
  of about 0.5 to 1.1 on these inputs; see --verbose). The exporter then checks
  that the model's logits on those inputs are finite, below 1e3 in magnitude
  and not flat (with 2 or more classes), and refuses to write the file otherwise. Inputs far from the
  calibration set (e.g. saturated 0/255 noise) still give larger logits (tens
  to about a hundred), as frozen BN statistics do in any network.

  The file's bytes depend on torch's CPU arithmetic (thread count, version);
  a test must read the weights back from the file, never regenerate them.

dtypes:
  F32 (default), F16 and BF16 (round to nearest even) apply to every floating
  tensor; num_batches_tracked stays I64.

examples:
  export-resnet.py --random --seed 1 --out /tmp/r50.safetensors
  export-resnet.py --random --seed 1 --arch resnet18 --classes 10 --out r18-10.safetensors
  export-resnet.py --pth my-finetuned-resnet34.pth --out mine.safetensors
  export-resnet.py --pth resnet50-0676ba61.pth --dtype BF16 \\
          --out r50-bf16.safetensors --labels imagenet.labels
"""

ARCHS = {
    # name: (bottleneck, blocks per stage, width factor), as torchvision builds them
    "resnet18": (False, (2, 2, 2, 2), 1),
    "resnet34": (False, (3, 4, 6, 3), 1),
    "resnet50": (True, (3, 4, 6, 3), 1),
    "resnet101": (True, (3, 4, 23, 3), 1),
    "resnet152": (True, (3, 8, 36, 3), 1),
    "wide_resnet50_2": (True, (3, 4, 6, 3), 2),
    "wide_resnet101_2": (True, (3, 4, 23, 3), 2),
}
CLASSES_MAX = 100000


def _shape(t):
    return ", ".join(str(d) for d in t.shape)


def detect(sd, path):
    """(architecture name, classes) of a state_dict, by inferd's rules and sentences."""
    if "conv1.weight" not in sd:
        raise ValueError(f"{path}: tensor 'conv1.weight' is missing: not a torchvision ResNet")
    blocks = [0, 0, 0, 0]
    for name in sd:
        parts = name.split(".")
        if (len(parts) >= 3 and len(parts[0]) == 6 and parts[0][:5] == "layer" and parts[0][5] in "1234"
                and parts[1].isdigit() and (parts[1] == "0" or parts[1][0] != "0")):
            stage = int(parts[0][5]) - 1
            blocks[stage] = max(blocks[stage], int(parts[1]) + 1)
    for stage in range(4):
        choices = sorted({a[1][stage] for a in ARCHS.values()})
        if blocks[stage] not in choices:
            said = ", ".join(str(c) for c in choices[:-1]) + " or " + str(choices[-1])
            raise ValueError(f"{path}: layer{stage + 1} has {blocks[stage]} block{'' if blocks[stage] == 1 else 's'}; "
                             f"torchvision's ResNets have {said}")
    bottleneck = "layer1.0.conv3.weight" in sd
    c2 = sd.get("layer1.0.conv2.weight")
    if bottleneck and c2 is not None and c2.dim() == 4 and 0 < c2.shape[1] < c2.shape[0]:
        raise ValueError(f"{path}: tensor 'layer1.0.conv2.weight' has shape [{_shape(c2)}], a grouped convolution "
                         f"({c2.shape[0] // c2.shape[1]} groups): resnext is not supported")
    c1 = sd.get("layer1.0.conv1.weight")
    width = 2 if bottleneck and c1 is not None and c1.dim() == 4 and c1.shape[0] == 128 else 1
    fc = sd.get("fc.weight")
    if fc is None:
        raise ValueError(f"{path}: tensor 'fc.weight' is missing")
    if fc.dim() != 2 or not 1 <= fc.shape[0] <= CLASSES_MAX:
        raise ValueError(f"{path}: tensor 'fc.weight' has shape [{_shape(fc)}]; expected [classes, features] "
                         f"with 1 to {CLASSES_MAX} classes")
    for name, (b, n, w) in ARCHS.items():
        if b == bottleneck and w == width and tuple(n) == tuple(blocks):
            return name, int(fc.shape[0])
    kind = ("wide " if width == 2 else "") + ("bottlenecks" if bottleneck else "basic blocks")
    raise ValueError(f"{path}: {kind} with {', '.join(str(b) for b in blocks)} blocks per stage match no "
                     f"torchvision ResNet")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=os.path.basename(sys.argv[0]) or "export-resnet.py",
        description="Write torchvision ResNet weights as a safetensors file "
                    "whose tensor names are torchvision's state_dict keys.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--pth", metavar="STATE_DICT.pth",
                     help="a torchvision ResNet state_dict saved with torch.save "
                          "(loaded with map_location=cpu); its architecture and classes "
                          "are detected from it")
    src.add_argument("--random", action="store_true",
                     help="a seeded random model with randomised BatchNorms (needs --seed)")
    p.add_argument("--seed", type=int, metavar="N",
                   help="seed for --random")
    p.add_argument("--arch", choices=tuple(ARCHS),
                   help="the architecture of --random (default resnet50)")
    p.add_argument("--classes", type=int, metavar="K",
                   help=f"the class count of --random, 1 to {CLASSES_MAX} (default 1000)")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="the safetensors file to write (replaced atomically)")
    p.add_argument("--dtype", default="F32", choices=("F32", "F16", "BF16"),
                   help="dtype of the floating tensors (default F32)")
    p.add_argument("--labels", metavar="FILE",
                   help="also write the 1000 ImageNet class names, one per line, "
                        "from torchvision's ResNet50_Weights.IMAGENET1K_V1 metadata "
                        "(a model of 1000 classes only)")
    p.add_argument("--verbose", action="store_true",
                   help="print the calibration statistics to stderr")
    a = p.parse_args(argv)
    if a.random and a.seed is None:
        p.error("--random needs --seed N")
    if a.pth and (a.seed is not None or a.arch or a.classes is not None):
        p.error("--seed, --arch and --classes go with --random; a --pth state_dict's are detected from it")
    if a.classes is not None and not 1 <= a.classes <= CLASSES_MAX:
        p.error(f"--classes must be 1 to {CLASSES_MAX}, not {a.classes}")
    a.arch = a.arch or "resnet50"
    a.classes = 1000 if a.classes is None else a.classes
    return a


def load_pth(torch, torchvision, path):
    """(model, arch, classes): the ResNet whose weights are the state_dict in path,
    its architecture detected (names and shapes checked)."""
    try:
        sd = torch.load(path, map_location="cpu")
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
        raise ValueError(f"{path}: cannot be read by torch.load: {e}") from e
    if not isinstance(sd, dict):
        raise ValueError(f"{path}: not a state_dict (a {type(sd).__name__})")
    # A whole checkpoint sometimes wraps it, and DataParallel prefixes "module.".
    if "state_dict" in sd and isinstance(sd["state_dict"], dict):
        sd = sd["state_dict"]
    if sd and all(isinstance(k, str) and k.startswith("module.") for k in sd):
        sd = {k[len("module."):]: v for k, v in sd.items()}
    for name, t in sd.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{path}: '{name}' is a {type(t).__name__}, not a tensor")
    arch, classes = detect(sd, path)
    model = getattr(torchvision.models, arch)(weights=None, num_classes=classes)
    want = model.state_dict()
    extra = [k for k in sd if k not in want]
    if extra:
        raise ValueError(f"{path}: an unexpected tensor '{extra[0]}' (not part of {arch})")
    for name, t in want.items():
        if name not in sd:
            raise ValueError(f"{path}: tensor '{name}' is missing")
        got = sd[name]
        if tuple(got.shape) != tuple(t.shape):
            raise ValueError(f"{path}: tensor '{name}' has shape [{_shape(got)}]; expected [{_shape(t)}]")
        if got.is_floating_point() and not torch.isfinite(got).all():
            raise ValueError(f"{path}: tensor '{name}' holds a non-finite value")
    model.load_state_dict(sd, strict=True)
    return model.eval(), arch, classes


def random_model(torch, torchvision, seed, verbose, arch="resnet50", classes=1000):
    """A seeded ResNet with every BN randomised around its measured input statistics."""
    torch.manual_seed(seed)
    model = getattr(torchvision.models, arch)(weights=None, num_classes=classes).eval()
    last_bn = ".bn3" if ARCHS[arch][0] else ".bn2"
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
        if name.endswith(last_bn) or name.endswith(".downsample.1"):
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
            print(f"export-resnet: {name}: output rms {out.pow(2).mean().sqrt().item():.3f}",
                  file=sys.stderr)
        return hook

    handles = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            handles.append(mod.register_forward_pre_hook(randomise))
        elif verbose and (name.count(".") == 1 and name.startswith("layer")):
            handles.append(mod.register_forward_hook(report(name)))
    with torch.no_grad():
        logits = model(x)  # (N, classes)
    for h in handles:
        h.remove()

    # Each hook set its BN just before that BN ran, so these logits are
    # already those of the final model.
    if classes >= 2:
        top2 = logits.topk(2, dim=1).values
        margin = (top2[:, 0] - top2[:, 1]) / top2[:, 0].abs().clamp_min(1e-30)
    else:
        margin = torch.ones(logits.shape[0])  # one class: no ranking to be flat
    if verbose:
        print(f"export-resnet: logits std {logits.std().item():.3f}, "
              f"max |logit| {logits.abs().max().item():.3f}, "
              f"relative top-1 margins {[round(v, 4) for v in margin.tolist()]}",
              file=sys.stderr)
    if not torch.isfinite(logits).all():
        raise ValueError(f"seed {seed}: the randomised model gives non-finite logits")
    if logits.abs().max().item() >= 1e3:
        raise ValueError(f"seed {seed}: the randomised model's logits explode "
                         f"(max {logits.abs().max().item():.3g})")
    if logits.std().item() < 1e-2 or (margin > 1e-3).sum().item() < 2:  # std over samples and classes
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
        print(f"export-resnet: torch and torchvision are needed "
              f"(Debian python3-torch, python3-torchvision): {e}", file=sys.stderr)
        return 1

    try:
        if a.pth:
            model, arch, classes = load_pth(torch, torchvision, a.pth)
            source = f"pth:{os.path.basename(a.pth)}"
        else:
            arch, classes = a.arch, a.classes
            model = random_model(torch, torchvision, a.seed, a.verbose, arch, classes)
            source = f"random:seed={a.seed}"
        if a.labels and classes != 1000:
            raise ValueError(f"--labels writes ImageNet's 1000 class names; this {arch} has {classes} "
                             f"classes: write its labels file yourself, one name per line")

        tensors = []
        for name, t in model.state_dict().items():
            dt, data = tensor_bytes(torch, t, a.dtype)
            tensors.append((name, dt, tuple(t.shape), data))
        metadata = {"format": "pt", "model": arch, "classes": str(classes), "source": source,
                    "dtype": a.dtype, "torchvision": torchvision.__version__,
                    "producer": "inferd tools/export-resnet.py"}
        write_safetensors(a.out, tensors, metadata)

        if a.labels:
            cats = torchvision.models.ResNet50_Weights.IMAGENET1K_V1.meta["categories"]
            if len(cats) != 1000:
                raise ValueError(f"torchvision lists {len(cats)} categories, not 1000")
            with open(a.labels, "w", encoding="utf-8") as f:
                f.write("".join(c + "\n" for c in cats))
    except (OSError, ValueError, RuntimeError) as e:
        print(f"export-resnet: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
