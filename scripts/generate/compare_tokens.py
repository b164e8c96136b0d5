#!/usr/bin/env python3
"""Compares the generated tokens of two runs (ds-generate --json, ort_generate.mjs --json):
   compare_tokens.py A.json B.json   -> one line per prompt, exit 1 on any difference."""
import json
import sys


def tokens(path):
    t = json.load(open(path))["tokens"]
    return [t] if t and isinstance(t[0], int) else t


a, b = tokens(sys.argv[1]), tokens(sys.argv[2])
bad = len(a) != len(b)
for i, (x, y) in enumerate(zip(a, b)):
    diff = next((k for k, (p, q) in enumerate(zip(x, y)) if p != q), None)
    if diff is None and len(x) != len(y):
        diff = min(len(x), len(y))
    print(f"prompt {i}: {len(x)} / {len(y)} tokens, " + ("equal" if diff is None else f"first difference at {diff}"))
    bad |= diff is not None
print(f"{len(a)} prompts: " + ("DIFFERENT" if bad else "identical"))
sys.exit(1 if bad else 0)
