#!/usr/bin/env bash
# Installs the Debian packages dsinfer needs to build and test, and only those that are missing.
# Safe to run repeatedly: when everything is present it changes nothing and needs no network.
set -euo pipefail

packages=(
    cmake ninja-build g++ pkg-config
    libeigen3-dev libfmt-dev libcli11-dev nlohmann-json3-dev catch2 libbenchmark-dev
    libprotobuf-dev protobuf-compiler libonnx-dev
    python3-onnx python3-numpy python3-sklearn
    # Debian's dnnl CMake package config looks for OpenCL, so it needs these two as well.
    libdnnl-dev ocl-icd-opencl-dev opencl-headers
    clang-14 libclang-rt-14-dev
    # ds-serve (dsinfer::server): REST on Boost.Beast/Asio (header-only) with TLS (OpenSSL),
    # gRPC++ and its code generator; its tests and the example client talk to it over
    # cpp-httplib's client, a Python client from Debian's gRPC tooling and curl.
    libboost-dev libssl-dev libcpp-httplib-dev libgrpc++-dev protobuf-compiler-grpc
    # ds-serve and ds-loadgen link tcmalloc (DSINFER_TOOLS_ALLOCATOR) when it is there.
    libtcmalloc-minimal4
    python3-grpcio python3-grpc-tools curl python3-yaml
)

is_installed() {
    local status
    status=$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) || return 1
    [[ "$status" == "installed" ]]
}

missing=()
for pkg in "${packages[@]}"; do
    is_installed "$pkg" || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
    echo "install_deps: all ${#packages[@]} packages already installed"
    exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "install_deps: missing packages (${missing[*]}) and not root, and sudo is unavailable" >&2
        exit 1
    fi
    sudo_cmd=(sudo)
fi

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"

for pkg in "${missing[@]}"; do
    if ! is_installed "$pkg"; then
        echo "install_deps: $pkg is still not installed" >&2
        exit 1
    fi
done
echo "install_deps: installed ${missing[*]}"
