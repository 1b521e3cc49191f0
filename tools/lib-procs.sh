# tools/lib-procs.sh: sourced (not run) by the tools that start processes of
# their own (a mock broker, daemons): stopping them all on exit, the mock
# broker's address, and a daemon's output read back with kcat (how many, how
# fast). Bash.

# procs_stop SECONDS PID...: stops each process, the last started first:
# SIGTERM, up to SECONDS for it to end (a daemon drains), then SIGKILL. A pid
# already gone is skipped.
procs_stop() {
        local secs=$1 p q=""
        shift
        for p in "$@"; do q="$p $q"; done
        for p in $q; do
                kill -TERM "$p" 2>/dev/null || continue
                for _ in $(seq $((secs * 10))); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
                { kill -KILL "$p"; wait "$p"; } 2>/dev/null || true
        done
}

# mock_broker_address OUT SECONDS: the bootstrap address inferd-mock-broker
# writes as the first line of its stdout (the file OUT), waiting up to
# SECONDS for it; prints nothing when it did not come.
mock_broker_address() {
        local b=""
        for _ in $(seq $(($2 * 10))); do
                b=$(head -n1 "$1" 2>/dev/null || true)
                [ -n "$b" ] && break
                sleep 0.1
        done
        printf '%s' "$b"
}

# topic_wait BROKERS TOPIC N PID LOG SECONDS: waits until TOPIC holds N
# records (kcat, from the beginning), up to SECONDS; 0 when it does, 1 when
# the time passed, and exit 1 with LOG on stderr when the daemon PID ended.
topic_wait() {
        local got
        for _ in $(seq $(($6 * 2))); do
                got=$(kcat -C -b "$1" -t "$2" -o beginning -e -q -f '%o\n' 2>/dev/null | wc -l)
                [ "$got" -ge "$3" ] && return 0
                kill -0 "$4" 2>/dev/null || { echo "inferd exited:" >&2; cat "$5" >&2; exit 1; }
                sleep 0.5
        done
        return 1
}

# topic_rate BROKERS TOPIC: "<records> <span_s> <rate>" of TOPIC, the rate
# from its first record to its last by the broker's timestamps.
topic_rate() {
        kcat -C -b "$1" -t "$2" -o beginning -e -q -f '%T\n' 2>/dev/null | /usr/bin/python3 -c '
import sys
ts = sorted(int(l) for l in sys.stdin if l.strip())
span = (ts[-1] - ts[0]) / 1000
print(len(ts), f"{span:.2f}", f"{(len(ts) - 1) / span:.1f}")'
}
