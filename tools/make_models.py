#!/usr/bin/python3
"""Writes dsinfer's benchmark and test models (ONNX, seeded random weights) to a folder.

Usage:
    tools/make_models.py --out DIR [--only NAME ...] [--seed N] [--no-check]

Needs only numpy and onnx (Debian: python3-numpy, python3-onnx); run it with /usr/bin/python3.
The big models are a few hundred MB: write them outside the repository (e.g. ~/dsinfer-models).

Models (symbolic dims are named "batch" and "sequence"; the decoders' as Hugging Face names them):
  bert_base        BERT-base encoder: 12 layers, hidden 768, 12 heads, FFN 3072, vocab 30522,
                   512 positions. Inputs input_ids, attention_mask: int64 [batch, sequence];
                   output last_hidden_state: float32 [batch, sequence, 768]. Opset 13, graph
                   shaped like a PyTorch export: Gather embeddings (word + position +
                   token type), LayerNorm decomposed into ReduceMean/Sub/Pow/ReduceMean/Add/
                   Sqrt/Div/Mul/Add, attention as MatMul+Add projections, Reshape/Transpose
                   head split, scaled QK^T, additive mask (1 - mask) * -10000, Softmax,
                   GELU in the exact erf form.
  bert_base_ln17   The same weights and graph, opset 17, one LayerNormalization per LayerNorm.
  resnet50         ResNet-50 v1.5 (stride in the 3x3 conv). Input "input" float32
                   [batch, 3, 224, 224], output "output" float32 [batch, 1000]. Opset 13; Conv
                   without bias followed by a separate BatchNormalization (inference stats).
  mlp              x float32 [batch, 1024] -> Gemm 4096 -> Relu -> Gemm 4096 -> Relu ->
                   Gemm 1024 -> y. Opset 13; Gemm with transB=1 (nn.Linear weight layout).
  bert_tiny        bert_base's graph at 2 layers, hidden 64, 4 heads, FFN 128, vocab 1000.
  bert_tiny_ln17   bert_tiny with LayerNormalization nodes, opset 17.
  resnet_tiny      Same block structure as resnet50 with three small stages, input
                   [batch, 3, 32, 32], 10 classes.
  unet             U-Net-like segmentation CNN at 1024 x 1024: seven levels of two 3x3
                   Conv(+bias)+Relu (16, 32, ..., 1024 channels), MaxPool 2x2 down, Resize
                   (nearest, x2) up with Concat skips, a 1x1 Conv to 2 classes. Input "input"
                   float32 [batch, 3, 1024, 1024], output "logits" float32 [batch, 2, 1024,
                   1024]. Opset 13. About 31 M parameters.
  unet_fp16        The same graph and weights stored entirely in float16 (weights,
                   activations, input and output), as a float16 export writes it.
  unet_convint     The same weights dynamically quantized in the form ONNX Runtime's
                   quantize_dynamic writes for Conv with uint8 weights:
                   DynamicQuantizeLinear(x) -> ConvInteger(x_q, W_q uint8, x_zero_point,
                   W_zero_point) -> Cast(float) -> Mul(x_scale * W_scale) -> Add(bias
                   reshaped to [1, C, 1, 1]); weights asymmetric per tensor ([min, max] -> 0..255).
  llama_100m       LLaMA-style decoder with a KV cache: 12 layers, hidden 768, 12 heads, 4 KV
                   heads, head dim 64, SwiGLU FFN 2048, vocab 32000, untied lm_head, RoPE theta
                   10000, RMSNorm eps 1e-5 (about 125 M parameters, 476 MiB). Opset 18, graph
                   as torch.onnx exports Hugging Face's LlamaForCausalLM (RMSNorm, rotary
                   embedding, repeat_kv and the attention decomposed; mask and cos/sin built once
                   from the inputs). Inputs input_ids, position_ids: int64 [batch,
                   sequence_length]; attention_mask: int64 [batch, total_sequence_length];
                   past_key_values.L.key/.value: float32 [batch, 4, past_sequence_length, 64].
                   Outputs logits: float32 [batch, sequence_length, 32000];
                   present.L.key/.value: [batch, 4, total_sequence_length, 64]. The config is in
                   the metadata, key "dsinfer.decoder" (JSON). scripts/generate/ runs it.
  llama_tiny       llama_100m's graph at 2 layers, hidden 64, 4 heads, 2 KV heads, head dim 16,
                   FFN 172, vocab 256.

Weights are scaled to keep activations O(1): normal * 0.02 for BERT and the decoders (LayerNorm
gain near 1, RMSNorm gain 1 + 0.1 * normal), He initialisation for ResNet and the MLP,
BatchNormalization with positive variances.
Also writes DIR/models.json: per model the file size and SHA-256, inputs and outputs, parameter
count (learned weights; scalar constants, index buffers and BatchNorm running statistics
excluded), FLOPs per sample (2 x the multiply-adds of MatMul, Gemm and Conv; for BERT and the
decoders per sequence length, a decoder's for a prefill with an empty cache, with
flops_per_sample itself at sequence 128) and the model's metadata, if any.

Output is deterministic: the same --seed gives byte-identical files. Each model draws from its
own random stream, so --only NAME writes the same file as a full run.
"""

import argparse
import hashlib
import json
import math
import os
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEFAULT_SEED = 1234
BERT_SEQUENCES = (32, 64, 128, 256, 384, 512)


class Builder:
    """Collects nodes and initializers for one graph and tallies parameters and multiply-adds."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.initializers = []
        self.params = 0
        self.macs = 0  # per sample (BERT: set by the caller per sequence length)
        self._used = set()

    def _unique(self, name):
        candidate, n = name, 1
        while candidate in self._used:
            candidate = f"{name}_{n}"
            n += 1
        self._used.add(candidate)
        return candidate

    def weight(self, name, array):
        """A learned float32 tensor (counted as parameters)."""
        # np.asarray keeps 0-d arrays 0-d (np.ascontiguousarray would make them 1-d).
        array = np.asarray(array, dtype=np.float32, order="C")
        name = self._unique(name)
        self.initializers.append(numpy_helper.from_array(array, name))
        self.params += array.size
        return name

    def const(self, name, array):
        """A constant that is not a parameter: scalars, shapes, index buffers."""
        array = np.asarray(array, order="C")
        name = self._unique(name)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def normal(self, shape, std):
        return self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    def uniform(self, shape, low, high):
        return self.rng.uniform(low, high, size=shape).astype(np.float32)

    def op(self, op_type, inputs, name, outputs=None, **attrs):
        """Adds a node named `name`; returns its output name (or list of names)."""
        name = self._unique(name)
        if outputs is None:
            outputs = [self._unique(name + "_output_0")]
        else:
            outputs = [self._unique(o) for o in outputs]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    def model(self, graph_name, inputs, outputs, opset, doc):
        graph = helper.make_graph(self.nodes, graph_name, inputs, outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="dsinfer tools/make_models.py",
                                  producer_version="1", doc_string=doc)
        model.ir_version = 8
        return model


# ---------------------------------------------------------------------------------------------
# BERT

BERT_CONFIGS = {
    "bert_base": dict(layers=12, hidden=768, heads=12, ffn=3072, vocab=30522, positions=512),
    "bert_tiny": dict(layers=2, hidden=64, heads=4, ffn=128, vocab=1000, positions=512),
}


def bert_macs(cfg, seq):
    """Multiply-adds per sample of every MatMul in the BERT graph at sequence length `seq`."""
    h, f, layers = cfg["hidden"], cfg["ffn"], cfg["layers"]
    projections = seq * (4 * h * h + 2 * h * f)  # Q, K, V, output; two FFN matrices
    attention = 2 * seq * seq * h  # QK^T and probabilities x V over all heads
    return layers * (projections + attention)


def layer_norm(b, x, prefix, hidden, fused, eps):
    gamma = b.weight(f"{prefix}.weight", 1.0 + b.normal((hidden,), 0.02))
    beta = b.weight(f"{prefix}.bias", b.normal((hidden,), 0.02))
    if fused:
        return b.op("LayerNormalization", [x, gamma, beta], f"/{prefix}/LayerNormalization",
                    axis=-1, epsilon=eps)
    p = "/" + prefix.replace(".", "/")
    mean = b.op("ReduceMean", [x], f"{p}/ReduceMean", axes=[-1], keepdims=1)
    centered = b.op("Sub", [x, mean], f"{p}/Sub")
    sq = b.op("Pow", [centered, b.const(f"{prefix}.two", np.array(2.0, np.float32))],
              f"{p}/Pow")
    var = b.op("ReduceMean", [sq], f"{p}/ReduceMean_1", axes=[-1], keepdims=1)
    var_eps = b.op("Add", [var, b.const(f"{prefix}.eps", np.array(eps, np.float32))],
                   f"{p}/Add")
    std = b.op("Sqrt", [var_eps], f"{p}/Sqrt")
    normed = b.op("Div", [centered, std], f"{p}/Div")
    scaled = b.op("Mul", [normed, gamma], f"{p}/Mul")
    return b.op("Add", [scaled, beta], f"{p}/Add_1")


def linear(b, x, prefix, k, n, std):
    """x @ W + bias, as PyTorch exports nn.Linear on a 3-D input (MatMul then Add)."""
    w = b.weight(f"{prefix}.weight_t", b.normal((k, n), std))
    bias = b.weight(f"{prefix}.bias", b.normal((n,), std))
    p = "/" + prefix.replace(".", "/")
    y = b.op("MatMul", [x, w], f"{p}/MatMul")
    return b.op("Add", [bias, y], f"{p}/Add")


def build_bert(name, cfg, fused_ln, opset, rng):
    b = Builder(rng)
    h, heads, ffn = cfg["hidden"], cfg["heads"], cfg["ffn"]
    head_dim = h // heads
    std = 0.02
    eps = 1e-12
    f32 = lambda v: np.array(v, np.float32)  # noqa: E731
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731

    # Embeddings: word + token type (all zeros, sliced from a buffer) + position.
    word_emb = b.weight("embeddings.word_embeddings.weight", b.normal((cfg["vocab"], h), std))
    pos_emb = b.weight("embeddings.position_embeddings.weight",
                       b.normal((cfg["positions"], h), std))
    type_emb = b.weight("embeddings.token_type_embeddings.weight", b.normal((2, h), std))
    pos_ids = b.const("embeddings.position_ids", i64([list(range(cfg["positions"]))]))
    type_ids = b.const("embeddings.token_type_ids",
                       np.zeros((1, cfg["positions"]), np.int64))

    shape = b.op("Shape", ["input_ids"], "/embeddings/Shape")
    seq = b.op("Gather", [shape, b.const("const.one_i64", i64(1))], "/embeddings/Gather",
               axis=0)
    seq_1d = b.op("Unsqueeze", [seq, b.const("const.axes_0", i64([0]))],
                  "/embeddings/Unsqueeze")
    zero_1d = b.const("const.zero_1d", i64([0]))
    axis1_1d = b.const("const.axes_1", i64([1]))
    pos_slice = b.op("Slice", [pos_ids, zero_1d, seq_1d, axis1_1d], "/embeddings/Slice")
    type_slice = b.op("Slice", [type_ids, zero_1d, seq_1d, axis1_1d], "/embeddings/Slice_1")

    words = b.op("Gather", [word_emb, "input_ids"], "/embeddings/word_embeddings/Gather")
    types = b.op("Gather", [type_emb, type_slice], "/embeddings/token_type_embeddings/Gather")
    x = b.op("Add", [words, types], "/embeddings/Add")
    positions = b.op("Gather", [pos_emb, pos_slice], "/embeddings/position_embeddings/Gather")
    x = b.op("Add", [x, positions], "/embeddings/Add_1")
    x = layer_norm(b, x, "embeddings.LayerNorm", h, fused_ln, eps)

    # Additive mask [batch, 1, 1, sequence]: 0 where attended, -10000 where masked.
    m = b.op("Unsqueeze", ["attention_mask", axis1_1d], "/Unsqueeze")
    m = b.op("Unsqueeze", [m, b.const("const.axes_2", i64([2]))], "/Unsqueeze_1")
    m = b.op("Cast", [m], "/Cast", to=TensorProto.FLOAT)
    m = b.op("Sub", [b.const("const.one_f32", f32(1.0)), m], "/Sub")
    mask = b.op("Mul", [m, b.const("const.mask_value", f32(-10000.0))], "/Mul")

    split_shape = b.const("const.split_heads_shape", i64([0, 0, heads, head_dim]))
    merge_shape = b.const("const.merge_heads_shape", i64([0, 0, h]))
    scale = b.const("const.attention_scale", f32(math.sqrt(head_dim)))
    sqrt2 = b.const("const.sqrt2", f32(math.sqrt(2.0)))
    one = b.const("const.gelu_one", f32(1.0))
    half = b.const("const.gelu_half", f32(0.5))

    for i in range(cfg["layers"]):
        pre = f"encoder.layer.{i}"
        p = "/" + pre.replace(".", "/")
        heads_in = []
        for proj in ("query", "key", "value"):
            t = linear(b, x, f"{pre}.attention.self.{proj}", h, h, std)
            heads_in.append(b.op("Reshape", [t, split_shape],
                                 f"{p}/attention/self/{proj}/Reshape"))
        q = b.op("Transpose", [heads_in[0]], f"{p}/attention/self/Transpose", perm=[0, 2, 1, 3])
        k = b.op("Transpose", [heads_in[1]], f"{p}/attention/self/Transpose_1",
                 perm=[0, 2, 3, 1])
        v = b.op("Transpose", [heads_in[2]], f"{p}/attention/self/Transpose_2",
                 perm=[0, 2, 1, 3])
        scores = b.op("MatMul", [q, k], f"{p}/attention/self/MatMul")
        scores = b.op("Div", [scores, scale], f"{p}/attention/self/Div")
        scores = b.op("Add", [scores, mask], f"{p}/attention/self/Add")
        probs = b.op("Softmax", [scores], f"{p}/attention/self/Softmax", axis=-1)
        ctx = b.op("MatMul", [probs, v], f"{p}/attention/self/MatMul_1")
        ctx = b.op("Transpose", [ctx], f"{p}/attention/self/Transpose_3", perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", [ctx, merge_shape], f"{p}/attention/self/Reshape_3")
        attn = linear(b, ctx, f"{pre}.attention.output.dense", h, h, std)
        attn = b.op("Add", [attn, x], f"{p}/attention/output/Add")
        x = layer_norm(b, attn, f"{pre}.attention.output.LayerNorm", h, fused_ln, eps)

        inter = linear(b, x, f"{pre}.intermediate.dense", h, ffn, std)
        g = b.op("Div", [inter, sqrt2], f"{p}/intermediate/intermediate_act_fn/Div")
        g = b.op("Erf", [g], f"{p}/intermediate/intermediate_act_fn/Erf")
        g = b.op("Add", [g, one], f"{p}/intermediate/intermediate_act_fn/Add")
        g = b.op("Mul", [inter, g], f"{p}/intermediate/intermediate_act_fn/Mul")
        g = b.op("Mul", [g, half], f"{p}/intermediate/intermediate_act_fn/Mul_1")
        out = linear(b, g, f"{pre}.output.dense", ffn, h, std)
        out = b.op("Add", [out, x], f"{p}/output/Add")
        x = layer_norm(b, out, f"{pre}.output.LayerNorm", h, fused_ln, eps)

    # The last node writes the graph output directly.
    b.nodes[-1].output[0] = "last_hidden_state"

    ids_info = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
                for n in ("input_ids", "attention_mask")]
    out_info = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                              ["batch", "sequence", h])]
    ln_desc = ("one LayerNormalization node per LayerNorm" if fused_ln else
               "LayerNorm decomposed as PyTorch exports it")
    doc = (f"{name}: BERT encoder with seeded random weights ({cfg['layers']} layers, hidden {h}, "
           f"{heads} heads, FFN {ffn}, vocab {cfg['vocab']}, {cfg['positions']} positions), "
           f"{ln_desc}. Token type ids are all zero. Written by dsinfer tools/make_models.py.")
    model = b.model(name, ids_info, out_info, opset, doc)
    flops = {str(s): 2 * bert_macs(cfg, s) for s in BERT_SEQUENCES}
    return model, b.params, flops


# ---------------------------------------------------------------------------------------------
# ResNet

RESNET_CONFIGS = {
    "resnet50": dict(image=224, stem=64, stem_kernel=7, stem_stride=2, blocks=[3, 4, 6, 3],
                     widths=[64, 128, 256, 512], classes=1000),
    "resnet_tiny": dict(image=32, stem=16, stem_kernel=3, stem_stride=1, blocks=[1, 1, 1],
                        widths=[16, 32, 64], classes=10),
}


def conv_out(size, kernel, stride, pad):
    return (size + 2 * pad - kernel) // stride + 1


class ConvNet:
    """Tracks channels and spatial size while adding Conv/BN/Relu nodes."""

    def __init__(self, b):
        self.b = b

    def conv_bn(self, x, prefix, cin, cout, kernel, stride, size, relu, gain=1.0):
        b = self.b
        pad = kernel // 2
        fan_in = cin * kernel * kernel
        w = b.weight(f"{prefix}.conv.weight",
                     b.normal((cout, cin, kernel, kernel), math.sqrt(2.0 / fan_in)))
        p = "/" + prefix.replace(".", "/")
        y = b.op("Conv", [x, w], f"{p}/conv/Conv", kernel_shape=[kernel, kernel],
                 strides=[stride, stride], pads=[pad] * 4, dilations=[1, 1], group=1)
        out = conv_out(size, kernel, stride, pad)
        b.macs += cout * out * out * fan_in
        # Inference statistics of a trained-looking BatchNorm: positive variances, small means.
        # `gain` < 1 on a block's last BN keeps the residual stream from growing with depth.
        scale = b.weight(f"{prefix}.bn.weight", gain * b.uniform((cout,), 0.5, 1.0))
        bias = b.weight(f"{prefix}.bn.bias", b.normal((cout,), 0.05))
        # Running statistics are buffers, not parameters (as PyTorch counts them).
        mean = b.const(f"{prefix}.bn.running_mean", b.normal((cout,), 0.05))
        var = b.const(f"{prefix}.bn.running_var", b.uniform((cout,), 0.5, 1.5))
        y = b.op("BatchNormalization", [y, scale, bias, mean, var], f"{p}/bn/BatchNormalization",
                 epsilon=1e-5, momentum=0.9)
        if relu:
            y = b.op("Relu", [y], f"{p}/Relu")
        return y, out

    def bottleneck(self, x, prefix, cin, width, stride, size):
        """ResNet v1.5 bottleneck: 1x1 -> 3x3 (stride) -> 1x1 (x4), projection shortcut when
        the shape changes."""
        cout = width * 4
        y, s = self.conv_bn(x, f"{prefix}.conv1", cin, width, 1, 1, size, relu=True)
        y, s = self.conv_bn(y, f"{prefix}.conv2", width, width, 3, stride, s, relu=True)
        y, s = self.conv_bn(y, f"{prefix}.conv3", width, cout, 1, 1, s, relu=False, gain=0.3)
        shortcut = x
        if stride != 1 or cin != cout:
            shortcut, _ = self.conv_bn(x, f"{prefix}.downsample", cin, cout, 1, stride, size,
                                       relu=False)
        p = "/" + prefix.replace(".", "/")
        y = self.b.op("Add", [y, shortcut], f"{p}/Add")
        return self.b.op("Relu", [y], f"{p}/Relu"), cout, s


def build_resnet(name, cfg, rng):
    b = Builder(rng)
    net = ConvNet(b)
    size = cfg["image"]
    x, size = net.conv_bn("input", "stem", 3, cfg["stem"], cfg["stem_kernel"],
                          cfg["stem_stride"], size, relu=True)
    x = b.op("MaxPool", [x], "/stem/MaxPool", kernel_shape=[3, 3], strides=[2, 2],
             pads=[1, 1, 1, 1])
    size = conv_out(size, 3, 2, 1)
    channels = cfg["stem"]
    for stage, (blocks, width) in enumerate(zip(cfg["blocks"], cfg["widths"])):
        for i in range(blocks):
            stride = 2 if (i == 0 and stage > 0) else 1
            x, channels, size = net.bottleneck(x, f"layer{stage + 1}.{i}", channels, width,
                                               stride, size)
    x = b.op("GlobalAveragePool", [x], "/GlobalAveragePool")
    x = b.op("Flatten", [x], "/Flatten", axis=1)
    w = b.weight("fc.weight", b.normal((cfg["classes"], channels), math.sqrt(1.0 / channels)))
    bias = b.weight("fc.bias", b.normal((cfg["classes"],), 0.01))
    b.op("Gemm", [x, w, bias], "/fc/Gemm", outputs=["output"], alpha=1.0, beta=1.0, transB=1)
    b.macs += channels * cfg["classes"]

    image = cfg["image"]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                            ["batch", 3, image, image])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                             ["batch", cfg["classes"]])]
    doc = (f"{name}: ResNet v1.5 with bottleneck blocks {cfg['blocks']} and seeded random "
           f"weights (He initialisation, BatchNormalization inference statistics). Input "
           f"[batch, 3, {image}, {image}]. Written by dsinfer tools/make_models.py.")
    return b.model(name, inputs, outputs, 13, doc), b.params, 2 * b.macs


# ---------------------------------------------------------------------------------------------
# MLP

def build_mlp(name, rng):
    b = Builder(rng)
    dims = [1024, 4096, 4096, 1024]
    x = "x"
    for i in range(3):
        k, n = dims[i], dims[i + 1]
        last = i == 2
        w = b.weight(f"fc{i + 1}.weight", b.normal((n, k), math.sqrt((1.0 if last else 2.0) / k)))
        bias = b.weight(f"fc{i + 1}.bias", b.normal((n,), 0.01))
        x = b.op("Gemm", [x, w, bias], f"/fc{i + 1}/Gemm", outputs=["y"] if last else None,
                 alpha=1.0, beta=1.0, transB=1)
        b.macs += k * n
        if not last:
            x = b.op("Relu", [x], f"/relu{i + 1}/Relu")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1024])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1024])]
    doc = ("mlp: 1024-4096-4096-1024 perceptron (Gemm transB=1, Relu) with seeded random "
           "weights. Written by dsinfer tools/make_models.py.")
    return b.model(name, inputs, outputs, 13, doc), b.params, 2 * b.macs


# ---------------------------------------------------------------------------------------------
# U-Net (float32, float16 and dynamically quantized ConvInteger forms of one set of weights)

UNET_IMAGE = 1024
UNET_WIDTHS = [16, 32, 64, 128, 256, 512, 1024]
UNET_CLASSES = 2


def quantize_weight_u8(w):
    """Asymmetric per-tensor uint8 quantization of a weight (quantize_dynamic, QUInt8): the
    range widened to include 0, scale (max - min) / 255, zero point round(-min / scale)."""
    lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
    scale = np.float32((hi - lo) / 255.0 if hi > lo else 1.0)
    zp = np.uint8(np.clip(np.rint(-lo / scale), 0, 255))
    q = np.clip(np.rint(w / scale) + float(zp), 0, 255).astype(np.uint8)
    return q, scale, zp


class UNetBuilder:
    """Adds the U-Net's convolutions in one of three forms: "fp32", "fp16", "convint"."""

    def __init__(self, b, form):
        self.b, self.form = b, form
        self.dtype = np.float16 if form == "fp16" else np.float32

    def conv(self, x, prefix, cin, cout, kernel, size, relu):
        b = self.b
        pad = kernel // 2
        fan_in = cin * kernel * kernel
        w = b.normal((cout, cin, kernel, kernel), math.sqrt(2.0 / fan_in))
        bias = b.normal((cout,), 0.01)
        b.params += w.size + bias.size
        b.macs += cout * size * size * fan_in
        p = "/" + prefix.replace(".", "/")
        attrs = dict(kernel_shape=[kernel, kernel], strides=[1, 1], pads=[pad] * 4,
                     dilations=[1, 1], group=1)
        if self.form == "convint":
            q, scale, zp = quantize_weight_u8(w)
            wq = b.const(f"{prefix}.weight_quantized", q)
            ws = b.const(f"{prefix}.weight_scale", scale)
            wz = b.const(f"{prefix}.weight_zero_point", zp)
            xq, xs, xz = b.op("DynamicQuantizeLinear", [x], f"{p}/DynamicQuantizeLinear",
                              outputs=[f"{prefix}.x_quantized", f"{prefix}.x_scale",
                                       f"{prefix}.x_zero_point"])
            y = b.op("ConvInteger", [xq, wq, xz, wz], f"{p}/ConvInteger", **attrs)
            y = b.op("Cast", [y], f"{p}/Cast", to=TensorProto.FLOAT)
            s = b.op("Mul", [xs, ws], f"{p}/scales_mul")
            y = b.op("Mul", [y, s], f"{p}/output_scale_mul")
            bc = b.const(f"{prefix}.bias", bias)
            shape = b.const(f"{prefix}.bias_shape", np.array([1, -1, 1, 1], dtype=np.int64))
            br = b.op("Reshape", [bc, shape], f"{p}/bias_reshape")
            y = b.op("Add", [y, br], f"{p}/bias_add")
        else:
            wn = b.const(f"{prefix}.weight", w.astype(self.dtype))
            bn = b.const(f"{prefix}.bias", bias.astype(self.dtype))
            y = b.op("Conv", [x, wn, bn], f"{p}/Conv", **attrs)
        if relu:
            y = b.op("Relu", [y], f"{p}/Relu")
        return y

    def double_conv(self, x, prefix, cin, cout, size):
        y = self.conv(x, prefix + ".conv1", cin, cout, 3, size, True)
        return self.conv(y, prefix + ".conv2", cout, cout, 3, size, True)


def build_unet(name, form, rng):
    b = Builder(rng)
    u = UNetBuilder(b, form)
    size, x, cin = UNET_IMAGE, "input", 3
    skips = []
    for level, width in enumerate(UNET_WIDTHS):
        if level > 0:
            x = b.op("MaxPool", [x], f"/down{level}/MaxPool", kernel_shape=[2, 2],
                     strides=[2, 2])
            size //= 2
        x = u.double_conv(x, f"down{level}", cin, width, size)
        skips.append((x, width, size))
        cin = width
    scales = b.const("up.scales", np.array([1, 1, 2, 2], dtype=np.float32))
    for level in range(len(UNET_WIDTHS) - 2, -1, -1):
        skip, width, size = skips[level]
        x = b.op("Resize", [x, "", scales], f"/up{level}/Resize", mode="nearest")
        x = b.op("Concat", [x, skip], f"/up{level}/Concat", axis=1)
        x = u.double_conv(x, f"up{level}", cin + width, width, size)
        cin = width
    u.conv(x, "head", cin, UNET_CLASSES, 1, size, False)
    # The head's output is the graph output "logits".
    b.nodes[-1].output[0] = "logits"
    elem = TensorProto.FLOAT16 if form == "fp16" else TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("input", elem,
                                            ["batch", 3, UNET_IMAGE, UNET_IMAGE])]
    outputs = [helper.make_tensor_value_info("logits", elem,
                                             ["batch", UNET_CLASSES, UNET_IMAGE, UNET_IMAGE])]
    doc = (f"{name}: U-Net-like segmentation CNN, widths {UNET_WIDTHS}, input "
           f"[batch, 3, {UNET_IMAGE}, {UNET_IMAGE}], form {form}, seeded random weights (He "
           f"initialisation). Written by dsinfer tools/make_models.py.")
    return b.model(name, inputs, outputs, 13, doc), b.params, 2 * b.macs


# ---------------------------------------------------------------------------------------------
# LLaMA-style decoder (generative: KV cache in and out)

LLAMA_CONFIGS = {
    "llama_tiny": dict(vocab=256, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16,
                       ffn=172, rope_theta=10000.0, eps=1e-5, positions=32768),
    "llama_100m": dict(vocab=32000, hidden=768, layers=12, heads=12, kv_heads=4, head_dim=64,
                       ffn=2048, rope_theta=10000.0, eps=1e-5, positions=4096),
}


def llama_weights(b, cfg):
    """Draws every weight of the decoder, in one fixed order (an export form that draws them
    through this function gets the same values). Linear weights are stored [in, out]."""
    h, d, std = cfg["hidden"], cfg["head_dim"], 0.02
    norm = lambda: 1.0 + 0.1 * b.rng.standard_normal((h,), dtype=np.float32)  # noqa: E731
    w = {"model.embed_tokens.weight": b.normal((cfg["vocab"], h), std)}
    for i in range(cfg["layers"]):
        pre = f"model.layers.{i}"
        w[f"{pre}.input_layernorm.weight"] = norm()
        w[f"{pre}.self_attn.q_proj.weight_t"] = b.normal((h, cfg["heads"] * d), std)
        w[f"{pre}.self_attn.k_proj.weight_t"] = b.normal((h, cfg["kv_heads"] * d), std)
        w[f"{pre}.self_attn.v_proj.weight_t"] = b.normal((h, cfg["kv_heads"] * d), std)
        w[f"{pre}.self_attn.o_proj.weight_t"] = b.normal((cfg["heads"] * d, h), std)
        w[f"{pre}.post_attention_layernorm.weight"] = norm()
        w[f"{pre}.mlp.gate_proj.weight_t"] = b.normal((h, cfg["ffn"]), std)
        w[f"{pre}.mlp.up_proj.weight_t"] = b.normal((h, cfg["ffn"]), std)
        w[f"{pre}.mlp.down_proj.weight_t"] = b.normal((cfg["ffn"], h), std)
    w["model.norm.weight"] = norm()
    w["lm_head.weight_t"] = b.normal((h, cfg["vocab"]), std)
    return {name: b.weight(name, array) for name, array in w.items()}


def llama_flops(cfg, seq):
    """2 x multiply-adds of every MatMul for a prefill of `seq` tokens with an empty cache
    (scores computed for the whole [seq, seq] block, as the graph does)."""
    h, d, f = cfg["hidden"], cfg["head_dim"], cfg["ffn"]
    proj = h * d * (2 * cfg["heads"] + 2 * cfg["kv_heads"]) + 3 * h * f
    attention = 2 * seq * seq * cfg["heads"] * d
    return 2 * (cfg["layers"] * (seq * proj + attention) + seq * h * cfg["vocab"])


def rms_norm(b, x, weight, c, p):
    """HF LlamaRMSNorm as torch exports it: w * (x * 1/sqrt(mean(x^2) + eps))."""
    sq = b.op("Pow", [x, c["two"]], f"{p}/Pow")
    var = b.op("ReduceMean", [sq, c["last"]], f"{p}/ReduceMean", keepdims=1)
    var = b.op("Add", [var, c["eps"]], f"{p}/Add")
    std = b.op("Sqrt", [var], f"{p}/Sqrt")
    inv = b.op("Reciprocal", [std], f"{p}/Reciprocal")
    y = b.op("Mul", [x, inv], f"{p}/Mul")
    return b.op("Mul", [weight, y], f"{p}/Mul_1")


def rotate(b, x, cos, sin, c, p):
    """x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x2, x1) on the last axis."""
    x1 = b.op("Slice", [x, c["zero"], c["half"], c["last"]], f"{p}/Slice")
    x2 = b.op("Slice", [x, c["half"], c["dim"], c["last"]], f"{p}/Slice_1")
    neg = b.op("Neg", [x2], f"{p}/Neg")
    rot = b.op("Concat", [neg, x1], f"{p}/Concat", axis=-1)
    a = b.op("Mul", [x, cos], f"{p}/Mul")
    r = b.op("Mul", [rot, sin], f"{p}/Mul_1")
    return b.op("Add", [a, r], f"{p}/Add")


def repeat_kv(b, x, c, p):
    """[B, KV, T, D] -> [B, heads, T, D]: Unsqueeze, Expand to [B, KV, n_rep, T, D] (shape
    from Shape/Gather, B and T being dynamic), Reshape."""
    shape = b.op("Shape", [x], f"{p}/Shape")
    dims = []
    for i, idx in ((0, c["i0"]), (2, c["i2"])):
        g = b.op("Gather", [shape, idx], f"{p}/Gather_{i}", axis=0)
        dims.append(b.op("Unsqueeze", [g, c["axes0"]], f"{p}/Unsqueeze_{i}"))
    target = b.op("Concat", [dims[0], c["kv"], c["n_rep"], dims[1], c["dim"]], f"{p}/Concat",
                  axis=0)
    y = b.op("Unsqueeze", [x, c["axes2"]], f"{p}/Unsqueeze")
    y = b.op("Expand", [y, target], f"{p}/Expand")
    return b.op("Reshape", [y, c["merge_kv"]], f"{p}/Reshape", allowzero=0)


def llama_mlp(b, x, y, w, pre, p):
    """x + down(silu(gate(y)) * up(y)), SiLU as Mul(g, Sigmoid(g))."""
    g = b.op("MatMul", [y, w[f"{pre}.mlp.gate_proj.weight_t"]], f"{p}/mlp/gate_proj/MatMul")
    g = b.op("Mul", [g, b.op("Sigmoid", [g], f"{p}/mlp/act_fn/Sigmoid")], f"{p}/mlp/act_fn/Mul")
    u = b.op("MatMul", [y, w[f"{pre}.mlp.up_proj.weight_t"]], f"{p}/mlp/up_proj/MatMul")
    g = b.op("Mul", [g, u], f"{p}/mlp/Mul")
    g = b.op("MatMul", [g, w[f"{pre}.mlp.down_proj.weight_t"]], f"{p}/mlp/down_proj/MatMul")
    return b.op("Add", [x, g], f"{p}/Add_1")


def build_llama(name, cfg, rng, form="hf"):
    """The Hugging Face / torch.onnx export form of a LLaMA decoder with a KV cache, opset 18
    (ReduceMean takes its axes as an input). form "attn23": the same weights and graph, but each
    layer's attention (cache concatenation, KV repeat, scores, mask, softmax) is one ONNX
    Attention node (opset 23) over 4-D [B, heads, S, D] inputs with past_key/past_value inputs,
    present_key/present_value outputs and the additive mask."""
    b = Builder(rng)
    h, heads, kv, d = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    f32 = lambda v: np.array(v, np.float32)  # noqa: E731
    w = llama_weights(b, cfg)
    c = {k: b.const(f"const.{k}", v) for k, v in dict(
        zero=i64([0]), half=i64([d // 2]), dim=i64([d]), last=i64([-1]), axes0=i64([0]),
        axes1=i64([1]), axes2=i64([2]), i0=i64(0), i1=i64(1), i2=i64(2), kv=i64([kv]),
        n_rep=i64([heads // kv]), split_q=i64([0, 0, heads, d]), split_kv=i64([0, 0, kv, d]),
        merge_kv=i64([0, heads, -1, d]), merge=i64([0, 0, heads * d]), two=f32(2.0),
        eps=f32(cfg["eps"])).items()}

    # Additive mask [B, 1, S, T], built once: query i (absolute position T - S + i) sees key j
    # when j <= T - S + i and attention_mask[b, j] == 1; 0 there, float32 lowest elsewhere.
    seq = b.op("Gather", [b.op("Shape", ["input_ids"], "/model/mask/Shape"), c["i1"]],
               "/model/mask/Gather", axis=0)
    total = b.op("Gather", [b.op("Shape", ["attention_mask"], "/model/mask/Shape_1"), c["i1"]],
                 "/model/mask/Gather_1", axis=0)
    past = b.op("Sub", [total, seq], "/model/mask/Sub")
    q_pos = b.op("Range", [past, total, c["i1"]], "/model/mask/Range")
    k_pos = b.op("Range", [c["i0"], total, c["i1"]], "/model/mask/Range_1")
    q_pos = b.op("Unsqueeze", [q_pos, c["axes1"]], "/model/mask/Unsqueeze")
    k_pos = b.op("Unsqueeze", [k_pos, c["axes0"]], "/model/mask/Unsqueeze_1")
    causal = b.op("LessOrEqual", [k_pos, q_pos], "/model/mask/LessOrEqual")
    keep = b.op("Cast", ["attention_mask"], "/model/mask/Cast", to=TensorProto.BOOL)
    keep = b.op("Unsqueeze", [keep, b.const("const.axes_1_2", i64([1, 2]))],
                "/model/mask/Unsqueeze_2")
    allowed = b.op("And", [causal, keep], "/model/mask/And")
    mask = b.op("Where", [allowed, b.const("const.mask_zero", f32(0.0)),
                          b.const("const.mask_lowest", f32(np.finfo(np.float32).min))],
                "/model/mask/Where")

    # Rotary cos/sin [B, 1, S, D], computed once (HF LlamaRotaryEmbedding).
    p = "/model/rotary_emb"
    inv_freq = 1.0 / cfg["rope_theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d)
    inv_freq = b.const("model.rotary_emb.inv_freq", inv_freq.astype(np.float32)[:, None])
    pos = b.op("Cast", ["position_ids"], f"{p}/Cast", to=TensorProto.FLOAT)
    pos = b.op("Unsqueeze", [pos, c["axes1"]], f"{p}/Unsqueeze")
    freqs = b.op("MatMul", [inv_freq, pos], f"{p}/MatMul")
    freqs = b.op("Transpose", [freqs], f"{p}/Transpose", perm=[0, 2, 1])
    emb = b.op("Concat", [freqs, freqs], f"{p}/Concat", axis=-1)
    cos = b.op("Unsqueeze", [b.op("Cos", [emb], f"{p}/Cos"), c["axes1"]], f"{p}/Unsqueeze_1")
    sin = b.op("Unsqueeze", [b.op("Sin", [emb], f"{p}/Sin"), c["axes1"]], f"{p}/Unsqueeze_2")
    scale = b.const("const.attention_scale", f32(1.0 / math.sqrt(d)))

    x = b.op("Gather", [w["model.embed_tokens.weight"], "input_ids"],
             "/model/embed_tokens/Gather")
    for i in range(cfg["layers"]):
        pre = f"model.layers.{i}"
        p = f"/model/layers.{i}"
        a = f"{p}/self_attn"
        y = rms_norm(b, x, w[f"{pre}.input_layernorm.weight"], c, f"{p}/input_layernorm")
        proj = {}
        for n, split in (("q", "split_q"), ("k", "split_kv"), ("v", "split_kv")):
            t = b.op("MatMul", [y, w[f"{pre}.self_attn.{n}_proj.weight_t"]],
                     f"{a}/{n}_proj/MatMul")
            t = b.op("Reshape", [t, c[split]], f"{a}/{n}_proj/Reshape", allowzero=0)
            proj[n] = b.op("Transpose", [t], f"{a}/{n}_proj/Transpose", perm=[0, 2, 1, 3])
        q = rotate(b, proj["q"], cos, sin, c, f"{a}/rotary_q")
        k = rotate(b, proj["k"], cos, sin, c, f"{a}/rotary_k")
        if form == "attn23":
            o = b.op("Attention", [q, k, proj["v"], mask, f"past_key_values.{i}.key",
                                   f"past_key_values.{i}.value"], f"{a}/Attention",
                     outputs=[f"{a}/Attention_output_0", f"present.{i}.key",
                              f"present.{i}.value"],
                     scale=1.0 / math.sqrt(d))[0]
        else:
            k = b.op("Concat", [f"past_key_values.{i}.key", k], f"{a}/Concat_k",
                     outputs=[f"present.{i}.key"], axis=2)
            v = b.op("Concat", [f"past_key_values.{i}.value", proj["v"]], f"{a}/Concat_v",
                     outputs=[f"present.{i}.value"], axis=2)
            if heads != kv:
                k = repeat_kv(b, k, c, f"{a}/repeat_kv_k")
                v = repeat_kv(b, v, c, f"{a}/repeat_kv_v")
            kt = b.op("Transpose", [k], f"{a}/Transpose", perm=[0, 1, 3, 2])
            s = b.op("MatMul", [q, kt], f"{a}/MatMul")
            s = b.op("Mul", [s, scale], f"{a}/Mul")
            s = b.op("Add", [s, mask], f"{a}/Add")
            s = b.op("Softmax", [s], f"{a}/Softmax", axis=-1)
            o = b.op("MatMul", [s, v], f"{a}/MatMul_1")
        o = b.op("Transpose", [o], f"{a}/Transpose_1", perm=[0, 2, 1, 3])
        o = b.op("Reshape", [o, c["merge"]], f"{a}/Reshape", allowzero=0)
        o = b.op("MatMul", [o, w[f"{pre}.self_attn.o_proj.weight_t"]], f"{a}/o_proj/MatMul")
        x = b.op("Add", [x, o], f"{p}/Add")

        y = rms_norm(b, x, w[f"{pre}.post_attention_layernorm.weight"], c,
                     f"{p}/post_attention_layernorm")
        x = llama_mlp(b, x, y, w, pre, p)
    x = rms_norm(b, x, w["model.norm.weight"], c, "/model/norm")
    b.op("MatMul", [x, w["lm_head.weight_t"]], "/lm_head/MatMul", outputs=["logits"])

    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    inputs = [vi("input_ids", TensorProto.INT64, ["batch", "sequence_length"]),
              vi("attention_mask", TensorProto.INT64, ["batch", "total_sequence_length"]),
              vi("position_ids", TensorProto.INT64, ["batch", "sequence_length"])]
    outputs = [vi("logits", f, ["batch", "sequence_length", cfg["vocab"]])]
    for i in range(cfg["layers"]):
        for kind in ("key", "value"):
            inputs.append(vi(f"past_key_values.{i}.{kind}", f,
                             ["batch", kv, "past_sequence_length", d]))
            outputs.append(vi(f"present.{i}.{kind}", f, ["batch", kv, "total_sequence_length", d]))
    doc = (f"{name}: LLaMA-style decoder with a KV cache and seeded random weights "
           f"({cfg['layers']} layers, hidden {h}, {heads} heads, {kv} KV heads, head dim {d}, "
           f"FFN {cfg['ffn']}, vocab {cfg['vocab']}, untied lm_head), graph as torch.onnx "
           f"exports Hugging Face's LlamaForCausalLM. Written by dsinfer tools/make_models.py.")
    model = b.model(name, inputs, outputs, 23 if form == "attn23" else 18, doc)
    decoder = dict(vocab_size=cfg["vocab"], hidden_size=h, num_layers=cfg["layers"],
                   num_heads=heads, num_kv_heads=kv, head_dim=d, intermediate_size=cfg["ffn"],
                   rope_theta=cfg["rope_theta"], rms_norm_eps=cfg["eps"],
                   max_position_embeddings=cfg["positions"], bos_token_id=1, eos_token_id=2)
    helper.set_model_props(model, {"dsinfer.decoder": json.dumps(decoder)})
    return model, b.params, {str(s): llama_flops(cfg, s) for s in BERT_SEQUENCES}


# ---------------------------------------------------------------------------------------------

# name -> (random stream name, builder). Models sharing a stream get identical weights.
MODELS = {
    "bert_base": ("bert_base", lambda rng: build_bert("bert_base", BERT_CONFIGS["bert_base"],
                                                      False, 13, rng)),
    "bert_base_ln17": ("bert_base", lambda rng: build_bert(
        "bert_base_ln17", BERT_CONFIGS["bert_base"], True, 17, rng)),
    "resnet50": ("resnet50", lambda rng: build_resnet("resnet50", RESNET_CONFIGS["resnet50"],
                                                      rng)),
    "mlp": ("mlp", lambda rng: build_mlp("mlp", rng)),
    "bert_tiny": ("bert_tiny", lambda rng: build_bert("bert_tiny", BERT_CONFIGS["bert_tiny"],
                                                      False, 13, rng)),
    "bert_tiny_ln17": ("bert_tiny", lambda rng: build_bert(
        "bert_tiny_ln17", BERT_CONFIGS["bert_tiny"], True, 17, rng)),
    "resnet_tiny": ("resnet_tiny", lambda rng: build_resnet(
        "resnet_tiny", RESNET_CONFIGS["resnet_tiny"], rng)),
    "unet": ("unet", lambda rng: build_unet("unet", "fp32", rng)),
    "unet_fp16": ("unet", lambda rng: build_unet("unet_fp16", "fp16", rng)),
    "unet_convint": ("unet", lambda rng: build_unet("unet_convint", "convint", rng)),
    "llama_tiny": ("llama_tiny", lambda rng: build_llama("llama_tiny", LLAMA_CONFIGS["llama_tiny"],
                                                         rng)),
    "llama_100m": ("llama_100m", lambda rng: build_llama("llama_100m", LLAMA_CONFIGS["llama_100m"],
                                                         rng)),
    "llama_tiny_attn23": ("llama_tiny", lambda rng: build_llama(
        "llama_tiny_attn23", LLAMA_CONFIGS["llama_tiny"], rng, form="attn23")),
}


def value_info_json(vi):
    t = vi.type.tensor_type
    dims = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in t.shape.dim]
    dtype = np.dtype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[t.elem_type]).name
    return {"name": vi.name, "dtype": dtype, "shape": dims}


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def opset17_copy(model):
    """The decoders are opset 18, which an onnx package older than 1.13 (Debian 12's 1.12)
    cannot check. Their only opset-18 op is ReduceMean with a constant axes input; a copy with
    the axes moved back into the attribute, at opset 17, checks everything else."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    consts = {t.name: numpy_helper.to_array(t) for t in copy.graph.initializer
              if t.data_type == TensorProto.INT64}
    for node in copy.graph.node:
        if node.op_type != "ReduceMean" or len(node.input) != 2:
            continue
        if node.input[1] not in consts:
            raise RuntimeError(f"{node.name}: ReduceMean axes are not a constant")
        node.attribute.append(helper.make_attribute("axes", consts[node.input[1]].tolist()))
        del node.input[1]
    copy.opset_import[0].version = 17
    return copy


def write_model(name, out_dir, seed, check):
    stream, build = MODELS[name]
    rng = np.random.default_rng([seed, zlib.crc32(stream.encode())])
    model, params, flops = build(rng)
    data = model.SerializeToString()
    if len(data) >= 2**31:
        raise RuntimeError(f"{name}: serialized model is {len(data)} bytes (protobuf limit 2 GiB)")
    path = os.path.join(out_dir, name + ".onnx")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    del data
    if check and model.opset_import[0].version > 18 and onnx.defs.onnx_opset_version() < 23:
        # onnx older than 1.18 knows no opset-23 Attention: nothing to check it against.
        print(f"{name}: not checked (onnx {onnx.__version__} lacks opset 23)", file=sys.stderr)
        check = False
    if check:
        # check_model(path, full_check=True) would rewrite the file with inferred shapes (onnx
        # 1.12), so run the strict shape inference on the in-memory model instead.
        if model.opset_import[0].version > onnx.defs.onnx_opset_version():
            checked = opset17_copy(model)
            onnx.checker.check_model(checked)
            onnx.shape_inference.infer_shapes(checked, check_type=True, strict_mode=True)
            del checked
        else:
            onnx.checker.check_model(path)
            onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    graph = model.graph
    info = {
        "file": name + ".onnx",
        "bytes": os.path.getsize(path),
        "sha256": sha256_of(path),
        "opset": model.opset_import[0].version,
        "nodes": len(graph.node),
        "parameters": int(params),
        "inputs": [value_info_json(v) for v in graph.input],
        "outputs": [value_info_json(v) for v in graph.output],
    }
    if model.metadata_props:
        info["metadata"] = {p.key: p.value for p in model.metadata_props}
    if isinstance(flops, dict):
        info["flops_per_sample_by_sequence"] = {k: int(v) for k, v in flops.items()}
        info["flops_per_sample"] = int(flops["128"])
        info["flops_note"] = ("2 x multiply-adds of MatMul/Gemm/Conv per sample; "
                              "flops_per_sample is at sequence 128")
    else:
        info["flops_per_sample"] = int(flops)
        info["flops_note"] = "2 x multiply-adds of MatMul/Gemm/Conv per sample"
    return info


def main(argv):
    ap = argparse.ArgumentParser(description="Write dsinfer's ONNX benchmark/test models.")
    ap.add_argument("--out", required=True, help="output folder (created if missing)")
    ap.add_argument("--only", nargs="+", choices=sorted(MODELS), metavar="NAME",
                    help="models to write (default: all): " + ", ".join(MODELS))
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed (%(default)s)")
    ap.add_argument("--no-check", action="store_true",
                    help="skip onnx.checker.check_model and strict shape inference on each file")
    args = ap.parse_args(argv)

    os.makedirs(args.out, exist_ok=True)
    names = [n for n in MODELS if args.only is None or n in args.only]
    manifest_path = os.path.join(args.out, "models.json")
    manifest = {}
    if args.only is not None and os.path.exists(manifest_path):
        # Keep the entries of models this run does not rewrite, when they were made with the
        # same seed.
        with open(manifest_path, encoding="utf-8") as f:
            old = json.load(f)
        if old.get("seed") == args.seed:
            manifest = old.get("models", {})
    for name in names:
        info = write_model(name, args.out, args.seed, not args.no_check)
        manifest[name] = info
        print(f"{name:16s} {info['parameters']:>12,d} params  "
              f"{info['flops_per_sample'] / 1e9:9.4f} GFLOP/sample  "
              f"{info['bytes'] / 2**20:8.1f} MiB  {info['nodes']:5d} nodes", flush=True)
    ordered = {n: manifest[n] for n in MODELS if n in manifest}
    with open(manifest_path, "w", encoding="utf-8", newline="\n") as f:
        json.dump({"generator": "tools/make_models.py", "seed": args.seed, "models": ordered},
                  f, indent=2, sort_keys=False)
        f.write("\n")
    print(f"wrote {manifest_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
