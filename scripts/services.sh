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
    [nats]="127.0.0.1 4222 start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server"
    [postgres]="127.0.0.1 5432 pg_ctlcluster --skip-systemctl-redirect \$(ls /etc/postgresql) main start"
    [rabbitmq]="127.0.0.1 5672 rabbitmq-server -detached"
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
        for _ in $(seq 1 120); do
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
# The database fixtures/postgres.yaml names.
if [ "$action" = start ] && port_open 127.0.0.1 5432 && command -v psql >/dev/null; then
    if ! psql -h 127.0.0.1 -U postgres -tAc "select 1 from pg_database where datname = 'test'" | grep -q 1; then
        createdb -h 127.0.0.1 -U postgres test && echo "services.sh: created database test"
    fi
fi
exit "$status"
