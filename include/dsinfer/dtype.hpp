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
//   float x = static_cast<float>(dsinfer::float16(1.5f));   // 1.5f
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

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

/// C++ type -> DType.
template <class T>
constexpr DType dtype_of() noexcept;
template <> constexpr DType dtype_of<float>() noexcept { return DType::f32; }
template <> constexpr DType dtype_of<float16>() noexcept { return DType::f16; }
template <> constexpr DType dtype_of<bfloat16>() noexcept { return DType::bf16; }
template <> constexpr DType dtype_of<double>() noexcept { return DType::f64; }
template <> constexpr DType dtype_of<std::int8_t>() noexcept { return DType::i8; }
template <> constexpr DType dtype_of<std::uint8_t>() noexcept { return DType::u8; }
template <> constexpr DType dtype_of<std::int16_t>() noexcept { return DType::i16; }
template <> constexpr DType dtype_of<std::uint16_t>() noexcept { return DType::u16; }
template <> constexpr DType dtype_of<std::int32_t>() noexcept { return DType::i32; }
template <> constexpr DType dtype_of<std::uint32_t>() noexcept { return DType::u32; }
template <> constexpr DType dtype_of<std::int64_t>() noexcept { return DType::i64; }
template <> constexpr DType dtype_of<std::uint64_t>() noexcept { return DType::u64; }
template <> constexpr DType dtype_of<bool>() noexcept { return DType::boolean; }
template <> constexpr DType dtype_of<std::string>() noexcept { return DType::string; }

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
