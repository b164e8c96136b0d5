#!/usr/bin/env bash
# Builds and runs dsinfer's concurrency tests under a sanitizer.
# Usage: scripts/sanitize.sh thread|address [build-dir]
#   thread  -> -DDSINFER_SANITIZE=thread,            default build dir build-tsan
#   address -> -DDSINFER_SANITIZE=address;undefined, default build dir build-asan
# Only dsinfer_concurrency_tests is built (tests/CMakeLists.txt: the BatchScheduler, MemoryPool
# and AdaptiveBatchController tests, header-only components, without the library); examples
# and benchmarks are off (tools stay configured but are not built: tests/CMakeLists.txt refers
# to ds-conformance).
# It runs the [scheduler] tests (storm at DSINFER_STORM_THREADS x DSINFER_STORM_REQUESTS,
# default here 16 x 2,000), the [memory_pool] and the [adaptive] tests. A report makes
# the run fail (halt_on_error=1; scripts/tsan.supp holds the one known false positive).
# Environment: DSINFER_JOBS (default: all cores), TSAN_OPTIONS, ASAN_OPTIONS, UBSAN_OPTIONS
# (defaults below), CXX.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

kind=${1:-}
case "$kind" in
    thread) sanitize="thread"; default_dir=build-tsan ;;
    address) sanitize="address;undefined"; default_dir=build-asan ;;
    *) echo "usage: $0 thread|address [build-dir]" >&2; exit 2 ;;
esac
build_dir=${2:-$default_dir}
jobs=${DSINFER_JOBS:-$(nproc)}

start=$(date +%s)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DDSINFER_SANITIZE=$sanitize" -DDSINFER_BUILD_TESTS=ON -DDSINFER_BUILD_TOOLS=ON \
    -DDSINFER_BUILD_EXAMPLES=OFF -DDSINFER_BUILD_BENCHMARKS=OFF -DDSINFER_INSTALL=OFF \
    -DDSINFER_WITH_CUDA=OFF >/dev/null
cmake --build "$build_dir" --parallel "$jobs" --target dsinfer_concurrency_tests
built=$(date +%s)

export DSINFER_STORM_THREADS=${DSINFER_STORM_THREADS:-16}
export DSINFER_STORM_REQUESTS=${DSINFER_STORM_REQUESTS:-2000}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp}
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1 detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1 print_stacktrace=1}
tests="$build_dir/tests/dsinfer_concurrency_tests"
"$tests" "[scheduler]" --durations yes
"$tests" "[memory_pool]" --durations yes
"$tests" "[adaptive]" --durations yes
done_at=$(date +%s)
echo "sanitize.sh $kind: passed (build $((built - start)) s, tests $((done_at - built)) s)"
