// The cpu backend's kernels of ONNX Runtime's com.microsoft elementwise quantized ops:
//   QLinearAdd, QLinearMul       vector loops over the broadcast plan's innermost pieces (every
//                                broadcast whose innermost step is 0 or 1 for each operand:
//                                same shape, scalar, per-channel rows, ...), threaded;
//   (QLinearAdd/Mul of equal shapes also run on channels-last operands: fast_common.hpp
//   kChannelsLastLayout)
//   QLinearGlobalAveragePool     channels first: one vector sum per channel; channels last
//                                (the attribute, or an [N, C, H, W] x stored channels last):
//                                rows summed into per-channel int32 accumulators; threaded over
//                                channels (images of 2^23 elements or more: the reference);
//   QLinearSigmoid, QLinearLeakyRelu
//                                a 256-entry table (built at creation when the scales and zero
//                                points are constants, else per run on the stack), threaded;
//   MaxPool on u8/s8 (ONNX, what QDQ ResNets run between the quantized convolutions) and on
//                                row-major float32 (what the oneDNN kernel leaves it: its
//                                row-major max pooling is far slower, 150 ms on a 2x2 pool of
//                                16 x 1024 x 1024): 2-D NCHW without Indices; per output row the
//                                vertical max of the valid kernel rows (a vector loop), then
//                                the horizontal max of the valid columns; threaded over planes.
//                                8-bit tensors channels last (negotiated with the INT8
//                                convolutions around it): each output pixel the vector max of
//                                its window's pixels, threaded over output rows.
//                                Exact, so bitwise the reference's (the lowest value, -inf for
//                                float32, where a window has no element; NaN where it has one).
// The reference kernels (src/cpu/reference/quant_ms.cpp) are every kernel's prepare (shapes,
// dtypes, errors) and the oracle: results are bitwise equal (ops/qlinear.hpp's f32 expressions
// in their order, no FMA: this file is compiled with fp-contract=off).
//
// run() allocates nothing and throws nothing. Thread safety: kernels are immutable after
// creation.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"
#include "kernels/simd.hpp"
#include "ops/qlinear.hpp"
#include "ops/window.hpp"
#include "runtime/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#pragma GCC optimize("fp-contract=off")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
// GCC 12's _mm512_cvtepu8_epi32 reads an "undefined" vector it reports as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dsinfer::detail {
namespace {

using std::int64_t;

// ---- the loops, per ISA ----------------------------------------------------------------------

#if defined(__x86_64__) && defined(__GNUC__)
#define DSINFER_QLIN_X86 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2")
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx2"))), apply_to = function)
#endif
namespace ql_avx512 {
#define QL_W 16
#include "cpu/fast/fast_qlinear_loops.inc"
#undef QL_W
}  // namespace ql_avx512
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2")
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#endif
namespace ql_avx2 {
#define QL_W 8
#include "cpu/fast/fast_qlinear_loops.inc"
#undef QL_W
}  // namespace ql_avx2
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options
#else
#define DSINFER_QLIN_X86 0
#endif

namespace ql_baseline {
#define QL_W 4
#include "cpu/fast/fast_qlinear_loops.inc"
#undef QL_W
}  // namespace ql_baseline

template <class Q>
struct QlLoops {
    void (*add)(const Q*, int64_t, const Q*, int64_t, Q*, int64_t, const QLinearBinary&) noexcept;
    void (*mul)(const Q*, int64_t, const Q*, int64_t, Q*, int64_t, const QLinearBinary&) noexcept;
    int64_t (*sum)(const Q*, int64_t) noexcept;
    void (*sum_rows)(const Q*, int64_t, int64_t, int64_t, std::int32_t*) noexcept;
    void (*max_into)(Q*, const Q*, int64_t) noexcept;
    void (*max_rows)(Q*, const Q* const*, int, int64_t) noexcept;
};

#define DSINFER_QL_LOOPS(ns)                                                        \
    QlLoops<Q> {                                                                    \
        &ns::binary<Q, false>, &ns::binary<Q, true>, &ns::sum<Q>, &ns::sum_rows<Q>, \
            &ns::max_into<Q>, &ns::max_rows<Q>                                      \
    }

template <class Q>
QlLoops<Q> ql_loops() noexcept {
#if DSINFER_QLIN_X86
    switch (fast::active_isa()) {
        case fast::Isa::avx512: return DSINFER_QL_LOOPS(ql_avx512);
        case fast::Isa::avx2: return DSINFER_QL_LOOPS(ql_avx2);
        case fast::Isa::baseline: break;
    }
#endif
    return DSINFER_QL_LOOPS(ql_baseline);
}
#undef DSINFER_QL_LOOPS

// ---- QLinearAdd, QLinearMul ------------------------------------------------------------------

/// Whether values a and b are both 8-bit rank-4 tensors of one static-or-named shape.
bool same_int8_rank4(const Value& a, const Value& b) {
    if (!fast::int8_rank4(a) || !fast::int8_rank4(b)) return false;
    const std::string sa = a.shape.to_string();
    return sa == b.shape.to_string() && sa.find('?') == std::string::npos;
}

template <bool Mul>
class QLinearBinaryFast final : public fast::FastKernel {
public:
    using FastKernel::FastKernel;

    /// Equal shapes: element i of C from element i of A and B, in any memory order.
    LayoutSupport layout_support(const Graph& g, const Node& n) const override {
        if (n.inputs.size() < 4 || n.outputs.empty() || n.inputs[0] == kNoValue ||
            n.inputs[3] == kNoValue || n.outputs[0] == kNoValue ||
            !same_int8_rank4(g.value(n.inputs[0]), g.value(n.inputs[3])) ||
            !same_int8_rank4(g.value(n.inputs[0]), g.value(n.outputs[0])))
            return {};
        return {fast::kChannelsLastLayout, (1u << 0) | (1u << 3), 1, true};
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        const TensorView& b = ctx.input(3);
        const TensorView& c = ctx.output(0);
        const QLinearBinary p = qlinear_binary_params(ctx, Mul);
        const fast::LoopPlan<3> plan = fast::plan_broadcast<3>(c.shape, {a.shape, b.shape});
        const auto go = [&]<class Q>() {
            const QlLoops<Q> loops = ql_loops<Q>();
            const auto f = Mul ? loops.mul : loops.add;
            const Q* ap = a.data_unchecked<Q>();
            const Q* bp = b.data_unchecked<Q>();
            Q* cp = c.data_unchecked<Q>();
            fast::parallel_pieces(plan, fast::kGrain,
                                  [&](const std::array<int64_t, 3>& off, int64_t n) {
                                      f(ap + off[1], plan.step(1), bp + off[2], plan.step(2),
                                        cp + off[0], n, p);
                                  });
        };
        if (a.dtype == DType::u8) go.template operator()<std::uint8_t>();
        else go.template operator()<std::int8_t>();
        return Status::ok();
    }
};

// ---- QLinearGlobalAveragePool ------------------------------------------------------------------

/// Channels per accumulator block of the channels-last sum.
constexpr int64_t kChannelBlock = 256;
/// The int32 sums hold images below this many elements.
constexpr int64_t kMaxPoolCount = int64_t{1} << 23;

class QLinearGlobalAveragePoolFast final : public fast::FastKernel {
public:
    QLinearGlobalAveragePoolFast(std::unique_ptr<Kernel> fb, bool channels_last)
        : FastKernel(std::move(fb)), last_(channels_last) {}

    /// A channels-first [N, C, H, W] x with static H and W below kMaxPoolCount pixels (the fast
    /// path always runs) may come channels last; y [N, C, 1, 1] is the same in both orders.
    LayoutSupport layout_support(const Graph& g, const Node& n) const override {
        if (last_ || n.inputs.empty() || n.inputs[0] == kNoValue) return {};
        const Value& x = g.value(n.inputs[0]);
        if (!fast::int8_rank4(x) || !x.shape.dims[2].is_static() || !x.shape.dims[3].is_static())
            return {};
        const int64_t count = x.shape.dims[2].value * x.shape.dims[3].value;
        if (count <= 0 || count >= kMaxPoolCount) return {};
        return {fast::kChannelsLastLayout, 1, 0, false};
    }
    Status use_layouts(std::uint64_t in, std::uint64_t) override {
        nhwc_ = (in & 1u) != 0;
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const Shape& s = x.shape;
        const int r = s.rank();
        if (r < 2) return fallback_run(ctx);
        const bool last = last_ || nhwc_;  // memory order: channels last
        const int64_t n = s[0], c = last_ ? s[r - 1] : s[1];
        const int64_t count = last_ ? s.size_between(1, r - 1) : s.size_between(2, r);
        if (count >= kMaxPoolCount || count == 0) return fallback_run(ctx);
        const float m =
            qlinear_pool_multiplier(qlinear_scale(ctx, 1), qlinear_scale(ctx, 3), count);
        const std::int32_t zx = qlinear_zero(ctx, 2), zy = qlinear_zero(ctx, 4);
        const int64_t bias = -static_cast<int64_t>(zx) * count;
        const auto go = [&]<class Q>() {
            const QlLoops<Q> loops = ql_loops<Q>();
            const Q* xp = x.data_unchecked<Q>();
            Q* yp = ctx.output(0).data_unchecked<Q>();
            if (!last) {
                const int64_t grain = std::max<int64_t>(1, fast::kGrain / count);
                parallel_for(n * c, grain, [&](int64_t b, int64_t e) {
                    for (int64_t i = b; i < e; ++i)
                        yp[i] = qlinear_pool_value<Q>(loops.sum(xp + i * count, count) + bias,
                                                      m, zy);
                });
                return;
            }
            const int64_t blocks = (c + kChannelBlock - 1) / kChannelBlock;
            const int64_t grain =
                std::max<int64_t>(1, fast::kGrain / std::max<int64_t>(1, count * kChannelBlock));
            parallel_for(n * blocks, grain, [&](int64_t b, int64_t e) {
                alignas(64) std::int32_t acc[kChannelBlock];
                for (int64_t t = b; t < e; ++t) {
                    const int64_t img = t / blocks, c0 = (t % blocks) * kChannelBlock;
                    const int64_t w = std::min(kChannelBlock, c - c0);
                    std::fill(acc, acc + w, 0);
                    loops.sum_rows(xp + img * count * c + c0, count, c, w, acc);
                    for (int64_t j = 0; j < w; ++j)
                        yp[img * c + c0 + j] = qlinear_pool_value<Q>(acc[j] + bias, m, zy);
                }
            });
        };
        if (x.dtype == DType::u8) go.template operator()<std::uint8_t>();
        else go.template operator()<std::int8_t>();
        return Status::ok();
    }

private:
    bool last_;          ///< the channels_last attribute: x is [N, ..., C]
    bool nhwc_ = false;  ///< x [N, C, H, W] stored channels last (negotiated at compile)
};

StatusOr<std::unique_ptr<Kernel>> make_global_pool(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fb, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(int64_t last, ctx.node().attr_or<int64_t>("channels_last", 0));
    return make_kernel<QLinearGlobalAveragePoolFast>(std::move(fb), last != 0);
}

// ---- QLinearSigmoid, QLinearLeakyRelu -----------------------------------------------------------

/// A lookup op's table, for u8 or s8 data.
struct Table {
    DType dtype = DType::u8;
    std::array<std::uint8_t, 256> bytes{};  ///< entry x (as an unsigned byte): the output's bits
};

template <class Q>
void fill_table(const QLinearLutParams& p, std::array<std::uint8_t, 256>& out) noexcept {
    std::array<Q, 256> t;
    qlinear_lut_table<Q>(p, t);
    std::memcpy(out.data(), t.data(), 256);
}

class QLinearLutFast final : public fast::FastKernel {
public:
    QLinearLutFast(std::unique_ptr<Kernel> fb, QLinearLut kind, float alpha,
                   std::optional<Table> table)
        : FastKernel(std::move(fb)), kind_(kind), alpha_(alpha), table_(table) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        Table local;
        const Table* t = table_ && table_->dtype == x.dtype ? &*table_ : nullptr;
        if (t == nullptr) {
            QLinearLutParams p{kind_, alpha_, qlinear_scale(ctx, 1), qlinear_scale(ctx, 3),
                               qlinear_zero(ctx, 2), qlinear_zero(ctx, 4)};
            local.dtype = x.dtype;
            if (x.dtype == DType::u8) fill_table<std::uint8_t>(p, local.bytes);
            else fill_table<std::int8_t>(p, local.bytes);
            t = &local;
        }
        const auto* xp = static_cast<const std::uint8_t*>(x.raw);
        auto* yp = static_cast<std::uint8_t*>(ctx.output(0).raw);
        const std::uint8_t* tb = t->bytes.data();
        parallel_for(x.num_elements(), fast::kGrainBytes, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) yp[i] = tb[xp[i]];
        });
        return Status::ok();
    }

private:
    QLinearLut kind_;
    float alpha_;
    std::optional<Table> table_;
};

/// Input i's one float32 / zero-point value when it is a constant (absent zero point: 0).
std::optional<float> const_scale(const KernelCreateContext& ctx, int i) {
    const Tensor* t = ctx.constant_input(i);
    if (t == nullptr || t->dtype() != DType::f32 || t->num_elements() != 1) return std::nullopt;
    return *t->data_unchecked<float>();
}
std::optional<std::int32_t> const_zero(const KernelCreateContext& ctx, int i, DType want) {
    if (!ctx.has_input(i)) return 0;
    const Tensor* t = ctx.constant_input(i);
    if (t == nullptr || t->dtype() != want || t->num_elements() != 1) return std::nullopt;
    return want == DType::i8 ? *t->data_unchecked<std::int8_t>() : *t->data_unchecked<std::uint8_t>();
}

template <QLinearLut Kind>
StatusOr<std::unique_ptr<Kernel>> make_lut(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fb, ctx.create_fallback());
    float alpha = 0.01f;
    if constexpr (Kind == QLinearLut::leaky_relu) {
        DSINFER_ASSIGN_OR_RETURN(alpha, ctx.node().attr_or<float>("alpha", 0.01f));
    }
    std::optional<Table> table;
    const Value* x = ctx.input_value(0);
    if (x != nullptr && x->dtype && (*x->dtype == DType::u8 || *x->dtype == DType::i8)) {
        const DType dt = *x->dtype;
        const auto xs = const_scale(ctx, 1), ys = const_scale(ctx, 3);
        const auto zx = const_zero(ctx, 2, dt), zy = const_zero(ctx, 4, dt);
        if (xs && ys && zx && zy) {
            const QLinearLutParams p{Kind, alpha, *xs, *ys, *zx, *zy};
            Table t;
            t.dtype = dt;
            if (dt == DType::u8) fill_table<std::uint8_t>(p, t.bytes);
            else fill_table<std::int8_t>(p, t.bytes);
            table = t;
        }
    }
    return make_kernel<QLinearLutFast>(std::move(fb), Kind, alpha, table);
}

// ---- MaxPool on u8 / s8 ---------------------------------------------------------------------

/// Input rows wider than this go to the fallback (the vertical maxima live on the stack).
constexpr int64_t kMaxPoolRow = 4096;
/// Channels-last input rows (width x channels) up to this many elements take the separable
/// path (the rows' maxima live on the stack).
constexpr int64_t kSeparableRow = 16384;

class MaxPoolQ8Fast final : public fast::FastKernel {
public:
    MaxPoolQ8Fast(std::unique_ptr<Kernel> fb, PoolAttrs a) : FastKernel(std::move(fb)), a_(std::move(a)) {}

    /// 8-bit [N, C, H, W] in and out may both be channels last.
    LayoutSupport layout_support(const Graph& g, const Node& n) const override {
        if (n.inputs.empty() || n.outputs.size() != 1 || n.inputs[0] == kNoValue ||
            n.outputs[0] == kNoValue || !fast::int8_rank4(g.value(n.inputs[0])) ||
            !fast::int8_rank4(g.value(n.outputs[0])))
            return {};
        return {fast::kChannelsLastLayout, 1, 1, true};
    }
    Status use_layouts(std::uint64_t in, std::uint64_t) override {
        nhwc_ = (in & 1u) != 0;
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        if (x.shape.rank() != 4 || (!nhwc_ && x.shape[3] > kMaxPoolRow)) return fallback_run(ctx);
        WindowGeom g;
        const Status st = window_geometry(
            a_, x.shape, [&](int i) { return a_.kernel_shape[static_cast<std::size_t>(i)]; },
            a_.ceil_mode, g);
        if (!st.is_ok()) return st;
        if (nhwc_ && x.dtype == DType::u8) pool_nhwc<std::uint8_t>(x, ctx.output(0), g);
        else if (nhwc_) pool_nhwc<std::int8_t>(x, ctx.output(0), g);
        else if (x.dtype == DType::u8) pool<std::uint8_t>(x, ctx.output(0), g);
        else if (x.dtype == DType::i8) pool<std::int8_t>(x, ctx.output(0), g);
        else pool<float>(x, ctx.output(0), g);
        return Status::ok();
    }

private:
    template <class Q>
    static void pool(const TensorView& x, const TensorView& y, const WindowGeom& g) noexcept {
        const int64_t planes = x.shape[0] * x.shape[1];
        const int64_t ih = g.in[0], iw = g.in[1], oh = g.out[0], ow = g.out[1];
        const Q* xp = x.data_unchecked<Q>();
        Q* yp = y.data_unchecked<Q>();
        // float32: -inf below every value, and the first NaN in a window wins (the reference's
        // rule; taken vertically then horizontally, so of several NaN payloads another may win).
        constexpr Q lowest = std::is_same_v<Q, float> ? -std::numeric_limits<float>::infinity()
                                                      : std::numeric_limits<Q>::lowest();
        const auto take = [](Q v, Q best) {
            if constexpr (std::is_same_v<Q, float>) return v > best || (v != v && best == best);
            else return v > best;
        };
        const int64_t grain = std::max<int64_t>(1, fast::kGrain / std::max<int64_t>(1, ih * iw));
        const auto vertical = [] {
            if constexpr (std::is_same_v<Q, float>) return nullptr;
            else return ql_loops<Q>().max_into;
        }();
        const auto max_into = [&](Q* acc, const Q* row, int64_t n) {
            if constexpr (std::is_same_v<Q, float>) {
                for (int64_t j = 0; j < n; ++j) acc[j] = take(row[j], acc[j]) ? row[j] : acc[j];
            } else {
                vertical(acc, row, n);
            }
        };
        parallel_for(planes, grain, [&](int64_t p0, int64_t p1) {
            Q col[kMaxPoolRow];
            for (int64_t p = p0; p < p1; ++p) {
                const Q* in = xp + p * ih * iw;
                Q* out = yp + p * oh * ow;
                for (int64_t oy = 0; oy < oh; ++oy) {
                    std::fill(col, col + iw, lowest);
                    for (int64_t ky = 0; ky < g.k[0]; ++ky) {
                        const int64_t iy = oy * g.stride[0] - g.pb[0] + ky * g.dil[0];
                        if (iy < 0 || iy >= ih) continue;
                        max_into(col, in + iy * iw, iw);
                    }
                    const int64_t kw = g.k[1], sx = g.stride[1], dx = g.dil[1];
                    // Output ox's window by the general loop (any geometry, edges checked).
                    const auto window = [&](int64_t ox) {
                        const int64_t ix0 = ox * sx - g.pb[1];
                        Q best = lowest;
                        if (ix0 >= 0 && ix0 + (kw - 1) * dx < iw) {  // inside: no checks
                            for (int64_t kx = 0; kx < kw; ++kx)
                                if (take(col[ix0 + kx * dx], best)) best = col[ix0 + kx * dx];
                        } else {
                            for (int64_t kx = 0; kx < kw; ++kx) {
                                const int64_t ix = ix0 + kx * dx;
                                if (ix >= 0 && ix < iw && take(col[ix], best)) best = col[ix];
                            }
                        }
                        out[oy * ow + ox] = best;
                    };
                    // 2 wide, stride 2 (U-Nets' pools): the outputs [lo, hi) whose pair lies
                    // inside the row in one branch-free loop the compiler vectorizes (the
                    // window's first value, then the second taken as `window` takes it).
                    int64_t lo = 0, hi = 0;
                    if (kw == 2 && sx == 2 && dx == 1) {
                        lo = std::min(ow, (g.pb[1] + 1) / 2);
                        hi = std::max(lo, std::min(ow, (iw + g.pb[1]) / 2));
                        const Q* c0 = col - g.pb[1];
                        Q* o = out + oy * ow;
                        for (int64_t ox = lo; ox < hi; ++ox) {
                            const Q a = c0[2 * ox], b = c0[2 * ox + 1];
                            o[ox] = take(b, a) ? b : a;
                        }
                    }
                    for (int64_t ox = 0; ox < lo; ++ox) window(ox);
                    for (int64_t ox = hi; ox < ow; ++ox) window(ox);
                }
            }
        });
    }

    /// Channels last, threaded over output rows. Rows of up to kSeparableRow elements: the
    /// window's input rows folded first (vertical maxima of the whole row), then each output
    /// pixel the vector max of its window's columns of those. Wider rows: each output pixel the
    /// vector max of its window's valid input pixels (C bytes each), gathered as pointers and
    /// folded by one max_rows call (64 bytes at a time held in registers across the window; a
    /// call per pixel and tap took 2.5-3.4x longer on ResNet-50's stem pool).
    template <class Q>
    static void pool_nhwc(const TensorView& x, const TensorView& y, const WindowGeom& g) noexcept {
        const int64_t c = x.shape[1], rows = x.shape[0] * g.out[0];
        const int64_t ih = g.in[0], iw = g.in[1], oh = g.out[0], ow = g.out[1];
        const Q* xp = x.data_unchecked<Q>();
        Q* yp = y.data_unchecked<Q>();
        const QlLoops<Q> loops = ql_loops<Q>();
        const int64_t grain =
            std::max<int64_t>(1, fast::kGrain / std::max<int64_t>(1, ow * c * g.k[0] * g.k[1]));
        // A window's valid pixels, up to kRows at a time (one max_rows call each batch).
        constexpr int kRows = 64;
        // o = the max of the rows (the first batch of o's window), or o's max with them.
        const auto fold = [&](Q* o, const Q* const* rows_, int count, bool first) {
            if (first)
                loops.max_rows(o, rows_, count, c);
            else
                for (int t = 0; t < count; ++t) loops.max_into(o, rows_[t], c);
        };
        const int64_t row_bytes = iw * c;
        // Separable: ResNet-50's stem pool (3x3/2, 64 channels, 112 wide) takes 3 vertical + 3
        // horizontal 64-byte maxima per output pixel instead of gathering its 9 pixels:
        // 0.53-0.61 -> 0.34-0.51 ms at b8 (ds-profiler, 6 alternating runs).
        const bool separable = row_bytes <= kSeparableRow;
        parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
            alignas(64) Q vrow[kSeparableRow];
            const Q* src[kRows];
            for (int64_t r = r0; r < r1; ++r) {
                const int64_t img = r / oh, oy = r % oh;
                const Q* in = xp + img * ih * row_bytes;
                Q* out = yp + r * ow * c;
                int valid = 0;  // the window's input rows inside the image
                for (int64_t ky = 0; ky < g.k[0] && separable; ++ky) {
                    const int64_t iy = oy * g.stride[0] - g.pb[0] + ky * g.dil[0];
                    if (iy < 0 || iy >= ih) continue;
                    if (valid++ == 0)
                        std::memcpy(vrow, in + iy * row_bytes,
                                    static_cast<std::size_t>(row_bytes) * sizeof(Q));
                    else
                        loops.max_into(vrow, in + iy * row_bytes, row_bytes);
                }
                for (int64_t ox = 0; ox < ow; ++ox) {
                    Q* o = out + ox * c;
                    int count = 0;
                    bool first = true;
                    // The window's valid pixels of one row (an input row, or vrow).
                    const auto columns = [&](const Q* line) {
                        for (int64_t kx = 0; kx < g.k[1]; ++kx) {
                            const int64_t ix = ox * g.stride[1] - g.pb[1] + kx * g.dil[1];
                            if (ix < 0 || ix >= iw) continue;
                            src[count++] = line + ix * c;
                            if (count == kRows) {  // a large window: fold this batch in
                                fold(o, src, count, first);
                                first = false;
                                count = 0;
                            }
                        }
                    };
                    if (separable) {
                        if (valid > 0) columns(vrow);
                    } else {
                        for (int64_t ky = 0; ky < g.k[0]; ++ky) {
                            const int64_t iy = oy * g.stride[0] - g.pb[0] + ky * g.dil[0];
                            if (iy >= 0 && iy < ih) columns(in + iy * row_bytes);
                        }
                    }
                    if (count > 0)
                        fold(o, src, count, first);
                    else if (first)  // no valid pixel (padding only)
                        std::fill(o, o + c, std::numeric_limits<Q>::lowest());
                }
            }
        });
    }

    PoolAttrs a_;
    bool nhwc_ = false;  ///< x and y channels last (negotiated at compile)
};

StatusOr<std::unique_ptr<Kernel>> make_max_pool_q8(const KernelCreateContext& ctx) {
    if (ctx.has_output(1))
        return Status::error(ErrorCode::unsupported, "MaxPool u8/s8: without Indices only");
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fb, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(PoolAttrs a, parse_pool_attrs(ctx));
    if (a.kernel_shape.size() != 2)
        return Status::error(ErrorCode::unsupported, "MaxPool u8/s8: 2-D windows only");
    return make_kernel<MaxPoolQ8Fast>(std::move(fb), std::move(a));
}

}  // namespace

void register_fast_qlinear(KernelRegistry& r) {
    constexpr const char* ms = "com.microsoft";
    const DTypeSet q8{DType::u8, DType::i8};
    auto add = [&](const char* op, KernelFactory f) {
        r.add({op, ms, 1, 1, DeviceKind::cpu, q8}, f, kPriorityCpu, "cpu");
    };
    add("QLinearAdd", &make_with_fallback<QLinearBinaryFast<false>>);
    add("QLinearMul", &make_with_fallback<QLinearBinaryFast<true>>);
    add("QLinearGlobalAveragePool", &make_global_pool);
    add("QLinearSigmoid", &make_lut<QLinearLut::sigmoid>);
    add("QLinearLeakyRelu", &make_lut<QLinearLut::leaky_relu>);
    r.add({"MaxPool", "", 1, kMaxOpset, DeviceKind::cpu, DTypeSet{DType::u8, DType::i8, DType::f32}},
          &make_max_pool_q8, kPriorityCpu, "cpu");
}

}  // namespace dsinfer::detail

#pragma GCC diagnostic pop
