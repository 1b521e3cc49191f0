#!/usr/bin/python3
"""Slow clients against the metrics endpoint, for tests/metrics/run
(metrics/slow-clients). Not a load generator: it holds connections the way a
hostile or broken client would, then checks that the endpoint recovers.

    slow_clients.py PORT CLIENTS HOLD_S

Opens CLIENTS connections to 127.0.0.1:PORT at once; each sends the start of
a request, then one more byte a second (well within any idle timeout), for
HOLD_S seconds; then all of them close. From that moment, GET /healthz must
be answered within one second (new connections, tried one after another
until the second is up). Prints one line: "OK <ms> <held> <states>" (the
time from the close to the answer, how many connections were still open
when they closed, and every state seen, e.g. "eof=92 held=8"), or
"FAIL <why>"; exits 0 either way.
"""
import errno
import socket
import sys
import time

GRACE_S = 1.0


def healthz(port, timeout_s):
    """The status line of GET /healthz, or raises OSError/TimeoutError."""
    with socket.create_connection(('127.0.0.1', port), timeout=timeout_s) as s:
        s.settimeout(timeout_s)
        s.sendall(b'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
        data = b''
        while b'\r\n' not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data.split(b'\r\n', 1)[0].decode('latin-1')


def main():
    port, n, hold_s = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(('127.0.0.1', port))
        except BlockingIOError:
            pass
        socks.append(s)
    request = b'GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: '
    end = time.monotonic() + hold_s
    i = 0
    while time.monotonic() < end:
        for s in socks:
            try:
                s.send(request[i:i + 1] if i < len(request) else b'a')
            except OSError:
                pass            # not connected yet, or closed by the server
        i += 1
        time.sleep(1.0)
    # Connections the server still holds: a peek finds no EOF and no error.
    states = {}
    for s in socks:
        try:
            state = 'data' if s.recv(1, socket.MSG_PEEK) != b'' else 'eof'
        except BlockingIOError:
            state = 'held'
        except OSError as e:
            state = errno.errorcode.get(e.errno, str(e.errno))
        states[state] = states.get(state, 0) + 1
    held = states.get('held', 0)
    detail = ' '.join('%s=%d' % kv for kv in sorted(states.items()))
    for s in socks:
        s.close()
    left = time.monotonic()
    why = 'no attempt'
    while True:
        remaining = left + GRACE_S - time.monotonic()
        if remaining <= 0:
            break
        try:
            line = healthz(port, remaining)
            if line.startswith('HTTP/1.1 200'):
                print('OK %d %d %s' % ((time.monotonic() - left) * 1000, held, detail))
                return
            why = 'answered %r' % line
        except (OSError, TimeoutError) as e:
            why = '%s' % (e or type(e).__name__)
            time.sleep(0.01)
    print('FAIL no 200 from /healthz within %.0f s of %d slow clients leaving (%s): %s'
          % (GRACE_S, n, detail, why))


if __name__ == '__main__':
    main()
