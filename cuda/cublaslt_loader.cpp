// cuBLASLt loaded with dlopen on first use: see cublaslt_loader.hpp.
#include "cublaslt_loader.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cassert>
#include <mutex>
#include <string>

#ifndef DSINFER_CUBLASLT_SONAME
#error "DSINFER_CUBLASLT_SONAME (e.g. \"libcublasLt.so.13\") is set by cuda/CMakeLists.txt"
#endif

namespace dsinfer::cuda {
namespace {

CublasLtApi g_api;
std::atomic<bool> g_loaded{false};

/// dlopen by name (the loader's search path), then from the build's toolkit directory.
void* open_library(std::string& why) {
    const char* names[] = {
        DSINFER_CUBLASLT_SONAME,
#ifdef DSINFER_CUBLASLT_FALLBACK_PATH
        DSINFER_CUBLASLT_FALLBACK_PATH,
#endif
    };
    for (const char* name : names) {
        if (void* h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
        const char* e = ::dlerror();
        if (!why.empty()) why += "; ";
        why += e != nullptr ? e : name;
    }
    return nullptr;
}

template <class Fn>
bool resolve(void* lib, const char* name, Fn& out, std::string& why) {
    out = reinterpret_cast<Fn>(::dlsym(lib, name));
    if (out != nullptr) return true;
    if (!why.empty()) why += ", ";
    why += name;
    return false;
}

Status load_once() {
    std::string why;
    void* lib = open_library(why);
    if (lib == nullptr)
        return Status::error(ErrorCode::unavailable, "cannot load cuBLASLt (", DSINFER_CUBLASLT_SONAME,
                             "), which dsinfer's CUDA GEMMs need: ", why);
    CublasLtApi api;
    bool ok = true;
    ok &= resolve(lib, "cublasLtCreate", api.create, why);
    ok &= resolve(lib, "cublasLtDestroy", api.destroy, why);
    ok &= resolve(lib, "cublasLtGetStatusName", api.get_status_name, why);
    ok &= resolve(lib, "cublasLtGetStatusString", api.get_status_string, why);
    ok &= resolve(lib, "cublasLtMatmul", api.matmul, why);
    ok &= resolve(lib, "cublasLtMatmulAlgoGetHeuristic", api.matmul_algo_get_heuristic, why);
    ok &= resolve(lib, "cublasLtMatmulDescInit_internal", api.matmul_desc_init_internal, why);
    ok &= resolve(lib, "cublasLtMatmulDescSetAttribute", api.matmul_desc_set_attribute, why);
    ok &= resolve(lib, "cublasLtMatmulPreferenceInit_internal", api.matmul_preference_init_internal, why);
    ok &= resolve(lib, "cublasLtMatmulPreferenceSetAttribute", api.matmul_preference_set_attribute, why);
    ok &= resolve(lib, "cublasLtMatrixLayoutInit_internal", api.matrix_layout_init_internal, why);
    ok &= resolve(lib, "cublasLtMatrixLayoutSetAttribute", api.matrix_layout_set_attribute, why);
    if (!ok) {
        ::dlclose(lib);
        return Status::error(ErrorCode::unavailable, DSINFER_CUBLASLT_SONAME,
                             " lacks entry points dsinfer calls (a different cuBLAS major version?): ", why);
    }
    g_api = api;  // published by the call_once below; never unloaded
    return Status::ok();
}

}  // namespace

Status load_cublaslt() noexcept {
    static std::once_flag once;
    static Status result = Status::ok();
    try {
        std::call_once(once, [] {
            result = load_once();
            g_loaded.store(result.is_ok(), std::memory_order_release);
        });
    } catch (...) {
        return Status::error(ErrorCode::resource_exhausted, "out of memory loading cuBLASLt");
    }
    return result;
}

const CublasLtApi& cublaslt() noexcept {
    assert(g_loaded.load(std::memory_order_acquire) && "load_cublaslt() first");
    return g_api;
}

}  // namespace dsinfer::cuda
