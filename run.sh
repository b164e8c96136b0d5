#!/usr/bin/env bash
# Installs missing dependencies, builds dsinfer (Release) and runs the digits example.
# Usage: ./run.sh            (from any directory; environment: see scripts/build.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/build.sh
"$build_dir/examples/dsinfer-digits" models/digits
