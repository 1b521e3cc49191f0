#!/usr/bin/python3
"""gpu_report: the last step of tools/gpu-check: one JSON and one table.

It reads what the stages left in the work folder (stages.tsv, gpu.csv,
compare.json, bench-inferd.json, bench-torch.json) and the GPU tests' JSON,
writes everything into one JSON file (--out), and prints a compact markdown
table, ready for docs/perf.md: date, GPU, driver, stage status, check counts,
throughput, batch-1 latency and planned against measured memory. A missing
or broken input is shown as such, never hidden. Exit status 1 when a stage
failed or any check failed.

It measures nothing itself.
"""

import argparse
import json
import os
import sys
import time


def load(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return None, str(e)


def fmt_ips(x):
    return f"{x:,.0f}" if isinstance(x, (int, float)) else "—"


def fmt_ms(x):
    return f"{x:.2f}" if isinstance(x, (int, float)) else "—"


def fmt_ratio(x):
    return f"{x:.3f}" if isinstance(x, (int, float)) else "—"


def gib(x):
    return f"{x / 2**30:.2f} GiB" if isinstance(x, (int, float)) else "—"


def issue13_table(tests, work, tests_dir, bad):
    """The answers of the first GPU run to issue 13: a lost context (item 2),
    the residual through C against the add-ReLU fallback (6), the conv
    biases' type (8), the kernels under a 64-block grid and the padding row
    (9), the GEMM plans (1) and compute-sanitizer's memcheck."""
    # The dry run's ids are the self-test's ("gpu-selftest/..."): read those
    # there, so that the table is exercised without a GPU too.
    results = (tests or {}).get("results", [])
    pre = "gpu-selftest" if results and all(r["id"].startswith("gpu-selftest/") for r in results) else "gpu"
    by_id = {"gpu/" + r["id"].split("/", 1)[1]: r for r in results if r["id"].startswith(pre + "/")}
    lines = ["| issue 13 | fp32 | fp16 | bf16 |", "| --- | --- | --- | --- |"]

    def status(p, suffix):
        r = by_id.get(f"gpu/{p}/{suffix}")
        if not r:
            return "—"
        return r["status"].upper() + (f" ({r['detail'][:60]})" if r["status"] != "pass" and r["detail"] else "")

    def cap64(p):
        rs = [r for i, r in by_id.items() if i.startswith(f"gpu/{p}/cap64/")]
        if not rs:
            return "—"
        ok = sum(r["status"] == "pass" for r in rs)
        return f"{ok}/{len(rs)} pass"

    def opened(p, key):
        f = (by_id.get(f"gpu/{p}/open") or {}).get("figures") or {}
        return f.get(key)

    ps = ("fp32", "fp16", "bf16")
    lines.append("| 6: residual fused (C, beta 1, RELU_BIAS) | " + " | ".join(status(p, "residual/fused") for p in ps) + " |")
    lines.append("| 6: residual, BIAS + add-ReLU kernel | " + " | ".join(status(p, "residual/kernel") for p in ps) + " |")
    lines.append("| 8: convs with an fp32 bias | " + " | ".join(
        f"{opened(p, 'convs_bias_fp32')}/{opened(p, 'convs')}" if opened(p, "convs") else "—" for p in ps) + " |")
    lines.append("| 9: kernels under a 64-block grid | " + " | ".join(cap64(p) for p in ps) + " |")
    lines.append("| 9: padding row exactly 0 | " + " | ".join(status(p, "layer/preprocess-padding") for p in ps) + " |")
    lines.append("| 1: GEMM plans (algorithm fallbacks) | " + " | ".join(
        f"{opened(p, 'gemm_plans')} ({opened(p, 'gemm_algo_fallbacks')})" if opened(p, "gemm_plans") is not None
        else "—" for p in ps) + " |")
    lost = (tests or {}).get("context_lost")
    memcheck = "not run"
    try:
        with open(os.path.join(work, "memcheck.summary")) as f:
            memcheck = f.read().strip() or "no summary line"
    except OSError:
        pass
    lines += ["", f"2: device context lost: {lost or 'no'}; memcheck (inferd-run fp16 batch 3): {memcheck}"]
    # The fallbacks stage (only when gpu-tests pointed at them).
    fb, _ = load(os.path.join(tests_dir, "gpu-tests-fallbacks.json"))
    if fb:
        lines.append(f"fallbacks (gpu-tests --quick with the env of stages/fallbacks.log): {fb.get('passed')} passed,"
                     f" {fb.get('failed')} failed, {fb.get('skipped')} skipped")
    lines.append("")
    if lost:
        bad.append(f"gpu-tests: {lost}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, help="the folder of the stages' outputs")
    ap.add_argument("--gpu-tests", required=True, help="gpu-tests --json output")
    ap.add_argument("--out", required=True, help="the merged JSON")
    ap.add_argument("--md", help="also write the table here")
    args = ap.parse_args()

    doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "stages": [], "inputs": {}}
    bad = []

    # Stages: name, exit status, seconds, note.
    try:
        with open(os.path.join(args.work, "stages.tsv")) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 3:
                    st = {"stage": parts[0], "rc": int(parts[1]), "seconds": float(parts[2]),
                          "note": parts[3] if len(parts) > 3 else ""}
                    doc["stages"].append(st)
                    if st["rc"] != 0:
                        bad.append(f"stage {st['stage']} exited {st['rc']} {st['note']}".strip())
    except OSError as e:
        bad.append(f"no stages.tsv: {e}")

    gpu = {}
    try:
        with open(os.path.join(args.work, "gpu.csv")) as f:
            name, driver, mem = [x.strip() for x in f.readline().split(",")][:3]
            gpu = {"name": name, "driver": driver, "memory_mib": mem}
    except (OSError, ValueError):
        gpu = {"name": "unknown (nvidia-smi gave nothing)", "driver": "?", "memory_mib": "?"}
    doc["gpu"] = gpu
    try:
        with open(os.path.join(args.work, "commit")) as f:
            doc["commit"] = f.read().strip()
    except OSError:
        doc["commit"] = "?"

    tests, err = load(args.gpu_tests)
    doc["inputs"]["gpu_tests"] = tests if tests else {"error": err}
    compare, cerr = load(os.path.join(args.work, "compare.json"))
    doc["inputs"]["compare"] = compare if compare else {"error": cerr}
    binf, berr = load(os.path.join(args.work, "bench-inferd.json"))
    doc["inputs"]["bench_inferd"] = binf if binf else {"error": berr}
    btor, terr = load(os.path.join(args.work, "bench-torch.json"))
    doc["inputs"]["bench_torch"] = btor if btor else {"error": terr}

    md = [f"### GPU check {doc['date']}: {gpu['name']}, driver {gpu['driver']}, {gpu['memory_mib']} MiB,"
          f" inferd {doc['commit']}", ""]

    # Checks.
    md += ["| checks | passed | failed | skipped | worst |", "| --- | --- | --- | --- | --- |"]
    if tests:
        worst = {}
        for r in tests.get("results", []):
            rel = (r.get("figures") or {}).get("rel")
            p = r["id"].split("/")[1] if r["id"].count("/") >= 2 else "?"
            if isinstance(rel, (int, float)) and rel >= 0:
                worst[p] = max(worst.get(p, 0), rel)
            if r["status"] == "fail":
                bad.append(f"{r['id']}: {r['detail']}")
        w = ", ".join(f"{p} rel {v:.1e}" for p, v in sorted(worst.items()))
        md.append(f"| gpu-tests (layers, network vs CPU engine, memory) | {tests.get('passed')} |"
                  f" {tests.get('failed')} | {tests.get('skipped')} | {w or '—'} |")
    else:
        md.append(f"| gpu-tests | — | — | — | no results: {err} |")
        bad.append(f"gpu-tests: no results ({err})")
    if compare:
        rs = compare.get("results", [])
        worst = {}
        for r in rs:
            p = r["id"].split("/")[2] if r["id"].count("/") >= 3 else "?"
            rel = (r.get("figures") or {}).get("rel")
            if isinstance(rel, (int, float)):
                worst[p] = max(worst.get(p, 0), rel)
            if r["status"] == "fail":
                bad.append(f"{r['id']}: {r['detail']}")
        w = ", ".join(f"{p} rel {v:.1e}" for p, v in sorted(worst.items()))
        md.append(f"| inferd-run vs torchvision | {sum(r['status'] == 'pass' for r in rs)} |"
                  f" {sum(r['status'] == 'fail' for r in rs)} | {sum(r['status'] == 'skip' for r in rs)} |"
                  f" {w or '—'} |")
    else:
        md.append(f"| inferd-run vs torchvision | — | — | — | no results: {cerr} |")
        bad.append(f"compare: no results ({cerr})")
    # Your own model: resnet18/10 and resnet101, one quick run each (stage archs).
    tests_dir = os.path.dirname(os.path.abspath(args.gpu_tests))
    for arch in ("resnet18", "resnet101"):
        at, aerr = load(os.path.join(tests_dir, f"gpu-tests-{arch}.json"))
        ab, _ = load(os.path.join(args.work, f"bench-{arch}.json"))
        doc["inputs"][f"gpu_tests_{arch}"] = at if at else {"error": aerr}
        doc["inputs"][f"bench_{arch}"] = ab
        ips = fmt_ips((ab or {}).get("images_per_second"))
        if at:
            worst = max([(r.get("figures") or {}).get("rel", 0) or 0 for r in at.get("results", [])] or [0])
            for r in at.get("results", []):
                if r["status"] == "fail":
                    bad.append(f"{r['id']}: {r['detail']}")
            md.append(f"| gpu-tests {arch} (quick; {ips} images/s at batch {(ab or {}).get('batch', '—')}) | {at.get('passed')} |"
                      f" {at.get('failed')} | {at.get('skipped')} | rel {worst:.1e} |")
        else:
            md.append(f"| gpu-tests {arch} | — | — | — | no results: {aerr} |")
            bad.append(f"gpu-tests {arch}: no results ({aerr})")
    md.append("")

    # Issue 13's open questions, answered by gpu-tests and the sanitizer.
    md += issue13_table(tests, args.work, os.path.dirname(os.path.abspath(args.gpu_tests)), bad)

    # Throughput.
    batches = sorted({r["batch"] for r in (binf or {}).get("runs", [])} |
                     {r["batch"] for r in (btor or {}).get("eager", [])})
    if batches:
        md += ["| images/s | " + " | ".join(f"batch {b}" for b in batches) + " |",
               "| --- |" + " --- |" * len(batches)]
        for p in ("fp32", "fp16", "bf16"):
            row = {r["batch"]: r for r in (binf or {}).get("runs", []) if r["precision"] == p}
            if row:
                md.append(f"| inferd {p} | " + " | ".join(
                    fmt_ips(row.get(b, {}).get("images_per_second")) for b in batches) + " |")
        tp = (btor or {}).get("precision", "?")
        for key, label in (("eager", f"PyTorch eager ({tp})"),
                           ("compile", f"torch.compile {(btor or {}).get('compile_mode', '?')} ({tp})")):
            row = {r["batch"]: r for r in (btor or {}).get(key, [])}
            if row:
                md.append(f"| {label} | " + " | ".join(
                    fmt_ips(row.get(b, {}).get("images_per_second")) for b in batches) + " |")
        md.append("")
    else:
        md += [f"no throughput figures (inferd: {berr or 'none'}; torch: {terr or 'none'})", ""]

    # Batch-1 latency.
    lat = {x["precision"]: x for x in (binf or {}).get("latency", [])}
    e1 = next((r for r in (btor or {}).get("eager", []) if r["batch"] == 1), {})
    c1 = next((r for r in (btor or {}).get("compile", []) if r["batch"] == 1), {})
    md += ["| batch-1 latency, ms | inferd fp32 | inferd fp16 | inferd bf16 | PyTorch eager fp16 | torch.compile fp16 |",
           "| --- | --- | --- | --- | --- | --- |",
           "| median (inferd: latency_ms of inferd-run --batch 1; PyTorch: one forward, events) | " +
           " | ".join(fmt_ms(lat.get(p, {}).get("median_ms")) for p in ("fp32", "fp16", "bf16")) +
           f" | {fmt_ms(e1.get('ms_per_batch'))} | {fmt_ms(c1.get('ms_per_batch'))} |", ""]

    # Memory: plan against measured.
    md += ["| memory | plan total (max_batch) | gpu-tests: used after open | ratio |"
           " bench peak at the largest batch | plan at that batch | ratio |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    mem_tests = {}
    for r in (tests or {}).get("results", []):
        if r["id"].endswith("/mem/plan"):
            mem_tests[r["id"].split("/")[1]] = r.get("figures") or {}
    for p in ("fp32", "fp16", "bf16"):
        plan = next((x.get("plan") for x in (binf or {}).get("plans", []) if x["precision"] == p), None) or {}
        runs = [r for r in (binf or {}).get("runs", []) if r["precision"] == p]
        big = max(runs, key=lambda r: r["batch"]) if runs else {}
        peak = big.get("peak_process_bytes") or big.get("peak_device_above_idle_bytes")
        mt = mem_tests.get(p, {})
        md.append(f"| {p} | {gib(plan.get('total_bytes'))} ({plan.get('max_batch', '—')}) |"
                  f" {gib(mt.get('used_bytes'))} | {fmt_ratio(mt.get('ratio'))} |"
                  f" {gib(peak)} | {gib(big.get('plan_total_bytes'))} | {big.get('measured_over_plan', '—')} |")
    md.append("")

    # Stages.
    md.append("stages: " + ", ".join(f"{s['stage']} {'ok' if s['rc'] == 0 else 'FAILED'} {s['seconds']:.0f}s"
                                     for s in doc["stages"]))
    doc["failures"] = bad
    doc["ok"] = not bad
    md.append(f"result: {'all checks passed' if not bad else str(len(bad)) + ' failure(s): ' + '; '.join(bad[:5])}")

    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    text = "\n".join(md) + "\n"
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
