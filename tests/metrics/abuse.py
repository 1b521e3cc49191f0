"""Attacks on the metrics endpoint by clients without credentials, for
tests/metrics/run (metrics/abuse-*) and tools/bench-http-abuse. Loopback
only: 127.0.0.2, 127.0.0.3 ... serve as distinct source addresses. Every
loop is bounded in time (SECONDS) and in count. Never prints a password.

    abuse.py probe PORT PATH SECONDS [RATE [tls]]
        GET PATH RATE times a second (default 10) from 127.0.0.1 for SECONDS
        (with tls: over HTTPS, no certificate check), a new connection each;
        prints "n=<N> ok=<2xx/3xx/4xx/5xx answers> fail=<none> p50_ms= p99_ms= max_ms="
    abuse.py flood PORT USER SECONDS CLIENTS
        CLIENTS threads, each from its own address, send GET /metrics with USER
        and a wrong password as fast as the server answers (a new connection
        when it closes one); prints "requests=<N> 401=<n> 429=<n> 503=<n> other=<n>"
    abuse.py slowloris PORT ADDRS CONNS INTERVAL_S SECONDS
        ADDRS addresses x CONNS connections each, sending one byte of a request
        header every INTERVAL_S, reconnecting when closed; prints
        "opened=<N> closed_by_server=<n> first_close_s=<s>"
    abuse.py tls PORT RATE SECONDS
        RATE TLS handshakes a second (no certificate check, no credentials, from
        16 addresses in turn), each closed once done or refused; prints
        "tried=<N> handshakes=<n> refused=<n>"
    abuse.py rate PORT USER PASSWORD_ENV SECONDS [tls]
        the pipeline's predictions a second over SECONDS, from two scrapes of
        /metrics as USER (whose password is in that env var) on one
        connection kept alive (with tls: HTTPS, no certificate check); prints
        "rate=<records/s>", or "rate=none" when a scrape failed
    abuse.py timing PORT KNOWN PASSWORD ROUNDS
        the time to a 401 of a wrong password for KNOWN and for a made-up user,
        interleaved, each from a fresh address; after every 4 of each, one
        login with PASSWORD (from PASSWORD's env var name) so that no limiter
        holds KNOWN back; prints "known_ms=<median> unknown_ms=<median> n=<n>"
"""
import base64
import http.client
import os
import socket
import ssl
import sys
import threading
import time


def _client_tls():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def request(port, path, auth=None, src='127.0.0.1', timeout=5.0, tls=False):
    """(status, seconds) of one GET on a new connection; status 0 on no answer."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(('127.0.0.1', port), timeout=timeout, source_address=(src, 0)) as raw:
            s = _client_tls().wrap_socket(raw) if tls else raw
            head = 'GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n' % path
            if auth:
                head += 'Authorization: Basic %s\r\n' % base64.b64encode(auth.encode()).decode()
            s.sendall((head + '\r\n').encode())
            data = b''
            while b'\r\n' not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            line = data.split(b'\r\n', 1)[0].split()
            status = int(line[1]) if len(line) > 1 else 0
    except (OSError, ValueError, ssl.SSLError):
        status = 0
    return status, time.monotonic() - t0


def pct(xs, p):
    if not xs:
        return float('nan')
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def probe(port, path, seconds, rate=10.0, tls=False):
    lat, ok, fail = [], 0, 0
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end and n < int(seconds * rate) + 1:
        t = time.monotonic()
        status, dt = request(port, path, tls=tls)
        n += 1
        if status:
            ok += 1
            lat.append(dt * 1000)
        else:
            fail += 1
            lat.append(dt * 1000)
        time.sleep(max(0.0, 1.0 / rate - (time.monotonic() - t)))
    print('n=%d ok=%d fail=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f' %
          (n, ok, fail, pct(lat, 50), pct(lat, 99), max(lat) if lat else float('nan')))


def flood(port, user, seconds, clients):
    counts = {}
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def one(i):
        src = '127.0.0.%d' % (2 + i)
        k = 0
        while time.monotonic() < end and k < 100000:
            status, _ = request(port, '/metrics', '%s:wrong-%d-%d' % (user, i, k), src=src)
            k += 1
            with lock:
                counts[status] = counts.get(status, 0) + 1
            if status == 0:
                time.sleep(0.01)        # refused at accept: do not spin
    ts = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    other = sum(v for k, v in counts.items() if k not in (401, 429, 503))
    print('requests=%d 401=%d 429=%d 503=%d other=%d' %
          (sum(counts.values()), counts.get(401, 0), counts.get(429, 0), counts.get(503, 0), other))


def slowloris(port, addrs, conns, interval, seconds):
    head = b'GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: '
    socks = []          # [sock, bytes sent, opened at]
    opened = closed = 0
    first_close = None
    t0 = time.monotonic()

    def connect(a):
        nonlocal opened
        s = socket.socket()
        s.bind(('127.0.0.%d' % (2 + a), 0))
        s.settimeout(1.0)
        try:
            s.connect(('127.0.0.1', port))
        except OSError:
            pass
        s.setblocking(False)
        opened += 1
        return [s, 0, time.monotonic(), a]
    for a in range(addrs):
        for _ in range(conns):
            socks.append(connect(a))
    while time.monotonic() - t0 < seconds and opened < 100000:
        for i, e in enumerate(socks):
            s = e[0]
            gone = False
            try:
                if s.recv(1, socket.MSG_PEEK) == b'':
                    gone = True
            except BlockingIOError:
                pass
            except OSError:
                gone = True
            if not gone:
                try:
                    s.send(head[e[1]:e[1] + 1] if e[1] < len(head) else b'a')
                    e[1] += 1
                except OSError:
                    gone = True
            if gone:
                closed += 1
                if first_close is None:
                    first_close = time.monotonic() - e[2]
                s.close()
                socks[i] = connect(e[3])
        time.sleep(interval)
    for e in socks:
        e[0].close()
    print('opened=%d closed_by_server=%d first_close_s=%s' %
          (opened, closed, '%.1f' % first_close if first_close is not None else 'none'))


def tls(port, rate, seconds):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    tried = done = refused = 0
    end = time.monotonic() + seconds
    lock = threading.Lock()

    def one(src):
        nonlocal done, refused
        try:
            with socket.create_connection(('127.0.0.1', port), timeout=2, source_address=(src, 0)) as s:
                with ctx.wrap_socket(s) as t:
                    t.do_handshake()
            with lock:
                done += 1
        except (OSError, ssl.SSLError):
            with lock:
                refused += 1
    threads = []
    while time.monotonic() < end and tried < int(rate * seconds) + 1:
        t = time.monotonic()
        th = threading.Thread(target=one, args=('127.0.0.%d' % (2 + tried % 16),))
        th.start()
        threads.append(th)
        tried += 1
        threads = [x for x in threads if x.is_alive()]
        time.sleep(max(0.0, 1.0 / rate - (time.monotonic() - t)))
    for th in threads:
        th.join()
    print('tried=%d handshakes=%d refused=%d' % (tried, done, refused))


def predicted(conn, auth):
    """inferd_records_total{outcome="predicted"} over conn, or None."""
    try:
        conn.request('GET', '/metrics', headers={'Authorization': 'Basic ' + base64.b64encode(auth.encode()).decode()})
        body = conn.getresponse().read().decode('latin-1')
    except (OSError, http.client.HTTPException):
        return None
    for line in body.splitlines():
        if line.startswith('inferd_records_total{outcome="predicted"}'):
            return float(line.split()[-1])
    return None


def rate(port, user, pw_env, seconds, scheme='http'):
    auth = '%s:%s' % (user, os.environ[pw_env])
    if scheme == 'tls':
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection('127.0.0.1', port, timeout=10, context=ctx)
    else:
        conn = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
    a, t0 = predicted(conn, auth), time.monotonic()
    time.sleep(seconds)
    b, t1 = predicted(conn, auth), time.monotonic()
    conn.close()
    print('rate=none' if a is None or b is None else 'rate=%.1f' % ((b - a) / (t1 - t0)))


def timing(port, known, pw_env, rounds):
    password = os.environ[pw_env]
    kt, ut = [], []
    addr = 0
    for r in range(rounds):
        for i in range(4):
            for who, out in ((known, kt), ('nobody-%d-%d' % (r, i), ut)):
                addr += 1
                src = '127.0.%d.%d' % (1 + addr // 250, 1 + addr % 250)
                status, dt = request(port, '/metrics', '%s:wrong-%d' % (who, addr), src=src)
                if status == 401:
                    out.append(dt * 1000)
        request(port, '/metrics', '%s:%s' % (known, password), src='127.0.9.1')
    print('known_ms=%.1f unknown_ms=%.1f n=%d,%d' % (pct(kt, 50), pct(ut, 50), len(kt), len(ut)))


def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == 'probe':
        probe(int(a[0]), a[1], float(a[2]), float(a[3]) if len(a) > 3 else 10.0, len(a) > 4 and a[4] == 'tls')
    elif cmd == 'flood':
        flood(int(a[0]), a[1], float(a[2]), int(a[3]))
    elif cmd == 'slowloris':
        slowloris(int(a[0]), int(a[1]), int(a[2]), float(a[3]), float(a[4]))
    elif cmd == 'tls':
        tls(int(a[0]), float(a[1]), float(a[2]))
    elif cmd == 'rate':
        rate(int(a[0]), a[1], a[2], float(a[3]), a[4] if len(a) > 4 else 'http')
    elif cmd == 'timing':
        timing(int(a[0]), a[1], a[2], int(a[3]))
    else:
        sys.exit('abuse.py: unknown command %s' % cmd)


if __name__ == '__main__':
    main()
