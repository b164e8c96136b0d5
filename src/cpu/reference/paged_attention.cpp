// Reference kernel of com.dsinfer PagedAttention (src/ops/paged_attention.hpp, docs/GENERATE.md):
// writes the step's keys and values into their cache blocks, then for each new token and query
// head two passes over its visible positions (the maximum score, then the exponentials' sum and
// the weighted values), recomputing the dot products instead of keeping a score row, so it
// needs no workspace whatever the context length. Plain loops; the oracle of the fast kernel
// (src/cpu/fast/fast_paged_attention.cpp).
#include "ops/paged_attention.hpp"

#include <cmath>
#include <limits>

#include "cpu/reference/groups.hpp"
#include "dsinfer/ops.hpp"
#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

constexpr int64_t kMaxHead = 512;  // row buffers on the stack

class PagedAttentionKernel final : public Kernel {
public:
    PagedAttentionKernel(int64_t layer, int64_t heads, int64_t kv_heads, bool has_scale,
                         float scale, int64_t window)
        : layer_(layer),
          heads_(heads),
          kv_heads_(kv_heads),
          has_scale_(has_scale),
          scale_(scale),
          window_(window) {}

    Status prepare(PrepareContext& ctx) const override {
        static const char* const names[3] = {"Q", "K", "V"};
        for (int i = 0; i < 3; ++i) {
            DSINFER_CHECK(ctx.has_input(i), ErrorCode::invalid_argument, "input ", names[i],
                          " is required");
            DSINFER_CHECK(ctx.input(i).dtype() == DType::f32, ErrorCode::unsupported, "input ",
                          names[i], " has type ", dtype_name(ctx.input(i).dtype()),
                          "; PagedAttention runs float32 (the cache may store f16, bf16 or i8)");
        }
        DSINFER_ASSIGN_OR_RETURN(PagedAttentionDims d,
                                 paged_attention_dims(ctx.input(0).shape(), ctx.input(1).shape(),
                                                      ctx.input(2).shape(), heads_, kv_heads_));
        DSINFER_CHECK(d.head <= kMaxHead, ErrorCode::unsupported, "head size ", d.head,
                      " is above PagedAttention's ", kMaxHead);
        ctx.set_output(0, DType::f32, ctx.input(0).shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const StatusOr<PagedAttentionDims> dims = paged_attention_dims(
            ctx.input(0).shape, ctx.input(1).shape, ctx.input(2).shape, heads_, kv_heads_);
        if (!dims.is_ok()) return dims.status();
        const PagedAttentionDims& d = *dims;
        const KvCacheStep* step = ctx.control().kv_cache;
        DSINFER_RETURN_IF_ERROR(check_kv_step(step, d, layer_));
        const KvCacheStep& s = *step;
        const float* q = ctx.input(0).data_unchecked<float>();
        const float* k = ctx.input(1).data_unchecked<float>();
        const float* v = ctx.input(2).data_unchecked<float>();
        float* y = ctx.output(0).data_unchecked<float>();
        void* kp = s.key_pool[layer_];
        void* vp = s.value_pool[layer_];
        float* ks = s.dtype == DType::i8 ? s.key_scale[layer_] : nullptr;
        float* vs = s.dtype == DType::i8 ? s.value_scale[layer_] : nullptr;
        const int64_t D = d.head;
        // 1. The new keys and values into their blocks.
        for (int64_t sq = 0; sq < s.num_seqs; ++sq)
            for (int64_t t = s.token_begin[sq]; t < s.token_begin[sq + 1]; ++t) {
                const int64_t pos = s.past[sq] + (t - s.token_begin[sq]);
                for (int64_t h = 0; h < d.kv_heads; ++h) {
                    const int64_t row = kv_row(s, s.block_table[sq], h, pos);
                    kv_store_row(kp, ks, s.dtype, row, D, k + d.kv_at(h, t));
                    kv_store_row(vp, vs, s.dtype, row, D, v + d.kv_at(h, t));
                }
            }
        // 2. Attention of each new token over its sequence's positions [lo, pos].
        const float scale =
            has_scale_ ? scale_ : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
        const int64_t rep = d.q_heads / d.kv_heads;
        float kr[kMaxHead], vr[kMaxHead];
        for (int64_t sq = 0; sq < s.num_seqs; ++sq)
            for (int64_t t = s.token_begin[sq]; t < s.token_begin[sq + 1]; ++t) {
                const int64_t pos = s.past[sq] + (t - s.token_begin[sq]);
                const int64_t lo = window_ > 0 ? std::max<int64_t>(0, pos - window_ + 1) : 0;
                const std::int32_t* table = s.block_table[sq];
                for (int64_t h = 0; h < d.q_heads; ++h) {
                    const int64_t g = h / rep;
                    const float* qr = q + d.q_at(h, t);
                    auto score = [&](int64_t p) {
                        kv_load_row(kp, ks, s.dtype, kv_row(s, table, g, p), D, kr);
                        double dot = 0;
                        for (int64_t e = 0; e < D; ++e) dot += double(qr[e]) * double(kr[e]);
                        return static_cast<double>(static_cast<float>(dot) * scale);
                    };
                    double mx = -std::numeric_limits<double>::infinity();
                    for (int64_t p = lo; p <= pos; ++p) mx = std::max(mx, score(p));
                    double sum = 0;
                    double accd[kMaxHead];
                    for (int64_t e = 0; e < D; ++e) accd[e] = 0;
                    for (int64_t p = lo; p <= pos; ++p) {
                        const double w = std::exp(score(p) - mx);
                        sum += w;
                        kv_load_row(vp, vs, s.dtype, kv_row(s, table, g, p), D, vr);
                        for (int64_t e = 0; e < D; ++e) accd[e] += w * double(vr[e]);
                    }
                    float* yr = y + d.q_at(h, t);
                    for (int64_t e = 0; e < D; ++e) yr[e] = static_cast<float>(accd[e] / sum);
                }
            }
        return Status::ok();
    }

private:
    int64_t layer_, heads_, kv_heads_;
    bool has_scale_;
    float scale_;
    int64_t window_;
};

StatusOr<std::unique_ptr<Kernel>> make_paged_attention(const KernelCreateContext& ctx) {
    DSINFER_CHECK(ctx.num_inputs() == 3 && ctx.num_outputs() == 1, ErrorCode::invalid_model,
                  "PagedAttention takes 3 inputs (Q, K, V) and one output, got ", ctx.num_inputs(),
                  " and ", ctx.num_outputs());
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(const int64_t layer, n.attr<int64_t>("layer"));
    DSINFER_CHECK(layer >= 0, ErrorCode::invalid_model, "attribute layer must be >= 0, got ",
                  layer);
    DSINFER_ASSIGN_OR_RETURN(const int64_t heads, n.attr_or<int64_t>("num_heads", 0));
    DSINFER_ASSIGN_OR_RETURN(const int64_t kv_heads, n.attr_or<int64_t>("kv_num_heads", 0));
    DSINFER_ASSIGN_OR_RETURN(const float scale, n.attr_or<float>("scale", 0.f));
    DSINFER_ASSIGN_OR_RETURN(const int64_t window, n.attr_or<int64_t>("sliding_window", 0));
    DSINFER_CHECK(heads >= 0 && kv_heads >= 0 && window >= 0, ErrorCode::invalid_model,
                  "attributes num_heads, kv_num_heads and sliding_window must be >= 0");
    return make_kernel<PagedAttentionKernel>(layer, heads, kv_heads, n.has_attr("scale"), scale,
                                             window);
}

}  // namespace

void register_paged_attention_kernels(KernelRegistry& r) {
    r.add({"PagedAttention", kDsinferDomain, 1, kMaxOpset, DeviceKind::cpu}, &make_paged_attention);
}

}  // namespace dsinfer::detail
