// dsinfer/detail/kernel_internals.hpp — the executor's side of the kernel API.
//
// Purpose: what the executor and dsinfer's own control-flow kernels use, and an application
// writing a kernel does not: the subgraph runner (If/Loop/Scan bodies), the executor's side of
// the kernel contexts (ContextAccess) and the run-path test hook. Not a stable interface: it may change with the executor. An application includes
// dsinfer/kernel.hpp and dsinfer/kernel_registry.hpp only.
//
// kernel.hpp includes this header (the control-flow kernels and the executor still reach it
// through kernel.hpp); its names live in dsinfer::detail.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
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

/// The executor's side of PrepareContext and RunContext (and of dsinfer's own kernels that
/// prepare or run another kernel on a context of their own): what an application's kernel
/// never needs, so it is not part of the contexts' public interface.
struct ContextAccess {
    // PrepareContext
    /// The inputs, to take back after prepare (no copy).
    static std::vector<Tensor>& inputs(PrepareContext& c) noexcept { return c.inputs_; }
    /// Whether prepare asked has_data() of input i (inputs from 63 on share one bit: true for
    /// each of them when it asked of any). The executor skips prepare on planned runs only for
    /// nodes that asked about no input whose values can change within a shape class
    /// (docs/ARCHITECTURE.md).
    static bool data_queried(const PrepareContext& c, std::size_t i) noexcept {
        return ((c.data_queried_ >> (i < 63 ? i : 63)) & 1u) != 0;
    }
    /// What prepare passed to set_state.
    static const std::shared_ptr<const void>& state(const PrepareContext& c) noexcept {
        return c.state_;
    }
    static void set_transient_shape(PrepareContext& c, bool transient) noexcept {
        c.transient_shape_ = transient;
    }
    // RunContext
    static void set_frame(RunContext& c, const void* frame) noexcept { c.frame_ = frame; }
    static void set_stream(RunContext& c, void* stream) noexcept { c.stream_ = stream; }
    static void set_prepared_state(RunContext& c, const void* state) noexcept {
        c.prepared_state_ = state;
    }
    static void set_device_error_slots(RunContext& c, std::int64_t* slots) noexcept {
        c.device_error_ = slots;
    }
    /// The tensor allocated by allocate_output/set_output_tensor (or null).
    static Tensor& dynamic_output(RunContext& c, int i) noexcept {
        return c.dynamic_[static_cast<std::size_t>(i)];
    }
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
