# tools/lib-procs.sh: sourced (not run) by the tools that start processes of
# their own (a mock broker, daemons): stopping them all on exit, and the mock
# broker's address. Bash.

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
