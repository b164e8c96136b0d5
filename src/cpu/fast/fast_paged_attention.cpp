// Fast f32 kernel of com.dsinfer PagedAttention (src/ops/paged_attention.hpp): the step's keys
// and values are written into their cache blocks in parallel over tokens; then work items
// (token, KV head) run in parallel, each computing the query heads that share that KV head in
// one pass over the sequence's blocks (online softmax per block, paged_attention_loops.inc), so
// a block's keys and values are read once per group, not once per query head. No workspace:
// scores live in a block-sized stack row and the sums accumulate in the output rows. The loops
// are compiled for AVX-512, AVX2+FMA and the baseline and picked by the fast kernels' ISA
// (DSINFER_MAX_CPU_ISA caps it). Block sizes, head sizes or group sizes beyond the stack rows
// run on the reference kernel (the fallback), whose prepare validates every input.
// Numerics vs the reference kernel (double sums): float sums in another order and a per-block
// rescale; measured bounds in tests/unit/test_paged_attention.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"
#include "dsinfer/ops.hpp"
#include "ops/paged_attention.hpp"
#include "runtime/parallel.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace dsinfer::detail::fast {
namespace {

using std::int64_t;

constexpr int64_t kMaxRep = 16;       // query heads per KV head
constexpr int64_t kMaxBlock = 64;     // tokens per cache block
constexpr int64_t kMaxHead = 256;     // head size
constexpr int64_t kRowBuffer = 4096;  // floats of one widened block (block_tokens x head size)

struct PagedProblem {
    const KvCacheStep* step;
    PagedAttentionDims d;
    const float* q;
    float* y;
    const void* kpool;
    const void* vpool;
    const float* kscale;
    const float* vscale;
    float scale;
    int64_t window;
};

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
namespace avx512 {
#define DSINFER_SIMD_W 64
#include "cpu/fast/paged_attention_loops.inc"
#undef DSINFER_SIMD_W
}  // namespace avx512
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
#define DSINFER_SIMD_W 32
#include "cpu/fast/paged_attention_loops.inc"
#undef DSINFER_SIMD_W
}  // namespace avx2
#pragma GCC pop_options
#endif
namespace baseline {
#define DSINFER_SIMD_W 16
#include "cpu/fast/paged_attention_loops.inc"
#undef DSINFER_SIMD_W
}  // namespace baseline

using ItemFn = void (*)(const PagedProblem&, int64_t, int64_t, float*, float*) noexcept;

ItemFn item_fn() noexcept {
#if defined(__x86_64__) && defined(__GNUC__)
    if (active_isa() == Isa::avx512) return &avx512::attend_item;
    if (active_isa() == Isa::avx2) return &avx2::attend_item;
#endif
    return &baseline::attend_item;
}

class FastPagedAttention final : public FastKernel {
public:
    FastPagedAttention(std::unique_ptr<Kernel> fallback, int64_t layer, int64_t heads,
                       int64_t kv_heads, bool has_scale, float scale, int64_t window)
        : FastKernel(std::move(fallback)),
          layer_(layer),
          heads_(heads),
          kv_heads_(kv_heads),
          has_scale_(has_scale),
          scale_(scale),
          window_(window) {}

    Status run(RunContext& ctx) const noexcept override {
        const StatusOr<PagedAttentionDims> dims = paged_attention_dims(
            ctx.input(0).shape, ctx.input(1).shape, ctx.input(2).shape, heads_, kv_heads_);
        if (!dims.is_ok()) return dims.status();
        const KvCacheStep* step = ctx.control().kv_cache;
        DSINFER_RETURN_IF_ERROR(check_kv_step(step, *dims, layer_));
        const PagedAttentionDims& d = *dims;
        if (d.head > kMaxHead || step->block_tokens > kMaxBlock ||
            d.q_heads / d.kv_heads > kMaxRep ||
            (step->dtype != DType::f32 && step->block_tokens * d.head > kRowBuffer))
            return fallback_run(ctx);
        const KvCacheStep& s = *step;
        const bool i8 = s.dtype == DType::i8;
        PagedProblem p{
            step,
            d,
            ctx.input(0).data_unchecked<float>(),
            ctx.output(0).data_unchecked<float>(),
            s.key_pool[layer_],
            s.value_pool[layer_],
            i8 ? s.key_scale[layer_] : nullptr,
            i8 ? s.value_scale[layer_] : nullptr,
            has_scale_ ? scale_ : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.head))),
            window_};
        const float* k = ctx.input(1).data_unchecked<float>();
        const float* v = ctx.input(2).data_unchecked<float>();
        void* kp = s.key_pool[layer_];
        void* vp = s.value_pool[layer_];
        float* ks = i8 ? s.key_scale[layer_] : nullptr;
        float* vs = i8 ? s.value_scale[layer_] : nullptr;
        // 1. The step's keys and values into their blocks (distinct rows per token and head).
        parallel_for(d.tokens, 64, [&](int64_t t0, int64_t t1) noexcept {
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t sq = kv_seq_of(s, t);
                const int64_t pos = s.past[sq] + (t - s.token_begin[sq]);
                for (int64_t h = 0; h < d.kv_heads; ++h) {
                    const int64_t row = kv_row(s, s.block_table[sq], h, pos);
                    kv_store_row(kp, ks, s.dtype, row, d.head, k + d.kv_at(h, t));
                    kv_store_row(vp, vs, s.dtype, row, d.head, v + d.kv_at(h, t));
                }
            }
        });
        // 2. Attention, one (token, KV head) per item.
        const ItemFn fn = item_fn();
        parallel_for(d.tokens * d.kv_heads, 1, [&](int64_t i0, int64_t i1) noexcept {
            alignas(64) float kbuf[kRowBuffer];  // a widened f16/bf16/i8 block
            alignas(64) float vbuf[kRowBuffer];
            for (int64_t i = i0; i < i1; ++i) fn(p, i / d.kv_heads, i % d.kv_heads, kbuf, vbuf);
        });
        return Status::ok();
    }

    std::string algorithm(const PrepareContext&) const override {
        return simd_algorithm("paged-attention");
    }

private:
    int64_t layer_, heads_, kv_heads_;
    bool has_scale_;
    float scale_;
    int64_t window_;
};

Factory make_fast_paged_attention(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fb, ctx.create_fallback());
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(const int64_t layer, n.attr<int64_t>("layer"));
    DSINFER_ASSIGN_OR_RETURN(const int64_t heads, n.attr_or<int64_t>("num_heads", 0));
    DSINFER_ASSIGN_OR_RETURN(const int64_t kv_heads, n.attr_or<int64_t>("kv_num_heads", 0));
    DSINFER_ASSIGN_OR_RETURN(const float scale, n.attr_or<float>("scale", 0.f));
    DSINFER_ASSIGN_OR_RETURN(const int64_t window, n.attr_or<int64_t>("sliding_window", 0));
    return make_kernel<FastPagedAttention>(std::move(fb), layer, heads, kv_heads,
                                           n.has_attr("scale"), scale, window);
}

}  // namespace
}  // namespace dsinfer::detail::fast

#pragma GCC diagnostic pop

namespace dsinfer::detail {
void register_fast_paged_attention(KernelRegistry& r) {
    r.add({"PagedAttention", kDsinferDomain, 1, kMaxOpset, DeviceKind::cpu, DTypeSet{DType::f32}},
          &fast::make_fast_paged_attention, kPriorityCpu, "cpu");
}
}  // namespace dsinfer::detail
