// Reference MatMul, Gemm and Einsum. GEMM cores run through Eigen on row-major maps; 16-bit
// floats are widened to float in the workspace (accumulation in float); integer types use a
// plain loop with wrapping (two's complement) arithmetic.
#include <Eigen/Core>
#include <algorithm>
#include <string>
#include <vector>

#include "ops/gemm.hpp"
#include "ops/kernel_utils.hpp"
#include "cpu/reference/eigen_gemm.hpp"
#include "cpu/reference/groups.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MapC = Eigen::Map<const RowMat<T>>;
template <class T>
using MapM = Eigen::Map<RowMat<T>>;

// Accumulator for integer products: unsigned 64-bit wraps instead of overflowing (UB).
template <class T>
using acc_t = std::conditional_t<std::is_integral_v<T>, std::uint64_t, compute_t<T>>;

template <class T>
inline acc_t<T> to_acc(T v) noexcept {
    if constexpr (std::is_integral_v<T>)
        return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
    else
        return load(v);
}
template <class T>
inline T from_acc(acc_t<T> v) noexcept {
    if constexpr (std::is_integral_v<T>)
        return static_cast<T>(v);
    else
        return store<T>(v);
}

inline std::size_t align64(std::size_t n) noexcept { return (n + 63) / 64 * 64; }

/// Workspace scratch of gemm_eigen for F (float for float, float16 and bfloat16; double).
inline std::size_t gemm_scratch_for(DType dt, int64_t m, int64_t k, int64_t n) noexcept {
    if (dt == DType::f64) return gemm_scratch_bytes<double>(m, n, k);
    if (dt == DType::f32 || dt == DType::f16 || dt == DType::bf16)
        return gemm_scratch_bytes<float>(m, n, k);
    return 0;
}

/// C[M,N] = A[M,K] * B[K,N] (row-major, contiguous). For float and double; Eigen's packed
/// panels in `scratch` (gemm_scratch_bytes).
template <class T>
void gemm_eigen(const T* a, const T* b, T* c, int64_t m, int64_t k, int64_t n, void* scratch,
                std::size_t scratch_bytes) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        std::fill(c, c + m * n, T(0));
        return;
    }
    product_into<false>(MapM<T>(c, m, n), MapC<T>(a, m, k), MapC<T>(b, k, n), T(1), scratch,
                        scratch_bytes);
}

/// C[M,N] = A[M,K] * B[K,N] for integer types (wrapping).
template <class T>
void gemm_int(const T* a, const T* b, T* c, int64_t m, int64_t k, int64_t n) {
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            std::uint64_t acc = 0;
            for (int64_t p = 0; p < k; ++p) acc += to_acc(a[i * k + p]) * to_acc(b[p * n + j]);
            c[i * n + j] = static_cast<T>(acc);
        }
    }
}

template <class T>
void widen(const T* src, float* dst, int64_t n) noexcept {
    for (int64_t i = 0; i < n; ++i) dst[i] = load(src[i]);
}

// ---- MatMul ----------------------------------------------------------------------------------

struct MatMulDims {
    int64_t m = 0, k = 0, n = 0;
    Shape batch_a, batch_b, batch, out;
};

StatusOr<MatMulDims> matmul_dims(const Shape& a, const Shape& b) {
    if (a.rank() < 1 || b.rank() < 1)
        return Status::error(ErrorCode::invalid_argument,
                             "MatMul inputs must have rank >= 1, got shapes ", a.to_string(),
                             " and ", b.to_string());
    MatMulDims d;
    const int ra = a.rank(), rb = b.rank();
    d.m = ra == 1 ? 1 : a[ra - 2];
    d.k = a[ra - 1];
    const int64_t kb = rb == 1 ? b[0] : b[rb - 2];
    d.n = rb == 1 ? 1 : b[rb - 1];
    if (d.k != kb)
        return Status::error(ErrorCode::invalid_argument, "MatMul inner dimensions differ: A ",
                             a.to_string(), " has K=", d.k, ", B ", b.to_string(), " has K=", kb);
    for (int i = 0; i < ra - 2; ++i) d.batch_a.push_back(a[i]);
    for (int i = 0; i < rb - 2; ++i) d.batch_b.push_back(b[i]);
    DSINFER_ASSIGN_OR_RETURN(d.batch, broadcast_shapes(d.batch_a, d.batch_b));
    d.out = d.batch;
    if (ra > 1) d.out.push_back(d.m);
    if (rb > 1) d.out.push_back(d.n);
    return d;
}

class MatMulKernel final : public DirectKernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(1);
        DSINFER_CHECK(a.dtype() == b.dtype(), ErrorCode::invalid_argument,
                      "MatMul input types differ: ", dtype_name(a.dtype()), " vs ",
                      dtype_name(b.dtype()));
        DSINFER_CHECK(kNumericTypes.contains(a.dtype()), ErrorCode::unsupported,
                      "MatMul does not support element type ", dtype_name(a.dtype()));
        DSINFER_ASSIGN_OR_RETURN(MatMulDims d, matmul_dims(a.shape(), b.shape()));
        ctx.set_output(0, a.dtype(), d.out);
        const std::size_t own =
            is_half_dtype(a.dtype())
                ? static_cast<std::size_t>(a.num_elements() + b.num_elements() + d.m * d.n) *
                      sizeof(float)
                : 0;
        // Eigen's packed panels: per batch, or one tall product (see run).
        const std::size_t scratch =
            std::max(gemm_scratch_for(a.dtype(), d.m, d.k, d.n),
                     gemm_scratch_for(a.dtype(), d.batch.num_elements() * d.m, d.k, d.n));
        ctx.set_workspace(scratch == 0 ? own : align64(own) + scratch);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        return run_ops(ctx.input(0), ctx.input(1), ctx.output(0), ctx.workspace(),
                       ctx.workspace_bytes());
    }

    Status run_direct(std::span<const TensorView* const> in, const TensorView& out, void* ws,
                      std::size_t ws_bytes) const noexcept override {
        if (in.size() < 2 || in[0] == nullptr || in[1] == nullptr)
            return Status(ErrorCode::internal, "MatMul needs inputs A and B");
        return run_ops(*in[0], *in[1], out, ws, ws_bytes);
    }

private:
    Status run_ops(const TensorView& a, const TensorView& b, const TensorView& y, void* ws,
                   std::size_t ws_bytes) const noexcept {
        auto dims_or = matmul_dims(a.shape, b.shape);
        if (!dims_or.is_ok()) return dims_or.status();
        const MatMulDims& d = dims_or.value();
        try {
            return run_typed(a, b, y, d, ws, ws_bytes);
        } catch (const std::bad_alloc&) {
            // Only Eigen's own buffers, beyond what prepare planned (eigen_gemm.hpp).
            return Status(ErrorCode::resource_exhausted, "out of memory");
        }
    }

    Status run_typed(const TensorView& a, const TensorView& b, const TensorView& y,
                     const MatMulDims& d, void* ws, std::size_t ws_bytes) const {
        return dispatch_types(a.dtype, NumericTypes{}, [&]<class T>() -> Status {
            const T* pa = a.data_unchecked<T>();
            const T* pb = b.data_unchecked<T>();
            T* py = y.data_unchecked<T>();
            const int64_t sa = d.m * d.k, sb = d.k * d.n, sy = d.m * d.n;
            std::size_t own = 0;
            if constexpr (is_half_v<T>)
                own = align64(static_cast<std::size_t>(a.num_elements() + b.num_elements() + sy) *
                              sizeof(float));
            void* scratch = static_cast<unsigned char*>(ws) + own;
            const std::size_t scratch_bytes = ws_bytes > own ? ws_bytes - own : 0;
            if constexpr (is_half_v<T>) {
                float* wa = static_cast<float*>(ws);
                float* wb = wa + a.num_elements();
                float* wy = wb + b.num_elements();
                widen(pa, wa, a.num_elements());
                widen(pb, wb, b.num_elements());
                run_batches(d, [&](int64_t ia, int64_t ib, int64_t iy) {
                    gemm_eigen<float>(wa + ia * sa, wb + ib * sb, wy, d.m, d.k, d.n, scratch,
                                      scratch_bytes);
                    for (int64_t i = 0; i < sy; ++i) py[iy * sy + i] = store<T>(wy[i]);
                });
            } else if constexpr (std::is_floating_point_v<T>) {
                // B shared by every batch: one tall GEMM over all of A's rows.
                if (d.batch_b.num_elements() == 1 && d.batch == d.batch_a) {
                    gemm_eigen<T>(pa, pb, py, d.batch.num_elements() * d.m, d.k, d.n, scratch,
                                  scratch_bytes);
                    return Status::ok();
                }
                run_batches(d, [&](int64_t ia, int64_t ib, int64_t iy) {
                    gemm_eigen<T>(pa + ia * sa, pb + ib * sb, py + iy * sy, d.m, d.k, d.n,
                                  scratch, scratch_bytes);
                });
            } else {
                run_batches(d, [&](int64_t ia, int64_t ib, int64_t iy) {
                    gemm_int<T>(pa + ia * sa, pb + ib * sb, py + iy * sy, d.m, d.k, d.n);
                });
            }
            return Status::ok();
        });
    }

    static bool is_half_dtype(DType dt) { return dt == DType::f16 || dt == DType::bf16; }

    template <class F>
    static void run_batches(const MatMulDims& d, F&& f) {
        const std::array<Strides, 2> st{broadcast_strides(d.batch_a, d.batch),
                                        broadcast_strides(d.batch_b, d.batch)};
        if (d.batch.rank() == 0) {
            f(0, 0, 0);
            return;
        }
        int64_t iy = 0;
        for_each_offset<2>(d.batch, st,
                           [&](const std::array<int64_t, 2>& off) { f(off[0], off[1], iy++); });
    }
};

StatusOr<std::unique_ptr<Kernel>> make_matmul(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    return make_kernel<MatMulKernel>();
}

// ---- Gemm ------------------------------------------------------------------------------------

class GemmKernel final : public DirectKernel {
public:
    GemmKernel(float alpha, float beta, bool ta, bool tb)
        : alpha_(alpha), beta_(beta), trans_a_(ta), trans_b_(tb) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(1);
        DSINFER_CHECK(a.dtype() == b.dtype(), ErrorCode::invalid_argument,
                      "Gemm input types differ: A ", dtype_name(a.dtype()), ", B ",
                      dtype_name(b.dtype()));
        DSINFER_CHECK(kNumericTypes.contains(a.dtype()), ErrorCode::unsupported,
                      "Gemm does not support element type ", dtype_name(a.dtype()));
        DSINFER_CHECK(a.shape().rank() == 2 && b.shape().rank() == 2, ErrorCode::invalid_argument,
                      "Gemm inputs A and B must be 2-D, got ", a.shape().to_string(), " and ",
                      b.shape().to_string());
        const int64_t m = trans_a_ ? a.shape()[1] : a.shape()[0];
        const int64_t k = trans_a_ ? a.shape()[0] : a.shape()[1];
        const int64_t kb = trans_b_ ? b.shape()[1] : b.shape()[0];
        const int64_t n = trans_b_ ? b.shape()[0] : b.shape()[1];
        DSINFER_CHECK(k == kb, ErrorCode::invalid_argument, "Gemm inner dimensions differ: A ",
                      a.shape().to_string(), " (transA=", trans_a_, ") vs B ",
                      b.shape().to_string(), " (transB=", trans_b_, ")");
        if (ctx.has_input(2)) {
            const Tensor& c = ctx.input(2);
            DSINFER_CHECK(c.dtype() == a.dtype(), ErrorCode::invalid_argument,
                          "Gemm input C has type ", dtype_name(c.dtype()), ", expected ",
                          dtype_name(a.dtype()));
            const Shape& cs = c.shape();
            bool ok = cs.rank() <= 2;
            if (ok && cs.rank() >= 1) ok = cs[cs.rank() - 1] == n || cs[cs.rank() - 1] == 1;
            if (ok && cs.rank() == 2) ok = cs[0] == m || cs[0] == 1;
            DSINFER_CHECK(ok, ErrorCode::invalid_argument, "Gemm input C of shape ", cs.to_string(),
                          " cannot be broadcast to [", m, ",", n, "]");
        }
        ctx.set_output(0, a.dtype(), Shape{m, n});
        const std::size_t own =
            a.dtype() == DType::f16 || a.dtype() == DType::bf16
                ? static_cast<std::size_t>(a.num_elements() + b.num_elements() + m * n) *
                      sizeof(float)
                : 0;
        const std::size_t scratch = gemm_scratch_for(a.dtype(), m, k, n);  // Eigen's panels
        ctx.set_workspace(scratch == 0 ? own : align64(own) + scratch);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        return run_ops(ctx.input(0), ctx.input(1), ctx.has_input(2) ? &ctx.input(2) : nullptr,
                       ctx.output(0), ctx.workspace(), ctx.workspace_bytes());
    }

    Status run_direct(std::span<const TensorView* const> in, const TensorView& out, void* ws,
                      std::size_t ws_bytes) const noexcept override {
        if (in.size() < 2 || in[0] == nullptr || in[1] == nullptr)
            return Status(ErrorCode::internal, "Gemm needs inputs A and B");
        return run_ops(*in[0], *in[1], in.size() > 2 ? in[2] : nullptr, out, ws, ws_bytes);
    }

private:
    Status run_ops(const TensorView& a, const TensorView& b, const TensorView* c,
                   const TensorView& y, void* ws, std::size_t ws_bytes) const noexcept {
        try {
            return run_typed(a, b, c, y, ws, ws_bytes);
        } catch (const std::bad_alloc&) {
            // Only Eigen's own buffers, beyond what prepare planned (eigen_gemm.hpp).
            return Status(ErrorCode::resource_exhausted, "out of memory");
        }
    }

    Status run_typed(const TensorView& a, const TensorView& b, const TensorView* c,
                     const TensorView& y, void* ws, std::size_t ws_bytes) const {
        const int64_t m = y.shape[0], n = y.shape[1];
        const int64_t k = trans_a_ ? a.shape[0] : a.shape[1];
        return dispatch_types(a.dtype, NumericTypes{}, [&]<class T>() -> Status {
            using C = acc_t<T>;
            const T* pa = a.data_unchecked<T>();
            const T* pb = b.data_unchecked<T>();
            T* py = y.data_unchecked<T>();
            if constexpr (std::is_integral_v<T>) {
                const C alpha = static_cast<C>(static_cast<int64_t>(alpha_));
                for (int64_t i = 0; i < m; ++i)
                    for (int64_t j = 0; j < n; ++j) {
                        C acc = 0;
                        for (int64_t p = 0; p < k; ++p) {
                            const T av = trans_a_ ? pa[p * m + i] : pa[i * k + p];
                            const T bv = trans_b_ ? pb[j * k + p] : pb[p * n + j];
                            acc += to_acc(av) * to_acc(bv);
                        }
                        py[i * n + j] = static_cast<T>(acc * alpha);
                    }
            } else {
                using F = compute_t<T>;
                const F* fa;
                const F* fb;
                F* fy;
                std::size_t own = 0;
                if constexpr (is_half_v<T>)
                    own = align64(static_cast<std::size_t>(a.num_elements() + b.num_elements() +
                                                           m * n) *
                                  sizeof(float));
                void* scratch = static_cast<unsigned char*>(ws) + own;
                const std::size_t scratch_bytes = ws_bytes > own ? ws_bytes - own : 0;
                if constexpr (is_half_v<T>) {
                    float* wa = static_cast<float*>(ws);
                    float* wb = wa + a.num_elements();
                    widen(pa, wa, a.num_elements());
                    widen(pb, wb, b.num_elements());
                    fa = wa;
                    fb = wb;
                    fy = wb + b.num_elements();
                } else {
                    fa = pa;
                    fb = pb;
                    fy = py;
                }
                gemm_float<F>(fa, fb, fy, m, k, n, scratch, scratch_bytes);
                if constexpr (is_half_v<T>)
                    for (int64_t i = 0; i < m * n; ++i) py[i] = store<T>(fy[i]);
            }
            if (c != nullptr && beta_ != 0.0f) add_c<T>(*c, py, m, n);
            return Status::ok();
        });
    }

    template <class F>
    void gemm_float(const F* a, const F* b, F* y, int64_t m, int64_t k, int64_t n, void* ws,
                    std::size_t wsb) const {
        if (m == 0 || n == 0) return;
        auto out = MapM<F>(y, m, n);
        if (k == 0) {
            out.setZero();
            return;
        }
        const F alpha = static_cast<F>(alpha_);
        // out = alpha * (A * B), as Eigen evaluates it (eigen_gemm.hpp).
        if (!trans_a_ && !trans_b_)
            product_into<true>(out, MapC<F>(a, m, k), MapC<F>(b, k, n), alpha, ws, wsb);
        else if (trans_a_ && !trans_b_)
            product_into<true>(out, MapC<F>(a, k, m).transpose(), MapC<F>(b, k, n), alpha, ws,
                               wsb);
        else if (!trans_a_ && trans_b_)
            product_into<true>(out, MapC<F>(a, m, k), MapC<F>(b, n, k).transpose(), alpha, ws,
                               wsb);
        else
            product_into<true>(out, MapC<F>(a, k, m).transpose(), MapC<F>(b, n, k).transpose(),
                               alpha, ws, wsb);
    }

    template <class T>
    void add_c(const TensorView& c, T* py, int64_t m, int64_t n) const noexcept {
        const T* pc = c.data_unchecked<T>();
        const int r = c.shape.rank();
        const int64_t cm = r == 2 ? c.shape[0] : 1;
        const int64_t cn = r >= 1 ? c.shape[r - 1] : 1;
        for (int64_t i = 0; i < m; ++i) {
            const T* crow = pc + (cm == 1 ? 0 : i) * cn;
            for (int64_t j = 0; j < n; ++j) {
                const T cv = crow[cn == 1 ? 0 : j];
                if constexpr (std::is_integral_v<T>) {
                    const auto beta = static_cast<std::uint64_t>(static_cast<int64_t>(beta_));
                    py[i * n + j] = static_cast<T>(to_acc(py[i * n + j]) + beta * to_acc(cv));
                } else {
                    using F = compute_t<T>;
                    py[i * n + j] =
                        store<T>(load(py[i * n + j]) + static_cast<F>(beta_) * load(cv));
                }
            }
        }
    }

    float alpha_, beta_;
    bool trans_a_, trans_b_;
};

StatusOr<std::unique_ptr<Kernel>> make_gemm(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    DSINFER_ASSIGN_OR_RETURN(const GemmAttrs a, parse_gemm_attrs(ctx));
    return make_kernel<GemmKernel>(a.alpha, a.beta, a.trans_a, a.trans_b);
}

// ---- Einsum ----------------------------------------------------------------------------------

// Labels: 'A'..'Z' -> 0..25, 'a'..'z' -> 26..51 (so id order is ASCII order, as numpy sorts
// implicit outputs); ellipsis dims get 52..59; kEllipsis marks "..." in a parsed term.
constexpr int kLetters = 52;
constexpr int kMaxLabels = kLetters + kMaxRank;
constexpr int kEllipsis = -1;
constexpr int kMaxEinsumInputs = 16;

struct EinsumPlan {
    std::array<int64_t, kMaxLabels> dim{};
    std::array<int, kMaxLabels> out_labels{};
    int out_rank = 0;
    std::array<int, kMaxLabels> red_labels{};
    int red_count = 0;
    // Element stride of each label in each input (summed over repeats: diagonals).
    std::array<std::array<int64_t, kMaxLabels>, kMaxEinsumInputs> stride{};
    Shape out_shape;
};

class EinsumKernel final : public Kernel {
public:
    EinsumKernel(std::vector<std::vector<int>> terms, bool explicit_out, std::vector<int> out)
        : terms_(std::move(terms)), explicit_(explicit_out), out_(std::move(out)) {}

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_CHECK(ctx.num_inputs() == static_cast<int>(terms_.size()),
                      ErrorCode::invalid_argument, "Einsum equation names ", terms_.size(),
                      " operands but the node has ", ctx.num_inputs(), " inputs");
        const DType dt = ctx.input(0).dtype();
        DSINFER_CHECK(kNumericTypes.contains(dt), ErrorCode::unsupported,
                      "Einsum does not support element type ", dtype_name(dt));
        std::array<Shape, kMaxEinsumInputs> shapes{};
        for (int i = 0; i < ctx.num_inputs(); ++i) {
            DSINFER_CHECK(ctx.input(i).dtype() == dt, ErrorCode::invalid_argument, "Einsum input ",
                          i, " has type ", dtype_name(ctx.input(i).dtype()), ", expected ",
                          dtype_name(dt));
            shapes[static_cast<std::size_t>(i)] = ctx.input(i).shape();
        }
        EinsumPlan plan;
        DSINFER_RETURN_IF_ERROR(make_plan(shapes, plan));
        ctx.set_output(0, dt, plan.out_shape);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        std::array<Shape, kMaxEinsumInputs> shapes{};
        const int ni = ctx.num_inputs();
        for (int i = 0; i < ni; ++i) shapes[static_cast<std::size_t>(i)] = ctx.input(i).shape;
        EinsumPlan plan;
        DSINFER_RETURN_IF_ERROR(make_plan(shapes, plan));
        return dispatch_types(ctx.output(0).dtype, NumericTypes{}, [&]<class T>() -> Status {
            compute<T>(ctx, plan, ni);
            return Status::ok();
        });
    }

private:
    // Resolves ellipses and label dims for concrete shapes. No allocation (runs in run()).
    Status make_plan(const std::array<Shape, kMaxEinsumInputs>& shapes,
                     EinsumPlan& p) const noexcept {
        const int ni = static_cast<int>(terms_.size());
        std::array<bool, kMaxLabels> seen{};
        std::array<int, kMaxLabels> count{};
        p.dim.fill(-1);
        int ell = 0;  // ellipsis rank (max over inputs)
        for (int i = 0; i < ni; ++i) {
            const auto& term = terms_[static_cast<std::size_t>(i)];
            const Shape& s = shapes[static_cast<std::size_t>(i)];
            int explicit_count = 0;
            bool has_ell = false;
            for (int l : term) {
                if (l == kEllipsis)
                    has_ell = true;
                else
                    ++explicit_count;
            }
            const int e = s.rank() - explicit_count;
            if (e < 0 || (!has_ell && e != 0))
                return Status(ErrorCode::invalid_argument,
                              "Einsum operand " + std::to_string(i) + " has rank " +
                                  std::to_string(s.rank()) + ", which does not match its term");
            ell = std::max(ell, e);
        }
        for (int i = 0; i < ni; ++i) {
            const auto& term = terms_[static_cast<std::size_t>(i)];
            const Shape& s = shapes[static_cast<std::size_t>(i)];
            auto& st = p.stride[static_cast<std::size_t>(i)];
            st.fill(0);
            const Strides cs = contiguous_strides(s);
            int explicit_count = 0;
            for (int l : term) explicit_count += l != kEllipsis;
            const int e = s.rank() - explicit_count;
            int axis = 0;
            for (int l : term) {
                if (l == kEllipsis) {
                    for (int j = 0; j < e; ++j, ++axis) {
                        const int lab = kLetters + (ell - e) + j;
                        const int64_t d = s[axis];
                        auto& pd = p.dim[static_cast<std::size_t>(lab)];
                        if (pd == -1 || pd == 1)
                            pd = d;
                        else if (d != pd && d != 1)
                            return Status(ErrorCode::invalid_argument,
                                          "Einsum ellipsis dimensions cannot be broadcast");
                        if (d != 1)
                            st[static_cast<std::size_t>(lab)] += cs[static_cast<std::size_t>(axis)];
                        seen[static_cast<std::size_t>(lab)] = true;
                        ++count[static_cast<std::size_t>(lab)];
                    }
                    continue;
                }
                const int64_t d = s[axis];
                auto& pd = p.dim[static_cast<std::size_t>(l)];
                if (pd == -1)
                    pd = d;
                else if (pd != d)
                    return Status(ErrorCode::invalid_argument,
                                  "Einsum label '" + std::string(1, label_char(l)) +
                                      "' has inconsistent dimensions " + std::to_string(pd) +
                                      " and " + std::to_string(d));
                st[static_cast<std::size_t>(l)] += cs[static_cast<std::size_t>(axis)];
                seen[static_cast<std::size_t>(l)] = true;
                ++count[static_cast<std::size_t>(l)];
                ++axis;
            }
        }
        // Output labels.
        std::array<bool, kMaxLabels> in_out{};
        p.out_rank = 0;
        auto push_out = [&](int lab) {
            p.out_labels[static_cast<std::size_t>(p.out_rank++)] = lab;
            in_out[static_cast<std::size_t>(lab)] = true;
        };
        if (explicit_) {
            for (int l : out_) {
                if (l == kEllipsis) {
                    for (int j = 0; j < ell; ++j) push_out(kLetters + j);
                } else {
                    if (!seen[static_cast<std::size_t>(l)])
                        return Status(ErrorCode::invalid_argument,
                                      "Einsum output label '" + std::string(1, label_char(l)) +
                                          "' does not appear in any input");
                    push_out(l);
                }
            }
        } else {
            for (int j = 0; j < ell; ++j) push_out(kLetters + j);
            for (int l = 0; l < kLetters; ++l)
                if (count[static_cast<std::size_t>(l)] == 1) push_out(l);
        }
        if (p.out_rank > kMaxRank)
            return Status(ErrorCode::unsupported, "Einsum output rank exceeds the maximum rank");
        p.red_count = 0;
        for (int l = 0; l < kMaxLabels; ++l)
            if (seen[static_cast<std::size_t>(l)] && !in_out[static_cast<std::size_t>(l)])
                p.red_labels[static_cast<std::size_t>(p.red_count++)] = l;
        p.out_shape = Shape{};
        for (int i = 0; i < p.out_rank; ++i)
            p.out_shape.push_back(
                p.dim[static_cast<std::size_t>(p.out_labels[static_cast<std::size_t>(i)])]);
        return Status::ok();
    }

    static char label_char(int l) {
        if (l < 26) return static_cast<char>('A' + l);
        if (l < kLetters) return static_cast<char>('a' + l - 26);
        return '.';
    }

    template <class T>
    void compute(RunContext& ctx, const EinsumPlan& p, int ni) const noexcept {
        using C = acc_t<T>;
        std::array<const T*, kMaxEinsumInputs> in{};
        for (int i = 0; i < ni; ++i) in[static_cast<std::size_t>(i)] = ctx.input(i).data_unchecked<T>();
        T* out = ctx.output(0).data_unchecked<T>();
        const int64_t out_total = p.out_shape.num_elements();
        int64_t red_total = 1;
        for (int r = 0; r < p.red_count; ++r)
            red_total *= p.dim[static_cast<std::size_t>(p.red_labels[static_cast<std::size_t>(r)])];
        std::array<int64_t, kMaxLabels> oidx{}, ridx{};
        std::array<int64_t, kMaxEinsumInputs> base{}, off{};
        auto lstride = [&](int i, int lab) {
            return p.stride[static_cast<std::size_t>(i)][static_cast<std::size_t>(lab)];
        };
        for (int64_t o = 0; o < out_total; ++o) {
            C acc = C(0);
            for (int i = 0; i < ni; ++i)
                off[static_cast<std::size_t>(i)] = base[static_cast<std::size_t>(i)];
            for (int r = 0; r < p.red_count; ++r) ridx[static_cast<std::size_t>(r)] = 0;
            for (int64_t rr = 0; rr < red_total; ++rr) {
                C prod = C(1);
                for (int i = 0; i < ni; ++i)
                    prod *=
                        to_acc(in[static_cast<std::size_t>(i)][off[static_cast<std::size_t>(i)]]);
                acc += prod;
                for (int r = p.red_count - 1; r >= 0; --r) {
                    const int lab = p.red_labels[static_cast<std::size_t>(r)];
                    auto& ix = ridx[static_cast<std::size_t>(r)];
                    ++ix;
                    for (int i = 0; i < ni; ++i)
                        off[static_cast<std::size_t>(i)] += lstride(i, lab);
                    if (ix < p.dim[static_cast<std::size_t>(lab)]) break;
                    for (int i = 0; i < ni; ++i)
                        off[static_cast<std::size_t>(i)] -= lstride(i, lab) * ix;
                    ix = 0;
                }
            }
            out[o] = from_acc<T>(acc);
            for (int d = p.out_rank - 1; d >= 0; --d) {
                const int lab = p.out_labels[static_cast<std::size_t>(d)];
                auto& ix = oidx[static_cast<std::size_t>(d)];
                ++ix;
                for (int i = 0; i < ni; ++i) base[static_cast<std::size_t>(i)] += lstride(i, lab);
                if (ix < p.dim[static_cast<std::size_t>(lab)]) break;
                for (int i = 0; i < ni; ++i)
                    base[static_cast<std::size_t>(i)] -= lstride(i, lab) * ix;
                ix = 0;
            }
        }
    }

    std::vector<std::vector<int>> terms_;
    bool explicit_;
    std::vector<int> out_;
};

// Parses one term ("ab...c"); spaces are ignored.
StatusOr<std::vector<int>> parse_einsum_term(const std::string& t, const std::string& eq) {
    std::vector<int> out;
    bool ell = false;
    for (std::size_t i = 0; i < t.size(); ++i) {
        const char c = t[i];
        if (c == ' ') continue;
        if (c >= 'A' && c <= 'Z') {
            out.push_back(c - 'A');
        } else if (c >= 'a' && c <= 'z') {
            out.push_back(26 + (c - 'a'));
        } else if (c == '.' && i + 2 < t.size() && t[i + 1] == '.' && t[i + 2] == '.') {
            if (ell)
                return Status::error(ErrorCode::invalid_model, "Einsum equation '", eq,
                                     "' has more than one ellipsis in a term");
            ell = true;
            out.push_back(kEllipsis);
            i += 2;
        } else {
            return Status::error(ErrorCode::invalid_model, "Einsum equation '", eq,
                                 "' has an invalid character '", c, "'");
        }
    }
    return out;
}

StatusOr<std::unique_ptr<Kernel>> make_einsum(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::string eq, ctx.node().attr<std::string>("equation"));
    std::string lhs = eq, rhs;
    const auto arrow = eq.find("->");
    const bool explicit_out = arrow != std::string::npos;
    if (explicit_out) {
        lhs = eq.substr(0, arrow);
        rhs = eq.substr(arrow + 2);
    }
    std::vector<std::vector<int>> terms;
    std::size_t start = 0;
    while (true) {
        const auto comma = lhs.find(',', start);
        const std::string term =
            lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        DSINFER_ASSIGN_OR_RETURN(auto parsed, parse_einsum_term(term, eq));
        terms.push_back(std::move(parsed));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    if (static_cast<int>(terms.size()) != ctx.num_inputs())
        return Status::error(ErrorCode::invalid_model, "Einsum equation '", eq, "' names ",
                             terms.size(), " operands but the node has ", ctx.num_inputs(),
                             " inputs");
    if (terms.size() > static_cast<std::size_t>(kMaxEinsumInputs))
        return Status::error(ErrorCode::unsupported, "Einsum with more than ", kMaxEinsumInputs,
                             " operands is not supported");
    std::vector<int> out;
    if (explicit_out) {
        DSINFER_ASSIGN_OR_RETURN(out, parse_einsum_term(rhs, eq));
        std::array<bool, kMaxLabels> used{};
        for (int l : out) {
            if (l == kEllipsis) continue;
            if (used[static_cast<std::size_t>(l)])
                return Status::error(ErrorCode::invalid_model, "Einsum equation '", eq,
                                     "' repeats a label in its output");
            used[static_cast<std::size_t>(l)] = true;
        }
    }
    return make_kernel<EinsumKernel>(std::move(terms), explicit_out, std::move(out));
}

}  // namespace

StatusOr<std::unique_ptr<DirectKernel>> make_reference_matmul(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    return std::unique_ptr<DirectKernel>(std::make_unique<MatMulKernel>());
}
StatusOr<std::unique_ptr<DirectKernel>> make_reference_gemm(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k, make_gemm(ctx));
    // make_gemm creates a GemmKernel (its only kernel type).
    return std::unique_ptr<DirectKernel>(static_cast<DirectKernel*>(k.release()));
}

void register_nn_matmul_kernels(KernelRegistry& r) {
    r.add({"MatMul", "", 1, kMaxOpset, DeviceKind::cpu}, &make_matmul);
    r.add({"Gemm", "", 1, kMaxOpset, DeviceKind::cpu}, &make_gemm);
    r.add({"Einsum", "", 12, kMaxOpset, DeviceKind::cpu}, &make_einsum);
}

}  // namespace dsinfer::detail
