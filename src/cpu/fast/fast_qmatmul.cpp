// The cpu backend's dynamically quantized matmuls on dsinfer's INT8 GEMM (kernels/qgemm.hpp):
//   DynamicQuantizeLinear                 vector range and quantize loops, threads on big tensors;
//   DynamicQuantizeMatMul (com.dsinfer)   A's range, A quantized into the workspace, then
//                                         qgemm_packed with the f32 epilogue (a_scale = A's
//                                         scale, b_scale per tensor or column, bias, activation);
//   MatMulIntegerToFloat (com.dsinfer)    qgemm_packed with the f32 epilogue;
//   MatMulInteger                         qgemm_packed storing s32;
//   QLinearMatMul                         qgemm_packed with the u8/s8 requantizing epilogue
//                                         (ops/quantize.hpp requantize_product);
//   QGemm (com.microsoft)                 transA = 0, B [K, N] or [N, K] (transB), alpha folded
//                                         into a_scale; f32 or u8/s8 epilogue; with an int32 C,
//                                         s32 first, then C added and the epilogue here.
// DynamicQuantizeMatMul and MatMulIntegerToFloat also run under their com.microsoft names (ONNX
// Runtime's contrib ops of the same inputs and semantics).
// The forms taken: A [..., M, K] (leading dims folded into rows) against a constant 2-D B (s8 or
// u8) with constant b_scale / b_zero_point / bias of one element or N, A's scale and zero point
// per tensor (QLinearMatMul, QGemm: constant float32 a_scale, y_scale, y_zero_point). Other forms (run-time or batched B, per-row A zero points) are left to the
// reference kernel (src/cpu/reference/quant.cpp), which is also every kernel's prepare (shapes,
// dtypes, errors) and the oracle: results are bitwise equal to it (ops/quantize.hpp's rounding
// order, qgemm's exact s32 and its f32 epilogue without FMA).
//
// Weights: B packed once per (weights, ISA family) through the engine's WeightStore
// (packed_qb_form, shared by the nodes reading it) and input 1 declared released, so the
// original int8 matrix is freed; as another kernel's fallback the factory declines (as
// fast_matmul.cpp's). run() allocates nothing and throws nothing: the quantized A and qgemm's
// buffers are the node's workspace, sized by prepare.
//
// Threads: products of at least 96 rows per thread are cut into one row slice per thread, each
// quantized (DynamicQuantizeMatMul) and multiplied by its thread alone in one parallel region
// (qgemm_packed single-threaded inside it); smaller ones use qgemm_packed's own split (threads
// share a row block's packed A and take column panels, so B is read once). The row slices
// avoid qgemm's wait for each row block's packing, which stalls whenever one of the threads is
// descheduled on a busy machine. Results do not depend on the split (exact s32, then each
// element's own epilogue).
//
// Thread safety: kernels are immutable after creation; runs share the packed B.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "cpu/fast/dynamic_quant.hpp"
#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"
#include "dsinfer/ops.hpp"
#include "kernels/qgemm.hpp"
#include "kernels/simd.hpp"
#include "kernels/weight_forms.hpp"
#include "ops/activation.hpp"
#include "ops/quantize.hpp"
#include "runtime/parallel.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace dsinfer::detail {
namespace {

using std::int64_t;

/// Elements per thread below which DynamicQuantizeLinear's quantize loop stays on one thread
/// (a parallel region costs more than quantizing 256 Ki floats, ~0.1 ms, on a busy machine).
constexpr int64_t kQuantGrain = int64_t{1} << 18;

/// DynamicQuantizeLinear's range of x[0, n), over threads for big tensors (dynamic_quant.hpp:
/// the loops per ISA, shared with DynamicQuantizeConv).
QuantRange quant_range(const float* x, int64_t n) noexcept { return dynamic_quant_range(x, n); }

/// y[0, n) = DynamicQuantizeLinear's y of x with parameters p (over threads when `threads`).
void quantize_into(const float* x, int64_t n, const DynamicQuantParams& p, std::uint8_t* y,
                   bool threads = true) noexcept {
    if (!p.usable) {
        std::memset(y, p.zero_point, static_cast<std::size_t>(n));
        return;
    }
    const DynamicQuantizeFn quantize = dynamic_quantize_loop();
    if (!threads) {
        quantize(x, n, p, y);
        return;
    }
    parallel_for(n, kQuantGrain, [&](int64_t b, int64_t e) { quantize(x + b, e - b, p, y + b); });
}

/// DynamicQuantizeLinear of x[0, n) into y: returns the scale and zero point. Bitwise the
/// reference kernel's (ops/quantize.hpp).
DynamicQuantParams dynamic_quantize(const float* x, int64_t n, std::uint8_t* y) noexcept {
    const DynamicQuantParams p = dynamic_quant_params(quant_range(x, n));
    quantize_into(x, n, p, y);
    return p;
}

// ---- DynamicQuantizeLinear ---------------------------------------------------------------------

class DynamicQuantizeLinearKernel final : public fast::FastKernel {
public:
    using FastKernel::FastKernel;

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        if (x.dtype != DType::f32) return fallback_run(ctx);
        const DynamicQuantParams p = dynamic_quantize(x.data_unchecked<float>(), x.num_elements(),
                                                      ctx.output(0).data_unchecked<std::uint8_t>());
        *ctx.output(1).data_unchecked<float>() = p.scale;
        *ctx.output(2).data_unchecked<std::uint8_t>() = p.zero_point;
        return Status::ok();
    }
};

// ---- the matmuls ---------------------------------------------------------------------------

enum class QKind {
    dynamic_quantize_matmul,
    matmul_integer_to_float,
    matmul_integer,
    qlinear_matmul,
    qgemm
};

/// A constant B's per-tensor or per-column parameter, converted.
template <class T>
struct ColumnParam {
    T scalar{};
    std::vector<T> per_column;  ///< N values, or empty (scalar)
    const T* columns() const noexcept { return per_column.empty() ? nullptr : per_column.data(); }
};

/// What a node's kernel holds besides the packed B.
struct QConfig {
    QKind kind = QKind::matmul_integer;
    int64_t k = 0, n = 0;
    int b_input = 1;           ///< the constant B's input index
    bool b_transposed = false;  ///< B stored [N, K] (QGemm transB)
    float alpha = 1.f;          ///< QGemm: a_scale is alpha * a_scale (ops/quantize.hpp)
    /// QLinearMatMul, QGemm with y_scale: the requantized output (u8 or s8) and its parameters.
    QGemmOutput out = QGemmOutput::f32;
    float y_scale = 1.f;
    std::int32_t y_zero = 0;
    /// QGemm's int32 C: c_rows x c_cols values (rows 1 or M, cols 1 or N), or empty. With C the
    /// product is stored as s32 and this kernel's epilogue adds it (qgemm has no int32 bias).
    std::vector<std::int32_t> c;
    int64_t c_rows = 1, c_cols = 1;
    ColumnParam<float> b_scale;
    ColumnParam<std::int32_t> b_zero;
    std::vector<float> bias;  ///< N values, or empty
    ActivationSpec act;
    /// Input indices of a_scale and a_zero_point (-1: none).
    int a_scale_input = -1, a_zero_input = -1;
    /// A's zero point (an input) may hold one value per row: such runs go to the fallback, so B
    /// is not released.
    bool release_b = true;
};

/// 64-byte aligned offsets into the workspace.
constexpr std::size_t align64(std::size_t b) noexcept { return (b + 63) & ~std::size_t{63}; }

class QMatMulKernel final : public fast::FastKernel {
public:
    QMatMulKernel(std::unique_ptr<Kernel> fallback, std::shared_ptr<const PackedQB> packed,
                  QConfig cfg)
        : FastKernel(std::move(fallback)), cfg_(std::move(cfg)), packed_(std::move(packed)) {}

    /// The fallback's checks and workspace; or room for the quantized A (DynamicQuantizeMatMul)
    /// and qgemm's buffers, whichever is larger (one of the two runs).
    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(prepare_fallback(ctx));
        const Shape& a = ctx.input(0).shape();
        if (a.rank() < 1 || a[a.rank() - 1] != cfg_.k) return Status::ok();
        const int64_t m = a.num_elements() / cfg_.k;
        const int64_t threads = max_threads();
        std::size_t bytes = std::max(layout(m, 1).total, layout(m, row_team(m, threads)).total);
        const std::size_t own = layout(m, 0).total + qgemm_workspace_bytes(m, *packed_, threads);
        ctx.set_workspace(std::max({ctx.workspace_bytes(), bytes, own}));
        return Status::ok();
    }

    std::uint64_t released_constant_inputs() const noexcept override {
        return cfg_.release_b ? std::uint64_t{1} << cfg_.b_input : 0;
    }

    /// dsinfer's INT8 GEMM at the ISA family B was packed for, or the fallback for the per-row
    /// zero points and scales run() hands it.
    std::string algorithm(const PrepareContext& ctx) const override {
        if (cfg_.a_zero_input >= 0 && ctx.has_input(cfg_.a_zero_input) &&
            ctx.input(cfg_.a_zero_input).shape().num_elements() != 1)
            return fallback_algorithm(ctx);
        if (cfg_.a_scale_input >= 0 && ctx.has_input(cfg_.a_scale_input) &&
            ctx.input(cfg_.a_scale_input).shape().num_elements() != 1)
            return fallback_algorithm(ctx);
        return std::string("dsinfer:qgemm-") + qisa_name(packed_->isa);
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        const int rank = a.shape.rank();
        if (rank < 1 || a.shape[rank - 1] != cfg_.k)  // prepare rejects these: B may be gone
            return Status::error(ErrorCode::internal, "quantized matmul got A of shape ",
                                 a.shape.to_string(), " for K = ", cfg_.k);
        QGemmParams p;
        if (cfg_.a_zero_input >= 0 && ctx.has_input(cfg_.a_zero_input)) {
            const TensorView& z = ctx.input(cfg_.a_zero_input);
            if (z.num_elements() != 1) return fallback_run(ctx);  // per-row: B was kept
            p.a_zero = z.dtype == DType::i8 ? *z.data_unchecked<std::int8_t>() : *z.data_unchecked<std::uint8_t>();
        }
        if (cfg_.a_scale_input >= 0 && ctx.input(cfg_.a_scale_input).num_elements() != 1)
            return fallback_run(ctx);  // per-row (QLinearMatMul): B was kept
        const int64_t m = a.num_elements() / cfg_.k;
        if (m == 0) return Status::ok();
        const void* aq = a.raw;
        p.a_signed = a.dtype == DType::i8;
        switch (cfg_.kind) {
            case QKind::dynamic_quantize_matmul:
                p.a_signed = false;
                p.out = QGemmOutput::f32;
                break;
            case QKind::matmul_integer_to_float:
                p.a_scale = *ctx.input(cfg_.a_scale_input).data_unchecked<float>();
                p.out = QGemmOutput::f32;
                break;
            case QKind::matmul_integer: p.out = QGemmOutput::s32; break;
            case QKind::qlinear_matmul:
            case QKind::qgemm:
                p.a_scale = cfg_.alpha * *ctx.input(cfg_.a_scale_input).data_unchecked<float>();
                p.out = cfg_.out;
                p.y_scale = cfg_.y_scale;
                p.y_zero = cfg_.y_zero;
                break;
        }
        const QGemmOutput final_out = p.out;
        const bool add_c = !cfg_.c.empty();
        if (add_c) {
            if (cfg_.c_rows != 1 && cfg_.c_rows != m)  // prepare rejects these
                return Status::error(ErrorCode::internal, "QGemm got ", m, " rows for C of ",
                                     cfg_.c_rows);
            p.out = QGemmOutput::s32;
        }
        p.b_zero = cfg_.b_zero.scalar;
        p.b_zeros = cfg_.b_zero.columns();
        if (final_out != QGemmOutput::s32) {
            p.b_scale = cfg_.b_scale.scalar;
            p.b_scales = cfg_.b_scale.columns();
            p.bias = cfg_.bias.empty() ? nullptr : cfg_.bias.data();
            p.act = cfg_.act;
        }
        // The workspace: [quantized A][one qgemm buffer per row slice], 64-byte aligned.
        int64_t team = row_team(m, max_threads());
        Layout l = layout(m, team);
        if (l.total > ctx.workspace_bytes()) {  // a larger thread budget than at prepare
            team = 1;
            l = layout(m, 1);
        }
        auto* ws = reinterpret_cast<unsigned char*>(
            align64(reinterpret_cast<std::uintptr_t>(ctx.workspace())));
        const std::size_t ws_bytes =
            ctx.workspace_bytes() - static_cast<std::size_t>(ws - static_cast<unsigned char*>(ctx.workspace()));
        const std::size_t out_bytes =
            p.out == QGemmOutput::u8 || p.out == QGemmOutput::s8 ? 1 : 4;
        // With QGemm's C: the s32 product goes to the output itself (f32, 4 bytes too) or to
        // the workspace (u8/s8), then add_c_epilogue.
        auto* out = static_cast<unsigned char*>(ctx.output(0).raw);
        unsigned char* y = add_c && final_out != QGemmOutput::f32 ? ws + l.a_bytes : out;
        DynamicQuantParams q;
        if (cfg_.kind == QKind::dynamic_quantize_matmul) {
            q = dynamic_quant_params(quant_range(a.data_unchecked<float>(), m * cfg_.k));
            p.a_zero = q.zero_point;
            p.a_scale = q.scale;
            aq = ws;
            if (team == 1) quantize_into(a.data_unchecked<float>(), m * cfg_.k, q, ws);
            else l.quantize = &q;
            l.x = a.data_unchecked<float>();
        }
        if (team == 1) {
            // qgemm's own threads over the whole product.
            if (!qgemm_packed(m, aq, cfg_.k, *packed_, y, cfg_.n, p, ws + l.gemm_offset(),
                              ws_bytes - l.gemm_offset()))
                return Status(ErrorCode::resource_exhausted,
                              "out of memory for the INT8 GEMM's buffers");
            if (add_c) add_c_epilogue(m, reinterpret_cast<const std::int32_t*>(y), p, final_out, out);
            return Status::ok();
        }
        // Row slices, one per thread, each quantized (DynamicQuantizeMatMul) and multiplied by
        // its thread alone: one parallel region, no barrier inside (qgemm's own split waits
        // for the packing of each row block, which stalls when the machine is oversubscribed).
        std::atomic<bool> failed{false};
        const auto* a8 = static_cast<const unsigned char*>(aq);
        parallel_for(team, 1, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t r0 = slice_begin(m, team, t), r1 = slice_begin(m, team, t + 1);
                if (r0 >= r1) continue;
                if (l.quantize != nullptr)
                    quantize_into(l.x + r0 * cfg_.k, (r1 - r0) * cfg_.k, *l.quantize,
                                  ws + r0 * cfg_.k, /*threads=*/false);
                unsigned char* tws =
                    ws + l.gemm_offset() + static_cast<std::size_t>(t) * l.slice_bytes;
                if (!qgemm_packed(r1 - r0, a8 + r0 * cfg_.k, cfg_.k, *packed_,
                                  y + static_cast<std::size_t>(r0 * cfg_.n) * out_bytes, cfg_.n, p,
                                  tws, l.slice_bytes))
                    failed.store(true, std::memory_order_relaxed);
            }
        });
        if (failed.load())
            return Status(ErrorCode::resource_exhausted, "out of memory for the INT8 GEMM's buffers");
        if (add_c) add_c_epilogue(m, reinterpret_cast<const std::int32_t*>(y), p, final_out, out);
        return Status::ok();
    }

private:
    /// Rows per thread below which qgemm's own split (threads share the packed A of a row
    /// block and take column panels: B read once) beats one row slice per thread (B read by
    /// every thread).
    static constexpr int64_t kSliceRows = 96;
    /// Row slices start at multiples of 12 (every qgemm family's tile height divides it).
    static constexpr int64_t kSliceAlign = 12;

    static int64_t row_team(int64_t m, int64_t threads) noexcept {
        return std::max<int64_t>(1, std::min(threads, m / kSliceRows));
    }
    static int64_t slice_begin(int64_t m, int64_t team, int64_t t) noexcept {
        if (t >= team) return m;
        return std::min(m, (m * t / team + kSliceAlign - 1) / kSliceAlign * kSliceAlign);
    }

    /// QGemm with C: y = C added to the s32 product, then dequantized (f32, in place: s32
    /// and y share the output) or requantized as the reference kernel does (ops/quantize.hpp).
    void add_c_epilogue(int64_t m, const std::int32_t* s32, const QGemmParams& p, QGemmOutput out,
                        unsigned char* y) const noexcept {
        const int64_t n = cfg_.n;
        parallel_for(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)),
                     [&](int64_t r0, int64_t r1) {
            for (int64_t i = r0; i < r1; ++i) {
                const std::int32_t* cr = cfg_.c.data() + (cfg_.c_rows == 1 ? 0 : i) * cfg_.c_cols;
                for (int64_t j = 0; j < n; ++j) {
                    const std::int32_t c =
                        add_wrapping(s32[i * n + j], cr[cfg_.c_cols == 1 ? 0 : j]);
                    const float bs = p.b_scales != nullptr ? p.b_scales[j] : p.b_scale;
                    const int64_t o = i * n + j;
                    if (out == QGemmOutput::f32)
                        reinterpret_cast<float*>(y)[o] = dequantize_product(c, p.a_scale, bs, nullptr);
                    else if (out == QGemmOutput::u8)
                        y[o] = requantize_product<std::uint8_t>(
                            c, requantize_multiplier(p.a_scale, bs, p.y_scale), p.y_zero);
                    else
                        reinterpret_cast<std::int8_t*>(y)[o] = requantize_product<std::int8_t>(
                            c, requantize_multiplier(p.a_scale, bs, p.y_scale), p.y_zero);
                }
            }
        });
    }

    struct Layout {
        std::size_t a_bytes = 0;      ///< the quantized A (DynamicQuantizeMatMul), aligned
        std::size_t c_bytes = 0;      ///< QGemm with C and an 8-bit output: the s32 product
        std::size_t gemm_offset() const noexcept { return a_bytes + c_bytes; }
        std::size_t slice_bytes = 0;  ///< one row slice's qgemm buffers, aligned
        std::size_t total = 0;        ///< with the alignment slack
        const float* x = nullptr;                        ///< run: A to quantize per slice
        const DynamicQuantParams* quantize = nullptr;    ///< run: its parameters (team > 1)
    };
    Layout layout(int64_t m, int64_t team) const noexcept {
        Layout l;
        if (cfg_.kind == QKind::dynamic_quantize_matmul)
            l.a_bytes = align64(static_cast<std::size_t>(m * cfg_.k));
        if (!cfg_.c.empty() && cfg_.out != QGemmOutput::f32)
            l.c_bytes = align64(static_cast<std::size_t>(m * cfg_.n) * 4);
        int64_t rows = 0;
        for (int64_t t = 0; t < team; ++t)
            rows = std::max(rows, slice_begin(m, team, t + 1) - slice_begin(m, team, t));
        l.slice_bytes = team == 0 ? 0 : align64(qgemm_workspace_bytes(rows, *packed_, 1));
        l.total = 64 + l.gemm_offset() + static_cast<std::size_t>(team) * l.slice_bytes;
        return l;
    }

private:
    QConfig cfg_;
    std::shared_ptr<const PackedQB> packed_;  ///< the weight store's form (shared by readers)
};

/// Reads a constant per-tensor / per-column parameter of B (1 or n elements) of an 8-bit or
/// f32 type; false when it is not constant or has another count or type.
template <class T>
bool read_column_param(const KernelCreateContext& ctx, int i, int64_t n, ColumnParam<T>& out) {
    if (!ctx.has_input(i)) return true;
    const Tensor* t = ctx.constant_input(i);
    if (t == nullptr) return false;
    const int64_t count = t->num_elements();
    if (count != 1 && count != n) return false;
    std::vector<T> v(static_cast<std::size_t>(count));
    for (int64_t j = 0; j < count; ++j) {
        switch (t->dtype()) {
            case DType::f32: v[static_cast<std::size_t>(j)] = static_cast<T>(t->data_unchecked<float>()[j]); break;
            case DType::i8: v[static_cast<std::size_t>(j)] = static_cast<T>(t->data_unchecked<std::int8_t>()[j]); break;
            case DType::u8: v[static_cast<std::size_t>(j)] = static_cast<T>(t->data_unchecked<std::uint8_t>()[j]); break;
            default: return false;
        }
    }
    if (count == 1 && n != 1) out.scalar = v[0];
    else out.per_column = std::move(v);
    return true;
}

/// The fast kernel for a node whose inputs (B at cfg.b_input, b_scale/b_zero_point/bias at the
/// given indices, -1 for absent) fit; unsupported otherwise (the reference kernel runs the node).
StatusOr<std::unique_ptr<Kernel>> make_qmatmul(const KernelCreateContext& ctx, QConfig cfg,
                                               int b_scale, int b_zero, int bias) {
    if (ctx.creating_fallback())
        return Status::error(ErrorCode::unsupported, "qgemm: not as another kernel's fallback");
    const Tensor* b = ctx.constant_input(cfg.b_input);
    if (b == nullptr || (b->dtype() != DType::i8 && b->dtype() != DType::u8) ||
        b->num_dims() != 2 || b->num_elements() == 0)
        return Status::error(ErrorCode::unsupported, "a constant 2-D int8/uint8 B only");
    cfg.k = b->shape()[cfg.b_transposed ? 1 : 0];
    cfg.n = b->shape()[cfg.b_transposed ? 0 : 1];
    if (b_scale >= 0) {
        const Tensor* t = ctx.constant_input(b_scale);
        if (t == nullptr || t->dtype() != DType::f32 ||
            !read_column_param(ctx, b_scale, cfg.n, cfg.b_scale))
            return Status::error(ErrorCode::unsupported,
                                 "a constant float32 b_scale of 1 or N values only");
    }
    if (b_zero >= 0) {
        const Tensor* z = ctx.constant_input(b_zero);
        if ((ctx.has_input(b_zero) && (z == nullptr || z->dtype() != b->dtype())) ||
            !read_column_param(ctx, b_zero, cfg.n, cfg.b_zero))
            return Status::error(ErrorCode::unsupported,
                                 "a constant b_zero_point of B's type, 1 or N values, only");
    }
    if (bias >= 0 && ctx.has_input(bias)) {
        const Tensor* t = ctx.constant_input(bias);
        if (t == nullptr || t->dtype() != DType::f32 || t->num_elements() != cfg.n)
            return Status::error(ErrorCode::unsupported, "a constant float32 bias [N] only");
        cfg.bias.assign(t->data_unchecked<float>(), t->data_unchecked<float>() + cfg.n);
    }
    // The fallback validates the node (its errors are the reference kernel's) before B is packed.
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    const std::shared_ptr<WeightStore> store = ctx.weight_store();
    DSINFER_ASSIGN_OR_RETURN(auto packed,
                             packed_qb_form(*store, store->source(*b), b->raw_data(),
                                            b->dtype() == DType::u8, cfg.k, cfg.n,
                                            cfg.b_transposed));
    return make_kernel<QMatMulKernel>(std::move(fallback), std::move(packed), std::move(cfg));
}

StatusOr<std::unique_ptr<Kernel>> make_dynamic_quantize_matmul(const KernelCreateContext& ctx) {
    QConfig cfg;
    cfg.kind = QKind::dynamic_quantize_matmul;
    DSINFER_ASSIGN_OR_RETURN(cfg.act, activation_from_attributes(ctx));
    return make_qmatmul(ctx, std::move(cfg), 2, 3, 4);
}

StatusOr<std::unique_ptr<Kernel>> make_matmul_integer_to_float(const KernelCreateContext& ctx) {
    QConfig cfg;
    cfg.kind = QKind::matmul_integer_to_float;
    DSINFER_ASSIGN_OR_RETURN(cfg.act, activation_from_attributes(ctx));
    cfg.a_scale_input = 2;
    cfg.a_zero_input = 4;  // one element (the reference's prepare checks it)
    return make_qmatmul(ctx, std::move(cfg), 3, 5, 6);
}

/// A's zero point of MatMulInteger holds one element: absent, a constant of one, or a value
/// whose known shape has one (DynamicQuantizeLinear's output).
bool scalar_input(const KernelCreateContext& ctx, int i) {
    if (!ctx.has_input(i)) return true;
    if (const Tensor* t = ctx.constant_input(i)) return t->num_elements() == 1;
    const Value* v = ctx.input_value(i);
    if (v == nullptr || !v->shape.known) return false;
    for (const Dim& d : v->shape.dims)
        if (!d.is_static() || d.value != 1) return false;
    return true;
}

StatusOr<std::unique_ptr<Kernel>> make_matmul_integer(const KernelCreateContext& ctx) {
    QConfig cfg;
    cfg.kind = QKind::matmul_integer;
    cfg.a_zero_input = 2;
    cfg.release_b = scalar_input(ctx, 2);
    return make_qmatmul(ctx, std::move(cfg), -1, 3, -1);
}

/// A constant float32 of one element at input i (a_scale, y_scale), or nullptr.
const float* constant_scalar_f32(const KernelCreateContext& ctx, int i) {
    const Tensor* t = ctx.has_input(i) ? ctx.constant_input(i) : nullptr;
    return t != nullptr && t->dtype() == DType::f32 && t->num_elements() == 1 ? t->data_unchecked<float>()
                                                                              : nullptr;
}

/// The requantized output's y_scale (input `ys`) and y_zero_point (input `yz`, optional: u8
/// when absent), constants of one element; false when they are not.
bool read_output_quant(const KernelCreateContext& ctx, int ys, int yz, QConfig& cfg) {
    const float* s = constant_scalar_f32(ctx, ys);
    if (s == nullptr) return false;
    cfg.y_scale = *s;
    cfg.out = QGemmOutput::u8;
    if (!ctx.has_input(yz)) return true;
    const Tensor* z = ctx.constant_input(yz);
    if (z == nullptr || z->num_elements() != 1) return false;
    if (z->dtype() == DType::u8) cfg.y_zero = *z->data_unchecked<std::uint8_t>();
    else if (z->dtype() == DType::i8) cfg.y_zero = *z->data_unchecked<std::int8_t>(), cfg.out = QGemmOutput::s8;
    else return false;
    return true;
}

/// QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
/// float32 scales; a_scale, y_scale and y_zero_point constants of one element (a per-row
/// a_zero_point at run time goes to the fallback).
StatusOr<std::unique_ptr<Kernel>> make_qlinear_matmul(const KernelCreateContext& ctx) {
    QConfig cfg;
    cfg.kind = QKind::qlinear_matmul;
    cfg.b_input = 3;
    cfg.a_scale_input = 1;
    cfg.a_zero_input = 2;
    if (constant_scalar_f32(ctx, 1) == nullptr || !read_output_quant(ctx, 6, 7, cfg))
        return Status::error(ErrorCode::unsupported,
                             "QLinearMatMul: constant float32 a_scale, y_scale of one element only");
    cfg.release_b = scalar_input(ctx, 2);
    return make_qmatmul(ctx, std::move(cfg), 4, 5, -1);
}

/// com.microsoft QGemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C?, y_scale?,
/// y_zero_point?): transA = 0, B constant (transB either), alpha, C a constant int32 [N], [1, N],
/// [M|1, N|1] or scalar; float32 output, or requantized with constant y_scale / y_zero_point.
StatusOr<std::unique_ptr<Kernel>> make_qgemm(const KernelCreateContext& ctx) {
    QConfig cfg;
    cfg.kind = QKind::qgemm;
    cfg.b_input = 3;
    cfg.a_scale_input = 1;
    cfg.a_zero_input = 2;
    const Node& node = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(cfg.alpha, node.attr_or<float>("alpha", 1.f));
    DSINFER_ASSIGN_OR_RETURN(int64_t ta, node.attr_or<int64_t>("transA", 0));
    DSINFER_ASSIGN_OR_RETURN(int64_t tb, node.attr_or<int64_t>("transB", 0));
    if (ta != 0) return Status::error(ErrorCode::unsupported, "QGemm: transA = 0 only");
    cfg.b_transposed = tb != 0;
    if (constant_scalar_f32(ctx, 1) == nullptr)
        return Status::error(ErrorCode::unsupported, "QGemm: a constant float32 a_scale only");
    if (ctx.has_input(7) && !read_output_quant(ctx, 7, 8, cfg))
        return Status::error(ErrorCode::unsupported,
                             "QGemm: constant y_scale / y_zero_point of one element only");
    if (ctx.has_input(6)) {
        const Tensor* c = ctx.constant_input(6);
        if (c == nullptr || c->dtype() != DType::i32 || c->num_dims() > 2)
            return Status::error(ErrorCode::unsupported, "QGemm: a constant int32 C only");
        const Shape& cs = c->shape();
        cfg.c_cols = cs.rank() >= 1 ? cs[cs.rank() - 1] : 1;
        cfg.c_rows = cs.rank() == 2 ? cs[0] : 1;
        cfg.c.assign(c->data_unchecked<std::int32_t>(), c->data_unchecked<std::int32_t>() + c->num_elements());
    }
    cfg.release_b = scalar_input(ctx, 2);
    return make_qmatmul(ctx, std::move(cfg), 4, 5, -1);
}

}  // namespace

void register_fast_qdq(KernelRegistry& r);  // fast_qdq.cpp: QuantizeLinear, DequantizeLinear

void register_fast_qmatmul(KernelRegistry& r) {
    using fast::FastKernel;
    r.add({"DynamicQuantizeLinear", "", 11, kMaxOpset, DeviceKind::cpu},
          &make_with_fallback<DynamicQuantizeLinearKernel>, kPriorityCpu, "cpu");
    r.add({"MatMulInteger", "", 10, kMaxOpset, DeviceKind::cpu}, &make_matmul_integer,
          kPriorityCpu, "cpu");
    r.add({"QLinearMatMul", "", 10, kMaxOpset, DeviceKind::cpu}, &make_qlinear_matmul,
          kPriorityCpu, "cpu");
    for (const char* domain : {kDsinferDomain, "com.microsoft"}) {
        r.add({"DynamicQuantizeMatMul", domain, 1, 1, DeviceKind::cpu},
              &make_dynamic_quantize_matmul, kPriorityCpu, "cpu");
        r.add({"MatMulIntegerToFloat", domain, 1, 1, DeviceKind::cpu},
              &make_matmul_integer_to_float, kPriorityCpu, "cpu");
    }
    r.add({"QGemm", "com.microsoft", 1, 1, DeviceKind::cpu}, &make_qgemm, kPriorityCpu, "cpu");
    register_fast_qdq(r);
}

}  // namespace dsinfer::detail

#pragma GCC diagnostic pop
