#!/usr/bin/env node
// llama.cpp through node-llama-cpp's JavaScript API, on a GGUF written by
// scripts/generate/write_gguf.py from a tools/make_models.py decoder (the same weights as
// dsinfer): its greedy tokens (for the equality check against the ONNX model) and the prefill
// and decode speed a caller of node-llama-cpp sees. llama.cpp's own speed, without the
// binding's per-token overhead, is what scripts/generate/llama_cpp_bench.sh measures (with
// llama-bench on the same prebuilt libraries); use that one as the peer figure.
//
//   node scripts/generate/llama_cpp_bench.mjs --nlc DIR --gguf F.gguf [--threads 2]
//        [--prompt 512] [--gen 128] [--repeats 3] [--seed 12345] [--flash-attn auto|on|off]
//        [--kv-type f16|f32] [--json OUT]
//   node scripts/generate/llama_cpp_bench.mjs --nlc DIR --gguf F.gguf --prompts "1,2,3;4,5"
//        --max-tokens N [--logits] [--flash-attn off --kv-type f32] [--threads 2] [--json OUT]
//
// llama.cpp comes from the npm package node-llama-cpp, pinned at 3.21.1, which ships prebuilt
// CPU binaries (in its platform package @node-llama-cpp/linux-x64: libllama, libggml-base,
// one libggml-cpu-<microarchitecture>.so per x86 level, picked at load time, and the node
// addon llama-addon.node; no llama-bench / llama-cli / llama-quantize executables). Install it,
// outside the repository (nothing of it is committed), with
//
//   npm install --prefix DIR node-llama-cpp@3.21.1 --ignore-scripts
//
// --ignore-scripts skips its postinstall (which would offer to build llama.cpp from source);
// the prebuilt binaries are used as they are. DIR may also come from $NLC_DIR.
//
// Bench (default). Model loaded on the CPU (gpu: false, no GPU layers, mmap), one context of
// --prompt + --gen tokens (rounded up to 256), batch size = ubatch = --prompt (the whole prompt
// is one llama_decode call), --threads for both prompt and generation, KV cache F16, flash
// attention --flash-attn (llama.cpp's "auto" by default, as llama-bench). The prompt is --prompt
// seeded random ids in [3, vocab) (mulberry32 --seed, as ort_generate.mjs --bench). One untimed
// warm-up, then --repeats times on a cleared sequence:
//   prefill: the prompt evaluated without generating (one llama_decode of --prompt tokens);
//   decode: greedy generation of --gen tokens after it, each a llama_decode of one token
//     followed by greedy sampling of the logits (end of sequence does not stop it).
// Each phase is timed two ways: wall-clock around the node-llama-cpp call (what a caller of
// the library sees, JS and sampling included) and llama.cpp's own counters (llama_perf_context
// "prompt eval" and "eval": the addon runs llama_decode then llama_synchronize in a worker
// thread, so these hold the time spent inside llama.cpp). Decode steps run much slower here
// than in llama-bench on the same libraries (on a 2-vCPU VM, llama_100m: 36 against 68
// tokens/s in F32, 74 against 169 in Q8_0; prefill is not affected): node-llama-cpp calls
// llama_decode from libuv's pool threads, with no persistent ggml threadpool, and ggml's
// spinning barriers then wait on threads not yet running (the same decode loop in C drops from
// ~175 to ~50 tokens/s when each llama_decode runs in a new thread). The JSON reports the
// medians of both:
// prefill_tokens_per_s and decode_tokens_per_s are the wall-clock ones, native.* llama.cpp's;
// the build: node-llama-cpp version, llama.cpp release and the commit of its bundled source,
// the CPU backend library loaded, llama.cpp's system info line; and cpu_other, the largest
// share of the machine's CPU time that other processes used during a repeat (llama.cpp's
// threads spin at barriers: other work on the cores distorts its figures badly; discard runs
// where this is more than ~0.02).
//
// --prompts: greedy tokens (temperature 0: the argmax, lowest index on a tie) for each prompt
// alone, exactly --max-tokens each (end of sequence does not stop it), as JSON {"prompts",
// "tokens"}, the format that scripts/generate/numpy_reference.py --compare reads. --logits adds
// "log_probs": per prompt, per generated token, the log of llama.cpp's softmax over the whole
// vocabulary it was chosen from (node-llama-cpp returns probabilities, not logits), for
// scripts/generate/gguf_check.py compare. llama.cpp's defaults (KV cache F16; flash attention,
// which "auto" turns on for the CPU, computes Q.K in F16) move the log-softmax by up to ~3e-3
// from the float32 reference on llama_100m; --flash-attn off --kv-type f32 computes attention in
// F32 throughout (then ~5e-6).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { count, parsePrompts, quantile, rng } from './common.mjs';

function parseArgs(argv) {
  const a = { nlc: process.env.NLC_DIR || null, gguf: null, threads: 2, prompt: 512, gen: 128,
    repeats: 3, seed: 12345, flashAttn: 'auto', json: null, prompts: null, maxTokens: 16,
    logits: false, kvType: 'f16' };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
      return argv[++i];
    };
    switch (k) {
      case '--nlc': a.nlc = v(); break;
      case '--gguf': a.gguf = v(); break;
      case '--threads': a.threads = count(k, v()); break;
      case '--prompt': a.prompt = count(k, v()); break;
      case '--gen': a.gen = count(k, v()); break;
      case '--repeats': a.repeats = count(k, v()); break;
      case '--seed': a.seed = count(k, v()); break;
      case '--flash-attn': a.flashAttn = v(); break;
      case '--kv-type': a.kvType = v(); break;
      case '--json': a.json = v(); break;
      case '--prompts': a.prompts = v(); break;
      case '--max-tokens': a.maxTokens = count(k, v()); break;
      case '--logits': a.logits = true; break;
      case '-h': case '--help':
        console.log(fs.readFileSync(new URL(import.meta.url)).toString().split('\nimport')[0]);
        process.exit(0);
        break;
      default: throw new Error(`unknown argument ${k}`);
    }
  }
  if (!a.nlc) {
    throw new Error('--nlc DIR (or $NLC_DIR) is required: where node-llama-cpp is installed');
  }
  if (!a.gguf) throw new Error('--gguf is required');
  if (!['auto', 'on', 'off'].includes(a.flashAttn)) {
    throw new Error('--flash-attn: auto, on or off');
  }
  if (!['f16', 'f32'].includes(a.kvType)) throw new Error('--kv-type: f16 or f32');
  if (a.threads < 1 || a.prompt < 2 || a.gen < 1 || a.repeats < 1) {
    throw new Error('--threads, --gen and --repeats must be at least 1, --prompt at least 2');
  }
  return a;
}

async function loadNlc(dir) {
  const root = path.resolve(dir, 'node_modules', 'node-llama-cpp');
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
  const mod = await import(pathToFileURL(path.join(root, 'dist', 'index.js')).href);
  let commit = null;
  try {  // the llama.cpp source node-llama-cpp was built from, as a git bundle
    const out = execFileSync('git', ['bundle', 'list-heads',
      path.join(root, 'llama', 'gitRelease.bundle')],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    commit = out.split(/\s+/)[0] || null;
  } catch { /* git missing: no commit */ }
  return { mod, version: pkg.version, commit };
}

// The ggml CPU backend variant loaded (libggml-cpu-<microarchitecture>.so), from the process's
// memory map (Linux); null elsewhere.
function cpuBackend() {
  try {
    const m = fs.readFileSync('/proc/self/maps', 'utf8').match(/libggml-cpu-[\w.-]+\.so/);
    return m ? m[0] : null;
  } catch {
    return null;
  }
}

// (busy, all) CPU time of the whole machine in jiffies, from /proc/stat (Linux); null elsewhere.
function cpuTotal() {
  try {
    const v = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1)
      .map(Number);
    const all = v.reduce((x, y) => x + y, 0);
    return { busy: all - v[3] - v[4], all };
  } catch {
    return null;
  }
}

// The share of the machine's CPU time that other processes used between two cpuTotal() /
// process.cpuUsage() readings.
function cpuOther(t0, u0) {
  const t1 = cpuTotal();
  if (!t0 || !t1 || t1.all === t0.all) return null;
  const u = process.cpuUsage(u0);
  const mine = ((u.user + u.system) / 1e6) * 100;  // jiffies at USER_HZ 100
  return Math.round((Math.max(0, t1.busy - t0.busy - mine) / (t1.all - t0.all)) * 1e4) / 1e4;
}

// llama_perf_context_print's lines, as the logger receives them.
function parsePerf(lines) {
  const r = {};
  for (const l of lines) {
    let m = l.match(/prompt eval time =\s*([\d.]+) ms \/\s*(\d+) tokens/);
    if (m) r.prefill = { ms: Number(m[1]), tokens: Number(m[2]) };
    m = l.match(/\seval time =\s*([\d.]+) ms \/\s*(\d+) runs/);
    if (m && !l.includes('prompt eval')) r.decode = { ms: Number(m[1]), tokens: Number(m[2]) };
  }
  return r;
}

async function main() {
  const a = parseArgs(process.argv);
  const { mod, version, commit } = await loadNlc(a.nlc);
  const { getLlama, LlamaLogLevel } = mod;
  const logs = [];
  const llama = await getLlama({
    gpu: false, build: 'never', maxThreads: 0, logLevel: LlamaLogLevel.info,
    logger: (level, message) => {
      logs.push(message);
      if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) {
        process.stderr.write(`${message}\n`);
      }
    },
  });
  const model = await llama.loadModel({ modelPath: a.gguf, gpuLayers: 0 });
  const vocab = model.fileInfo.metadata?.llama?.vocab_size
    ?? model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length;
  const greedy = a.prompts !== null;
  const prompts = greedy ? parsePrompts(a.prompts) : null;
  const need = greedy ? Math.max(...prompts.map((p) => p.length)) + a.maxTokens : a.prompt + a.gen;
  const context = await model.createContext({
    contextSize: Math.ceil(need / 256) * 256,
    batchSize: greedy ? 512 : a.prompt,
    threads: { ideal: a.threads, min: a.threads },
    flashAttention: { auto: 'auto', on: true, off: false }[a.flashAttn],
    performanceTracking: true,
    // node-llama-cpp calls these options experimental; F16 is llama.cpp's default
    ...(a.kvType === 'f32'
      ? { experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32' } : {}),
  });
  const seq = context.getSequence();
  const build = {
    node_llama_cpp: version, build_type: llama.buildType, llama_cpp: llama.llamaCppRelease,
    llama_cpp_commit: commit,
    cpu_backend: cpuBackend(),
    system_info: llama.systemInfo.trim(),
    context_threads: context.currentThreads, flash_attention: context.flashAttention,
    kv_cache_type: a.kvType,
    context_size: context.contextSize, batch_size: context.batchSize,
  };

  let result;
  if (greedy) {
    const tokens = [], logProbs = [];
    for (const p of prompts) {
      await seq.clearHistory();
      const out = [], rows = [];
      const opts = { temperature: 0, yieldEogToken: true };
      const it = a.logits ? seq.evaluateWithMetadata(p, { probabilities: true }, opts)
        : seq.evaluate(p, opts);
      for await (const r of it) {
        if (a.logits) {
          // llama.cpp's softmax of the full logits row (the greedy sampler leaves it whole)
          const row = new Array(vocab).fill(null);
          for (const [tok, prob] of r.probabilities) row[tok] = prob > 0 ? Math.log(prob) : -1e30;
          rows.push(row);
          out.push(r.token);
        } else {
          out.push(r);
        }
        if (out.length >= a.maxTokens) break;
      }
      tokens.push(out);
      logProbs.push(rows);
    }
    result = { gguf: a.gguf, prompts, tokens, build };
    if (a.logits) result.log_probs = logProbs;
  } else {
    const next = rng(a.seed);
    const prompt = Array.from({ length: a.prompt }, () => 3 + Math.floor(next() * (vocab - 3)));
    const runs = [];
    const perfNow = async () => {
      const from = logs.length;
      await context.printTimings();  // prints llama.cpp's counters and resets them
      return parsePerf(logs.slice(from));
    };
    for (let r = 0; r <= a.repeats; r++) {  // r = 0: warm-up
      await seq.clearHistory();
      await perfNow();
      const c0 = cpuTotal(), u0 = process.cpuUsage();
      let t0 = performance.now();
      await seq.evaluateWithoutGeneratingNewTokens(prompt);
      const prefillMs = performance.now() - t0;
      const prefillNative = (await perfNow()).prefill;
      // The first generated token comes from decoding the prompt's last token again at its
      // position: drop it from the cache so that evaluate() decodes exactly --gen single tokens.
      await seq.eraseContextTokenRanges([{ start: a.prompt - 1, end: a.prompt }]);
      let n = 0;
      t0 = performance.now();
      const gen = seq.evaluate([prompt[a.prompt - 1]], { temperature: 0, yieldEogToken: true });
      for await (const t of gen) {
        void t;
        if (++n >= a.gen) break;
      }
      const decodeMs = performance.now() - t0;
      const other = cpuOther(c0, u0);
      const decodeNative = (await perfNow()).decode;
      if (r === 0) continue;
      runs.push({
        prefill_ms: prefillMs, decode_ms: decodeMs, cpu_other: other,
        prefill_tokens_per_s: a.prompt / (prefillMs / 1e3),
        decode_tokens_per_s: a.gen / (decodeMs / 1e3),
        native: {
          prefill_ms: prefillNative?.ms ?? null, prefill_tokens: prefillNative?.tokens ?? null,
          decode_ms: decodeNative?.ms ?? null, decode_runs: decodeNative?.tokens ?? null,
        },
      });
    }
    const nat = (f) => (runs.every((x) => f(x) !== null) ? quantile(runs.map(f), 0.5) : null);
    result = {
      gguf: a.gguf, threads: a.threads, prompt: a.prompt, gen: a.gen, repeats: a.repeats,
      seed: a.seed,
      prefill_tokens_per_s: quantile(runs.map((x) => x.prefill_tokens_per_s), 0.5),
      decode_tokens_per_s: quantile(runs.map((x) => x.decode_tokens_per_s), 0.5),
      native: {
        prefill_tokens_per_s: nat((x) => (x.native.prefill_ms
          ? x.native.prefill_tokens / (x.native.prefill_ms / 1e3) : null)),
        decode_tokens_per_s: nat((x) => (x.native.decode_ms
          ? x.native.decode_runs / (x.native.decode_ms / 1e3) : null)),
      },
      cpu_other: Math.max(...runs.map((x) => x.cpu_other ?? 0)), cpus: os.cpus().length,
      runs, build,
    };
  }
  await context.dispose();
  await model.dispose();
  if (result.cpu_other > 0.02) {
    const pct = Math.round(result.cpu_other * 100);
    process.stderr.write(`warning: other processes used ${pct}% of the CPUs' `
      + 'time during a run: llama.cpp\'s threads spin at barriers, so its figures are distorted; '
      + 'measure on a quiet machine\n');
  }
  const text = JSON.stringify(result, null, 1);
  if (a.json) fs.writeFileSync(a.json, text);
  console.log(text);
}

main().catch((e) => {
  console.error(e?.stack || String(e));
  process.exit(1);
});
