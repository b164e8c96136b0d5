#!/usr/bin/env bash
# gpu-check.sh — the one prepared script for a GPU machine (Step 5). Within about 8 minutes:
#   build     dsinfer for sm_90 only (skipped with --prebuilt: binaries built elsewhere with
#             -DDSINFER_CUDA_ARCHITECTURES=90 by scripts/gpu-bundle.sh)
#   tests     the [cuda] unit tests (the CUDA op tester: every CUDA kernel against the reference)
#   memcheck  compute-sanitizer memcheck on the [cuda] tests (time-capped)
#   conform   the ONNX node conformance suite on the CUDA device (sharded over the cores)
#   models    BERT-base and ResNet-50 ONNX files (scripts/gpu_models.py, random weights)
#   accuracy  the whole models on the GPU against ONNX Runtime (CPU) reference cases
#   bench     ds-benchmark: BERT-base fp16 seq 128 batch 1/8/64/256, ResNet-50 fp16 batch 1/64
#   torch     PyTorch eager fp16 on the same architectures and shapes (scripts/gpu_torch_bench.py)
#   summary   one JSON summary (scripts/gpu_summary.py)
# and writes everything into RESULTS_DIR (8 files: check.json, summary.json, bench.jsonl,
# torch.json, tests.txt, memcheck.txt, conformance.txt, log.txt).
#
# Usage: scripts/gpu-check.sh RESULTS_DIR [--prebuilt DIR] [--steps a,b,...] [--data DIR]
#   --prebuilt DIR  folder with bin/{dsinfer_tests,ds-benchmark,ds-conformance} and lib/ (the
#                   shared libraries they need that the GPU machine lacks)
#   --data DIR      the ONNX backend test data (node/); default ../shared/onnx-backend-tests
#   --steps LIST    subset of: build,tests,memcheck,conform,models,accuracy,bench,torch,summary
# Exit status: 0 when every step that ran passed, 1 otherwise (check.json says which).
set -u
results=${1:?usage: scripts/gpu-check.sh RESULTS_DIR [--prebuilt DIR] [--steps LIST] [--data DIR]}
shift
prebuilt="" data="../shared/onnx-backend-tests"
steps="build,tests,memcheck,conform,models,accuracy,bench,torch,summary"
while [[ $# -gt 0 ]]; do
    case $1 in
        --prebuilt) prebuilt=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --data) data=$2; shift 2 ;;
        *) echo "gpu-check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$results"
results=$(cd "$results" && pwd)
log="$results/log.txt"
start=$(date +%s)
declare -A status
want() { [[ ",$steps," == *",$1,"* ]]; }
note() { echo "[$(( $(date +%s) - start ))s] $*" | tee -a "$log"; }
record() { status[$1]=$2; note "step $1: $2"; }

note "gpu-check on $(hostname): $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)"
{ nvidia-smi; nvcc --version; python3 -c 'import torch; print("torch", torch.__version__)'; } >>"$log" 2>&1

# ---- build -----------------------------------------------------------------------------------
if [[ -n $prebuilt ]]; then
    bin=$(cd "$prebuilt" && pwd)/bin
    export LD_LIBRARY_PATH="$(cd "$prebuilt" && pwd)/lib:${LD_LIBRARY_PATH:-}"
    record build "prebuilt ($prebuilt)"
elif want build; then
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    if cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSINFER_CUDA_ARCHITECTURES=90 \
            -DCMAKE_CUDA_COMPILER="$nvcc" -DDSINFER_WITH_ONEDNN=OFF >>"$log" 2>&1 &&
        cmake --build build-gpu --parallel "$(nproc)" --target dsinfer_tests ds-benchmark ds-conformance >>"$log" 2>&1; then
        record build ok
    else
        record build FAILED
    fi
    bin=build-gpu/bin
    mkdir -p "$bin"
    for t in tests/dsinfer_tests tools/ds-benchmark tools/ds-conformance; do
        [[ -x build-gpu/$t ]] && ln -sf "$PWD/build-gpu/$t" "$bin/"
    done
fi
# Library paths of the GPU machine's CUDA libraries (toolkit, or PyTorch's wheels).
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, q, "lib") for p in nvidia.__path__ for q in os.listdir(p)))' 2>/dev/null); do
    [[ -d $d ]] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$d"
done
export LD_LIBRARY_PATH
ldd "$bin/dsinfer_tests" 2>&1 | grep -E 'not found|cublas|cudnn' >>"$log"

# ---- [cuda] tests ----------------------------------------------------------------------------
if want tests; then
    timeout "${TESTS_CAP:-240}" "$bin/dsinfer_tests" "[cuda]" -r compact >"$results/tests.txt" 2>&1
    rc=$?
    tail -3 "$results/tests.txt" | tee -a "$log"
    record tests "$([[ $rc == 0 ]] && echo ok || echo "FAILED (rc $rc)")"
fi

# ---- compute-sanitizer memcheck ----------------------------------------------------------------
if want memcheck; then
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    timeout "${MEMCHECK_CAP:-150}" "$cs" --tool memcheck --error-exitcode 3 --print-limit 20 \
        "$bin/dsinfer_tests" "[cuda]" -r compact >"$results/memcheck.txt" 2>&1
    rc=$?
    tail -4 "$results/memcheck.txt" | tee -a "$log"
    case $rc in
        0) record memcheck ok ;;
        124) record memcheck "time cap reached (${MEMCHECK_CAP:-150} s), no error before it: $(grep -c 'Invalid\|ERROR SUMMARY: [1-9]' "$results/memcheck.txt") reports" ;;
        *) record memcheck "FAILED (rc $rc)" ;;
    esac
fi

# ---- conformance on the device ------------------------------------------------------------------
if want conform && [[ -d $data/node ]]; then
    # Each test runs in a forked child that initializes CUDA anew (about a second): 16 shards,
    # each capped (CONFORM_CAP seconds) so that a slow suite still reports what it ran.
    conf=$(mktemp -d)  # per-shard outputs, gathered below
    shards=(a b c d e-f g-h i-l m-n o-q r-r s-s t u-z)
    pids=()
    for s in "${shards[@]}"; do
        case $s in
            r-r) f='^test_r[a-e]' ;;
            s-s) f='^test_s[a-h]' ;;
            *) f="^test_[$s]" ;;
        esac
        timeout "${CONFORM_CAP:-300}" "$bin/ds-conformance" --suite "$data/node" --device cuda \
            --filter "$f" --timeout 60 --json "$conf/conf_$s.json" >"$conf/conf_$s.txt" 2>&1 &
        pids+=($!)
    done
    for s in rf-rz si-sz; do
        f="^test_${s:0:1}[${s:1:1}-${s:4:1}]"
        timeout "${CONFORM_CAP:-300}" "$bin/ds-conformance" --suite "$data/node" --device cuda \
            --filter "$f" --timeout 60 --json "$conf/conf_$s.json" >"$conf/conf_$s.txt" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    cat "$conf"/conf_*.txt >"$results/conformance.txt"
    python3 - "$results/conformance.txt" "$conf"/conf_*.txt <<'EOF' | tee -a "$log"
import json, os, re, sys
tot, fails, capped = {}, [], []
for f in sys.argv[2:]:
    j = f[:-4] + ".json"
    if os.path.exists(j):
        for t in json.load(open(j)).get("tests", []):
            o = t.get("status", "?"); tot[o] = tot.get(o, 0) + 1
            if o == "fail": fails.append(t.get("name", "?") + ": " + str(t.get("detail", ""))[:160])
        continue
    capped.append(os.path.basename(f))  # the shard hit CONFORM_CAP: count its printed lines
    for line in open(f, errors="replace"):
        m = re.match(r"(pass|fail|unsupported|broken)\s+(test_\S+)", line)
        if m:
            tot[m.group(1)] = tot.get(m.group(1), 0) + 1
            if m.group(1) == "fail": fails.append(line.strip()[:200])
print("conformance on cuda:", tot, "shards cut by the cap:", capped or "none")
with open(sys.argv[1], "a") as out:
    out.write("\n".join(["", "FAILURES:"] + fails) + "\n")
EOF
    record conform "see conformance.txt"
fi

# ---- models and whole-model accuracy ------------------------------------------------------------
models=/tmp/dsinfer-models
if want models; then
    if PYTHONUNBUFFERED=1 timeout 240 python3 scripts/gpu_models.py --out "$models" --no-verify >>"$log" 2>&1; then
        record models ok
    else
        record models FAILED
    fi
fi
if want accuracy && [[ -f $models/bert_base.onnx ]]; then
    PYTHONUNBUFFERED=1 timeout 120 python3 scripts/gpu_reference_cases.py --models "$models" --out /tmp/dsinfer-cases >>"$log" 2>&1
    acc=/tmp/dsinfer-accuracy.txt
    : >"$acc"
    ok=1
    for prec in fp32 fp16; do
        # fp32: cuBLASLt float32 products vs ORT's CPU: within 1e-3; fp16 storage: 12 layers of
        # float16 rounding (about 5e-4 relative each) on outputs of magnitude up to ~4.
        if [[ $prec == fp32 ]]; then tol=(--rtol 1e-3 --atol 1e-3); else tol=(--rtol 3e-2 --atol 3e-2); fi
        "$bin/ds-conformance" --suite /tmp/dsinfer-cases --device cuda --precision "$prec" "${tol[@]}" \
            --timeout 120 >>"$acc" 2>&1 || ok=0
    done
    cat "$acc" >>"$log"
    tail -6 "$acc"
    record accuracy "$([[ $ok == 1 ]] && echo ok || echo FAILED)"
fi

# ---- benchmarks ---------------------------------------------------------------------------------
if want bench && [[ -f $models/bert_base.onnx ]]; then
    : >"$results/bench.jsonl"
    run_bench() {
        timeout 90 "$bin/ds-benchmark" --device cuda --json --warmup 5 --iterations 20 --min-time 1 "$@" \
            >>"$results/bench.jsonl" 2>>"$log" || note "ds-benchmark $* failed"
    }
    for b in 1 8 64 256; do run_bench --model "$models/bert_base.onnx" --precision fp16 --batch "$b" --seq 128; done
    for b in 1 64; do run_bench --model "$models/resnet50.onnx" --precision fp16 --batch "$b"; done
    run_bench --model "$models/bert_base.onnx" --precision fp32 --batch 8 --seq 128
    record bench "$(wc -l <"$results/bench.jsonl") results"
fi
if want torch; then
    PYTHONUNBUFFERED=1 timeout 200 python3 scripts/gpu_torch_bench.py --json "$results/torch.json" --time-budget "${TORCH_BUDGET:-120}" >>"$log" 2>&1
    record torch "rc $?"
fi
if want summary; then
    python3 scripts/gpu_summary.py "$results/bench.jsonl" --torch "$results/torch.json" \
        --out "$results/summary.json" 2>&1 | tee -a "$log"
fi

# ---- check.json ---------------------------------------------------------------------------------
{
    echo "{"
    first=1
    for k in "${!status[@]}"; do
        [[ $first == 1 ]] || echo ","
        first=0
        printf '  "%s": "%s"' "$k" "${status[$k]//\"/\'}"
    done
    printf ',\n  "seconds": %d\n}\n' $(( $(date +%s) - start ))
} >"$results/check.json"
cat "$results/check.json"
for v in "${status[@]}"; do [[ $v == FAILED* ]] && exit 1; done
exit 0
