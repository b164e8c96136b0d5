// dsinfer/backend.hpp — Backend: one source of kernels (and, for a device, its runtime).
//
// Purpose: what the engine knows of a backend, behind one interface instead of name
// compares: its name (the string EngineOptions::backends and EngineOptions::device use), the
// device its kernels run on, the priority and provider name its kernels register with in a
// KernelRegistry, whether it can be used in this build and on this machine (and why not),
// and, for a device backend, the device runtime the executor needs (memory pool, streams,
// copies between host and device).
//
// Backends of this build (factories in dsinfer/backends/):
//   "onednn"     oneDNN primitives (priority kPriorityOnednn)   backends/onednn.hpp
//   "cpu"        dsinfer's optimized CPU kernels (kPriorityCpu)  backends/cpu.hpp
//   "reference"  the reference CPU kernels (kPriorityReference)  backends/cpu.hpp
//   "cuda:N"     (also "cuda" = "cuda:0") CUDA device N, priority 30, from the CUDA plugin
//                                                               backends/cuda.hpp
//
// Choosing backends stays a matter of strings: EngineOptions::backends names the host
// backends (the reference kernels always join last, as the fall-through of every node) and
// EngineOptions::device a device backend. find_backend() resolves those names exactly as the
// engine does, and available_backends() lists the names usable here, so an application can
// ask before it builds an engine; there is no way to hand the engine a Backend object of the
// application's own (its own kernels go through the kernel registry instead).
//
// Ownership/threading: Backend objects are immutable and shared (std::shared_ptr); every
// function here is thread-safe. Asking a CUDA backend anything opens the CUDA plugin (a CPU
// engine never does).
//
// Usage:
//   #include <dsinfer/backend.hpp>
//   auto b = dsinfer::find_backend("onednn");
//   if (b == nullptr) { /* unknown name */ }
//   else if (dsinfer::Status why = b->availability(); !why.is_ok()) std::puts(why.message().c_str());
//   for (const std::string& name : dsinfer::available_backends()) std::puts(name.c_str());
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsinfer/allocator.hpp"
#include "dsinfer/export.hpp"
#include "dsinfer/kernel_registry.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer {

namespace detail {
class DeviceRuntime;  // internal (the engine's executor and the CUDA plugin)
}  // namespace detail

class DSINFER_API Backend {
public:
    virtual ~Backend() = default;
    Backend(const Backend&) = delete;
    Backend& operator=(const Backend&) = delete;

    /// The name EngineOptions uses: "reference", "cpu", "onednn", "cuda:0".
    const std::string& name() const noexcept { return name_; }
    /// Where its kernels run: {cpu, 0} for the host backends, {cuda, N} for a GPU.
    Device device() const noexcept { return device_; }
    /// The priority its kernels register with (higher wins; a node falls through to the
    /// next lower kernel that takes it).
    int priority() const noexcept { return priority_; }
    /// The provider name its kernels carry (KernelEntry::provider,
    /// InferenceEngine::node_providers()).
    const std::string& provider() const noexcept { return provider_; }

    /// ok when the backend can be used here; otherwise why not: unsupported (not compiled
    /// into this build) or unavailable (this machine: no such device, the CUDA plugin
    /// missing or broken).
    virtual Status availability() const = 0;
    bool available() const { return availability().is_ok(); }

    /// Adds its own kernels to `registry` at priority() with provider(); an unavailable
    /// backend adds nothing and returns availability(). A backend registers only its own
    /// kernels: the engine adds the reference kernels below every list.
    virtual Status register_kernels(KernelRegistry& registry) const = 0;

    /// A device backend's runtime (device memory pool, pinned staging pool, streams, copies,
    /// graph capture), created on first use and shared by every engine on the device;
    /// nullptr for a host backend (host tensors come from EngineOptions::memory_pool).
    /// Errors as availability(), or device_lost.
    virtual StatusOr<std::shared_ptr<detail::DeviceRuntime>> device_runtime() const;

protected:
    Backend(std::string name, Device device, int priority, std::string provider)
        : name_(std::move(name)), device_(device), priority_(priority),
          provider_(std::move(provider)) {}

private:
    std::string name_;
    Device device_;
    int priority_;
    std::string provider_;
};

/// The backend a name means, as EngineOptions::backends and EngineOptions::device read it
/// ("onednn", "cpu", "reference", "cuda", "cuda:N" with N of at most three digits), whether or
/// not it is available; nullptr for a name no backend has.
DSINFER_API std::shared_ptr<const Backend> find_backend(std::string_view name);
/// The host backends' names, fastest first: "onednn", "cpu", "reference" (available or not).
DSINFER_API std::vector<std::string> host_backend_names();
/// The names of the backends usable here, host ones first (fastest first), then "cuda:N" for
/// every CUDA device (this opens the CUDA plugin in a build with CUDA).
DSINFER_API std::vector<std::string> available_backends();

}  // namespace dsinfer
