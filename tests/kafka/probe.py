#!/usr/bin/python3
# The loop-never-waits tests' measures (issue 36):
#   probe.py URL STOPFILE [SECONDS]  GETs URL at 10 Hz until STOPFILE exists
#       (or SECONDS, 150 by default, pass), each answer's latency counted
#       (5 s for none), then prints the count, the p99 and the longest, in ms.
#   probe.py --until-gone URL STOPFILE [SECONDS]  the same, and it stops at
#       the first refused connection after an answer: the daemon has closed
#       its endpoint to exit (a test that probes through the end of a drain).
#       A loop that does not turn still accepts connections (the kernel's
#       backlog) and answers none: those count 5 s, as above.
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


def probe(url, stop, seconds, until_gone=False):
    end = time.monotonic() + seconds
    lat = []
    while time.monotonic() < end and not os.path.exists(stop):
        t0 = time.monotonic()
        try:
            urllib.request.urlopen(url, timeout=5).read()
            lat.append(time.monotonic() - t0)
        except OSError as e:
            refused = isinstance(getattr(e, 'reason', e), ConnectionRefusedError)
            if until_gone and refused and lat:
                break
            lat.append(5.0)
        time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
    lat = sorted(round(x * 1000) for x in lat) or [5000]
    print(len(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))], lat[-1])


if sys.argv[1] == "--lag":
    lag(sys.argv[2])
else:
    gone = sys.argv[1] == "--until-gone"
    a = sys.argv[2:] if gone else sys.argv[1:]
    probe(a[0], a[1], float(a[2]) if len(a) > 2 else 150, gone)
