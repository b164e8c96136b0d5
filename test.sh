#!/usr/bin/env bash
# Installs missing dependencies, builds dsinfer (Release) and runs the whole test suite.
# Usage: ./test.sh           (from any directory; environment: see scripts/build.sh)
# Then the concurrency tests (BatchScheduler storm, MemoryPool) run under ThreadSanitizer in a
# separate build (scripts/sanitize.sh thread, about 2 minutes); DSINFER_SANITIZERS=0 skips it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/build.sh
ctest --test-dir "$build_dir" --output-on-failure -j"$jobs"
if [[ "${DSINFER_SANITIZERS:-1}" != 0 ]]; then
    DSINFER_JOBS="$jobs" scripts/sanitize.sh thread "$build_dir-tsan"
fi
