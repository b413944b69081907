#!/usr/bin/env bash
# Certifies the third-party crates in thirdparty/ (each with its own command line, the
# suite's with its component types registered) and merges their rows into the main
# report: reports/latest (run `cargo run --release -- certify` first) + every
# reports/thirdparty-<crate> -> reports/merged. Extra arguments go to each certify.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
inputs=()
[ -f reports/latest/report.json ] && inputs+=(reports/latest/report.json)
status=0
for crate in thirdparty/*/; do
    [ -f "$crate/Cargo.toml" ] || continue
    name="$(basename "$crate")"
    out="$root/reports/thirdparty-$name"
    (cd "$crate" && CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}" cargo run --release --locked -- \
        certify --fixtures fixtures --out "$out" "$@") || status=$?
    [ -f "$out/report.json" ] && inputs+=("$out/report.json")
done
if [ "${#inputs[@]}" -gt 0 ]; then
    cargo run --release --locked -- merge "${inputs[@]}" --out reports/merged || status=$?
fi
exit "$status"
