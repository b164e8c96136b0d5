#!/usr/bin/env bash
# Installs missing dependencies, builds dsinfer (Release) and runs the whole test suite.
# Usage: ./test.sh           (from any directory; environment: see scripts/build.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/build.sh
ctest --test-dir "$build_dir" --output-on-failure -j"$jobs"
