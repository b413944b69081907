#!/usr/bin/env bash
# Installs what the suite needs on a fresh Debian machine: Rust (checked, not
# installed: the machine's toolchain is used), cargo-nextest, and the Debian packages
# the tests use. Safe to run again.
set -euo pipefail

need() { command -v "$1" >/dev/null 2>&1; }

if ! need cargo; then
    echo "install.sh: cargo is missing; install Rust stable (https://rustup.rs) first" >&2
    exit 1
fi

# Debian packages: chromium for the browser test of the HTML report; the brokers the
# local-process provisioning spawns (redis-server, nats-server, mosquitto) and the servers
# the external provisioning uses (PostgreSQL, RabbitMQ, started by scripts/services.sh).
packages=(ca-certificates pkg-config chromium redis-server nats-server mosquitto
    postgresql postgresql-client rabbitmq-server)
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

if ! cargo nextest --version >/dev/null 2>&1; then
    echo "install.sh: installing cargo-nextest"
    cargo install --locked cargo-nextest
fi

cd "$(dirname "$0")/.."
cargo fetch --locked 2>/dev/null || cargo fetch
echo "install.sh: ready"
