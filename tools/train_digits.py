#!/usr/bin/python3
"""Trains the small digit classifier used by the dsinfer digits example and exports it to ONNX.

Data: scikit-learn's bundled 8x8 handwritten digits (load_digits works offline). The samples are
split 80/20, stratified by class, with a fixed seed. A 64-64-10 multilayer perceptron (ReLU,
softmax cross-entropy) is trained with minibatch Adam in plain numpy.

Outputs (in --out, default models/digits next to this repository's tools/ folder):
  digits.onnx       input  "pixels"        float32 [batch, 64]  pixel values divided by 16
                    output "logits"        float32 [batch, 10]
                    output "probabilities" float32 [batch, 10]  (Softmax of the logits)
  digits_test.csv   the held-out split, one sample per line: the label (0-9) followed by the
                    64 raw pixel values as integers 0..16, comma-separated, no header.
                    Consumers divide each pixel by 16 before feeding the model, as training did.
  digits_train.csv  the training split in the same format, in the (seeded, class-interleaved)
                    order training saw it: calibration data for static INT8 quantization
                    (dsinfer::calibration_csv(file, graph, batch_size, 1.f / 16), ds-convert
                    --calibration), kept apart from the held-out split that measures accuracy.

Running it again with the same arguments produces byte-identical files.
"""

import argparse
import os
import sys

# One BLAS thread keeps floating-point summation order, and so the trained weights, reproducible.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

PIXEL_SCALE = 16.0
HIDDEN = 64
CLASSES = 10


def stratified_split(labels, test_fraction, rng):
    """Returns (train_idx, test_idx): per class, a seeded shuffle with test_fraction held out."""
    train, test = [], []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        idx = idx[rng.permutation(idx.size)]
        n_test = int(round(idx.size * test_fraction))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    train = np.concatenate(train)
    test = np.concatenate(test)
    # Interleave classes so neither split is ordered by label.
    return train[rng.permutation(train.size)], np.sort(test)


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class Mlp:
    def __init__(self, rng):
        # He initialisation for the ReLU layer, Glorot-like for the output layer.
        self.params = {
            "w1": rng.standard_normal((64, HIDDEN)) * np.sqrt(2.0 / 64),
            "b1": np.zeros(HIDDEN),
            "w2": rng.standard_normal((HIDDEN, CLASSES)) * np.sqrt(1.0 / HIDDEN),
            "b2": np.zeros(CLASSES),
        }

    def forward(self, x):
        p = self.params
        h_pre = x @ p["w1"] + p["b1"]
        h = np.maximum(h_pre, 0.0)
        return h_pre, h, h @ p["w2"] + p["b2"]

    def gradients(self, x, y_onehot, weight_decay):
        p = self.params
        h_pre, h, logits = self.forward(x)
        n = x.shape[0]
        d_logits = (softmax(logits) - y_onehot) / n
        d_h = d_logits @ p["w2"].T
        d_h_pre = d_h * (h_pre > 0.0)
        return {
            "w2": h.T @ d_logits + weight_decay * p["w2"],
            "b2": d_logits.sum(axis=0),
            "w1": x.T @ d_h_pre + weight_decay * p["w1"],
            "b1": d_h_pre.sum(axis=0),
        }

    def predict(self, x):
        return self.forward(x)[2].argmax(axis=1)


def train(model, x, y, rng, epochs, batch_size, lr, weight_decay):
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    m = {k: np.zeros_like(v) for k, v in model.params.items()}
    v = {k: np.zeros_like(v) for k, v in model.params.items()}
    onehot = np.eye(CLASSES)[y]
    step = 0
    for epoch in range(epochs):
        order = rng.permutation(x.shape[0])
        for start in range(0, x.shape[0], batch_size):
            batch = order[start:start + batch_size]
            grads = model.gradients(x[batch], onehot[batch], weight_decay)
            step += 1
            for k, g in grads.items():
                m[k] = beta1 * m[k] + (1 - beta1) * g
                v[k] = beta2 * v[k] + (1 - beta2) * g * g
                m_hat = m[k] / (1 - beta1 ** step)
                v_hat = v[k] / (1 - beta2 ** step)
                model.params[k] -= lr * m_hat / (np.sqrt(v_hat) + eps)
        if (epoch + 1) % 50 == 0:
            acc = float((model.predict(x) == y).mean())
            print(f"epoch {epoch + 1:4d}: train accuracy {acc:.4f}")


def export_onnx(model, path):
    p = {k: v.astype(np.float32) for k, v in model.params.items()}
    inits = [
        numpy_helper.from_array(p["w1"], "fc1.weight"),
        numpy_helper.from_array(p["b1"], "fc1.bias"),
        numpy_helper.from_array(p["w2"], "fc2.weight"),
        numpy_helper.from_array(p["b2"], "fc2.bias"),
    ]
    nodes = [
        helper.make_node("MatMul", ["pixels", "fc1.weight"], ["fc1.matmul"], name="fc1_matmul"),
        helper.make_node("Add", ["fc1.matmul", "fc1.bias"], ["fc1.out"], name="fc1_bias"),
        helper.make_node("Relu", ["fc1.out"], ["fc1.relu"], name="relu1"),
        helper.make_node("Gemm", ["fc1.relu", "fc2.weight", "fc2.bias"], ["logits"], name="fc2",
                         alpha=1.0, beta=1.0, transA=0, transB=0),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "digits_mlp",
        inputs=[helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 64])],
        outputs=[
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", CLASSES]),
        ],
        initializer=inits)
    model_proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 13)],
        producer_name="dsinfer tools/train_digits.py",
        producer_version="1",
        doc_string=(
            "64-64-10 MLP classifying 8x8 handwritten digits (scikit-learn load_digits). "
            "Input 'pixels': float32 [batch, 64], the 8x8 image in row-major order with each "
            "raw pixel value (0..16) divided by 16. Outputs: 'logits' [batch, 10] and "
            "'probabilities' [batch, 10] (softmax); the predicted digit is the argmax."))
    model_proto.ir_version = 8
    onnx.checker.check_model(model_proto)
    with open(path, "wb") as f:
        f.write(model_proto.SerializeToString())


def write_csv(images, labels, path):
    with open(path, "w", encoding="ascii", newline="\n") as f:
        for label, row in zip(labels, images):
            f.write(",".join([str(int(label))] + [str(int(v)) for v in row]) + "\n")


def main(argv):
    default_out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models",
                               "digits")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=default_out, help="output folder (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=20240607)
    ap.add_argument("--epochs", type=int, default=300)
    args = ap.parse_args(argv)

    digits = load_digits()
    raw = digits.data.astype(np.int64)  # (1797, 64) values 0..16
    labels = digits.target.astype(np.int64)
    rng = np.random.default_rng(args.seed)
    train_idx, test_idx = stratified_split(labels, 0.2, rng)
    x_train = raw[train_idx] / PIXEL_SCALE
    x_test = raw[test_idx] / PIXEL_SCALE
    print(f"samples: {train_idx.size} train, {test_idx.size} test")

    model = Mlp(rng)
    train(model, x_train, labels[train_idx], rng, epochs=args.epochs, batch_size=32, lr=1e-3,
          weight_decay=1e-4)

    test_acc = float((model.predict(x_test) == labels[test_idx]).mean())
    # The exported model runs in float32; check that accuracy, too.
    p32 = {k: v.astype(np.float32) for k, v in model.params.items()}
    h32 = np.maximum(x_test.astype(np.float32) @ p32["w1"] + p32["b1"], 0)
    acc32 = float(((h32 @ p32["w2"] + p32["b2"]).argmax(axis=1) == labels[test_idx]).mean())
    print(f"held-out accuracy: {test_acc:.4f} (float64), {acc32:.4f} (float32)")
    if min(test_acc, acc32) < 0.95:
        print("error: held-out accuracy below 0.95", file=sys.stderr)
        return 1

    os.makedirs(args.out, exist_ok=True)
    onnx_path = os.path.join(args.out, "digits.onnx")
    csv_path = os.path.join(args.out, "digits_test.csv")
    train_csv_path = os.path.join(args.out, "digits_train.csv")
    export_onnx(model, onnx_path)
    write_csv(raw[test_idx], labels[test_idx], csv_path)
    write_csv(raw[train_idx], labels[train_idx], train_csv_path)
    for path in (onnx_path, csv_path, train_csv_path):
        print(f"wrote {os.path.normpath(path)} ({os.path.getsize(path)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
