#!/usr/bin/env node
// ONNX Runtime's own per-node profile of a model, to set beside ds-profiler's:
//
//   node scripts/ort_profile.mjs --model M.onnx [--batch N] [--seq N] [--threads N] [--runs N]
//        [--peers DIR]
//
// Loads onnxruntime-node and makes the inputs as ../shared/peers/ort_bench.mjs does (its
// common.mjs: the same seed, the same fill; onnxruntime-node from --peers DIR, else where the
// harness looks: $PEERS_NODE_DIR, $PEERS_DIR, its default; "setup.sh DIR" installs it), runs
// the model --runs times (default 6) with the session's profiler on (enableProfiling: a
// Chrome-trace JSON with one "<node>_kernel_time" event per node per run), and prints, from the last runs (all but the first two), each node's median
// kernel time and op type, then the sum per op type, as tab-separated lines:
//   node <name> <op> <ms>   and   op <op> <ms> <nodes>   and   total <ms>
// Node names are ONNX Runtime's (after its own fusions: "n_Conv_3_token_1" for "n_Conv_3");
// the profile file is written to a temporary folder and removed.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const peersSrc = path.resolve(here, '..', '..', 'shared', 'peers');
const { loadOrt, sessionOptions, makeFeeds, DEFAULT_SEED } =
  await import(pathToFileURL(path.join(peersSrc, 'common.mjs')).href);

const a = { model: null, batch: 1, seq: 128, threads: 2, runs: 6, opt: 'all', seed: DEFAULT_SEED,
            peers: null };
for (let i = 2; i < process.argv.length; i++) {
  const k = process.argv[i], v = () => process.argv[++i];
  if (k === '--model') a.model = v();
  else if (k === '--batch') a.batch = parseInt(v(), 10);
  else if (k === '--seq') a.seq = parseInt(v(), 10);
  else if (k === '--threads') a.threads = parseInt(v(), 10);
  else if (k === '--runs') a.runs = parseInt(v(), 10);
  else if (k === '--peers') a.peers = v();
  else throw new Error(`unknown argument ${k}`);
}
if (!a.model) throw new Error('--model is required');
if (!(a.runs >= 3)) throw new Error('--runs must be at least 3');

const { ort } = loadOrt(a.peers);  // --peers, else the harness's $PEERS_NODE_DIR / $PEERS_DIR / default
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ort-profile-'));
const opts = sessionOptions(a);
opts.enableProfiling = true;
opts.profileFilePrefix = path.join(dir, 'p');
const session = await ort.InferenceSession.create(a.model, opts);
const feeds = makeFeeds(ort, session, a);
for (let r = 0; r < a.runs; r++) await session.run(feeds);
session.endProfiling();
const file = fs.readdirSync(dir).find((f) => f.endsWith('.json'));
const events = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
fs.rmSync(dir, { recursive: true, force: true });

const times = new Map(), ops = new Map();
for (const e of events) {
  if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue;
  const n = e.name.slice(0, -'_kernel_time'.length);
  if (!times.has(n)) times.set(n, []);
  times.get(n).push(e.dur / 1000);
  ops.set(n, e.args?.op_name ?? '?');
}
const median = (v) => {
  const s = [...v].sort((x, y) => x - y), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const byOp = new Map();
let total = 0;
for (const [n, v] of times) {
  const ms = median(v.slice(2));  // the first two runs warm up
  const op = ops.get(n);
  console.log(`node\t${n}\t${op}\t${ms.toFixed(3)}`);
  const g = byOp.get(op) ?? { ms: 0, nodes: 0 };
  g.ms += ms;
  g.nodes += 1;
  byOp.set(op, g);
  total += ms;
}
for (const [op, g] of [...byOp].sort((x, y) => y[1].ms - x[1].ms))
  console.log(`op\t${op}\t${g.ms.toFixed(3)}\t${g.nodes}`);
console.log(`total\t${total.toFixed(3)}`);
