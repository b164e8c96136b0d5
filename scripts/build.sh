#!/usr/bin/env bash
# Shared by ./run.sh and ./test.sh (sourced, from the repository root): installs missing Debian
# packages, configures a Release build with CMake + Ninja and builds it. Sets $build_dir and $jobs.
# Environment: DSINFER_BUILD_DIR (default: build), DSINFER_JOBS (default: all cores),
#              DSINFER_CMAKE_ARGS (extra configure arguments, e.g. -DDSINFER_WITH_CUDA=OFF).
./scripts/install_deps.sh

build_dir=${DSINFER_BUILD_DIR:-build}
jobs=${DSINFER_JOBS:-$(nproc)}
cmake_args=(-S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release)
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    cmake_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
if [[ -n "${DSINFER_CMAKE_ARGS:-}" ]]; then
    read -r -a extra_args <<<"$DSINFER_CMAKE_ARGS"
    cmake_args+=("${extra_args[@]}")
fi
cmake "${cmake_args[@]}"
cmake --build "$build_dir" --parallel "$jobs"
