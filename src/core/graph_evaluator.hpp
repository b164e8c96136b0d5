// The engine room's GraphEvaluator (dsinfer/passes.hpp): the passes' shape inference and node
// evaluation, answered by the executor over a kernel registry. kernel_evaluator() is this over
// dsinfer's reference kernels; the passes see only the interface and link no kernel.
//
// Ownership/threading: holds a reference to a registry that must outlive it; const and
// stateless, so one evaluator serves any number of optimizations at once.
#pragma once

#include "dsinfer/kernel_registry.hpp"
#include "dsinfer/passes.hpp"

namespace dsinfer::detail {

class KernelEvaluator final : public GraphEvaluator {
public:
    explicit KernelEvaluator(const KernelRegistry& registry) noexcept : registry_(registry) {}

    /// The executor's load-time inference (symbolic-dim probes) on a copy of `graph`; inferred
    /// dtypes and shapes are copied back where `graph` lacks them. A graph that does not compile
    /// stays as it was (ok): the engine's own compile reports the error.
    Status infer_shapes(Graph& graph) const override;
    /// A one-node Graph (inputs as initializers) compiled and run; output sizes come from the
    /// kernel's prepare, checked against `max_output_bytes` before anything is computed.
    StatusOr<std::vector<Tensor>> evaluate(const Node& node, const std::vector<Tensor>& inputs,
                                           const std::vector<OpsetImport>& opsets,
                                           std::uint64_t max_output_bytes) const override;

private:
    const KernelRegistry& registry_;
};

}  // namespace dsinfer::detail
