#!/usr/bin/env bash
# Same-run throughput of dsinfer (ds-benchmark) against ONNX Runtime (../shared/peers/ort_bench.mjs)
# on the same model files, shapes and threads: the Step 2 acceptance figures.
#
#   scripts/bench_vs_ort.sh BUILD_DIR [CASE...]
#
# CASE is MODEL:BATCH[:SEQ], MODEL a file name without .onnx. Default cases: bert_base:8:128
# bert_base:1:128 resnet50:1 resnet50:8 mlp:64. For each case the two programs alternate RUNS
# times; printed per case: the median over runs of dsinfer's p50 latency and of ORT's median
# latency, their ratio ORT ms / dsinfer ms (dsinfer's throughput relative to ORT: >1 is faster),
# every run's figure, and /proc/loadavg before and after the case.
#
# Environment:
#   RUNS=5          alternating runs per case
#   THREADS=2       intra-op threads of both
#   PEERS_DIR       the peers' install folder (default $TMPDIR/peers; TMPDIR defaults to /tmp): ONNX
#                   Runtime in PEERS_DIR/node (installed by ../shared/peers/setup.sh when
#                   missing), and models in PEERS_DIR/models used when the file is there
#   MODELS_DIR      where other models are written by tools/make_models.py when missing
#                   (default $TMPDIR/dsinfer-models)
#   DS_ARGS         extra ds-benchmark arguments (e.g. "--backends cpu")
#   OUT=FILE        also write everything as one JSON file
# The machine is shared: run nothing else heavy meanwhile, and read the load figures.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -lt 1 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
build="$(cd "$1" && pwd)"
shift
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=(bert_base:8:128 bert_base:1:128 resnet50:1 resnet50:8 mlp:64)
runs="${RUNS:-5}"
threads="${THREADS:-2}"
tmp="${TMPDIR:-/tmp}"
peers="${PEERS_DIR:-$tmp/peers}"
peers_src="${PEERS_SRC:-$here/../shared/peers}"
models_dir="${MODELS_DIR:-$tmp/dsinfer-models}"
bench="$build/tools/ds-benchmark"
py=/usr/bin/python3
read -r -a ds_extra <<< "${DS_ARGS:-}"

die() { echo "bench_vs_ort: $*" >&2; exit 1; }
[ -x "$bench" ] || die "$bench not found (build the ds-benchmark target)"
[ -f "$peers_src/ort_bench.mjs" ] || die "no $peers_src/ort_bench.mjs (set PEERS_SRC)"
if [ ! -d "$peers/node/node_modules/onnxruntime-node" ]; then
  SKIP_MODELS=1 bash "$peers_src/setup.sh" "$peers"
fi

model_path() {  # name -> path, making the model when missing
  local name=$1
  if [ -f "$peers/models/$name.onnx" ]; then
    echo "$peers/models/$name.onnx"
    return
  fi
  if [ ! -f "$models_dir/$name.onnx" ]; then
    echo "bench_vs_ort: writing $models_dir/$name.onnx" >&2
    "$py" "$here/tools/make_models.py" --out "$models_dir" --only "$name" >&2
  fi
  echo "$models_dir/$name.onnx"
}

work="$(mktemp -d "$tmp/bench_vs_ort.XXXXXX")"
trap 'rm -rf "$work"' EXIT
log="$work/runs.tsv"  # case <TAB> kind <TAB> run <TAB> payload (one line each)
: > "$log"
failed=0
for c in "${cases[@]}"; do
  IFS=: read -r name batch seq <<< "$c"
  if [ -z "${name:-}" ] || [ -z "${batch:-}" ]; then
    echo "bench_vs_ort: bad case '$c' (want MODEL:BATCH[:SEQ])" >&2
    exit 2
  fi
  model="$(model_path "$name")"
  shape=(--batch "$batch")
  [ -n "${seq:-}" ] && shape+=(--seq "$seq")
  printf '%s\tmodel\t0\t%s\n' "$c" "$model" >> "$log"
  printf '%s\tload_before\t0\t%s\n' "$c" "$(cat /proc/loadavg)" >> "$log"
  echo "bench_vs_ort: $c ($model), $runs alternating runs, $threads threads" >&2
  ds_cmd=("$bench" --model "$model" "${shape[@]}" --threads "$threads" --json
          ${ds_extra[@]+"${ds_extra[@]}"})
  ort_cmd=(node "$peers_src/ort_bench.mjs" --peers "$peers" --model "$model" "${shape[@]}"
           --threads "$threads" --json)
  for ((i = 1; i <= runs; i++)); do
    for kind in dsinfer ort; do
      if [ "$kind" = dsinfer ]; then cmd=("${ds_cmd[@]}"); else cmd=("${ort_cmd[@]}"); fi
      if out="$("${cmd[@]}" 2>"$work/err")"; then
        printf '%s\t%s\t%d\t%s\n' "$c" "$kind" "$i" "$out" >> "$log"
      else
        err="$(tail -c 400 "$work/err" | tr '\n\t' '  ')"
        printf '%s\t%s_error\t%d\t%s\n' "$c" "$kind" "$i" "$err" >> "$log"
        failed=1
      fi
    done
  done
  printf '%s\tload_after\t0\t%s\n' "$c" "$(cat /proc/loadavg)" >> "$log"
done

"$py" - "$log" "${OUT:-}" "$runs" "$threads" <<'PY'
import json, statistics, sys, time
log, out, runs, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cases = {}
for line in open(log, encoding="utf-8"):
    case, kind, run, payload = line.rstrip("\n").split("\t", 3)
    c = cases.setdefault(case, {"case": case, "dsinfer": [], "ort": [], "errors": []})
    if kind == "model":
        c["model"] = payload
    elif kind in ("load_before", "load_after"):
        c[kind] = payload
    elif kind.endswith("_error"):
        c["errors"].append({"program": kind[:-6], "run": int(run), "stderr": payload})
    else:
        c[kind].append(json.loads(payload))
def med(xs):
    return statistics.median(xs) if xs else None
summary = []
for c in cases.values():
    ds = [r["latency_ms"]["p50"] for r in c["dsinfer"]]
    ort = [r["median_ms"] for r in c["ort"]]
    c["dsinfer_ms"], c["ort_ms"] = ds, ort
    c["dsinfer_median_ms"], c["ort_median_ms"] = med(ds), med(ort)
    c["ratio"] = c["ort_median_ms"] / c["dsinfer_median_ms"] if ds and ort else None
    summary.append(c)
fmt = lambda x, d=2: "n/a" if x is None else f"{x:.{d}f}"
print(f"dsinfer vs ONNX Runtime, {threads} threads, {runs} alternating runs per case "
      "(ratio = ORT ms / dsinfer ms: dsinfer throughput relative to ORT)")
print(f"{'case':18s} {'dsinfer ms':>11s} {'ORT ms':>11s} {'ratio':>7s}  "
      "runs (dsinfer | ORT)  load before -> after")
loadavg = lambda c, k: " ".join(c.get(k, "").split()[:3])
for c in summary:
    runs_txt = (" ".join(fmt(x) for x in c["dsinfer_ms"]) + " | " +
                " ".join(fmt(x) for x in c["ort_ms"]))
    load = loadavg(c, "load_before") + " -> " + loadavg(c, "load_after")
    print(f"{c['case']:18s} {fmt(c['dsinfer_median_ms']):>11s} {fmt(c['ort_median_ms']):>11s} "
          f"{fmt(c['ratio'], 3):>7s}  {runs_txt}  [{load}]")
    for e in c["errors"]:
        print(f"  {e['program']} run {e['run']} failed: {e['stderr']}")
if out:
    doc = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "threads": threads, "runs": runs,
           "cases": summary}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {out}")
PY
exit "$failed"
