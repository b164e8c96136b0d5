// Reference kernels for Cast and CastLike: every pair of the element types dsinfer holds,
// including strings (parsed with strtod/strtoll, formatted like numpy's str()).
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <new>
#include <optional>
#include <string_view>
#include <type_traits>

#include "ops/kernel_utils.hpp"
#include "cpu/reference/groups.hpp"

namespace dsinfer::detail {

void register_elementwise_cast_kernels(KernelRegistry& r);

namespace {

template <class T>
inline constexpr bool is_float_like_v = std::is_floating_point_v<T> || is_half_v<T>;

/// Float -> integer without UB: NaN -> 0, out-of-range values saturate.
template <class I>
I float_to_int(double d) noexcept {
    if (std::isnan(d)) return I(0);
    constexpr double lo = static_cast<double>(std::numeric_limits<I>::lowest());
    constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
    if (d <= lo) return std::numeric_limits<I>::lowest();
    if (d >= hi) return std::numeric_limits<I>::max();
    return static_cast<I>(d);
}

/// double -> float rounded to odd: converting the result to a 16-bit float then rounds like
/// a single correctly rounded double -> 16-bit conversion (no double rounding).
float to_float_round_odd(double d) noexcept {
    float f = static_cast<float>(d);
    if (std::isnan(d) || static_cast<double>(f) == d) return f;
    std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
    if (std::abs(static_cast<double>(f)) > std::abs(d)) --bits;  // truncate toward zero
    bits |= 1u;
    return std::bit_cast<float>(bits);
}

template <class To, class From>
To convert_num(From v) noexcept {
    if constexpr (std::is_same_v<To, From>) {
        return v;
    } else if constexpr (std::is_same_v<To, bool>) {
        return load(v) != 0;  // NaN -> true, like numpy
    } else if constexpr (std::is_same_v<From, bool>) {
        return store<To>(v ? 1 : 0);
    } else if constexpr (is_half_v<To>) {
        if constexpr (is_half_v<From> || std::is_same_v<From, float>)
            return To(static_cast<float>(load(v)));
        else
            return To(to_float_round_odd(static_cast<double>(v)));
    } else if constexpr (std::is_floating_point_v<To>) {
        return static_cast<To>(load(v));
    } else if constexpr (is_float_like_v<From>) {  // float -> integer
        return float_to_int<To>(static_cast<double>(load(v)));
    } else {  // integer -> integer: modular, like C++20 / numpy
        return static_cast<To>(v);
    }
}

bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool only_space(const char* p) noexcept {
    while (*p != '\0' && is_space(*p)) ++p;
    return *p == '\0';
}

template <class To>
To parse_string(const std::string& s) noexcept {
    const char* p = s.c_str();
    char* end = nullptr;
    if constexpr (std::is_same_v<To, bool>) {
        std::string_view v(s);
        if (v == "true" || v == "True" || v == "TRUE") return true;
        if (v == "false" || v == "False" || v == "FALSE" || v.empty()) return false;
        const double d = std::strtod(p, &end);
        return end != p && d != 0;
    } else if constexpr (std::is_same_v<To, float>) {
        const float f = std::strtof(p, &end);
        return end == p ? std::numeric_limits<float>::quiet_NaN() : f;
    } else if constexpr (is_float_like_v<To>) {
        const double d = std::strtod(p, &end);
        return convert_num<To>(end == p ? std::numeric_limits<double>::quiet_NaN() : d);
    } else {
        // Integers: exact for plain integer text, else through double ("1e3", "2.5").
        if constexpr (std::is_signed_v<To>) {
            const long long v = std::strtoll(p, &end, 10);
            if (end != p && only_space(end)) {
                if (v < static_cast<long long>(std::numeric_limits<To>::lowest()))
                    return std::numeric_limits<To>::lowest();
                if (v > static_cast<long long>(std::numeric_limits<To>::max()))
                    return std::numeric_limits<To>::max();
                return static_cast<To>(v);
            }
        } else {
            const char* q = p;
            while (is_space(*q)) ++q;
            if (*q != '-') {
                const unsigned long long v = std::strtoull(p, &end, 10);
                if (end != p && only_space(end)) {
                    if (v > static_cast<unsigned long long>(std::numeric_limits<To>::max()))
                        return std::numeric_limits<To>::max();
                    return static_cast<To>(v);
                }
            }
        }
        const double d = std::strtod(p, &end);
        return end == p ? To(0) : float_to_int<To>(d);
    }
}

/// True if the decimal text `d` (already parsed) reads back as exactly `v`.
template <class T>
bool round_trips(double d, T v) noexcept {
    if constexpr (std::is_same_v<T, double>) return d == v;
    else if constexpr (std::is_same_v<T, float>) return static_cast<float>(d) == v;
    else return convert_num<T>(d).bits == v.bits;
}

/// Formats a float like numpy's str(): the shortest digits that read back as the same value,
/// positional for 1e-4 <= |v| < 1e16 (always with a '.'), scientific otherwise ("1e-07").
/// `out` must hold 64 chars. Returns the length.
template <class T>
std::size_t format_float(T v, char* out) noexcept {
    const double d = static_cast<double>(load(v));
    auto put = [&](const char* s) {
        std::size_t n = 0;
        while (s[n] != '\0') { out[n] = s[n]; ++n; }
        return n;
    };
    if (std::isnan(d)) return put("nan");
    if (std::isinf(d)) return put(d < 0 ? "-inf" : "inf");
    if (d == 0) return put(std::signbit(d) ? "-0.0" : "0.0");

    char tmp[48];
    for (int p = 1; p <= 17; ++p) {
        std::snprintf(tmp, sizeof tmp, "%.*e", p - 1, d);
        if (round_trips(std::strtod(tmp, nullptr), v)) break;
    }
    // tmp is "[-]D[.DDD]e(+|-)XX": collect the digits and the exponent.
    char digits[24];
    int nd = 0;
    const char* c = tmp;
    const bool neg = *c == '-';
    if (neg) ++c;
    for (; *c != 'e'; ++c)
        if (*c != '.') digits[nd++] = *c;
    const int exp = std::atoi(c + 1);
    while (nd > 1 && digits[nd - 1] == '0') --nd;

    std::size_t n = 0;
    if (neg) out[n++] = '-';
    const double ad = std::abs(d);
    if (ad >= 1e-4 && ad < 1e16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; ++i) out[n++] = i < nd ? digits[i] : '0';
            out[n++] = '.';
            if (nd > exp + 1) {
                for (int i = exp + 1; i < nd; ++i) out[n++] = digits[i];
            } else {
                out[n++] = '0';
            }
        } else {
            out[n++] = '0';
            out[n++] = '.';
            for (int i = 0; i < -exp - 1; ++i) out[n++] = '0';
            for (int i = 0; i < nd; ++i) out[n++] = digits[i];
        }
    } else {
        out[n++] = digits[0];
        if (nd > 1) {
            out[n++] = '.';
            for (int i = 1; i < nd; ++i) out[n++] = digits[i];
        }
        out[n++] = 'e';
        out[n++] = exp < 0 ? '-' : '+';
        const int ae = exp < 0 ? -exp : exp;
        if (ae < 10) out[n++] = '0';
        auto r = std::to_chars(out + n, out + 64, ae);
        n = static_cast<std::size_t>(r.ptr - out);
    }
    return n;
}

template <class From>
std::size_t format_value(const From& v, char* out) noexcept {
    if constexpr (std::is_same_v<From, bool>) {
        const char* s = v ? "True" : "False";
        std::size_t n = 0;
        while (s[n] != '\0') { out[n] = s[n]; ++n; }
        return n;
    } else if constexpr (is_float_like_v<From>) {
        return format_float(v, out);
    } else {
        auto r = std::to_chars(out, out + 64, v);
        return static_cast<std::size_t>(r.ptr - out);
    }
}

template <class From, class To>
Status cast_loop(const TensorView& x, const TensorView& y) noexcept {
    const From* px = x.data_unchecked<From>();
    To* py = y.data_unchecked<To>();
    const std::int64_t n = x.num_elements();
    if constexpr (std::is_same_v<From, To> && !std::is_same_v<To, std::string>) {
        if (n > 0) std::memcpy(py, px, static_cast<std::size_t>(n) * sizeof(To));
    } else if constexpr (std::is_same_v<To, std::string>) {
        try {
            if constexpr (std::is_same_v<From, std::string>) {
                for (std::int64_t i = 0; i < n; ++i) py[i] = px[i];
            } else {
                char buf[64];
                for (std::int64_t i = 0; i < n; ++i) py[i].assign(buf, format_value(px[i], buf));
            }
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory formatting strings");
        }
    } else if constexpr (std::is_same_v<From, std::string>) {
        for (std::int64_t i = 0; i < n; ++i) py[i] = parse_string<To>(px[i]);
    } else {
        for (std::int64_t i = 0; i < n; ++i) py[i] = convert_num<To>(px[i]);
    }
    return Status::ok();
}

/// Cast (fixed target type) and CastLike (target type of input 1).
class CastKernel final : public Kernel {
public:
    explicit CastKernel(std::optional<DType> to) : to_(to) {}

    Status prepare(PrepareContext& ctx) const override {
        const DType to = to_ ? *to_ : ctx.input(1).dtype();
        ctx.set_output(0, to, ctx.input(0).shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        return dispatch_types(x.dtype, AllTypes{}, [&]<class From>() {
            return dispatch_types(y.dtype, AllTypes{},
                                  [&]<class To>() { return cast_loop<From, To>(x, y); });
        });
    }

private:
    std::optional<DType> to_;
};

/// Opset 1-5 Cast names the target type as a string.
std::optional<DType> dtype_from_name(std::string_view s) {
    static constexpr std::pair<std::string_view, DType> kNames[] = {
        {"FLOAT", DType::f32},   {"FLOAT16", DType::f16}, {"BFLOAT16", DType::bf16},
        {"DOUBLE", DType::f64},  {"INT8", DType::i8},     {"UINT8", DType::u8},
        {"INT16", DType::i16},   {"UINT16", DType::u16},  {"INT32", DType::i32},
        {"UINT32", DType::u32},  {"INT64", DType::i64},   {"UINT64", DType::u64},
        {"BOOL", DType::boolean}, {"STRING", DType::string},
    };
    for (const auto& [name, dt] : kNames)
        if (s == name) return dt;
    return std::nullopt;
}

StatusOr<std::unique_ptr<Kernel>> make_cast(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() != 1 || !ctx.has_input(0))
        return Status::error(ErrorCode::invalid_model, "expected exactly 1 input, got ",
                             ctx.num_inputs());
    const Attribute* a = ctx.node().find_attr("to");
    if (a == nullptr)
        return Status::error(ErrorCode::invalid_model, "missing required attribute 'to'");
    if (a->kind == AttrKind::s) {
        auto dt = dtype_from_name(a->s);
        if (!dt)
            return Status::error(ErrorCode::unsupported, "Cast to type \"", a->s,
                                 "\" is not supported");
        return make_kernel<CastKernel>(*dt);
    }
    DSINFER_ASSIGN_OR_RETURN(std::int64_t to, ctx.node().attr<std::int64_t>("to"));
    auto dt = from_onnx_dtype(static_cast<int>(to));
    if (!dt) {
        if (to < 0 || to > 26)
            return Status::error(ErrorCode::invalid_model, "attribute 'to' is not a valid ",
                                 "TensorProto.DataType: ", to);
        return Status::error(ErrorCode::unsupported, "Cast to ",
                             onnx_dtype_name(static_cast<int>(to)), " is not supported");
    }
    return make_kernel<CastKernel>(*dt);
}

StatusOr<std::unique_ptr<Kernel>> make_cast_like(const KernelCreateContext& ctx) {
    if (ctx.num_inputs() != 2 || !ctx.has_input(0) || !ctx.has_input(1))
        return Status::error(ErrorCode::invalid_model, "expected 2 inputs, got ",
                             ctx.num_inputs());
    return make_kernel<CastKernel>(std::nullopt);
}

}  // namespace

void register_elementwise_cast_kernels(KernelRegistry& r) {
    r.add({"Cast", "", 1, kMaxOpset, DeviceKind::cpu}, &make_cast);
    r.add({"CastLike", "", 15, kMaxOpset, DeviceKind::cpu}, &make_cast_like);
}

}  // namespace dsinfer::detail
