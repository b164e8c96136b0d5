#!/usr/bin/env python3
"""PyTorch eager baselines on the GPU for the models of scripts/gpu_models.py.

Usage:
    python3 scripts/gpu_torch_bench.py --json OUT.json [--bert-batches 1,8,64,256]
        [--resnet-batches 1,64] [--seq 128] [--warmup 5] [--repeats 20] [--time-budget 150]
        [--seed 0] [--only bert|resnet ...] [--no-fp32] [--no-cudnn-benchmark]

Needs torch with CUDA, transformers (BERT) and torchvision (ResNet-50); no downloads (random
weights, the same seeded construction as scripts/gpu_models.py).

Cases, in this order (each a row of the JSON and of the table):
  bert_base  BertModel(BertConfig()) (bert-base), eval, model.half(), seq --seq (128), input ids
             uniform in [100, 30100) and an attention_mask of ones; one row per batch of
             --bert-batches with attn_implementation="eager" (explicit softmax, the graph in
             bert_base.onnx), then the same batches with "sdpa"
             (torch.nn.functional.scaled_dot_product_attention).
  bert_base  fp32, batch 8, eager attention (reference; skipped with --no-fp32).
  resnet50   torchvision resnet50(weights=None), eval, model.half() in channels_last, input
             [batch, 3, 224, 224] fp16 channels_last, one row per batch of --resnet-batches.
  resnet50   fp32 channels_last, batch 64 (reference; skipped with --no-fp32).
Each case: torch.inference_mode(), --warmup untimed runs, then --repeats runs each timed with a
pair of CUDA events (event.elapsed_time); reported: median (p50), mean, min, max ms and
throughput = batch * 1000 / median ms (samples/s). torch.backends.cudnn.benchmark is on unless
--no-cudnn-benchmark (the warm-up runs absorb its autotuning); TF32 settings are left at
torch's defaults and recorded.

Once --time-budget seconds have passed since the start, every remaining case is recorded with
status "skipped: time budget". A case that fails (out of memory, anything else) is recorded
with status "error: ..." and the others still run. Memory is freed between models (del,
gc.collect(), torch.cuda.empty_cache()). The JSON is rewritten after every case, so a killed
run still leaves the finished rows.

JSON (--json): {"tool": "gpu_torch_bench", "torch": ..., "cuda": ..., "cudnn": ..., "gpu": ...,
"transformers": ..., "torchvision": ..., "settings": {...}, "results": [{"model": "bert_base" |
"resnet50", "framework": "torch", "mode": "eager", "variant": "attn=eager" | "attn=sdpa" |
"channels_last", "attn_implementation": ..., "precision": "fp16" | "fp32", "batch": N,
"seq": N | null, "memory_format": ..., "warmup": N, "iterations": N, "latency_ms": {"p50",
"mean", "min", "max"}, "throughput": samples/s, "status": "ok" | "skipped: ..." | "error: ..."},
...]}. scripts/gpu_summary.py joins these rows with ds-benchmark's on (model, precision, batch).

Exit status: 0 when every case that ran succeeded (skips allowed), 1 when a case failed, 2 bad
command line, or torch / CUDA missing.
"""

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import traceback


def log(msg=""):
    print(msg, flush=True)


def batches(text):
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not out or any(b < 1 for b in out):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="PyTorch eager GPU baselines (BERT-base, ResNet-50; fp16 and fp32 "
        "reference rows), timed with CUDA events; writes JSON and prints a table.",
        epilog="See the header of this file for the cases and the JSON layout.",
    )
    p.add_argument("--json", required=True, metavar="PATH", help="write the results here")
    p.add_argument("--bert-batches", type=batches, default=[1, 8, 64, 256], metavar="B,B,...",
                   help="BERT fp16 batches (default 1,8,64,256)")
    p.add_argument("--resnet-batches", type=batches, default=[1, 64], metavar="B,B,...",
                   help="ResNet-50 fp16 batches (default 1,64)")
    p.add_argument("--seq", type=int, default=128, help="BERT sequence length (default 128)")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs per case (default 5)")
    p.add_argument("--repeats", type=int, default=20, help="timed runs per case (default 20)")
    p.add_argument("--time-budget", type=float, default=150.0, metavar="SECONDS",
                   help="skip the remaining cases once this much time has passed (default 150)")
    p.add_argument("--seed", type=int, default=0, help="weights and inputs seed (default 0)")
    p.add_argument("--only", nargs="+", choices=("bert", "resnet"), help="just these models")
    p.add_argument("--no-fp32", action="store_true", help="skip the fp32 reference rows")
    p.add_argument("--no-sdpa", action="store_true", help="skip the BERT sdpa rows")
    p.add_argument("--no-cudnn-benchmark", action="store_true",
                   help="leave torch.backends.cudnn.benchmark off")
    p.add_argument("--device", default="cuda", help="torch device (default cuda)")
    a = p.parse_args(argv)
    if a.seq < 1 or a.warmup < 0 or a.repeats < 1:
        p.error("--seq and --repeats must be >= 1 and --warmup >= 0")
    return a


# ---------------------------------------------------------------------------------------------
# models (the same construction as scripts/gpu_models.py)


def build_bert(seed, impl):
    """BertModel(BertConfig()) with seeded random weights on the CPU, attention `impl`.
    Returns (model, the implementation the model reports)."""
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

    def current():
        return getattr(getattr(model, "config", cfg), "_attn_implementation", None)

    if current() != impl and callable(getattr(model, "set_attn_implementation", None)):
        try:
            model.set_attn_implementation(impl)
        except Exception as e:  # noqa: BLE001
            log(f"  note: model.set_attn_implementation({impl!r}) failed: {e}")
    if current() != impl:
        try:
            model.config._attn_implementation = impl
        except Exception as e:  # noqa: BLE001
            log(f"  note: model.config._attn_implementation = {impl!r} failed: {e}")
    got = current()
    if got != impl:
        log(f"  WARNING: BERT reports attn_implementation={got!r}, wanted {impl!r}")
    return model.eval(), got


def build_resnet50(seed):
    import torch
    import torchvision

    torch.manual_seed(seed)
    return torchvision.models.resnet50(weights=None).eval()


# ---------------------------------------------------------------------------------------------
# timing


def time_case(fn, warmup, repeats):
    """Runs fn warmup times, then repeats times between CUDA events. Returns ms per run."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in pairs]


def free_memory():
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------


def plan_cases(a):
    """Cases grouped by the model they need: [(group key, [case dict, ...]), ...]."""
    groups = []
    if not a.only or "bert" in a.only:
        impls = ["eager"] if a.no_sdpa else ["eager", "sdpa"]
        for impl in impls:
            groups.append((("bert", impl, "fp16"),
                           [dict(model="bert_base", variant=f"attn={impl}", attn_implementation=impl,
                                 precision="fp16", batch=b, seq=a.seq, memory_format=None)
                            for b in a.bert_batches]))
        if not a.no_fp32:
            groups.append((("bert", "eager", "fp32"),
                           [dict(model="bert_base", variant="attn=eager", attn_implementation="eager",
                                 precision="fp32", batch=8, seq=a.seq, memory_format=None)]))
    if not a.only or "resnet" in a.only:
        groups.append((("resnet", None, "fp16"),
                       [dict(model="resnet50", variant="channels_last", attn_implementation=None,
                             precision="fp16", batch=b, seq=None, memory_format="channels_last")
                        for b in a.resnet_batches]))
        if not a.no_fp32:
            groups.append((("resnet", None, "fp32"),
                           [dict(model="resnet50", variant="channels_last", attn_implementation=None,
                                 precision="fp32", batch=64, seq=None,
                                 memory_format="channels_last")]))
    return groups


def make_group_model(key, a, dev):
    """The model for one group, on the device in its precision, plus the input maker."""
    import torch

    kind, impl, precision = key
    dtype = torch.float16 if precision == "fp16" else torch.float32
    if kind == "bert":
        model, got = build_bert(a.seed, impl)
        model = model.to(dev)
        if dtype == torch.float16:
            model = model.half()
        gen = torch.Generator(device="cpu").manual_seed(a.seed + 1)

        def inputs(batch, seq):
            ids = torch.randint(100, 30100, (batch, seq), generator=gen, dtype=torch.int64)
            mask = torch.ones(batch, seq, dtype=torch.int64)
            ids, mask = ids.to(dev), mask.to(dev)
            return lambda: model(input_ids=ids, attention_mask=mask)

        return model, inputs, got
    model = build_resnet50(a.seed).to(dev)
    if dtype == torch.float16:
        model = model.half()
    model = model.to(memory_format=torch.channels_last)
    gen = torch.Generator(device="cpu").manual_seed(a.seed + 1)

    def inputs(batch, _seq):
        x = torch.randn(batch, 3, 224, 224, generator=gen).to(dev, dtype=dtype)
        x = x.contiguous(memory_format=torch.channels_last)
        return lambda: model(x)

    return model, inputs, None


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def print_table(rows):
    head = ("model", "variant", "prec", "batch", "seq", "p50 ms", "mean ms", "samples/s", "status")
    lines = [head]
    for r in rows:
        lat = r.get("latency_ms") or {}
        lines.append((r["model"], r.get("variant") or "-", r["precision"], str(r["batch"]),
                      str(r["seq"]) if r.get("seq") else "-", fmt(lat.get("p50"), ".3f"),
                      fmt(lat.get("mean"), ".3f"), fmt(r.get("throughput"), ".1f"), r["status"]))
    widths = [max(len(str(l[i])) for l in lines) for i in range(len(head))]
    for i, l in enumerate(lines):
        log("  ".join(str(c).ljust(w) if j < 3 or j == 8 else str(c).rjust(w)
                      for j, (c, w) in enumerate(zip(l, widths))))
        if i == 0:
            log("  ".join("-" * w for w in widths))


def main(argv=None):
    a = parse_args(argv)
    t_start = time.monotonic()
    try:
        import torch
    except ImportError as e:
        print(f"gpu_torch_bench.py: torch is not importable ({e})", file=sys.stderr)
        return 2
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_torch_bench.py: torch.cuda.is_available() is False (no GPU or a CPU-only "
              f"torch {torch.__version__})", file=sys.stderr)
        return 2
    dev = torch.device(a.device)
    torch.backends.cudnn.benchmark = not a.no_cudnn_benchmark

    def version_of(mod):
        try:
            return __import__(mod).__version__
        except Exception:  # noqa: BLE001
            return None

    doc = {
        "tool": "gpu_torch_bench",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "transformers": version_of("transformers"),
        "torchvision": version_of("torchvision"),
        "settings": {
            "warmup": a.warmup,
            "repeats": a.repeats,
            "seq": a.seq,
            "seed": a.seed,
            "time_budget_s": a.time_budget,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
            "timing": "CUDA events per run; p50 = median; throughput = batch * 1000 / p50",
        },
        "results": [],
    }
    log(f"torch {doc['torch']} (CUDA {doc['cuda']}, cuDNN {doc['cudnn']}), GPU {doc['gpu']}, "
        f"transformers {doc['transformers']}, torchvision {doc['torchvision']}")

    def save():
        d = os.path.dirname(os.path.abspath(a.json))
        os.makedirs(d, exist_ok=True)
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, a.json)

    failed = False
    for key, cases in plan_cases(a):
        rows = []
        for c in cases:
            r = dict(framework="torch", mode="eager", **c)
            r.update(warmup=a.warmup, iterations=a.repeats, latency_ms=None, throughput=None,
                     status="pending")
            rows.append(r)
            doc["results"].append(r)
        if time.monotonic() - t_start > a.time_budget:
            for r in rows:
                r["status"] = "skipped: time budget"
            save()
            continue
        log(f"{key[0]} {key[2]}" + (f" attn={key[1]}" if key[1] else "") + ": building ...")
        model = inputs = None
        try:
            model, inputs, got = make_group_model(key, a, dev)
            for r in rows:
                if got is not None:
                    r["attn_implementation"] = got
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            for r in rows:
                r["status"] = f"error: building the model: {type(e).__name__}: {e}"[:500]
            failed = True
            model = inputs = None
            free_memory()
            save()
            continue
        for r in rows:
            if time.monotonic() - t_start > a.time_budget:
                r["status"] = "skipped: time budget"
                save()
                continue
            run = None
            try:
                with torch.inference_mode():
                    run = inputs(r["batch"], r["seq"])
                    ms = time_case(run, a.warmup, a.repeats)
                p50 = statistics.median(ms)
                r["latency_ms"] = {"p50": p50, "mean": statistics.fmean(ms), "min": min(ms),
                                   "max": max(ms)}
                r["throughput"] = r["batch"] * 1000.0 / p50
                r["status"] = "ok"
                log(f"  batch {r['batch']}: p50 {p50:.3f} ms, {r['throughput']:.1f} samples/s")
            except Exception as e:  # noqa: BLE001 - OOM and the rest: record, go on
                if not isinstance(e, torch.cuda.OutOfMemoryError):
                    traceback.print_exc()
                r["status"] = f"error: {type(e).__name__}: {e}"[:500]
                log(f"  batch {r['batch']}: {r['status']}")
                failed = True
            finally:
                run = None
                free_memory()
            save()
        del model, inputs
        free_memory()

    doc["elapsed_s"] = round(time.monotonic() - t_start, 1)
    save()
    log()
    print_table(doc["results"])
    log(f"\nwrote {a.json} ({doc['elapsed_s']} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
