// cuda/cublaslt_loader.hpp — cuBLASLt, loaded on first use instead of linked (internal).
//
// Purpose: linking libcublasLt makes every process that loads dsinfer pay for it at start-up,
// GPU or not: the dynamic loader maps and relocates the library before main(), about 150 MiB of
// resident memory measured here (CUDA 13), which a CPU-only serving process would carry for
// nothing (BERT-base's weights are 415 MiB). So the library is opened with dlopen when the
// first CUDA device runtime is created (cuda_runtime.cpp) and its entry points are called
// through this table; a process that never asks for a CUDA device never maps it.
//
// The name opened is libcublasLt.so.<CUDA major> (cuBLAS's major version follows the toolkit's),
// found the usual way (LD_LIBRARY_PATH, the ld.so cache), then the toolkit's library directory
// of the build as a fallback. The table's types come from <cublasLt.h> (decltype), so a
// signature that changes in a later toolkit fails to compile instead of being called wrongly.
//
// Threading: load_cublaslt() is thread-safe and loads at most once; the table is immutable
// after a successful load and never unloaded.
#pragma once

#include <cublasLt.h>

#include "dsinfer/status.hpp"

namespace dsinfer::cuda {

/// cuBLASLt's entry points used by dsinfer (the *Init functions of <cublasLt.h> are inline
/// wrappers of the *_internal ones: call those with sizeof the descriptor).
struct CublasLtApi {
    decltype(&::cublasLtCreate) create = nullptr;
    decltype(&::cublasLtDestroy) destroy = nullptr;
    decltype(&::cublasLtGetStatusName) get_status_name = nullptr;
    decltype(&::cublasLtGetStatusString) get_status_string = nullptr;
    decltype(&::cublasLtMatmul) matmul = nullptr;
    decltype(&::cublasLtMatmulAlgoGetHeuristic) matmul_algo_get_heuristic = nullptr;
    decltype(&::cublasLtMatmulDescInit_internal) matmul_desc_init_internal = nullptr;
    decltype(&::cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute = nullptr;
    decltype(&::cublasLtMatmulPreferenceInit_internal) matmul_preference_init_internal = nullptr;
    decltype(&::cublasLtMatmulPreferenceSetAttribute) matmul_preference_set_attribute = nullptr;
    decltype(&::cublasLtMatrixLayoutInit_internal) matrix_layout_init_internal = nullptr;
    decltype(&::cublasLtMatrixLayoutSetAttribute) matrix_layout_set_attribute = nullptr;
};

/// Opens cuBLASLt and resolves the table, once per process. ok, or unavailable naming the
/// library and the loader's reason (the same error on every later call).
Status load_cublaslt() noexcept;

/// The table; only after load_cublaslt() returned ok (asserted in debug builds).
const CublasLtApi& cublaslt() noexcept;

}  // namespace dsinfer::cuda
