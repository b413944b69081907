#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: installs what is missing
# (scripts/install.sh) and starts the shared brokers (scripts/services.sh), then runs
# the workspace (unit tests, the catalogue against every component on real brokers,
# the suite's tests of itself, CLI, snapshots, browser) and the third-party
# certifications in thirdparty/ (each its own workspace, sharing this target
# directory). Extra arguments go to every nextest run.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

./scripts/install.sh
./scripts/services.sh start

status=0
cargo nextest run --workspace --locked --no-fail-fast "$@" || status=$?
for crate in thirdparty/*/; do
    [ -f "$crate/Cargo.toml" ] || continue
    echo "== $crate"
    (cd "$crate" && CARGO_TARGET_DIR="$root/target" cargo nextest run --locked --no-fail-fast "$@") || status=$?
done
exit "$status"
