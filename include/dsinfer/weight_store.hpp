// dsinfer/weight_store.hpp — the one owner of every constant and of every form made from one.
//
// An engine holds one WeightStore. At compile the executor registers each initializer of the
// graph (its stored form, "onnx"); kernels ask the store for the form they run on: the stored
// tensor, or a form made from it (packed for a GEMM, reordered for a oneDNN primitive,
// transformed for Winograd), keyed by (constant, layout, target: the ISA level or device it is
// made for). The store builds a form once and hands the same buffer to every kernel that asks
// for the same key, so two nodes reading one weight share one packed copy.
//
// Devices. A GPU engine's copies of constants are forms too: the plain copy is the stored form
// with the device as target ("onnx", "cuda:0"), shared by the executor and the device kernels
// that read the constant as it is (detail::device_constant_form, src/core/device_runtime.hpp);
// a device kernel's own layouts and tables are packed or derived forms for that target
// ("cuda.gemm.b_transposed", ...). A device target is memory of its own (is_device_target).
//
// Ownership. The store holds the forms it owns; kernels hold shared references to what they
// use. `drop` lets go of the store's references: a form no kernel holds is freed at once, the
// others when their last holder lets go (the store still reports them, as not owned). A later
// `get` for a dropped key returns the form if it is still resident, else builds it again. When
// every reader of an initializer holds a form of its own (Kernel::released_constant_inputs),
// the executor releases the stored form the same way.
//
// Reports. `forms()` enumerates what is resident, with names, kinds, layouts, targets and bytes
// (a later deploy format writes these); `bytes()` sums them by kind.
//
// Thread safety: every member may be called concurrently. A builder runs under the store's
// lock and must not call the store.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <typeindex>
#include <vector>

#include "dsinfer/export.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"

namespace dsinfer {

/// What a form of a constant is.
enum class WeightKind : int {
    stored,   ///< the constant as the graph stores it (layout "onnx"), or a copy rebuilt as such
    packed,   ///< the same values in another layout (packed for a GEMM, reordered)
    derived,  ///< a transform of the values (e.g. Winograd's G g G^T): not the same numbers
};

DSINFER_API const char* to_string(WeightKind kind) noexcept;

/// One resident form of one constant (WeightStore::forms()).
struct WeightForm {
    std::string tensor;  ///< the constant's name in the graph ("" for one no graph named)
    WeightKind kind = WeightKind::stored;
    std::string layout;  ///< "onnx" for the stored form, else the kernel family's layout name
    std::string target;  ///< ISA level ("avx512", "avx2", "baseline") or device ("cuda:0"); "" = any
    std::uint64_t bytes = 0;
    bool owned = false;  ///< the store holds it (else only kernels do: it goes with them)
    long holders = 0;    ///< references to it besides the store's (kernels, plans)
};

/// Whether a form's target names a device (Device::to_string: "cuda:0") rather than an ISA
/// level: the form's bytes are that device's memory.
inline bool is_device_target(std::string_view target) noexcept {
    return target.find(':') != std::string_view::npos;
}

/// Resident bytes by kind (WeightStore::bytes()).
struct WeightBytes {
    std::uint64_t stored = 0;
    std::uint64_t packed = 0;
    std::uint64_t derived = 0;
};

/// What a builder returns: the form and the bytes it holds.
template <class T>
struct WeightBuild {
    std::shared_ptr<const T> value;
    std::uint64_t bytes = 0;
};

class DSINFER_API WeightStore {
public:
    /// A constant known to the store (WeightStore::source): what kernels key their forms by.
    struct Source {
        std::uint64_t id = 0;  ///< 0: none
        explicit operator bool() const noexcept { return id != 0; }
    };

    WeightStore();
    ~WeightStore();
    WeightStore(const WeightStore&) = delete;
    WeightStore& operator=(const WeightStore&) = delete;

    // The engine's side.
    /// Registers constant `t` (its stored form, owned by the store) under `name`; a tensor
    /// already registered (by its data) keeps its first name.
    Source add_constant(std::string name, const Tensor& t);
    /// Lets go of the store's reference to the stored form (see the file comment).
    void release_constant(Source source);

    // The kernels' side.
    /// The constant whose data `t` holds (a kernel's constant input), registered now, unnamed
    /// and owned by the store, when the engine did not (a kernel made outside an engine).
    Source source(const Tensor& t);
    /// The stored form of `source` while it is resident (null once released and let go).
    std::shared_ptr<const Tensor> constant(Source source) const;
    /// The form (kind, layout, target) of `source`: the resident one, else what `build`
    /// returns (a callable returning StatusOr<WeightBuild<T>>), which the store then owns
    /// (or, with `own` false, only reports while its holders keep it). Fails with internal
    /// when the key exists with another type, and with build's error.
    template <class T, class Build>
    StatusOr<std::shared_ptr<const T>> get(Source source, WeightKind kind, std::string_view layout,
                                           std::string_view target, Build&& build,
                                           bool own = true) {
        auto erased = get_erased(source, kind, layout, target, std::type_index(typeid(T)), own,
                                 [&]() -> StatusOr<Erased> {
                                     StatusOr<WeightBuild<T>> b = build();
                                     if (!b.is_ok()) return b.status();
                                     WeightBuild<T> v = std::move(b).value();
                                     return Erased{std::move(v.value), v.bytes};
                                 });
        if (!erased.is_ok()) return erased.status();
        return std::static_pointer_cast<const T>(std::move(erased).value());
    }

    // Reports and control.
    /// Every resident form, in registration order.
    std::vector<WeightForm> forms() const;
    /// Resident bytes by kind.
    WeightBytes bytes() const;
    /// The names of constants resident more than once as the same numbers in one memory
    /// (stored and packed forms: distinct buffers on the host, or on one device); derived
    /// forms do not count.
    std::vector<std::string> held_twice() const;
    /// Lets go of the store's references to the packed and derived forms, and the device
    /// copies of stored forms, whose layout starts with `layout_prefix` ("" = all). Returns
    /// the bytes freed now (forms no kernel held).
    std::uint64_t drop(std::string_view layout_prefix = {});

private:
    struct Erased {
        std::shared_ptr<const void> value;
        std::uint64_t bytes = 0;
    };
    StatusOr<std::shared_ptr<const void>> get_erased(Source source, WeightKind kind,
                                                     std::string_view layout,
                                                     std::string_view target,
                                                     std::type_index type, bool own,
                                                     const std::function<StatusOr<Erased>()>& build);
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer
