#!/usr/bin/env bash
# Mutation testing of the in-memory reference component and the runtime layer with
# cargo-mutants (pinned below; installed on first use into the cache
# PCS_MUTANTS_ROOT names): every mutant of components/src/memory and components/src/runtime
# is judged by the in-memory catalogue and the pinned declaration (.cargo/mutants.toml).
# Arguments go to `cargo mutants`: `--list`, `--shard 3/16` (a full run is about 531
# mutants of up to 45 s each on 2 cores: run it in shards and keep each shard's
# mutants.out),
# `--in-diff change.diff`. Results land in $PCS_MUTANTS_OUT (default mutants-run/),
# which git ignores; docs/mutation-testing.md keeps the counts and the equivalents.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=27.1.0
root="${PCS_MUTANTS_ROOT:-/var/cache/pcs/cargo-mutants}"
if [ "$("$root/bin/cargo-mutants" mutants --version 2>/dev/null)" != "cargo-mutants $VERSION" ]; then
    echo "mutants.sh: installing cargo-mutants $VERSION into $root"
    cargo install --locked --force "cargo-mutants@$VERSION" --root "$root"
fi
export PATH="$root/bin:$PATH"
# Its own target directory: the mutated tree builds apart from the suite's.
export CARGO_TARGET_DIR="${PCS_MUTANTS_TARGET:-/var/cache/pcs/mutants-target}"
mkdir -p "${PCS_MUTANTS_OUT:-mutants-run}"
# cargo-mutants 27.1.0 runs its baseline on the mutated package's own tests whatever
# --test-package says (and that package has no `memory` target): the baseline is
# skipped, with fixed timeouts instead; the unmutated catalogue passes in CI.
# Without default features only the in-memory component is compiled (no broker client
# is built or linked), so a mutant builds in seconds.
exec cargo mutants -p pubsub-components --test-package pubsub-conformance --baseline skip \
    --no-default-features \
    --timeout 600 --build-timeout 1200 --no-shuffle --output "${PCS_MUTANTS_OUT:-mutants-run}" "$@"
