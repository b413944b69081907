#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: installs what is missing
# (scripts/install.sh) and starts the shared brokers (scripts/services.sh), then runs
# the workspace (unit tests, the catalogue against every component on real brokers,
# the suite's tests of itself, CLI, snapshots, browser) and the third-party
# certifications in thirdparty/ and the example crates in examples/ (each its own
# workspace, sharing this target directory). Extra arguments go to every nextest run.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

./scripts/install.sh
./scripts/services.sh start

status=0
cargo nextest run --workspace --locked --no-fail-fast "$@" || status=$?
# The example component author's crate takes the harness without default features:
# no broker client may be compiled into it.
clients=$(cd examples/own-component && cargo tree --locked -e normal,dev --prefix none |
    grep -E '^(redis|lapin|rumqttc|async-nats|tokio-postgres) ' | sort -u || true)
if [ -n "$clients" ]; then
    echo "test.sh: examples/own-component compiles broker clients: $clients" >&2
    status=1
fi
for crate in thirdparty/*/ examples/*/; do
    [ -f "$crate/Cargo.toml" ] || continue
    echo "== $crate"
    (cd "$crate" && CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}" cargo nextest run --locked --no-fail-fast "$@") || status=$?
done
exit "$status"
