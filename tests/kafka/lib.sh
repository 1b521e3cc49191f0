# Helpers for tests/kafka/run (and tests/systemd/run): a mock broker, daemon
# instances, and reading topics back with kcat, the independent client.
# Sourced, not run. Every process started here is recorded in $KT_PIDS and
# ended by kt_cleanup, which the caller traps on EXIT.

BUILD=${BUILD:-build}
KT_DIR=${KT_DIR:-$(mktemp -d /tmp/inferd-kafka-test.XXXXXX)}
KT_PIDS=""
mkdir -p "$KT_DIR"

kt_cleanup() {
        local p
        for p in $KT_PIDS; do
                kill -TERM "$p" 2>/dev/null
        done
        sleep 0.5
        for p in $KT_PIDS; do
                kill -KILL "$p" 2>/dev/null
        done
        [ -n "${KT_KEEP:-}" ] || rm -rf "$KT_DIR"
}

# kt_weights: exports the seeded random ResNet-50 once per suite (or takes
# the file KT_WEIGHTS names, when it exists).
kt_weights() {
        KT_WEIGHTS=${KT_WEIGHTS:-$KT_DIR/resnet50.safetensors}
        [ -s "$KT_WEIGHTS" ] && return 0
        /usr/bin/python3 tools/export-resnet50.py --random --seed 1 --out "$KT_WEIGHTS" >"$KT_DIR/export.log" 2>&1
}

# kt_broker TOPIC:PARTS...: starts the mock broker (commands on its stdin
# through a fifo: "down", "up"), sets KT_BROKERS.
kt_broker() {
        local t args=()
        for t in "$@"; do args+=(--topic "$t"); done
        rm -f "$KT_DIR/broker.in"
        mkfifo "$KT_DIR/broker.in"
        "$BUILD/inferd-mock-broker" "${args[@]}" <"$KT_DIR/broker.in" >"$KT_DIR/broker.out" 2>"$KT_DIR/broker.err" &
        KT_BROKER_PID=$!
        KT_PIDS="$KT_PIDS $KT_BROKER_PID"
        # Hold the fifo open for writing so that the broker never sees EOF.
        exec 7>"$KT_DIR/broker.in"
        # Up to 30 s: on a loaded 2-core machine (right after the real
        # cluster's JVMs exit, say) 5 s was seen not to be enough.
        for _ in $(seq 300); do
                KT_BROKERS=$(head -n1 "$KT_DIR/broker.out" 2>/dev/null)
                [ -n "$KT_BROKERS" ] && return 0
                kill -0 "$KT_BROKER_PID" 2>/dev/null || break
                sleep 0.1
        done
        return 1
}

kt_broker_cmd() {
        echo "$1" >&7
}

# kt_config NAME TOPIC_PREFIX GROUP [extra INI lines...]: writes $KT_DIR/NAME.ini.
# The metrics endpoint is off ([metrics] listen empty) unless KT_LISTEN
# gives it an address: daemons of concurrent suites never share a port.
kt_config() {
        local name=$1 prefix=$2 group=$3
        shift 3
        {
                echo "[service]"
                echo "instance = $name"
                echo "[kafka]"
                echo "brokers = $KT_BROKERS"
                echo "group_id = $group"
                echo "input_topic = $prefix.images"
                echo "output_topic = $prefix.predictions"
                echo "dlq_topic = $prefix.dlq"
                echo "[kafka.consumer]"
                echo "session.timeout.ms = 6000"
                echo "heartbeat.interval.ms = 500"
                echo "[model]"
                echo "weights = $KT_WEIGHTS"
                echo "[engine]"
                echo "backend = cpu"
                echo "[memory]"
                echo "max_batch = 4"
                echo "host_budget = 256MiB"
                echo "[batching]"
                echo "max_delay_ms = 20"
                echo "[drain]"
                echo "timeout_s = 60"
                echo "[metrics]"
                echo "listen = ${KT_LISTEN:-}"
                # The decode contexts are charged against host_budget: 4 MP
                # (~95 MiB a context) lets 2 of them fit in 256 MiB beside
                # the pinned buffers and librdkafka's minimum. skimage's
                # photographs and inferd-produce's images are all far
                # smaller; the bomb headers are refused either way.
                echo "[decode]"
                echo "max_pixels = 4000000"
                local l
                for l in "$@"; do echo "$l"; done
        } >"$KT_DIR/$name.ini"
}

# kt_start NAME: runs inferd on $KT_DIR/NAME.ini; its stderr goes to
# NAME.log and its exit status to NAME.rc when it ends. KT_WRAP, when set, is
# a command that execs its arguments (e.g. "ip netns exec NS"), so that the
# pid recorded is still the daemon's.
kt_start() {
        local name=$1
        rm -f "$KT_DIR/$name.rc"
        ( ${KT_WRAP:-} "$BUILD/inferd" -c "$KT_DIR/$name.ini" 2>>"$KT_DIR/$name.log" & p=$!
          echo $p >"$KT_DIR/$name.pid"; wait $p; echo $? >"$KT_DIR/$name.rc" ) &
        for _ in $(seq 50); do
                [ -s "$KT_DIR/$name.pid" ] && break
                sleep 0.1
        done
        KT_PIDS="$KT_PIDS $(cat "$KT_DIR/$name.pid")"
}

kt_pid() {
        cat "$KT_DIR/$1.pid"
}

# kt_wait_exit NAME SECONDS: waits for the instance to end; prints its status.
kt_wait_exit() {
        local name=$1 i
        for i in $(seq $(( $2 * 10 ))); do
                if [ -s "$KT_DIR/$name.rc" ]; then
                        cat "$KT_DIR/$name.rc"
                        return 0
                fi
                sleep 0.1
        done
        echo timeout
        return 1
}

# kt_wait_log NAME PATTERN SECONDS
kt_wait_log() {
        local i
        for i in $(seq $(( $3 * 10 ))); do
                grep -q -- "$2" "$KT_DIR/$1.log" 2>/dev/null && return 0
                sleep 0.1
        done
        return 1
}

# kt_read TOPIC FORMAT: every record of the topic, one line each (kcat).
# KT_ISOLATION: read_committed (librdkafka's default: aborted transactions
# are skipped) or read_uncommitted.
kt_read() {
        timeout 30 kcat -C -b "$KT_BROKERS" -t "$1" -o beginning -e -q -f "$2" \
                -X isolation.level="${KT_ISOLATION:-read_committed}" 2>/dev/null
}

kt_count() {
        kt_read "$1" '%k\n' | wc -l
}

# kt_wait_count TOPIC N SECONDS: until the topic holds at least N records.
kt_wait_count() {
        local i n
        for i in $(seq $(( $3 ))); do
                n=$(kt_count "$1")
                [ "$n" -ge "$2" ] && return 0
                sleep 1
        done
        return 1
}

# kt_produce TOPIC ARGS...: the load producer, quietly.
kt_produce() {
        local t=$1
        shift
        "$BUILD/inferd-produce" -b "$KT_BROKERS" -t "$t" "$@" >>"$KT_DIR/produce.log" 2>&1
}

kt_pass() { echo "PASS $1${2:+ ($2)}"; }
kt_fail() { echo "FAIL $1: $2"; }
kt_skip() { echo "SKIP $1: $2"; }
