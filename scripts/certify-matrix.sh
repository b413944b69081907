#!/usr/bin/env bash
# The CI certification pipeline, step by step, on any machine: the GitHub Actions
# workflow (.github/workflows/certify.yml) runs each step as its own job, and
# `all` runs them here one after another.
#
#   certify-matrix.sh shard NAME OUT [certify options]
#       certifies one component (a shard) into OUT; OUT/report.json is the job's
#       artifact. Exit 1 when a cell fails, 0 otherwise.
#   certify-matrix.sh merge SHARDS OUT [merge options]
#       merges every SHARDS/*/report.json into OUT (HTML, Markdown, JUnit, JSON) and,
#       under GitHub Actions, adds the Markdown to the job summary. With
#       PUBSUB_BASELINE=old/report.json the changed cells are marked and only a
#       regression fails the merge.
#   certify-matrix.sh all [OUT] [certify options]
#       every fixture (or the names in COMPONENTS) as its own shard, then the merge
#       into OUT (default reports/matrix).
#
# PUBSUB_CONFORMANCE_BIN names a built binary to use instead of `cargo run --release`.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${PUBSUB_CONFORMANCE_BIN:-}" ]; then
    suite=("$PUBSUB_CONFORMANCE_BIN")
else
    suite=(cargo run --release --locked --quiet --)
fi

usage() {
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

shard() {
    local name="$1" out="$2"
    shift 2
    "${suite[@]}" certify --component "$name" --out "$out" --fail-not-provisioned "$@"
}

merge() {
    local shards="$1" out="$2"
    shift 2
    local inputs=()
    for report in "$shards"/*/report.json; do
        [ -f "$report" ] && inputs+=("$report")
    done
    if [ "${#inputs[@]}" -eq 0 ]; then
        echo "certify-matrix.sh: no shard report in $shards/*/report.json" >&2
        exit 2
    fi
    local baseline=()
    if [ -n "${PUBSUB_BASELINE:-}" ]; then
        if [ -f "$PUBSUB_BASELINE" ]; then
            baseline=(--baseline "$PUBSUB_BASELINE" --fail-on-regression)
        else
            echo "certify-matrix.sh: no baseline at $PUBSUB_BASELINE; merging without one" >&2
        fi
    fi
    local status=0
    "${suite[@]}" merge "${inputs[@]}" --out "$out" "${baseline[@]}" "$@" || status=$?
    if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/report.md" ]; then
        cat "$out/report.md" >>"$GITHUB_STEP_SUMMARY"
    fi
    return "$status"
}

components() {
    if [ -n "${COMPONENTS:-}" ]; then
        echo "$COMPONENTS"
    else
        for fixture in fixtures/*.yaml; do
            basename "$fixture" .yaml
        done
    fi
}

case "${1:-}" in
shard)
    [ $# -ge 3 ] || usage
    shift
    shard "$@"
    ;;
merge)
    [ $# -ge 3 ] || usage
    shift
    merge "$@"
    ;;
all)
    shift
    out="${1:-reports/matrix}"
    [ $# -gt 0 ] && shift
    shards="$out/shards"
    rm -rf "$shards"
    status=0
    for name in $(components); do
        echo "== shard $name"
        shard "$name" "$shards/$name" "$@" || status=$?
    done
    echo "== merge"
    merge "$shards" "$out" || status=$?
    exit "$status"
    ;;
*)
    usage
    ;;
esac
