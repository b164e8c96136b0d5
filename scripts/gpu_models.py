#!/usr/bin/env python3
"""Writes the GPU benchmark models (ONNX, seeded random weights, exported from PyTorch) to a folder.

Usage:
    python3 scripts/gpu_models.py --out DIR [--only bert_base|resnet50 ...] [--force]
                                  [--seed N] [--exporter torchscript|dynamo|auto] [--no-verify]

Needs torch, transformers (BERT) and torchvision (ResNet-50); onnx and onnxruntime only for the
check after export (skipped with a note when missing, or with --no-verify). Nothing is
downloaded: the weights are the libraries' own random initialisation under torch.manual_seed.
Runs on the CPU (no GPU needed); the two exports take about a minute together.

Models (both ~100-450 MB; write them outside the repository):
  bert_base.onnx  transformers BertModel(BertConfig()): 12 layers, hidden 768, 12 heads,
                  intermediate 3072, vocab 30522, 512 positions, with the pooler. Eval mode,
                  attn_implementation="eager" (explicit MatMul / Softmax attention). Inputs
                  input_ids, attention_mask: int64 [batch, sequence]; outputs
                  last_hidden_state float32 [batch, sequence, 768] and pooler_output float32
                  [batch, 768]. token_type_ids is not an input (zeros inside the graph).
  resnet50.onnx   torchvision.models.resnet50(weights=None), eval mode. Input "input" float32
                  [batch, 3, 224, 224], output "output" float32 [batch, 1000]. The TorchScript
                  exporter folds each BatchNorm into its Conv.

The symbolic dims are named "batch" and "sequence", like tools/make_models.py; ds-benchmark
resolves them by position (first symbolic dim = --batch, later ones = --seq), so the names only
matter to people reading the graph.

Export: torch.onnx.export(..., dynamo=False, opset_version=17), the TorchScript exporter.
--exporter dynamo uses torch.onnx.export(..., dynamo=True) at opset 18 instead (the dynamo
exporter's minimum), and --exporter auto tries the TorchScript exporter first and falls back to
dynamo if that fails (e.g. a torch where the TorchScript exporter has been removed). The file
is written to NAME.onnx.tmp and renamed when complete, so an interrupted run leaves no
half-written NAME.onnx. An existing NAME.onnx is kept (not regenerated) unless --force.

Check (unless --no-verify): onnx.checker on the file, the op-type counts (bert_base eager should
show 12 Softmax nodes), then onnxruntime (CPU) on a shape different from the export shape
compared against the PyTorch module in fp32 (prints the max abs difference; fails above 1e-3
for BERT, 1e-2 relative for ResNet). Exit status: 0 all requested models present and checked,
1 a model failed (the others are still attempted), 2 bad command line or torch missing.

Deterministic: the same --seed gives the same weights (the PyTorch CPU generator); the exported
bytes can still differ between torch versions.
"""

import argparse
import os
import sys
import time
import traceback

MODELS = ("bert_base", "resnet50")


def log(msg):
    print(msg, flush=True)


def human_size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024.0
    return f"{n} B"


# ---------------------------------------------------------------------------------------------
# BERT


def set_bert_attn_implementation(model, cfg, impl):
    """Best effort: the model's attention implementation -> impl. Returns what it reports."""

    def current():
        c = getattr(model, "config", cfg)
        return getattr(c, "_attn_implementation", None)

    if current() == impl:
        return current()
    # transformers >= 4.5x: PreTrainedModel.set_attn_implementation(impl)
    setter = getattr(model, "set_attn_implementation", None)
    if callable(setter):
        try:
            setter(impl)
        except Exception as e:  # noqa: BLE001 - report and carry on
            log(f"  note: model.set_attn_implementation({impl!r}) failed: {e}")
    if current() != impl:
        try:
            model.config._attn_implementation = impl
        except Exception as e:  # noqa: BLE001
            log(f"  note: setting config._attn_implementation failed: {e}")
    return current()


def build_bert(seed, impl="eager"):
    """BertModel(BertConfig()) with seeded random weights, eval mode, fp32 on the CPU.

    Tries, in order: BertConfig(attn_implementation=impl) / config._attn_implementation = impl
    then BertModel(config); BertModel(config, attn_implementation=impl); and after construction
    model.set_attn_implementation(impl). Returns (model, the implementation the model reports).
    """
    import torch
    from transformers import BertConfig, BertModel

    try:
        cfg = BertConfig(attn_implementation=impl)
    except TypeError:
        cfg = BertConfig()
    try:
        cfg._attn_implementation = impl
    except Exception as e:  # noqa: BLE001
        log(f"  note: config._attn_implementation = {impl!r} failed: {e}")

    model = None
    torch.manual_seed(seed)
    try:
        model = BertModel(cfg)
    except Exception as e:  # noqa: BLE001
        log(f"  note: BertModel(config) failed ({e}); trying BertModel(config, attn_implementation=...)")
    if model is None:
        torch.manual_seed(seed)
        model = BertModel(cfg, attn_implementation=impl)
    got = set_bert_attn_implementation(model, cfg, impl)
    if got != impl:
        log(f"  WARNING: BERT reports attn_implementation={got!r}, wanted {impl!r}")
    model.eval()
    return model, got


class BertWrapper:
    """Built lazily (needs torch): returns (last_hidden_state, pooler_output) as a plain tuple."""

    @staticmethod
    def make(model):
        import torch

        class _Wrap(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                out = self.m(input_ids=input_ids, attention_mask=attention_mask)
                if isinstance(out, (tuple, list)):
                    return out[0], out[1]
                return out.last_hidden_state, out.pooler_output

        return _Wrap(model).eval()


def bert_inputs(batch, seq, seed, pad_last=False):
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(100, 30100, (batch, seq), generator=g, dtype=torch.int64)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if pad_last and batch > 1:
        mask[-1, seq // 2:] = 0  # exercise the mask path in the check
    return ids, mask


# ---------------------------------------------------------------------------------------------
# ResNet-50


def build_resnet50(seed):
    import torch
    import torchvision

    torch.manual_seed(seed)
    model = torchvision.models.resnet50(weights=None)
    model.eval()
    return model


# ---------------------------------------------------------------------------------------------
# export


def onnx_export(module, args, path, input_names, output_names, dynamic_axes, exporter):
    """torch.onnx.export with the TorchScript exporter (or dynamo per `exporter`). Returns the
    exporter actually used."""
    import torch

    def torchscript():
        kw = dict(
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            opset_version=17,
            do_constant_folding=True,
        )
        try:
            torch.onnx.export(module, args, path, dynamo=False, **kw)
        except TypeError as e:
            if "dynamo" not in str(e):
                raise
            # torch older than 2.5 has no dynamo= argument; its export is the TorchScript one.
            torch.onnx.export(module, args, path, **kw)

    def dynamo():
        torch.onnx.export(
            module,
            args,
            path,
            dynamo=True,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            opset_version=18,
            external_data=False,
        )

    if exporter == "dynamo":
        dynamo()
        return "dynamo"
    try:
        torchscript()
        return "torchscript"
    except Exception:
        if exporter != "auto":
            raise
        log("  TorchScript export failed; --exporter auto falls back to dynamo=True:")
        traceback.print_exc()
        dynamo()
        return "dynamo"


def op_counts(path):
    import onnx

    m = onnx.load(path, load_external_data=False)
    counts = {}
    for n in m.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return m, counts


def verify(name, path, module, feeds_torch, rel_tol, abs_tol):
    """onnx.checker + op counts + onnxruntime vs torch. Returns True when it passes (or when the
    check cannot run for lack of onnx/onnxruntime, with a note)."""
    import numpy as np
    import torch

    try:
        import onnx
    except ImportError:
        log("  check skipped: onnx is not importable")
        return True
    onnx.checker.check_model(path)  # by path: fine for files over 2 GB too
    m, counts = op_counts(path)
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    top = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:12])
    log(f"  opset {opset}, {len(m.graph.node)} nodes: {top}")
    for vi in list(m.graph.input) + list(m.graph.output):
        dims = [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
        log(f"    {vi.name}: elem_type {vi.type.tensor_type.elem_type} {dims}")
    if name == "bert_base" and counts.get("Softmax", 0) != 12:
        log(f"  WARNING: expected 12 Softmax nodes (eager attention), found {counts.get('Softmax', 0)}")
    del m

    try:
        import onnxruntime as ort
    except ImportError:
        log("  onnxruntime check skipped: onnxruntime is not importable")
        return True
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    feeds = {n: t.numpy() for n, t in zip(names, feeds_torch)}
    got = sess.run(None, feeds)
    with torch.inference_mode():
        ref = module(*feeds_torch)
    if isinstance(ref, torch.Tensor):
        ref = (ref,)
    ok = True
    for i, (r, g) in enumerate(zip(ref, got)):
        r = r.float().numpy()
        if r.shape != g.shape:
            log(f"  FAIL output {i}: shape {g.shape} from onnxruntime, {r.shape} from torch")
            ok = False
            continue
        diff = float(np.max(np.abs(r - g)))
        scale = float(np.max(np.abs(r))) or 1.0
        good = diff <= abs_tol + rel_tol * scale
        ok &= good
        log(f"  output {i} {list(g.shape)}: max |ort - torch| = {diff:.3g} (max |torch| {scale:.3g})"
            f" {'ok' if good else 'FAIL'}")
    return ok


def make_bert_file(path, seed, exporter, check):
    import torch

    model, impl = build_bert(seed, "eager")
    wrap = BertWrapper.make(model)
    # The export inputs include padding, so that a data-dependent branch in transformers' mask code
    # (e.g. "drop the mask when it is all ones") is traced on its masked side.
    ids, mask = bert_inputs(2, 16, seed, pad_last=True)
    log(f"  exporting (attn_implementation={impl!r}) ...")
    with torch.no_grad():
        used = onnx_export(
            wrap,
            (ids, mask),
            path,
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state", "pooler_output"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "sequence"},
                "last_hidden_state": {0: "batch", 1: "sequence"},
                "pooler_output": {0: "batch"},
            },
            exporter=exporter,
        )
    log(f"  exporter: {used}")
    if not check:
        return True
    ids, mask = bert_inputs(3, 40, seed + 1, pad_last=True)
    return verify("bert_base", path, wrap, (ids, mask), rel_tol=0.0, abs_tol=1e-3)


def make_resnet_file(path, seed, exporter, check):
    import torch

    model = build_resnet50(seed)
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(seed))
    log("  exporting ...")
    with torch.no_grad():
        used = onnx_export(
            model,
            (x,),
            path,
            input_names=["input"],
            output_names=["output"],
            dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
            exporter=exporter,
        )
    log(f"  exporter: {used}")
    if not check:
        return True
    x = torch.randn(3, 3, 224, 224, generator=torch.Generator().manual_seed(seed + 1))
    return verify("resnet50", path, model, (x,), rel_tol=1e-2, abs_tol=1e-4)


BUILDERS = {"bert_base": make_bert_file, "resnet50": make_resnet_file}


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Write bert_base.onnx and resnet50.onnx (seeded random weights, exported "
        "from PyTorch) to a folder, for dsinfer's GPU benchmarks.",
        epilog="See the header of this file for the exact models and checks.",
    )
    p.add_argument("--out", required=True, help="output folder (created if missing)")
    p.add_argument("--only", nargs="+", choices=MODELS, help="just these models")
    p.add_argument("--force", action="store_true", help="rewrite files that already exist")
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed for the weights (default 0)")
    p.add_argument("--exporter", choices=("torchscript", "dynamo", "auto"), default="torchscript",
                   help="torchscript: dynamo=False, opset 17 (default); dynamo: dynamo=True, "
                   "opset 18; auto: torchscript, then dynamo if that fails")
    p.add_argument("--no-verify", action="store_true",
                   help="skip onnx.checker and the onnxruntime-vs-torch comparison")
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads (default: torch's choice)")
    return p.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"gpu_models.py: torch is not importable ({e}); install torch, transformers and "
              "torchvision", file=sys.stderr)
        return 2
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    log(f"torch {torch.__version__}; writing to {os.path.abspath(a.out)}")

    failed = []
    for name in a.only or MODELS:
        path = os.path.join(a.out, name + ".onnx")
        if os.path.exists(path) and not a.force:
            log(f"{name}: {path} exists, kept (--force rewrites it)")
            continue
        log(f"{name}:")
        tmp = path + ".tmp"
        t0 = time.time()
        try:
            ok = BUILDERS[name](tmp, a.seed, a.exporter, not a.no_verify)
            if not ok:
                raise RuntimeError("the onnxruntime check failed (see above)")
            os.replace(tmp, path)
            log(f"  wrote {path} in {time.time() - t0:.1f} s")
        except ImportError as e:
            log(f"  FAILED: a library is missing: {e}")
            failed.append(name)
        except Exception as e:  # noqa: BLE001 - report every model
            traceback.print_exc()
            log(f"  FAILED: {type(e).__name__}: {e}")
            failed.append(name)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    log("")
    log("files:")
    for name in a.only or MODELS:
        path = os.path.join(a.out, name + ".onnx")
        if os.path.exists(path):
            log(f"  {path}: {os.path.getsize(path)} bytes ({human_size(os.path.getsize(path))})")
        else:
            log(f"  {path}: missing")
    if failed:
        log(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
