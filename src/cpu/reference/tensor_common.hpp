// Helpers shared by the data-movement kernels (tensor_*.cpp): element-size dispatch for ops that
// only move bytes (strings are copied by assignment, never memcpy), and integer index inputs.
#pragma once

#include <cstring>
#include <string>
#include <type_traits>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {

/// Calls f.template operator()<S>() with S a storage type of the same size as `dt`
/// (std::string for strings). For ops that only move elements.
template <class F>
Status dispatch_storage(DType dt, F&& f) {
    if (dt == DType::string) return f.template operator()<std::string>();
    switch (dtype_size(dt)) {
        case 1: return f.template operator()<std::uint8_t>();
        case 2: return f.template operator()<std::uint16_t>();
        case 4: return f.template operator()<std::uint32_t>();
        case 8: return f.template operator()<std::uint64_t>();
        default: break;
    }
    return Status::error(ErrorCode::unsupported, "element type ", dtype_name(dt),
                         " is not supported");
}

template <class T>
void copy_elems(const T* src, std::int64_t n, T* dst) noexcept {
    if constexpr (std::is_same_v<T, std::string>) {
        for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i];
    } else if (n > 0) {
        std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(T));
    }
}

/// Copies all elements of `in` to `out` (same element count, same dtype).
inline Status copy_all(const TensorView& in, const TensorView& out) noexcept {
    if (in.num_elements() != out.num_elements() || in.dtype != out.dtype)
        return Status(ErrorCode::internal, "copy: input and output do not match");
    return dispatch_storage(in.dtype, [&]<class T>() {
        copy_elems(in.data_unchecked<T>(), in.num_elements(), out.data_unchecked<T>());
        return Status::ok();
    });
}

/// Element i of an int32/int64 tensor as int64.
inline std::int64_t int_at(const TensorView& v, std::int64_t i) noexcept {
    return v.dtype == DType::i32 ? v.data_unchecked<std::int32_t>()[i] : v.data_unchecked<std::int64_t>()[i];
}

inline Status check_int_input(const Tensor& t, const char* what) {
    if (t.dtype() != DType::i64 && t.dtype() != DType::i32)
        return Status::error(ErrorCode::invalid_argument, "input '", what,
                             "' must be int32 or int64, got ", dtype_name(t.dtype()));
    return Status::ok();
}

}  // namespace dsinfer::detail
