#!/usr/bin/python3
"""Trains the small digit classifier used by the dsinfer digits example and exports it to ONNX.

Data: scikit-learn's bundled 8x8 handwritten digits (load_digits works offline). The samples are
split 80/20, stratified by class, with a fixed seed. A 64-64-10 multilayer perceptron (ReLU,
softmax cross-entropy) is trained with minibatch Adam in plain numpy.

Outputs (in --out, default models/digits next to this repository's tools/ folder):
  digits.onnx       input  "pixels"        float32 [batch, 64]  pixel values divided by 16
                    output "logits"        float32 [batch, 10]
                    output "probabilities" float32 [batch, 10]  (Softmax of the logits)
  digits_small.onnx with --small: multinomial logistic regression 64 -> 10 (one Gemm), the
                    same input and outputs: the cheap first stage of a model cascade
                    (dsinfer/cascade.hpp, examples/cascade/).
  digits_large.onnx with --large: a 64-256-256-10 MLP, the same input and outputs: a second
                    stage expensive enough (~85k multiply-adds a row against the small
                    model's 640) for a cascade's savings to show.
  digits_test.csv   the held-out split, one sample per line: the label (0-9) followed by the
                    64 raw pixel values as integers 0..16, comma-separated, no header.
                    Consumers divide each pixel by 16 before feeding the model, as training did.
  digits_train.csv  the training split in the same format, in the (seeded, class-interleaved)
                    order training saw it: calibration data for static INT8 quantization
                    (dsinfer::calibration_csv(file, graph, batch_size, 1.f / 16), ds-convert
                    --calibration), kept apart from the held-out split that measures accuracy.

Running it again with the same arguments produces byte-identical files. --small and --large train
their models after the others, each from its own generator seeded from --seed, so they leave
digits.onnx and the CSV files as they are without them.
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
    """A ReLU multilayer perceptron with the layer sizes given (no hidden layer: multinomial
    logistic regression), trained on softmax cross-entropy."""

    def __init__(self, rng, sizes=(64, HIDDEN, CLASSES)):
        # He initialisation for the ReLU layers, Glorot-like for the output layer.
        self.layers = len(sizes) - 1
        self.params = {}
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
            gain = 1.0 if i == self.layers else 2.0
            self.params[f"w{i}"] = rng.standard_normal((fan_in, fan_out)) * np.sqrt(gain / fan_in)
            self.params[f"b{i}"] = np.zeros(fan_out)

    def forward(self, x):
        """Returns the pre-activations and activations of the hidden layers, and the logits."""
        p = self.params
        pre, act = [], [x]
        for i in range(1, self.layers):
            pre.append(act[-1] @ p[f"w{i}"] + p[f"b{i}"])
            act.append(np.maximum(pre[-1], 0.0))
        last = self.layers
        return pre, act, act[-1] @ p[f"w{last}"] + p[f"b{last}"]

    def gradients(self, x, y_onehot, weight_decay):
        p = self.params
        pre, act, logits = self.forward(x)
        n = x.shape[0]
        grads = {}
        d_out = (softmax(logits) - y_onehot) / n
        for i in range(self.layers, 0, -1):
            grads[f"w{i}"] = act[i - 1].T @ d_out + weight_decay * p[f"w{i}"]
            grads[f"b{i}"] = d_out.sum(axis=0)
            if i > 1:
                d_out = (d_out @ p[f"w{i}"].T) * (pre[i - 2] > 0.0)
        return grads

    def predict(self, x):
        return self.forward(x)[2].argmax(axis=1)

    def predict_float32(self, x):
        """The predictions of the exported (float32) model."""
        p32 = {k: v.astype(np.float32) for k, v in self.params.items()}
        h = x.astype(np.float32)
        for i in range(1, self.layers):
            h = np.maximum(h @ p32[f"w{i}"] + p32[f"b{i}"], 0)
        return (h @ p32[f"w{self.layers}"] + p32[f"b{self.layers}"]).argmax(axis=1)


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


def export_onnx(model, path, graph_name="digits_mlp", description=None):
    p = {k: v.astype(np.float32) for k, v in model.params.items()}
    last = model.layers
    inits, nodes = [], []
    x = "pixels"
    for i in range(1, last + 1):
        inits += [numpy_helper.from_array(p[f"w{i}"], f"fc{i}.weight"),
                  numpy_helper.from_array(p[f"b{i}"], f"fc{i}.bias")]
        if i == last:
            nodes.append(helper.make_node("Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], ["logits"],
                                          name=f"fc{i}", alpha=1.0, beta=1.0, transA=0, transB=0))
            break
        nodes += [
            helper.make_node("MatMul", [x, f"fc{i}.weight"], [f"fc{i}.matmul"],
                             name=f"fc{i}_matmul"),
            helper.make_node("Add", [f"fc{i}.matmul", f"fc{i}.bias"], [f"fc{i}.out"],
                             name=f"fc{i}_bias"),
            helper.make_node("Relu", [f"fc{i}.out"], [f"fc{i}.relu"], name=f"relu{i}"),
        ]
        x = f"fc{i}.relu"
    nodes.append(helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax",
                                  axis=-1))
    graph = helper.make_graph(
        nodes, graph_name,
        inputs=[helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 64])],
        outputs=[
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", CLASSES]),
        ],
        initializer=inits)
    if description is None:
        description = "64-64-10 MLP"
    model_proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 13)],
        producer_name="dsinfer tools/train_digits.py",
        producer_version="1",
        doc_string=(
            f"{description} classifying 8x8 handwritten digits (scikit-learn load_digits). "
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


# The cascade's extra models (--small, --large): file, layer sizes, description, epochs, the
# held-out accuracy each must reach, and the stream of their seeded generator.
EXTRA_MODELS = {
    "small": ("digits_small.onnx", (64, CLASSES), "Multinomial logistic regression 64-10",
              300, 0.90, 1),
    "large": ("digits_large.onnx", (64, 256, 256, CLASSES), "64-256-256-10 MLP", 100, 0.95, 2),
}


def main(argv):
    default_out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models",
                               "digits")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=default_out, help="output folder (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=20240607)
    ap.add_argument("--epochs", type=int, default=300, help="epochs of digits.onnx's MLP")
    ap.add_argument("--small", action="store_true",
                    help="also write digits_small.onnx (logistic regression, a cascade's first "
                         "stage)")
    ap.add_argument("--large", action="store_true",
                    help="also write digits_large.onnx (64-256-256-10 MLP, a cascade's second "
                         "stage)")
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
    acc32 = float((model.predict_float32(x_test) == labels[test_idx]).mean())
    print(f"held-out accuracy: {test_acc:.4f} (float64), {acc32:.4f} (float32)")
    if min(test_acc, acc32) < 0.95:
        print("error: held-out accuracy below 0.95", file=sys.stderr)
        return 1

    # Each extra model: trained like the MLP above on the same split, from its own generator.
    extras = []
    for name in ("small", "large"):
        if not getattr(args, name):
            continue
        file_name, sizes, description, epochs, min_acc, stream = EXTRA_MODELS[name]
        print(f"{name} model: {description}")
        extra_rng = np.random.default_rng([args.seed, stream])
        extra = Mlp(extra_rng, sizes)
        train(extra, x_train, labels[train_idx], extra_rng, epochs=epochs, batch_size=32,
              lr=1e-3, weight_decay=1e-4)
        acc = float((extra.predict_float32(x_test) == labels[test_idx]).mean())
        print(f"{name} model held-out accuracy: {acc:.4f} (float32)")
        if acc < min_acc:
            print(f"error: {name} model held-out accuracy below {min_acc}", file=sys.stderr)
            return 1
        extras.append((extra, file_name, description))

    os.makedirs(args.out, exist_ok=True)
    onnx_path = os.path.join(args.out, "digits.onnx")
    csv_path = os.path.join(args.out, "digits_test.csv")
    train_csv_path = os.path.join(args.out, "digits_train.csv")
    export_onnx(model, onnx_path)
    write_csv(raw[test_idx], labels[test_idx], csv_path)
    write_csv(raw[train_idx], labels[train_idx], train_csv_path)
    written = [onnx_path, csv_path, train_csv_path]
    for extra, file_name, description in extras:
        path = os.path.join(args.out, file_name)
        export_onnx(extra, path, graph_name=os.path.splitext(file_name)[0],
                    description=description)
        written.append(path)
    for path in written:
        print(f"wrote {os.path.normpath(path)} ({os.path.getsize(path)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
