// Fast float32 reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceL2,
// ReduceSumSquare. After dropping size-1 dims and merging neighbours with the same role, a
// reduction that is [kept, reduced] (the last axes, e.g. BERT's LayerNorm ReduceMean) runs as
// vectorized row reductions; [reduced, kept] and [kept, reduced, kept] (outer axes, e.g. a sum
// over the batch) accumulate whole rows into per-column accumulators. Other axis patterns,
// other dtypes and empty reductions run the reference kernel's code.
//
// Numerics and determinism: sums accumulate in double like the reference. Column reductions add
// in the reference's order (bitwise equal). Row reductions add in fixed vector lanes and fixed
// chunks that depend only on the row length, never on the thread count, so results are
// bitwise identical run to run and across thread counts, and within 1 ulp of the reference
// (the double sum's order differs). Max/Min are exact, including the reference's NaN (the
// canonical quiet NaN) and the sign of a zero result (the first zero in the reduced order).
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"
#include "ops/reduce.hpp"

namespace dsinfer::detail::fast {
namespace {

enum class Red { sum, mean, max, min, l2, sum_sq };

bool is_extremum(Red op) noexcept { return op == Red::max || op == Red::min; }

/// The float result of a double accumulation over `count` elements.
float finish(Red op, double acc, std::int64_t count) noexcept {
    switch (op) {
        case Red::mean:
            return count > 0 ? static_cast<float>(acc / static_cast<double>(count))
                             : std::numeric_limits<float>::quiet_NaN();
        case Red::l2: return static_cast<float>(std::sqrt(acc));
        default: return static_cast<float>(acc);
    }
}

/// Row chunks: at least kRowChunk elements, at most kMaxChunks per row. Depends only on the
/// row length, so a row's sum is the same whichever thread (or threads) compute it.
constexpr std::int64_t kRowChunk = 16384;
constexpr std::int64_t kMaxChunks = 256;

std::int64_t chunk_len(std::int64_t len) noexcept {
    return std::max(kRowChunk, (len + kMaxChunks - 1) / kMaxChunks);
}

double chunk_sum(Red op, const float* x, std::int64_t n) noexcept {
    const SimdOps& s = simd();
    return (op == Red::l2 || op == Red::sum_sq) ? s.sum_sq(x, n) : s.sum(x, n);
}

/// max/min of a row: the canonical NaN if any; a zero result takes the sign of the first
/// zero (the reference keeps the first of equal values).
float row_extremum(Red op, const float* x, std::int64_t n) noexcept {
    const float r = op == Red::max ? simd().max(x, n) : simd().min(x, n);
    if (r == 0.0f)
        for (std::int64_t i = 0; i < n; ++i)
            if (x[i] == 0.0f) return x[i];
    return r;
}

float reduce_row(Red op, const float* x, std::int64_t n) noexcept {
    if (is_extremum(op)) return row_extremum(op, x, n);
    const std::int64_t c = chunk_len(n);
    double acc = 0;
    for (std::int64_t i = 0; i < n; i += c) acc += chunk_sum(op, x + i, std::min(c, n - i));
    return finish(op, acc, n);
}

/// rows x len, each row reduced to one output.
void reduce_rows(Red op, const float* x, float* y, std::int64_t rows, std::int64_t len) {
    const std::int64_t c = chunk_len(len);
    const std::int64_t chunks = (len + c - 1) / c;
    if (chunks > 1 && rows < 2 * max_threads() && !is_extremum(op)) {
        // Few long rows: the chunks of one row in parallel, combined in chunk order.
        for (std::int64_t r = 0; r < rows; ++r) {
            const float* row = x + r * len;
            double partial[kMaxChunks];
            parallel_for(chunks, 1, [&](std::int64_t b, std::int64_t e) {
                for (std::int64_t k = b; k < e; ++k)
                    partial[k] = chunk_sum(op, row + k * c, std::min(c, len - k * c));
            });
            double acc = 0;
            for (std::int64_t k = 0; k < chunks; ++k) acc += partial[k];
            y[r] = finish(op, acc, len);
        }
        return;
    }
    const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(len, 1));
    parallel_for(rows, grain, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r) y[r] = reduce_row(op, x + r * len, len);
    });
}

/// outer x [red x inner] -> outer x inner: each column reduced over `red` rows in order.
void reduce_columns(Red op, const float* x, float* y, std::int64_t outer, std::int64_t red,
                    std::int64_t inner) {
    constexpr std::int64_t kBlock = 256;
    const SimdOps& s = simd();
    const std::int64_t blocks = (inner + kBlock - 1) / kBlock;
    const std::int64_t work = red * std::min(inner, kBlock);
    const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(work, 1));
    parallel_for(outer * blocks, grain, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t it = b; it < e; ++it) {
            const std::int64_t o = it / blocks;
            const std::int64_t c0 = (it % blocks) * kBlock;
            const std::int64_t n = std::min(kBlock, inner - c0);
            const float* base = x + o * red * inner + c0;
            float* out = y + o * inner + c0;
            if (is_extremum(op)) {
                float acc[kBlock];
                std::fill_n(acc, n, op == Red::max ? -std::numeric_limits<float>::infinity()
                                                   : std::numeric_limits<float>::infinity());
                const auto fn = op == Red::max ? s.acc_max : s.acc_min;
                for (std::int64_t r = 0; r < red; ++r) fn(acc, base + r * inner, n);
                for (std::int64_t i = 0; i < n; ++i)
                    out[i] = acc[i] != acc[i] ? std::numeric_limits<float>::quiet_NaN() : acc[i];
            } else {
                double acc[kBlock] = {};
                const auto fn = (op == Red::l2 || op == Red::sum_sq) ? s.acc_sum_sq : s.acc_sum;
                for (std::int64_t r = 0; r < red; ++r) fn(acc, base + r * inner, n);
                for (std::int64_t i = 0; i < n; ++i) out[i] = finish(op, acc[i], red);
            }
        }
    });
}

class ReduceFast final : public FastKernel {
public:
    ReduceFast(std::unique_ptr<Kernel> fb, Red op, bool noop, bool from_input,
               std::vector<std::int64_t> axes)
        : FastKernel(std::move(fb)), op_(op), noop_(noop), from_input_(from_input),
          axes_(std::move(axes)) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        if (x.dtype != DType::f32) return fallback_run(ctx);
        if (y.num_elements() == 0) return Status::ok();
        std::array<bool, kMaxRank> reduced{};
        if (x.num_elements() == 0 || !reduced_axes(ctx, x.shape.rank(), reduced))
            return fallback_run(ctx);
        // Role groups over the non-1 dims: sizes of alternating kept/reduced runs.
        std::array<std::int64_t, kMaxRank> size{};
        std::array<bool, kMaxRank> role{};
        int g = 0;
        for (int d = 0; d < x.shape.rank(); ++d) {
            if (x.shape[d] == 1) continue;
            const bool red = reduced[static_cast<std::size_t>(d)];
            if (g > 0 && role[static_cast<std::size_t>(g - 1)] == red) {
                size[static_cast<std::size_t>(g - 1)] *= x.shape[d];
            } else {
                role[static_cast<std::size_t>(g)] = red;
                size[static_cast<std::size_t>(g)] = x.shape[d];
                ++g;
            }
        }
        const float* px = x.data_unchecked<float>();
        float* py = y.data_unchecked<float>();
        if (g == 0 || (g == 1 && !role[0])) {  // nothing reduced: one element per output
            reduce_rows(op_, px, py, x.num_elements(), 1);
        } else if (g == 1) {  // everything
            reduce_rows(op_, px, py, 1, size[0]);
        } else if (g == 2 && !role[0]) {  // [kept, reduced]
            reduce_rows(op_, px, py, size[0], size[1]);
        } else if (g == 2) {  // [reduced, kept]
            reduce_columns(op_, px, py, 1, size[0], size[1]);
        } else if (g == 3 && !role[0]) {  // [kept, reduced, kept]
            reduce_columns(op_, px, py, size[0], size[1], size[2]);
        } else {
            return fallback_run(ctx);
        }
        return Status::ok();
    }

private:
    /// The reduced axes of this run (from the attribute or input 'axes'); false when they
    /// cannot be read here (prepare has reported invalid ones).
    bool reduced_axes(const RunContext& ctx, int rank, std::array<bool, kMaxRank>& reduced) const {
        std::array<std::int64_t, kMaxRank> axes{};
        int n = 0;
        if (from_input_) {
            if (ctx.has_input(1) && !read_axes_view(ctx.input(1), axes, n).is_ok()) return false;
        } else {
            if (axes_.size() > static_cast<std::size_t>(kMaxRank)) return false;
            n = static_cast<int>(axes_.size());
            std::copy(axes_.begin(), axes_.end(), axes.begin());
        }
        return mark_reduced_axes(rank, axes.data(), n, noop_, ErrorCode::invalid_argument, reduced)
            .is_ok();
    }

    Red op_;
    bool noop_;
    bool from_input_;
    std::vector<std::int64_t> axes_;
};

template <Red Op>
Factory make_reduce(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fb, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(ReduceAttrs a, parse_reduce_attrs(ctx, Op == Red::sum));
    return make_kernel<ReduceFast>(std::move(fb), Op, a.noop_with_empty_axes, a.axes_from_input,
                                   std::move(a.axes));
}

}  // namespace

void register_fast_reduce_kernels(KernelRegistry& r) {
    auto add = [&](const char* op, KernelFactory f) {
        r.add({op, "", 1, kMaxOpset, DeviceKind::cpu, DTypeSet{DType::f32}}, f, kPriorityCpu,
              "cpu");
    };
    add("ReduceSum", &make_reduce<Red::sum>);
    add("ReduceMean", &make_reduce<Red::mean>);
    add("ReduceMax", &make_reduce<Red::max>);
    add("ReduceMin", &make_reduce<Red::min>);
    add("ReduceL2", &make_reduce<Red::l2>);
    add("ReduceSumSquare", &make_reduce<Red::sum_sq>);
}

}  // namespace dsinfer::detail::fast
