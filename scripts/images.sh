#!/usr/bin/env bash
# Builds one local container image per broker from Debian's packages (no image
# registry is needed): debootstrap a minimal rootfs with the broker's package, add an
# entrypoint, `docker import` it as pcs/<broker>:bookworm. Images that already exist
# are kept.
#
# Usage: scripts/images.sh [--rebuild] [--versions] [broker[@suite] ...]
#   brokers: redis valkey nats mosquitto rabbitmq postgres tansu (default: all but
#              valkey, from PCS_SUITE)
#   broker@suite  builds the broker from that Debian release (bullseye, bookworm,
#              trixie, forky): pcs/<broker>:<suite>, also tagged by the broker
#              version it got, e.g. pcs/redis:8.0.2 (label org.pcs.version)
#   --versions every Debian release that has each named broker (default: every
#              broker with versions): the broker-version axis (certify
#              --broker-versions); images already built are kept
#   fresh      (never built by default) pcs/fresh:<suite>, a machine with no broker:
#              only the C toolchain Rust's linker and librdkafka need, git and CA
#              certificates, no entrypoint (scripts/fresh-machine.sh runs it)
#   --rebuild  removes and builds the named images again
# Environment: PCS_DEBIAN_MIRROR (default: the machine's apt source), PCS_SUITE
# (default: bookworm), PCS_IMAGE_CACHE (.deb cache, default /var/cache/pcs-images).
set -euo pipefail

# broker -> the Debian releases that carry it (the broker-version axis)
declare -A releases=(
    [redis]="bullseye bookworm trixie forky"
    [valkey]="trixie forky"
    [nats]="bookworm trixie forky"
    [mosquitto]="bullseye bookworm trixie forky"
    [rabbitmq]="bullseye bookworm trixie forky"
    [postgres]="bullseye bookworm trixie forky"
)

rebuild=no
versions=no
brokers=()
for arg in "$@"; do
    name="${arg%@*}"
    case "$arg" in
        --rebuild) rebuild=yes ;;
        --versions) versions=yes ;;
        *)
            case "$name" in
                redis | valkey | nats | mosquitto | rabbitmq | postgres | tansu | fresh) ;;
                *) echo "images.sh: unknown argument '$arg' (brokers: redis valkey nats mosquitto rabbitmq postgres tansu, each optionally @suite; or fresh)" >&2; exit 2 ;;
            esac
            if [ "$arg" != "$name" ] && [[ " ${releases[$name]:-} " != *" ${arg#*@} "* ]]; then
                echo "images.sh: Debian has no $name in '${arg#*@}' (it has it in: ${releases[$name]:-none})" >&2
                exit 2
            fi
            brokers+=("$arg")
            ;;
    esac
done
if [ "$versions" = yes ]; then
    [ "${#brokers[@]}" -gt 0 ] || brokers=(redis valkey nats mosquitto rabbitmq postgres)
    expanded=()
    for broker in "${brokers[@]}"; do
        if [ "$broker" != "${broker%@*}" ]; then
            expanded+=("$broker")
            continue
        fi
        [ -n "${releases[$broker]:-}" ] || { echo "images.sh: $broker has no version axis" >&2; exit 2; }
        for release in ${releases[$broker]}; do expanded+=("$broker@$release"); done
    done
    brokers=("${expanded[@]}")
fi
[ "${#brokers[@]}" -gt 0 ] || brokers=(redis nats mosquitto rabbitmq postgres tansu)

default_suite="${PCS_SUITE:-bookworm}"
cache="${PCS_IMAGE_CACHE:-/var/cache/pcs-images}"
mirror="${PCS_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
    mirror="$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
        | grep -oE 'https?://[^ ]+' | head -n1 || true)"
    mirror="${mirror:-http://deb.debian.org/debian}"
fi

if ! docker info >/dev/null 2>&1; then
    echo "images.sh: no Docker engine answers (scripts/install.sh starts one)" >&2
    exit 1
fi
command -v debootstrap >/dev/null || { echo "images.sh: debootstrap is missing (scripts/install.sh)" >&2; exit 1; }

# broker -> Debian package
declare -A packages=(
    [redis]=redis-server
    [valkey]=valkey-server
    [nats]=nats-server
    [mosquitto]=mosquitto
    [rabbitmq]=rabbitmq-server
    [postgres]="postgresql,postgresql-client"
    # Not a Debian package: the binary scripts/install.sh built is copied in.
    [tansu]="ca-certificates"
    # No broker: what a fresh machine has besides Rust.
    [fresh]="build-essential,git,ca-certificates"
)

# broker -> entrypoint script. Containers run with the host's network (the suite
# starts them with --network host), so each listens on 127.0.0.1:$PCS_PORT (and
# RabbitMQ's distribution on $PCS_AUX_PORT); data lives in /data inside the container,
# so it survives a restart of the container.
entrypoint() {
    case "$1" in
        redis) cat <<'EOF'
#!/bin/sh
# Append-only persistence, so a restarted container keeps what was acknowledged.
mkdir -p /data
exec redis-server --bind 127.0.0.1 --port "${PCS_PORT:-6379}" --dir /data --appendonly yes --appendfsync always --save ''
EOF
            ;;
        valkey) cat <<'EOF'
#!/bin/sh
mkdir -p /data
exec valkey-server --bind 127.0.0.1 --port "${PCS_PORT:-6379}" --dir /data --appendonly yes --appendfsync always --save ''
EOF
            ;;
        nats) cat <<'EOF'
#!/bin/sh
mkdir -p /data
exec nats-server -a 127.0.0.1 -p "${PCS_PORT:-4222}" -js -sd /data
EOF
            ;;
        mosquitto) cat <<'EOF'
#!/bin/sh
mkdir -p /data
cat > /data/mosquitto.conf <<CONF
listener ${PCS_PORT:-1883} 127.0.0.1
allow_anonymous true
max_queued_messages 0
set_tcp_nodelay true
persistence true
persistence_location /data/
user root
CONF
exec mosquitto -c /data/mosquitto.conf
EOF
            ;;
        rabbitmq) cat <<'EOF'
#!/bin/sh
port="${PCS_PORT:-5672}"
mkdir -p /data/mnesia /data/log
printf 'listeners.tcp.1 = 127.0.0.1:%s\nloopback_users = none\n' "$port" > /data/rabbitmq.conf
printf '[].\n' > /data/enabled_plugins
: > /data/rabbitmq-env.conf
export HOME=/data RABBITMQ_NODENAME="pcs-c$port@localhost" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$port" RABBITMQ_DIST_PORT="${PCS_AUX_PORT:-25672}" \
    RABBITMQ_MNESIA_BASE=/data/mnesia RABBITMQ_LOG_BASE=/data/log \
    RABBITMQ_CONFIG_FILE=/data/rabbitmq.conf RABBITMQ_CONF_ENV_FILE=/data/rabbitmq-env.conf \
    RABBITMQ_ENABLED_PLUGINS_FILE=/data/enabled_plugins
exec /usr/lib/rabbitmq/bin/rabbitmq-server
EOF
            ;;
        postgres) cat <<'EOF'
#!/bin/sh
port="${PCS_PORT:-5432}"
bin="$(ls -d /usr/lib/postgresql/*/bin | sort | tail -n1)"
data=/data/pg
mkdir -p /data && chown postgres:postgres /data
if [ ! -s "$data/PG_VERSION" ]; then
    su postgres -s /bin/sh -c "$bin/initdb -D $data -U postgres --auth=trust -E UTF8" >/dev/null
    echo "CREATE DATABASE test;" | su postgres -s /bin/sh -c "$bin/postgres --single -D $data postgres" >/dev/null
fi
exec su postgres -s /bin/sh -c "exec $bin/postgres -D $data -p $port -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off"
EOF
            ;;
        tansu) cat <<'EOF'
#!/bin/sh
# SQLite storage in /data, so a restarted container keeps what was acknowledged.
port="${PCS_PORT:-9092}"
mkdir -p /data && cd /data
export NO_COLOR=1
exec /usr/local/bin/tansu broker --listener-url "tcp://127.0.0.1:$port" \
    --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine sqlite://tansu.db
EOF
            ;;
    esac
}


# The broker's version: its package's upstream version (no epoch, no Debian revision),
# e.g. 5:7.0.15-1~deb12u1 -> 7.0.15. The arguments after the broker run a command in
# the rootfs or image that has it (`chroot DIR`, `docker run --rm --entrypoint "" IMAGE`).
broker_version() {
    local broker="$1" package
    shift
    case "$broker" in
        postgres) package="$("$@" dpkg-query -W -f '${Package}\n' 'postgresql-[0-9]*' | grep -E '^postgresql-[0-9]+$' | head -n1)" ;;
        *) package="${packages[$broker]%%,*}" ;;
    esac
    "$@" dpkg-query -W -f '${Version}' "$package" | sed -E 's/^[0-9]+://; s/[-+~].*$//'
}

mkdir -p "$cache"
for target in "${brokers[@]}"; do
    broker="${target%@*}"
    suite="$default_suite"
    [ "$target" = "$broker" ] || suite="${target#*@}"
    # Debian's debootstrap of bookworm knows no forky; its sid script serves it.
    script=()
    [ "$suite" != forky ] || script=(/usr/share/debootstrap/scripts/sid)
    image="pcs/$broker:$suite"
    if docker image inspect "$image" >/dev/null 2>&1; then
        if [ "$rebuild" = yes ]; then
            docker image rm -f "$image" >/dev/null
        else
            version="$(docker image inspect --format '{{ index .Config.Labels "org.pcs.version" }}' "$image")"
            if [ -z "$version" ] && [ -n "${releases[$broker]:-}" ]; then
                # Built before images recorded their version: read it from the image
                # and record it there, as a new build would.
                version="$(broker_version "$broker" docker run --rm --entrypoint "" "$image")"
                printf 'FROM %s\nLABEL org.pcs.version=%s\n' "$image" "$version" | docker build -q -t "$image" - >/dev/null 2>&1
            fi
            [ -z "$version" ] || docker tag "$image" "pcs/$broker:$version"
            echo "images.sh: $image exists${version:+ (= pcs/$broker:$version)}"
            continue
        fi
    fi
    started=$(date +%s)
    root="$(mktemp -d "/tmp/pcs-rootfs-$broker-XXXX")"
    trap 'rm -rf "$root"' EXIT
    echo "images.sh: building $image (debootstrap $suite with ${packages[$broker]})"
    if ! debootstrap --variant=minbase --cache-dir="$cache" --include="${packages[$broker]}" \
        "$suite" "$root" "$mirror" "${script[@]}" >"$root.log" 2>&1; then
        echo "images.sh: debootstrap failed for $broker; its log:" >&2
        tail -n 20 "$root.log" >&2
        exit 1
    fi
    if [ "$broker" = tansu ]; then
        tansu_bin="$(readlink -f "$(command -v tansu || true)")"
        [ -x "$tansu_bin" ] || { echo "images.sh: tansu is not built (scripts/install.sh --broker kafka)" >&2; exit 1; }
        install -m 755 "$tansu_bin" "$root/usr/local/bin/tansu"
    fi
    changes=(--change "LABEL org.pcs.broker=$broker org.pcs.suite=$suite")
    version=""
    if [ -n "${releases[$broker]:-}" ]; then
        version="$(broker_version "$broker" chroot "$root")"
        changes=(--change "LABEL org.pcs.broker=$broker org.pcs.suite=$suite org.pcs.version=$version")
    fi
    if [ "$broker" != fresh ]; then
        entrypoint "$broker" >"$root/usr/local/bin/pcs-entrypoint"
        chmod 755 "$root/usr/local/bin/pcs-entrypoint"
        changes+=(--change "ENTRYPOINT [\"/usr/local/bin/pcs-entrypoint\"]")
    fi
    # Debian's package scripts may have started nothing (no init in a chroot); drop
    # what the image does not need.
    rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"* "$root/usr/share/doc" "$root/usr/share/man"
    tar -C "$root" -c . | docker import "${changes[@]}" - "$image" >/dev/null
    [ -z "$version" ] || docker tag "$image" "pcs/$broker:$version"
    rm -rf "$root" "$root.log"
    trap - EXIT
    echo "images.sh: built $image${version:+ (= pcs/$broker:$version)} in $(($(date +%s) - started)) s"
done
