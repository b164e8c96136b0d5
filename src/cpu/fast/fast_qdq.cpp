// The cpu backend's QuantizeLinear and DequantizeLinear: the graph edges of a QDQ model that
// the QDQ fusion (src/passes/fuse_qdq.cpp) leaves (an activation quantized once and read by
// float ops, weights of unfused ops). Vector loops per ISA (fast_qdq_loops.inc), threads over
// big tensors; bitwise the reference kernels' results (src/cpu/reference/quant.cpp, which is
// every node's prepare and the fallback for the forms not taken here).
//
// Forms taken: float32 x (Q) / y (DQ), float32 scale, u8 or s8 quantized side, per-tensor
// (one scale) or per-axis (1-D scale along `axis`, opset >= 13); not blocked (block_size),
// 16-bit or f64 scales, `precision`, int16/int32 types (the reference kernel runs those).
//
// Thread safety: kernels are immutable after creation. run() allocates nothing.
#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"
#include "kernels/simd.hpp"
#include "ops/quantize.hpp"
#include "runtime/parallel.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <type_traits>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace dsinfer::detail {
namespace {

using std::int64_t;

#if defined(__x86_64__) && defined(__GNUC__)
#define DSINFER_QQ_X86 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma")
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))), apply_to = function)
#endif
namespace qq_avx512 {
#define QQ_W 16
#include "cpu/fast/fast_qdq_loops.inc"
#undef QQ_W
}  // namespace qq_avx512
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#endif
namespace qq_avx2 {
#define QQ_W 8
#include "cpu/fast/fast_qdq_loops.inc"
#undef QQ_W
}  // namespace qq_avx2
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options
#else
#define DSINFER_QQ_X86 0
#endif

namespace qq_baseline {
#define QQ_W 4
#include "cpu/fast/fast_qdq_loops.inc"
#undef QQ_W
}  // namespace qq_baseline

template <class Q>
struct QqLoops {
    void (*quantize)(const float*, int64_t, const float*, const Q*, bool, Q*) noexcept;
    void (*dequantize)(const Q*, int64_t, const float*, const Q*, bool, float*) noexcept;
};

template <class Q>
QqLoops<Q> qq_loops() noexcept {
#if DSINFER_QQ_X86
    switch (fast::active_isa()) {
        case fast::Isa::avx512: return {&qq_avx512::quantize<Q>, &qq_avx512::dequantize<Q>};
        case fast::Isa::avx2: return {&qq_avx2::quantize<Q>, &qq_avx2::dequantize<Q>};
        case fast::Isa::baseline: break;
    }
#endif
    return {&qq_baseline::quantize<Q>, &qq_baseline::dequantize<Q>};
}

/// Elements per thread below which the loops stay on one thread.
constexpr int64_t kGrain = int64_t{1} << 16;

/// x walked as [outer, n, inner] around the per-axis scale's axis (n = 1 per tensor).
struct Walk {
    int64_t outer = 1, n = 1, inner = 1;
    bool per_axis = false;
};

/// The layout the fast loops take, or false (the reference kernel runs the node).
bool make_walk(const Shape& x, const Shape& s, int64_t axis_attr, Walk& w) {
    if (s.num_elements() == 1 && s.rank() <= 1) {
        w.inner = x.num_elements();
        return true;
    }
    if (s.rank() != 1) return false;
    const int rank = x.rank();
    const int64_t axis = axis_attr < 0 ? axis_attr + rank : axis_attr;
    if (axis < 0 || axis >= rank || x[static_cast<int>(axis)] != s[0]) return false;
    w.per_axis = true;
    w.outer = x.size_between(0, static_cast<int>(axis));
    w.n = s[0];
    w.inner = x.size_between(static_cast<int>(axis) + 1, rank);
    return true;
}

/// Runs body(src offset, count, param offset, per_element) over x's elements, threaded: per
/// tensor in chunks; per axis, slices of `inner` elements with one parameter each, or (inner
/// = 1) rows of n elements with a parameter per element.
template <class Body>
void for_each_run(const Walk& w, Body&& body) noexcept {
    const int64_t total = w.outer * w.n * w.inner;
    if (!w.per_axis) {
        parallel_for(total, kGrain, [&](int64_t b, int64_t e) { body(b, e - b, 0, false); });
        return;
    }
    if (w.inner == 1) {
        parallel_for(w.outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(w.n, 1)),
                     [&](int64_t o0, int64_t o1) {
                         for (int64_t o = o0; o < o1; ++o) body(o * w.n, w.n, 0, true);
                     });
        return;
    }
    parallel_for(w.outer * w.n, std::max<int64_t>(1, kGrain / w.inner), [&](int64_t s0, int64_t s1) {
        for (int64_t s = s0; s < s1; ++s) body(s * w.inner, w.inner, s % w.n, false);
    });
}

class QdqKernel final : public fast::FastKernel {
public:
    QdqKernel(std::unique_ptr<Kernel> fallback, bool quantize, int64_t axis)
        : FastKernel(std::move(fallback)), quantize_(quantize), axis_(axis) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& s = ctx.input(1);
        const TensorView& y = ctx.output(0);
        const bool has_zp = ctx.has_input(2);
        const DType q = quantize_ ? y.dtype : x.dtype;
        const DType f = quantize_ ? x.dtype : y.dtype;
        Walk w;
        if (f != DType::f32 || s.dtype != DType::f32 || (q != DType::u8 && q != DType::i8) ||
            (has_zp && ctx.input(2).dtype != q) || !make_walk(x.shape, s.shape, axis_, w))
            return fallback_run(ctx);
        const float* sp = s.data_unchecked<float>();
        const void* zp = has_zp ? ctx.input(2).raw : nullptr;
        if (q == DType::u8) run_as<std::uint8_t>(w, x.raw, sp, zp, y.raw);
        else run_as<std::int8_t>(w, x.raw, sp, zp, y.raw);
        return Status::ok();
    }

private:
    template <class Q>
    void run_as(const Walk& w, const void* x, const float* s, const void* zp, void* y) const noexcept {
        const QqLoops<Q> loops = qq_loops<Q>();
        const Q* z = static_cast<const Q*>(zp);
        for_each_run(w, [&](int64_t off, int64_t count, int64_t p, bool per_element) {
            const Q* zz = z != nullptr ? z + p : nullptr;
            if (quantize_)
                loops.quantize(static_cast<const float*>(x) + off, count, s + p, zz, per_element,
                               static_cast<Q*>(y) + off);
            else
                loops.dequantize(static_cast<const Q*>(x) + off, count, s + p, zz, per_element,
                                 static_cast<float*>(y) + off);
        });
    }

    bool quantize_;
    int64_t axis_;
};

/// The fast kernel, or unsupported for attributes it does not take (block_size, precision,
/// output_dtype other than the zero point's / float32).
StatusOr<std::unique_ptr<Kernel>> make_qdq(const KernelCreateContext& ctx, bool quantize) {
    const Node& node = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(int64_t axis, node.attr_or<int64_t>("axis", 1));
    DSINFER_ASSIGN_OR_RETURN(int64_t block, node.attr_or<int64_t>("block_size", 0));
    DSINFER_ASSIGN_OR_RETURN(int64_t prec, node.attr_or<int64_t>("precision", 0));
    DSINFER_ASSIGN_OR_RETURN(int64_t odt, node.attr_or<int64_t>("output_dtype", 0));
    if (block != 0 || prec != 0 || (!quantize && odt != 0 && odt != 1))
        return Status::error(ErrorCode::unsupported, "fast (De)QuantizeLinear: not this form");
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    return make_kernel<QdqKernel>(std::move(fallback), quantize, axis);
}

}  // namespace

void register_fast_qdq(KernelRegistry& r) {
    r.add({"QuantizeLinear", "", 10, kMaxOpset, DeviceKind::cpu},
          [](const KernelCreateContext& c) { return make_qdq(c, true); }, kPriorityCpu, "cpu");
    r.add({"DequantizeLinear", "", 10, kMaxOpset, DeviceKind::cpu},
          [](const KernelCreateContext& c) { return make_qdq(c, false); }, kPriorityCpu, "cpu");
}

}  // namespace dsinfer::detail

#pragma GCC diagnostic pop
