#!/usr/bin/env python3
"""gpu_embedding: inferd-run's embeddings (issue 40) against torchvision's penultimate features.

tools/gpu-check's embedding stage. For each precision asked, inferd-run
--embedding-only --embeddings OUT runs over a few records (rgb8 and float32
alternating, gpu_compare.make_records) in batches that fill a bucket and
batches that pad one; OUT (N x 2048 float32) is held against torchvision's
ResNet-50 with fc = Identity() on the same weights (float64 on the CPU,
float32 on a GPU): rel L2 per image within the design's whole-network
tolerance (fp32 1e-4, fp16 and bf16 2e-2, gpu_compare.TOL). The CUDA head
writes these features from its global average pool (cuda/pool.cu); the
output file is poisoned with NaN first, so an unwritten row fails. With
--normalize l2 every row must also have norm 1.

Prints one PASS/FAIL line per (precision, batch) and writes a JSON summary
(--out). Exit status 0 only when every check passed. The dry run (gpu-check
with GPU_CHECK_DEVICE=cpu) runs it on the CPU engine in fp32.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_compare  # noqa: E402  (beside this file)


def reference_features(weights, recs, device):
    import torch
    import torchvision

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = torch.float64 if device == "cpu" else torch.float32
    model = torchvision.models.resnet50()
    model.load_state_dict(gpu_compare.load_state_dict(weights), strict=True)
    model.fc = torch.nn.Identity()
    model = model.to(device=device, dtype=dtype).eval()
    x = np.stack([gpu_compare.to_chw(k, a) for k, a in recs])
    with torch.no_grad():
        return model(torch.from_numpy(x).to(device=device, dtype=dtype)).double().cpu().numpy()


def run(inferd, weights, backend, precision, batch, normalize, paths, tmp):
    out = os.path.join(tmp, "emb.f32")
    np.full(len(paths) * 2048, np.nan, dtype="<f4").tofile(out)
    cmd = [inferd, "--weights", weights, "--backend", backend, "--precision", precision, "--batch", str(batch),
           "--embedding-only", "--embedding-normalize", normalize, "--embeddings", out] + paths
    # inferd-run gets INFERD_LIB_PATH (gpu-check's unpacked libraries); python does not.
    env = dict(os.environ)
    if os.environ.get("INFERD_LIB_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["INFERD_LIB_PATH"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if r.returncode != 0:
        return None, f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
    raw = np.fromfile(out, dtype="<f4")
    if raw.size != len(paths) * 2048:
        return None, f"{raw.size} floats written, want {len(paths) * 2048}"
    return raw.astype(np.float64).reshape(len(paths), 2048), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inferd", required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--device", default="cuda", help="torch's device for the reference")
    ap.add_argument("--precisions", default="fp16,bf16,fp32")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--records", type=int, default=5)
    ap.add_argument("--normalize", default="none", choices=["none", "l2"])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    recs = gpu_compare.make_records(a.records, 11)
    results, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, (kind, arr) in enumerate(recs):
            p = os.path.join(tmp, f"r{i}.{'rgb' if kind == 'rgb8' else 'f32'}")
            (arr if kind == "rgb8" else arr.astype("<f4")).tofile(p)
            paths.append(p)
        ref = reference_features(a.weights, recs, a.device)
        if a.normalize == "l2":
            ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
        for prec in a.precisions.split(","):
            tol = gpu_compare.TOL[prec]
            for batch in (int(b) for b in a.batches.split(",")):
                rid = f"gpu/embedding/{a.backend}-{prec}-b{batch}"
                out, why = run(a.inferd, a.weights, a.backend, prec, batch, a.normalize, paths, tmp)
                rels = []
                if out is not None:
                    rels = [float(np.linalg.norm(out[i] - ref[i]) / np.linalg.norm(ref[i])) for i in range(len(recs))]
                    bad = [i for i, r in enumerate(rels) if not r <= tol]
                    if bad:
                        why = f"image {bad[0]}: rel L2 {rels[bad[0]]:.2e} > {tol:.0e}"
                    elif a.normalize == "l2" and not np.allclose(np.linalg.norm(out, axis=1), 1, atol=1e-5):
                        why = "a row's norm is not 1"
                status = "fail" if why else "pass"
                failed += status == "fail"
                print(f"{status.upper()} {rid}: " + (why or f"{len(recs)} images, rel L2 max {max(rels):.2e} "
                      f"(tol {tol:.0e}) against torchvision's fc = Identity()"), flush=True)
                results.append({"id": rid, "status": status, "detail": why,
                                "rel_max": max(rels) if rels else None, "tol": tol})
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"results": results}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
