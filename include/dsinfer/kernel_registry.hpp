// dsinfer/kernel_registry.hpp — which kernel implements which op.
//
// Purpose: a registry keyed by (op type, domain, opset range, device, input dtype signature)
// with a priority, resolved by ordered preference (higher priority first) with fall-through.
// Backends register their kernels explicitly (register_cpu_kernels(registry)); there is no
// static self-registration. An application registers its own kernels in a registry of its own
// and passes it as EngineOptions::custom_kernels: the engine consults those entries before
// every built-in backend (examples/custom_op/).
//
// Signature: KernelKey::dtypes constrains input 0 (what every built-in registration names);
// KernelKey::input_dtypes constrains inputs by position (an fp32 x int8-weight MatMul is
// {{f32}, {i8}}), positions past its end accept any type. An input whose dtype is unknown or
// that is omitted matches every entry.
//
// Ownership/threading: fill a registry from one thread, then share it read-only; find() is
// thread-safe once no more add() calls happen.
//
// Usage:
//   dsinfer::KernelRegistry r;
//   r.add({"Relu", "", 6, dsinfer::kMaxOpset, dsinfer::DeviceKind::cpu}, &make_relu);
//   const dsinfer::KernelEntry* e = r.find("Relu", "", 14, dsinfer::DeviceKind::cpu);
//   dsinfer::KernelKey q8{"MatMul", "", 13, dsinfer::kMaxOpset};
//   q8.input_dtypes = {dsinfer::DTypeSet{dsinfer::DType::f32}, dsinfer::DTypeSet{dsinfer::DType::i8}};
//   r.add(q8, &make_matmul_f32_i8, 0, "myapp");
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
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
    /// Element types accepted per input position (input_dtypes[i] for input i; input 0 must
    /// also be in `dtypes`). Positions past the end accept any type; DTypeSet::all() says "any"
    /// for a listed position. Empty (the default): only `dtypes` constrains.
    std::vector<DTypeSet> input_dtypes{};

    /// True when input i may have element type `t` (nullopt: unknown or omitted, matches).
    bool accepts_input(std::size_t i, std::optional<DType> t) const noexcept {
        if (!t) return true;
        if (i == 0 && !dtypes.contains(*t)) return false;
        return i >= input_dtypes.size() || input_dtypes[i].contains(*t);
    }
    /// True when inputs of these element types match the signature (one per input position).
    bool accepts(std::span<const std::optional<DType>> inputs) const noexcept {
        for (std::size_t i = 0; i < inputs.size(); ++i)
            if (!accepts_input(i, inputs[i])) return false;
        return true;
    }
};

struct KernelEntry {
    KernelKey key;
    KernelFactory factory = nullptr;
    int priority = 0;
    std::string provider;  ///< "reference", "onednn", "cuda" (for reports)
};

class KernelRegistry {
public:
    /// Registers `factory` for `key`. Throws dsinfer::Error (invalid_argument) for a null
    /// factory, an empty op type, an empty opset range or an empty DTypeSet in input_dtypes
    /// (which no input could match: DTypeSet::all() means "any").
    void add(KernelKey key, KernelFactory factory, int priority = 0,
             std::string provider = "reference") {
        if (key.domain == "ai.onnx") key.domain.clear();
        const auto bad = [&](const char* what) {
            throw Error(ErrorCode::invalid_argument,
                        "KernelRegistry::add(" + (key.domain.empty() ? "" : key.domain + "::") +
                            key.op_type + "): " + what);
        };
        if (factory == nullptr) bad("null factory");
        if (key.op_type.empty()) bad("empty op type");
        if (key.opset_min > key.opset_max) bad("opset_min > opset_max");
        if (std::any_of(key.input_dtypes.begin(), key.input_dtypes.end(),
                        [](DTypeSet s) { return s.empty(); }))
            bad("an empty DTypeSet in the input signature matches nothing (DTypeSet::all() "
                "accepts any type)");
        // Kept in registration order (find_all orders its matches): sorting the whole list on
        // every add made building an engine's registry quadratic (~80% of a small model's
        // compile time).
        entries_.push_back(KernelEntry{std::move(key), factory, priority, std::move(provider)});
    }
    /// All entries for (op, domain, opset, device), best first (highest priority; equal
    /// priorities in registration order). `dtype`, input 0's type, filters when known.
    std::vector<const KernelEntry*> find_all(std::string_view op_type, std::string_view domain,
                                             std::int64_t opset, DeviceKind device,
                                             std::optional<DType> dtype = std::nullopt) const {
        return matching(op_type, domain, opset, device,
                        [&](const KernelKey& k) { return k.accepts_input(0, dtype); });
    }
    /// As above, filtered by the whole input signature (`input_dtypes[i]`: input i's type,
    /// nullopt when unknown or omitted).
    std::vector<const KernelEntry*> find_all(
        std::string_view op_type, std::string_view domain, std::int64_t opset, DeviceKind device,
        std::span<const std::optional<DType>> input_dtypes) const {
        return matching(op_type, domain, opset, device,
                        [&](const KernelKey& k) { return k.accepts(input_dtypes); });
    }
    /// The entries for `node` of `graph` (its op, domain and input dtypes as the graph knows
    /// them) at `opset` on `device`, best first: what the executor selects from.
    std::vector<const KernelEntry*> find_all(const Graph& graph, const Node& node,
                                             std::int64_t opset, DeviceKind device) const {
        return matching(node.op_type, node.domain, opset, device, [&](const KernelKey& k) {
            for (std::size_t i = 0; i < node.inputs.size(); ++i)
                if (node.inputs[i] != kNoValue &&
                    !k.accepts_input(i, graph.value(node.inputs[i]).dtype))
                    return false;
            return true;
        });
    }
    const KernelEntry* find(std::string_view op_type, std::string_view domain,
                            std::int64_t opset, DeviceKind device,
                            std::optional<DType> dtype = std::nullopt) const {
        auto all = find_all(op_type, domain, opset, device, dtype);
        return all.empty() ? nullptr : all.front();
    }
    const KernelEntry* find(std::string_view op_type, std::string_view domain,
                            std::int64_t opset, DeviceKind device,
                            std::span<const std::optional<DType>> input_dtypes) const {
        auto all = find_all(op_type, domain, opset, device, input_dtypes);
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
    template <class Accepts>
    std::vector<const KernelEntry*> matching(std::string_view op_type, std::string_view domain,
                                             std::int64_t opset, DeviceKind device,
                                             const Accepts& accepts) const {
        if (domain == "ai.onnx") domain = "";
        std::vector<const KernelEntry*> out;
        for (const auto& e : entries_) {
            if (e.key.op_type == op_type && e.key.domain == domain && e.key.device == device &&
                opset >= e.key.opset_min && opset <= e.key.opset_max && accepts(e.key))
                out.push_back(&e);
        }
        std::stable_sort(out.begin(), out.end(), [](const KernelEntry* a, const KernelEntry* b) {
            return a->priority > b->priority;
        });
        return out;
    }

    std::vector<KernelEntry> entries_;
};

/// Registration priorities of the CPU backends (higher wins; fall-through goes down).
inline constexpr int kPriorityReference = 0;
inline constexpr int kPriorityCpu = 10;
inline constexpr int kPriorityOnednn = 20;
/// The engine adds EngineOptions::custom_kernels' entries at kPriorityCustom plus their own
/// priority (clamped to ±kPriorityCustomSpan), above every built-in backend (CUDA's is 30).
inline constexpr int kPriorityCustom = 1000;
inline constexpr int kPriorityCustomSpan = 500;

/// Registers the reference CPU kernels only (src/cpu/reference): plain, single-threaded,
/// the numerical reference every other backend is checked against.
void register_reference_kernels(KernelRegistry& registry);
/// Registers dsinfer's optimized CPU kernels (src/cpu/fast, vectorized and multithreaded)
/// and, below them, the reference kernels.
void register_cpu_kernels(KernelRegistry& registry);

}  // namespace dsinfer
