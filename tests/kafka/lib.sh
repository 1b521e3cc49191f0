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
# Without the endpoint librdkafka's statistics are off; KT_STATISTICS_MS=N
# turns them on every N ms, as the endpoint's default does in production
# (e.g. `KT_STATISTICS_MS=1000 KR_ONLY=eos tests/run kafka-real`; not with
# kafka-real's fetch section, which sets its own).
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
                [ -z "${KT_STATISTICS_MS:-}" ] || echo "statistics.interval.ms = $KT_STATISTICS_MS"
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

# kt_long_batches INI...: the hold tests' engine (tests/kafka's
# hold-rebalance-*, tests/kafka-real's hold joins): batches on one engine
# thread that take about KT_BATCH_SECONDS (2 unless set) whatever the
# machine, so that a hold outlasts PIPELINE_HOLD_MAX_US (1 s) and pauses
# fetching (only then is the consumer queue, where a rebalance waits, served
# during the hold: with batches under a second the holds end without pausing
# and the revoke always comes between them); the host budget they need; and
# a 30 s session, which the revoke's wait (a batch or two) must not outlast.
# A fixed batch of 32 took 1.1 s and more on the machines of its day and
# 0.99 s on a Zen 5 core, so the batch is sized from the engine's rate
# measured here once per suite (kt_long_batch). Sets KT_HOLD_BACKLOG, the
# hold tests' input: four batches (two slots' worth, a held record, and more
# behind them).
kt_long_batches() {
        kt_long_batch "${KT_BATCH_SECONDS:-2}"
        KT_HOLD_BACKLOG=$((4 * KT_LONG_BATCH))
        sed -i -e "s/^max_batch = 4$/max_batch = $KT_LONG_BATCH/" \
                -e 's/^session.timeout.ms = 6000$/session.timeout.ms = 30000/' \
                -e 's/^host_budget = 256MiB$/host_budget = 2GiB/' -e 's/^backend = cpu$/backend = cpu\nthreads = 1/' "$@"
}

# kt_long_batch SECONDS: sets KT_LONG_BATCH, the power of two from 32 to 512
# nearest above what one engine thread does in SECONDS (inferd-run --bench on
# the suite's model, batch 32, one thread, measured once per suite into
# KT_ENGINE_RATE), and says so; 32 if it cannot tell.
kt_long_batch() {
        local j
        if [ -z "${KT_ENGINE_RATE+set}" ]; then
                j=$(OMP_NUM_THREADS=1 "$BUILD/inferd-run" --bench 2 --batch 32 --backend cpu --precision fp32 \
                        --weights "$KT_WEIGHTS" 2>/dev/null)
                KT_ENGINE_RATE=$(sed -n 's/.*"images_per_second":\([0-9.]*\).*/\1/p' <<<"$j")
        fi
        KT_LONG_BATCH=32
        if [ -n "$KT_ENGINE_RATE" ]; then
                while [ $KT_LONG_BATCH -lt 512 ] &&
                      awk -v r="$KT_ENGINE_RATE" -v b=$KT_LONG_BATCH -v s="$1" 'BEGIN { exit !(b < s * r) }'; do
                        KT_LONG_BATCH=$((KT_LONG_BATCH * 2))
                done
        fi
        echo "   hold tests: one engine thread does ${KT_ENGINE_RATE:-?} images/s here: batches of $KT_LONG_BATCH (about $1 s)" >&2
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

# kt_produce TOPIC ARGS...: the load producer, quietly. On the mock broker,
# then checks that the topic kept every record (kt_kept).
kt_produce() {
        local t=$1 rc
        shift
        "$BUILD/inferd-produce" -b "$KT_BROKERS" -t "$t" "$@" >>"$KT_DIR/produce.log" 2>&1
        rc=$?
        [ -n "${KT_BROKER_PID:-}" ] && kt_kept "$t"
        return $rc
}

# kt_kept TOPIC: the mock broker keeps only about the last 5 MiB of each
# partition and drops older records without an error (librdkafka 2.0.2's
# mock has no setting for it), so a test whose records did not all stay
# would fail later for a wrong reason, or pass on fewer records than it
# meant. Prints a FAIL naming the topic when a partition's log no longer
# starts at offset 0; says nothing when the brokers cannot be asked (a test
# that has them down).
kt_kept() {
        local parts p start
        parts=$(timeout 10 kcat -L -b "$KT_BROKERS" -t "$1" -J 2>/dev/null | /usr/bin/python3 -c '
import json, sys
for t in json.load(sys.stdin)["topics"]:
    for p in t.get("partitions") or []:
        print(p["partition"])' 2>/dev/null) || return 0
        for p in $parts; do
                start=$(timeout 10 kcat -Q -b "$KT_BROKERS" -t "$1:$p:-2" 2>/dev/null | awk '/ offset / { print $NF }')
                if [ -n "$start" ] && [ "$start" -gt 0 ]; then
                        kt_fail kafka/records-kept "$1 [$p] lost its first $start records: the mock broker keeps only about 5 MiB a partition (produce compressible records, or fewer)"
                        return 1
                fi
        done
}

# kt_age_test PREFIX DELIVERY ID offsets|no-offsets: [batching]
# max_record_age, trace context and the timing header (tests/kafka/run's
# kafka/age-*, trace-*, timing-*; kafka-real's age-eos-*), over the topics
# PREFIX.images (1 partition), PREFIX.predictions, PREFIX.dlq; $CHECK and
# dump_input are the caller's. One partition, in this order: 3 records 120 s old
# (expired), 2 from 30 minutes in the future, 2 30 s old, 2 current, all with
# trace context. Then SIGHUP to skip (and the headers off), one current
# record, and once it is predicted 2 old ones last, so that only the skipped
# ones can move the committed offset to the end.
kt_age_test() {
        local P=$1 mode=$2 t=$3 offsets=$4 port n0 i got want end why why2 rc
        port=$(tools/free-ports 1)
        KT_LISTEN=127.0.0.1:$port kt_config "$P" "$P" "g-$P" "[kafka]" "delivery = $mode" "[batching]" \
                "max_record_age = 60s" "[service]" "timing_header = yes"
        kt_produce $P.images --count 3 --keys ${P}old --seed 31 --age-ms 120000 --trace
        kt_produce $P.images --count 2 --keys ${P}fut --seed 32 --age-ms -1800000 --trace
        kt_produce $P.images --count 2 --keys ${P}yng --seed 33 --age-ms 30000 --trace
        kt_produce $P.images --count 2 --keys ${P}now --seed 34 --trace
        kt_start "$P"
        if ! kt_wait_count $P.predictions 6 180 || ! kt_wait_count $P.dlq 3 30; then
                kt_fail $t-dlq "only $(kt_count $P.predictions) predictions and $(kt_count $P.dlq) DLQ records of 6 and 3 (see $KT_DIR/$P.log)"
                kill -TERM "$(kt_pid "$P")"
                kt_wait_exit "$P" 60 >/dev/null
                return
        fi
        sleep 1
        dump_input $P.images "$KT_DIR/$P.in"
        kt_read $P.predictions '%k\t%h\t%s\n' >"$KT_DIR/$P.pred"
        kt_read $P.dlq '%k\t%h\t%S\n' >"$KT_DIR/$P.dlq"
        if why=$($CHECK age "$KT_DIR/$P.in" "$KT_DIR/$P.pred" "$KT_DIR/$P.dlq" ${P}old 120 900 1m); then
                kt_pass $t-dlq "$why"
        else
                kt_fail $t-dlq "$why"
        fi
        if why=$($CHECK trace "$KT_DIR/$P.in" "$KT_DIR/$P.pred" present) &&
           why2=$($CHECK trace "$KT_DIR/$P.in" "$KT_DIR/$P.dlq" present); then
                kt_pass $t-trace-copied "predictions: $why; DLQ: $why2"
        else
                kt_fail $t-trace-copied "$why ${why2:-}"
        fi
        if why=$($CHECK timing "$KT_DIR/$P.in" "$KT_DIR/$P.pred" present "${P}yng=30,${P}fut=-1"); then
                kt_pass $t-timing-header "$why"
        else
                kt_fail $t-timing-header "$why"
        fi

        # Live: skip, and both headers off.
        sed -i -e 's/^timing_header = yes$/timing_header = no/' "$KT_DIR/$P.ini"
        printf '%s\n' "[batching]" "max_record_age_action = skip" "[service]" "trace_headers = no" >>"$KT_DIR/$P.ini"
        n0=$(grep -c "max_record_age_action applied" "$KT_DIR/$P.log")
        kill -HUP "$(kt_pid "$P")"
        for i in $(seq 100); do
                [ "$(grep -c "max_record_age_action applied" "$KT_DIR/$P.log")" -gt "$n0" ] && break
                sleep 0.1
        done
        kt_produce $P.images --count 1 --keys ${P}late --seed 35 --trace
        # Its prediction first (under exactly-once, its transaction
        # committed): then the skipped records are all there is, and
        # nothing but them can carry the committed offset to the end.
        kt_wait_count $P.predictions 7 120
        kt_produce $P.images --count 2 --keys ${P}skp --seed 36 --age-ms 120000 --trace
        end=$(kt_count $P.images)
        got=""
        # The committed offset covers the skipped records at the end (at
        # least once: the next auto-commit; exactly-once: the transaction's
        # commit point).
        for i in $(seq 60); do
                got=$("$BUILD/inferd-kafka-admin" -b "$KT_BROKERS" offsets "g-$P" $P.images 2>/dev/null | awk '{print $2}')
                [ "$got" = "$end" ] && break
                sleep 0.5
        done
        curl -s -m 10 "http://127.0.0.1:$port/metrics" >"$KT_DIR/$P.prom"
        want="expired $( /usr/bin/python3 tests/metrics/check.py value "$KT_DIR/$P.prom" inferd_records_total outcome=expired) dlq $( /usr/bin/python3 tests/metrics/check.py value "$KT_DIR/$P.prom" inferd_dead_letters_total code=expired)"
        kt_read $P.predictions '%k\t%h\t%s\n' >"$KT_DIR/$P.pred2"
        [ "$offsets" = no-offsets ] && got=$end
        if [ "$got" = "$end" ] && [ "$want" = "expired 2 dlq 3" ] && [ "$(kt_count $P.dlq)" = 3 ] &&
           [ "$(grep -c "^${P}late-" "$KT_DIR/$P.pred2")" = 1 ] && ! grep -q "^${P}skp-" "$KT_DIR/$P.pred2"; then
                if [ "$offsets" = offsets ]; then
                        kt_pass $t-skip-committed "committed $got of $end; $want"
                else
                        kt_pass $t-skip "$want (committed offsets not read: the mock keeps no transactional ones)"
                fi
        else
                kt_fail $t-skip-committed "committed offset '$got' (want the end, $end); metrics: $want (want expired 2 dlq 3); DLQ $(kt_count $P.dlq) (want 3); predictions of the late record $(grep -c "^${P}late-" "$KT_DIR/$P.pred2"), of skipped ones $(grep -c "^${P}skp-" "$KT_DIR/$P.pred2")"
        fi
        grep "^${P}late-" "$KT_DIR/$P.pred2" >"$KT_DIR/$P.late"
        dump_input $P.images "$KT_DIR/$P.in2"
        if why=$($CHECK trace "$KT_DIR/$P.in2" "$KT_DIR/$P.late" absent); then
                kt_pass $t-trace-off "$why"
        else
                kt_fail $t-trace-off "$why"
        fi
        if why=$($CHECK timing "$KT_DIR/$P.in2" "$KT_DIR/$P.late" absent); then
                kt_pass $t-timing-off "$why"
        else
                kt_fail $t-timing-off "$why"
        fi
        kill -TERM "$(kt_pid "$P")"
        rc=$(kt_wait_exit "$P" 60)
        [ "$rc" = 0 ] && kt_pass $t-drain-exit-0 || kt_fail $t-drain-exit-0 "exit $rc (see $KT_DIR/$P.log)"
}

# kt_only VAR SUITE SECTION...: which of the suite's sections run. $VAR
# (KT_ONLY for tests/kafka, KR_ONLY for tests/kafka-real) lists exact
# section names, separated by spaces or commas ("eos static", "eos,static");
# unset or empty runs them all. Sets KT_SELECTED for kt_selected. A name
# that is not a section: one FAIL line naming it and the sections, and the
# suite exits 1 before it starts anything.
kt_only() {
        local var=$1 suite=$2 name s found names=()
        shift 2
        IFS=', ' read -r -a names <<<"${!var:-}"
        KT_SELECTED=" "
        for name in "${names[@]}"; do
                [ -n "$name" ] || continue
                found=0
                for s in "$@"; do
                        [ "$s" = "$name" ] && found=1
                done
                if [ $found = 0 ]; then
                        echo "FAIL $suite/only: $var names '$name', which is not a section of tests/$suite (its sections: $*)"
                        [ -n "${KT_KEEP:-}" ] || rm -rf "$KT_DIR"
                        exit 1
                fi
                KT_SELECTED+="$name "
        done
        [ "$KT_SELECTED" = " " ] && KT_SELECTED=" $* "
        return 0
}
# kt_selected SECTION: whether kt_only selected SECTION.
kt_selected() { [[ $KT_SELECTED == *" $1 "* ]]; }

# Each result ends with the suite's seconds so far (bash's SECONDS), so
# that a log shows where a suite's time goes.
kt_pass() { echo "PASS $1${2:+ ($2)} [+${SECONDS} s]"; }
kt_fail() { echo "FAIL $1: $2 [+${SECONDS} s]"; }
kt_skip() { echo "SKIP $1: $2"; }

# kt_free_port: a loopback TCP port that nothing listens on now.
kt_free_port() {
        /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# kt_dlq_size ID PREFIX NAME [MID_BYTES [INI LINES...]]: poison records whose DLQ copies
# cannot be produced whole (issue 26, item 1). Two records of 1,000,100
# random bytes (over the producer's message.max.bytes), one of 777 bytes with
# a 1 MB header, and with MID_BYTES one of that size (for a DLQ topic whose
# broker-side max.message.bytes is below it), then two good records. Each
# DLQ copy must come without its value, keeping the key and the
# inferd-error headers, with inferd-dlq-value-omitted (and the big header
# cut and named); the good records are predicted after them; the counters
# say so; the daemon drains with exit 0. Prints PASS/FAIL lines ID-*.
# With exactly-once (in the INI lines) the DLQ is read as read_committed
# (kt_read's default) and the counters may count a record again after an
# aborted transaction, so they must be at least the number of records.
kt_dlq_size() {
        local t=$1 p=$2 n=$3 mid=${4:-} port want why rc m k cmp=-eq c c_dead c_large c_omit
        shift 3
        [ $# -gt 0 ] && shift
        [[ " $* " == *exactly-once* ]] && cmp=-ge
        port=$(kt_free_port)
        KT_LISTEN=127.0.0.1:$port kt_config "$n" "$p" "g-$n" "[service]" "log_level = debug" "$@"
        # The bad records first, so that the good ones wait behind them.
        kt_produce "$p.images" --count 2 --bad-fraction 1 --bad-bytes 1000100 --keys over \
                -X message.max.bytes=2000000 -X compression.type=none
        kt_produce "$p.images" --count 1 --bad-fraction 1 --bad-bytes 777 --header-bytes 1000000 --keys hdr \
                -X message.max.bytes=2000000
        want=3
        if [ -n "$mid" ]; then
                kt_produce "$p.images" --count 1 --bad-fraction 1 --bad-bytes "$mid" --keys mid -X compression.type=none
                want=4
        fi
        kt_produce "$p.images" --count 2 --keys after
        kt_start "$n"
        if ! kt_wait_count "$p.predictions" 2 240 || ! kt_wait_count "$p.dlq" $want 60; then
                kt_fail "$t-dlq-copies" "$(kt_count "$p.predictions") predictions of 2 and $(kt_count "$p.dlq") DLQ copies of $want; alive: $(kill -0 "$(kt_pid "$n")" 2>/dev/null && echo yes || echo no); log: $(grep -i 'error\|fail' "$KT_DIR/$n.log" | tail -n 2 | tr '\n' ' ')"
                kill -TERM "$(kt_pid "$n")" 2>/dev/null
                kt_wait_exit "$n" 60 >/dev/null
                return
        fi
        kt_read "$p.dlq" '%k\t%S\t%h\n' >"$KT_DIR/$n.dlq"
        why=""
        for k in over-0:1000100:too-large over-1:1000100:too-large hdr-0:777:bad-size ${mid:+mid-0:$mid:bad-size}; do
                IFS=: read -r key bytes code <<<"$k"
                m=$(grep "^$key	" "$KT_DIR/$n.dlq")
                if [ "$(grep -c . <<<"$m")" != 1 ]; then
                        why="$why $key: $(grep -c . <<<"$m") copies;"
                elif [ "$(cut -f2 <<<"$m")" != 0 ] || ! grep -q "inferd-dlq-value-omitted=$bytes" <<<"$m" ||
                     ! grep -q "inferd-error=$code" <<<"$m" || ! grep -q "correlation-id=cid-" <<<"$m" ||
                     ! grep -q "inferd-source-offset=" <<<"$m"; then
                        why="$why $key: $(cut -c1-300 <<<"$m");"
                fi
        done
        if ! grep "^hdr-0	" "$KT_DIR/$n.dlq" | grep -q "inferd-dlq-header-omitted=inferd-test-big=1000000"; then
                why="$why hdr-0: the 1 MB header is not named as cut;"
        fi
        if [ -z "$why" ]; then
                kt_pass "$t-dlq-copies" "$want copies without their values, keys and inferd-* headers kept"
        else
                kt_fail "$t-dlq-copies" "$why"
        fi
        m=$(curl -s -m 10 "http://127.0.0.1:$port/metrics")
        c=$(sed -n 's/^inferd_dlq_values_omitted_total //p;s/^inferd_records_total{outcome="dead_lettered"} //p;s/^inferd_dead_letters_total{code="too-large"} //p' <<<"$m" | tr '\n' ' ')
        # In /metrics' order: records dead-lettered, too-large ones, values omitted.
        read -r c_dead c_large c_omit <<<"$c"
        if [ -n "${c_omit:-}" ] && [ "$c_dead" "$cmp" "$want" ] && [ "$c_large" "$cmp" 2 ] &&
           [ "$c_omit" "$cmp" "$want" ]; then
                kt_pass "$t-counted" "$(grep '^inferd_dlq_values_omitted_total\|too-large' <<<"$m" | tr '\n' ' ')"
        else
                kt_fail "$t-counted" "$(grep '^inferd_dlq_values_omitted_total\|^inferd_dead_letters_total\|dead_lettered' <<<"$m" | tr '\n' ' ')"
        fi
        kill -TERM "$(kt_pid "$n")"
        rc=$(kt_wait_exit "$n" 60)
        if [ "$rc" = 0 ] && grep -q "Drained" "$KT_DIR/$n.log"; then
                kt_pass "$t-drain" "exit 0"
        else
                kt_fail "$t-drain" "exit $rc; $(grep -i 'error' "$KT_DIR/$n.log" | tail -n 2 | tr '\n' ' ')"
        fi
}

# probe_verdict TEST NAME [WHEN]: the 10 Hz /livez prober's figures in
# $KT_DIR/NAME.probe (tests/kafka/probe.py): a pass when it made 10 probes
# or more and the longest answer took under 1 s. The goal is 250 ms; 1 s
# leaves a loaded 2-core machine its margin, and is the kubelet's probe
# timeout. WHEN, when given, says when they were made.
probe_verdict() {
        local n p99 max
        read -r n p99 max <"$KT_DIR/$2.probe"
        if [ "${n:-0}" -ge 10 ] && [ "${max:-5000}" -lt 1000 ]; then
                kt_pass "$1" "$n probes${3:+ $3}, p99 $p99 ms, longest $max ms"
        else
                kt_fail "$1" "${n:-0} probes, p99 ${p99:-?} ms, longest ${max:-?} ms (want under 1000)"
        fi
}
# lag_verdict TEST NAME PORT: the loop's lag over the run, from a scrape of
# the daemon on PORT into $KT_DIR/NAME.prom (inferd_loop_lag_seconds, a
# timer every few ms): the bucket that holds its p99.9, and its longest,
# which must be 1 s at most.
lag_verdict() {
        local n999 top lagn
        curl -s -m 10 "http://127.0.0.1:$3/metrics" >"$KT_DIR/$2.prom"
        read -r n999 top lagn < <(/usr/bin/python3 tests/kafka/probe.py --lag "$KT_DIR/$2.prom")
        if [ "${lagn:-0}" -gt 0 ] && /usr/bin/python3 -c "import sys; sys.exit(not float('$top') <= 1000)"; then
                kt_pass "$1" "$lagn timer firings: p99.9 at most $n999 ms, the longest at most $top ms"
        else
                kt_fail "$1" "$lagn timer firings: p99.9 at most ${n999:-?} ms, the longest at most ${top:-?} ms (want 1000 or less)"
        fi
}
