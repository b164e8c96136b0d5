#!/usr/bin/python3
"""Checks the GGUF files of scripts/generate/write_gguf.py: reads them back (a GGUF v3 reader
of its own), compares them with the ONNX model they came from, and runs them in numpy the
way llama.cpp's `llama` architecture does.

Usage:
    scripts/generate/gguf_check.py roundtrip --gguf F.gguf --model M.onnx
    scripts/generate/gguf_check.py generate --gguf F.gguf --prompts "1,2,3;4,5" --max-tokens N
        [--logits] [--json OUT]
    scripts/generate/gguf_check.py compare REF.json OTHER.json [...]
    scripts/generate/gguf_check.py selftest

roundtrip: the metadata against the model's "dsinfer.decoder" configuration; every tensor's
name, shape (innermost first) and type; the values: F32 tensors must equal the ONNX
initializers exactly once the writer's transposes and the attn_q / attn_k row permutation are
undone; Q8_0 blocks must hold d = fp16(max|w| / 127) and dequantize to within d / 2 of the
weights; F16 tensors must equal the weights rounded to fp16. Exit status 1 on any mismatch.

generate: greedy decoding from the GGUF tensors (Q8_0 dequantized) in llama.cpp's layout:
x @ W^T with W = [out, in], and ggml's "normal" RoPE, which rotates the adjacent pairs
(x[2i], x[2i+1]) of each head by pos * theta^(-2i/d). With write_gguf.py's row permutation this
must reproduce scripts/generate/numpy_reference.py (the ONNX graph's rotate_half form) to
float32 rounding; without it (--no-qk-permute) it must not. Each prompt alone, exactly
--max-tokens tokens, first maximum on a tie. Output JSON {"prompts", "tokens"[, "logits"]} as
numpy_reference.py writes it.

compare: OTHER files against REF: tokens identical (first difference otherwise) and, where
both hold per-step scores ("logits", or "log_probs" as llama_cpp_bench.mjs --logits writes),
the largest difference of the log-softmax over each prompt's steps up to and including its
first token difference (log-softmax removes the constant a softmax cannot see). Exit status 1
on a token mismatch.

selftest: no files needed: draws a small decoder's weights (make_models' names and layouts,
head dim 8, 4 heads, 2 KV heads, rows of 32 and of 24), writes them as F32 and Q8_0 GGUF to a
temporary folder, reads them back (exact F32 values, Q8_0 within its bound, F16 fallback), and
checks that the llama.cpp-form forward above on the F32 file gives the logits of a
rotate_half (Hugging Face form) forward on the original weights, and does not without the
permutation.

Needs numpy (and onnx for roundtrip).
"""

import argparse
import json
import struct
import sys

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0] if "/" in __file__ else ".")
import write_gguf as W  # noqa: E402

GGML_NAMES = {W.GGML_F32: "F32", W.GGML_F16: "F16", W.GGML_Q8_0: "Q8_0"}


class Gguf:
    """A GGUF v3 file: .kv (key -> value; arrays as lists), .tensors (name -> (type, ne,
    offset)), .raw(name) the tensor's bytes as numpy, .array(name) float32 [.., ne1, ne0]."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        if self.take(4) != W.GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        version, n_tensors, n_kv = struct.unpack("<IQQ", self.take(20))
        if version != 3:
            raise ValueError(f"{path}: GGUF version {version}, not 3")
        self.kv = {}
        for _ in range(n_kv):
            key = self.string()
            (kind,) = struct.unpack("<I", self.take(4))
            self.kv[key] = self.value(kind)
        self.tensors = {}
        for _ in range(n_tensors):
            name = self.string()
            (n_dims,) = struct.unpack("<I", self.take(4))
            ne = struct.unpack(f"<{n_dims}Q", self.take(8 * n_dims))
            kind, offset = struct.unpack("<IQ", self.take(12))
            self.tensors[name] = (kind, ne, offset)
        align = self.kv.get("general.alignment", W.ALIGNMENT)
        self.data = self.pos + (align - self.pos % align) % align

    def take(self, n):
        b = self.buf[self.pos:self.pos + n]
        if len(b) != n:
            raise ValueError("truncated GGUF file")
        self.pos += n
        return b

    def string(self):
        (n,) = struct.unpack("<Q", self.take(8))
        return self.take(n).decode("utf-8")

    def value(self, kind):
        if kind == W.T_STRING:
            return self.string()
        if kind == W.T_ARRAY:
            elem, n = struct.unpack("<IQ", self.take(12))
            if elem == W.T_STRING:
                return [self.string() for _ in range(n)]
            dt = np.dtype(W.ARRAY_DTYPE[elem])
            a = np.frombuffer(self.take(n * dt.itemsize), dt)
            return [bool(v) for v in a] if elem == W.T_BOOL else a.tolist()
        fmt = W.SCALAR[kind]
        (v,) = struct.unpack(fmt, self.take(struct.calcsize(fmt)))
        return v

    def raw(self, name):
        kind, ne, offset = self.tensors[name]
        rows = int(np.prod(ne[1:], dtype=np.int64))
        start = self.data + offset
        if kind == W.GGML_F32:
            return np.frombuffer(self.buf, "<f4", rows * ne[0], start).reshape(*ne[::-1])
        if kind == W.GGML_F16:
            return np.frombuffer(self.buf, "<f2", rows * ne[0], start).reshape(*ne[::-1])
        if kind == W.GGML_Q8_0:
            return np.frombuffer(self.buf, W.Q8_0_BLOCK, rows * ne[0] // W.QK8_0, start) \
                .reshape(rows, ne[0] // W.QK8_0)
        raise ValueError(f"{name}: ggml type {kind} not handled")

    def array(self, name):
        kind, ne, _ = self.tensors[name]
        a = self.raw(name)
        if kind == W.GGML_Q8_0:
            return W.dequantize_q8_0(a, ne[0]).reshape(*ne[::-1])
        return a.astype(np.float32)


def config_of(g):
    """The decoder configuration (make_models' key names) from the GGUF metadata."""
    kv = g.kv
    return dict(vocab_size=kv["llama.vocab_size"], hidden_size=kv["llama.embedding_length"],
                num_layers=kv["llama.block_count"], num_heads=kv["llama.attention.head_count"],
                num_kv_heads=kv["llama.attention.head_count_kv"],
                head_dim=kv["llama.rope.dimension_count"],
                intermediate_size=kv["llama.feed_forward_length"],
                rope_theta=kv["llama.rope.freq_base"],
                rms_norm_eps=kv["llama.attention.layer_norm_rms_epsilon"])


# ------------------------------------------------------------------------------------------
# roundtrip

def roundtrip(args):
    weights, cfg, _ = W.load_onnx(args.model)
    g = Gguf(args.gguf)
    problems = []
    qtype = {0: "f32", 7: "q8_0"}.get(g.kv.get("general.file_type"))
    if qtype is None:
        problems.append(f"general.file_type {g.kv.get('general.file_type')}")
        qtype = "f32"
    got = config_of(g)
    for k, v in got.items():
        want = np.float32(cfg[k]) if isinstance(v, float) else cfg[k]
        if v != want:
            problems.append(f"metadata {k}: {v}, model {cfg[k]}")
    if g.kv.get("general.architecture") != "llama":
        problems.append(f"general.architecture {g.kv.get('general.architecture')}")
    if g.kv.get("llama.context_length") != cfg.get("max_position_embeddings", 4096):
        problems.append(f"llama.context_length {g.kv.get('llama.context_length')}")
    toks = g.kv.get("tokenizer.ggml.tokens", [])
    if len(toks) != cfg["vocab_size"] or len(set(toks)) != len(toks):
        problems.append(f"tokenizer.ggml.tokens: {len(toks)} tokens, {len(set(toks))} distinct")
    for key, want in (("tokenizer.ggml.bos_token_id", cfg.get("bos_token_id", 1)),
                      ("tokenizer.ggml.eos_token_id", cfg.get("eos_token_id", 2))):
        if g.kv.get(key) != want:
            problems.append(f"{key}: {g.kv.get(key)}, model {want}")

    # The expected tensors, from the ONNX weights, without the row permutation.
    expected = W.gguf_tensors(weights, cfg, permute=False)
    if list(g.tensors) != [n for n, _, _ in expected]:
        problems.append(f"tensor names/order: {list(g.tensors)[:4]}...")
    counts = {}
    worst_q8 = 0.0
    for name, want, is_weight in expected:
        if name not in g.tensors:
            continue
        kind, ne, _ = g.tensors[name]
        counts[GGML_NAMES.get(kind, kind)] = counts.get(GGML_NAMES.get(kind, kind), 0) + 1
        if tuple(ne) != tuple(want.shape[::-1]):
            problems.append(f"{name}: ne {ne}, expected {want.shape[::-1]}")
            continue
        if qtype == "f32" or not is_weight:
            want_kind = W.GGML_F32
        elif want.shape[-1] % W.QK8_0 == 0:
            want_kind = W.GGML_Q8_0
        else:
            want_kind = W.GGML_F16
        if kind != want_kind:
            problems.append(f"{name}: type {GGML_NAMES.get(kind, kind)}, expected "
                            f"{GGML_NAMES[want_kind]}")
            continue
        got = g.array(name)
        heads = {"attn_q": cfg["num_heads"], "attn_k": cfg["num_kv_heads"]}.get(
            name.split(".")[-2])
        if heads and not args.no_qk_permute:
            got = W.qk_unpermute(got, heads)
        if kind == W.GGML_F32:
            if not np.array_equal(got, want):
                problems.append(f"{name}: F32 values differ (max {np.max(np.abs(got - want))})")
        elif kind == W.GGML_F16:
            if not np.array_equal(got, want.astype(np.float16).astype(np.float32)):
                problems.append(f"{name}: F16 values differ")
        else:
            raw = g.raw(name)
            if heads and not args.no_qk_permute:
                # blocks run along rows (ne0), so a row permutation moves whole rows of blocks
                raw = W.qk_unpermute(raw.reshape(raw.shape[0], -1), heads)
            blocks = want.reshape(-1, W.QK8_0)
            d_want = (np.max(np.abs(blocks), axis=1) / np.float32(127)).astype(np.float16)
            d_got = raw["d"].reshape(-1)
            if not np.array_equal(d_got, d_want):
                problems.append(f"{name}: Q8_0 scales differ from fp16(max|w| / 127)")
            d = d_got.astype(np.float32).repeat(W.QK8_0)
            err = np.abs(got.reshape(-1) - want.reshape(-1))
            # rounding w / d to an integer: within d / 2, plus fp16 rounding of d (|q| <= 127)
            bound = d * (0.5 + 127 * 2.0 ** -11) + 1e-12
            if np.any(err > bound):
                problems.append(f"{name}: Q8_0 error {np.max(err - bound):.3g} over bound")
            worst_q8 = max(worst_q8, float(np.max(err / np.maximum(d, 1e-30))))
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    if problems:
        for p in problems:
            print(f"MISMATCH {p}")
        return 1
    extra = f"; Q8_0 max |w - dequant| = {worst_q8:.3f} d" if worst_q8 else ""
    print(f"{args.gguf}: metadata and {len(expected)} tensors ({summary}) match "
          f"{args.model}{extra}")
    return 0


# ------------------------------------------------------------------------------------------
# generate: llama.cpp's computation, in numpy

class GgufDecoder:
    def __init__(self, path):
        g = Gguf(path)
        self.cfg = config_of(g)
        self.w = {n: g.array(n) for n in g.tensors}
        d = self.cfg["head_dim"]
        self.theta = (np.float32(self.cfg["rope_theta"])
                      ** (-np.arange(0, d, 2, dtype=np.float32) / np.float32(d))).astype(np.float32)

    def rms_norm(self, x, weight):
        var = np.mean(x * x, axis=-1, keepdims=True) + np.float32(self.cfg["rms_norm_eps"])
        return (x / np.sqrt(var)) * weight

    def rope(self, x, pos):
        """ggml "normal" RoPE: x [S, H, D]; pairs (2i, 2i+1) rotated by pos * theta_i."""
        ang = pos[:, None].astype(np.float32) * self.theta[None, :]  # [S, D/2]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def forward(self, ids, start, cache):
        """ids [S] at positions start.., cache: per layer (K, V) [T, KV, D]. -> logits [V]
        of the last position, the new cache."""
        c, w = self.cfg, self.w
        heads, kv, d = c["num_heads"], c["num_kv_heads"], c["head_dim"]
        s = len(ids)
        pos = np.arange(start, start + s)
        x = w["token_embd.weight"][ids]
        new = []
        for i in range(c["num_layers"]):
            b = f"blk.{i}"
            y = self.rms_norm(x, w[f"{b}.attn_norm.weight"])
            q = self.rope((y @ w[f"{b}.attn_q.weight"].T).reshape(s, heads, d), pos)
            k = self.rope((y @ w[f"{b}.attn_k.weight"].T).reshape(s, kv, d), pos)
            v = (y @ w[f"{b}.attn_v.weight"].T).reshape(s, kv, d)
            k = np.concatenate([cache[i][0], k]) if cache else k
            v = np.concatenate([cache[i][1], v]) if cache else v
            new.append((k, v))
            t = k.shape[0]
            rep = heads // kv
            kk = np.repeat(k, rep, axis=1).transpose(1, 2, 0)  # [H, D, T]
            vv = np.repeat(v, rep, axis=1).transpose(1, 0, 2)  # [H, T, D]
            scores = (q.transpose(1, 0, 2) @ kk) * np.float32(1.0 / np.sqrt(d))  # [H, S, T]
            allowed = np.arange(t)[None, :] <= (start + np.arange(s))[:, None]
            scores = np.where(allowed[None], scores, -np.inf).astype(np.float32)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = scores / scores.sum(axis=-1, keepdims=True)
            o = (probs @ vv).transpose(1, 0, 2).reshape(s, heads * d)
            x = x + o @ w[f"{b}.attn_output.weight"].T
            y = self.rms_norm(x, w[f"{b}.ffn_norm.weight"])
            gte = y @ w[f"{b}.ffn_gate.weight"].T
            gte = gte / (np.float32(1.0) + np.exp(-gte))
            x = x + (gte * (y @ w[f"{b}.ffn_up.weight"].T)) @ w[f"{b}.ffn_down.weight"].T
        x = self.rms_norm(x[-1:], w["output_norm.weight"])
        return (x @ w["output.weight"].T)[0], new


def parse_prompts(text):
    return [[int(t) for t in p.split(",") if t.strip()] for p in text.split(";") if p.strip()]


def generate(args):
    dec = GgufDecoder(args.gguf)
    prompts = parse_prompts(args.prompts)
    tokens, logits = [], []
    for p in prompts:
        out, rows, cache, ids, start = [], [], None, np.array(p), 0
        for _ in range(args.max_tokens):
            last, cache = dec.forward(ids, start, cache)
            start += len(ids)
            nxt = int(np.argmax(last))
            out.append(nxt)
            rows.append(last.tolist())
            ids = np.array([nxt])
        tokens.append(out)
        logits.append(rows)
    result = {"prompts": prompts, "tokens": tokens}
    if args.logits:
        result["logits"] = logits
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f)
    else:
        print(json.dumps({"prompts": prompts, "tokens": tokens}))
    return 0


# ------------------------------------------------------------------------------------------
# compare

def log_softmax(row):
    a = np.asarray(row, np.float64)
    m = a.max()
    return a - m - np.log(np.sum(np.exp(a - m)))


def scores_of(run):
    if "logits" in run:
        return run["logits"]
    return run.get("log_probs")


def compare(args):
    with open(args.ref, encoding="utf-8") as f:
        ref = json.load(f)
    status = 0
    for path in args.other:
        with open(path, encoding="utf-8") as f:
            other = json.load(f)
        if other["prompts"] != ref["prompts"]:
            print(f"{path}: other prompts")
            status = 1
            continue
        # per prompt: the first step whose token differs (None: none does)
        firsts = [next((s for s in range(len(t))
                        if s >= len(o) or o[s] != t[s]), None)
                  for t, o in zip(ref["tokens"], other["tokens"])]
        first = next(((r, s) for r, s in enumerate(firsts) if s is not None), None)
        n = sum(len(t) for t in ref["tokens"])
        line = f"{path}: {len(ref['prompts'])} prompts, {n} tokens " + (
            "identical" if first is None else
            f"DIFFER in {sum(s is not None for s in firsts)} prompts, first at (prompt, step) "
            f"{first}")
        a, b = scores_of(ref), scores_of(other)
        if a is not None and b is not None:
            diff, steps = 0.0, 0
            for r, f_r in enumerate(firsts):
                upto = min(len(a[r]), len(b[r]), len(a[r]) if f_r is None else f_r + 1)
                for s in range(upto):
                    diff = max(diff, float(np.max(np.abs(log_softmax(a[r][s])
                                                         - log_softmax(b[r][s])))))
                    steps += 1
            line += f"; log-softmax max abs diff {diff:.3g} over {steps} steps"
        print(line)
        status |= 0 if first is None else 1
    return status


# ------------------------------------------------------------------------------------------
# selftest

def hf_logits(w, cfg, ids):
    """The Hugging Face form (rotate_half RoPE, [in, out] weights) of the decoder: logits of
    the last position of `ids`, no cache."""
    heads, kv, d = cfg["num_heads"], cfg["num_kv_heads"], cfg["head_dim"]
    s = len(ids)
    inv = (1.0 / cfg["rope_theta"] ** (np.arange(0, d, 2) / d)).astype(np.float32)
    ang = np.arange(s, dtype=np.float32)[:, None] * inv[None, :]
    cos = np.cos(np.concatenate([ang, ang], -1))[:, None, :]
    sin = np.sin(np.concatenate([ang, ang], -1))[:, None, :]

    def norm(x, g):
        var = np.mean(x * x, -1, keepdims=True) + np.float32(cfg["rms_norm_eps"])
        return g * (x / np.sqrt(var))

    def rot(x):
        return x * cos + np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1) * sin

    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_layers"]):
        p = f"model.layers.{i}"
        y = norm(x, w[f"{p}.input_layernorm.weight"])
        q = rot((y @ w[f"{p}.self_attn.q_proj.weight_t"]).reshape(s, heads, d))
        k = rot((y @ w[f"{p}.self_attn.k_proj.weight_t"]).reshape(s, kv, d))
        v = (y @ w[f"{p}.self_attn.v_proj.weight_t"]).reshape(s, kv, d)
        k, v = np.repeat(k, heads // kv, 1), np.repeat(v, heads // kv, 1)
        sc = np.einsum("shd,thd->hst", q, k) / np.float32(np.sqrt(d))
        sc = np.where(np.tril(np.ones((s, s), bool))[None], sc, -np.inf)
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        o = np.einsum("hst,thd->shd", pr, v).reshape(s, heads * d)
        x = x + o @ w[f"{p}.self_attn.o_proj.weight_t"]
        y = norm(x, w[f"{p}.post_attention_layernorm.weight"])
        g = y @ w[f"{p}.mlp.gate_proj.weight_t"]
        x = x + (g / (1 + np.exp(-g)) * (y @ w[f"{p}.mlp.up_proj.weight_t"])) \
            @ w[f"{p}.mlp.down_proj.weight_t"]
    return (norm(x[-1:], w["model.norm.weight"]) @ w["lm_head.weight_t"])[0]


def selftest(args):
    import os
    import tempfile
    rng = np.random.default_rng(7)
    cfg = dict(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
               head_dim=8, intermediate_size=24, rope_theta=10000.0, rms_norm_eps=1e-5,
               max_position_embeddings=128, bos_token_id=1, eos_token_id=2)
    h, f, v, d = 32, 24, 300, 8
    n = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)  # noqa: E731
    w = {"model.embed_tokens.weight": n(v, h), "model.norm.weight": 1 + n(h),
         "lm_head.weight_t": n(h, v)}
    for i in range(2):
        p = f"model.layers.{i}"
        w.update({f"{p}.input_layernorm.weight": 1 + n(h),
                  f"{p}.post_attention_layernorm.weight": 1 + n(h),
                  f"{p}.self_attn.q_proj.weight_t": n(h, 4 * d),
                  f"{p}.self_attn.k_proj.weight_t": n(h, 2 * d),
                  f"{p}.self_attn.v_proj.weight_t": n(h, 2 * d),
                  f"{p}.self_attn.o_proj.weight_t": n(4 * d, h),
                  f"{p}.mlp.gate_proj.weight_t": n(h, f), f"{p}.mlp.up_proj.weight_t": n(h, f),
                  f"{p}.mlp.down_proj.weight_t": n(f, h)})
    failures = []
    ids = [1, 17, 250, 3, 99, 42, 7]
    ref = hf_logits(w, cfg, ids)
    with tempfile.TemporaryDirectory() as tmp:
        for qtype, permute in (("f32", True), ("q8_0", True), ("f32", False)):
            path = os.path.join(tmp, f"{qtype}_{permute}.gguf")
            W.convert(w, cfg, path, qtype, "selftest", permute)
            g = Gguf(path)
            if config_of(g) != {k: (np.float32(cfg[k]) if isinstance(cfg[k], float) else cfg[k])
                                for k in config_of(g)}:
                failures.append(f"{qtype}: metadata {config_of(g)}")
            for name, want, is_weight in W.gguf_tensors(w, cfg, permute):
                kind = g.tensors[name][0]
                got = g.array(name)
                if qtype == "f32" or not is_weight:
                    ok = kind == W.GGML_F32 and np.array_equal(got, want)
                elif want.shape[-1] % W.QK8_0:
                    ok = kind == W.GGML_F16 and np.array_equal(
                        got, want.astype(np.float16).astype(np.float32))
                else:
                    dq = g.raw(name)["d"].astype(np.float32).reshape(-1).repeat(W.QK8_0)
                    ok = kind == W.GGML_Q8_0 and np.all(
                        np.abs(got.reshape(-1) - want.reshape(-1)) <= dq * (0.5 + 127 * 2.0 ** -11))
                if not ok:
                    failures.append(f"{qtype}: {name} read back wrong")
            if qtype == "f32":
                dec = GgufDecoder(path)
                got, cache = dec.forward(np.array(ids[:4]), 0, None)
                for j, t in enumerate(ids[4:]):  # the rest one token at a time, with the cache
                    got, cache = dec.forward(np.array([t]), 4 + j, cache)
                diff = float(np.max(np.abs(got - ref)))
                if permute and diff > 1e-4:
                    failures.append(f"permuted file: logits differ by {diff:.3g} from rotate_half")
                if not permute and diff < 1e-2:
                    failures.append(f"unpermuted file: logits differ by only {diff:.3g}")
                print(f"selftest: {'permuted' if permute else 'unpermuted'} F32 GGUF vs "
                      f"rotate_half forward: max logits diff {diff:.3g}")
    for fl in failures:
        print(f"FAIL {fl}")
    print("selftest " + ("failed" if failures else "passed"))
    return 1 if failures else 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("roundtrip")
    p.add_argument("--gguf", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--no-qk-permute", action="store_true",
                   help="the file was written with --no-qk-permute")
    p = sub.add_parser("generate")
    p.add_argument("--gguf", required=True)
    p.add_argument("--prompts", required=True)
    p.add_argument("--max-tokens", type=int, required=True)
    p.add_argument("--logits", action="store_true")
    p.add_argument("--json")
    p = sub.add_parser("compare")
    p.add_argument("ref")
    p.add_argument("other", nargs="+")
    sub.add_parser("selftest")
    args = ap.parse_args(argv)
    return {"roundtrip": roundtrip, "generate": generate, "compare": compare,
            "selftest": selftest}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
