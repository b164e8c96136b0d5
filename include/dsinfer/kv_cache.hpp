// dsinfer/kv_cache.hpp — one generation step's view of a paged KV cache (KvCacheStep), what a
// Generator (dsinfer/generate.hpp) hands each engine run through RunOptions::kv_cache and what
// the com.dsinfer PagedAttention kernels read and write (docs/GENERATE.md).
//
// Purpose: the cache lives outside the graph, owned by the Generator (src/generate/kv_cache.cpp:
// fixed-size blocks from one budget, a block table per sequence, prefix sharing); a step's
// PagedAttention node writes the new tokens' keys and values into their blocks in place and
// attends over the sequence's positions, so no cache tensor is copied per token.
//
// Ownership/threading: plain views; the Generator keeps every pointer valid for the run.
#pragma once

#include <cstdint>

#include "dsinfer/dtype.hpp"

namespace dsinfer {

/// One step's view of a paged KV cache (built by the Generator for each engine run).
/// Storage per layer: a pool of blocks, block b of layer l at key_pool[l] + b * block_elems()
/// elements, laid out [kv_heads][block_tokens][head_dim]; same for values. Element type:
/// f32, f16 or bf16 (converted on write, read as float), or i8 with one float scale per
/// (block, head, token) in key_scale[l] / value_scale[l] (symmetric, max|x| / 127).
struct KvCacheStep {
    std::int64_t layers = 0;
    std::int64_t kv_heads = 0;
    std::int64_t head_dim = 0;
    std::int64_t block_tokens = 0;
    DType dtype = DType::f32;
    void* const* key_pool = nullptr;      ///< [layers]
    void* const* value_pool = nullptr;    ///< [layers]
    float* const* key_scale = nullptr;    ///< [layers], i8 only
    float* const* value_scale = nullptr;  ///< [layers], i8 only
    std::int64_t num_blocks = 0;          ///< blocks per layer pool (bounds check)
    std::int64_t num_seqs = 0;
    const std::int64_t* token_begin = nullptr;  ///< [num_seqs + 1]: the step's rows per sequence
    const std::int64_t* past = nullptr;         ///< [num_seqs]: positions cached before the step
    const std::int32_t* const* block_table = nullptr;  ///< [num_seqs]: blocks in position order
    const std::int64_t* table_len = nullptr;           ///< [num_seqs]: entries of each table

    std::int64_t block_elems() const noexcept { return kv_heads * block_tokens * head_dim; }
    std::int64_t tokens() const noexcept { return num_seqs > 0 ? token_begin[num_seqs] : 0; }
};

}  // namespace dsinfer
