#!/usr/bin/python3
"""gpu_bench: inferd's throughput and memory against PyTorch, on the GPU machine.

Three subcommands, each writing one JSON file, so that tools/gpu-check can
give each its own time limit and keep going when one fails:

  inferd   build/inferd-run --bench SECONDS --backend B --precision P --batch N
           for every precision and batch; the peak device memory of each run
           (nvidia-smi, sampled every 0.2 s: the process's own use when the
           driver lists it, else the device's use above the idle baseline)
           against `inferd-run --plan --json` at the same batch; and batch-1
           latency (median latency_ms of the prediction lines of
           `inferd-run --batch 1` over a few records).
  torch    torchvision resnet50 on the same weights: eager, channels_last,
           autocast fp16 (the usual production setting), then torch.compile
           (mode from --compile-mode) with a cap on the total compile time:
           batch sizes left when the cap is spent are recorded as skipped.
           Input already on the device and normalised (no H2D, no
           preprocessing: this favours PyTorch). Timed with CUDA events.
  smoke    both, tiny, on the CPU (--device cpu): exercises this file's logic
           on a machine without a GPU.

Figures only; nothing here passes or fails on speed. A run that does not
produce its figure (crash, timeout) is recorded with its error.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "golden"))


def ints(s):
    return [int(x) for x in s.split(",") if x]


SAVE = {"path": None, "doc": None}


def save():
    """Writes what is measured so far: a stage killed at its time limit keeps its figures."""
    if SAVE["path"] and SAVE["doc"] is not None:
        tmp = SAVE["path"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump(SAVE["doc"], f, indent=1)
        os.replace(tmp, SAVE["path"])


class MemSampler:
    """Peak device memory of one process while it runs, from nvidia-smi."""

    def __init__(self, pid):
        self.pid, self.peak_proc, self.peak_dev, self.stop = pid, 0, 0, threading.Event()
        self.baseline = device_used_mib()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            for line in smi(["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]):
                parts = [p.strip() for p in line.split(",")]
                if len(parts) == 2 and parts[0] == str(self.pid) and parts[1].isdigit():
                    self.peak_proc = max(self.peak_proc, int(parts[1]))
            d = device_used_mib()
            if d is not None:
                self.peak_dev = max(self.peak_dev, d)
            self.stop.wait(0.2)

    def finish(self):
        self.stop.set()
        self.thread.join()
        mib = 1 << 20
        out = {"peak_process_bytes": self.peak_proc * mib or None}
        if self.baseline is not None and self.peak_dev:
            out["peak_device_above_idle_bytes"] = (self.peak_dev - self.baseline) * mib
        return out


def smi(args):
    if not shutil.which("nvidia-smi"):
        return []
    try:
        r = subprocess.run(["nvidia-smi"] + args, capture_output=True, text=True, timeout=10)
        return r.stdout.strip().splitlines() if r.returncode == 0 else []
    except (subprocess.TimeoutExpired, OSError):
        return []


def device_used_mib():
    lines = smi(["--query-gpu=memory.used", "--format=csv,noheader,nounits"])
    return int(lines[0]) if lines and lines[0].strip().isdigit() else None


def inferd_env():
    """The environment of inferd's programs: gpu-check's unpacked libraries
    (INFERD_LIB_PATH, through which OpenBLAS finds libgfortran), not python's."""
    env = dict(os.environ)
    if os.environ.get("INFERD_LIB_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["INFERD_LIB_PATH"]
    return env


def run_json(cmd, timeout, sample=False):
    """Runs cmd; returns (last JSON line of stdout or None, error or None, memory figures)."""
    t0 = time.time()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=inferd_env())
    except OSError as e:
        return None, str(e), {}
    sampler = MemSampler(p.pid) if sample else None
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return None, f"timed out after {timeout:.0f} s", sampler.finish() if sampler else {}
    mem = sampler.finish() if sampler else {}
    mem["wall_seconds"] = round(time.time() - t0, 3)
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {err.strip()[-300:]}", mem
    for line in reversed(out.strip().splitlines()):
        try:
            return json.loads(line), None, mem
        except ValueError:
            continue
    return None, "no JSON line in the output", mem


def bench_inferd(args, res=None):
    res = {} if res is None else res
    res.update({"runs": [], "plans": [], "latency": []})
    for p in args.precisions.split(","):
        for b in ints(args.batches):
            base = [args.inferd, "--backend", args.backend, "--precision", p, "--batch", str(b)]
            plan, perr, _ = run_json(base + ["--plan", "--json"], 30)
            cmd = base + ["--bench", str(args.seconds)] + (["--weights", args.weights] if args.weights else [])
            out, err, mem = run_json(cmd, args.timeout, sample=True)
            row = {"precision": p, "batch": b, "error": err}
            if out:
                row.update({"images_per_second": out.get("images_per_second"), "effective_batch": out.get("batch"),
                            "ms_per_batch": 1e3 * out["batch"] / out["images_per_second"]
                            if out.get("images_per_second") else None, "raw": out})
            row.update(mem)
            if plan:
                row["plan_total_bytes"] = plan.get("total_bytes")
                row["plan_max_batch"] = plan.get("max_batch")
                peak = row.get("peak_process_bytes") or row.get("peak_device_above_idle_bytes")
                if peak and plan.get("total_bytes"):
                    row["measured_over_plan"] = round(peak / plan["total_bytes"], 4)
            elif perr:
                row["plan_error"] = perr
            res["runs"].append(row)
            save()
            print(f"# inferd {p} batch {b}: {row.get('images_per_second')} img/s"
                  f" peak {row.get('peak_process_bytes') or row.get('peak_device_above_idle_bytes')} B"
                  f" plan {row.get('plan_total_bytes')} B {err or ''}", flush=True)
        plan, perr, _ = run_json([args.inferd, "--plan", "--json", "--backend", args.backend, "--precision", p], 30)
        res["plans"].append({"precision": p, "plan": plan, "error": perr})
        res["latency"].append(latency(args, p))
        save()
    return res


def latency(args, p):
    """Median latency_ms of single-record batches through the whole program."""
    import numpy as np

    n = args.latency_records
    with tempfile.TemporaryDirectory(prefix="gpu-bench.") as tmp:
        rng = np.random.default_rng(5)
        files = []
        for i in range(n):
            f = os.path.join(tmp, f"r{i}.rgb8")
            rng.integers(0, 256, size=224 * 224 * 3, dtype=np.uint8).tofile(f)
            files.append(f)
        cmd = [args.inferd, "--backend", args.backend, "--precision", p, "--batch", "1"]
        cmd += (["--weights", args.weights] if args.weights else []) + files
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=inferd_env())
        except subprocess.TimeoutExpired:
            return {"precision": p, "error": "timed out"}
    if r.returncode != 0:
        return {"precision": p, "error": f"exit {r.returncode}: {r.stderr.strip()[-300:]}"}
    lat = []
    for line in r.stdout.splitlines():
        try:
            lat.append(float(json.loads(line)["latency_ms"]))
        except (ValueError, KeyError, TypeError):
            pass
    if not lat:
        return {"precision": p, "error": "no latency_ms in the prediction lines"}
    # The first records pay for warm-up; keep the second half.
    steady = lat[len(lat) // 2:]
    out = {"precision": p, "records": len(lat), "median_ms": statistics.median(steady), "max_ms": max(steady)}
    print(f"# inferd {p} batch-1 latency: median {out['median_ms']:.3f} ms over {len(steady)} records", flush=True)
    return out


def torch_model(weights, device):
    import torch
    import torchvision

    model = torchvision.models.resnet50()
    if weights:
        import st_read
        model.load_state_dict(st_read.load(weights), strict=True)
    return model.to(device).eval().to(memory_format=torch.channels_last)


def time_model(fn, x, seconds, device):
    """(images/s, median ms per batch) of fn(x) run for about `seconds`."""
    import torch

    for _ in range(3):
        fn(x)
    if device == "cuda":
        torch.cuda.synchronize()
    times = []
    t_end = time.time() + seconds
    while time.time() < t_end or len(times) < 5:
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(x)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn(x)
            times.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(times)
    return x.shape[0] * 1e3 / med, med


def bench_torch(args, res=None):
    import torch

    dev = args.device
    if dev == "cuda":
        torch.backends.cudnn.benchmark = True
    res = {} if res is None else res
    res.update({"torch": torch.__version__, "device": dev, "eager": [], "compile": [], "compile_mode": args.compile_mode,
           "precision": "fp16 autocast, channels_last" if dev == "cuda" else "fp32 on the CPU, channels_last"})
    model = torch_model(args.weights, dev)
    dtype = torch.float16 if dev == "cuda" else torch.bfloat16

    def eager(x):
        with torch.inference_mode(), torch.autocast(dev, dtype=dtype, enabled=dev == "cuda"):
            return model(x)

    for b in ints(args.batches):
        x = torch.randn(b, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
        try:
            ips, ms = time_model(eager, x, args.seconds, dev)
            res["eager"].append({"batch": b, "images_per_second": ips, "ms_per_batch": ms})
            print(f"# torch eager batch {b}: {ips:.1f} img/s, {ms:.3f} ms/batch", flush=True)
        except Exception as e:  # noqa: BLE001 - recorded, then the next size runs
            res["eager"].append({"batch": b, "error": str(e)[-300:]})
        save()
        if dev == "cuda":
            torch.cuda.empty_cache()

    if not hasattr(torch, "compile") or args.compile_budget <= 0:
        res["compile_error"] = "torch.compile is not available" if not hasattr(torch, "compile") else "disabled"
        return res
    spent = 0.0
    # The largest batch first (throughput), then the smallest (latency): the
    # budget may run out before the rest.
    order = sorted(ints(args.batches))
    order = order[-1:] + order[:-1]
    for b in order:
        if spent >= args.compile_budget:
            res["compile"].append({"batch": b, "error": f"skipped: the {args.compile_budget:.0f} s compile budget is spent"})
            continue
        x = torch.randn(b, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
        try:
            torch._dynamo.reset()
            cm = torch.compile(model, mode=args.compile_mode, dynamic=False)

            def compiled(x, cm=cm):
                with torch.inference_mode(), torch.autocast(dev, dtype=dtype, enabled=dev == "cuda"):
                    return cm(x)

            t0 = time.time()
            compiled(x)
            if dev == "cuda":
                torch.cuda.synchronize()
            ct = time.time() - t0
            spent += ct
            ips, ms = time_model(compiled, x, args.seconds, dev)
            res["compile"].append({"batch": b, "images_per_second": ips, "ms_per_batch": ms, "compile_seconds": ct})
            print(f"# torch.compile batch {b}: {ips:.1f} img/s, {ms:.3f} ms/batch (compiled in {ct:.0f} s)",
                  flush=True)
        except Exception as e:  # noqa: BLE001
            res["compile"].append({"batch": b, "error": str(e)[-300:]})
        save()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("inferd", "torch", "smoke"))
    ap.add_argument("--inferd", default="build/inferd-run")
    ap.add_argument("--weights", help="safetensors file (inferd-run and torch load the same)")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--precisions", default="fp32,fp16,bf16")
    ap.add_argument("--batches", default="1,32,256")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--timeout", type=float, default=60, help="seconds per inferd-run call")
    ap.add_argument("--latency-records", type=int, default=40)
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode (max-autotune-no-cudagraphs compiles for minutes)")
    ap.add_argument("--compile-budget", type=float, default=100, help="seconds of compiling in all")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    res = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    SAVE["path"], SAVE["doc"] = args.out, res
    if args.what == "smoke":
        args.backend, args.device, args.precisions = "cpu", "cpu", "fp32"
        args.seconds, args.latency_records, args.compile_budget = min(args.seconds, 0.5), 4, 0
        res["inferd"], res["torch"] = {}, {}
        bench_inferd(args, res["inferd"])
        bench_torch(args, res["torch"])
    elif args.what == "inferd":
        bench_inferd(args, res)
    else:
        bench_torch(args, res)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
