# Every dsinfer build option, in one place.
include(CMakeDependentOption)

set(DSINFER_IS_MAIN_PROJECT OFF)
if(CMAKE_SOURCE_DIR STREQUAL PROJECT_SOURCE_DIR)
  set(DSINFER_IS_MAIN_PROJECT ON)
endif()

# CUDA defaults to on when a toolkit is found (nvcc on PATH or in /usr/local/cuda).
set(_dsinfer_cuda_default OFF)
find_program(_DSINFER_NVCC nvcc HINTS /usr/local/cuda/bin)
if(_DSINFER_NVCC)
  set(_dsinfer_cuda_default ON)
endif()

# oneDNN defaults to on when Debian's libdnnl-dev is installed (scripts/install_deps.sh does).
set(_dsinfer_onednn_default OFF)
if(EXISTS /usr/include/dnnl.hpp OR EXISTS /usr/local/include/dnnl.hpp)
  set(_dsinfer_onednn_default ON)
endif()
option(DSINFER_WITH_ONEDNN "dsinfer: build the oneDNN CPU backend (dsinfer::onednn)" ${_dsinfer_onednn_default})
option(DSINFER_WITH_CUDA "dsinfer: build the CUDA backend (the plugin libdsinfer_cuda.so, dsinfer::cuda)" ${_dsinfer_cuda_default})
set(DSINFER_CUDA_ARCHITECTURES "80;90" CACHE STRING "dsinfer: CUDA architectures to build")
option(DSINFER_BUILD_TESTS "dsinfer: build the test suite" ${DSINFER_IS_MAIN_PROJECT})
option(DSINFER_BUILD_EXAMPLES "dsinfer: build the examples" ${DSINFER_IS_MAIN_PROJECT})
option(DSINFER_BUILD_BENCHMARKS "dsinfer: build the Google Benchmark suites" OFF)
# dsinfer::server and ds-serve: the KServe v2 server over REST (cpp-httplib) and gRPC (gRPC++),
# with TLS (OpenSSL); Debian's libcpp-httplib-dev, libgrpc++-dev, protobuf-compiler-grpc.
option(DSINFER_BUILD_SERVER "dsinfer: build dsinfer::server and ds-serve" ${DSINFER_IS_MAIN_PROJECT})
option(DSINFER_BUILD_TOOLS "dsinfer: build ds-conformance and the other tools" ${DSINFER_IS_MAIN_PROJECT})
option(DSINFER_BUILD_FUZZERS "dsinfer: build libFuzzer targets (clang)" OFF)
option(DSINFER_INSTALL "dsinfer: generate install and export rules" ${DSINFER_IS_MAIN_PROJECT})
option(DSINFER_WARNINGS_AS_ERRORS "dsinfer: treat warnings in dsinfer's own code as errors" OFF)
set(DSINFER_SANITIZE "" CACHE STRING "dsinfer: sanitizers: '', 'address;undefined' or 'thread'")
# ds-serve and ds-loadgen (its in-process comparator) allocate per request on many threads:
# they link Debian's tcmalloc (libtcmalloc-minimal4) when it is installed, as servers are
# commonly run with one; 'system' keeps glibc's. Never under sanitizers (they bring their own).
set(DSINFER_TOOLS_ALLOCATOR "tcmalloc" CACHE STRING
    "dsinfer: the allocator ds-serve and ds-loadgen link: 'tcmalloc' (when installed) or 'system'")
set(DSINFER_ONNX_TESTS_DIR "${PROJECT_SOURCE_DIR}/../shared/onnx-backend-tests" CACHE PATH
    "dsinfer: ONNX backend conformance data (node/, simple/, pytorch-*/)")
