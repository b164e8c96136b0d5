// dsinfer/detail/kernel_internals.hpp — the executor's side of the kernel API.
//
// Purpose: what the executor and dsinfer's own control-flow kernels use, and an application
// writing a kernel does not: the subgraph runner (If/Loop/Scan bodies) and the run-path test
// hook. Not a stable interface: it may change with the executor. An application includes
// dsinfer/kernel.hpp and dsinfer/kernel_registry.hpp only.
//
// kernel.hpp includes this header (the control-flow kernels and the executor still reach it
// through kernel.hpp); its names live in dsinfer::detail.
#pragma once

#include <atomic>
#include <vector>

#include "dsinfer/graph.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"

namespace dsinfer::detail {

/// Runs a compiled subgraph (If/Loop/Scan bodies). Implemented by the executor; a control-flow
/// kernel gets one from KernelCreateContext::compile_subgraph.
class SubgraphRunner {
public:
    virtual ~SubgraphRunner() = default;
    /// Number of formal inputs/outputs of the subgraph.
    virtual int num_inputs() const noexcept = 0;
    virtual int num_outputs() const noexcept = 0;
    /// Runs the body with `inputs` bound to its formal inputs. `outer_frame` resolves captured
    /// outer-scope names (pass RunContext::frame() of the enclosing kernel's run). Fills
    /// `outputs` (shared buffers, safe to keep).
    virtual Status run(const std::vector<Tensor>& inputs, const void* outer_frame,
                       const RunControl& control, std::vector<Tensor>& outputs) const = 0;
};

/// TESTING HOOK (tests/fault/: allocations on the run path): when set, the executor calls it
/// on the running thread right before (`begin` true) and after each kernel's run(). Never set
/// it in production; unset, the cost is one relaxed atomic load per node.
using KernelRunHook = void (*)(const Node& node, bool begin) noexcept;
inline std::atomic<KernelRunHook> kernel_run_hook{nullptr};

}  // namespace dsinfer::detail

namespace dsinfer::testing {
// The names the executor and tests/fault/ use today (dsinfer::testing::kernel_run_hook).
using detail::kernel_run_hook;
using detail::KernelRunHook;
}  // namespace dsinfer::testing
