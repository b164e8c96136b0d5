#!/usr/bin/env bash
# Runs dsinfer's libFuzzer targets (fuzz/README.md) and summarizes each run.
# Usage: scripts/fuzz.sh [--build] [--time SECONDS] [--jobs N] [target...]
#   --build        configure (clang, ASan+UBSan, DSINFER_BUILD_FUZZERS) and build the targets
#                  in $DSINFER_FUZZ_BUILD_DIR (default build-fuzz) first
#   --time S       seconds per target (default 60): libFuzzer -max_total_time; 0 = build only
#   --jobs N       build parallelism, and fuzzing processes per target (-fork=N when N > 1;
#                  default 1: one process)
#   target...      default: every fuzz_* target
# Each target fuzzes a work corpus in $DSINFER_FUZZ_WORK (default ${TMPDIR:-/tmp}/dsinfer-fuzz)
# seeded from fuzz/corpus/<target>/ (and, for fuzz_onnx_model, the model.onnx files of
# $DSINFER_ONNX_TESTS_DIR/node, default ../shared/onnx-backend-tests). Crash, leak, timeout and
# OOM inputs go to <work>/artifacts/<target>/; logs to <work>/<target>.log.
# Exit status: 1 when any target left an artifact.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

build=0
seconds=60
jobs=1
targets=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --build) build=1 ;;
        --time) seconds=${2:?--time needs a value}; shift ;;
        --jobs) jobs=${2:?--jobs needs a value}; shift ;;
        -h|--help) usage 0 ;;
        -*) echo "fuzz.sh: unknown option $1" >&2; usage 2 ;;
        *) targets+=("$1") ;;
    esac
    shift
done
[[ "$seconds" =~ ^[0-9]+$ && "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --time and --jobs take integers" >&2; exit 2; }

build_dir=${DSINFER_FUZZ_BUILD_DIR:-build-fuzz}
work=${DSINFER_FUZZ_WORK:-${TMPDIR:-/tmp}/dsinfer-fuzz}
onnx_tests=${DSINFER_ONNX_TESTS_DIR:-$PWD/../shared/onnx-backend-tests}
if [[ ${#targets[@]} -eq 0 ]]; then
    for f in fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi

if [[ $build -eq 1 ]]; then
    start=$(date +%s)
    CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S . -B "$build_dir" -G Ninja \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSINFER_BUILD_FUZZERS=ON \
        "-DDSINFER_SANITIZE=address;undefined" -DDSINFER_WITH_CUDA=OFF \
        -DDSINFER_BUILD_TESTS=OFF -DDSINFER_BUILD_TOOLS=OFF -DDSINFER_BUILD_EXAMPLES=OFF \
        -DDSINFER_BUILD_BENCHMARKS=OFF -DDSINFER_INSTALL=OFF >/dev/null
    nice cmake --build "$build_dir" --parallel "$jobs" --target "${targets[@]}"
    echo "fuzz.sh: built ${targets[*]} in $(( $(date +%s) - start )) s"
fi

if [[ $seconds -eq 0 ]]; then
    exit 0  # libFuzzer reads -max_total_time=0 as "no limit"
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

mkdir -p "$work"
echo "fuzz.sh: work corpus and logs in $work; artifacts in $work/artifacts/<target>/"
printf '%-20s %10s %8s %8s %9s  %s\n' target execs cov ft artifacts log
found=0
for t in "${targets[@]}"; do
    bin="$build_dir/fuzz/$t"
    if [[ ! -x "$bin" ]]; then
        echo "fuzz.sh: $bin is missing (run with --build)" >&2
        exit 2
    fi
    corpus="$work/$t"
    artifacts="$work/artifacts/$t"
    log="$work/$t.log"
    mkdir -p "$corpus" "$artifacts"
    seeds=()
    [[ -d "fuzz/corpus/$t" ]] && seeds+=("fuzz/corpus/$t")
    extra=()
    if [[ "$t" == fuzz_onnx_model ]]; then
        # Only the model files of the node tests (not their .pb tensors): links, not copies.
        if [[ -d "$onnx_tests/node" ]]; then
            node_seeds="$work/seeds-onnx-node"
            if [[ ! -d "$node_seeds" ]]; then
                mkdir -p "$node_seeds"
                for m in "$onnx_tests"/node/*/model.onnx; do
                    ln -sf "$(realpath "$m")" "$node_seeds/$(basename "$(dirname "$m")").onnx"
                done
            fi
            seeds+=("$node_seeds")
        else
            echo "fuzz.sh: no ONNX node tests at $onnx_tests/node: fuzzing from fuzz/corpus only" >&2
        fi
        extra+=(-dict=fuzz/onnx.dict)
    else
        # Structured targets: every byte is a choice; let inputs be long from the start.
        extra+=(-max_len=512 -len_control=0)
    fi
    [[ $jobs -gt 1 ]] && extra+=(-fork="$jobs")
    rc=0
    "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" "${extra[@]}" "$corpus" "${seeds[@]}" >"$log" 2>&1 || rc=$?
    execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log" | awk '{s += $2} END {print s + 0}')
    if [[ "$execs" == 0 ]]; then  # fork mode: the last "#N:" status line
        execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    fi
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
    ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | awk '{print $2}')
    n_art=$(find "$artifacts" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
        -o -name 'oom-*' \) | wc -l)
    printf '%-20s %10s %8s %8s %9s  %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$n_art" "$log"
    if [[ $n_art -gt 0 || $rc -ne 0 ]]; then
        found=1
        [[ $rc -ne 0 ]] && echo "  $t: libFuzzer exited with $rc; see $log" >&2
        find "$artifacts" -maxdepth 1 -type f | sed 's/^/  artifact: /' >&2
    fi
done
exit $found
