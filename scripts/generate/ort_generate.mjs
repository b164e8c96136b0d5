#!/usr/bin/env node
// Greedy generation with ONNX Runtime (npm onnxruntime-node, CPU execution provider) on the
// LLaMA-style decoders of tools/make_models.py (inputs input_ids, attention_mask,
// position_ids, past_key_values.L.key/value; outputs logits, present.L.key/value).
//
//   node scripts/generate/ort_generate.mjs --peers DEST --model M.onnx --prompts "1,2,3;4,5"
//        --max-tokens N [--threads 2] [--batch-prompts] [--logits] [--opt all] [--json OUT]
//   node scripts/generate/ort_generate.mjs --peers DEST --model M.onnx --bench
//        [--prompt-len 512] [--decode 128] [--repeats 3] [--seed 12345] [--threads 2] [--json OUT]
//
// onnxruntime-node is loaded from DEST/node/node_modules, where the peer harness's
// "SKIP_MODELS=1 bash setup.sh DEST" installs it (DEST defaults to $PEERS_DIR).
// Session: cpu EP, graphOptimizationLevel --opt (default all), intraOpNumThreads --threads
// (default 2), interOpNumThreads 1, sequential.
//
// Generation: each prompt alone (batch 1), or with --batch-prompts all prompts in one batch,
// left padded with token 0 (attention_mask 0, position_ids cumsum(mask) - 1 and 1 on padding,
// as Hugging Face makes them). A prefill run with the whole prompt and an empty cache
// [B, KV, 0, D], then one run per token with the present outputs fed back as the past.
// Greedy: argmax of the last position's logits, the lowest index on a tie; exactly
// --max-tokens tokens (end of sequence does not stop). Output JSON:
//   {"prompts", "tokens", "prefill_ms" (per run: per prompt, or one for the batch),
//    "decode_tokens_per_s" (median over runs; tokens of all rows of a batch count),
//    "per_step_ms": {"p50", "p99"} (decode steps of all runs), "logits" with --logits:
//    per prompt, per generated token, the logits row it was chosen from}
// --bench: a prompt of --prompt-len seeded random ids (mulberry32 --seed) in [3, vocab), one
// untimed warm-up, then --repeats times prefill + --decode steps; reports
// prefill_tokens_per_s and decode_tokens_per_s (medians) with each repeat's figures.
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { createRequire } from 'node:module';
import { count, parsePrompts, quantile, rng } from './common.mjs';

function parseArgs(argv) {
  const a = { peers: process.env.PEERS_DIR || null, model: null, prompts: null, maxTokens: 16,
    threads: 2, opt: 'all', batchPrompts: false, logits: false, json: null, bench: false,
    promptLen: 512, decode: 128, repeats: 3, seed: 12345 };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
      return argv[++i];
    };
    switch (k) {
      case '--peers': a.peers = v(); break;
      case '--model': a.model = v(); break;
      case '--prompts': a.prompts = v(); break;
      case '--max-tokens': a.maxTokens = count(k, v()); break;
      case '--threads': a.threads = count(k, v()); break;
      case '--opt': a.opt = v(); break;
      case '--batch-prompts': a.batchPrompts = true; break;
      case '--logits': a.logits = true; break;
      case '--json': a.json = v(); break;
      case '--bench': a.bench = true; break;
      case '--prompt-len': a.promptLen = count(k, v()); break;
      case '--decode': a.decode = count(k, v()); break;
      case '--repeats': a.repeats = count(k, v()); break;
      case '--seed': a.seed = count(k, v()); break;
      case '-h': case '--help':
        console.log(fs.readFileSync(new URL(import.meta.url)).toString().split('\nimport')[0]);
        process.exit(0);
        break;
      default: throw new Error(`unknown argument ${k}`);
    }
  }
  if (!a.peers) throw new Error('--peers DEST is required (where setup.sh put onnxruntime-node)');
  if (!a.model) throw new Error('--model is required');
  if (!a.bench && !a.prompts) throw new Error('--prompts or --bench is required');
  if (!a.bench && a.maxTokens < 1) throw new Error('--max-tokens must be at least 1');
  return a;
}

function loadOrt(peers) {
  const nodeDir = path.resolve(peers, 'node');
  const require = createRequire(path.join(nodeDir, 'package.json'));
  try {
    return require('onnxruntime-node');
  } catch (e) {
    throw new Error(`onnxruntime-node not found under ${nodeDir}: ${e.message}`);
  }
}

class Generator {
  constructor(ort, session) {
    this.ort = ort;
    this.session = session;
    const meta = Object.fromEntries(session.inputMetadata.map((m) => [m.name, m]));
    this.layers = session.inputNames.filter((n) => /^past_key_values\.\d+\.key$/.test(n)).length;
    const kv = meta['past_key_values.0.key'].shape;
    [this.kvHeads, this.headDim] = [kv[1], kv[3]];
    this.vocab = session.outputMetadata.find((m) => m.name === 'logits').shape[2];
  }

  i64(rows) {
    const data = BigInt64Array.from(rows.flat().map(BigInt));
    return new this.ort.Tensor('int64', data, [rows.length, rows[0].length]);
  }

  // Greedy decoding of the prompts in one batch, left padded. Returns per-row tokens (and
  // logits rows when keepLogits), the prefill time and each decode step's time.
  async run(prompts, maxTokens, keepLogits) {
    const n = prompts.length, len = Math.max(...prompts.map((p) => p.length));
    const ids = prompts.map((p) => [...Array(len - p.length).fill(0), ...p]);
    const mask = prompts.map((p) => [...Array(len - p.length).fill(0), ...p.map(() => 1)]);
    let pos = mask.map((row) => { let c = 0; return row.map((m) => (m ? c++ : 1)); });
    const feeds = {};
    const empty = new this.ort.Tensor('float32', new Float32Array(0),
      [n, this.kvHeads, 0, this.headDim]);
    for (let l = 0; l < this.layers; l++) {
      feeds[`past_key_values.${l}.key`] = empty;
      feeds[`past_key_values.${l}.value`] = empty;
    }
    let step = { ids, pos };
    const tokens = prompts.map(() => []), logits = prompts.map(() => []);
    const stepMs = [];
    let prefillMs = 0;
    for (let t = 0; t < maxTokens; t++) {
      const s = step.ids[0].length;
      feeds.input_ids = this.i64(step.ids);
      feeds.position_ids = this.i64(step.pos);
      feeds.attention_mask = this.i64(mask);
      const t0 = process.hrtime.bigint();
      const out = await this.session.run(feeds);
      const ms = Number(process.hrtime.bigint() - t0) / 1e6;
      if (t === 0) prefillMs = ms; else stepMs.push(ms);
      const data = out.logits.data, v = this.vocab;
      const next = [];
      for (let r = 0; r < n; r++) {
        const base = (r * s + s - 1) * v;
        let best = 0;
        for (let j = 1; j < v; j++) if (data[base + j] > data[base + best]) best = j;
        tokens[r].push(best);
        if (keepLogits) logits[r].push(Array.from(data.subarray(base, base + v)));
        next.push(best);
      }
      for (let l = 0; l < this.layers; l++) {
        feeds[`past_key_values.${l}.key`] = out[`present.${l}.key`];
        feeds[`past_key_values.${l}.value`] = out[`present.${l}.value`];
      }
      pos = pos.map((row) => [row[row.length - 1] + 1]);
      step = { ids: next.map((x) => [x]), pos };
      mask.forEach((row) => row.push(1));
    }
    return { tokens, logits, prefillMs, stepMs };
  }
}

async function generate(a, gen) {
  const prompts = parsePrompts(a.prompts);
  for (const p of prompts) {
    if (p.length === 0 || p.some((x) => !Number.isInteger(x) || x < 0 || x >= gen.vocab)) {
      throw new Error(`prompt ${JSON.stringify(p)}: ids must be integers in [0, ${gen.vocab})`);
    }
  }
  const batches = a.batchPrompts ? [prompts] : prompts.map((p) => [p]);
  const res = { prompts, tokens: [], prefill_ms: [], decode_tokens_per_s: null, per_step_ms: null };
  if (a.logits) res.logits = [];
  const rates = [], steps = [];
  for (const batch of batches) {
    const r = await gen.run(batch, a.maxTokens, a.logits);
    res.tokens.push(...r.tokens);
    if (a.logits) res.logits.push(...r.logits);
    res.prefill_ms.push(r.prefillMs);
    steps.push(...r.stepMs);
    const total = r.stepMs.reduce((x, y) => x + y, 0);
    if (r.stepMs.length) rates.push((batch.length * r.stepMs.length * 1000) / total);
  }
  res.decode_tokens_per_s = quantile(rates, 0.5);
  res.per_step_ms = { p50: quantile(steps, 0.5), p99: quantile(steps, 0.99) };
  return res;
}

async function bench(a, gen) {
  const rand = rng(a.seed);
  const prompt = Array.from({ length: a.promptLen },
    () => 3 + Math.floor(rand() * (gen.vocab - 3)));
  await gen.run([prompt], Math.min(a.decode + 1, 8), false); // warm-up
  const runs = [];
  for (let i = 0; i < a.repeats; i++) {
    const r = await gen.run([prompt], a.decode + 1, false);
    const decodeMs = r.stepMs.reduce((x, y) => x + y, 0);
    runs.push({ prefill_ms: r.prefillMs, prefill_tokens_per_s: (a.promptLen * 1000) / r.prefillMs,
      decode_ms: decodeMs, decode_tokens_per_s: a.decode ? (a.decode * 1000) / decodeMs : null,
      per_step_ms: { p50: quantile(r.stepMs, 0.5), p99: quantile(r.stepMs, 0.99) } });
  }
  return { prompt_len: a.promptLen, decode_steps: a.decode, repeats: a.repeats, seed: a.seed,
    prefill_tokens_per_s: quantile(runs.map((r) => r.prefill_tokens_per_s), 0.5),
    decode_tokens_per_s: quantile(runs.map((r) => r.decode_tokens_per_s), 0.5), runs };
}

async function main() {
  const a = parseArgs(process.argv);
  const ort = loadOrt(a.peers);
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(a.model, {
    executionProviders: ['cpu'], graphOptimizationLevel: a.opt, intraOpNumThreads: a.threads,
    interOpNumThreads: 1, executionMode: 'sequential', logSeverityLevel: 3 });
  const createMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const gen = new Generator(ort, session);
  const res = a.bench ? await bench(a, gen) : await generate(a, gen);
  Object.assign(res, { model: path.basename(a.model),
    runtime: `onnxruntime-node ${ort.env.versions.common}`, threads: a.threads, opt: a.opt,
    batch_prompts: a.batchPrompts, session_create_ms: createMs, loadavg: os.loadavg() });
  if (a.json) fs.writeFileSync(a.json, JSON.stringify(res) + '\n');
  const { logits, ...shown } = res; // eslint-disable-line no-unused-vars
  console.log(JSON.stringify(shown));
}

main().catch((e) => { console.error(e && e.stack ? e.stack : e); process.exit(1); });
