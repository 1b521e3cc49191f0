#!/usr/bin/python3
"""The Grafana dashboard's queries, for tests/deploy.

  dashboard.py rules FILE     every panel's PromQL as a Prometheus recording
                              rule (Grafana's variables replaced by what they
                              expand to), for `promtool check rules`
  dashboard.py metrics FILE   the metric names the queries use, one a line
                              (a histogram's _bucket/_sum/_count as its name)
  dashboard.py check FILE     the panels docs/kubernetes.md lists, each with a
                              description; the datasource and instance
                              variables, used by every query
"""
import json
import re
import sys

# What Grafana puts in place of its variables before Prometheus sees the query.
EXPAND = [("$__rate_interval", "1m"), ("$__interval", "1m"), ("$__range", "6h"),
          ('=~"$job"', '=~".+"'), ('=~"$instance"', '=~".+"'), ('=~"$stage"', '=~".+"')]
# Words of PromQL that look like metric names but are not.
KEYWORDS = {"sum", "max", "min", "avg", "by", "without", "rate", "increase", "changes",
            "histogram_quantile", "count", "on", "ignoring", "group_left", "group_right",
            "and", "or", "unless", "bool", "offset", "le", "topk", "bottomk", "irate", "delta", "deriv"}


def targets(dash):
    for p in dash["panels"]:
        for t in p.get("targets", []):
            yield p, t


def expand(expr):
    for a, b in EXPAND:
        expr = expr.replace(a, b)
    return expr


def names(expr):
    """Metric names: identifiers outside braces, quotes and label lists."""
    e = re.sub(r'"[^"]*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    out = set()
    for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        if w in KEYWORDS or w.startswith("__"):
            continue
        out.add(re.sub(r"_(bucket|sum|count)$", "", w))
    return out


def main():
    mode, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        dash = json.load(f)
    if mode == "rules":
        print("groups:\n  - name: inferd_dashboard\n    rules:")
        for n, (p, t) in enumerate(targets(dash)):
            print(f"      - record: inferd_dashboard:q{n}")
            print(f"        expr: {json.dumps(expand(t['expr']))}")
    elif mode == "metrics":
        out = set()
        for _, t in targets(dash):
            out |= names(t["expr"])
        print("\n".join(sorted(out)))
    elif mode == "check":
        problems = []
        want = {  # what the issue lists -> the metrics that show it
            "GPU memory used against total, with the 80% line": ["inferd_gpu_memory_used_bytes", "0.8 * inferd_gpu_memory_total_bytes"],
            "consumer lag in records, per partition": ["inferd_consumer_lag_records"],
            "consumer lag in seconds, per partition": ["inferd_consumer_lag_seconds"],
            "predictions per second": ['inferd_records_total{job=~"$job", instance=~"$instance", outcome="predicted"}'],
            "DLQ records per second, by code": ["inferd_dead_letters_total", "code"],
            "batch size heatmap": ["inferd_batch_size_bucket"],
            "stage latency heatmap": ["inferd_stage_duration_seconds_bucket", 'stage=~"$stage"'],
            "record latency heatmap": ["inferd_record_latency_seconds_bucket"],
            "the plan's terms against the budget": ["inferd_plan_bytes", "inferd_plan_budget_bytes"],
            "state": ["inferd_state"],
            "reloads and swaps": ["inferd_reloads_total", "inferd_model_swaps_total"],
            "restarts": ["process_start_time_seconds"],
        }
        panels = [p for p in dash["panels"] if p["type"] != "row"]
        for what, needles in want.items():
            found = [p for p in panels if all(any(n in t["expr"] for t in p.get("targets", [])) for n in needles)]
            if not found:
                problems.append(f"no panel shows {what} ({', '.join(needles)})")
            for p in found:
                if "heatmap" in what and p["type"] != "heatmap":
                    problems.append(f"panel '{p['title']}' ({what}) is a {p['type']}, not a heatmap")
        for p in panels:
            if len(p.get("description", "")) < 80 or "Bad" not in p.get("description", ""):
                problems.append(f"panel '{p['title']}' has no description of what a bad shape means")
            if p.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"panel '{p['title']}' does not use the datasource variable")
            for t in p.get("targets", []):
                if 'instance=~"$instance"' not in t["expr"]:
                    problems.append(f"a query of panel '{p['title']}' does not select instance=~\"$instance\": {t['expr']}")
        variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
        if variables.get("datasource", {}).get("type") != "datasource":
            problems.append("no datasource variable")
        inst = variables.get("instance", {})
        if inst.get("type") != "query" or not inst.get("multi"):
            problems.append("no multi-valued instance variable (blue and green side by side)")
        ids = [p["id"] for p in dash["panels"]]
        if len(ids) != len(set(ids)):
            problems.append("two panels share an id")
        for p in problems:
            print(p)
        sys.exit(1 if problems else 0)
    else:
        sys.exit(f"usage: {sys.argv[0]} rules|metrics|check FILE")


if __name__ == "__main__":
    main()
