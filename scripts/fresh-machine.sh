#!/usr/bin/env bash
# Checks the README's first command on a fresh machine: a minimal Debian container
# with only Rust in it (the host's toolchain, mounted read-only, and the C toolchain
# that Rust's linker and the bundled librdkafka build need: Debian's build-essential)
# and none of the brokers. It clones this checkout, builds the suite with network
# (crates.io), then runs `cargo run --release -- certify` with no network and checks
# what the README promises: exit 0, the in-memory component certified, every other
# component NOT PROVISIONED with a hint naming the script to run.
#
# Usage: scripts/fresh-machine.sh [--rebuild]
# PCS_FRESH_CPU_SHARES gives the container a CPU weight (docker's --cpu-shares, 1024 by
# default): CI runs this beside the tests with a low one, so the tests keep the CPU.
# Needs a Docker engine and debootstrap (scripts/install.sh); the image
# pcs/fresh:<suite> is built once by scripts/images.sh (about a minute) and kept.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

suite="${PCS_SUITE:-bookworm}"
image="pcs/fresh:$suite"

docker info >/dev/null 2>&1 || { echo "fresh-machine.sh: no Docker engine answers (scripts/install.sh starts one)" >&2; exit 1; }
rustc_bin="$(rustc --print sysroot)/bin"
toolchain="$(rustc --print sysroot)"
[ -x "$rustc_bin/cargo" ] || { echo "fresh-machine.sh: no cargo beside rustc in $rustc_bin" >&2; exit 1; }
scripts/images.sh ${1:+"$1"} fresh

# The clone and the build live in a volume of this run, so the certify step (no
# network) uses what the build step fetched and compiled.
volume="pcs-fresh-$$"
docker volume create "$volume" >/dev/null
trap 'docker volume rm -f "$volume" >/dev/null' EXIT
run() {
    docker run --rm ${PCS_FRESH_CPU_SHARES:+--cpu-shares "$PCS_FRESH_CPU_SHARES"} "$@"
}
common=(-v "$toolchain:/opt/rust:ro" -v "$volume:/fresh" -e PATH=/opt/rust/bin:/usr/sbin:/usr/bin:/sbin:/bin
    -e CARGO_HOME=/fresh/cargo-home -w /fresh/suite)

# The checkout may belong to another user than the container's root: git is told to
# trust it for the clone. The build reaches crates.io as this machine does: its network and its trust store
# (a registry proxy may sign with a local authority).
echo "fresh-machine.sh: cloning and building in $image (with network, for crates.io)"
run --network host -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    -v "$repo:/src:ro" "${common[@]}" -w /fresh "$image" sh -c \
    'git -c safe.directory="*" clone -q /src /fresh/suite && cd /fresh/suite && cargo build --release --locked'

echo "fresh-machine.sh: cloned and built in $SECONDS s"
echo "fresh-machine.sh: the README's certify command, with no network and no brokers"
started=$SECONDS
status=0
output="$(run --network none "${common[@]}" "$image" cargo run --release --locked -q -- certify 2>&1)" || status=$?
printf '%s\n' "$output"
echo "fresh-machine.sh: certify took $((SECONDS - started)) s; $SECONDS s in all"
fail() { echo "fresh-machine.sh: FAILED: $1" >&2; exit 1; }
[ "$status" = 0 ] || fail "certify exited with $status, not 0"
# The summary table's memory row: some cases pass, none fails (columns: pass fail ...).
printf '%s\n' "$output" | grep -Eq '^memory +[1-9][0-9]* +0 ' || fail "the in-memory component is not certified"
for component in redis nats postgres rabbitmq mqtt kafka; do
    hint="$(printf '%s\n' "$output" | grep -E "^NOT PROVISIONED $component: " || true)"
    [ -n "$hint" ] || fail "$component is not reported NOT PROVISIONED"
    printf '%s\n' "$hint" | grep -q 'scripts/install.sh' || fail "the line for $component names no script: $hint"
done
echo "fresh-machine.sh: OK: exit 0, memory certified, every broker component NOT PROVISIONED with a hint"
