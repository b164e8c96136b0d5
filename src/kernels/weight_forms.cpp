// The weight-store forms of dsinfer's own compute kernels (weight_forms.hpp).
#include "kernels/weight_forms.hpp"

#include <string>

#include "kernels/qconv.hpp"
#include "kernels/qgemm.hpp"
#include "runtime/fnv.hpp"

namespace dsinfer::detail {

namespace {

/// A layout name with its half-width suffix (".f16", ".bf16"; none for f32).
std::string with_width(const char* layout, DType dtype) {
    std::string name = layout;
    if (dtype == DType::f16) name += ".f16";
    if (dtype == DType::bf16) name += ".bf16";
    return name;
}

/// The target of a B packed for sgemm at the active ISA as `dtype` (what packed_b_target
/// will say of it).
std::string sgemm_target(DType dtype) {
    const fast::Isa isa = sgemm_isa();
    return dtype == DType::bf16 && sgemm_bf16_dot(isa) ? "avx512_bf16" : fast::isa_name(isa);
}

}  // namespace

StatusOr<std::shared_ptr<const PackedB>> packed_b_form(WeightStore& store, WeightStore::Source source,
                                                       const float* b, std::int64_t k,
                                                       std::int64_t n, bool transposed,
                                                       DType dtype) {
    const fast::Isa isa = sgemm_isa();
    return store.get<PackedB>(source, WeightKind::packed,
                              with_width(transposed ? "sgemm.packed_b.trans" : "sgemm.packed_b",
                                         dtype),
                              sgemm_target(dtype), [&]() -> StatusOr<WeightBuild<PackedB>> {
                                  auto p = std::make_shared<const PackedB>(
                                      pack_b(b, k, n, transposed, isa, dtype));
                                  return WeightBuild<PackedB>{p, p->bytes()};
                              });
}

StatusOr<std::shared_ptr<const PackedB>> conv_gemm_form(WeightStore& store, WeightStore::Source source,
                                                        const float* oihw, const ConvGemmShape& s) {
    return store.get<PackedB>(source, WeightKind::packed, "conv_gemm.packed_w",
                              fast::isa_name(sgemm_isa()), [&]() -> StatusOr<WeightBuild<PackedB>> {
                                  if (oihw == nullptr)
                                      return Status(ErrorCode::internal,
                                                    "conv weights gone before they were packed");
                                  auto p = std::make_shared<const PackedB>(
                                      pack_conv_gemm_weights(oihw, s));
                                  return WeightBuild<PackedB>{p, p->bytes()};
                              });
}

StatusOr<std::shared_ptr<const WinogradWeights>> winograd_form(
    WeightStore& store, WeightStore::Source source, const std::shared_ptr<const Tensor>& oihw,
    const ConvGemmShape& s) {
    return store.get<WinogradWeights>(
        source, WeightKind::derived, "winograd_f4x3.u", fast::isa_name(sgemm_isa()),
        [&]() -> StatusOr<WeightBuild<WinogradWeights>> {
            if (!oihw || oihw->raw_data() == nullptr)
                return Status(ErrorCode::internal, "conv weights gone before their Winograd transform");
            auto w = std::make_shared<const WinogradWeights>(pack_winograd_weights(
                std::shared_ptr<const float>(oihw, oihw->data_unchecked<float>()), s));
            std::uint64_t bytes = 0;
            for (const PackedB& u : w->u) bytes += u.bytes();
            return WeightBuild<WinogradWeights>{w, bytes};
        });
}

StatusOr<std::shared_ptr<const PackedQB>> packed_qb_form(WeightStore& store,
                                                         WeightStore::Source source,
                                                         const void* b, bool b_unsigned,
                                                         std::int64_t k, std::int64_t n,
                                                         bool transposed) {
    const QIsa isa = qgemm_isa();
    return store.get<PackedQB>(source, WeightKind::packed,
                               transposed ? "qgemm.packed_b.trans" : "qgemm.packed_b",
                               qisa_name(isa), [&]() -> StatusOr<WeightBuild<PackedQB>> {
                                   auto p = std::make_shared<const PackedQB>(
                                       pack_qb(b, b_unsigned, k, n, transposed, isa));
                                   return WeightBuild<PackedQB>{p, p->bytes()};
                               });
}

StatusOr<std::shared_ptr<const PackedQConvW>> packed_qconv_form(
    WeightStore& store, WeightStore::Source source, const void* w, bool w_unsigned,
    const QConvShape& s, bool a7, bool winograd, const std::int32_t* w_zero) {
    const QIsa isa = qgemm_isa();
    std::string layout = (s.group == 1 ? std::string("qconv.packed_w")
                                       : "qconv.packed_w.g" + std::to_string(s.group)) +
                         (a7 ? ".a7" : "") + (winograd ? ".wino" : "");
    if (winograd && w_zero != nullptr) {  // the form holds w minus these: one form per set
        std::uint64_t h = kFnvOffset;
        for (std::int64_t o = 0; o < s.m; ++o)
            fnv_mix(h, static_cast<std::uint64_t>(static_cast<std::int64_t>(w_zero[o])));
        layout += ".z" + std::to_string(h);
    }
    return store.get<PackedQConvW>(source, WeightKind::packed, layout, qisa_name(isa),
                                   [&]() -> StatusOr<WeightBuild<PackedQConvW>> {
                                       if (w == nullptr)
                                           return Status(ErrorCode::internal,
                                                         "conv weights gone before they were packed");
                                       auto p =
                                           std::make_shared<const PackedQConvW>(pack_qconv_weights(
                                               w, w_unsigned, s, isa, a7, winograd, w_zero));
                                       return WeightBuild<PackedQConvW>{p, p->bytes()};
                                   });
}

}  // namespace dsinfer::detail
