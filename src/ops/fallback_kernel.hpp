// The base of every backend kernel that wraps the next backend's kernel for its node (its
// "fallback": KernelCreateContext::create_fallback, the kernel the next backend would have
// chosen, often the reference kernel). The fallback's prepare validates the node's inputs and
// defines its outputs, so a backend kernel shares one set of shape semantics and error messages
// with the reference by construction; shape classes (dtypes, forms) the backend kernel does not
// take run on the fallback.
//
// Used by dsinfer's fast CPU kernels (fast::FastKernel, src/cpu/fast/fast_common.hpp, and the
// packed GEMM's kernel, src/cpu/fast/fast_matmul.cpp), the oneDNN kernels (onednn::FallbackKernel,
// src/onednn/onednn_common.hpp: adds the run on blocked-layout tensors and on released weights)
// and the CUDA kernels (cuda::CudaKernel, cuda/cuda_common.hpp: drops the fallback's CPU
// workspace). Their factories create them with make_with_fallback, or, when they read attributes
// the fallback validates, call ctx.create_fallback() first and construct the kernel after.
//
// Internal (namespace dsinfer::detail); includes only the vocabulary (src/ops/ is a room whose
// headers every backend includes: tests/arch/check_includes.cmake).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "dsinfer/kernel.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

/// A kernel that owns its node's fallback kernel. prepare is the fallback's unless a subclass
/// overrides it (an override usually calls prepare_fallback first, then adds its workspace).
class FallbackKernelBase : public Kernel {
public:
    explicit FallbackKernelBase(std::unique_ptr<Kernel> fallback)
        : fallback_(std::move(fallback)) {}

    /// The fallback's: validation, output dtypes and shapes, its workspace.
    Status prepare(PrepareContext& ctx) const override { return prepare_fallback(ctx); }

protected:
    /// fallback.prepare(ctx).
    Status prepare_fallback(PrepareContext& ctx) const { return fallback_->prepare(ctx); }
    /// fallback.run(ctx), on this run's tensors, workspace and prepared state as they are.
    Status fallback_run(RunContext& ctx) const noexcept { return fallback_->run(ctx); }
    const Kernel& fallback() const noexcept { return *fallback_; }
    /// The fallback's Kernel::algorithm for `ctx`, or `provider` (the fallback's provider, as
    /// the subclass knows it: "reference", "cpu") when it names none. For algorithm()
    /// overrides of subclasses that hand this shape class to the fallback.
    std::string fallback_algorithm(const PrepareContext& ctx, const char* provider) const {
        std::string a = fallback_->algorithm(ctx);
        return a.empty() ? std::string(provider) : a;
    }

private:
    std::unique_ptr<Kernel> fallback_;
};

/// The factory step of a FallbackKernelBase subclass K: creates the node's fallback first (so a
/// bad node fails with the fallback's error, e.g. the reference kernel's invalid_model), then
/// K(fallback, args...). With no args, &make_with_fallback<K> is itself a KernelFactory.
template <class K, class... Args>
StatusOr<std::unique_ptr<Kernel>> make_with_fallback(const KernelCreateContext& ctx,
                                                     Args&&... args) {
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fallback, ctx.create_fallback());
    return std::unique_ptr<Kernel>(
        std::make_unique<K>(std::move(fallback), std::forward<Args>(args)...));
}

}  // namespace dsinfer::detail
