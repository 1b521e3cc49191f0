#!/usr/bin/python3
"""gpu_compare: inferd's whole network against torchvision, on the GPU machine.

For each weights file and precision, it runs build/inferd-run (the real
program: file input, engine, graphs, --logits) on the same random records at
several batch sizes, and compares the logits with torchvision's resnet50
loaded from the same file (tests/golden/st_read.py widens F16/BF16 exactly to
float32). The reference runs in float32 on the GPU with TF32 off, or in
float64 on the CPU (--device cpu, the dry run used on machines without a GPU).

Checks, per (file, precision, batch): relative L2 of each image's logits
within the design's tolerance (fp32 1e-4, fp16/bf16 2e-2), no NaN, and top-1
equal wherever the reference's top-1 margin is clear (more than twice the
tolerated error norm). One PASS/FAIL/SKIP line each; all figures as JSON
with --out. Exit status 1 when any check failed.

It is not the golden test (tests/golden, CPU engine on the CI machine) and
not a benchmark (tools/gpu_bench.py).

  gpu_compare.py --inferd build/inferd-run --weights F32FILE[:p1,p2] ... \\
        [--batches 1,3,64,max] [--device cuda|cpu] [--backend cuda|cpu] --out JSON
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "golden"))

TOL = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 2e-2}
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
RGB8_BYTES = 224 * 224 * 3


def load_state_dict(path):
    try:
        import st_read
        return st_read.load(path)
    except ImportError:
        from safetensors.torch import load_file
        return {k: (v.float() if v.is_floating_point() else v) for k, v in load_file(path).items()}


def make_records(n, seed):
    """n records alternating rgb8 (uint8 HWC) and f32 (normalised CHW), as bytes."""
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        if i % 2 == 0:
            recs.append(("rgb8", rng.integers(0, 256, size=(224, 224, 3), dtype=np.uint8)))
        else:
            recs.append(("f32", rng.standard_normal((3, 224, 224), dtype=np.float32)))
    return recs


def to_chw(kind, arr):
    if kind == "rgb8":
        x = arr.astype(np.float32) / np.float32(255.0)
        x = (x - MEAN) / STD
        return x.transpose(2, 0, 1)
    return arr


def reference_logits(weights, recs, device, chunk=64):
    import torch
    import torchvision

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = torch.float64 if device == "cpu" else torch.float32
    model = torchvision.models.resnet50()
    model.load_state_dict(load_state_dict(weights), strict=True)
    model = model.to(device=device, dtype=dtype).eval()
    out = []
    with torch.no_grad():
        for s in range(0, len(recs), chunk):
            x = np.stack([to_chw(k, a) for k, a in recs[s:s + chunk]])
            t = torch.from_numpy(x).to(device=device, dtype=dtype)
            out.append(model(t).double().cpu().numpy())
    return np.concatenate(out)


def plan_max_batch(inferd, backend, precision, env, timeout):
    r = subprocess.run([inferd, "--plan", "--json", "--backend", backend, "--precision", precision],
                       capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"inferd-run --plan: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["max_batch"]


def top1_margin(row):
    order = np.argsort(row)[::-1]
    return int(order[0]), float(row[order[0]] - row[order[1]])


def compare(out, ref, tol):
    """Figures and the first failure (or None) of logits out against ref, (n, 1000) each."""
    rels, clear, agree, fail = [], 0, 0, None
    for i in range(ref.shape[0]):
        o, w = out[i].astype(np.float64), ref[i]
        if not np.all(np.isfinite(o)):
            fail = fail or f"image {i}: {int((~np.isfinite(o)).sum())} of 1000 logits are NaN/Inf"
            rels.append(float("inf"))
            continue
        rel = float(np.linalg.norm(o - w) / max(np.linalg.norm(w), 1e-30))
        rels.append(rel)
        if rel > tol and fail is None:
            fail = f"image {i} ({'rgb8' if i % 2 == 0 else 'f32'}): rel={rel:.2e} > {tol:.0e}"
        t, margin = top1_margin(w)
        if margin > 2 * tol * np.linalg.norm(w):
            clear += 1
            if int(np.argmax(o)) == t:
                agree += 1
    if fail is None and agree != clear:
        fail = f"top-1 differs on {clear - agree} of {clear} images with a clear margin"
    finite = [r for r in rels if np.isfinite(r)]
    return {"rel": max(rels) if rels else 0.0, "rel_mean": float(np.mean(finite)) if finite else None,
            "top1_clear": clear, "top1_agree": agree}, fail


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inferd", default="build/inferd-run")
    ap.add_argument("--weights", action="append", required=True,
                    help="FILE or FILE:fp32,fp16 (default: all three precisions); repeatable")
    ap.add_argument("--batches", default="1,3,64,max", help="batch sizes; 'max' is the plan's max_batch")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="where the torch reference runs")
    ap.add_argument("--backend", default="cuda", choices=("cuda", "cpu"), help="inferd's engine")
    ap.add_argument("--max-cap", type=int, default=0, help="cap 'max' (dry runs on a CPU)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--timeout", type=float, default=120, help="seconds per inferd-run call")
    ap.add_argument("--tol", action="append", default=[], metavar="P=X",
                    help="override the design's tolerance for precision P (e.g. bf16=5e-2)")
    ap.add_argument("--out", help="JSON results")
    args = ap.parse_args()
    for t in args.tol:
        p, _, x = t.partition("=")
        if p not in TOL or not 0 < float(x) < 1:
            ap.error(f"bad --tol {t}")
        TOL[p] = float(x)

    # inferd's programs find the libraries that gpu-check unpacked through
    # INFERD_LIB_PATH (OpenBLAS loads libgfortran by name); python does not.
    env = dict(os.environ)
    if os.environ.get("INFERD_LIB_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["INFERD_LIB_PATH"]
    results, failed = [], 0

    def report(status, rid, detail, figures=None):
        nonlocal failed
        line = f"{status} {rid}" + (f" {detail}" if status == "PASS" else f": {detail}")
        print(line, flush=True)
        results.append({"id": rid, "status": status.lower(), "detail": detail, "figures": figures or {}})
        failed += status == "FAIL"

    with tempfile.TemporaryDirectory(prefix="gpu-compare.") as tmp:
        for spec in args.weights:
            path, _, precs = spec.partition(":")
            precs = precs.split(",") if precs else ["fp32", "fp16", "bf16"]
            tag = os.path.basename(path).split(".")[0]
            # Batch sizes per precision (max differs), and the records for the largest.
            plans = {}
            for p in precs:
                try:
                    mb = plan_max_batch(args.inferd, args.backend, p, env, args.timeout)
                except Exception as e:  # noqa: BLE001 - any failure is reported, then the next one runs
                    report("FAIL", f"torch/{tag}/{p}/plan", str(e))
                    continue
                if args.max_cap:
                    mb = min(mb, args.max_cap)
                bs = []
                for b in args.batches.split(","):
                    b = mb if b == "max" else int(b)
                    if b <= mb and b not in bs:
                        bs.append(b)
                plans[p] = bs
            if not plans:
                continue
            n = max(max(b) for b in plans.values())
            recs = make_records(n, args.seed)
            files = []
            for i, (kind, arr) in enumerate(recs):
                f = os.path.join(tmp, f"in{i:04d}.{kind}")
                arr.tofile(f)
                files.append(f)
            t0 = time.time()
            try:
                ref = reference_logits(path, recs, args.device)
            except Exception as e:  # noqa: BLE001
                report("FAIL", f"torch/{tag}/reference", f"torchvision could not run on {path}: {e}")
                continue
            print(f"# {tag}: torchvision reference for {n} images on {args.device} in {time.time() - t0:.1f} s",
                  flush=True)
            for p, bs in plans.items():
                for b in bs:
                    rid = f"torch/{tag}/{p}/batch{b}"
                    lg = os.path.join(tmp, "logits.bin")
                    cmd = [args.inferd, "--weights", path, "--backend", args.backend, "--precision", p,
                           "--batch", str(b), "--logits", lg] + files[:b]
                    t0 = time.time()
                    try:
                        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                           timeout=args.timeout, env=env)
                    except subprocess.TimeoutExpired:
                        report("FAIL", rid, f"inferd-run took over {args.timeout:.0f} s")
                        continue
                    if r.returncode != 0:
                        report("FAIL", rid, f"inferd-run exited {r.returncode}: {r.stderr.strip()[-300:]}")
                        continue
                    out = np.fromfile(lg, dtype="<f4")
                    if out.size != b * 1000:
                        report("FAIL", rid, f"--logits wrote {out.size} floats, expected {b * 1000}")
                        continue
                    fig, fail = compare(out.reshape(b, 1000), ref[:b], TOL[p])
                    fig.update({"n": b, "seconds": round(time.time() - t0, 3), "reference": args.device})
                    if fail:
                        report("FAIL", rid, fail, fig)
                    else:
                        report("PASS", rid, f"rel={fig['rel']:.2e} top1={fig['top1_agree']}/{fig['top1_clear']}",
                               fig)

    if args.out:
        with open(args.out, "w") as f:
            json.dump({"results": results, "failed": failed, "tolerance": TOL}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
