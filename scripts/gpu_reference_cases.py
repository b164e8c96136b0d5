#!/usr/bin/env python3
"""Writes conformance-style reference cases (model.onnx + test_data_set_0/{input,output}_N.pb)
for whole models, with ONNX Runtime on the CPU as the reference, so that ds-conformance can check
dsinfer's GPU engine on them (scripts/gpu-check.sh, step "accuracy").

    python3 scripts/gpu_reference_cases.py --models DIR --out DIR [--batch 2] [--seq 128]

For each of bert_base.onnx and resnet50.onnx in --models: inputs like ds-benchmark's (token ids
in [100, 30100) with the last quarter of the second sequence masked out; images uniform in
[-1, 1)), fixed seed. The case folder hard-links the model (or copies it).
"""
import argparse
import os
import sys

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    made = 0
    for name in ("bert_base", "resnet50"):
        model = os.path.join(a.models, name + ".onnx")
        if not os.path.exists(model):
            print(f"skip {name}: {model} missing")
            continue
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        feeds = {}
        for inp in sess.get_inputs():
            if inp.type == "tensor(int64)" and "mask" in inp.name:
                m = np.ones((a.batch, a.seq), dtype=np.int64)
                if a.batch > 1:
                    m[1, a.seq * 3 // 4:] = 0
                feeds[inp.name] = m
            elif inp.type == "tensor(int64)":
                feeds[inp.name] = rng.integers(100, 30100, size=(a.batch, a.seq), dtype=np.int64)
            else:
                feeds[inp.name] = rng.uniform(-1, 1, size=(a.batch, 3, 224, 224)).astype(np.float32)
        outs = sess.run(None, feeds)
        case = os.path.join(a.out, "test_" + name)
        data = os.path.join(case, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        link = os.path.join(case, "model.onnx")
        if not os.path.exists(link):
            try:
                os.link(model, link)
            except OSError:
                import shutil
                shutil.copyfile(model, link)
        for i, inp in enumerate(sess.get_inputs()):
            t = numpy_helper.from_array(feeds[inp.name], inp.name)
            open(os.path.join(data, f"input_{i}.pb"), "wb").write(t.SerializeToString())
        for i, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
            t = numpy_helper.from_array(np.asarray(v), o.name)
            open(os.path.join(data, f"output_{i}.pb"), "wb").write(t.SerializeToString())
        print(f"{name}: {len(outs)} outputs, max |y| {max(float(np.abs(v).max()) for v in outs):.3f}")
        made += 1
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main())
