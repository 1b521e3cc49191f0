"""golden: inferd-run's CPU fp32 and bf16 logits and predictions against torchvision in float64.

Driven by tests/golden/run, which owns the temporary directory and its cleanup.
For each weights dtype (F32, BF16, F16) it exports a seeded random ResNet-50
with randomised BatchNorms (tools/export-resnet.py), then every other
architecture inferd runs once (resnet18, resnet34, resnet101, resnet152,
wide_resnet50_2, wide_resnet101_2) with 1, 3 or 10 classes, in F32 or BF16,
on a few inputs (the big nets on two, in batches of 1 and 2, to keep the
suite's time reasonable). Each file is reads the file back with
our own reader (st_read.py) so that the reference uses exactly those weights,
and runs torchvision's resnet50 in float64 on the same inputs. inferd-run is run
over all inputs in one call, with batches that divide the input count and
batches that do not, and its outputs are checked:

  logits    ||out - ref|| / ||ref|| <= 1e-4 per image, and the same top-1
            wherever the reference's top-1 margin is clear
            (top1 - top2 > 1e-3 * |top1|); the logits file is poisoned with
            NaN beforehand, so an unwritten element fails;
  JSON      one valid line per input, in argument order (its "input"), the
            top-k classes equal to the reference's as far as its margins are
            clear, each score equal to the reference's softmax within 1e-4,
            scores sum <= 1, model = "sha256:" + 12 hex of the file's sha256,
            backend/precision as asked, labels present exactly when a labels
            file is given.

bf16: the F32 ResNet-50 is also run with --precision bf16 (the CPU engine's
bf16, where the CPU has AVX512_BF16 or AMX): each image's logits within
||out - ref|| / ||ref|| <= 8e-2 (the design's whole-network bf16 tolerance),
the same top-1 wherever the reference's top-1 margin is clear of bf16's error
(top1 - top2 > 5e-2 * |top1|, where fp32 asks 1e-3: bf16's measured
whole-network error is 2-5e-2 of ||ref||), and the JSON as
above but its scores against the softmax of inferd's own logits (bf16's
logits are not fp32's). On a CPU without the avx512_bf16 or amx_bf16 flag
it checks that inferd-run refuses bf16 with its sentence and reports the
run SKIP, never PASS.

It prints one PASS/FAIL/SKIP line per check with the measured figures. It does
not test the GPU's fp16/bf16 (that is the GPU suite's) or timing.

GOLDEN_BREAK=logits (or =ref) perturbs every image's logits (or reference)
by 2e-4 of its norm in one element, to show that the checks can fail.
"""

import hashlib
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch

import golden_embedding
import st_read

SEED_MODEL = 20261129
SEED_INPUTS = 7
TOL_REL_L2 = {"fp32": 1e-4, "bf16": 8e-2}
MARGIN_REL_BF16 = 5e-2  # bf16's top-1 margin is clear above this * |top1| (its error: 2-5e-2 of ||ref||)
TOL_SCORE = 1e-4
MARGIN_REL = 1e-3
DISTINCT_REL = 1e-2     # inputs' reference logits must differ by 100x the tolerance

MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])
H = W = 224
CLASSES = 1000          # the ResNet-50 runs' (and tests/decode's); the others have their own
# The other architectures: (name, classes, dtype, inferd-run arguments, inputs)
ARCH_RUNS = [
    ("resnet18", 10, "F32", ["--batch", "3", "--top", "5"], 4),
    ("resnet34", 3, "BF16", ["--batch", "2", "--top", "5"], 3),
    ("resnet101", 1, "F32", ["--batch", "2"], 2),
    ("resnet152", 3, "F32", ["--batch", "1", "--top", "2"], 2),
    ("wide_resnet50_2", 10, "BF16", ["--batch", "2", "--top", "3"], 2),
    ("wide_resnet101_2", 3, "F32", ["--batch", "1"], 2),
]

failures = 0


def report(ok, tid, msg):
    global failures
    if ok:
        print(f"PASS {tid}: {msg}", flush=True)
    else:
        failures += 1
        print(f"FAIL {tid}: {msg}", flush=True)


def smooth_noise(rng, cells, lo, hi):
    """(H, W, 3) float64 in [lo, hi): random cells x cells colours, bilinear-upsampled."""
    g = torch.from_numpy(rng.uniform(lo, hi, size=(1, 3, cells, cells)))
    up = torch.nn.functional.interpolate(g, size=(H, W), mode="bilinear", align_corners=True)
    return up[0].permute(1, 2, 0).numpy()


def make_inputs(tmp):
    """[(name, path, (3, H, W) float64 normalised tensor)], formats interleaved."""
    rng = np.random.default_rng(SEED_INPUTS)
    yy, xx = np.mgrid[0:H, 0:W]
    rgb = {
        "rgb8-0": rng.integers(0, 256, size=(H, W, 3)),                          # white noise
        "rgb8-1": np.floor(smooth_noise(rng, 7, 0, 256)),                        # blobs
        "rgb8-2": np.stack([xx * 255 // (W - 1), yy * 255 // (H - 1),            # gradient
                            255 - (xx + yy) * 255 // (W + H - 2)], axis=-1),
        "rgb8-3": np.kron(rng.integers(0, 256, size=(28, 28, 3)),                # 8 px checks
                          np.ones((8, 8, 1), dtype=np.int64)),
        "rgb8-4": rng.integers(0, 2, size=(H, W, 3)) * 255,                      # extremes only
    }
    f32 = {
        "f32-0": rng.standard_normal((3, H, W)),
        "f32-1": smooth_noise(rng, 14, -2.0, 2.5).transpose(2, 0, 1),
        "f32-2": rng.uniform(-2.1, 2.6, size=(3, H, W)),
        "f32-3": 0.5 * rng.standard_normal((3, H, W))
                 + smooth_noise(rng, 4, -1.5, 1.5).transpose(2, 0, 1),
    }
    out = []
    for name, img in rgb.items():
        u8 = img.astype(np.uint8)                                   # (H, W, 3) HWC RGB
        assert u8.nbytes == 150528
        path = os.path.join(tmp, name + ".rgb")
        u8.tofile(path)
        x = (u8.astype(np.float64) / 255.0 - MEAN) / STD            # (H, W, 3)
        out.append((name, path, torch.from_numpy(x.transpose(2, 0, 1).copy())))
    for name, arr in f32.items():
        a = arr.astype("<f4")                                       # (3, H, W) CHW
        assert a.nbytes == 602112
        path = os.path.join(tmp, name + ".f32")
        a.tofile(path)
        out.append((name, path, torch.from_numpy(a.astype(np.float64))))
    rgbs = [i for i in out if i[0].startswith("rgb8")]
    fs = [i for i in out if i[0].startswith("f32")]
    mixed = []
    for k in range(max(len(rgbs), len(fs))):
        mixed += rgbs[k:k + 1] + fs[k:k + 1]
    return mixed


def reference(weights, inputs, arch="resnet50", classes=1000, features=None):
    """(N, classes) float64 logits of torchvision's arch with these weights.
    features, a list, receives the (N, dim) penultimate features: the model
    with fc = Identity(), whose output the fc then takes (torchvision's own
    forward: avgpool, flatten, fc), so one pass gives both."""
    model = st_read.resnet(weights, arch, classes)
    fc, model.fc = model.fc, torch.nn.Identity()
    x = torch.stack([t for _, _, t in inputs])                      # (N, 3, H, W) f64
    with torch.no_grad():
        feats = model(x)
        logits = fc(feats)
    if features is not None:
        features.append(feats.numpy())
    return logits.numpy()


def clear_prefix(ref_row, k):
    """How many leading top-k classes of ref_row have clear margins to the next."""
    order = np.argsort(-ref_row, kind="stable")
    top = abs(ref_row[order[0]])
    n = 0
    while n < k and n + 1 < len(order) and ref_row[order[n]] - ref_row[order[n + 1]] > MARGIN_REL * top:
        n += 1
    if n < k and n + 1 == len(order):
        n += 1          # the last class has nothing below it to be confused with
    return order, n


def softmax(v):
    e = np.exp(v - v.max())
    return e / e.sum()


def check_logits(tid, out_row, ref_row, precision="fp32"):
    """Returns the relative L2 error and whether the top-1 margin was clear."""
    tol = TOL_REL_L2[precision]
    err = np.linalg.norm(out_row - ref_row) / np.linalg.norm(ref_row)
    order, clear = clear_prefix(ref_row, 1)
    margin = (ref_row[order[0]] - ref_row[order[1]]) / abs(ref_row[order[0]]) if len(order) > 1 else math.inf
    if precision == "bf16" and len(order) > 1:
        clear = margin > MARGIN_REL_BF16
    got1 = int(np.argmax(out_row)) if np.all(np.isfinite(out_row)) else -1
    msg = (f"rel L2 error {err:.2e} (tol {tol:.0e}), top-1 {got1} "
           f"ref {order[0]} (margin {margin:.2e}{'' if clear else ', unclear'})")
    ok = bool(err <= tol) and (not clear or got1 == order[0])
    report(ok, tid, msg)
    return err, bool(clear)


def check_json(tid, line, path, ref_row, k, labels, model_id, precision):
    classes = len(ref_row)
    try:
        p = json.loads(line)
    except ValueError as e:
        return report(False, tid, f"not JSON ({e}): {line[:120]!r}")
    if not isinstance(p, dict):
        return report(False, tid, f"not a JSON object: {line[:120]!r}")
    why = []
    if p.get("input") != path:
        why.append(f"input {p.get('input')!r}, expected {path!r} (order?)")
    if p.get("model") != model_id:
        why.append(f"model {p.get('model')!r}, expected {model_id!r}")
    if p.get("backend") != "cpu":
        why.append(f"backend {p.get('backend')!r}, expected 'cpu'")
    if p.get("precision") != precision:
        why.append(f"precision {p.get('precision')!r}, expected {precision!r}")
    lat = p.get("latency_ms")
    if not isinstance(lat, (int, float)) or isinstance(lat, bool) or not lat >= 0:
        why.append(f"latency_ms {lat!r} is not a number >= 0")
    top = p.get("top")
    worst = 0.0
    total = 0.0
    if not isinstance(top, list) or len(top) != k:
        why.append(f"top is not a list of {k}: {top!r}"[:200])
    else:
        prob = softmax(ref_row)
        order, clear = clear_prefix(ref_row, k)
        got = []
        prev = math.inf
        for j, e in enumerate(top):
            c, s = (e.get("class"), e.get("score")) if isinstance(e, dict) else (None, None)
            if not isinstance(c, int) or not 0 <= c < classes or not isinstance(s, (int, float)):
                why.append(f"top[{j}] is not {{class, score}} with class < {classes}: {e!r}")
                break
            got.append(c)
            total += s
            d = abs(s - prob[c])
            worst = max(worst, d)
            if not d <= TOL_SCORE:
                why.append(f"top[{j}] class {c} score {s} vs softmax of reference {prob[c]:.6f}")
            if s > prev:
                why.append(f"top[{j}] score {s} above the previous {prev}")
            prev = s
            if labels is not None and e.get("label") != labels[c]:
                why.append(f"top[{j}] label {e.get('label')!r}, expected {labels[c]!r}")
            if labels is None and "label" in e:
                why.append(f"top[{j}] has a label without a labels file")
        if got[:clear] != [int(c) for c in order[:clear]]:
            why.append(f"top classes {got} vs reference {order[:k].tolist()} "
                       f"(first {clear} clear)")
        # Each score is printed rounded to 6 decimals, so k of them may
        # overshoot 1 by up to k half-units of the last place.
        if not total <= 1 + k * 0.5e-6 + 1e-9:
            why.append(f"scores sum to {total} > 1 (beyond the rounding of {k} scores)")
    msg = f"top-{k} scores within {worst:.1e} of softmax(ref), sum {total:.4f}"
    report(not why, tid, "; ".join(why) if why else msg)


def run_inferd(tid, inferd, weights, inputs, ref, tmp, args, k, labels, model_id, precision="fp32"):
    """Runs inferd-run over all inputs once and checks every output. k is
    what --top asks; inferd caps it at the class count. In bf16 the JSON's
    scores are held against inferd's own logits."""
    n = len(inputs)
    CLASSES = ref.shape[1]
    k = min(k, CLASSES)
    logits_path = os.path.join(tmp, "logits.f32")
    np.full(n * CLASSES, np.nan, dtype="<f4").tofile(logits_path)  # poison
    cmd = [inferd, "--weights", weights, "--backend", "cpu", "--precision", precision,
           "--logits", logits_path] + args + [path for _, path, _ in inputs]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=300, text=True)
        rc, stdout, stderr = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired:
        rc, stdout, stderr = "timeout", "", "timed out after 300 s"
    lines = stdout.splitlines()
    shown = [os.path.basename(a) for a in args]
    size = os.path.getsize(logits_path)
    ok = rc == 0 and len(lines) == n and size == n * CLASSES * 4
    report(ok, f"{tid}/run",
           f"`inferd-run --backend cpu --precision {precision} {' '.join(shown)} <{n} inputs>`: exit {rc}, "
           f"{len(lines)} lines (want {n}), {size} logits bytes (want {n * CLASSES * 4})"
           + ("" if ok else f"; stderr: {stderr.strip()[-300:]!r}"))
    out = np.zeros((n, CLASSES))
    if size == n * CLASSES * 4:
        out = np.fromfile(logits_path, dtype="<f4").astype(np.float64).reshape(n, CLASSES)
    else:
        out[:] = np.nan
    brk = os.environ.get("GOLDEN_BREAK", "")
    errs, clears = [], 0
    for i, (name, path, _) in enumerate(inputs):
        ref_row = ref[i].copy()
        out_row = out[i]
        if brk in ("logits", "ref"):
            bump = 2e-4 * np.linalg.norm(ref_row)
            if brk == "logits":
                out_row = out_row.copy()
                out_row[i % CLASSES] += bump
            else:
                ref_row[i % CLASSES] += bump
        err, clear = check_logits(f"{tid}/{name}", out_row, ref_row, precision)
        errs.append(err)
        clears += clear
        if i < len(lines):
            check_json(f"{tid}/json-{name}", lines[i], path, ref_row if precision == "fp32" else out_row,
                       k, labels, model_id, precision)
        else:
            report(False, f"{tid}/json-{name}", "no prediction line")
    os.unlink(logits_path)
    print(f"INFO {tid}: {precision} rel L2 error against float64: max {max(errs):.2e}, "
          f"mean {sum(errs) / len(errs):.2e}; {clears} of {n} top-1 margins clear", flush=True)


def cpu_has_bf16():
    """Whether /proc/cpuinfo lists a bf16 instruction set the CPU engine uses."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def run_bf16(tid, inferd, weights, inputs, ref, tmp, args, k, model_id):
    """The bf16 run where the CPU has bf16; elsewhere inferd-run must refuse
    it with its sentence, and the run is SKIP."""
    if cpu_has_bf16():
        return run_inferd(tid, inferd, weights, inputs, ref, tmp, args, k, None, model_id, "bf16")
    r = subprocess.run([inferd, "--weights", weights, "--backend", "cpu", "--precision", "bf16", inputs[0][1]],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    refused = r.returncode != 0 and "AVX512_BF16 or AMX" in r.stderr
    report(refused, f"{tid}/refused", f"inferd-run --precision bf16 without the CPU's bf16: exit "
           f"{r.returncode}, stderr {r.stderr.strip()[-200:]!r}")
    print(f"SKIP {tid}: this CPU has no avx512_bf16 or amx_bf16 flag, so the CPU engine's bf16 "
          f"is not run here", flush=True)


def run_embeddings(tid, inferd, weights, inputs, feats, tmp):
    """ResNet-50's embeddings in each kind, format and normalisation, fp32,
    and in bf16 where the CPU has it."""
    for name, args, kind, fmt, norm in (("json-b4", ["--batch", "4"], "both", "json", "none"),
                                        ("base64-l2-b3", ["--batch", "3"], "embedding", "base64", "l2"),
                                        ("f32le-l2-b16", ["--batch", "16"], "embedding", "f32le", "l2"),
                                        ("json-l2-b2", ["--batch", "2"], "embedding", "json", "l2")):
        golden_embedding.check(report, f"{tid}/embedding-{name}", inferd, weights, inputs, feats, tmp, args,
                               kind, fmt, norm)
    if cpu_has_bf16():
        golden_embedding.check(report, f"{tid}/embedding-bf16-b4", inferd, weights, inputs, feats, tmp,
                               ["--batch", "4"], "both", "base64", "none", "bf16")
    else:
        print(f"SKIP {tid}/embedding-bf16-b4: this CPU has no avx512_bf16 or amx_bf16 flag", flush=True)


def check_reference(tid, ref, n):
    """The reference must tell the inputs apart and rank them clearly, or
    the comparison proves little. With fewer than 10 classes the rows may
    legitimately point the same way, so only their finiteness and margins
    are asked for."""
    classes = ref.shape[1]
    nref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    dist = min((np.linalg.norm(nref[a] - nref[b]) for a in range(n) for b in range(a + 1, n)),
               default=math.inf)
    margins = [(r_[o[0]] - r_[o[1]]) / abs(r_[o[0]]) if classes > 1 else math.inf
               for r_, o in ((row, np.argsort(-row)) for row in ref)]
    distinct = dist > DISTINCT_REL or classes < 10
    report(np.all(np.isfinite(ref)) and distinct
           and sum(m > MARGIN_REL for m in margins) >= max(1, n // 2),
           f"{tid}/reference",
           f"{n} inputs, {classes} classes, max |logit| {np.abs(ref).max():.3f}, "
           f"min pairwise relative distance {dist:.2e} (want > {DISTINCT_REL:.0e}"
           f"{'' if classes >= 10 else ', not asked below 10 classes'}), "
           f"{sum(m > MARGIN_REL for m in margins)} clear top-1 margins "
           f"(smallest {min(margins):.1e})")


def export(tid, exporter, weights, dtype, extra):
    cmd = [sys.executable, exporter, "--random", "--seed", str(SEED_MODEL),
           "--dtype", dtype, "--out", weights] + extra
    r = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        report(False, f"{tid}/export", f"{os.path.basename(exporter)} failed: {r.stderr.strip()[-300:]}")
        return None
    with open(weights, "rb") as f:
        return "sha256:" + hashlib.sha256(f.read()).hexdigest()[:12]


def run_archs(inferd, exporter, tmp, inputs):
    """Every other architecture once: its plan names it, its logits match."""
    only = os.environ.get("GOLDEN_ARCHS")
    for arch, classes, dtype, args, n in ARCH_RUNS:
        if only and arch not in only.split(","):
            continue
        tid = f"golden/{arch}-{classes}-{dtype.lower()}"
        weights = os.path.join(tmp, f"{arch}-{classes}-{dtype.lower()}.safetensors")
        model_id = export(tid, exporter, weights, dtype, ["--arch", arch, "--classes", str(classes)])
        if model_id is None:
            continue
        r = subprocess.run([inferd, "--plan", "--json", "--backend", "cpu", "--weights", weights],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            plan = json.loads(r.stdout)
        except ValueError:
            plan = {}
        report(r.returncode == 0 and plan.get("model") == arch and plan.get("classes") == classes,
               f"{tid}/plan", f"inferd-run --plan --json --weights: exit {r.returncode}, model "
               f"{plan.get('model')!r}, classes {plan.get('classes')!r} (want {arch!r}, {classes})"
               + ("" if r.returncode == 0 else f"; stderr {r.stderr.strip()[-200:]!r}"))
        sub = inputs[:n]
        feats = []
        ref = reference(weights, sub, arch, classes, feats)
        check_reference(tid, ref, n)
        run_inferd(f"{tid}/b", inferd, weights, sub, ref, tmp, args, 5 if "--top" not in args
                   else int(args[args.index("--top") + 1]), None, model_id)
        batch = args[:args.index("--batch") + 2]
        golden_embedding.check(report, f"{tid}/embedding", inferd, weights, sub, feats[0], tmp, batch)
        if arch == "resnet18":
            # The other formats and normalisations on the 512-value embedding.
            golden_embedding.check(report, f"{tid}/embedding-base64-l2", inferd, weights, sub, feats[0], tmp,
                                   batch, "embedding", "base64", "l2")
            golden_embedding.check(report, f"{tid}/embedding-f32le", inferd, weights, sub, feats[0], tmp,
                                   batch, "embedding", "f32le")
        os.unlink(weights)


def main():
    inferd, exporter, tmp = sys.argv[1:4]
    inputs = make_inputs(tmp)
    labels_path = os.path.join(tmp, "labels.txt")
    labels = None
    runs = {
        # tid suffix: (inferd-run arguments, k, with labels)
        "F32": [("b16", ["--batch", "16", "--top", "5", "--labels", labels_path], 5, True),
                ("b4", ["--batch", "4", "--top", "3"], 3, False),
                ("b3", ["--batch", "3", "--top", "1"], 1, False)],
        "BF16": [("default", [], 5, False)],
        "F16": [("b2", ["--batch", "2"], 5, False)],
    }
    for dtype, dtype_runs in (runs.items() if not os.environ.get("GOLDEN_ARCHS") else ()):
        tid = f"golden/{dtype.lower()}"
        weights = os.path.join(tmp, f"resnet50-{dtype.lower()}.safetensors")
        cmd = [sys.executable, exporter, "--random", "--seed", str(SEED_MODEL),
               "--dtype", dtype, "--out", weights]
        if labels is None:
            cmd += ["--labels", labels_path]
        r = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            report(False, f"{tid}/export", f"export-resnet50.py failed: {r.stderr.strip()[-300:]}")
            continue
        if labels is None:
            with open(labels_path, encoding="utf-8") as f:
                labels = f.read().splitlines()
        with open(weights, "rb") as f:
            model_id = "sha256:" + hashlib.sha256(f.read()).hexdigest()[:12]

        feats = []
        ref = reference(weights, inputs, features=feats)
        check_reference(tid, ref, len(inputs))
        for name, args, k, with_labels in dtype_runs:
            run_inferd(f"{tid}/{name}", inferd, weights, inputs, ref, tmp, args, k,
                       labels if with_labels else None, model_id)
        if dtype == "F32":
            run_bf16(f"{tid}/bf16-b4", inferd, weights, inputs, ref, tmp, ["--batch", "4", "--top", "3"], 3,
                     model_id)
            run_embeddings(tid, inferd, weights, inputs, feats[0], tmp)
        os.unlink(weights)
    run_archs(inferd, exporter, tmp, inputs)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
