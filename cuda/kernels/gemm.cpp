// CUDA GEMM kernels on cuBLASLt: MatMul, Gemm, com.dsinfer FusedMatMul / FusedGemm, and
// MatMulInteger (int8 x int8 -> int32, constant B).
//
// Row-major via the transpose trick: row-major Y[M,N] = op(A)[M,K] * op(B)[K,N] is the
// column-major problem Y^T[N,M] = op(B)^T * op(A)^T, so cuBLASLt's "A" is our B and its "B" is
// our A; a row-major buffer read column-major is the transpose, hence no data movement. The
// bias epilogue adds along cuBLASLt's rows, i.e. along our N.
//
// Batching (MatMul): the batch dims (numpy broadcasting) are reduced to strided batches: dims of
// size 1 are dropped, the innermost dims whose A/B strides are linear (including broadcast
// stride 0) merge into one strided-batched cublasLtMatmul, and any remaining outer dims are
// looped (one call per outer index). A right-hand side without batch dims folds A's batch into M
// (one tall GEMM).
//
// Epilogues: bias (along N) + Relu, and GeluTanh (cuBLASLt's GELU is the tanh approximation),
// run as cuBLASLt epilogues; everything else (erf Gelu, LeakyRelu, Sigmoid, Tanh, Clip,
// HardSwish; a bias cuBLASLt cannot add -- FusedMatMul's bias when B is 1-D, or not 16-byte
// aligned -- which then takes the activation along; an epilogue the heuristic rejects) runs as
// one elementwise pass afterwards (gemm_epilogue.cu). Gemm's C: [N]/[1,N] with
// beta = 1 is the bias epilogue, [M,N] is cuBLASLt's C, other broadcasts are written into Y first
// and then accumulated with beta (C = D in place).
//
// Types: f32 (CUBLAS_COMPUTE_32F, or 32F_FAST_TF32 when the engine allows tf32), f16 and bf16
// (32F compute, f32 alpha/beta), int8 (CUBLAS_COMPUTE_32I, "TN" layout: B is transposed at
// creation; N and K multiples of 4, else unsupported). The fused ops take f32, f16 and bf16
// (bias and activation applied in float before the single rounding).
//
// State: constant inputs live on the device from creation, as forms in the engine's weight
// store (the plain copy shared with the executor, "onnx"; int8 B transposed,
// "cuda.gemm.b_transposed"; released_constant_inputs); the heuristic's
// algorithm is cached per problem (shape, strides, alignment, epilogue, workspace) behind a
// mutex; descriptors are rebuilt on the stack per call (the *Init functions; no allocation).
// One cublasLtHandle_t per (thread, device). cuBLASLt is called through cublaslt() (loaded
// with dlopen on first use: cublaslt_loader.hpp).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "ops/activation.hpp"
#include "ops/gemm.hpp"
#include "cublaslt_loader.hpp"
#include "cuda_common.hpp"
#include "dsinfer/ops.hpp"
#include "gemm_epilogue.hpp"  // this directory (not src/kernels/)

namespace dsinfer::cuda {
namespace {

using std::int64_t;

/// cuBLASLt workspace per GEMM node (NVIDIA's recommendation for Hopper), plus slack to align
/// the pointer to 256 bytes.
constexpr std::size_t kLtWorkspaceBytes = std::size_t{32} << 20;
constexpr std::size_t kWorkspaceAlign = 256;
/// cuBLASLt's GELU epilogue is the tanh approximation; used for GeluTanh only. Set to false to
/// run GeluTanh in the elementwise pass instead.
constexpr bool kUseLtGeluEpilogue = true;
/// The bias epilogue wants an aligned bias vector (16 bytes; else the elementwise pass adds it).
constexpr std::uintptr_t kBiasAlign = 16;
/// Bound on cached algorithms per kernel (dynamic shapes); the cache is cleared when exceeded.
constexpr std::size_t kMaxCachedAlgos = 4096;

// ---- errors and handles ---------------------------------------------------------------------

Status lt_status(cublasStatus_t st, const char* what, const std::string& problem) {
    if (st == CUBLAS_STATUS_SUCCESS) return Status::ok();
    // A sticky CUDA error behind a failed launch is reported as the CUDA error (device_lost).
    if (st == CUBLAS_STATUS_EXECUTION_FAILED || st == CUBLAS_STATUS_INTERNAL_ERROR) {
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return cuda_status(e, what);
    }
    ErrorCode code = ErrorCode::internal;
    if (st == CUBLAS_STATUS_ALLOC_FAILED) code = ErrorCode::resource_exhausted;
    if (st == CUBLAS_STATUS_NOT_INITIALIZED) code = ErrorCode::unavailable;
    const char* name = cublaslt().get_status_name(st);
    const char* text = cublaslt().get_status_string(st);
    return Status(code, std::string(what) + ": " + (name ? name : "cuBLAS error") + " (" +
                            (text ? text : "") + ") for " + problem);
}

#define DS_LT_TRY(expr, what, problem)                                                      \
    do {                                                                                    \
        const cublasStatus_t ds_lt_st_ = (expr);                                            \
        if (ds_lt_st_ != CUBLAS_STATUS_SUCCESS) return lt_status(ds_lt_st_, what, problem); \
    } while (0)

/// The cublasLt handles of one thread, one per device; destroyed when the thread exits.
struct LtHandles {
    std::vector<std::pair<int, cublasLtHandle_t>> handles;
    LtHandles() = default;
    LtHandles(const LtHandles&) = delete;
    LtHandles& operator=(const LtHandles&) = delete;
    ~LtHandles() {
        for (auto& [dev, h] : handles)
            if (h != nullptr && !device_lost(dev)) (void)cublaslt().destroy(h);
    }
};

Status lt_handle(int device, cublasLtHandle_t& out) {
    DSINFER_RETURN_IF_ERROR(load_cublaslt());  // every cuBLASLt call comes after a handle
    thread_local LtHandles cache;
    for (const auto& [dev, h] : cache.handles)
        if (dev == device) {
            out = h;
            return Status::ok();
        }
    cache.handles.reserve(cache.handles.size() + 1);  // may throw: before creating the handle
    cublasLtHandle_t h = nullptr;
    DS_LT_TRY(cublaslt().create(&h), "cublasLtCreate", "device " + std::to_string(device));
    cache.handles.emplace_back(device, h);
    out = h;
    return Status::ok();
}

// ---- problem description --------------------------------------------------------------------

/// One (strided-batched) row-major GEMM: Y[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C,
/// C (when read) with Y's layout. Strides in elements between consecutive batch matrices.
struct Problem {
    DType dtype = DType::f32;  ///< A and B; Y/C/bias have it too except int8 (Y int32)
    int64_t m = 0, n = 0, k = 0;
    bool ta = false, tb = false;
    int64_t batch = 1, sa = 0, sb = 0, sy = 0;

    std::string to_string() const {
        std::string s = "GEMM M=" + std::to_string(m) + " N=" + std::to_string(n) +
                        " K=" + std::to_string(k) + " (" + std::string(dtype_name(dtype)) + ")";
        if (ta || tb)
            s += std::string(" transA=") + (ta ? "1" : "0") + " transB=" + (tb ? "1" : "0");
        if (batch > 1)
            s += " batch=" + std::to_string(batch) + " strides A=" + std::to_string(sa) +
                 " B=" + std::to_string(sb) + " Y=" + std::to_string(sy);
        return s;
    }
};

struct AlgoKey {
    int dtype = 0;
    int compute = 0;
    int64_t m = 0, n = 0, k = 0;
    int ta = 0, tb = 0;
    int64_t batch = 1, sa = 0, sb = 0, sy = 0;
    unsigned epilogue = 0;
    unsigned align = 0, bias_align = 0;
    std::uint64_t workspace = 0;
    auto operator<=>(const AlgoKey&) const = default;
};

struct AlgoEntry {
    cublasLtMatmulAlgo_t algo{};
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;  ///< the one the algo was found for
};

cudaDataType_t ab_type(DType dt) {
    switch (dt) {
        case DType::f16: return CUDA_R_16F;
        case DType::bf16: return CUDA_R_16BF;
        case DType::i8: return CUDA_R_8I;
        default: return CUDA_R_32F;
    }
}
cudaDataType_t cd_type(DType dt) { return dt == DType::i8 ? CUDA_R_32I : ab_type(dt); }
cudaDataType_t scale_type(DType dt) { return dt == DType::i8 ? CUDA_R_32I : CUDA_R_32F; }
std::size_t out_elem_size(DType dt) { return dt == DType::i8 ? 4 : dtype_size(dt); }

/// Largest power of two (<= 256) dividing v; 256 for 0.
unsigned align_of(std::uint64_t v) noexcept {
    if (v == 0) return 256;
    const std::uint64_t low = v & (~v + 1);
    return low >= 256 ? 256u : static_cast<unsigned>(low);
}
unsigned align_of(const void* p) noexcept {
    return align_of(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)));
}

/// The descriptors of one call, on the stack (cublasLt*Init: no allocation).
struct LtDescs {
    cublasLtMatmulDescOpaque_t op{};
    cublasLtMatrixLayoutOpaque_t a{}, b{}, c{};  // cuBLASLt's A (our B), B (our A), C = D
};

Status set_batch(cublasLtMatrixLayout_t l, int64_t batch, int64_t stride, const Problem& p) {
    if (batch <= 1) return Status::ok();
    const std::int32_t count = static_cast<std::int32_t>(batch);
    DS_LT_TRY(cublaslt().matrix_layout_set_attribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                               sizeof(count)),
              "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)", p.to_string());
    DS_LT_TRY(cublaslt().matrix_layout_set_attribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                               &stride, sizeof(stride)),
              "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)", p.to_string());
    return Status::ok();
}

Status make_descs(const Problem& p, cublasComputeType_t compute, cublasLtEpilogue_t epilogue,
                  const void* bias, LtDescs& d) {
    DS_LT_TRY(cublaslt().matmul_desc_init_internal(&d.op, sizeof(d.op), compute, scale_type(p.dtype)), "cublasLtMatmulDescInit",
              p.to_string());
    // cuBLASLt's A = our B: row-major [K,N] is column-major [N,K] (op N); transB: row-major
    // [N,K] is column-major [K,N] (op T).
    const std::int32_t op_a = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const std::int32_t op_b = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    DS_LT_TRY(
        cublaslt().matmul_desc_set_attribute(&d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
        "cublasLtMatmulDescSetAttribute(TRANSA)", p.to_string());
    DS_LT_TRY(
        cublaslt().matmul_desc_set_attribute(&d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
        "cublasLtMatmulDescSetAttribute(TRANSB)", p.to_string());
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        const std::uint32_t epi = static_cast<std::uint32_t>(epilogue);
        DS_LT_TRY(
            cublaslt().matmul_desc_set_attribute(&d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
            "cublasLtMatmulDescSetAttribute(EPILOGUE)", p.to_string());
        if ((static_cast<unsigned>(epilogue) & static_cast<unsigned>(CUBLASLT_EPILOGUE_BIAS)) !=
            0) {
            DS_LT_TRY(cublaslt().matmul_desc_set_attribute(&d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof(bias)),
                      "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", p.to_string());
        }
    }
    const auto rows_a = static_cast<std::uint64_t>(p.tb ? p.k : p.n);
    const auto cols_a = static_cast<std::uint64_t>(p.tb ? p.n : p.k);
    const auto rows_b = static_cast<std::uint64_t>(p.ta ? p.m : p.k);
    const auto cols_b = static_cast<std::uint64_t>(p.ta ? p.k : p.m);
    DS_LT_TRY(cublaslt().matrix_layout_init_internal(&d.a, sizeof(d.a), ab_type(p.dtype), rows_a, cols_a,
                                       static_cast<int64_t>(rows_a)),
              "cublasLtMatrixLayoutInit(B)", p.to_string());
    DS_LT_TRY(cublaslt().matrix_layout_init_internal(&d.b, sizeof(d.b), ab_type(p.dtype), rows_b, cols_b,
                                       static_cast<int64_t>(rows_b)),
              "cublasLtMatrixLayoutInit(A)", p.to_string());
    DS_LT_TRY(cublaslt().matrix_layout_init_internal(&d.c, sizeof(d.c), cd_type(p.dtype), static_cast<std::uint64_t>(p.n),
                                       static_cast<std::uint64_t>(p.m), p.n),
              "cublasLtMatrixLayoutInit(Y)", p.to_string());
    DSINFER_RETURN_IF_ERROR(set_batch(&d.a, p.batch, p.sb, p));
    DSINFER_RETURN_IF_ERROR(set_batch(&d.b, p.batch, p.sa, p));
    DSINFER_RETURN_IF_ERROR(set_batch(&d.c, p.batch, p.sy, p));
    return Status::ok();
}

/// The bias/activation split between cuBLASLt's epilogue and the elementwise pass.
struct EpiloguePlan {
    cublasLtEpilogue_t lt = CUBLASLT_EPILOGUE_DEFAULT;  ///< wanted from cuBLASLt
    const void* lt_bias = nullptr;                      ///< bias along N for lt
};

bool lt_has_bias(cublasLtEpilogue_t e) {
    return (static_cast<unsigned>(e) & static_cast<unsigned>(CUBLASLT_EPILOGUE_BIAS)) != 0;
}

// ---- the kernel -----------------------------------------------------------------------------

enum class OpKind : std::uint8_t { matmul, gemm, matmul_integer };

struct Config {
    OpKind kind = OpKind::matmul;
    bool fused = false;  ///< FusedMatMul / FusedGemm: input 2 is Bias / C, activation
    bool ta = false, tb = false;
    float alpha = 1.f, beta = 1.f;
    EpilogueActParams act;
    bool allow_tf32 = false;
    int device = 0;
    int64_t int_k = 0, int_n = 0;  ///< MatMulInteger: the constant B's [K, N]
};

/// Device forms of constant inputs (index = input slot; empty when not constant).
struct Constants {
    std::array<DeviceConstant, 3> buf;
    std::uint64_t released = 0;
};

class LtGemmKernel final : public CudaKernel {
public:
    LtGemmKernel(std::unique_ptr<Kernel> ref, Config cfg, Constants&& consts)
        : CudaKernel(std::move(ref)), cfg_(cfg), consts_(std::move(consts)) {}

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(CudaKernel::prepare(ctx));
        const auto& spec = ctx.output_spec(0);
        if (spec.set && spec.shape.num_elements() > 0)
            ctx.set_workspace(kLtWorkspaceBytes + kWorkspaceAlign);
        return Status::ok();
    }

    std::uint64_t released_constant_inputs() const noexcept override { return consts_.released; }

    Status run(RunContext& ctx) const noexcept override {
        try {
            switch (cfg_.kind) {
                case OpKind::matmul: return run_matmul(ctx);
                case OpKind::gemm: return run_gemm(ctx);
                case OpKind::matmul_integer: return run_matmul_integer(ctx);
            }
            return Status(ErrorCode::internal, "unknown GEMM kind");
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of host memory in a cuBLASLt GEMM");
        } catch (...) {
            return Status(ErrorCode::internal, "unexpected exception in a cuBLASLt GEMM");
        }
    }

private:
    // ---- helpers ----

    const void* input_ptr(const RunContext& ctx, int i) const noexcept {
        if (i < 3 && consts_.buf[static_cast<std::size_t>(i)])
            return consts_.buf[static_cast<std::size_t>(i)].get();
        return ctx.input(i).raw;
    }

    cublasComputeType_t compute_type(DType dt) const noexcept {
        if (dt == DType::i8) return CUBLAS_COMPUTE_32I;
        if (dt == DType::f32 && cfg_.allow_tf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
        return CUBLAS_COMPUTE_32F;
    }

    /// The Lt epilogue for `bias` (null: none; along_n: it runs along N, so cuBLASLt can add
    /// it) and the configured activation; what it does not cover is left to the elementwise
    /// pass. A bias cuBLASLt cannot add keeps the activation out of cuBLASLt too (the bias
    /// comes first).
    EpiloguePlan plan_epilogue(DType dt, const void* bias, bool along_n) const noexcept {
        EpiloguePlan e;
        if (dt == DType::i8) return e;
        if (bias != nullptr &&
            (!along_n || reinterpret_cast<std::uintptr_t>(bias) % kBiasAlign != 0))
            return e;
        const bool has_bias = bias != nullptr;
        const EpilogueAct a = cfg_.act.kind;
        if (a == EpilogueAct::relu)
            e.lt = has_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
        else if (a == EpilogueAct::gelu_tanh && kUseLtGeluEpilogue)
            e.lt = has_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
        else if (has_bias)
            e.lt = CUBLASLT_EPILOGUE_BIAS;
        if (has_bias) e.lt_bias = bias;
        return e;
    }

    /// The algorithm for `p` with epilogue `want` (or, when the heuristic offers none for it,
    /// without an epilogue: `entry.epilogue` tells which).
    Status find_algo(cublasLtHandle_t h, const Problem& p, cublasLtEpilogue_t want,
                     const void* bias, unsigned align, std::size_t ws_bytes,
                     AlgoEntry& entry) const {
        AlgoKey key;
        key.dtype = static_cast<int>(p.dtype);
        key.compute = static_cast<int>(compute_type(p.dtype));
        key.m = p.m;
        key.n = p.n;
        key.k = p.k;
        key.ta = p.ta;
        key.tb = p.tb;
        key.batch = p.batch;
        key.sa = p.sa;
        key.sb = p.sb;
        key.sy = p.sy;
        key.epilogue = static_cast<unsigned>(want);
        key.align = align;
        key.bias_align = lt_has_bias(want) ? align_of(bias) : 0;
        key.workspace = ws_bytes;
        {
            std::lock_guard<std::mutex> lock(mu_);
            auto it = cache_.find(key);
            if (it != cache_.end()) {
                entry = it->second;
                return Status::ok();
            }
        }
        Status st = query_heuristic(h, p, want, bias, align, ws_bytes, entry.algo);
        entry.epilogue = want;
        if (!st.is_ok() && want != CUBLASLT_EPILOGUE_DEFAULT) {
            // The epilogue is not available for this problem: plain GEMM + elementwise pass.
            st = query_heuristic(h, p, CUBLASLT_EPILOGUE_DEFAULT, nullptr, align, ws_bytes,
                                 entry.algo);
            entry.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        }
        DSINFER_RETURN_IF_ERROR(st);
        std::lock_guard<std::mutex> lock(mu_);
        if (cache_.size() >= kMaxCachedAlgos) cache_.clear();
        cache_.emplace(key, entry);
        return Status::ok();
    }

    Status query_heuristic(cublasLtHandle_t h, const Problem& p, cublasLtEpilogue_t epi,
                           const void* bias, unsigned align, std::size_t ws_bytes,
                           cublasLtMatmulAlgo_t& algo) const {
        LtDescs d;
        DSINFER_RETURN_IF_ERROR(make_descs(p, compute_type(p.dtype), epi, bias, d));
        const std::string what = p.to_string();
        cublasLtMatmulPreferenceOpaque_t pref{};
        DS_LT_TRY(cublaslt().matmul_preference_init_internal(&pref, sizeof(pref)), "cublasLtMatmulPreferenceInit", what);
        const std::uint64_t ws = ws_bytes;
        DS_LT_TRY(cublaslt().matmul_preference_set_attribute(
                      &pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                  "cublaslt().matmul_preference_set_attribute(MAX_WORKSPACE_BYTES)", what);
        const std::uint32_t al = align;
        for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
            DS_LT_TRY(cublaslt().matmul_preference_set_attribute(&pref, attr, &al, sizeof(al)),
                      "cublaslt().matmul_preference_set_attribute(MIN_ALIGNMENT)", what);
        constexpr int kRequested = 4;
        std::array<cublasLtMatmulHeuristicResult_t, kRequested> results{};
        int count = 0;
        DS_LT_TRY(cublaslt().matmul_algo_get_heuristic(h, &d.op, &d.a, &d.b, &d.c, &d.c, &pref,
                                                 kRequested, results.data(), &count),
                  "cublasLtMatmulAlgoGetHeuristic",
                  what + " epilogue " + std::to_string(static_cast<unsigned>(epi)));
        for (int i = 0; i < count; ++i) {
            if (results[static_cast<std::size_t>(i)].state == CUBLAS_STATUS_SUCCESS &&
                results[static_cast<std::size_t>(i)].workspaceSize <= ws_bytes) {
                algo = results[static_cast<std::size_t>(i)].algo;
                return Status::ok();
            }
        }
        return Status(ErrorCode::internal,
                      "cublasLtMatmulAlgoGetHeuristic found no algorithm for " + what +
                          " (epilogue " + std::to_string(static_cast<unsigned>(epi)) +
                          ", alignment " + std::to_string(align) + " bytes, workspace " +
                          std::to_string(ws_bytes) + " bytes)");
    }

    /// One cublasLtMatmul with a found algorithm. `c` is read when beta != 0 (Y's layout).
    Status matmul(cublasLtHandle_t h, const Problem& p, const AlgoEntry& e, const void* bias,
                  const void* alpha, const void* beta, const void* a, const void* b, const void* c,
                  void* y, void* ws, std::size_t ws_bytes, cudaStream_t stream) const {
        LtDescs d;
        DSINFER_RETURN_IF_ERROR(make_descs(p, compute_type(p.dtype), e.epilogue, bias, d));
        DS_LT_TRY(cublaslt().matmul(h, &d.op, alpha, b, &d.a, a, &d.b, beta, c, &d.c, y, &d.c, &e.algo,
                                 ws, ws_bytes, stream),
                  "cublasLtMatmul", p.to_string());
        return Status::ok();
    }

    static void workspace_of(const RunContext& ctx, void*& ws, std::size_t& bytes) noexcept {
        ws = nullptr;
        bytes = 0;
        const auto base = reinterpret_cast<std::uintptr_t>(ctx.workspace());
        if (base == 0 || ctx.workspace_bytes() < kWorkspaceAlign) return;
        const std::uintptr_t aligned =
            (base + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
        const std::size_t lost = aligned - base;
        ws = reinterpret_cast<void*>(aligned);
        bytes = std::min(ctx.workspace_bytes() - lost, kLtWorkspaceBytes);
    }

    /// After the GEMM(s): the bias (when cuBLASLt did not add it) and the activation (when
    /// cuBLASLt did not apply it), over all of Y.
    Status post_pass(const RunContext& ctx, DType dt, cublasLtEpilogue_t done, const void* bias,
                     int64_t bias_len) const {
        EpilogueActParams act = cfg_.act;
        const unsigned d = static_cast<unsigned>(done);
        if ((act.kind == EpilogueAct::relu && (d & CUBLASLT_EPILOGUE_RELU) != 0) ||
            (act.kind == EpilogueAct::gelu_tanh && (d & CUBLASLT_EPILOGUE_GELU) != 0))
            act.kind = EpilogueAct::none;
        if (lt_has_bias(done)) bias = nullptr;
        if (bias == nullptr && act.kind == EpilogueAct::none) return Status::ok();
        const TensorView& y = ctx.output(0);
        return apply_activation(y.raw, dt, y.num_elements(), bias, bias_len, act, stream_of(ctx));
    }

    // ---- MatMul / FusedMatMul ----

    Status run_matmul(RunContext& ctx) const {
        const TensorView& av = ctx.input(0);
        const TensorView& bv = ctx.input(1);
        const TensorView& yv = ctx.output(0);
        const DType dt = av.dtype;
        if (yv.num_elements() == 0) return Status::ok();
        const Shape& as = av.shape;
        const Shape& bs = bv.shape;
        const int ra = as.rank(), rb = bs.rank();
        if (ra < 1 || rb < 1)
            return Status(ErrorCode::invalid_argument, "MatMul inputs must have rank >= 1");
        const int64_t m = ra == 1 ? 1 : as[ra - 2];
        const int64_t k = as[ra - 1];
        const int64_t n = rb == 1 ? 1 : bs[rb - 1];
        const int64_t kb = rb == 1 ? bs[0] : bs[rb - 2];
        if (k != kb)
            return Status(ErrorCode::invalid_argument, "MatMul inner dimensions differ: " +
                                                           as.to_string() + " x " + bs.to_string());
        const std::size_t es = dtype_size(dt);
        cudaStream_t stream = stream_of(ctx);
        const char* a = static_cast<const char*>(input_ptr(ctx, 0));
        const char* b = static_cast<const char*>(input_ptr(ctx, 1));
        char* y = static_cast<char*>(yv.raw);

        // FusedMatMul's Bias runs over the output's last dim: N when B is a matrix (the Lt
        // epilogue can add it), else (B 1-D) the elementwise pass does.
        const void* bias = nullptr;
        int64_t bias_len = 0;
        if (cfg_.fused && ctx.has_input(2)) {
            bias = input_ptr(ctx, 2);
            bias_len = ctx.input(2).num_elements();
        }
        const bool bias_along_n = bias != nullptr && rb >= 2 && bias_len == n;

        if (k == 0) {  // empty sum: zeros, then bias and activation
            DS_CUDA_TRY(cudaMemsetAsync(y, 0, yv.num_bytes(), stream),
                        "MatMul (K = 0) cudaMemsetAsync");
            return post_pass(ctx, dt, CUBLASLT_EPILOGUE_DEFAULT, bias, bias_len);
        }

        // Batch dims: right-aligned broadcast of A's and B's leading dims, size-1 dims dropped.
        const int nba = std::max(ra - 2, 0), nbb = std::max(rb - 2, 0);
        const int nb = std::max(nba, nbb);
        std::array<int64_t, kMaxRank> stra{}, strb{};
        {
            int64_t acc = m * k;
            for (int i = nba - 1; i >= 0; --i) {
                stra[static_cast<std::size_t>(i)] = acc;
                acc *= as[i];
            }
            acc = k * n;
            for (int i = nbb - 1; i >= 0; --i) {
                strb[static_cast<std::size_t>(i)] = acc;
                acc *= bs[i];
            }
        }
        std::array<int64_t, kMaxRank> dim{}, sa{}, sb{};
        int nd = 0;
        for (int d = 0; d < nb; ++d) {
            const int ia = d - (nb - nba), ib = d - (nb - nbb);
            const int64_t da = ia >= 0 ? as[ia] : 1, db = ib >= 0 ? bs[ib] : 1;
            const int64_t od = da == 1 ? db : da;
            if (od == 0) return Status::ok();
            if (od == 1) continue;
            if ((da != 1 && da != od) || (db != 1 && db != od))
                return Status(ErrorCode::invalid_argument,
                              "MatMul batch dimensions of " + as.to_string() + " and " +
                                  bs.to_string() + " do not broadcast");
            dim[static_cast<std::size_t>(nd)] = od;
            sa[static_cast<std::size_t>(nd)] = da == 1 ? 0 : stra[static_cast<std::size_t>(ia)];
            sb[static_cast<std::size_t>(nd)] = db == 1 ? 0 : strb[static_cast<std::size_t>(ib)];
            ++nd;
        }
        // Merge the innermost linear dims into one strided batch; the rest are looped.
        Problem p;
        p.dtype = dt;
        p.m = m;
        p.n = n;
        p.k = k;
        int outer = nd;  // dims [0, outer) are looped
        if (nd > 0) {
            outer = nd - 1;
            int64_t count = dim[static_cast<std::size_t>(outer)];
            const int64_t gsa = sa[static_cast<std::size_t>(outer)];
            const int64_t gsb = sb[static_cast<std::size_t>(outer)];
            while (outer > 0 && sa[static_cast<std::size_t>(outer - 1)] == gsa * count &&
                   sb[static_cast<std::size_t>(outer - 1)] == gsb * count) {
                --outer;
                count *= dim[static_cast<std::size_t>(outer)];
            }
            p.batch = count;
            p.sa = gsa;
            p.sb = gsb;
            p.sy = m * n;
            if (outer == 0 && gsb == 0 && gsa == m * k) {  // B shared: fold the batch into M
                p.m = count * m;
                p.batch = 1;
                p.sa = p.sb = p.sy = 0;
            }
        }
        if (p.batch > 0x7fffffff)
            return Status(ErrorCode::unsupported, "MatMul batch of " + std::to_string(p.batch) +
                                                      " matrices exceeds cuBLASLt's limit");
        // One alignment for every call of the loop (base pointers and all byte strides), so
        // that one algorithm serves them all.
        unsigned align = std::min({align_of(a), align_of(b), align_of(y)});
        if (p.batch > 1)
            align = std::min({align, align_of(static_cast<std::uint64_t>(p.sa) * es),
                              align_of(static_cast<std::uint64_t>(p.sb) * es),
                              align_of(static_cast<std::uint64_t>(p.sy) * es)});
        for (int d = 0; d < outer; ++d)
            align = std::min(
                {align, align_of(static_cast<std::uint64_t>(sa[static_cast<std::size_t>(d)]) * es),
                 align_of(static_cast<std::uint64_t>(sb[static_cast<std::size_t>(d)]) * es)});
        if (outer > 0)
            align = std::min(align, align_of(static_cast<std::uint64_t>(p.batch * m * n) * es));

        cublasLtHandle_t h = nullptr;
        DSINFER_RETURN_IF_ERROR(lt_handle(cfg_.device, h));
        void* ws = nullptr;
        std::size_t ws_bytes = 0;
        workspace_of(ctx, ws, ws_bytes);
        const EpiloguePlan plan = plan_epilogue(dt, bias, bias_along_n);
        AlgoEntry entry;
        DSINFER_RETURN_IF_ERROR(find_algo(h, p, plan.lt, plan.lt_bias, align, ws_bytes, entry));
        const float one = 1.f, zero = 0.f;
        const void* lt_bias = lt_has_bias(entry.epilogue) ? plan.lt_bias : nullptr;

        int64_t outer_total = 1;
        for (int d = 0; d < outer; ++d) outer_total *= dim[static_cast<std::size_t>(d)];
        std::array<int64_t, kMaxRank> idx{};
        const int64_t y_step = p.batch * m * n;  // elements of Y per outer index
        for (int64_t o = 0; o < outer_total; ++o) {
            int64_t oa = 0, ob = 0;
            for (int d = 0; d < outer; ++d) {
                oa += idx[static_cast<std::size_t>(d)] * sa[static_cast<std::size_t>(d)];
                ob += idx[static_cast<std::size_t>(d)] * sb[static_cast<std::size_t>(d)];
            }
            char* yo = y + static_cast<std::size_t>(o * y_step) * es;
            DSINFER_RETURN_IF_ERROR(
                matmul(h, p, entry, lt_bias, &one, &zero, a + static_cast<std::size_t>(oa) * es,
                       b + static_cast<std::size_t>(ob) * es, yo, yo, ws, ws_bytes, stream));
            for (int d = outer - 1; d >= 0; --d) {  // next outer index (row-major)
                if (++idx[static_cast<std::size_t>(d)] < dim[static_cast<std::size_t>(d)]) break;
                idx[static_cast<std::size_t>(d)] = 0;
            }
        }
        return post_pass(ctx, dt, entry.epilogue, bias, bias_len);
    }

    // ---- Gemm / FusedGemm ----

    Status run_gemm(RunContext& ctx) const {
        const TensorView& av = ctx.input(0);
        const TensorView& bv = ctx.input(1);
        const TensorView& yv = ctx.output(0);
        const DType dt = av.dtype;
        if (yv.num_elements() == 0) return Status::ok();
        if (av.shape.rank() != 2 || bv.shape.rank() != 2 || yv.shape.rank() != 2)
            return Status(ErrorCode::invalid_argument, "Gemm inputs A and B must be 2-D");
        const int64_t m = yv.shape[0], n = yv.shape[1];
        const int64_t k = cfg_.ta ? av.shape[0] : av.shape[1];
        cudaStream_t stream = stream_of(ctx);
        const void* a = input_ptr(ctx, 0);
        const void* b = input_ptr(ctx, 1);
        void* y = yv.raw;

        // C: ignored when beta == 0 (as the reference does).
        const bool has_c = ctx.has_input(2) && cfg_.beta != 0.f;
        const void* c = has_c ? input_ptr(ctx, 2) : nullptr;
        int64_t cm = 1, cn = 1;
        if (has_c) {
            const Shape& cs = ctx.input(2).shape;
            const int r = cs.rank();
            if (r > 2)
                return Status(ErrorCode::invalid_argument, "Gemm input C must have rank <= 2");
            cm = r == 2 ? cs[0] : 1;
            cn = r >= 1 ? cs[r - 1] : 1;
            if (!((cm == 1 || cm == m) && (cn == 1 || cn == n)))
                return Status(ErrorCode::invalid_argument,
                              "Gemm input C of shape " + cs.to_string() +
                                  " cannot be broadcast to [" + std::to_string(m) + "," +
                                  std::to_string(n) + "]");
        }

        if (k == 0) {  // Y = beta * C (or zeros), then the activation
            DSINFER_RETURN_IF_ERROR(fill_broadcast(y, dt, m, n, c, cm, cn, cfg_.beta, stream));
            return post_pass(ctx, dt, CUBLASLT_EPILOGUE_DEFAULT, nullptr, 0);
        }

        Problem p;
        p.dtype = dt;
        p.m = m;
        p.n = n;
        p.k = k;
        p.ta = cfg_.ta;
        p.tb = cfg_.tb;

        // How C enters: a bias along N (beta = 1), cuBLASLt's C ([M,N]), or broadcast into Y.
        const void* bias_along_n = nullptr;
        const void* c_mat = y;  // what cuBLASLt reads as C (unused when beta_eff == 0)
        float beta_eff = 0.f;
        if (has_c) {
            if (cfg_.beta == 1.f && cm == 1 && cn == n &&
                reinterpret_cast<std::uintptr_t>(c) % kBiasAlign == 0) {
                bias_along_n = c;
            } else if (cm == m && cn == n) {
                c_mat = c;
                beta_eff = cfg_.beta;
            } else {
                DSINFER_RETURN_IF_ERROR(fill_broadcast(y, dt, m, n, c, cm, cn, 1.f, stream));
                beta_eff = cfg_.beta;
            }
        }
        const unsigned align = std::min({align_of(a), align_of(b), align_of(y), align_of(c_mat)});
        cublasLtHandle_t h = nullptr;
        DSINFER_RETURN_IF_ERROR(lt_handle(cfg_.device, h));
        void* ws = nullptr;
        std::size_t ws_bytes = 0;
        workspace_of(ctx, ws, ws_bytes);
        const EpiloguePlan plan = plan_epilogue(dt, bias_along_n, true);
        AlgoEntry entry;
        DSINFER_RETURN_IF_ERROR(find_algo(h, p, plan.lt, plan.lt_bias, align, ws_bytes, entry));
        const void* lt_bias = lt_has_bias(entry.epilogue) ? plan.lt_bias : nullptr;
        const float alpha = cfg_.alpha;
        DSINFER_RETURN_IF_ERROR(
            matmul(h, p, entry, lt_bias, &alpha, &beta_eff, a, b, c_mat, y, ws, ws_bytes, stream));
        // A bias-form C the epilogue did not take is added by the elementwise pass.
        return post_pass(ctx, dt, entry.epilogue, bias_along_n, n);
    }

    // ---- MatMulInteger (int8, constant B pre-transposed to [N, K]) ----

    Status run_matmul_integer(RunContext& ctx) const {
        const TensorView& av = ctx.input(0);
        const TensorView& yv = ctx.output(0);
        if (yv.num_elements() == 0) return Status::ok();
        const Shape& as = av.shape;
        if (as.rank() < 1)
            return Status(ErrorCode::invalid_argument, "MatMulInteger A must have rank >= 1");
        const int64_t k = as[as.rank() - 1];
        const int64_t n = cfg_.int_n;
        if (k != cfg_.int_k)
            return Status(ErrorCode::invalid_argument,
                          "MatMulInteger inner dimensions differ: A " + as.to_string() +
                              ", B has K=" + std::to_string(cfg_.int_k));
        cudaStream_t stream = stream_of(ctx);
        void* y = yv.raw;
        if (k == 0) {
            DS_CUDA_TRY(cudaMemsetAsync(y, 0, yv.num_bytes(), stream),
                        "MatMulInteger (K = 0) cudaMemsetAsync");
            return Status::ok();
        }
        Problem p;
        p.dtype = DType::i8;
        p.m = av.num_elements() / k;  // A's batch folded into M (B is 2-D)
        p.n = n;
        p.k = k;
        p.tb = true;  // B^T stored [N, K]
        const void* a = av.raw;
        const void* bt = consts_.buf[1].get();
        const unsigned align = std::min({align_of(a), align_of(bt), align_of(y)});
        if (align < 4)
            return Status(ErrorCode::internal,
                          "MatMulInteger: int8 GEMM needs 4-byte aligned buffers");
        cublasLtHandle_t h = nullptr;
        DSINFER_RETURN_IF_ERROR(lt_handle(cfg_.device, h));
        void* ws = nullptr;
        std::size_t ws_bytes = 0;
        workspace_of(ctx, ws, ws_bytes);
        AlgoEntry entry;
        DSINFER_RETURN_IF_ERROR(
            find_algo(h, p, CUBLASLT_EPILOGUE_DEFAULT, nullptr, align, ws_bytes, entry));
        const std::int32_t one = 1, zero = 0;
        return matmul(h, p, entry, nullptr, &one, &zero, a, bt, y, y, ws, ws_bytes, stream);
    }

    Config cfg_;
    Constants consts_;
    mutable std::mutex mu_;
    mutable std::map<AlgoKey, AlgoEntry> cache_;
};

// ---- factories --------------------------------------------------------------------------------

EpilogueActParams to_epilogue(const detail::ActivationSpec& s) {
    EpilogueActParams p;
    p.alpha = s.alpha;
    p.beta = s.beta;
    switch (s.kind) {
        case detail::Activation::none: p.kind = EpilogueAct::none; break;
        case detail::Activation::relu: p.kind = EpilogueAct::relu; break;
        case detail::Activation::leaky_relu: p.kind = EpilogueAct::leaky_relu; break;
        case detail::Activation::sigmoid: p.kind = EpilogueAct::sigmoid; break;
        case detail::Activation::tanh: p.kind = EpilogueAct::tanh; break;
        case detail::Activation::clip: p.kind = EpilogueAct::clip; break;
        case detail::Activation::hard_swish: p.kind = EpilogueAct::hard_swish; break;
        case detail::Activation::gelu: p.kind = EpilogueAct::gelu; break;
        case detail::Activation::gelu_tanh: p.kind = EpilogueAct::gelu_tanh; break;
    }
    return p;
}

bool is_float_type(DType dt) { return dt == DType::f32 || dt == DType::f16 || dt == DType::bf16; }

/// The device copies of the constant float inputs among `slots` (of a float type: the weight
/// store's, shared with the executor and other kernels), marked released.
StatusOr<Constants> upload_constants(const KernelCreateContext& ctx,
                                     std::initializer_list<int> slots) {
    Constants c;
    std::shared_ptr<WeightStore> store;
    for (int i : slots) {
        const Tensor* t = ctx.constant_input(i);
        if (t == nullptr || !ctx.has_input(i) || !is_float_type(t->dtype())) continue;
        if (!store) store = ctx.weight_store();
        DSINFER_ASSIGN_OR_RETURN(c.buf[static_cast<std::size_t>(i)], device_constant(ctx, *store, *t));
        c.released |= std::uint64_t{1} << i;
    }
    return c;
}

Config base_config(const KernelCreateContext& ctx, OpKind kind) {
    Config cfg;
    cfg.kind = kind;
    cfg.allow_tf32 = ctx.allow_tf32();
    cfg.device = ctx.device().index;
    return cfg;
}

StatusOr<std::unique_ptr<Kernel>> make_matmul(const KernelCreateContext& ctx) {
    Config cfg = base_config(ctx, OpKind::matmul);
    if (ctx.node().domain == kDsinferDomain) {
        if (ctx.num_inputs() < 2 || ctx.num_inputs() > 3 || ctx.num_outputs() != 1)
            return Status::error(ErrorCode::invalid_model,
                                 "FusedMatMul takes 2 or 3 inputs (A, B, Bias) and one output");
        DSINFER_ASSIGN_OR_RETURN(detail::ActivationSpec act,
                                 detail::activation_from_attributes(ctx));
        cfg.fused = true;
        cfg.act = to_epilogue(act);
    }
    DSINFER_ASSIGN_OR_RETURN(Constants consts, upload_constants(ctx, {0, 1, 2}));
    return make_with_fallback<LtGemmKernel>(ctx, cfg, std::move(consts));
}

StatusOr<std::unique_ptr<Kernel>> make_gemm(const KernelCreateContext& ctx) {
    Config cfg = base_config(ctx, OpKind::gemm);
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(const detail::GemmAttrs ga, detail::parse_gemm_attrs(ctx));
    cfg.alpha = ga.alpha;
    cfg.beta = ga.beta;
    cfg.ta = ga.trans_a;
    cfg.tb = ga.trans_b;
    if (n.domain == kDsinferDomain) {
        if (ctx.num_inputs() < 2 || ctx.num_inputs() > 3 || ctx.num_outputs() != 1)
            return Status::error(ErrorCode::invalid_model,
                                 "FusedGemm takes 2 or 3 inputs (A, B, C) and one output");
        DSINFER_ASSIGN_OR_RETURN(detail::ActivationSpec act, detail::activation_from_attributes(ctx));
        cfg.fused = true;
        cfg.act = to_epilogue(act);
    }
    DSINFER_ASSIGN_OR_RETURN(Constants consts, upload_constants(ctx, {0, 1, 2}));
    return make_with_fallback<LtGemmKernel>(ctx, cfg, std::move(consts));
}

/// True when input i is absent, or a constant whose bytes are all zero.
bool zero_point_ok(const KernelCreateContext& ctx, int i) {
    if (!ctx.has_input(i)) return true;
    const Tensor* t = ctx.constant_input(i);
    if (t == nullptr || (t->dtype() != DType::i8 && t->dtype() != DType::u8)) return false;
    const auto* p = static_cast<const unsigned char*>(t->raw_data());
    for (std::size_t j = 0; j < t->num_bytes(); ++j)
        if (p[j] != 0) return false;
    return true;
}

StatusOr<std::unique_ptr<Kernel>> make_matmul_integer(const KernelCreateContext& ctx) {
    const Tensor* b = ctx.constant_input(1);
    if (b == nullptr || b->dtype() != DType::i8 || b->shape().rank() != 2)
        return Status::error(ErrorCode::unsupported,
                             "CUDA MatMulInteger needs a constant 2-D int8 B");
    const Value* av = ctx.input_value(0);
    if (av == nullptr || av->dtype != DType::i8)
        return Status::error(ErrorCode::unsupported, "CUDA MatMulInteger needs an int8 A");
    if (!zero_point_ok(ctx, 2) || !zero_point_ok(ctx, 3))
        return Status::error(
            ErrorCode::unsupported,
            "CUDA MatMulInteger supports absent or all-zero constant zero points only");
    const int64_t k = b->shape()[0], n = b->shape()[1];
    if (k % 4 != 0 || n % 4 != 0)
        return Status::error(ErrorCode::unsupported,
                             "CUDA MatMulInteger needs K and N multiples of 4 (B ",
                             b->shape().to_string(), ")");
    Constants consts;
    if (b->num_bytes() > 0) {
        // B^T [N, K] row-major: cuBLASLt's int8 kernels want the "TN" form.
        DSINFER_ASSIGN_OR_RETURN(
            consts.buf[1],
            device_form(ctx, *ctx.weight_store(), *b, WeightKind::packed, "cuda.gemm.b_transposed",
                        [&]() -> StatusOr<std::vector<unsigned char>> {
                            std::vector<unsigned char> bt(static_cast<std::size_t>(k * n));
                            const auto* src = static_cast<const unsigned char*>(b->raw_data());
                            for (int64_t p = 0; p < k; ++p)
                                for (int64_t j = 0; j < n; ++j)
                                    bt[static_cast<std::size_t>(j * k + p)] = src[p * n + j];
                            return bt;
                        }));
    }
    consts.released = std::uint64_t{1} << 1;
    for (int i : {2, 3})
        if (ctx.has_input(i)) consts.released |= std::uint64_t{1} << i;
    Config cfg = base_config(ctx, OpKind::matmul_integer);
    cfg.int_k = k;
    cfg.int_n = n;
    return make_with_fallback<LtGemmKernel>(ctx, cfg, std::move(consts));
}

}  // namespace

void register_gemm_kernels(KernelRegistry& r) {
    const DTypeSet floats{DType::f32, DType::f16, DType::bf16};
    r.add({"MatMul", "", 1, kMaxOpset, DeviceKind::cuda, floats}, &make_matmul, kPriorityCuda,
          kProvider);
    r.add({"Gemm", "", 7, kMaxOpset, DeviceKind::cuda, floats}, &make_gemm, kPriorityCuda,
          kProvider);
    r.add({"FusedMatMul", kDsinferDomain, 1, 1, DeviceKind::cuda, floats}, &make_matmul,
          kPriorityCuda, kProvider);
    r.add({"FusedGemm", kDsinferDomain, 1, 1, DeviceKind::cuda, floats}, &make_gemm, kPriorityCuda,
          kProvider);
    r.add({"MatMulInteger", "", 10, kMaxOpset, DeviceKind::cuda, DTypeSet{DType::i8}},
          &make_matmul_integer, kPriorityCuda, kProvider);
}

}  // namespace dsinfer::cuda
