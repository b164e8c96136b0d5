#!/usr/bin/env bash
# Decode and prefill speed of ds-generate against ONNX Runtime's step loop on the same decoder,
# alternating (ds, ort, ds, ort, ...) so that both see the same machine, 2 threads.
#   scripts/generate/bench_decode.sh BUILD_DIR MODEL.onnx PEERS_DEST [REPEATS] [-- extra ds-generate args]
# Each repeat: a 512-token prompt of seeded random ids, then 128 greedy tokens. Prints one JSON
# line per run and the medians; ORT through scripts/generate/ort_generate.mjs --bench.
set -euo pipefail
build=$1 model=$2 peers=$3 repeats=${4:-5}
shift $(( $# < 4 ? $# : 4 ))
[[ ${1:-} == -- ]] && shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ds=() ort=()
for ((i = 0; i < repeats; i++)); do
    d=$("$build/tools/ds-generate" --model "$model" --random-prompt 512 --max-tokens 128 --threads 2 --json "$@")
    echo "$d" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({"run":"dsinfer","prefill_tokens_per_s":round(d["prefill_tokens_per_s"],1),"decode_tokens_per_s":round(d["decode_tokens_per_s"],1),"itl_p50_ms":d["inter_token_ms"]["p50"],"peak_rss_mib":round(d["peak_rss_bytes"]/2**20)}))'
    ds+=("$(echo "$d" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["prefill_tokens_per_s"], d["decode_tokens_per_s"])')")
    o=$(node "$here/scripts/generate/ort_generate.mjs" --peers "$peers" --model "$model" --bench --repeats 1 --threads 2)
    echo "$o" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({"run":"onnxruntime","prefill_tokens_per_s":round(d["prefill_tokens_per_s"],1),"decode_tokens_per_s":round(d["decode_tokens_per_s"],1)}))'
    ort+=("$(echo "$o" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["prefill_tokens_per_s"], d["decode_tokens_per_s"])')")
done
python3 - "${ds[@]}" -- "${ort[@]}" <<'PY'
import statistics, sys
a = sys.argv[1:]
k = a.index("--")
ds = [tuple(map(float, s.split())) for s in a[:k]]
ort = [tuple(map(float, s.split())) for s in a[k + 1:]]
med = lambda xs, i: statistics.median(x[i] for x in xs)
print(f"medians over {len(ds)} alternating repeats: prefill dsinfer {med(ds,0):.1f} / ORT {med(ort,0):.1f} tokens/s "
      f"({med(ds,0)/med(ort,0):.2f}x); decode dsinfer {med(ds,1):.1f} / ORT {med(ort,1):.1f} tokens/s ({med(ds,1)/med(ort,1):.2f}x)")
PY
