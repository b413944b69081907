#!/usr/bin/env bash
# Makes sure the brokers the tests need are running (starts them when they are not).
# Usage: scripts/services.sh [start|status]
# Tests spawn their own brokers from the installed binaries; these shared services are
# the external endpoints named in fixtures/ (certify falls back to them).
set -euo pipefail
action="${1:-start}"

# name -> "host port start-command"
declare -A services=(
    [redis]="127.0.0.1 6379 redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no"
)

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

status=0
for name in "${!services[@]}"; do
    read -r host port start <<<"${services[$name]}"
    if port_open "$host" "$port"; then
        echo "services.sh: $name is up on $host:$port"
        continue
    fi
    if [ "$action" = start ]; then
        echo "services.sh: starting $name"
        bash -c "$start"
        for _ in $(seq 1 60); do
            port_open "$host" "$port" && break
            sleep 0.5
        done
    fi
    if port_open "$host" "$port"; then
        echo "services.sh: $name is up on $host:$port"
    else
        echo "services.sh: $name is NOT reachable on $host:$port" >&2
        status=1
    fi
done
[ "${#services[@]}" -gt 0 ] || echo "services.sh: no broker is needed by the current components"
exit "$status"
