#!/usr/bin/env bash
# Checks dsinfer against ONNX Runtime on the benchmark models made by tools/make_models.py.
#
#   scripts/compare_with_ort.sh [BUILD_DIR] [WORK_DIR]
#
# 1. generates bert_base.onnx, bert_base_ln17.onnx and resnet50.onnx (random weights, not
#    committed) into WORK_DIR/models;
# 2. makes ONNX Runtime reference cases with ../shared/peers/ort_case.mjs (the peers harness;
#    it installs onnxruntime-node into $PEERS_DIR, default $TMPDIR/peers, on first use);
# 3. runs ds-conformance on the cases with rtol 1e-4, at optimization level 3 and level 0
#    (the two must agree within 1e-4 relative).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
work="${2:-${TMPDIR:-/tmp}/dsinfer-ort}"
peers_src="$here/../shared/peers"
peers="${PEERS_DIR:-${TMPDIR:-/tmp}/peers}"
rtol="${RTOL:-1e-4}"
atol="${ATOL:-1e-5}"
mkdir -p "$work/models" "$work/cases"
if [ ! -d "$peers/node/node_modules/onnxruntime-node" ]; then
  SKIP_MODELS=1 bash "$peers_src/setup.sh" "$peers"
fi
/usr/bin/python3 "$here/tools/make_models.py" --out "$work/models" --only bert_base bert_base_ln17 resnet50
run_case() {  # name model batch [seq]
  local name=$1 model=$2 batch=$3 seq=${4:-}
  local args=(--peers "$peers" --model "$work/models/$model" --batch "$batch" --out "$work/cases/$name" --copy)
  [ -n "$seq" ] && args+=(--seq "$seq")
  rm -rf "$work/cases/$name"
  node "$peers_src/ort_case.mjs" "${args[@]}" >/dev/null
}
run_case bert_base_b2_s16 bert_base.onnx 2 16
run_case bert_base_ln17_b2_s16 bert_base_ln17.onnx 2 16
run_case resnet50_b1 resnet50.onnx 1
# --compare-levels: each case also runs at optimization level 0; level-3 outputs must agree.
"$build/tools/ds-conformance" --suite "$work/cases" --rtol "$rtol" --atol "$atol" --timeout 600 --stats \
  --compare-levels
