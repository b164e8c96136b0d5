// Fast data-movement kernels: Transpose (dims collapsed first; runs of the unchanged innermost
// dim are memcpy'd, otherwise tiled 2-D transposes, 8 x 8 register blocks for 32-bit types),
// Gather (row copies on any axis), Concat and Split (one parallel pass over the joined tensor),
// Slice and Expand (strided runs), Pad in constant mode (opset >= 11), and the layout-only ops
// Identity/Reshape/Flatten/Squeeze/Unsqueeze (a parallel memcpy: the executor gives every
// output its own buffer). All move elements by size, so every dtype but string is handled
// here; strings run the reference kernel's code.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"
#include "cpu/reference/tensor_common.hpp"
#include "ops/concat.hpp"
#include "ops/slice_ranges.hpp"

namespace dsinfer::detail::fast {
namespace {

/// Calls f.template operator()<S>() with S an unsigned type of dt's size; false for strings.
template <class F>
bool with_storage(DType dt, F&& f) {
    if (dt == DType::string) return false;
    switch (dtype_size(dt)) {
        case 1: f.template operator()<std::uint8_t>(); return true;
        case 2: f.template operator()<std::uint16_t>(); return true;
        case 4: f.template operator()<std::uint32_t>(); return true;
        case 8: f.template operator()<std::uint64_t>(); return true;
        default: return false;
    }
}

/// dst[i] = src[i * step] for i < n.
template <class T>
inline void copy_strided(const T* src, std::int64_t step, T* dst, std::int64_t n) noexcept {
    if (step == 1) {
        std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(T));
    } else if (step == 0) {
        std::fill_n(dst, n, *src);
    } else {
        for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i * step];
    }
}

/// out[i] = in[offset of i in the plan's operand 1], in parallel.
template <class T>
void plan_copy(const LoopPlan<2>& p, const T* in, T* out) {
    const std::int64_t step = p.step(1);
    parallel_pieces(p, kGrainBytes / static_cast<std::int64_t>(sizeof(T)),
                    [&](const std::array<std::int64_t, 2>& off, std::int64_t n) {
                        copy_strided(in + off[1], step, out + off[0], n);
                    });
}

// ---- Identity / Reshape / Flatten / Squeeze / Unsqueeze -------------------------------------

class CopyFast final : public FastKernel {
public:
    using FastKernel::FastKernel;
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        if (x.dtype == DType::string || x.num_elements() != y.num_elements())
            return fallback_run(ctx);
        if (x.raw != y.raw) parallel_copy(y.raw, x.raw, x.num_bytes());
        return Status::ok();
    }
};

// ---- Transpose ------------------------------------------------------------------------------

/// A transpose reduced to its essential dims: size-1 dims dropped, input dims that stay
/// adjacent and in order merged. Output dim g is input dim perm[g].
struct TransposePlan {
    int rank = 0;
    std::array<std::int64_t, kMaxRank> in_dims{};
    std::array<int, kMaxRank> perm{};
};

TransposePlan collapse_transpose(const Shape& in, const std::array<int, kMaxRank>& perm) {
    const int r = in.rank();
    std::array<int, kMaxRank> id{};  // index among the non-1 input dims
    int kept = 0;
    for (int d = 0; d < r; ++d) id[static_cast<std::size_t>(d)] = in[d] == 1 ? -1 : kept++;
    // Groups in output order: first kept input id and merged size.
    std::array<int, kMaxRank> first{};
    std::array<std::int64_t, kMaxRank> size{};
    int m = 0, last = -2;
    for (int i = 0; i < r; ++i) {
        const int d = perm[static_cast<std::size_t>(i)];
        const int k = id[static_cast<std::size_t>(d)];
        if (k < 0) continue;
        if (m > 0 && k == last + 1) {
            size[static_cast<std::size_t>(m - 1)] *= in[d];
        } else {
            first[static_cast<std::size_t>(m)] = k;
            size[static_cast<std::size_t>(m)] = in[d];
            ++m;
        }
        last = k;
    }
    TransposePlan t;
    t.rank = m;
    for (int g = 0; g < m; ++g) {
        int pos = 0;  // rank of this group's first input dim among all groups'
        for (int h = 0; h < m; ++h)
            pos += first[static_cast<std::size_t>(h)] < first[static_cast<std::size_t>(g)];
        t.perm[static_cast<std::size_t>(g)] = pos;
        t.in_dims[static_cast<std::size_t>(pos)] = size[static_cast<std::size_t>(g)];
    }
    return t;
}

/// Transposes where the input's innermost dim `a` moves and input dim `b` becomes the
/// output's innermost: for every combination of the other dims, a rows x cols matrix
/// (rows = size of b, cols = size of a) is transposed in bands of kTile rows.
template <class T>
void tiled_transpose(const TransposePlan& t, const T* in, T* out) {
    constexpr std::int64_t kTile = 16;
    const int m = t.rank;
    Strides cs{}, os{};
    std::array<std::int64_t, kMaxRank> od{};
    {
        std::int64_t acc = 1;
        for (int d = m - 1; d >= 0; --d) {
            cs[static_cast<std::size_t>(d)] = acc;
            acc *= t.in_dims[static_cast<std::size_t>(d)];
        }
        acc = 1;
        for (int g = m - 1; g >= 0; --g) {
            od[static_cast<std::size_t>(g)] = t.in_dims[static_cast<std::size_t>(t.perm[static_cast<std::size_t>(g)])];
            os[static_cast<std::size_t>(g)] = acc;
            acc *= od[static_cast<std::size_t>(g)];
        }
    }
    const int a = m - 1;
    const int b = t.perm[static_cast<std::size_t>(m - 1)];
    int ga = 0;  // output position of input dim a
    while (t.perm[static_cast<std::size_t>(ga)] != a) ++ga;
    const std::int64_t rows = t.in_dims[static_cast<std::size_t>(b)];
    const std::int64_t cols = t.in_dims[static_cast<std::size_t>(a)];
    const std::int64_t src_ld = cs[static_cast<std::size_t>(b)];
    const std::int64_t dst_ld = os[static_cast<std::size_t>(ga)];
    // The other output positions, outermost first.
    std::array<int, kMaxRank> other{};
    int no = 0;
    std::int64_t count = 1;
    for (int g = 0; g < m - 1; ++g) {
        if (g == ga) continue;
        other[static_cast<std::size_t>(no++)] = g;
        count *= od[static_cast<std::size_t>(g)];
    }
    const std::int64_t row_tiles = (rows + kTile - 1) / kTile;
    const std::int64_t items = count * row_tiles;
    const std::int64_t item_elems = std::min(rows, kTile) * cols;
    const std::int64_t grain =
        std::max<std::int64_t>(1, kGrainBytes / static_cast<std::int64_t>(sizeof(T)) / item_elems);
    parallel_for(items, grain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t it = begin; it < end; ++it) {
            std::int64_t o = it / row_tiles;
            const std::int64_t r0 = (it % row_tiles) * kTile;
            const std::int64_t r1 = std::min(rows, r0 + kTile);
            std::int64_t src = 0, dst = 0;
            for (int k = no - 1; k >= 0; --k) {
                const auto g = static_cast<std::size_t>(other[static_cast<std::size_t>(k)]);
                const std::int64_t i = o % od[g];
                o /= od[g];
                src += i * cs[static_cast<std::size_t>(t.perm[g])];
                dst += i * os[g];
            }
            const T* s = in + src + r0 * src_ld;
            T* d = out + dst + r0;
            if constexpr (sizeof(T) == 4) {
                simd().transpose32(s, src_ld, d, dst_ld, r1 - r0, cols);
            } else {
                for (std::int64_t c0 = 0; c0 < cols; c0 += kTile) {
                    const std::int64_t c1 = std::min(cols, c0 + kTile);
                    for (std::int64_t r = 0; r < r1 - r0; ++r)
                        for (std::int64_t c = c0; c < c1; ++c) d[c * dst_ld + r] = s[r * src_ld + c];
                }
            }
        }
    });
}

class TransposeFast final : public FastKernel {
public:
    TransposeFast(std::unique_ptr<Kernel> fb, std::vector<std::int64_t> perm)
        : FastKernel(std::move(fb)), perm_(std::move(perm)) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const int r = x.shape.rank();
        if (!perm_.empty() && static_cast<int>(perm_.size()) != r) return fallback_run(ctx);
        std::array<int, kMaxRank> p{};
        for (int i = 0; i < r; ++i)
            p[static_cast<std::size_t>(i)] =
                perm_.empty() ? r - 1 - i : static_cast<int>(perm_[static_cast<std::size_t>(i)]);
        if (y.num_elements() == 0) return Status::ok();
        const TransposePlan t = collapse_transpose(x.shape, p);
        bool identity = true;
        for (int g = 0; g < t.rank; ++g) identity = identity && t.perm[static_cast<std::size_t>(g)] == g;
        const bool done = with_storage(x.dtype, [&]<class T>() {
            const T* in = x.data_unchecked<T>();
            T* out = y.data_unchecked<T>();
            if (identity) {
                parallel_copy(out, in, x.num_bytes());
            } else if (t.perm[static_cast<std::size_t>(t.rank - 1)] == t.rank - 1) {
                // The innermost dim stays innermost: copy whole runs of it.
                Shape od;
                Strides cs{}, st{};
                std::int64_t acc = 1;
                for (int d = t.rank - 1; d >= 0; --d) {
                    cs[static_cast<std::size_t>(d)] = acc;
                    acc *= t.in_dims[static_cast<std::size_t>(d)];
                }
                for (int g = 0; g < t.rank; ++g) {
                    const auto q = static_cast<std::size_t>(t.perm[static_cast<std::size_t>(g)]);
                    od.push_back(t.in_dims[q]);
                    st[static_cast<std::size_t>(g)] = cs[q];
                }
                plan_copy(make_plan<2>(od, {contiguous_strides(od), st}), in, out);
            } else {
                tiled_transpose(t, in, out);
            }
        });
        return done ? Status::ok() : fallback_run(ctx);
    }

private:
    std::vector<std::int64_t> perm_;
};

Factory make_transpose(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fb, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(auto perm, ctx.node().attr_or<std::vector<std::int64_t>>(
                                            "perm", std::vector<std::int64_t>{}));
    return make_kernel<TransposeFast>(std::move(fb), std::move(perm));
}

// ---- Gather ---------------------------------------------------------------------------------

class GatherFast final : public FastKernel {
public:
    GatherFast(std::unique_ptr<Kernel> fb, std::int64_t axis) : FastKernel(std::move(fb)), axis_(axis) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& ind = ctx.input(1);
        const TensorView& y = ctx.output(0);
        const int r = x.shape.rank();
        if (ind.dtype != DType::i64 && ind.dtype != DType::i32) return fallback_run(ctx);
        if (r < 1 || axis_ < -r || axis_ >= r) return fallback_run(ctx);
        const int axis = static_cast<int>(axis_ < 0 ? axis_ + r : axis_);
        const std::int64_t outer = x.shape.size_between(0, axis);
        const std::int64_t dim = x.shape[axis];
        const std::int64_t inner = x.shape.size_between(axis + 1, r);
        const std::int64_t n = ind.num_elements();
        // Every index is checked before anything is copied (the reference's message).
        for (std::int64_t j = 0; j < n; ++j) {
            const std::int64_t v = int_at(ind, j);
            if (v < -dim || v >= dim)
                return Status::error(ErrorCode::invalid_argument, "input 'indices' holds index ",
                                     v, ", outside [", -dim, ", ", dim - 1, "]");
        }
        if (y.num_elements() == 0) return Status::ok();
        const bool done = with_storage(x.dtype, [&]<class T>() {
            const T* in = x.data_unchecked<T>();
            T* out = y.data_unchecked<T>();
            const std::int64_t rows = outer * n;
            const std::int64_t grain = std::max<std::int64_t>(
                1, kGrainBytes / static_cast<std::int64_t>(sizeof(T)) / inner);
            parallel_for(rows, grain, [&](std::int64_t b, std::int64_t e) {
                for (std::int64_t row = b; row < e; ++row) {
                    const std::int64_t o = row / n;
                    std::int64_t idx = int_at(ind, row % n);
                    if (idx < 0) idx += dim;
                    const T* src = in + (o * dim + idx) * inner;
                    T* dst = out + row * inner;
                    if (inner == 1) *dst = *src;
                    else std::memcpy(dst, src, static_cast<std::size_t>(inner) * sizeof(T));
                }
            });
        });
        return done ? Status::ok() : fallback_run(ctx);
    }

private:
    std::int64_t axis_;
};

Factory make_gather(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fb, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, ctx.node().attr_or<std::int64_t>("axis", 0));
    return make_kernel<GatherFast>(std::move(fb), axis);
}

// ---- Concat / Split -------------------------------------------------------------------------

/// Concat and Split move blocks between one "joined" tensor [outer, joined_inner] and parts
/// [outer, inner_i] laid side by side along the axis. The joined tensor's element range is
/// split across threads; each thread walks its range piece by piece.
template <class T, bool kConcat, class Part>
void join_range(T* joined, std::int64_t joined_inner, int num_parts, Part&& part, int axis,
                std::int64_t begin, std::int64_t end) {
    std::int64_t o = begin / joined_inner;
    std::int64_t c = begin % joined_inner;
    // The part holding column c, and where it starts.
    int i = 0;
    std::int64_t start = 0;
    auto inner_of = [&](int k) { return part(k).shape.size_between(axis, part(k).shape.rank()); };
    std::int64_t inner = inner_of(0);
    while (c >= start + inner) {
        start += inner;
        inner = inner_of(++i);
    }
    while (begin < end) {
        const std::int64_t cnt = std::min(start + inner - c, end - begin);
        T* p = part(i).template data_unchecked<T>() + o * inner + (c - start);
        if (kConcat) std::memcpy(joined + begin, p, static_cast<std::size_t>(cnt) * sizeof(T));
        else std::memcpy(p, joined + begin, static_cast<std::size_t>(cnt) * sizeof(T));
        begin += cnt;
        c += cnt;
        if (begin >= end) break;
        if (c == joined_inner) {
            c = 0;
            ++o;
            i = 0;
            start = 0;
        } else {
            start += inner;
            ++i;
        }
        inner = inner_of(i);
        while (inner == 0 && i + 1 < num_parts) inner = inner_of(++i);
    }
}

template <bool kConcat>
class JoinFast final : public FastKernel {
public:
    JoinFast(std::unique_ptr<Kernel> fb, std::int64_t axis) : FastKernel(std::move(fb)), axis_(axis) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& joined = kConcat ? ctx.output(0) : ctx.input(0);
        const int num_parts = kConcat ? ctx.num_inputs() : ctx.num_outputs();
        auto part = [&](int k) -> const TensorView& { return kConcat ? ctx.input(k) : ctx.output(k); };
        const int r = joined.shape.rank();
        const int axis = concat_run_axis(axis_, r);
        if (axis < 0 || num_parts < 1) return fallback_run(ctx);
        const std::int64_t total = joined.num_elements();
        if (total == 0) return Status::ok();
        const std::int64_t joined_inner = joined.shape.size_between(axis, r);
        const bool done = with_storage(joined.dtype, [&]<class T>() {
            T* base = static_cast<T*>(joined.raw);
            parallel_for(total, kGrainBytes / static_cast<std::int64_t>(sizeof(T)),
                         [&](std::int64_t b, std::int64_t e) {
                             join_range<T, kConcat>(base, joined_inner, num_parts, part, axis, b, e);
                         });
        });
        return done ? Status::ok() : fallback_run(ctx);
    }

private:
    std::int64_t axis_;
};

/// Concat's axis as ops/concat.hpp reads it; Split's defaults to 0.
template <bool kConcat>
Factory make_join(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fb, ctx.create_fallback());
    std::int64_t axis = 0;
    if constexpr (kConcat) {
        DSINFER_ASSIGN_OR_RETURN(const ConcatAttrs a, parse_concat_attrs(ctx));
        axis = a.axis;
    } else {
        DSINFER_ASSIGN_OR_RETURN(axis, ctx.node().attr_or<std::int64_t>("axis", 0));
    }
    return make_kernel<JoinFast<kConcat>>(std::move(fb), axis);
}

// ---- Slice ----------------------------------------------------------------------------------

/// Slice's output shape, first input element and per-dim input strides, from `n` entries
/// (start, end, axis, step) read through the accessors; false if an entry is invalid (prepare
/// has reported those already).
template <class Entry>
bool slice_plan(const Shape& in, std::int64_t n, Entry&& entry, Shape& out, std::int64_t& base,
                Strides& strides) {
    const int r = in.rank();
    // Entries are read on demand (run() must not allocate a table of them).
    auto at = [&](int k) {
        return [&, k](std::int64_t i) {
            std::array<std::int64_t, 4> x{0, 0, 0, 1};
            entry(i, x[0], x[1], x[2], x[3]);
            return x[static_cast<std::size_t>(k)];
        };
    };
    SliceRanges sr;
    if (!slice_ranges(in, n, at(0), at(1), at(2), at(3), sr).is_ok()) return false;
    const Strides cs = contiguous_strides(in);
    out = Shape{};
    base = 0;
    for (int d = 0; d < r; ++d) {
        const auto du = static_cast<std::size_t>(d);
        out.push_back(sr.length[du]);
        strides[du] = cs[du] * sr.step[du];
        base += sr.start[du] * cs[du];
    }
    return true;
}

class SliceFast final : public FastKernel {
public:
    SliceFast(std::unique_ptr<Kernel> fb, bool from_inputs, std::vector<std::int64_t> starts,
              std::vector<std::int64_t> ends, std::vector<std::int64_t> axes)
        : FastKernel(std::move(fb)), from_inputs_(from_inputs), starts_(std::move(starts)),
          ends_(std::move(ends)), axes_(std::move(axes)) {}

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        Shape out;
        std::int64_t base = 0;
        Strides st{};
        bool ok = false;
        if (from_inputs_) {
            const bool axes = ctx.has_input(3), steps = ctx.has_input(4);
            ok = slice_plan(
                x.shape, ctx.input(1).num_elements(),
                [&](std::int64_t i, std::int64_t& s, std::int64_t& e, std::int64_t& a,
                    std::int64_t& k) {
                    s = int_at(ctx.input(1), i);
                    e = int_at(ctx.input(2), i);
                    a = axes ? int_at(ctx.input(3), i) : i;
                    k = steps ? int_at(ctx.input(4), i) : 1;
                },
                out, base, st);
        } else {
            ok = slice_plan(
                x.shape, static_cast<std::int64_t>(starts_.size()),
                [&](std::int64_t i, std::int64_t& s, std::int64_t& e, std::int64_t& a,
                    std::int64_t& k) {
                    const auto u = static_cast<std::size_t>(i);
                    s = starts_[u];
                    e = ends_[u];
                    a = axes_.empty() ? i : axes_[u];
                    k = 1;
                },
                out, base, st);
        }
        if (!ok || !(out == y.shape)) return fallback_run(ctx);
        if (y.num_elements() == 0) return Status::ok();
        const bool done = with_storage(x.dtype, [&]<class T>() {
            plan_copy(make_plan<2>(out, {contiguous_strides(out), st}), x.data_unchecked<T>() + base,
                      y.data_unchecked<T>());
        });
        return done ? Status::ok() : fallback_run(ctx);
    }

private:
    bool from_inputs_;
    std::vector<std::int64_t> starts_, ends_, axes_;
};

Factory make_slice(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fb, ctx.create_fallback());
    if (ctx.opset() >= 10)
        return make_kernel<SliceFast>(std::move(fb), true, std::vector<std::int64_t>{},
                                      std::vector<std::int64_t>{}, std::vector<std::int64_t>{});
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(auto starts, n.attr<std::vector<std::int64_t>>("starts"));
    DSINFER_ASSIGN_OR_RETURN(auto ends, n.attr<std::vector<std::int64_t>>("ends"));
    DSINFER_ASSIGN_OR_RETURN(auto axes, n.attr_or<std::vector<std::int64_t>>(
                                            "axes", std::vector<std::int64_t>{}));
    return make_kernel<SliceFast>(std::move(fb), false, std::move(starts), std::move(ends),
                                  std::move(axes));
}

// ---- Expand ---------------------------------------------------------------------------------

class ExpandFast final : public FastKernel {
public:
    using FastKernel::FastKernel;
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        if (y.num_elements() == 0) return Status::ok();
        const bool done = with_storage(x.dtype, [&]<class T>() {
            plan_copy(plan_broadcast<2>(y.shape, {x.shape}), x.data_unchecked<T>(), y.data_unchecked<T>());
        });
        return done ? Status::ok() : fallback_run(ctx);
    }
};

// ---- Pad (constant mode) --------------------------------------------------------------------

/// Opset >= 11 constant-mode Pad: each output row along the last dim is padding, or padding
/// around one copied run of an input row (negative pads crop).
class PadFast final : public FastKernel {
public:
    using FastKernel::FastKernel;

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const int r = x.shape.rank();
        std::array<std::int64_t, kMaxRank> begin{};
        if (!read_begins(ctx, r, begin) || y.shape.rank() != r) return fallback_run(ctx);
        if (y.num_elements() == 0) return Status::ok();
        const bool has_value = ctx.has_input(2) && ctx.input(2).num_elements() == 1 &&
                               ctx.input(2).dtype == x.dtype;
        const bool done = with_storage(x.dtype, [&]<class T>() {
            const T value = has_value ? ctx.input(2).data_unchecked<T>()[0] : T{};
            if (r == 0) {
                *y.data_unchecked<T>() = *x.data_unchecked<T>();
                return;
            }
            pad_rows(x, y, begin, value);
        });
        return done ? Status::ok() : fallback_run(ctx);
    }

private:
    /// Begin pads per dim from inputs 'pads' and optional 'axes'; false if they do not fit.
    static bool read_begins(const RunContext& ctx, int r, std::array<std::int64_t, kMaxRank>& begin) {
        const TensorView& pads = ctx.input(1);
        const bool has_axes = ctx.has_input(3);
        const std::int64_t na = has_axes ? ctx.input(3).num_elements() : r;
        if (pads.num_elements() != 2 * na || na > kMaxRank) return false;
        for (std::int64_t i = 0; i < na; ++i) {
            std::int64_t a = has_axes ? int_at(ctx.input(3), i) : i;
            if (a < -r || a >= r) return false;
            if (a < 0) a += r;
            begin[static_cast<std::size_t>(a)] = int_at(pads, i);
        }
        return true;
    }

    template <class T>
    static void pad_rows(const TensorView& x, const TensorView& y,
                         const std::array<std::int64_t, kMaxRank>& begin, T value) {
        const int r = x.shape.rank();
        const std::int64_t len = y.shape[r - 1];
        const std::int64_t rows = y.num_elements() / len;
        const std::int64_t shift = begin[static_cast<std::size_t>(r - 1)];
        const std::int64_t lo = std::clamp<std::int64_t>(shift, 0, len);
        const std::int64_t hi = std::max(lo, std::clamp<std::int64_t>(shift + x.shape[r - 1], 0, len));
        const Strides cs = contiguous_strides(x.shape);
        const T* in = x.data_unchecked<T>();
        T* out = y.data_unchecked<T>();
        const std::int64_t grain =
            std::max<std::int64_t>(1, kGrainBytes / static_cast<std::int64_t>(sizeof(T)) / len);
        parallel_for(rows, grain, [&](std::int64_t b, std::int64_t e) {
            std::array<std::int64_t, kMaxRank> idx{};
            std::int64_t rem = b;
            for (int d = r - 2; d >= 0; --d) {
                const auto du = static_cast<std::size_t>(d);
                idx[du] = rem % y.shape[d];
                rem /= y.shape[d];
            }
            for (std::int64_t row = b; row < e; ++row) {
                T* o = out + row * len;
                bool pad = hi == lo;
                std::int64_t src = (lo - shift) * cs[static_cast<std::size_t>(r - 1)];
                for (int d = 0; d < r - 1 && !pad; ++d) {
                    const auto du = static_cast<std::size_t>(d);
                    const std::int64_t i = idx[du] - begin[du];
                    pad = i < 0 || i >= x.shape[d];
                    src += i * cs[du];
                }
                if (pad) {
                    std::fill_n(o, len, value);
                } else {
                    std::fill_n(o, lo, value);
                    std::memcpy(o + lo, in + src, static_cast<std::size_t>(hi - lo) * sizeof(T));
                    std::fill_n(o + hi, len - hi, value);
                }
                for (int d = r - 2; d >= 0; --d) {
                    const auto du = static_cast<std::size_t>(d);
                    if (++idx[du] < y.shape[d]) break;
                    idx[du] = 0;
                }
            }
        });
    }
};

Factory make_pad(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::string mode,
                             ctx.node().attr_or<std::string>("mode", std::string("constant")));
    // Opset < 11 (pads and value as attributes) and the other modes stay with the reference.
    if (ctx.opset() < 11 || mode != "constant")
        return Status::error(ErrorCode::unsupported, "Pad mode '", mode, "' at opset ",
                             ctx.opset(), " is not accelerated");
    return make_with_fallback<PadFast>(ctx);
}

}  // namespace

void register_fast_movement_kernels(KernelRegistry& r) {
    const DTypeSet types{DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8,
                         DType::u8,  DType::i16, DType::u16, DType::i32,  DType::u32,
                         DType::i64, DType::u64, DType::boolean};  // all but string
    auto add = [&](const char* op, std::int64_t from, KernelFactory f) {
        r.add({op, "", from, kMaxOpset, DeviceKind::cpu, types}, f, kPriorityCpu, "cpu");
    };
    for (const char* op : {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"})
        add(op, 1, &make_with_fallback<CopyFast>);
    add("Transpose", 1, &make_transpose);
    add("Gather", 1, &make_gather);
    add("Concat", 1, &make_join<true>);
    add("Split", 1, &make_join<false>);
    add("Slice", 1, &make_slice);
    add("Expand", 8, &make_with_fallback<ExpandFast>);
    add("Pad", 1, &make_pad);
}

}  // namespace dsinfer::detail::fast
