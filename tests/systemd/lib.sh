# Booting the real systemd in private namespaces for a test suite, the way
# tests/systemd/run does (its header explains the overlays and masks that
# boot.sh sets up so that the host is never touched). Sourced after
# tests/kafka/lib.sh. tests/cutover/run uses it; tests/systemd/run keeps its
# own copy of these steps for now, with its host checks around them.
#
#   sd_boot          boots; sets SD_PID; returns 1 with a reason on stdout
#                    (call it in this shell, not in $(...), or SD_PID is lost)
#   ns CMD...        runs CMD inside (nsenter -a)
#   sd_install_deb   apt-get installs $BUILD's .deb inside, offline
#   sd_poweroff      powers off (then SIGKILL); safe to call twice

SD_PID=""
UNSHARE_PID=""

ns() { nsenter -t "$SD_PID" -a "$@"; }

sd_boot() {
        local keep c state
        mkdir -p "$BUILD"
        keep="$PWD $(cd "$BUILD" && pwd)"
        KEEP_PATHS="$keep" unshare --pid --fork --kill-child --mount --mount-proc --uts --ipc --cgroup \
                --propagation private sh -c "$(cat tests/systemd/boot.sh)" >"$KT_DIR/systemd.console" 2>&1 &
        UNSHARE_PID=$!
        for _ in $(seq 100); do
                for c in $(cat "/proc/$UNSHARE_PID/task/$UNSHARE_PID/children" 2>/dev/null); do
                        [ "$(cat "/proc/$c/comm" 2>/dev/null)" = systemd ] && SD_PID=$c
                done
                [ -n "$SD_PID" ] && break
                sleep 0.1
        done
        if [ -z "$SD_PID" ]; then
                echo "systemd did not start: $(tail -n 5 "$KT_DIR/systemd.console")"
                return 1
        fi
        for d in /usr /etc /var; do
                if [ "$(ns findmnt -n -o FSTYPE --target "$d" 2>/dev/null)" != overlay ]; then
                        echo "$d is not an overlay inside the namespaces"
                        return 1
                fi
        done
        # A make install under /usr/local on the host would shadow the
        # package inside: hidden in the overlay (the host keeps it).
        for c in /usr/local/bin/inferd /usr/local/bin/inferd-run /usr/local/bin/inferd-cutover \
                 /usr/local/lib/systemd/system/inferd@.service /etc/systemd/system/inferd@.service; do
                if ns test -e "$c" && [ "$(ns findmnt -n -o FSTYPE --target "$c")" = overlay ]; then
                        ns rm -f "$c"
                fi
        done
        for _ in $(seq 120); do
                state=$(ns systemctl is-system-running 2>&1)
                case "$state" in running|degraded) return 0 ;; esac
                sleep 0.5
        done
        echo "systemd is '$state': $(tail -n 5 "$KT_DIR/systemd.console")"
        return 1
}

sd_install_deb() {
        ns env DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o Dpkg::Use-Pty=0 "$1" </dev/null
}

sd_poweroff() {
        if [ -n "$SD_PID" ] && kill -0 "$SD_PID" 2>/dev/null; then
                nsenter -t "$SD_PID" -a systemctl poweroff --no-block >/dev/null 2>&1
                for _ in $(seq 50); do
                        kill -0 "$SD_PID" 2>/dev/null || break
                        sleep 0.2
                done
                kill -KILL "$SD_PID" 2>/dev/null
        fi
        if [ -n "$UNSHARE_PID" ]; then
                kill -KILL "$UNSHARE_PID" 2>/dev/null
                wait "$UNSHARE_PID" 2>/dev/null
        fi
        SD_PID="" UNSHARE_PID=""
}
