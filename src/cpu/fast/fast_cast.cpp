// Fast Cast / CastLike between the types real graphs convert: float32 <-> float16 / bfloat16
// (vectorized, round-to-nearest-even, bitwise equal to dsinfer::float16/bfloat16), and among
// float32, float64, int32, int64, uint8 and bool with the reference's rules: float -> integer
// truncates with NaN -> 0 and saturation, integer -> integer wraps, x -> bool is x != 0 (NaN is
// true), bool -> x is 0 or 1. Other pairs (strings, 16-bit floats to anything but float32,
// the remaining integer widths) run the reference kernel's code.
#include <cmath>
#include <limits>
#include <type_traits>

#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"

namespace dsinfer::detail::fast {
namespace {

template <class To, class From>
inline To convert(From v) noexcept {
    if constexpr (std::is_same_v<To, bool>) {
        return v != From(0);
    } else if constexpr (std::is_same_v<From, bool>) {
        return static_cast<To>(v ? 1 : 0);
    } else if constexpr (std::is_floating_point_v<To> || !std::is_floating_point_v<From>) {
        return static_cast<To>(v);  // to float, or integer -> integer (modular)
    } else {  // float -> integer
        const double d = static_cast<double>(v);
        constexpr double lo = static_cast<double>(std::numeric_limits<To>::lowest());
        constexpr double hi = static_cast<double>(std::numeric_limits<To>::max());
        if (std::isnan(d)) return To(0);
        if (d <= lo) return std::numeric_limits<To>::lowest();
        if (d >= hi) return std::numeric_limits<To>::max();
        return static_cast<To>(d);
    }
}

using CastTypes = TypeList<float, double, std::int32_t, std::int64_t, std::uint8_t, bool>;
constexpr DTypeSet kCastDTypes{DType::f32, DType::f64, DType::i32, DType::i64, DType::u8,
                               DType::boolean};

class CastFast final : public FastKernel {
public:
    using FastKernel::FastKernel;

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const std::int64_t n = x.num_elements();
        const DType from = x.dtype, to = y.dtype;
        if (from == to && from != DType::string) {
            parallel_copy(y.raw, x.raw, x.num_bytes());
            return Status::ok();
        }
        const SimdOps& s = simd();
        const bool half_from = from == DType::f16 || from == DType::bf16;
        const bool half_to = to == DType::f16 || to == DType::bf16;
        if (half_from && to == DType::f32) {
            const auto fn = from == DType::f16 ? s.f16_to_f32 : s.bf16_to_f32;
            const auto* px = static_cast<const std::uint16_t*>(x.raw);
            float* py = y.data_unchecked<float>();
            parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) { fn(px + b, py + b, e - b); });
            return Status::ok();
        }
        if (from == DType::f32 && half_to) {
            const auto fn = to == DType::f16 ? s.f32_to_f16 : s.f32_to_bf16;
            const float* px = x.data_unchecked<float>();
            auto* py = static_cast<std::uint16_t*>(y.raw);
            parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) { fn(px + b, py + b, e - b); });
            return Status::ok();
        }
        if (!kCastDTypes.contains(from) || !kCastDTypes.contains(to)) return fallback_run(ctx);
        return dispatch_types(from, CastTypes{}, [&]<class From>() {
            return dispatch_types(to, CastTypes{}, [&]<class To>() {
                const From* px = x.data_unchecked<From>();
                To* py = y.data_unchecked<To>();
                parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
                    for (std::int64_t i = b; i < e; ++i) py[i] = convert<To>(px[i]);
                });
                return Status::ok();
            });
        });
    }
};

}  // namespace

void register_fast_cast_kernels(KernelRegistry& r) {
    const DTypeSet types{DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32,
                         DType::i64, DType::u8,  DType::boolean};
    r.add({"Cast", "", 1, kMaxOpset, DeviceKind::cpu, types}, &make_with_fallback<CastFast>,
          kPriorityCpu, "cpu");
    r.add({"CastLike", "", 15, kMaxOpset, DeviceKind::cpu, types}, &make_with_fallback<CastFast>,
          kPriorityCpu, "cpu");
}

}  // namespace dsinfer::detail::fast
