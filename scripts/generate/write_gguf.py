#!/usr/bin/python3
"""Writes a LLaMA-style decoder of tools/make_models.py (llama_tiny, llama_100m) as a GGUF v3
file for llama.cpp's `llama` architecture, so that llama.cpp runs the same weights as dsinfer.

Usage:
    scripts/generate/write_gguf.py --model llama_100m.onnx --out llama_100m.f32.gguf [--type f32]
    scripts/generate/write_gguf.py --model llama_100m.onnx --out llama_100m.q8_0.gguf --type q8_0

Reads the weights from the model's initializers by name and the configuration from its
metadata ("dsinfer.decoder"); the graph itself is not interpreted.

Layout. GGUF lists a tensor's dimensions innermost first (ne0 = the contiguous one), and
llama.cpp multiplies x by a weight W of ne = [in, out], i.e. W stored row-major as [out][in]
(torch Linear's layout). The ONNX initializers hold the MatMul right-hand sides [in, out], so
every projection is transposed here; the embedding [vocab, hidden] is already [out][in].

RoPE. The ONNX graph (Hugging Face's form) rotates the pairs (x[i], x[i + d/2]) of each head
(rotate_half); llama.cpp's `llama` architecture uses ggml's "normal" RoPE, which rotates the
adjacent pairs (x[2i], x[2i + 1]), with the same angle pos * theta^(-2i/d) for pair i. The
rows of attn_q and attn_k are therefore permuted within each head so that output row 2i + j
of a head is input row j * d/2 + i (j = 0, 1): llama.cpp then rotates exactly the pairs the
ONNX graph rotates. q and k get the same permutation, so every q.k score, and hence the
attention output (v is not permuted), is the function the ONNX graph computes.
--no-qk-permute leaves the rows as they are (a wrong model; for checking the check only).

Types. --type f32 writes every tensor as F32 (general.file_type 0, ALL_F32). --type q8_0
(general.file_type 7, MOSTLY_Q8_0) writes the 2-D weights, the embedding and the output head
included, as Q8_0 blocks of 32 weights along a row (an fp16 scale d = max|w| / 127, then the
32 int8 values round(w / d), halves away from zero), as llama.cpp's own quantizer does for
that file type; a weight whose row length is not a multiple of 32 (llama_tiny's ffn_down, 172)
is written F16 instead, as llama.cpp's quantizer falls back. Norm weights stay F32.

Tokenizer. The decoders have no tokenizer, but llama.cpp requires a vocabulary of
vocab_size entries: this writes a SentencePiece-type ("llama") one whose tokens are
placeholders: "<unk>" at 0 and "<s>" / "</s>" at the model's bos / eos ids (the metadata's
bos_token_id / eos_token_id, 1 and 2), byte tokens "<0x00>".. on the next ids (all 256 when
they fit; llama_tiny's 256 ids leave room for 0x00..0xFC, every byte UTF-8 text can hold), every
other token the text "<tokN>"; scores 0. It is for feeding token ids, not text.

Checked with scripts/generate/gguf_check.py and llama_cpp_bench.mjs against node-llama-cpp
3.21.1's prebuilt llama.cpp (2026-12-04): its Q8_0 tensors are byte-identical to what llama.cpp's
own llama_model_quantize makes of the F32 file; llama.cpp's greedy tokens on the F32 files of
llama_tiny and llama_100m equal the ONNX model's (4 prompts x 32 tokens), the log-softmax within
5e-6 with attention in F32; written without the permutation, llama_100m's differ from the
first token.

Needs numpy and onnx (Debian: python3-numpy, python3-onnx). Also usable as a module:
convert(weights, cfg, path, qtype) takes the initializers as a dict of numpy arrays.
"""

import argparse
import json
import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# GGUF metadata value types
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)

# ggml tensor types used here
GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8
QK8_0 = 32
Q8_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "i1", (QK8_0,))])  # 34 bytes

FILE_TYPES = {"f32": 0, "q8_0": 7}  # llama_ftype: ALL_F32, MOSTLY_Q8_0

# llama.cpp token types (llama_token_type)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6


def qk_permute(w, n_heads):
    """w [n_heads * d, in] (rows = output features, per head rotate_half order) -> rows in
    adjacent-pair order: new row h*d + 2i + j = old row h*d + j*d/2 + i."""
    rows, cols = w.shape
    d = rows // n_heads
    return w.reshape(n_heads, 2, d // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def qk_unpermute(w, n_heads):
    """The inverse of qk_permute."""
    rows, cols = w.shape
    d = rows // n_heads
    return w.reshape(n_heads, d // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def quantize_q8_0(w):
    """w [rows, n] float32, n a multiple of 32 -> Q8_0 blocks, [rows, n / 32] of Q8_0_BLOCK.
    Per block: d = max|w| / 127 (float32), q = round(w * (1/d)) halves away from zero (C's
    roundf), d stored as fp16 (round to nearest even)."""
    x = np.ascontiguousarray(w, dtype=np.float32).reshape(-1, QK8_0)
    amax = np.max(np.abs(x), axis=1)
    d = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    v = (x * inv[:, None]).astype(np.float32)
    # roundf in float64, where |v| + 0.5 is exact
    q = np.sign(v) * np.floor(np.abs(v).astype(np.float64) + 0.5)
    blocks = np.empty(x.shape[0], Q8_0_BLOCK)
    blocks["d"] = d.astype(np.float16)
    blocks["qs"] = np.clip(q, -128, 127).astype(np.int8)
    return blocks.reshape(w.shape[0], w.shape[1] // QK8_0)


def dequantize_q8_0(blocks, n):
    """Q8_0 blocks (any shape ending in the blocks of a row) -> float32 [rows, n]."""
    b = blocks.reshape(-1)
    x = b["qs"].astype(np.float32) * b["d"].astype(np.float32)[:, None]
    return x.reshape(-1, n)


def gguf_tensors(weights, cfg, permute=True):
    """The decoder's weights as (llama.cpp name, numpy array in GGUF row-major order, is a
    2-D weight) in file order. Arrays are [out, in] for projections (ne = [in, out])."""
    heads, kv = cfg["num_heads"], cfg["num_kv_heads"]

    def t(name):
        return np.ascontiguousarray(weights[name].T, dtype=np.float32)

    def perm(a, n):
        return np.ascontiguousarray(qk_permute(a, n)) if permute else a

    out = [("token_embd.weight",
            np.ascontiguousarray(weights["model.embed_tokens.weight"], np.float32), True)]
    for i in range(cfg["num_layers"]):
        pre, blk = f"model.layers.{i}", f"blk.{i}"
        out += [
            (f"{blk}.attn_norm.weight", weights[f"{pre}.input_layernorm.weight"], False),
            (f"{blk}.attn_q.weight", perm(t(f"{pre}.self_attn.q_proj.weight_t"), heads), True),
            (f"{blk}.attn_k.weight", perm(t(f"{pre}.self_attn.k_proj.weight_t"), kv), True),
            (f"{blk}.attn_v.weight", t(f"{pre}.self_attn.v_proj.weight_t"), True),
            (f"{blk}.attn_output.weight", t(f"{pre}.self_attn.o_proj.weight_t"), True),
            (f"{blk}.ffn_norm.weight", weights[f"{pre}.post_attention_layernorm.weight"], False),
            (f"{blk}.ffn_gate.weight", t(f"{pre}.mlp.gate_proj.weight_t"), True),
            (f"{blk}.ffn_up.weight", t(f"{pre}.mlp.up_proj.weight_t"), True),
            (f"{blk}.ffn_down.weight", t(f"{pre}.mlp.down_proj.weight_t"), True),
        ]
    out += [("output_norm.weight", weights["model.norm.weight"], False),
            ("output.weight", t("lm_head.weight_t"), True)]
    return [(n, np.ascontiguousarray(a, np.float32), m) for n, a, m in out]


def check_shapes(tensors, cfg):
    h, d, f, v = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"], cfg["vocab_size"]
    want = {"token_embd.weight": (v, h), "output_norm.weight": (h,), "output.weight": (v, h)}
    for i in range(cfg["num_layers"]):
        b = f"blk.{i}"
        want.update({f"{b}.attn_norm.weight": (h,), f"{b}.ffn_norm.weight": (h,),
                     f"{b}.attn_q.weight": (cfg["num_heads"] * d, h),
                     f"{b}.attn_k.weight": (cfg["num_kv_heads"] * d, h),
                     f"{b}.attn_v.weight": (cfg["num_kv_heads"] * d, h),
                     f"{b}.attn_output.weight": (h, cfg["num_heads"] * d),
                     f"{b}.ffn_gate.weight": (f, h), f"{b}.ffn_up.weight": (f, h),
                     f"{b}.ffn_down.weight": (h, f)})
    for name, a, _ in tensors:
        if tuple(a.shape) != want[name]:
            raise SystemExit(f"{name}: shape {a.shape}, expected {want[name]}")


def vocabulary(cfg):
    """Placeholder SentencePiece vocabulary: "<unk>" at 0, "<s>" / "</s>" at bos / eos, then
    byte tokens "<0x00>", "<0x01>", ... on the next free ids (as many as fit: llama.cpp looks
    bytes up by these names, the newline's at least, and cannot load without them), the rest
    "<tokN>"."""
    n, bos, eos = cfg["vocab_size"], cfg.get("bos_token_id", 1), cfg.get("eos_token_id", 2)
    tokens = [None] * n
    types = [TOKEN_NORMAL] * n
    for i, text, kind in ((0, "<unk>", TOKEN_UNKNOWN), (bos, "<s>", TOKEN_CONTROL),
                          (eos, "</s>", TOKEN_CONTROL)):
        tokens[i], types[i] = text, kind
    free = (i for i in range(n) if tokens[i] is None)
    for byte, i in zip(range(256), free):
        tokens[i], types[i] = f"<0x{byte:02X}>", TOKEN_BYTE
    tokens = [t if t is not None else f"<tok{i}>" for i, t in enumerate(tokens)]
    return tokens, types, bos, eos


def metadata(cfg, qtype, name):
    """(key, gguf type, value) in file order; arrays as (T_ARRAY, (element type, values))."""
    tokens, types, bos, eos = vocabulary(cfg)
    a = "llama"
    d = cfg["head_dim"]
    return [
        ("general.architecture", T_STRING, a),
        ("general.name", T_STRING, name),
        ("general.file_type", T_UINT32, FILE_TYPES[qtype]),
        ("general.quantization_version", T_UINT32, 2),
        (f"{a}.vocab_size", T_UINT32, cfg["vocab_size"]),
        (f"{a}.context_length", T_UINT32, cfg.get("max_position_embeddings", 4096)),
        (f"{a}.embedding_length", T_UINT32, cfg["hidden_size"]),
        (f"{a}.block_count", T_UINT32, cfg["num_layers"]),
        (f"{a}.feed_forward_length", T_UINT32, cfg["intermediate_size"]),
        (f"{a}.attention.head_count", T_UINT32, cfg["num_heads"]),
        (f"{a}.attention.head_count_kv", T_UINT32, cfg["num_kv_heads"]),
        (f"{a}.attention.key_length", T_UINT32, d),
        (f"{a}.attention.value_length", T_UINT32, d),
        (f"{a}.attention.layer_norm_rms_epsilon", T_FLOAT32, cfg["rms_norm_eps"]),
        (f"{a}.rope.freq_base", T_FLOAT32, cfg["rope_theta"]),
        (f"{a}.rope.dimension_count", T_UINT32, d),
        ("tokenizer.ggml.model", T_STRING, "llama"),
        ("tokenizer.ggml.tokens", T_ARRAY, (T_STRING, tokens)),
        ("tokenizer.ggml.scores", T_ARRAY, (T_FLOAT32, [0.0] * len(tokens))),
        ("tokenizer.ggml.token_type", T_ARRAY, (T_INT32, types)),
        ("tokenizer.ggml.bos_token_id", T_UINT32, bos),
        ("tokenizer.ggml.eos_token_id", T_UINT32, eos),
        ("tokenizer.ggml.unknown_token_id", T_UINT32, 0),
        ("tokenizer.ggml.add_bos_token", T_BOOL, False),
        ("tokenizer.ggml.add_eos_token", T_BOOL, False),
    ]


SCALAR = {T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I",
          T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q",
          T_FLOAT64: "<d"}
ARRAY_DTYPE = {T_UINT8: "<u1", T_INT8: "<i1", T_UINT16: "<u2", T_INT16: "<i2", T_UINT32: "<u4",
               T_INT32: "<i4", T_FLOAT32: "<f4", T_BOOL: "<u1", T_UINT64: "<u8",
               T_INT64: "<i8", T_FLOAT64: "<f8"}


def pack_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def pack_value(kind, value):
    if kind == T_STRING:
        return pack_string(value)
    if kind == T_ARRAY:
        elem, values = value
        head = struct.pack("<IQ", elem, len(values))
        if elem == T_STRING:
            return head + b"".join(pack_string(v) for v in values)
        return head + np.asarray(values, ARRAY_DTYPE[elem]).tobytes()
    return struct.pack(SCALAR[kind], value)


def encode(array, is_weight, qtype):
    """-> (ggml type, bytes) for one tensor (numpy [.., ne1, ne0])."""
    if qtype == "q8_0" and is_weight:
        if array.shape[-1] % QK8_0 == 0:
            return GGML_Q8_0, quantize_q8_0(array).tobytes()
        return GGML_F16, array.astype(np.float16).tobytes()
    return GGML_F32, np.ascontiguousarray(array, np.float32).tobytes()


def pad(n):
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


def convert(weights, cfg, path, qtype="f32", name="dsinfer-decoder", permute=True, log=None):
    """Writes `weights` (the make_models initializers by name, numpy) as GGUF at `path`.
    Returns [(name, ggml type, shape)] as written."""
    if qtype not in FILE_TYPES:
        raise ValueError(f"type {qtype}: f32 or q8_0")
    tensors = gguf_tensors(weights, cfg, permute)
    check_shapes(tensors, cfg)
    encoded = []
    for tname, array, is_weight in tensors:
        kind, data = encode(array, is_weight, qtype)
        encoded.append((tname, kind, array.shape, data))
        if log:
            log(f"{tname:28s} {list(array.shape[::-1])!s:16s} "
                f"{ {GGML_F32: 'F32', GGML_F16: 'F16', GGML_Q8_0: 'Q8_0'}[kind]}")

    kvs = metadata(cfg, qtype, name)
    header = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(encoded), len(kvs))]
    for key, kind, value in kvs:
        header += [pack_string(key), struct.pack("<I", kind), pack_value(kind, value)]
    offset = 0
    for tname, kind, shape, data in encoded:
        ne = shape[::-1]  # innermost first
        header += [pack_string(tname), struct.pack("<I", len(ne)),
                   struct.pack(f"<{len(ne)}Q", *ne), struct.pack("<IQ", kind, offset)]
        offset += len(data) + pad(len(data))
    head = b"".join(header)
    with open(path, "wb") as f:
        f.write(head)
        f.write(b"\0" * pad(len(head)))
        for _, _, _, data in encoded:
            f.write(data)
            f.write(b"\0" * pad(len(data)))
    return [(tname, kind, shape) for tname, kind, shape, _ in encoded]


def load_onnx(path):
    import onnx
    from onnx import numpy_helper
    model = onnx.load(path)
    meta = {p.key: p.value for p in model.metadata_props}
    if "dsinfer.decoder" not in meta:
        raise SystemExit(f"{path}: no dsinfer.decoder metadata (not a make_models decoder)")
    cfg = json.loads(meta["dsinfer.decoder"])
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return weights, cfg, model.graph.name or "dsinfer-decoder"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a tools/make_models.py llama_* .onnx")
    ap.add_argument("--out", required=True, help="the .gguf to write")
    ap.add_argument("--type", default="f32", choices=sorted(FILE_TYPES))
    ap.add_argument("--no-qk-permute", action="store_true",
                    help="leave attn_q / attn_k rows in rotate_half order (wrong; for tests)")
    ap.add_argument("--verbose", action="store_true", help="list the tensors written")
    args = ap.parse_args(argv)
    weights, cfg, name = load_onnx(args.model)
    log = (lambda s: print(s, file=sys.stderr)) if args.verbose else None
    written = convert(weights, cfg, args.out, args.type, name, not args.no_qk_permute, log)
    kinds = {}
    for _, k, _ in written:
        kinds[k] = kinds.get(k, 0) + 1
    names = {GGML_F32: "F32", GGML_F16: "F16", GGML_Q8_0: "Q8_0"}
    print(f"wrote {args.out}: {len(written)} tensors ("
          + ", ".join(f"{v} {names[k]}" for k, v in sorted(kinds.items())) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
