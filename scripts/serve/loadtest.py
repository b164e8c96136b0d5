#!/usr/bin/python3
"""Load tests of ds-serve on 127.0.0.1 only, bounded in time (docs/SERVING.md "Measured").

  scripts/serve/loadtest.py --build BUILD --model MLP.onnx throughput [--duration 20]
      In-process submit (ds-loadgen --concurrency C) against REST (wrk, binary form, C
      connections, the Lua script beside this file) and gRPC (dsinfer-serve-client --load,
      C clients), one row per request, the same batching settings, alternating, --repeats
      times; medians and the REST/in-process and gRPC/in-process ratios.
  ... reload [--seconds 60 --every 2]
      poll mode; a new version folder every --every seconds for --seconds while wrk runs:
      prints the non-2xx count and socket errors (the acceptance wants 0 failed requests).
  ... sigterm
      wrk at C connections; SIGTERM after half of --duration: every accepted request must get
      its answer (only 200 or 503 statuses; ds-serve exits 0 with "every accepted request was
      answered").

Settings: --connections 64,256 --max-batch 64 --queue-delay-us 2000 --threads 2 --repeats 3.
Needs wrk (Debian's wrk; installed by this script's caller, not by the build).
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def write_body(path, rows, cols):
    import struct
    header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, cols],
                                     "parameters": {"binary_data_size": rows * cols * 4}}],
                         "parameters": {"binary_data_output": True}}, separators=(",", ":"))
    with open(path, "wb") as f:
        f.write(header.encode())
        f.write(struct.pack("<%df" % (rows * cols), *[((i * 37) % 101) / 101.0 - 0.5
                                                       for i in range(rows * cols)]))
    return len(header)


class Server:
    def __init__(self, build, repo, args, extra=()):
        self.port_file = os.path.join(repo, "..", "ports.json")
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        cmd = [os.path.join(build, "tools", "ds-serve"), "--model-repository", repo,
               "--http-port", "0", "--grpc-port", "0", "--threads", str(args.threads),
               "--max-batch-size", str(args.max_batch), "--max-queue-delay-us",
               str(args.queue_delay_us), "--http-threads", str(args.http_threads),
               "--port-file", self.port_file] + list(extra)
        self.log = open(os.path.join(repo, "..", "ds-serve.log"), "w")
        self.proc = subprocess.Popen(cmd, stderr=self.log)
        deadline = time.time() + 120
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.time() > deadline:
                sys.exit("ds-serve did not start; see " + self.log.name)
            time.sleep(0.05)
        self.ports = json.load(open(self.port_file))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=120)
        self.log.close()
        return rc


def wrk(args, port, connections, seconds, body, header_len, path="/v2/models/mlp/infer"):
    env = dict(os.environ, DSINFER_WRK_BODY=body, DSINFER_WRK_HEADER=str(header_len),
               DSINFER_WRK_PATH=path)
    threads = min(2, connections)
    out = subprocess.run(["wrk", "-t", str(threads), "-c", str(connections), "-d",
                          "%ds" % seconds, "--timeout", "10s", "-s",
                          os.path.join(HERE, "wrk_binary_infer.lua"),
                          "http://127.0.0.1:%d" % port], env=env, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    sys.exit("wrk: " + out.stdout + out.stderr)


def loadgen(args, model, concurrency, seconds):
    out = subprocess.run([os.path.join(args.build, "tools", "ds-loadgen"), "--model", model,
                          "--concurrency", str(concurrency), "--duration", str(seconds),
                          "--max-batch", str(args.max_batch), "--max-queue-delay-us",
                          str(args.queue_delay_us), "--threads", str(args.threads),
                          "--queue", "4096", "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("ds-loadgen: " + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def grpc_load(args, port, concurrency, seconds):
    out = subprocess.run([os.path.join(args.build, "examples", "dsinfer-serve-client"),
                          "--protocol", "grpc", "--port", str(port), "--model", "mlp",
                          "--shape", "1,1024", "--load", "--concurrency", str(concurrency),
                          "--duration", str(seconds), "--json"], capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_repo(tmp, model, version=1):
    repo = os.path.join(tmp, "models")
    d = os.path.join(repo, "mlp", str(version))
    os.makedirs(d, exist_ok=True)
    # A hard link (same file system) or a copy: the repository owns its files.
    try:
        os.link(model, os.path.join(d, "model.onnx"))
    except OSError:
        shutil.copy(model, os.path.join(d, "model.onnx"))
    return repo


def cmd_throughput(args, tmp):
    repo = make_repo(tmp, args.model)
    body = os.path.join(tmp, "body.bin")
    header_len = write_body(body, 1, 1024)
    rows = []
    for c in args.connections:
        runs = {"inproc": [], "rest": [], "grpc": []}
        rest_detail, grpc_detail = [], []
        for r in range(args.repeats):
            lg = loadgen(args, args.model, c, args.duration)
            runs["inproc"].append(lg["throughput"])
            server = Server(args.build, repo, args)
            # Warm-up, as ds-loadgen's: the first batch of each size plans its memory and
            # prepares its kernels.
            wrk(args, server.ports["http"], c, args.warmup, body, header_len)
            w = wrk(args, server.ports["http"], c, args.duration, body, header_len)
            runs["rest"].append(w["requests_per_s"])
            rest_detail.append(w)
            g = grpc_load(args, server.ports["grpc"], c, args.duration)
            runs["grpc"].append(g["requests_per_s"])
            grpc_detail.append(g)
            server.stop()
            print("  c=%d repeat %d: in-process %.0f/s (p99 %.1f ms), REST %.0f/s (p99 %.1f ms, "
                  "non-2xx %d, socket errors %s), gRPC %.0f/s (p99 %.1f ms, errors %d)"
                  % (c, r + 1, lg["throughput"], lg["latency_ms"]["p99"], w["requests_per_s"],
                     w["p99_ms"], w["non_2xx"], w["socket_errors"], g["requests_per_s"],
                     g["p99_ms"], g["errors"]), flush=True)
        med = {k: statistics.median(v) for k, v in runs.items()}
        rows.append({"connections": c, "median": med,
                     "rest_over_inproc": med["rest"] / med["inproc"],
                     "grpc_over_inproc": med["grpc"] / med["inproc"],
                     "rest_p99_ms": statistics.median(w["p99_ms"] for w in rest_detail),
                     "grpc_p99_ms": statistics.median(g["p99_ms"] for g in grpc_detail),
                     "rest_errors": sum(w["non_2xx"] + sum(w["socket_errors"].values())
                                        for w in rest_detail),
                     "grpc_errors": sum(g["errors"] for g in grpc_detail)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def cmd_reload(args, tmp):
    repo = make_repo(tmp, args.model)
    with open(os.path.join(repo, "mlp", "config.json"), "w") as f:
        f.write('{"version_policy":{"latest":1}}')
    body = os.path.join(tmp, "body.bin")
    header_len = write_body(body, 1, 1024)
    server = Server(args.build, repo, args,
                    ["--model-control-mode", "poll", "--repository-poll-secs", "0.5"])
    result = {}

    def run_wrk():
        result["wrk"] = wrk(args, server.ports["http"], args.connections[0], args.seconds + 4,
                            body, header_len)

    t = threading.Thread(target=run_wrk)
    t.start()
    time.sleep(2)
    versions = 1
    end = time.time() + args.seconds
    while time.time() < end:
        time.sleep(args.every)
        versions += 1
        staging = os.path.join(repo, "mlp", ".staging")
        os.makedirs(staging, exist_ok=True)
        try:
            os.link(args.model, os.path.join(staging, "model.onnx"))
        except OSError:
            shutil.copy(args.model, os.path.join(staging, "model.onnx"))
        os.rename(staging, os.path.join(repo, "mlp", str(versions)))  # appears whole
    t.join()
    rc = server.stop()
    log = open(server.log.name).read()
    loaded = log.count("loaded 'mlp' version")
    w = result["wrk"]
    out = {"versions_written": versions - 1, "versions_loaded": loaded,
           "requests": w["requests"], "requests_per_s": w["requests_per_s"],
           "p99_ms": w["p99_ms"], "non_2xx": w["non_2xx"], "socket_errors": w["socket_errors"],
           "by_status": w["by_status"], "exit_status": rc}
    print(json.dumps(out), flush=True)
    return out


def cmd_sigterm(args, tmp):
    repo = make_repo(tmp, args.model)
    body = os.path.join(tmp, "body.bin")
    header_len = write_body(body, 1, 1024)
    server = Server(args.build, repo, args)
    result = {}

    def run_wrk():
        result["wrk"] = wrk(args, server.ports["http"], args.connections[0], args.duration,
                            body, header_len)

    t = threading.Thread(target=run_wrk)
    t.start()
    time.sleep(args.duration / 2)
    rc = server.stop()
    t.join()
    log = open(server.log.name).read()
    w = result["wrk"]
    out = {"exit_status": rc, "every_accepted_answered": "every accepted request was answered" in log,
           "requests": w["requests"], "by_status": w["by_status"],
           "socket_errors": w["socket_errors"]}
    print(json.dumps(out), flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", required=True, help="the MLP (tools/make_models.py --only mlp)")
    ap.add_argument("--connections", default="64,256")
    ap.add_argument("--duration", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3, help="seconds of load before measuring")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--queue-delay-us", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--http-threads", type=int, default=0,
                    help="ds-serve's REST I/O threads (0: its default)")
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("what", choices=["throughput", "reload", "sigterm"])
    args = ap.parse_args()
    args.connections = [int(c) for c in args.connections.split(",")]
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (Debian: apt-get install wrk)")
    args.model = os.path.abspath(args.model)
    with tempfile.TemporaryDirectory(prefix="dsinfer-loadtest-") as tmp:
        {"throughput": cmd_throughput, "reload": cmd_reload, "sigterm": cmd_sigterm}[args.what](args, tmp)


if __name__ == "__main__":
    main()
