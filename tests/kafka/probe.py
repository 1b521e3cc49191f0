#!/usr/bin/python3
# probe.py URL STOPFILE [SECONDS]: GETs URL at 10 Hz until STOPFILE exists
# (or SECONDS, 150 by default, pass), each answer's latency counted (5 s for
# none), then prints the count, the p99 and the longest, in ms. The /livez
# prober of the loop-never-waits tests (issue 36).
import os
import sys
import time
import urllib.request

url, stop = sys.argv[1], sys.argv[2]
end = time.monotonic() + (float(sys.argv[3]) if len(sys.argv) > 3 else 150)
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
