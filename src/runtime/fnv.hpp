// FNV-1a, 64-bit: the one hash of small keys made of integers (a weight form's zero points, a
// KV-cache block's tokens, a batcher's shape key). Not for untrusted keys of large tables.
//
// Internal (namespace dsinfer::detail); never included by public headers.
#pragma once

#include <cstdint>

namespace dsinfer::detail {

inline constexpr std::uint64_t kFnvOffset = 1469598103934665603ull;

/// h = FNV-1a of h over v's 8 bytes, lowest first.
inline void fnv_mix(std::uint64_t& h, std::uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= 1099511628211ull;
    }
}

}  // namespace dsinfer::detail
