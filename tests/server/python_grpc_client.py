#!/usr/bin/python3
"""A client written by others, unchanged, against ds-serve.

Generates Python stubs from the protocol's .proto with Debian's gRPC tooling
(python3-grpc-tools: `python3 -m grpc_tools.protoc`, run with python3-grpcio), writes a small
model repository (python3-onnx), starts ds-serve on ephemeral localhost ports, and talks to it
with those stubs and with curl (REST, JSON and the binary-tensor extension). Then SIGTERM: the
server must exit 0 after draining.

Usage: python_grpc_client.py --ds-serve PATH --proto PATH
"""

import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time


def write_model(path, scale):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    s = numpy_helper.from_array(np.full([4], scale, dtype=np.float32), "s")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"])], "scale", [x], [y], [s])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ds-serve", required=True)
    ap.add_argument("--proto", required=True)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="dsinfer-pyclient-") as tmp:
        stubs = os.path.join(tmp, "stubs")
        os.makedirs(stubs)
        proto_dir, proto_file = os.path.split(os.path.abspath(args.proto))
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", proto_dir,
                        "--python_out=" + stubs, "--grpc_python_out=" + stubs,
                        os.path.join(proto_dir, proto_file)], check=True)
        sys.path.insert(0, stubs)
        import grpc
        module = os.path.splitext(proto_file)[0]
        pb2 = __import__(module + "_pb2")
        pb2_grpc = __import__(module + "_pb2_grpc")

        repo = os.path.join(tmp, "models")
        write_model(os.path.join(repo, "scale", "1", "model.onnx"), 3.0)
        port_file = os.path.join(tmp, "ports.json")
        server = subprocess.Popen([args.ds_serve, "--model-repository", repo, "--http-port", "0",
                                   "--grpc-port", "0", "--threads", "1", "--port-file", port_file],
                                  stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 60
            while not os.path.exists(port_file):
                if server.poll() is not None:
                    fail("ds-serve exited: " + server.stderr.read())
                if time.time() > deadline:
                    fail("ds-serve did not start within 60 s")
                time.sleep(0.05)
            ports = json.load(open(port_file))

            channel = grpc.insecure_channel("127.0.0.1:%d" % ports["grpc"])
            stub = pb2_grpc.GRPCInferenceServiceStub(channel)
            if not stub.ServerLive(pb2.ServerLiveRequest()).live:
                fail("ServerLive is false")
            if not stub.ServerReady(pb2.ServerReadyRequest()).ready:
                fail("ServerReady is false")
            meta = stub.ServerMetadata(pb2.ServerMetadataRequest())
            if meta.name != "dsinfer" or "binary_tensor_data" not in meta.extensions:
                fail("ServerMetadata: %s" % meta)
            mm = stub.ModelMetadata(pb2.ModelMetadataRequest(name="scale"))
            if [i.name for i in mm.inputs] != ["x"] or list(mm.inputs[0].shape) != [-1, 4]:
                fail("ModelMetadata: %s" % mm)
            if not stub.ModelReady(pb2.ModelReadyRequest(name="scale", version="1")).ready:
                fail("ModelReady is false")

            req = pb2.ModelInferRequest(model_name="scale", id="py-1")
            inp = req.inputs.add(name="x", datatype="FP32", shape=[2, 4])
            req.raw_input_contents.append(struct.pack("<8f", *range(8)))
            resp = stub.ModelInfer(req)
            y = struct.unpack("<8f", resp.raw_output_contents[0])
            if resp.id != "py-1" or list(resp.outputs[0].shape) != [2, 4] or \
                    y != tuple(3.0 * v for v in range(8)):
                fail("ModelInfer (raw): %s %s" % (resp, y))
            req = pb2.ModelInferRequest(model_name="scale")
            inp = req.inputs.add(name="x", datatype="FP32", shape=[1, 4])
            inp.contents.fp32_contents.extend([1, 2, 3, 4])
            y = struct.unpack("<4f", stub.ModelInfer(req).raw_output_contents[0])
            if y != (3.0, 6.0, 9.0, 12.0):
                fail("ModelInfer (typed contents): %s" % (y,))
            try:
                stub.ModelInfer(pb2.ModelInferRequest(model_name="nope"))
                fail("an unknown model was answered")
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND:
                    fail("unknown model: %s" % e.code())

            # curl: JSON, then the binary extension.
            base = "http://127.0.0.1:%d" % ports["http"]
            out = subprocess.run(["curl", "-sS", "-f", base + "/v2/models/scale/infer", "-H",
                                  "Content-Type: application/json", "-d",
                                  '{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],'
                                  '"data":[1,2,3,4]}]}'], capture_output=True, text=True)
            if out.returncode != 0 or json.loads(out.stdout)["outputs"][0]["data"] != [3, 6, 9, 12]:
                fail("curl JSON: %s %s" % (out.stdout, out.stderr))
            header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                             "parameters": {"binary_data_size": 16}}],
                                 "outputs": [{"name": "y", "parameters": {"binary_data": True}}]})
            body = os.path.join(tmp, "body.bin")
            with open(body, "wb") as f:
                f.write(header.encode() + struct.pack("<4f", 1, 2, 3, 4))
            out = subprocess.run(["curl", "-sS", "-f", "-D", "-", base + "/v2/models/scale/infer",
                                  "-H", "Inference-Header-Content-Length: %d" % len(header),
                                  "-H", "Content-Type: application/octet-stream",
                                  "--data-binary", "@" + body], capture_output=True)
            if out.returncode != 0:
                fail("curl binary: %s" % out.stderr)
            head, _, payload = out.stdout.partition(b"\r\n\r\n")
            n = [int(l.split(b":")[1]) for l in head.split(b"\r\n")
                 if l.lower().startswith(b"inference-header-content-length")][0]
            if struct.unpack("<4f", payload[n:]) != (3.0, 6.0, 9.0, 12.0):
                fail("curl binary output: %r" % payload)
            bad = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                                  base + "/v2/models/scale/infer", "-d", "{not json"],
                                 capture_output=True, text=True)
            if bad.stdout != "400":
                fail("malformed JSON got HTTP %s" % bad.stdout)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                rc = server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                fail("ds-serve did not exit within 30 s of SIGTERM")
        if rc != 0:
            fail("ds-serve exited %d after SIGTERM: %s" % (rc, server.stderr.read()))
    print("ok: gRPC stubs from python3-grpc-tools and curl against ds-serve")


if __name__ == "__main__":
    main()
