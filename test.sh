#!/usr/bin/env bash
# Installs missing dependencies, builds dsinfer (Release) and runs the whole test suite.
# Usage: ./test.sh           (from any directory; environment: see scripts/build.sh)
# Then the header-only concurrency tests (BatchScheduler storm, MemoryPool, adaptive batching)
# run under ThreadSanitizer in a separate build (scripts/sanitize.sh concurrency, about 2
# minutes); DSINFER_SANITIZERS=0 skips it. The whole unit suite under ASan+UBSan and the engine's
# concurrency tests under TSan (scripts/sanitize.sh address|thread) each rebuild the library and
# do not fit CI's time on 2 cores: docs/HARDENING.md says where they run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source scripts/build.sh
ctest --test-dir "$build_dir" --output-on-failure -j"$jobs"
if [[ "${DSINFER_SANITIZERS:-1}" != 0 ]]; then
    DSINFER_JOBS="$jobs" scripts/sanitize.sh concurrency "$build_dir-tsan"
fi
