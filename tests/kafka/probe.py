#!/usr/bin/python3
# The loop-never-waits tests' measures (issue 36):
#   probe.py URL STOPFILE [SECONDS]  GETs URL at 10 Hz until STOPFILE exists
#       (or SECONDS, 150 by default, pass), each answer's latency counted
#       (5 s for none), then prints the count, the p99 and the longest, in ms.
#   probe.py --lag FILE.prom  the loop's lag over the run from a scrape
#       (inferd_loop_lag_seconds, a timer every few ms): prints the bucket
#       bound that holds its p99.9, the one that holds its longest (ms), and
#       the count.
import os
import re
import sys
import time
import urllib.request


def lag(path):
    b = []
    for line in open(path):
        m = re.match(r'inferd_loop_lag_seconds_bucket\{le="([^"]+)"\} (\d+)', line)
        if m:
            b.append((float(m.group(1)), int(m.group(2))))
    n = b[-1][1] if b else 0
    inf = float("inf")
    p999 = next((le for le, c in b if c >= n * 0.999), inf) if n else inf
    top = next((le for le, c in b if c >= n), inf) if n else inf
    print(round(p999 * 1000, 3), round(top * 1000, 3), n)


def probe(url, stop, seconds):
    end = time.monotonic() + seconds
    lat = []
    while time.monotonic() < end and not os.path.exists(stop):
        t0 = time.monotonic()
        try:
            urllib.request.urlopen(url, timeout=5).read()
            lat.append(time.monotonic() - t0)
        except OSError:
            lat.append(5.0)
        time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
    lat = sorted(round(x * 1000) for x in lat) or [5000]
    print(len(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))], lat[-1])


if sys.argv[1] == "--lag":
    lag(sys.argv[2])
else:
    probe(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 150)
