// WeightPacker (src/onednn/onednn_common.hpp): packed weights held once, in the weight store. A
// kernel that owns its weights lets the stored tensor go after the first packed copy; later layouts are reordered
// from that copy, and plain() gives the stored layout back (for fallback kernels), bitwise.
#include <catch2/catch.hpp>

#include <dsinfer/config.hpp>

#if DSINFER_WITH_ONEDNN
#include <dnnl.hpp>

#include <cstring>
#include <memory>
#include <vector>

#include "onednn/onednn_common.hpp"

namespace {

using dsinfer::DType;
using dsinfer::Shape;
using dsinfer::Tensor;
namespace on = dsinfer::detail::onednn;

Tensor conv_weights() {  // [OC 16, IC 8, 3, 3], distinct values
    std::vector<float> v(16 * 8 * 3 * 3);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.25f - 100.f;
    return Tensor::from_vector<float>({16, 8, 3, 3}, v);
}

std::vector<float> bytes_of(const dnnl::memory& m) {
    std::vector<float> out(m.get_desc().get_size() / sizeof(float));
    std::memcpy(out.data(), m.get_data_handle(), out.size() * sizeof(float));
    return out;
}

std::vector<float> values_of(const Tensor& t) {
    return {t.data<float>(), t.data<float>() + t.num_elements()};
}

/// A packer on its own store; with `drop_original` the store lets go of the stored form as the
/// executor does for a constant whose every reader holds a form of its own.
std::unique_ptr<on::WeightPacker> packer(const Tensor& w, bool drop_original) {
    auto store = std::make_shared<dsinfer::WeightStore>();
    auto p = std::make_unique<on::WeightPacker>(store, w, drop_original);
    if (drop_original) store->release_constant(store->source(w));
    return p;
}

dnnl::memory::desc blocked_md() {
    return {{16, 8, 3, 3}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::OIhw8i8o};
}

}  // namespace

TEST_CASE("WeightPacker drops the stored weights after the first pack and restores them bitwise",
          "[onednn]") {
    const Tensor w = conv_weights();
    const std::vector<float> original = values_of(w);
    const dnnl::memory::desc have = on::rowmajor_md({16, 8, 3, 3}), blocked = blocked_md();
    const dnnl::memory::desc other({16, 8, 3, 3}, dnnl::memory::data_type::f32,
                                   dnnl::memory::format_tag::Ohwi8o);
    auto keep = packer(w.clone(), /*drop_original=*/false);
    auto drop = packer(w.clone(), /*drop_original=*/true);

    // The first layout: same bytes either way.
    const auto a_keep = keep->get(have, blocked);
    const auto a_drop = drop->get(have, blocked);
    CHECK(bytes_of(*a_keep) == bytes_of(*a_drop));
    CHECK(drop->get(have, blocked) == a_drop);  // cached, not repacked

    // A second layout, reordered from the packed copy once the original is gone.
    CHECK(bytes_of(*keep->get(have, other)) == bytes_of(*drop->get(have, other)));

    // The stored layout again: the held tensor, or a copy rebuilt from the packed one.
    auto p_keep = keep->plain(have);
    auto p_drop = drop->plain(have);
    REQUIRE(p_keep.is_ok());
    REQUIRE(p_drop.is_ok());
    REQUIRE(p_drop.value()->num_bytes() == original.size() * sizeof(float));
    CHECK(std::memcmp(p_drop.value()->raw_data(), original.data(), p_drop.value()->num_bytes()) == 0);
    CHECK(std::memcmp(p_keep.value()->raw_data(), original.data(), p_keep.value()->num_bytes()) == 0);
    CHECK(drop->plain(have).value()->raw_data() == p_drop.value()->raw_data());  // made once
    // And the stored layout as a primitive's choice: a copy, not an alias of freed memory.
    CHECK(bytes_of(*drop->get(have, have)) == original);
}

TEST_CASE("WeightPacker lets the stored weights go to an owner that can rebuild them",
          "[onednn]") {
    // The im2col GEMM convolution holds its own packed copy: drop_original() frees the stored
    // tensor, and plain() / get() rebuild it through the owner's restore function.
    const Tensor w = conv_weights();
    const std::vector<float> original = values_of(w);
    const dnnl::memory::desc have = on::rowmajor_md({16, 8, 3, 3}), blocked = blocked_md();
    int restores = 0;
    auto restore = [&]() -> dsinfer::StatusOr<Tensor> {
        ++restores;
        return Tensor::from_vector<float>({16, 8, 3, 3}, original);
    };
    auto keep = packer(w.clone(), /*drop_original=*/false);
    keep->drop_original(restore);  // not the owner: keeps them
    auto p_keep = keep->plain(have);
    REQUIRE(p_keep.is_ok());
    CHECK(std::memcmp(p_keep.value()->raw_data(), original.data(), p_keep.value()->num_bytes()) == 0);

    auto drop = packer(w.clone(), /*drop_original=*/true);
    drop->drop_original(restore);
    CHECK(restores == 0);
    auto p = drop->plain(have);
    REQUIRE(p.is_ok());
    CHECK(restores == 1);  // the stored tensor was gone
    CHECK(std::memcmp(p.value()->raw_data(), original.data(), p.value()->num_bytes()) == 0);
    // A primitive's layout, reordered from the rebuilt tensor, equals the one from the original.
    CHECK(bytes_of(*drop->get(have, blocked)) == bytes_of(*keep->get(have, blocked)));
}

TEST_CASE("WeightPacker keeps weights a primitive reads in place", "[onednn]") {
    const Tensor w = conv_weights();
    const dnnl::memory::desc have = on::rowmajor_md({16, 8, 3, 3});
    const dnnl::memory::desc blocked({16, 8, 3, 3}, dnnl::memory::data_type::f32,
                                     dnnl::memory::format_tag::OIhw8i8o);
    auto drop = packer(w, /*drop_original=*/true);
    const auto same = drop->get(have, have);  // aliases the stored tensor
    CHECK(same->get_data_handle() == w.raw_data());
    (void)drop->get(have, blocked);  // must not let the aliased tensor go
    auto p = drop->plain(have);
    REQUIRE(p.is_ok());
    CHECK(p.value()->raw_data() == w.raw_data());
}
#endif
