// dsinfer/kernel_registry.hpp — which kernel implements which op.
//
// Purpose: a registry keyed by (op type, domain, opset range, device) with a priority, resolved
// by ordered preference (higher priority first) with fall-through. Backends register their
// kernels explicitly (register_cpu_kernels(registry)); there is no static self-registration.
//
// Ownership/threading: fill a registry from one thread, then share it read-only; find() is
// thread-safe once no more add() calls happen.
//
// Usage:
//   dsinfer::KernelRegistry r;
//   r.add({"Relu", "", 6, dsinfer::kMaxOpset, dsinfer::DeviceKind::cpu}, &make_relu);
//   const dsinfer::KernelEntry* e = r.find("Relu", "", 14, dsinfer::DeviceKind::cpu);
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dsinfer/kernel.hpp"

namespace dsinfer {

/// Highest opset any registration needs to name; ranges use it as "and later".
inline constexpr std::int64_t kMaxOpset = 1000;

using KernelFactory = StatusOr<std::unique_ptr<Kernel>> (*)(const KernelCreateContext&);

struct KernelKey {
    std::string op_type;
    std::string domain;  ///< "" for ai.onnx
    std::int64_t opset_min = 1;
    std::int64_t opset_max = kMaxOpset;
    DeviceKind device = DeviceKind::cpu;
    DTypeSet dtypes = DTypeSet::all();  ///< element types of input 0 this kernel accepts
};

struct KernelEntry {
    KernelKey key;
    KernelFactory factory = nullptr;
    int priority = 0;
    std::string provider;  ///< "reference", "onednn", "cuda" (for reports)
};

class KernelRegistry {
public:
    void add(KernelKey key, KernelFactory factory, int priority = 0,
             std::string provider = "reference") {
        if (key.domain == "ai.onnx") key.domain.clear();
        // Kept in registration order (find_all orders its matches): sorting the whole list on
        // every add made building an engine's registry quadratic (~80% of a small model's
        // compile time).
        entries_.push_back(KernelEntry{std::move(key), factory, priority, std::move(provider)});
    }
    /// All entries for (op, domain, opset, device), best first (highest priority; equal
    /// priorities in registration order). `dtype` filters when known.
    std::vector<const KernelEntry*> find_all(std::string_view op_type, std::string_view domain,
                                             std::int64_t opset, DeviceKind device,
                                             std::optional<DType> dtype = std::nullopt) const {
        if (domain == "ai.onnx") domain = "";
        std::vector<const KernelEntry*> out;
        for (const auto& e : entries_) {
            if (e.key.op_type == op_type && e.key.domain == domain && e.key.device == device &&
                opset >= e.key.opset_min && opset <= e.key.opset_max &&
                (!dtype || e.key.dtypes.contains(*dtype)))
                out.push_back(&e);
        }
        std::stable_sort(out.begin(), out.end(), [](const KernelEntry* a, const KernelEntry* b) {
            return a->priority > b->priority;
        });
        return out;
    }
    const KernelEntry* find(std::string_view op_type, std::string_view domain,
                            std::int64_t opset, DeviceKind device,
                            std::optional<DType> dtype = std::nullopt) const {
        auto all = find_all(op_type, domain, opset, device, dtype);
        return all.empty() ? nullptr : all.front();
    }
    /// True if any opset/device registers the op (to tell "unknown op" from "unsupported opset").
    bool knows(std::string_view op_type, std::string_view domain) const {
        if (domain == "ai.onnx") domain = "";
        return std::any_of(entries_.begin(), entries_.end(), [&](const KernelEntry& e) {
            return e.key.op_type == op_type && e.key.domain == domain;
        });
    }
    /// Every entry, in registration order.
    const std::vector<KernelEntry>& entries() const noexcept { return entries_; }

private:
    std::vector<KernelEntry> entries_;
};

/// Registration priorities of the CPU backends (higher wins; fall-through goes down).
inline constexpr int kPriorityReference = 0;
inline constexpr int kPriorityCpu = 10;
inline constexpr int kPriorityOnednn = 20;

/// Registers the reference CPU kernels only (src/cpu/reference): plain, single-threaded,
/// the numerical reference every other backend is checked against.
void register_reference_kernels(KernelRegistry& registry);
/// Registers dsinfer's optimized CPU kernels (src/cpu/fast, vectorized and multithreaded)
/// and, below them, the reference kernels.
void register_cpu_kernels(KernelRegistry& registry);

}  // namespace dsinfer
