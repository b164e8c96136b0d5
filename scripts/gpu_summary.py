#!/usr/bin/env python3
"""Joins ds-benchmark --json results with scripts/gpu_torch_bench.py's JSON into one summary.

Usage:
    python3 scripts/gpu_summary.py [--torch TORCH.json] [--out SUMMARY.json] [--md TABLE.md]
                                   [--all-devices] PATH [PATH ...]

PATH: a file or a folder (every *.json, *.jsonl, *.ndjson, *.txt and *.log file in it, not
recursive). Standard library only (any Python 3.8+), no torch needed.

Reading: a file that parses as one JSON document is taken whole (an object, or a list of
objects); otherwise it is read one JSON object per line (what `ds-benchmark --json` prints, also
after `>>` of several runs), and lines that are not JSON objects (stderr mixed in, blank lines)
are skipped and counted. An object with "tool": "gpu_torch_bench" and a "results" list is the
torch baseline (so the torch JSON can also be given as a PATH or sit in the folder); --torch
names it explicitly. Every other object with a "model" key is a ds-benchmark result; the keys
used (tools/ds_benchmark.cpp print_json) are "model" (path), "device", "precision", "batch",
"seq" (null for models without a sequence dim), "throughput" (samples/s: batch x timed runs /
timed seconds), "latency_ms": {"p50", ...}, "iterations", "outputs_finite"; a missing key is
reported as null, and an object with an "error" key is kept as a failed run.

Joining: a ds-benchmark row's model is its file name without the folder and ".onnx"
(/x/bert_base.onnx -> bert_base). Rows are grouped by (model, device, precision, batch, seq);
repeated runs of one group report the median throughput and median p50 over the runs (runs
counted in "ds_runs"). The torch rows are matched on model (exact, else the longest torch model
name that the ds name starts with followed by "_", so bert_base_ln17 -> bert_base), precision,
batch, and seq when both sides have one (a torch row matched only by prefix is still listed
on its own line when its exact model has no ds-benchmark row); only ds rows on device "cuda" (or with no device) are
compared with torch unless --all-devices. BERT has two torch variants (attn=eager, the same
attention graph as bert_base.onnx, and attn=sdpa): each gets its own ratio, and "torch_best"
is the faster. ratio = dsinfer samples/s / torch samples/s (> 1: dsinfer is faster). Torch rows
with no ds-benchmark counterpart are listed too (ds columns null), so missing runs show up.

Output: the summary JSON (--out, default: none written) {"tool": "gpu_summary", "inputs",
"torch": {versions, GPU}, "rows": [...], "skipped_lines", "notes"} and a markdown table on
stdout (and in --md). Exit status: 0 ok, 1 nothing could be read, 2 bad command line.
"""

import argparse
import glob
import json
import os
import statistics
import sys

SCAN_EXTS = (".json", ".jsonl", ".ndjson", ".txt", ".log")


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Summarise ds-benchmark --json results against the PyTorch eager baseline "
        "(scripts/gpu_torch_bench.py): samples/s, p50 ms and the dsinfer/torch ratio per "
        "(model, precision, batch).",
        epilog="See the header of this file for the matching rules and the JSON layout.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="ds-benchmark JSON files (one object per line) or folders of them")
    p.add_argument("--torch", metavar="JSON", help="gpu_torch_bench.py's JSON")
    p.add_argument("--out", metavar="JSON", help="write the summary JSON here")
    p.add_argument("--md", metavar="PATH", help="also write the markdown table here")
    p.add_argument("--all-devices", action="store_true",
                   help="compare ds-benchmark rows of every device with torch (default: cuda only)")
    a = p.parse_args(argv)
    if not a.paths and not a.torch:
        p.error("give at least one PATH or --torch")
    return a


# ---------------------------------------------------------------------------------------------
# reading


def list_files(paths, notes):
    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(f for f in glob.glob(os.path.join(path, "*"))
                           if os.path.isfile(f) and f.lower().endswith(SCAN_EXTS))
            if not found:
                notes.append(f"{path}: no {'/'.join(SCAN_EXTS)} files")
            files += found
        elif os.path.isfile(path):
            files.append(path)
        else:
            notes.append(f"{path}: not found")
    seen, out = set(), []
    for f in files:
        k = os.path.realpath(f)
        if k not in seen:
            seen.add(k)
            out.append(f)
    return out


def read_objects(path, notes):
    """The JSON objects in a file (whole document, else one per line), and skipped lines."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        notes.append(f"{path}: {e}")
        return [], 0
    try:
        doc = json.loads(text)
        if isinstance(doc, dict):
            return [doc], 0
        if isinstance(doc, list):
            return [d for d in doc if isinstance(d, dict)], sum(not isinstance(d, dict) for d in doc)
    except ValueError:
        pass
    objs, skipped = [], 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        if isinstance(obj, dict):
            objs.append(obj)
        else:
            skipped += 1
    return objs, skipped


def is_torch_doc(obj):
    return obj.get("tool") == "gpu_torch_bench" and isinstance(obj.get("results"), list)


def model_name(path):
    if not isinstance(path, str) or not path:
        return None
    base = os.path.basename(path.rstrip("/\\"))
    return base[:-5] if base.lower().endswith(".onnx") else base


def num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def as_int(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return None


def ds_record(obj, source):
    lat = obj.get("latency_ms")
    p50 = num(lat.get("p50")) if isinstance(lat, dict) else None
    return {
        "model": model_name(obj.get("model")),
        "model_path": obj.get("model"),
        "device": obj.get("device"),
        "precision": obj.get("precision"),
        "batch": as_int(obj.get("batch")),
        "seq": as_int(obj.get("seq")),
        "throughput": num(obj.get("throughput")),
        "p50": p50,
        "iterations": obj.get("iterations"),
        "outputs_finite": obj.get("outputs_finite"),
        "error": obj.get("error"),
        "source": source,
    }


# ---------------------------------------------------------------------------------------------
# joining


def median_or_none(values):
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def match_torch_model(ds_model, torch_models):
    if ds_model in torch_models:
        return ds_model
    best = None
    for t in torch_models:
        if ds_model and ds_model.startswith(t + "_") and (best is None or len(t) > len(best)):
            best = t
    return best


def ratio(a, b):
    return a / b if a is not None and b else None


def summarise(ds_recs, torch_rows, all_devices):
    groups = {}
    for r in ds_recs:
        key = (r["model"], r["device"], r["precision"], r["batch"], r["seq"])
        groups.setdefault(key, []).append(r)

    torch_ok = [t for t in torch_rows if isinstance(t, dict)]
    torch_models = sorted({t.get("model") for t in torch_ok if isinstance(t.get("model"), str)})
    used_torch = set()
    rows = []

    def torch_for(model, precision, batch, seq):
        out = []
        for i, t in enumerate(torch_ok):
            if t.get("model") != model or t.get("precision") != precision:
                continue
            if as_int(t.get("batch")) != batch:
                continue
            tseq = as_int(t.get("seq"))
            if seq is not None and tseq is not None and seq != tseq:
                continue
            out.append((i, t))
        return out

    for key in groups:
        model, device, precision, batch, seq = key
        runs = groups[key]
        good = [r for r in runs if not r["error"]]
        row = {
            "model": model,
            "device": device,
            "precision": precision,
            "batch": batch,
            "seq": seq,
            "ds_runs": len(runs),
            "ds_errors": [r["error"] for r in runs if r["error"]] or None,
            "ds_samples_s": median_or_none(r["throughput"] for r in good),
            "ds_p50_ms": median_or_none(r["p50"] for r in good),
            "ds_samples_s_all": [r["throughput"] for r in good],
            "ds_outputs_finite": (all(r["outputs_finite"] is True for r in good)
                                  if good and all(r["outputs_finite"] is not None for r in good)
                                  else None),
            "ds_sources": sorted({r["source"] for r in runs}),
            "torch_model": None,
            "torch": {},
            "torch_best": None,
            "ratio": None,
            "ratios": {},
        }
        comparable = all_devices or device in (None, "cuda")
        tmodel = match_torch_model(model, torch_models) if comparable else None
        if tmodel:
            row["torch_model"] = tmodel
            for i, t in torch_for(tmodel, precision, batch, seq):
                if tmodel == model:
                    used_torch.add(i)  # a prefix match does not stand in for the model itself
                add_torch(row, t)
        finish(row)
        rows.append(row)

    # torch rows nobody matched: list them with empty ds columns
    extra = {}
    for i, t in enumerate(torch_ok):
        if i in used_torch:
            continue
        key = (t.get("model"), "cuda", t.get("precision"), as_int(t.get("batch")),
               as_int(t.get("seq")))
        row = extra.get(key)
        if row is None:
            row = extra[key] = {
                "model": key[0], "device": "cuda", "precision": key[2], "batch": key[3],
                "seq": key[4], "ds_runs": 0, "ds_errors": None, "ds_samples_s": None,
                "ds_p50_ms": None, "ds_samples_s_all": [], "ds_outputs_finite": None,
                "ds_sources": [], "torch_model": key[0], "torch": {}, "torch_best": None,
                "ratio": None, "ratios": {},
            }
        add_torch(row, t)
    for row in extra.values():
        finish(row)
        rows.append(row)
    rows.sort(key=lambda r: (str(r["model"]), str(r["device"]), str(r["precision"]),
                             r["batch"] if r["batch"] is not None else -1,
                             r["seq"] if r["seq"] is not None else -1))
    return rows


def add_torch(row, t):
    label = t.get("variant") or t.get("attn_implementation") or "default"
    lat = t.get("latency_ms")
    row["torch"][label] = {
        "samples_s": num(t.get("throughput")),
        "p50_ms": num(lat.get("p50")) if isinstance(lat, dict) else None,
        "status": t.get("status"),
        "attn_implementation": t.get("attn_implementation"),
    }


def finish(row):
    best_label, best = None, None
    for label, v in row["torch"].items():
        row["ratios"][label] = ratio(row["ds_samples_s"], v["samples_s"])
        if v["samples_s"] is not None and (best is None or v["samples_s"] > best):
            best_label, best = label, v["samples_s"]
    if best_label is not None:
        row["torch_best"] = {"variant": best_label, "samples_s": best,
                             "p50_ms": row["torch"][best_label]["p50_ms"]}
        row["ratio"] = ratio(row["ds_samples_s"], best)


# ---------------------------------------------------------------------------------------------
# output


def f(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def markdown(rows, torch_meta):
    out = []
    if torch_meta:
        out.append(f"PyTorch {torch_meta.get('torch')} (CUDA {torch_meta.get('cuda')}, cuDNN "
                   f"{torch_meta.get('cudnn')}) eager on {torch_meta.get('gpu')}; ratio = "
                   "dsinfer samples/s / torch samples/s (> 1: dsinfer faster), against the "
                   "fastest torch variant; per-variant ratios in the last column.")
        out.append("")
    out.append("| model | device | precision | batch | seq | dsinfer samples/s | dsinfer p50 ms "
               "| torch samples/s | torch p50 ms | torch variant | ratio | ratio per variant |")
    out.append("|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for r in rows:
        tb = r["torch_best"] or {}
        per = ", ".join(f"{k} {f(v, '.2f')}" for k, v in r["ratios"].items()) or "-"
        ds = f(r["ds_samples_s"], ".1f")
        if r["ds_errors"] and r["ds_samples_s"] is None:
            ds = "error"
        elif r["ds_runs"] > 1:
            ds += f" ({r['ds_runs']} runs)"
        if not r["torch"] or tb.get("samples_s") is None:
            statuses = {v["status"] for v in r["torch"].values() if v.get("status") != "ok"}
            tcol = ", ".join(sorted(str(s) for s in statuses)) if statuses else "-"
        else:
            tcol = f(tb.get("samples_s"), ".1f")
        out.append(f"| {r['model'] or '-'} | {r['device'] or '-'} | {r['precision'] or '-'} | "
                   f"{f(r['batch'], 'd')} | {f(r['seq'], 'd')} | {ds} | {f(r['ds_p50_ms'], '.3f')} | "
                   f"{tcol} | {f(tb.get('p50_ms'), '.3f')} | {tb.get('variant') or '-'} | "
                   f"{f(r['ratio'], '.2f')} | {per} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    a = parse_args(argv)
    notes = []
    files = list_files(a.paths, notes)
    torch_docs, ds_recs, skipped = [], [], 0
    if a.torch:
        objs, s = read_objects(a.torch, notes)
        skipped += s
        docs = [o for o in objs if is_torch_doc(o)]
        if not docs:
            notes.append(f"{a.torch}: not a gpu_torch_bench.py JSON (no \"tool\": "
                         "\"gpu_torch_bench\" with \"results\")")
        torch_docs += [(a.torch, d) for d in docs]
    torch_real = os.path.realpath(a.torch) if a.torch else None
    for path in files:
        if torch_real and os.path.realpath(path) == torch_real:
            continue
        objs, s = read_objects(path, notes)
        skipped += s
        for o in objs:
            if is_torch_doc(o):
                torch_docs.append((path, o))
            elif "model" in o or "error" in o:
                ds_recs.append(ds_record(o, path))
            else:
                skipped += 1

    torch_rows, torch_meta = [], None
    for path, d in torch_docs:
        torch_rows += d["results"]
        if torch_meta is None:
            torch_meta = {k: d.get(k) for k in ("torch", "cuda", "cudnn", "gpu", "transformers",
                                                "torchvision", "settings", "time")}
            torch_meta["source"] = path
    if len(torch_docs) > 1:
        notes.append(f"{len(torch_docs)} torch JSON documents; their rows are all used, the "
                     f"versions shown are from {torch_docs[0][0]}")

    if not ds_recs and not torch_rows:
        for n in notes:
            print(f"gpu_summary.py: {n}", file=sys.stderr)
        print("gpu_summary.py: no ds-benchmark results and no torch results found",
              file=sys.stderr)
        return 1

    rows = summarise(ds_recs, torch_rows, a.all_devices)
    md = markdown(rows, torch_meta)
    sys.stdout.write(md)
    if skipped:
        notes.append(f"{skipped} line(s)/object(s) that were not results were skipped")
    for n in notes:
        print(f"note: {n}")

    if a.out:
        summary = {
            "tool": "gpu_summary",
            "inputs": files + ([a.torch] if a.torch and a.torch not in files else []),
            "torch": torch_meta,
            "ratio_definition": "dsinfer samples/s / torch samples/s (> 1: dsinfer faster); "
                                "'ratio' uses the fastest torch variant, 'ratios' each one",
            "rows": rows,
            "ds_results": len(ds_recs),
            "torch_results": len(torch_rows),
            "skipped_lines": skipped,
            "notes": notes,
        }
        d = os.path.dirname(os.path.abspath(a.out))
        os.makedirs(d, exist_ok=True)
        with open(a.out, "w") as fh:
            json.dump(summary, fh, indent=1)
            fh.write("\n")
        print(f"wrote {a.out}")
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
