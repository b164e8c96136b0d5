// com.dsinfer PagedAttention (docs/GENERATE.md): grouped-query attention of a step's new tokens
// over a paged KV cache that the Generator (src/generate/) owns. The node carries no state of
// its own: the step's view of the cache (KvCacheStep) comes with the run (RunOptions::kv_cache ->
// RunControl::kv_cache), and the kernel first writes the step's new keys and values into their
// blocks, in place, then attends each new token to its sequence's cached positions (causal;
// optionally a sliding window). Nothing of the cache is copied per step.
//
// Inputs Q, K, V of one step with batch 1 and the step's T tokens (the rows of every running
// sequence, concatenated in KvCacheStep order):
//   rank 4: Q [1, Hq, T, D], K and V [1, Hkv, T, D] (the heads-first layout decoder exports
//           use after their transposes); output Y [1, Hq, T, D];
//   rank 3: Q [1, T, Hq·D], K and V [1, T, Hkv·D] (attributes num_heads, kv_num_heads);
//           output Y [1, T, Hq·D].
// Attributes: layer (the cache layer it reads and writes), scale (default 1/sqrt(D)),
// num_heads / kv_num_heads (rank 3), sliding_window (0: off; else a token sees the last
// `sliding_window` positions including its own).
//
// Internal (namespace dsinfer::detail), shared by the reference kernel
// (src/cpu/reference/paged_attention.cpp), the fast kernel (src/cpu/fast/fast_paged_attention.cpp)
// and the cache (src/generate/kv_cache.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dsinfer/dtype.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/kv_cache.hpp"
#include "dsinfer/shape.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

/// What one PagedAttention node sees of its inputs, checked against the step.
struct PagedAttentionDims {
    std::int64_t tokens = 0, q_heads = 0, kv_heads = 0, head = 0;
    bool heads_first = true;  ///< rank 4 [1, H, T, D]; false: rank 3 [1, T, H·D]
    /// Element offset of (head h, token t) in Q/Y (q) and K/V (kv).
    std::int64_t q_at(std::int64_t h, std::int64_t t) const noexcept {
        return heads_first ? (h * tokens + t) * head : t * q_heads * head + h * head;
    }
    std::int64_t kv_at(std::int64_t h, std::int64_t t) const noexcept {
        return heads_first ? (h * tokens + t) * head : t * kv_heads * head + h * head;
    }
};

/// Shapes of Q, K, V against the attributes (rank 3 needs num_heads / kv_num_heads).
inline StatusOr<PagedAttentionDims> paged_attention_dims(const Shape& q, const Shape& k,
                                                         const Shape& v, std::int64_t num_heads,
                                                         std::int64_t kv_num_heads) {
    PagedAttentionDims d;
    DSINFER_CHECK(q.rank() == 3 || q.rank() == 4, ErrorCode::invalid_argument,
                  "input Q must be [1, heads, tokens, head_size] or [1, tokens, heads * "
                  "head_size], got ",
                  q.to_string());
    DSINFER_CHECK(k.rank() == q.rank() && v.rank() == q.rank(), ErrorCode::invalid_argument,
                  "inputs K and V must have Q's rank ", q.rank(), ", got ", k.to_string(), " and ",
                  v.to_string());
    DSINFER_CHECK(q[0] == 1 && k[0] == 1 && v[0] == 1, ErrorCode::invalid_argument,
                  "PagedAttention runs one step of batch 1 (the sequences' tokens concatenated), "
                  "got Q ",
                  q.to_string());
    if (q.rank() == 4) {
        d.heads_first = true;
        d.q_heads = q[1];
        d.tokens = q[2];
        d.head = q[3];
        d.kv_heads = k[1];
        DSINFER_CHECK(k[2] == d.tokens && v[2] == d.tokens && k[3] == d.head &&
                          v[1] == d.kv_heads && v[3] == d.head,
                      ErrorCode::invalid_argument, "inputs K ", k.to_string(), " and V ",
                      v.to_string(), " do not match Q ", q.to_string());
    } else {
        DSINFER_CHECK(num_heads > 0 && kv_num_heads > 0, ErrorCode::invalid_argument,
                      "rank-3 inputs need the attributes num_heads and kv_num_heads");
        d.heads_first = false;
        d.tokens = q[1];
        d.q_heads = num_heads;
        d.kv_heads = kv_num_heads;
        DSINFER_CHECK(q[2] % num_heads == 0, ErrorCode::invalid_argument, "Q width ", q[2],
                      " is not a multiple of num_heads ", num_heads);
        d.head = q[2] / num_heads;
        DSINFER_CHECK(
            k[1] == d.tokens && v[1] == d.tokens && k[2] == kv_num_heads * d.head && v[2] == k[2],
            ErrorCode::invalid_argument, "inputs K ", k.to_string(), " and V ", v.to_string(),
            " do not match Q ", q.to_string(), " with ", kv_num_heads, " KV heads");
    }
    DSINFER_CHECK(d.kv_heads > 0 && d.q_heads % d.kv_heads == 0, ErrorCode::invalid_argument,
                  "query heads ", d.q_heads, " are not a multiple of KV heads ", d.kv_heads);
    return d;
}

/// Checks the step against the node: the cache's layer, heads and head size, the step's token
/// count, and each sequence's table covering past + new tokens.
inline Status check_kv_step(const KvCacheStep* step, const PagedAttentionDims& d,
                            std::int64_t layer) noexcept {
    DSINFER_CHECK(step != nullptr, ErrorCode::invalid_argument,
                  "PagedAttention runs only inside a Generator step (no KV cache given with the "
                  "run)");
    DSINFER_CHECK(layer >= 0 && layer < step->layers, ErrorCode::invalid_argument, "layer ", layer,
                  " is outside the cache's ", step->layers, " layers");
    DSINFER_CHECK(step->kv_heads == d.kv_heads && step->head_dim == d.head,
                  ErrorCode::invalid_argument, "the cache holds ", step->kv_heads, " heads of ",
                  step->head_dim, ", the node ", d.kv_heads, " of ", d.head);
    DSINFER_CHECK(step->tokens() == d.tokens, ErrorCode::invalid_argument, "the step has ",
                  step->tokens(), " tokens, the inputs ", d.tokens);
    for (std::int64_t s = 0; s < step->num_seqs; ++s) {
        const std::int64_t end = step->past[s] + step->token_begin[s + 1] - step->token_begin[s];
        DSINFER_CHECK(step->table_len[s] * step->block_tokens >= end, ErrorCode::internal,
                      "sequence ", s, "'s block table holds ",
                      step->table_len[s] * step->block_tokens, " positions, it needs ", end);
        for (std::int64_t b = 0; b < step->table_len[s]; ++b)
            DSINFER_CHECK(
                step->block_table[s][b] >= 0 && step->block_table[s][b] < step->num_blocks,
                ErrorCode::internal, "sequence ", s, "'s block ", b, " is ",
                step->block_table[s][b], ", outside the cache's ", step->num_blocks, " blocks");
    }
    return Status::ok();
}

/// Float value of a half or float element of the cache.
inline float kv_load(const void* base, DType dt, std::int64_t i) noexcept {
    switch (dt) {
        case DType::f16: return static_cast<float>(static_cast<const float16*>(base)[i]);
        case DType::bf16: return static_cast<float>(static_cast<const bfloat16*>(base)[i]);
        default: return static_cast<const float*>(base)[i];
    }
}

/// Writes `n` floats of one (block, head, token) row into the cache (i8: with its scale).
inline void kv_store_row(void* base, float* scales, DType dt, std::int64_t row, std::int64_t n,
                         const float* x) noexcept {
    const std::int64_t at = row * n;
    switch (dt) {
        case DType::f16: {
            auto* p = static_cast<float16*>(base) + at;
            for (std::int64_t e = 0; e < n; ++e) p[e] = float16(x[e]);
            break;
        }
        case DType::bf16: {
            auto* p = static_cast<bfloat16*>(base) + at;
            for (std::int64_t e = 0; e < n; ++e) p[e] = bfloat16(x[e]);
            break;
        }
        case DType::i8: {
            float m = 0.f;
            for (std::int64_t e = 0; e < n; ++e) m = std::max(m, x[e] < 0 ? -x[e] : x[e]);
            const float scale = m > 0.f ? m / 127.f : 1.f;
            const float inv = 1.f / scale;
            auto* p = static_cast<std::int8_t*>(base) + at;
            for (std::int64_t e = 0; e < n; ++e) {
                float q = std::nearbyint(x[e] * inv);
                q = q > 127.f ? 127.f : (q < -127.f ? -127.f : q);
                p[e] = static_cast<std::int8_t>(q);
            }
            scales[row] = scale;
            break;
        }
        default: std::memcpy(static_cast<float*>(base) + at, x, sizeof(float) * n);
    }
}

/// Reads one cached row as floats.
inline void kv_load_row(const void* base, const float* scales, DType dt, std::int64_t row,
                        std::int64_t n, float* y) noexcept {
    const std::int64_t at = row * n;
    switch (dt) {
        case DType::f16: {
            const auto* p = static_cast<const float16*>(base) + at;
            for (std::int64_t e = 0; e < n; ++e) y[e] = static_cast<float>(p[e]);
            break;
        }
        case DType::bf16: {
            const auto* p = static_cast<const bfloat16*>(base) + at;
            for (std::int64_t e = 0; e < n; ++e) y[e] = static_cast<float>(p[e]);
            break;
        }
        case DType::i8: {
            const auto* p = static_cast<const std::int8_t*>(base) + at;
            const float s = scales[row];
            for (std::int64_t e = 0; e < n; ++e) y[e] = static_cast<float>(p[e]) * s;
            break;
        }
        default: std::memcpy(y, static_cast<const float*>(base) + at, sizeof(float) * n);
    }
}

/// The row index (in block rows of head_dim elements, of one layer's pool) of position `pos`
/// of KV head `h` for a sequence with block table `table`.
inline std::int64_t kv_row(const KvCacheStep& s, const std::int32_t* table, std::int64_t h,
                           std::int64_t pos) noexcept {
    const std::int64_t b = table[pos / s.block_tokens];
    return (b * s.kv_heads + h) * s.block_tokens + pos % s.block_tokens;
}

/// The step's sequence of token row t (binary search over token_begin).
inline std::int64_t kv_seq_of(const KvCacheStep& s, std::int64_t t) noexcept {
    std::int64_t lo = 0, hi = s.num_seqs - 1;
    while (lo < hi) {
        const std::int64_t mid = (lo + hi + 1) / 2;
        if (s.token_begin[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

}  // namespace dsinfer::detail
