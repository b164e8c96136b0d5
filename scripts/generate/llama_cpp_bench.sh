#!/usr/bin/env bash
# llama.cpp's CPU prefill and decode speed on a GGUF written by scripts/generate/write_gguf.py
# (the same weights as a tools/make_models.py decoder), measured by llama.cpp's own llama-bench
# running node-llama-cpp 3.21.1's prebuilt CPU libraries: the peer figure for dsinfer's
# generative decoding.
#
#   scripts/generate/llama_cpp_bench.sh --nlc DIR --gguf F.gguf [--threads 2] [--prompt 512]
#       [--gen 128] [--repeats 3] [--json OUT]
#
# Where llama.cpp comes from. The npm package node-llama-cpp, pinned at 3.21.1, ships prebuilt
# CPU binaries in its platform package (@node-llama-cpp/linux-x64 here): libllama,
# libllama-common, libggml, libggml-base, one libggml-cpu-<microarchitecture>.so per x86 level
# (ggml loads the best one for the CPU at run time) and the node addon; no executables
# (no llama-bench, llama-cli or llama-quantize). It also carries the llama.cpp source it was
# built from, as a git bundle (node-llama-cpp/llama/gitRelease.bundle). Install it outside the
# repository (nothing of it is committed):
#
#   npm install --prefix DIR node-llama-cpp@3.21.1 --ignore-scripts
#
# (--ignore-scripts: no postinstall, which could offer to build llama.cpp from source; the
# prebuilt libraries are what is measured.) DIR may also come from $NLC_DIR.
#
# What runs. On first use this script clones the bundle into DIR/llama-bench/src and compiles
# llama.cpp's tools/llama-bench from it (g++, C++17, a few seconds) into DIR/llama-bench/,
# linked against the prebuilt libraries: the benchmark driver is llama.cpp's, every kernel it
# times is the shipped binary's. It runs from the libraries' folder, where ggml finds its CPU
# backends. Two llama-bench runs, each --repeats times after llama-bench's warm-up, at
# llama-bench's defaults (mmap, KV cache F16, flash attention auto, batch 2048 / ubatch 512,
# threadpool polling 50) and --threads for prompt and generation:
#   -p PROMPT -n GEN       prefill of PROMPT random tokens (ppPROMPT) and GEN generated tokens
#                          on an empty cache (tgGEN, llama-bench's usual figure);
#   -p 0 -n GEN -d PROMPT  GEN tokens after a PROMPT-token context (tgGEN @ dPROMPT): decode
#                          after the prompt, the protocol of ort_generate.mjs --bench and of
#                          dsinfer's figure.
# Each decode step is one llama_decode of one token (llama-bench does not sample; the logits of
# the one position are computed). Output JSON: prefill_tokens_per_s (ppPROMPT),
# decode_tokens_per_s (tgGEN @ dPROMPT), decode_tokens_per_s_empty_cache (tgGEN), each the
# median of the repeats, with every sample; the build (llama.cpp commit as the libraries
# report it, node-llama-cpp version, CPU backend loaded); cpu_other, the share of the
# machine's CPU time that other processes used while each llama-bench ran (llama.cpp's threads
# spin at barriers, so other work on the cores distorts its figures badly, several-fold on a
# 2-vCPU VM: measure on a quiet machine and discard runs where this is more than ~0.02).
#
# scripts/generate/llama_cpp_bench.mjs measures the same through node-llama-cpp's JavaScript
# API (and gives greedy tokens for the equality check); the binding runs decode steps about
# half as fast as llama-bench does on the same libraries (see its header), so its decode figure
# is not llama.cpp's decode speed.
set -euo pipefail

nlc="${NLC_DIR:-}"
gguf=""
threads=2
prompt=512
gen=128
repeats=3
json=""
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --nlc) nlc="$2"; shift 2 ;;
    --gguf) gguf="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --prompt) prompt="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --json) json="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
die() { echo "$2" >&2; exit "$1"; }
[ -n "$nlc" ] || die 2 "--nlc DIR (or \$NLC_DIR) is required: where node-llama-cpp is installed"
[ -f "$gguf" ] || { echo "--gguf FILE is required (and must exist)" >&2; exit 2; }
for v in "$threads" "$prompt" "$gen" "$repeats"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || die 2 "--threads, --prompt, --gen, --repeats: positive integers"
done

[ -d "$nlc" ] || die 1 "$nlc: no such folder (--nlc DIR: where node-llama-cpp is installed)"
nlc="$(cd "$nlc" && pwd)"
case "$json" in ""|/*) ;; *) json="$PWD/$json" ;; esac
gguf="$(cd "$(dirname "$gguf")" && pwd)/$(basename "$gguf")"
pkg="$nlc/node_modules/node-llama-cpp"
[ -f "$pkg/package.json" ] || { echo "$pkg: node-llama-cpp is not installed there" >&2; exit 1; }
version="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' \
  "$pkg/package.json")"
[ "$version" = "3.21.1" ] || echo "warning: node-llama-cpp $version, not the pinned 3.21.1" >&2

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) platform=linux-x64 ;;
  Linux-aarch64) platform=linux-arm64 ;;
  *) echo "no prebuilt CPU package for $(uname -s)-$(uname -m) here" >&2; exit 1 ;;
esac
bins="$nlc/node_modules/@node-llama-cpp/$platform/bins/$platform"
[ -d "$bins" ] || { echo "$bins missing: was @node-llama-cpp/$platform installed?" >&2; exit 1; }
llama_so="$(cd "$bins" && ls libllama.*so 2>/dev/null | grep -v common | head -1 || true)"
ggml_so="$(cd "$bins" && ls libggml.*so 2>/dev/null | head -1 || true)"
[ -n "$llama_so" ] && [ -n "$ggml_so" ] || die 1 "$bins: libllama / libggml not found"

# llama-bench from the bundled source, linked against the prebuilt libraries.
work="$nlc/llama-bench"
bench="$work/llama-bench"
if [ ! -x "$bench" ]; then
  mkdir -p "$work"
  if [ ! -d "$work/src/.git" ]; then
    rm -rf "$work/src"
    git clone --quiet "$pkg/llama/gitRelease.bundle" "$work/src" 2>/dev/null
  fi
  s="$work/src"
  echo "compiling llama-bench from the bundled llama.cpp source" \
    "($(git -C "$s" rev-parse --short HEAD))" >&2
  g++ -O2 -DNDEBUG -std=c++17 -I"$s/tools/llama-bench" -I"$s/common" -I"$s/include" \
    -I"$s/ggml/include" -I"$s/vendor" "$s/tools/llama-bench/llama-bench.cpp" \
    "$s/tools/llama-bench/main.cpp" -L"$bins" -l:libllama-common.so -l:"$llama_so" \
    -l:"$ggml_so" -l:libggml-base.so -Wl,-rpath,"$bins" -lpthread -o "$bench.tmp"
  mv "$bench.tmp" "$bench"
fi

# Runs the two llama-bench invocations from the libraries' folder (where ggml looks for its CPU
# backends), accounting for the CPU time everything else on the machine used while each ran,
# and prints the JSON.
cd "$bins"
python3 - "$bench" "$gguf" "$threads" "$prompt" "$gen" "$repeats" "$version" "$(nproc)" \
    "${json:-}" <<'PY'
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

bench, gguf, threads, prompt, gen, repeats, version, ncpu, out = sys.argv[1:10]


def cpu_total():
    """(busy, all) jiffies of all CPUs, from /proc/stat."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


def run(extra):
    """One llama-bench invocation -> (its tests, its log, the share of the machine's CPU time
    that other processes used while it ran)."""
    hz = os.sysconf("SC_CLK_TCK")
    r0, (b0, t0) = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_total()
    p = subprocess.run([bench, "-m", gguf, "-t", threads, "-r", repeats, "-o", "json"] + extra,
                       capture_output=True, text=True)
    r1, (b1, t1) = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_total()
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit(f"llama-bench failed ({p.returncode})")
    mine = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * hz
    other = max(0.0, (b1 - b0) - mine) / max(1, t1 - t0)
    return json.loads(p.stdout), p.stderr, round(other, 4)


tests_a, log, other_a = run(["-p", prompt, "-n", gen])
tests_b, _, other_b = run(["-p", "0", "-n", gen, "-d", prompt])
tests = tests_a + tests_b
backend = re.search(r"libggml-cpu-[\w.-]+\.so", log)


def pick(n_prompt, n_gen, n_depth):
    for t in tests:
        if (t["n_prompt"], t["n_gen"], t["n_depth"]) == (n_prompt, n_gen, n_depth):
            return t
    raise SystemExit(f"llama-bench gave no test p={n_prompt} n={n_gen} d={n_depth}")


p, n = int(prompt), int(gen)
pp, tg0, tgd = pick(p, 0, 0), pick(0, n, 0), pick(0, n, p)
median = lambda t: statistics.median(t["samples_ts"])  # noqa: E731
result = {
    "gguf": gguf, "model_type": pp["model_type"], "model_n_params": pp["model_n_params"],
    "threads": pp["n_threads"], "prompt": p, "gen": n, "repeats": len(pp["samples_ts"]),
    "prefill_tokens_per_s": median(pp),
    "decode_tokens_per_s": median(tgd),
    "decode_tokens_per_s_empty_cache": median(tg0),
    "samples": {f"pp{p}": pp["samples_ts"], f"tg{n}@d{p}": tgd["samples_ts"],
                f"tg{n}": tg0["samples_ts"]},
    "settings": {k: pp[k] for k in ("n_batch", "n_ubatch", "type_k", "type_v", "flash_attn",
                                    "poll", "load_mode", "cpu_info")},
    "build": {"tool": "llama-bench (compiled from node-llama-cpp's bundled llama.cpp source)",
              "llama_cpp_commit": pp["build_commit"], "llama_cpp_build": pp["build_number"],
              "node_llama_cpp": version, "cpu_backend": backend.group(0) if backend else None},
    "cpu_other": {f"pp{p}+tg{n}": other_a, f"tg{n}@d{p}": other_b}, "cpus": int(ncpu),
    "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
}
text = json.dumps(result, indent=1)
if out:
    with open(out, "w") as f:
        f.write(text + "\n")
print(text)
if max(other_a, other_b) > 0.02:
    print(f"warning: other processes used {max(other_a, other_b):.0%} of the CPUs' time during "
          "a run: llama.cpp's threads spin at barriers, so its figures are distorted; measure "
          "on a quiet machine", file=sys.stderr)
PY
