#!/usr/bin/env bash
# Latency/throughput curves of the dynamic batcher with ds-loadgen (docs/LOADGEN.md): open-loop
# Poisson load at a sweep of offered rates, for batching off, fixed batching settings and the
# adaptive controller, on one model.
#
#   scripts/loadgen_curves.sh BUILD_DIR            the curves
#   scripts/loadgen_curves.sh BUILD_DIR --step     the adaptive controller under a rate step
#
# Curves: 1. the compute time of a full batch of each fixed setting (ds-benchmark --batch
# MAX_BATCH, same threads: the median of three runs' p50); 2. the saturation rate of batching
# off: a closed-loop probe estimates its capacity C, then open-loop runs at SCAN x C (extended
# by steps of 15% while the highest still keeps up); the saturation rate R is the largest
# offered rate whose throughput is still >= 95% of it; 3. every setting at MULTIPLIERS x R.
# Printed: a table (offered rate, throughput, p50, p99, mean batch, outcomes, generator lag,
# load average) and the acceptance check: does batching sustain (throughput >= 95% of offered)
# >= 3x the unbatched throughput at R with p99 <= max_queue_delay + 2 x the full-batch compute
# time? (also shown: throughput and p99 at 3 x R).
# --step: Poisson STEP_LOW for STEP_SECONDS, then STEP_HIGH for STEP_SECONDS, adaptive, with
# the per-second timeline (the controller's batch cap, delay, queue and p99 converging).
#
# Environment:
#   MODEL=PATH      the model (default: mlp.onnx from PEERS_DIR/models when there, else written
#                   by tools/make_models.py --only mlp into MODELS_DIR)
#   PEERS_DIR       default $TMPDIR/peers (TMPDIR defaults to /tmp)
#   MODELS_DIR      default $TMPDIR/dsinfer-models
#   THREADS=2       intra-op threads (EngineOptions::num_threads)
#   BATCH=1         rows per request
#   DURATION=4      seconds of load per point
#   SETTINGS="8:1000 32:2000 64:4000"   fixed MAX_BATCH:MAX_QUEUE_DELAY_US settings
#   ADAPTIVE="64:4000:50"               adaptive MAX_BATCH:DELAY_US:P99_TARGET_MS ("" = none)
#   SCAN="0.6 0.8 0.9 1.0 1.1 1.25"     batching-off scan, x the closed-loop capacity
#   MULTIPLIERS="0.5 1 1.5 2 3 4 5 6 8"  sweep, x the saturation rate
#   STEP_LOW, STEP_HIGH                 --step rates (default 0.5 x and 3 x the capacity C)
#   STEP_SECONDS=10
#   LOADGEN_ARGS    extra ds-loadgen arguments
#   OUT=FILE        JSON lines: every run's ds-loadgen object plus "config", "phase",
#                   "multiplier" (default $TMPDIR/loadgen_curves.jsonl)
# The machine is shared: measure under the build lock so nobody compiles meanwhile
# (flock LOCKFILE scripts/loadgen_curves.sh build), and read the load averages.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -lt 1 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
build="$(cd "$1" && pwd)"
shift
mode=curves
if [ $# -gt 0 ]; then
  case "$1" in
    --step) mode=step ;;
    *) echo "loadgen_curves: unknown argument '$1' (want --step or nothing)" >&2; exit 2 ;;
  esac
fi
tmp="${TMPDIR:-/tmp}"
peers="${PEERS_DIR:-$tmp/peers}"
models_dir="${MODELS_DIR:-$tmp/dsinfer-models}"
loadgen="$build/tools/ds-loadgen"
bench="$build/tools/ds-benchmark"
py=/usr/bin/python3
die() { echo "loadgen_curves: $*" >&2; exit 1; }
[ -x "$loadgen" ] || die "$loadgen not found (build the ds-loadgen target)"
[ -x "$bench" ] || die "$bench not found (build the ds-benchmark target)"

model="${MODEL:-}"
if [ -z "$model" ]; then
  if [ -f "$peers/models/mlp.onnx" ]; then
    model="$peers/models/mlp.onnx"
  else
    model="$models_dir/mlp.onnx"
    if [ ! -f "$model" ]; then
      echo "loadgen_curves: writing $model" >&2
      "$py" "$here/tools/make_models.py" --out "$models_dir" --only mlp >&2
    fi
  fi
fi
[ -f "$model" ] || die "no model at $model"

export LG_MODE="$mode" LG_MODEL="$model" LG_LOADGEN="$loadgen" LG_BENCH="$bench"
export LG_THREADS="${THREADS:-2}" LG_BATCH="${BATCH:-1}" LG_DURATION="${DURATION:-4}"
export LG_SETTINGS="${SETTINGS:-8:1000 32:2000 64:4000}"
export LG_ADAPTIVE="${ADAPTIVE-64:4000:50}"
export LG_SCAN="${SCAN:-0.6 0.8 0.9 1.0 1.1 1.25}"
export LG_MULTIPLIERS="${MULTIPLIERS:-0.5 1 1.5 2 3 4 5 6 8}"
export LG_STEP_LOW="${STEP_LOW:-}" LG_STEP_HIGH="${STEP_HIGH:-}" LG_STEP_SECONDS="${STEP_SECONDS:-10}"
export LG_EXTRA="${LOADGEN_ARGS:-}"
export LG_OUT="${OUT:-$tmp/loadgen_curves.jsonl}"

exec "$py" - <<'PY'
import json, os, shlex, subprocess, sys, time

env = os.environ
model, loadgen, bench = env["LG_MODEL"], env["LG_LOADGEN"], env["LG_BENCH"]
threads, batch, duration = env["LG_THREADS"], env["LG_BATCH"], float(env["LG_DURATION"])
extra = shlex.split(env["LG_EXTRA"])
out_path = env["LG_OUT"]
FOLLOW = 0.95  # throughput >= 95% of the offered rate: still following it

def log(msg):
    print(msg, file=sys.stderr, flush=True)

def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]

out = open(out_path, "w", encoding="utf-8")

def loadgen_run(config, phase, args, multiplier=None):
    cmd = [loadgen, "--model", model, "--threads", threads, "--batch", batch, "--drain-s", "1",
           "--json"] + args + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"loadgen_curves: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    r = json.loads(p.stdout)
    r.update(config=config, phase=phase, multiplier=multiplier, command=" ".join(cmd))
    out.write(json.dumps(r) + "\n")
    out.flush()
    log(f"  {config:>14s} {phase:6s} offered {r['offered_rate']:8.1f}/s  "
        f"throughput {r['throughput']:8.1f}/s  p50 {fmt(r['latency_ms']['p50'])} ms  "
        f"p99 {fmt(r['latency_ms']['p99'])} ms  batch {fmt(r['mean_batch_size'])}")
    return r

def fmt(x, d=2):
    return "n/a" if x is None else f"{x:.{d}f}"

def batching_args(setting):
    if setting == "off":
        return ["--batching", "off"]
    parts = setting.split(":")
    args = ["--max-batch", parts[0], "--max-queue-delay-us", parts[1]]
    if len(parts) == 3:
        args += ["--adaptive", "--p99-target-ms", parts[2]]
    return args

def capacity():
    """Closed-loop throughput of batching off (2 clients keep the one worker busy)."""
    r = loadgen_run("off", "probe", ["--concurrency", "2", "--duration", str(duration)] +
                    batching_args("off"))
    return r["throughput"]

log(f"loadgen_curves: {model}, threads {threads}, {batch} row(s) per request, "
    f"{duration:g} s per point; load {loadavg()}")

if env["LG_MODE"] == "step":
    c = capacity()
    low = float(env["LG_STEP_LOW"] or 0.5 * c)
    high = float(env["LG_STEP_HIGH"] or 3 * c)
    secs = env["LG_STEP_SECONDS"]
    setting = env["LG_ADAPTIVE"] or "64:4000:50"
    r = loadgen_run("adaptive " + setting, "step",
                    ["--rate-steps", f"{low:.1f}:{secs},{high:.1f}:{secs}"] + batching_args(setting))
    print(f"rate step {low:.1f} -> {high:.1f} requests/s ({secs} s each), {setting} "
          f"(max batch:delay us:p99 target ms), threads {threads}, load {r['loadavg']}")
    print(f"{'t':>3s} {'offered':>8s} {'completed':>9s} {'p99 ms':>8s} {'max batch':>9s} "
          f"{'delay us':>8s} {'queued':>6s}")
    for e in r["timeline"]:
        print(f"{e['t']:>3d} {e['offered']:>8d} {e['completed']:>9d} {fmt(e['p99_ms']):>8s} "
              f"{str(e['max_batch_size']):>9s} {str(e['max_queue_delay_us']):>8s} {e['queued']:>6d}")
    print(f"wrote {out_path}")
    sys.exit(0)

# 1. Full-batch compute time per fixed setting (ds-benchmark, same threads).
settings = env["LG_SETTINGS"].split()
adaptive = env["LG_ADAPTIVE"].strip()
full_batch_ms = {}
for s in settings + ([adaptive] if adaptive else []):
    mb = int(s.split(":")[0]) * int(batch)
    if mb in full_batch_ms:
        continue
    p50s = []
    for _ in range(3):  # the median of three runs' p50: the machine is noisy
        p = subprocess.run([bench, "--model", model, "--batch", str(mb), "--threads", threads,
                            "--warmup", "2", "--iterations", "10", "--min-time", "1", "--json"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"loadgen_curves: ds-benchmark --batch {mb} failed:\n{p.stderr}")
        p50s.append(json.loads(p.stdout)["latency_ms"]["p50"])
    full_batch_ms[mb] = sorted(p50s)[1]
    log(f"  full batch of {mb} rows: p50 {full_batch_ms[mb]:.2f} ms (runs: "
        + " ".join(f"{x:.2f}" for x in p50s) + ")")

def bound_ms(setting):
    parts = setting.split(":")
    return int(parts[1]) / 1000 + 2 * full_batch_ms[int(parts[0]) * int(batch)]

# 2. Saturation rate of batching off.
c = capacity()
scan = [loadgen_run("off", "scan", ["--rate", f"{m * c:.1f}", "--duration", str(duration)] +
                    batching_args("off"), m) for m in map(float, env["LG_SCAN"].split())]
follows = lambda r: r["throughput"] >= FOLLOW * r["offered_rate"]
m = max(map(float, env["LG_SCAN"].split()))
for _ in range(8):  # the top of the scan still follows: the probe underestimated, go on
    if not follows(max(scan, key=lambda r: r["offered_rate"])):
        break
    m *= 1.15
    scan.append(loadgen_run("off", "scan", ["--rate", f"{m * c:.1f}", "--duration",
                                            str(duration)] + batching_args("off"), m))
following = [r for r in scan if follows(r)]
sat = max(following, key=lambda r: r["offered_rate"]) if following else min(
    scan, key=lambda r: r["offered_rate"])
R = sat["offered_rate"]
log(f"  batching off: capacity (closed loop) {c:.1f}/s, saturation rate {R:.1f}/s "
    f"(throughput there {sat['throughput']:.1f}/s)")

# 3. The sweep.
configs = ["off"] + settings + ([adaptive] if adaptive else [])
rows = []
for cfg in configs:
    for m in map(float, env["LG_MULTIPLIERS"].split()):
        name = "adaptive " + cfg if cfg == adaptive else cfg
        rows.append(loadgen_run(name, "sweep", ["--rate", f"{m * R:.1f}", "--duration",
                                                str(duration)] + batching_args(cfg), m))

print(f"ds-loadgen curves: {model}, threads {threads}, {batch} row(s) per request, "
      f"{duration:g} s per point, Poisson arrivals; latency from the scheduled arrival")
print(f"batching off: closed-loop capacity {c:.1f}/s; saturation rate R = {R:.1f}/s "
      f"(largest scanned rate with throughput >= {FOLLOW:.0%} of offered; there: "
      f"{sat['throughput']:.1f}/s, p99 {fmt(sat['latency_ms']['p99'])} ms)")
for mb, ms in sorted(full_batch_ms.items()):
    print(f"full batch of {mb} rows (ds-benchmark --batch {mb} --threads {threads}): "
          f"p50 {ms:.2f} ms (median of 3 runs)")
print()
print(f"{'setting':>18s} {'x R':>4s} {'offered/s':>9s} {'thrpt/s':>9s} {'p50 ms':>8s} "
      f"{'p99 ms':>9s} {'batch':>6s} {'rej':>5s} {'cancel':>6s} {'late':>5s} {'load1':>5s}")
for r in scan + rows:
    label = r["config"] if r["phase"] == "sweep" else "off (scan, x C)"
    print(f"{label:>18s} {r['multiplier']:>4.3g} {r['offered_rate']:>9.1f} {r['throughput']:>9.1f} "
          f"{fmt(r['latency_ms']['p50']):>8s} {fmt(r['latency_ms']['p99']):>9s} "
          f"{fmt(r['mean_batch_size']):>6s} {r['rejected']:>5d} {r['cancelled']:>5d} "
          f"{r['generator']['late']:>5d} {r['loadavg'][0]:>5.2f}")
print()
print(f"acceptance: batching sustains >= 3 x the unbatched throughput at R "
      f"(3 x {sat['throughput']:.1f} = {3 * sat['throughput']:.1f}/s) with p99 <= max_queue_delay + "
      f"2 x full-batch compute (sustained: throughput >= {FOLLOW:.0%} of offered)")
for cfg in settings + ([adaptive] if adaptive else []):
    name = "adaptive " + cfg if cfg == adaptive else cfg
    mine = [r for r in rows if r["config"] == name]
    at3 = [r for r in mine if abs(r["multiplier"] - 3) < 1e-9]
    sustained = [r for r in mine if r["throughput"] >= FOLLOW * r["offered_rate"] and
                 r["latency_ms"]["p99"] is not None and r["latency_ms"]["p99"] <= bound_ms(cfg)]
    best = max(sustained, key=lambda r: r["throughput"]) if sustained else None
    line = f"  {name:>18s}: bound {bound_ms(cfg):.1f} ms"
    if at3:
        r = at3[0]
        line += (f"; at 3R: throughput {r['throughput']:.1f}/s = "
                 f"{r['throughput'] / sat['throughput']:.2f} x, p99 {fmt(r['latency_ms']['p99'])} ms")
    if best:
        ratio = best["throughput"] / sat["throughput"]
        line += (f"; best sustained within the bound: {best['throughput']:.1f}/s = {ratio:.2f} x "
                 f"(offered {best['multiplier']:g} R, p99 {fmt(best['latency_ms']['p99'])} ms) -> "
                 f"{'PASS' if ratio >= 3 else 'FAIL'}")
    else:
        line += "; no point sustained within the bound -> FAIL"
    print(line)
print(f"load average at the end: {loadavg()}")
print(f"wrote {out_path}")
PY
