#!/usr/bin/env bash
# Loads the machine the way a busy CI runner is loaded, so anyone can repeat the
# verdicts-under-load checks (issue 31): CPU-burning loops and writers that each loop
# `dd bs=1M count=200 conv=fsync` (disk contention, what bends timing verdicts most).
#
#   scripts/load.sh start [--cpu N] [--io N]   # default: 2 CPU loops, 2 fsync writers
#   scripts/load.sh stop
#   scripts/load.sh status
#   scripts/load.sh run [--cpu N] [--io N] -- COMMAND...   # load only while COMMAND runs
set -euo pipefail

state="${PCS_LOAD_DIR:-/tmp/pcs-load}"
pids="$state/pids"

start() {
    local cpu=2 io=2
    while [ $# -gt 0 ]; do
        case "$1" in
        --cpu) cpu="$2"; shift 2 ;;
        --io) io="$2"; shift 2 ;;
        *) echo "load.sh: unknown option $1" >&2; exit 2 ;;
        esac
    done
    stop >/dev/null 2>&1 || true
    mkdir -p "$state"
    : >"$pids"
    for _ in $(seq 1 "$cpu"); do
        (while :; do :; done) &
        echo $! >>"$pids"
    done
    for n in $(seq 1 "$io"); do
        (while :; do
            dd if=/dev/zero of="$state/writer-$n" bs=1M count=200 conv=fsync status=none
        done) &
        echo $! >>"$pids"
    done
    echo "load.sh: started $cpu CPU loops and $io fsync writers (pids in $pids)"
}

stop() {
    [ -f "$pids" ] || { echo "load.sh: no load running"; return 0; }
    while read -r pid; do
        # Each loop is a subshell; its dd child ends with it.
        pkill -P "$pid" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
    done <"$pids"
    rm -f "$pids" "$state"/writer-*
    echo "load.sh: stopped"
}

case "${1:-}" in
start) shift; start "$@" ;;
stop) stop ;;
status)
    if [ -f "$pids" ]; then
        echo "load.sh: running: $(wc -l <"$pids") loops"
        cat /proc/pressure/cpu /proc/pressure/io 2>/dev/null || true
    else
        echo "load.sh: no load running"
    fi
    ;;
run)
    shift
    args=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
    [ "${1:-}" = "--" ] && shift
    start "${args[@]}"
    trap stop EXIT
    "$@"
    ;;
*)
    echo "usage: scripts/load.sh start [--cpu N] [--io N] | stop | status | run [--cpu N] [--io N] -- COMMAND..." >&2
    exit 2
    ;;
esac
