#!/usr/bin/env bash
# Installs what the suite needs on a fresh Debian machine: Rust (checked, not
# installed: the machine's toolchain is used), cargo-nextest, and the Debian packages
# the tests use. Safe to run again.
set -euo pipefail

need() { command -v "$1" >/dev/null 2>&1; }

# tansu, the Kafka-protocol broker the Kafka component is certified on: not packaged
# by Debian, built from crates.io (about 15 minutes on 2 cores) into a cache the
# machine keeps, /var/cache/pcs/tansu (PCS_TANSU_ROOT), and linked into /usr/local/bin.
# SQLite storage (libsql) makes it durable across a kill; dynostore gives the in-memory
# engine.
TANSU_VERSION=0.6.0
TANSU_FEATURES=dynostore,libsql
install_tansu() {
    local root="${PCS_TANSU_ROOT:-/var/cache/pcs/tansu}"
    local built="tansu $TANSU_VERSION --features $TANSU_FEATURES"
    if [ "$(cat "$root/pcs-built" 2>/dev/null)" != "$built" ] || ! [ -x "$root/bin/tansu" ]; then
        echo "install.sh: building $built (cached in $root)"
        mkdir -p "$root"
        cargo install --locked --force "tansu@$TANSU_VERSION" --features "$TANSU_FEATURES" --root "$root"
        echo "$built" >"$root/pcs-built"
    fi
    if [ "$(id -u)" = 0 ]; then
        ln -sf "$root/bin/tansu" /usr/local/bin/tansu
    elif ! need tansu; then
        echo "install.sh: add $root/bin to PATH for tansu" >&2
    fi
}

# `install.sh --broker NAME`: only the Debian/Ubuntu packages of one component's
# broker (a CI shard of scripts/certify-matrix.sh), nothing else.
if [ "${1:-}" = "--broker" ]; then
    case "${2:-}" in
    memory) packages=() ;;
    redis) packages=(redis-server) ;;
    nats) packages=(nats-server) ;;
    mqtt) packages=(mosquitto) ;;
    postgres) packages=(postgresql postgresql-client) ;;
    rabbitmq) packages=(rabbitmq-server) ;;
    kafka)
        install_tansu
        exit 0
        ;;
    *)
        echo "install.sh: no broker known for '${2:-}'; known: memory, redis, nats, mqtt, postgres, rabbitmq, kafka" >&2
        exit 2
        ;;
    esac
    missing=()
    for p in "${packages[@]}"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    fi
    echo "install.sh: the broker of ${2} is installed"
    exit 0
fi

if ! need cargo; then
    echo "install.sh: cargo is missing; install Rust stable (https://rustup.rs) first" >&2
    exit 1
fi

# Debian packages: chromium for the browser test of the HTML report; the brokers the
# local-process provisioning spawns (redis-server, nats-server, mosquitto) and the servers
# the external provisioning uses (PostgreSQL, RabbitMQ, started by scripts/services.sh).
# docker.io and debootstrap: the container provisioning (a Docker engine, and the broker
# images scripts/images.sh builds from Debian's packages, since no image registry is
# reachable).
packages=(ca-certificates pkg-config chromium redis-server nats-server mosquitto
    postgresql postgresql-client rabbitmq-server docker.io debootstrap)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    else
        echo "install.sh: please install: ${missing[*]} (needs root)" >&2
        exit 1
    fi
fi

# A Docker engine for the container kind: started when none answers. Containers run
# with the host's network (on loopback ports), so the engine needs no bridge and
# touches no firewall rules.
if ! docker info >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null; then
        echo "install.sh: starting dockerd"
        mkdir -p /var/log
        nohup dockerd --iptables=false --ip6tables=false --bridge=none >/var/log/pcs-dockerd.log 2>&1 &
        for _ in $(seq 1 60); do
            docker info >/dev/null 2>&1 && break
            sleep 0.5
        done
    fi
    if docker info >/dev/null 2>&1; then
        echo "install.sh: Docker engine is up"
    else
        echo "install.sh: no Docker engine answers; the container kind will report NOT PROVISIONED" >&2
    fi
fi

cd "$(dirname "$0")/.."
# The broker images (kept by the engine between runs; only missing ones are built).
# Building one mostly waits on the package mirror and the disk, so the images of
# Debian's brokers are built while tansu and cargo-nextest compile; tansu's image
# takes the built binary, so it comes after.
images_log=$(mktemp)
images_pid=
if docker info >/dev/null 2>&1; then
    ./scripts/images.sh redis nats mosquitto rabbitmq postgres >"$images_log" 2>&1 &
    images_pid=$!
fi

install_tansu

if ! cargo nextest --version >/dev/null 2>&1; then
    echo "install.sh: installing cargo-nextest"
    cargo install --locked cargo-nextest
fi

if [ -n "$images_pid" ]; then
    images_status=0
    wait "$images_pid" || images_status=$?
    cat "$images_log"
    rm -f "$images_log"
    if [ "$images_status" != 0 ]; then
        echo "install.sh: building the broker images failed (exit $images_status)" >&2
        exit "$images_status"
    fi
    ./scripts/images.sh tansu
fi
cargo fetch --locked 2>/dev/null || cargo fetch

# Dapr's JavaScript SDK, pinned by sdk/js/package-lock.json, for the tests that drive
# serve with it (sidecar/tests/sdk_js.rs); Node.js and npm from the machine, or Debian.
if ! need node || ! need npm; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
    else
        echo "install.sh: please install nodejs and npm (needs root)" >&2
        exit 1
    fi
fi
if ! cmp -s sdk/js/package-lock.json sdk/js/node_modules/.pcs-installed-lock; then
    echo "install.sh: installing Dapr's JavaScript SDK (npm ci in sdk/js)"
    npm ci --silent --no-audit --no-fund --prefix sdk/js
    cp sdk/js/package-lock.json sdk/js/node_modules/.pcs-installed-lock
fi
# Dapr's Python SDK, pinned by sdk/python/requirements.txt, in a virtual environment
# (sdk/python/.venv), for the test that drives serve over gRPC with its generated stubs
# (sidecar/tests/sdk_python.rs); python3 and its venv module from the machine, or Debian.
if ! need python3 || ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv
    else
        echo "install.sh: please install python3 and python3-venv (needs root)" >&2
        exit 1
    fi
fi
if ! cmp -s sdk/python/requirements.txt sdk/python/.venv/.pcs-installed-requirements; then
    echo "install.sh: installing Dapr's Python SDK (pip install -r sdk/python/requirements.txt into sdk/python/.venv)"
    python3 -m venv sdk/python/.venv
    sdk/python/.venv/bin/pip install --quiet --disable-pip-version-check -r sdk/python/requirements.txt
    cp sdk/python/requirements.txt sdk/python/.venv/.pcs-installed-requirements
fi
echo "install.sh: ready"
