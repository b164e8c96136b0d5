#!/usr/bin/python3
"""Pure-numpy forward and greedy decoding of the LLaMA-style decoders of tools/make_models.py
(llama_tiny, llama_100m: the Hugging Face export form), to check ONNX Runtime and dsinfer.

Usage:
    scripts/generate/numpy_reference.py --model M.onnx --prompts "1,2,3;4,5" --max-tokens N
        [--batch-prompts] [--logits] [--json OUT] [--compare RUN.json ...]

Reads the weights from the model's initializers by name and the configuration from its
metadata ("dsinfer.decoder"); the graph itself is not interpreted. Computes in float32 in the
graph's order of operations. Greedy: the next token is the argmax of the last position's
logits, the lowest index on a tie; exactly --max-tokens tokens per prompt (end of sequence
does not stop). Each prompt runs alone (batch 1), or with --batch-prompts all together, left
padded with token 0 (attention_mask 0 there, position_ids as Hugging Face makes them:
cumsum(mask) - 1, 1 on padding). Prefill with an empty cache, then one token per step with the
cache fed back.

--compare RUN.json (from scripts/generate/ort_generate.mjs, or any file with the same
"prompts"/"tokens" and optional "logits" fields) checks that the tokens are identical and prints
the largest logits difference along the way; exit status 1 on a token mismatch.
--logits puts every step's logits of the last position into the --json output.
Needs numpy and onnx only (Debian: python3-numpy, python3-onnx).
"""

import argparse
import json
import sys

import numpy as np
import onnx
from onnx import numpy_helper

LOWEST = np.finfo(np.float32).min


class Decoder:
    def __init__(self, path):
        model = onnx.load(path)
        meta = {p.key: p.value for p in model.metadata_props}
        if "dsinfer.decoder" not in meta:
            raise SystemExit(f"{path}: no dsinfer.decoder metadata (not a make_models decoder)")
        self.cfg = json.loads(meta["dsinfer.decoder"])
        self.w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        d = self.cfg["head_dim"]
        inv = 1.0 / self.cfg["rope_theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d)
        self.inv_freq = inv.astype(np.float32)

    def empty_cache(self, batch):
        c = self.cfg
        shape = (batch, c["num_kv_heads"], 0, c["head_dim"])
        return [(np.zeros(shape, np.float32), np.zeros(shape, np.float32))
                for _ in range(c["num_layers"])]

    def rms_norm(self, x, weight):
        var = np.mean(x * x, axis=-1, keepdims=True) + np.float32(self.cfg["rms_norm_eps"])
        return weight * (x * (np.float32(1.0) / np.sqrt(var)))

    def forward(self, ids, mask, pos, cache):
        """ids, pos [B, S] int64; mask [B, T] int64, T = past + S; cache: per layer (k, v)
        [B, KV, past, D]. Returns logits [B, S, V] and the new cache."""
        c, w = self.cfg, self.w
        b, s = ids.shape
        t = mask.shape[1]
        heads, kv, d = c["num_heads"], c["num_kv_heads"], c["head_dim"]
        q_pos = np.arange(t - s, t)[:, None]
        allowed = (np.arange(t)[None, :] <= q_pos)[None, None] & (mask != 0)[:, None, None, :]
        add_mask = np.where(allowed, np.float32(0.0), LOWEST).astype(np.float32)
        freqs = pos.astype(np.float32)[:, :, None] * self.inv_freq[None, None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos, sin = np.cos(emb)[:, None], np.sin(emb)[:, None]  # [B, 1, S, D]

        def rotate(x):
            rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], axis=-1)
            return x * cos + rot * sin

        def heads_of(x, n):
            return x.reshape(b, s, n, d).transpose(0, 2, 1, 3)

        x = w["model.embed_tokens.weight"][ids]
        present = []
        for i in range(c["num_layers"]):
            pre = f"model.layers.{i}"
            y = self.rms_norm(x, w[f"{pre}.input_layernorm.weight"])
            q = rotate(heads_of(y @ w[f"{pre}.self_attn.q_proj.weight_t"], heads))
            k = rotate(heads_of(y @ w[f"{pre}.self_attn.k_proj.weight_t"], kv))
            v = heads_of(y @ w[f"{pre}.self_attn.v_proj.weight_t"], kv)
            k = np.concatenate([cache[i][0], k], axis=2)
            v = np.concatenate([cache[i][1], v], axis=2)
            present.append((k, v))
            k, v = np.repeat(k, heads // kv, axis=1), np.repeat(v, heads // kv, axis=1)
            scores = (q @ k.transpose(0, 1, 3, 2)) * np.float32(1.0 / np.sqrt(d)) + add_mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = scores / scores.sum(axis=-1, keepdims=True)
            o = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, heads * d)
            x = x + o @ w[f"{pre}.self_attn.o_proj.weight_t"]
            y = self.rms_norm(x, w[f"{pre}.post_attention_layernorm.weight"])
            g = y @ w[f"{pre}.mlp.gate_proj.weight_t"]
            g = g * (np.float32(1.0) / (np.float32(1.0) + np.exp(-g)))
            g = g * (y @ w[f"{pre}.mlp.up_proj.weight_t"])
            x = x + g @ w[f"{pre}.mlp.down_proj.weight_t"]
        x = self.rms_norm(x, w["model.norm.weight"])
        return x @ w["lm_head.weight_t"], present


def generate(dec, prompts, max_tokens):
    """Greedy decoding of `prompts` run together, left padded. Returns tokens and each step's
    last-position logits, per prompt."""
    n, length = len(prompts), max(len(p) for p in prompts)
    ids = np.zeros((n, length), np.int64)
    mask = np.zeros((n, length), np.int64)
    for r, p in enumerate(prompts):
        ids[r, length - len(p):] = p
        mask[r, length - len(p):] = 1
    pos = np.where(mask == 1, np.cumsum(mask, axis=1) - 1, 1)
    cache = dec.empty_cache(n)
    tokens, logits = [[] for _ in prompts], [[] for _ in prompts]
    for _ in range(max_tokens):
        out, cache = dec.forward(ids, mask, pos, cache)
        last = out[:, -1, :]
        nxt = np.argmax(last, axis=-1)  # first maximum: lowest index on a tie
        for r in range(n):
            tokens[r].append(int(nxt[r]))
            logits[r].append(last[r])
        ids = nxt[:, None].astype(np.int64)
        pos = pos[:, -1:] + 1
        mask = np.concatenate([mask, np.ones((n, 1), np.int64)], axis=1)
    return tokens, logits


def parse_prompts(text):
    return [[int(t) for t in p.split(",") if t.strip()] for p in text.split(";") if p.strip()]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True, help='token ids, e.g. "1,2,3;4,5"')
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--batch-prompts", action="store_true")
    ap.add_argument("--logits", action="store_true", help="write each step's logits to --json")
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--compare", nargs="+", default=[], metavar="RUN.json")
    args = ap.parse_args(argv)

    dec = Decoder(args.model)
    prompts = parse_prompts(args.prompts)
    if args.batch_prompts:
        tokens, logits = generate(dec, prompts, args.max_tokens)
    else:
        tokens, logits = [], []
        for p in prompts:
            t, lg = generate(dec, [p], args.max_tokens)
            tokens += t
            logits += lg
    result = {"prompts": prompts, "tokens": tokens}
    if args.logits:
        result["logits"] = [[row.tolist() for row in steps] for steps in logits]
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f)
    else:
        print(json.dumps({"prompts": prompts, "tokens": tokens}))

    status = 0
    for path in args.compare:
        with open(path, encoding="utf-8") as f:
            other = json.load(f)
        if other["prompts"] != prompts:
            print(f"{path}: other prompts", file=sys.stderr)
            status = 1
            continue
        same = other["tokens"] == tokens
        first = next(((r, s) for r in range(len(tokens)) for s in range(len(tokens[r]))
                      if s >= len(other["tokens"][r]) or other["tokens"][r][s] != tokens[r][s]),
                     None)
        verdict = "identical" if same else f"DIFFER, first at (prompt, step) {first}"
        line = f"{path}: tokens {verdict}"
        if "logits" in other:
            diff = 0.0
            for r in range(len(tokens)):
                steps = len(other["logits"][r]) if first is None or first[0] != r else first[1] + 1
                for s in range(min(steps, len(logits[r]))):
                    ref = np.asarray(other["logits"][r][s], np.float32)
                    diff = max(diff, float(np.max(np.abs(ref - logits[r][s]))))
            scale = max(float(np.max(np.abs(lg))) for steps in logits for lg in steps)
            line += f"; logits max abs diff {diff:.3g} (max |logit| {scale:.3g})"
        print(line)
        status |= 0 if same else 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
