#!/usr/bin/env bash
# gpu-bundle.sh — packs a build made here for a GPU machine that lacks the Debian packages:
# the stripped test and tool binaries, the shared libraries they need that such a machine does
# not have (protobuf, onnx_proto, oneDNN, fmt), the CUDA plugin, and the ONNX node conformance data, into
# .gpu/bundle.tar.xz (ignored by git). On the GPU machine:
#   tar -xJf .gpu/bundle.tar.xz -C /tmp && scripts/gpu-check.sh RESULTS --prebuilt /tmp/gpu --data /tmp/gpu/data
# Usage: scripts/gpu-bundle.sh [BUILD_DIR] [DATA_DIR]   (build configured with
#        -DDSINFER_CUDA_ARCHITECTURES=90; data default ../shared/onnx-backend-tests)
set -euo pipefail
build=${1:-build}
data=${2:-../shared/onnx-backend-tests}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/gpu/bin" "$stage/gpu/lib" "$stage/gpu/data" .gpu
for t in tests/dsinfer_tests tools/ds-benchmark tools/ds-conformance; do
    strip -o "$stage/gpu/bin/$(basename "$t")" "$build/$t"
done
for lib in $(ldd "$build/tests/dsinfer_tests" "$build/tools/ds-benchmark" |
             awk '/=>/ {print $3}' | grep -E 'protobuf|onnx|dnnl|fmt|OpenCL' | sort -u); do
    cp -L "$lib" "$stage/gpu/lib/"
done
# The CUDA plugin: the loader looks for it in ../lib from the executable (docs/CUDA.md).
strip -o "$stage/gpu/lib/libdsinfer_cuda.so" "$build/lib/libdsinfer_cuda.so"
[[ -d $data/node ]] && cp -r "$data/node" "$stage/gpu/data/"
tar -C "$stage" -cf - gpu | xz -T0 -6 >.gpu/bundle.tar.xz
ls -la .gpu/bundle.tar.xz
