// dsinfer/dtype.hpp — element types.
//
// Purpose: DType (the element types dsinfer tensors hold), their sizes and names, the mapping
// to ONNX TensorProto.DataType numbers, and the 16-bit float storage types float16/bfloat16
// with exact round-to-nearest-even conversions.
//
// Ownership/threading: plain values and constexpr functions; thread-safe.
//
// Usage:
//   static_assert(dsinfer::dtype_size(dsinfer::DType::f16) == 2);
//   dsinfer::DType t = dsinfer::dtype_of<float>();          // DType::f32
//   static_assert(dsinfer::dtype_of<long long>() == dsinfer::DType::i64);
//   // dsinfer::dtype_of<char>() or <long double>: compile error listing the element types
//   float x = static_cast<float>(dsinfer::float16(1.5f));   // 1.5f
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace dsinfer {

enum class DType : std::uint8_t {
    f32, f16, bf16, f64, i8, u8, i16, u16, i32, u32, i64, u64, boolean, string,
};
inline constexpr int kNumDTypes = 14;

/// 16-bit IEEE half precision, storage only; arithmetic goes through float.
struct float16 {
    std::uint16_t bits = 0;
    float16() = default;
    explicit float16(float f) noexcept : bits(from_float(f)) {}
    explicit operator float() const noexcept { return to_float(bits); }
    static float16 from_bits(std::uint16_t b) noexcept { float16 h; h.bits = b; return h; }

    static std::uint16_t from_float(float f) noexcept {
        const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
        const std::uint32_t sign = (x >> 16) & 0x8000u;
        const std::uint32_t absx = x & 0x7fffffffu;
        if (absx >= 0x7f800000u) {  // Inf or NaN
            return static_cast<std::uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
        }
        if (absx >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow
        if (absx < 0x38800000u) {  // subnormal half or zero
            if (absx < 0x33000000u) return static_cast<std::uint16_t>(sign);  // < 2^-25 -> 0
            const std::uint32_t e = absx >> 23;
            const std::uint32_t m = (absx & 0x7fffffu) | 0x800000u;
            const std::uint32_t shift = 126u - e;  // 14 + (113 - e) - 1 ... yields mantissa
            std::uint32_t hm = m >> (shift);
            const std::uint32_t rem = m & ((1u << shift) - 1u);
            const std::uint32_t half = 1u << (shift - 1u);
            if (rem > half || (rem == half && (hm & 1u))) ++hm;
            return static_cast<std::uint16_t>(sign | hm);
        }
        std::uint32_t h = ((absx - 0x38000000u) >> 13);
        const std::uint32_t rem = absx & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
        return static_cast<std::uint16_t>(sign | h);
    }
    static float to_float(std::uint16_t h) noexcept {
        const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
        std::uint32_t e = (h >> 10) & 0x1fu;
        std::uint32_t m = h & 0x3ffu;
        std::uint32_t out;
        if (e == 0) {
            if (m == 0) {
                out = sign;
            } else {  // subnormal: normalize
                e = 113;
                while ((m & 0x400u) == 0) { m <<= 1; --e; }
                m &= 0x3ffu;
                out = sign | (e << 23) | (m << 13);
            }
        } else if (e == 31) {
            out = sign | 0x7f800000u | (m << 13);
        } else {
            out = sign | ((e + 112u) << 23) | (m << 13);
        }
        return std::bit_cast<float>(out);
    }
};

/// bfloat16 (the top 16 bits of an IEEE float), storage only; round-to-nearest-even.
struct bfloat16 {
    std::uint16_t bits = 0;
    bfloat16() = default;
    explicit bfloat16(float f) noexcept : bits(from_float(f)) {}
    explicit operator float() const noexcept {
        return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
    }
    static bfloat16 from_bits(std::uint16_t b) noexcept { bfloat16 h; h.bits = b; return h; }
    static std::uint16_t from_float(float f) noexcept {
        const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
        if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
        const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
        return static_cast<std::uint16_t>((x + rounding) >> 16);
    }
};

/// Bytes per element (for string: sizeof(std::string), the in-memory representation).
constexpr std::size_t dtype_size(DType t) noexcept {
    switch (t) {
        case DType::f32: return 4;
        case DType::f16: return 2;
        case DType::bf16: return 2;
        case DType::f64: return 8;
        case DType::i8: return 1;
        case DType::u8: return 1;
        case DType::i16: return 2;
        case DType::u16: return 2;
        case DType::i32: return 4;
        case DType::u32: return 4;
        case DType::i64: return 8;
        case DType::u64: return 8;
        case DType::boolean: return 1;
        case DType::string: return sizeof(std::string);
    }
    return 0;
}

constexpr std::string_view dtype_name(DType t) noexcept {
    switch (t) {
        case DType::f32: return "float32";
        case DType::f16: return "float16";
        case DType::bf16: return "bfloat16";
        case DType::f64: return "float64";
        case DType::i8: return "int8";
        case DType::u8: return "uint8";
        case DType::i16: return "int16";
        case DType::u16: return "uint16";
        case DType::i32: return "int32";
        case DType::u32: return "uint32";
        case DType::i64: return "int64";
        case DType::u64: return "uint64";
        case DType::boolean: return "bool";
        case DType::string: return "string";
    }
    return "?";
}

constexpr bool is_floating(DType t) noexcept {
    return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64;
}
constexpr bool is_integer(DType t) noexcept {
    return t == DType::i8 || t == DType::u8 || t == DType::i16 || t == DType::u16 ||
           t == DType::i32 || t == DType::u32 || t == DType::i64 || t == DType::u64;
}
constexpr bool is_signed_integer(DType t) noexcept {
    return t == DType::i8 || t == DType::i16 || t == DType::i32 || t == DType::i64;
}

/// ONNX TensorProto.DataType number of a DType.
constexpr int to_onnx_dtype(DType t) noexcept {
    switch (t) {
        case DType::f32: return 1;
        case DType::u8: return 2;
        case DType::i8: return 3;
        case DType::u16: return 4;
        case DType::i16: return 5;
        case DType::i32: return 6;
        case DType::i64: return 7;
        case DType::string: return 8;
        case DType::boolean: return 9;
        case DType::f16: return 10;
        case DType::f64: return 11;
        case DType::u32: return 12;
        case DType::u64: return 13;
        case DType::bf16: return 16;
    }
    return 0;
}

/// DType of an ONNX TensorProto.DataType number; nullopt for types dsinfer does not hold
/// (complex, float8, int4, ...) and for undefined numbers.
constexpr std::optional<DType> from_onnx_dtype(int v) noexcept {
    switch (v) {
        case 1: return DType::f32;
        case 2: return DType::u8;
        case 3: return DType::i8;
        case 4: return DType::u16;
        case 5: return DType::i16;
        case 6: return DType::i32;
        case 7: return DType::i64;
        case 8: return DType::string;
        case 9: return DType::boolean;
        case 10: return DType::f16;
        case 11: return DType::f64;
        case 12: return DType::u32;
        case 13: return DType::u64;
        case 16: return DType::bf16;
        default: return std::nullopt;
    }
}

/// Name of an ONNX TensorProto.DataType number (also for types dsinfer does not hold).
constexpr std::string_view onnx_dtype_name(int v) noexcept {
    switch (v) {
        case 0: return "UNDEFINED";
        case 14: return "COMPLEX64";
        case 15: return "COMPLEX128";
        case 17: return "FLOAT8E4M3FN";
        case 18: return "FLOAT8E4M3FNUZ";
        case 19: return "FLOAT8E5M2";
        case 20: return "FLOAT8E5M2FNUZ";
        case 21: return "UINT4";
        case 22: return "INT4";
        case 23: return "FLOAT4E2M1";
        case 24: return "FLOAT8E8M0";
        case 25: return "UINT2";
        case 26: return "INT2";
        default: {
            auto d = from_onnx_dtype(v);
            return d ? dtype_name(*d) : std::string_view("UNKNOWN");
        }
    }
}

namespace detail {
template <class U>
inline constexpr bool is_character_v =
    std::is_same_v<U, char> || std::is_same_v<U, wchar_t> || std::is_same_v<U, char8_t> ||
    std::is_same_v<U, char16_t> || std::is_same_v<U, char32_t>;

/// The DType of the cv-unqualified type U as an int; -1 when U is not a tensor element type.
template <class U>
constexpr int element_dtype() noexcept {
    if constexpr (std::is_same_v<U, float>) return static_cast<int>(DType::f32);
    else if constexpr (std::is_same_v<U, double>) return static_cast<int>(DType::f64);
    else if constexpr (std::is_same_v<U, float16>) return static_cast<int>(DType::f16);
    else if constexpr (std::is_same_v<U, bfloat16>) return static_cast<int>(DType::bf16);
    else if constexpr (std::is_same_v<U, bool>) return static_cast<int>(DType::boolean);
    else if constexpr (std::is_same_v<U, std::string>) return static_cast<int>(DType::string);
    else if constexpr (std::is_integral_v<U> && !is_character_v<U>) {
        // By size and signedness, so that every spelling of a 64-bit integer is i64/u64: on
        // LP64 Linux std::int64_t is `long` and `long long` is a distinct type of the same size.
        constexpr bool s = std::is_signed_v<U>;
        switch (sizeof(U)) {
            case 1: return static_cast<int>(s ? DType::i8 : DType::u8);
            case 2: return static_cast<int>(s ? DType::i16 : DType::u16);
            case 4: return static_cast<int>(s ? DType::i32 : DType::u32);
            case 8: return static_cast<int>(s ? DType::i64 : DType::u64);
            default: return -1;  // __int128 and the like
        }
    } else {
        return -1;
    }
}
}  // namespace detail

/// True for the C++ types a tensor holds (cv-qualifiers ignored): float, double, float16,
/// bfloat16, bool, std::string and the signed and unsigned integers of 1, 2, 4 and 8 bytes
/// (std::int8_t ... std::uint64_t; `long long` and `unsigned long long` are int64/uint64 too).
/// Character types (char, wchar_t, char8_t, char16_t, char32_t) are not: their signedness or
/// meaning is ambiguous, so write std::int8_t or std::uint8_t.
template <class T>
inline constexpr bool is_tensor_element_v = detail::element_dtype<std::remove_cv_t<T>>() >= 0;

/// C++ type -> DType, at compile time. Any other type (long double, pointers, char, structs,
/// std::complex) is a compile error naming the types that are accepted.
template <class T>
constexpr DType dtype_of() noexcept {
    static_assert(is_tensor_element_v<T>,
                  "dsinfer: T is not a tensor element type; use float, double, dsinfer::float16, "
                  "dsinfer::bfloat16, std::int8_t, std::uint8_t, std::int16_t, std::uint16_t, "
                  "std::int32_t, std::uint32_t, std::int64_t (or long long), std::uint64_t, "
                  "bool or std::string (for char data use std::int8_t or std::uint8_t)");
    return static_cast<DType>(detail::element_dtype<std::remove_cv_t<T>>());
}
static_assert(dtype_of<long long>() == DType::i64 && dtype_of<std::int64_t>() == DType::i64);
static_assert(dtype_of<unsigned long long>() == DType::u64 && dtype_of<const float>() == DType::f32);
static_assert(dtype_of<std::int8_t>() == DType::i8 && dtype_of<std::uint8_t>() == DType::u8);

/// A small set of DTypes (bit set), used by kernel keys.
class DTypeSet {
public:
    constexpr DTypeSet() noexcept = default;
    constexpr DTypeSet(std::initializer_list<DType> types) noexcept {
        for (DType t : types) bits_ |= bit(t);
    }
    static constexpr DTypeSet all() noexcept {
        DTypeSet s;
        s.bits_ = (1u << kNumDTypes) - 1u;
        return s;
    }
    constexpr bool contains(DType t) const noexcept { return (bits_ & bit(t)) != 0; }
    constexpr bool empty() const noexcept { return bits_ == 0; }

private:
    static constexpr std::uint32_t bit(DType t) noexcept {
        return 1u << static_cast<unsigned>(t);
    }
    std::uint32_t bits_ = 0;
};

}  // namespace dsinfer
