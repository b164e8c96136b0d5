// Fast f32 kernel of com.dsinfer MultiHeadAttention (docs/OPTIMIZER.md): flash-style attention.
// Work items are (batch, head, tile of up to kMaxTileRows query rows); each walks the keys in
// tiles of kKvTile with an online softmax (attention_tiles.inc), so the Sq x Sk score matrix is
// never materialized. Per thread the workspace holds the head's K and V packed in contiguous
// column panels (Kᵀ tiles and V rows; all of them while they fit 16 MiB, so the query tiles of
// a head pack them once, else one tile of each), one score tile [64 x 128] and one output
// accumulator [64 x Dv] (112 KiB at sequence 128 and head sizes 64). The tile loops are
// compiled for AVX-512, AVX2+FMA and the baseline and picked by the fast kernels' ISA
// (DSINFER_MAX_CPU_ISA caps it).
// Threads take contiguous ranges of work items; a row's arithmetic does not depend on the
// thread count or the tile height, so results are identical for any thread count.
// Numerics vs the reference kernel: different summation order and the fast exp (<= 1 ulp);
// measured bounds in tests/unit/test_attention.cpp. Other dtypes and shapes the workspace
// cannot hold run on the reference kernel (the fallback), whose prepare validates every input.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"
#include "kernels/sgemm.hpp"
#include "ops/attention.hpp"
#include "dsinfer/ops.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#define DSINFER_ATTN_X86 1
#include <immintrin.h>
#else
#define DSINFER_ATTN_X86 0
#endif

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
// GCC 12's _mm512_cvtepu16_epi32 reads an "undefined" vector it reports as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dsinfer::detail::fast {
namespace {

using std::int64_t;

constexpr int64_t kKvTile = 128;       // keys per tile
constexpr int64_t kMaxTileRows = 64;   // query rows per work item
constexpr int64_t kPad = 32;           // columns are padded to the widest column block (AVX-512)

/// One MultiHeadAttention problem as the tile loops see it (all f32, row-major).
struct MhaProblem {
    const float* q;
    const float* k;
    const float* v;
    const float* mask;  // null when absent
    float* y;
    int64_t heads, q_len, kv_len, head, v_head;
    int64_t ldq;  // row stride of Q and K (H·Dh)
    int64_t ldv;  // row stride of V and Y (H·Dv)
    std::array<int64_t, 4> mask_strides;
    float scale;
    int64_t kv_tile, kv_tile_pad, v_head_pad;
    bool resident;  // every Kᵀ/V tile of a (batch, head) stays packed in the workspace
    int64_t q2_ld = 0, p2_ld = 0;  // bfloat16 path: uint32 pairs per Q row / P row
    SimdOps::UnaryFn exp;
    void (*transpose)(const std::uint32_t*, int64_t, std::uint32_t*, int64_t, int64_t,
                      int64_t) noexcept;
};

/// One work item: query rows [i0, i0 + rows) of (batch b, head h); b < 0: none.
struct MhaItem {
    int64_t b = -1, h = 0, i0 = 0, rows = 0;
};

/// One thread's workspace.
struct MhaScratch {
    float* kt;  // [Dh, kv_tile_pad] per resident tile
    float* vp;  // [kv_tile, v_head_pad] per resident tile
    float* s;   // [kMaxTileRows, kv_tile_pad]
    float* o;   // [kMaxTileRows, v_head_pad]
    float* m;   // [kMaxTileRows]
    float* l;   // [kMaxTileRows]
    // bfloat16 path (precision bf16 with AVX512_BF16), uint32 bfloat16 pairs:
    std::uint32_t* q2;  // [kMaxTileRows, q2_ld] Q rows
    std::uint32_t* p2;  // [kMaxTileRows, p2_ld] P rows
    std::uint32_t* k2;  // [kColBlock, dh2] K rows before their transpose into a panel
};

#if DSINFER_ATTN_X86
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))), apply_to = function)
#endif
namespace avx512 {
#define DSINFER_SIMD_W 64
#define DSINFER_SIMD_LEVEL 2
#include "cpu/fast/attention_tiles.inc"
#undef DSINFER_SIMD_W
#undef DSINFER_SIMD_LEVEL
}  // namespace avx512
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma")
#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx2,fma"))), apply_to = function)
#endif
namespace avx512_bf16 {
#define DSINFER_SIMD_W 64
#define DSINFER_SIMD_LEVEL 2
#define DSINFER_ATTN_BF16 1
#include "cpu/fast/attention_tiles.inc"
#undef DSINFER_SIMD_W
#undef DSINFER_SIMD_LEVEL
}  // namespace avx512_bf16
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#if defined(__clang__)  // clang ignores #pragma GCC target
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#endif
namespace avx2 {
#define DSINFER_SIMD_W 32
#define DSINFER_SIMD_LEVEL 1
#include "cpu/fast/attention_tiles.inc"
#undef DSINFER_SIMD_W
#undef DSINFER_SIMD_LEVEL
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options
#endif

namespace baseline {
#define DSINFER_SIMD_W 16
#define DSINFER_SIMD_LEVEL 0
#include "cpu/fast/attention_tiles.inc"
#undef DSINFER_SIMD_W
#undef DSINFER_SIMD_LEVEL
}  // namespace baseline

using RowsFn = void (*)(const MhaProblem&, const MhaScratch&, int64_t, int64_t, int64_t,
                        int64_t, int64_t*, const MhaItem&) noexcept;

/// Whether the bfloat16 tile loops can run: AVX512_BF16 and the AVX-512 level active.
bool bf16_rows_available() noexcept { return sgemm_bf16_dot(active_isa()); }

RowsFn rows_fn(bool bf16) noexcept {
#if DSINFER_ATTN_X86
    if (bf16 && bf16_rows_available()) return &avx512_bf16::attention_rows;
    if (active_isa() == Isa::avx512) return &avx512::attention_rows;
    if (active_isa() == Isa::avx2) return &avx2::attention_rows;
#endif
    return &baseline::attention_rows;
}

constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/// Tile sizes and per-thread workspace of one shape.
struct Plan {
    int64_t kv_tile = 0, kv_tile_pad = 0, v_head_pad = 0;
    int64_t resident_tiles = 1;  // all key tiles of a head when they fit kMaxResidentFloats
    bool bf16 = false;           // the bfloat16 tile loops' buffers too
    int64_t q2_ld = 0, p2_ld = 0;
    int64_t slot_floats = 0;     // floats of one thread's workspace
    std::size_t slot_bytes() const noexcept {
        return static_cast<std::size_t>(slot_floats) * sizeof(float);
    }
    int64_t kt_floats(int64_t head) const noexcept { return resident_tiles * head * kv_tile_pad; }
    int64_t vp_floats() const noexcept { return resident_tiles * kv_tile * v_head_pad; }
};

/// Packed K and V of one head are kept whole up to this size (16 MiB per thread).
constexpr int64_t kMaxResidentFloats = int64_t{4} << 20;

Plan make_plan(const MhaDims& d, bool bf16) noexcept {
    Plan p;
    p.bf16 = bf16;
    p.kv_tile = std::max<int64_t>(1, std::min(kKvTile, d.kv_len));
    p.kv_tile_pad = round_up(p.kv_tile, kPad);
    p.v_head_pad = round_up(std::max<int64_t>(d.v_head, 1), kPad);
    const int64_t tiles = std::max<int64_t>(1, (d.kv_len + p.kv_tile - 1) / p.kv_tile);
    if (tiles * (d.head * p.kv_tile_pad + p.kv_tile * p.v_head_pad) <= kMaxResidentFloats)
        p.resident_tiles = tiles;
    p.q2_ld = round_up((d.head + 1) / 2, 16);
    p.p2_ld = round_up((p.kv_tile + 1) / 2, 16);
    const int64_t parts[9] = {p.kt_floats(d.head),         p.vp_floats(),
                              kMaxTileRows * p.kv_tile_pad, kMaxTileRows * p.v_head_pad,
                              kMaxTileRows,                 kMaxTileRows,
                              bf16 ? kMaxTileRows * p.q2_ld : 0,
                              bf16 ? kMaxTileRows * p.p2_ld : 0,
                              bf16 ? kPad * p.q2_ld : 0};
    for (int64_t n : parts) p.slot_floats += round_up(n, 16);  // 64-byte aligned parts
    return p;
}

MhaScratch scratch_at(float* base, const Plan& p, int64_t head) noexcept {
    MhaScratch w;
    float* at = base;
    auto take = [&](int64_t n) {
        float* r = at;
        at += round_up(n, 16);
        return r;
    };
    w.kt = take(p.kt_floats(head));
    w.vp = take(p.vp_floats());
    w.s = take(kMaxTileRows * p.kv_tile_pad);
    w.o = take(kMaxTileRows * p.v_head_pad);
    w.m = take(kMaxTileRows);
    w.l = take(kMaxTileRows);
    w.q2 = w.p2 = w.k2 = nullptr;
    if (p.bf16) {
        w.q2 = reinterpret_cast<std::uint32_t*>(take(kMaxTileRows * p.q2_ld));
        w.p2 = reinterpret_cast<std::uint32_t*>(take(kMaxTileRows * p.p2_ld));
        w.k2 = reinterpret_cast<std::uint32_t*>(take(kPad * p.q2_ld));
    }
    return w;
}

class FastMultiHeadAttention final : public FastKernel {
public:
    FastMultiHeadAttention(std::unique_ptr<Kernel> fallback, int64_t heads, bool has_scale,
                           float scale, bool bf16)
        : FastKernel(std::move(fallback)),
          heads_(heads),
          has_scale_(has_scale),
          scale_(scale),
          bf16_(bf16) {}

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(FastKernel::prepare(ctx));  // validates every input
        if (!all_f32(ctx)) return Status::ok();
        const Shape* mask = ctx.has_input(3) ? &ctx.input(3).shape() : nullptr;
        DSINFER_ASSIGN_OR_RETURN(MhaDims d, mha_dims(ctx.input(0).shape(), ctx.input(1).shape(),
                                                     ctx.input(2).shape(), mask, heads_));
        const std::size_t bytes =
            make_plan(d, bf16()).slot_bytes() * static_cast<std::size_t>(max_threads());
        ctx.set_workspace(std::max(ctx.workspace_bytes(), bytes));
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        for (int i = 0; i < ctx.num_inputs(); ++i)
            if (ctx.has_input(i) && ctx.input(i).dtype != DType::f32) return fallback_run(ctx);
        const StatusOr<MhaDims> dims = mha_dims(ctx, heads_);
        if (!dims.is_ok()) return dims.status();
        const MhaDims& d = *dims;
        const bool bf16 = this->bf16();
        const Plan plan = make_plan(d, bf16);
        const int64_t slots = std::min<int64_t>(
            max_threads(), static_cast<int64_t>(ctx.workspace_bytes() / plan.slot_bytes()));
        if (slots < 1) return fallback_run(ctx);

        MhaProblem p{};
        p.q = ctx.input(0).data_unchecked<float>();
        p.k = ctx.input(1).data_unchecked<float>();
        p.v = ctx.input(2).data_unchecked<float>();
        p.mask = d.has_mask ? ctx.input(3).data_unchecked<float>() : nullptr;
        p.y = ctx.output(0).data_unchecked<float>();
        p.heads = d.heads;
        p.q_len = d.q_len;
        p.kv_len = d.kv_len;
        p.head = d.head;
        p.v_head = d.v_head;
        p.ldq = d.qk_width();
        p.ldv = d.v_width();
        p.mask_strides = d.mask_strides;
        p.scale = mha_scale(has_scale_, scale_, d.head);
        p.kv_tile = plan.kv_tile;
        p.kv_tile_pad = plan.kv_tile_pad;
        p.v_head_pad = plan.v_head_pad;
        p.resident = plan.resident_tiles * plan.kv_tile >= d.kv_len;
        p.q2_ld = plan.q2_ld;
        p.p2_ld = plan.p2_ld;
        p.exp = simd().unary[static_cast<int>(Unary::exp)];
        p.transpose = simd().transpose32;

        // Work items (b, h, query tile), heads of one batch adjacent so that consecutive items
        // of one thread reuse K and V from cache. Smaller tiles when there are few items.
        int64_t tile = kMaxTileRows;
        const int64_t bh = d.batch * d.heads;
        while (tile > 8 && bh * ((d.q_len + tile - 1) / tile) < 4 * slots) tile /= 2;
        const int64_t q_tiles = (d.q_len + tile - 1) / tile;
        const int64_t items = bh * q_tiles;
        if (items == 0) return Status::ok();
        const RowsFn rows = rows_fn(bf16);
        auto* base = static_cast<float*>(ctx.workspace());
        const int64_t used = std::min(slots, items);
        parallel_for(used, 1, [&](int64_t s0, int64_t s1) {
            for (int64_t slot = s0; slot < s1; ++slot) {
                const MhaScratch w = scratch_at(base + slot * plan.slot_floats, plan, d.head);
                int64_t packed = -1;
                auto item = [&](int64_t it) {
                    const int64_t qt = it % q_tiles;
                    const int64_t bh_i = it / q_tiles;
                    MhaItem m;
                    m.b = bh_i / d.heads;
                    m.h = bh_i % d.heads;
                    m.i0 = qt * tile;
                    m.rows = std::min(tile, d.q_len - m.i0);
                    return m;
                };
                const int64_t end = items * (slot + 1) / used;
                for (int64_t it = items * slot / used; it < end; ++it) {
                    const MhaItem cur = item(it);
                    rows(p, w, cur.b, cur.h, cur.i0, cur.rows, &packed,
                         it + 1 < end ? item(it + 1) : MhaItem{});
                }
            }
        });
        return Status::ok();
    }

    /// The flash-style tile loops (float32, or bfloat16 products on AVX512_BF16), else the
    /// fallback (other dtypes).
    std::string algorithm(const PrepareContext& ctx) const override {
        if (!all_f32(ctx)) return fallback_algorithm(ctx);
        return bf16() ? std::string("dsinfer:flash-attention-bf16-avx512_bf16")
                      : "dsinfer:flash-attention-f32-" + std::string(isa_name(active_isa()));
    }

private:
    /// The bfloat16 tile loops run (precision bf16 and the CPU has them).
    bool bf16() const noexcept { return bf16_ && bf16_rows_available(); }

    static bool all_f32(const PrepareContext& ctx) noexcept {
        for (int i = 0; i < ctx.num_inputs(); ++i)
            if (ctx.has_input(i) && ctx.input(i).dtype() != DType::f32) return false;
        return true;
    }

    int64_t heads_;
    bool has_scale_;
    float scale_;
    bool bf16_;  ///< EngineOptions::precision bf16 (KernelCreateContext::weight_precision)
};

Factory make_fast_mha(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fb, ctx.create_fallback());
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(const int64_t heads, n.attr<int64_t>("num_heads"));
    DSINFER_ASSIGN_OR_RETURN(const float scale, n.attr_or<float>("scale", 0.f));
    return make_kernel<FastMultiHeadAttention>(std::move(fb), heads, n.has_attr("scale"), scale,
                                               ctx.weight_precision() == DType::bf16);
}

}  // namespace
}  // namespace dsinfer::detail::fast

#pragma GCC diagnostic pop

namespace dsinfer::detail {
void register_fast_attention(KernelRegistry& r) {
    r.add({"MultiHeadAttention", kDsinferDomain, 1, kMaxOpset, DeviceKind::cpu,
           DTypeSet{DType::f32}},
          &fast::make_fast_mha, kPriorityCpu, "cpu");
}
}  // namespace dsinfer::detail
