// The core library's side of the CUDA backend: cuda_backend(N) (the "cuda:N" Backend the engine
// uses for EngineOptions::device) and the public functions of dsinfer/backends/cuda.hpp.
//
// One code path for every build: what differs is only whether there is a plugin to open.
// A build without CUDA has none: the cuda backend is unsupported (naming the configure
// option) and there are no devices.
//
// A build with CUDA: the backend is the plugin libdsinfer_cuda.so (cuda/, src/core/cuda_plugin.hpp),
// opened with dlopen on the first request for a CUDA device and kept for the life of the
// process (never closed: its kernels and runtimes stay referenced). Where it is looked for, in
// order:
//   1. $DSINFER_CUDA_PLUGIN, when set (a file path; nothing else is tried);
//   2. the directory of the object holding this code (libdsinfer.so, or the executable when
//      dsinfer is linked statically), then DSINFER_CUDA_PLUGIN_RELDIR relative to it (../lib:
//      bin/ and lib/ of an install prefix, tests/ and lib/ of the build tree);
//   3. the plain file name through the dynamic loader's search path (the caller's RUNPATH,
//      which linking dsinfer::cuda sets, LD_LIBRARY_PATH, ld.so.cache).
// A plugin that is missing, fails to load (a CUDA library it needs is missing) or comes from
// another build makes the cuda backend unavailable with a message naming the files tried and
// dlerror(). CPU engines never get here.
#include <string>

#include "core/cuda_plugin.hpp"
#include "core/device_runtime.hpp"
#include "dsinfer/backends/cuda.hpp"
#include "dsinfer/config.hpp"

#if DSINFER_WITH_CUDA
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#ifndef DSINFER_CUDA_PLUGIN_NAME
#define DSINFER_CUDA_PLUGIN_NAME "libdsinfer_cuda.so"
#endif
#ifndef DSINFER_CUDA_PLUGIN_RELDIR
#define DSINFER_CUDA_PLUGIN_RELDIR "../lib"
#endif
#endif  // DSINFER_WITH_CUDA

namespace dsinfer::detail {

namespace {

struct LoadedPlugin {
    const CudaPluginTable* table = nullptr;
    Status error;  // why table is null
};

#if DSINFER_WITH_CUDA

/// The directory of the object (shared library or executable) that holds this function.
std::string own_directory() {
    Dl_info info{};
    link_map* map = nullptr;
    std::string file;
    if (dladdr1(reinterpret_cast<void*>(&own_directory), &info, reinterpret_cast<void**>(&map),
                RTLD_DL_LINKMAP) != 0 &&
        map != nullptr && map->l_name != nullptr && map->l_name[0] != '\0') {
        file = map->l_name;
    } else {
        // The main program (dsinfer linked statically): its link_map has no name.
        std::vector<char> buf(4096);
        const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
        if (n > 0) file.assign(buf.data(), static_cast<std::size_t>(n));
        else if (info.dli_fname != nullptr) file = info.dli_fname;
    }
    const auto slash = file.rfind('/');
    if (slash == std::string::npos) return {};
    return file.substr(0, slash == 0 ? 1 : slash);
}

/// Opens `path` and checks the table; on failure appends "path: why" to `errors`.
const CudaPluginTable* try_open(const std::string& path, std::string& errors) {
    auto note = [&](const std::string& why) {
        errors += (errors.empty() ? "" : "; ") + path + ": " + why;
    };
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* e = ::dlerror();
        const std::string why = e != nullptr ? e : "dlopen failed";
        // dlerror() usually starts with the file name already.
        if (why.rfind(path + ": ", 0) == 0) errors += (errors.empty() ? "" : "; ") + why;
        else note(why);
        return nullptr;
    }
    void* sym = ::dlsym(handle, kCudaPluginEntry);
    if (sym == nullptr) {
        note(std::string("no symbol ") + kCudaPluginEntry + " (not a dsinfer CUDA plugin)");
        ::dlclose(handle);
        return nullptr;
    }
    CudaPluginEntryFn entry = nullptr;
    static_assert(sizeof(entry) == sizeof(sym));
    std::memcpy(&entry, &sym, sizeof(entry));
    const CudaPluginTable* t = entry();
    if (t == nullptr || t->abi != kCudaPluginAbi || t->table_size != sizeof(CudaPluginTable) ||
        t->dsinfer_version == nullptr ||
        std::strcmp(t->dsinfer_version, DSINFER_VERSION_STRING) != 0 ||
        t->layout != cuda_plugin_layout()) {
        note(std::string("built for another dsinfer (plugin ") +
             (t != nullptr && t->dsinfer_version != nullptr ? t->dsinfer_version : "?") +
             " abi " + std::to_string(t != nullptr ? t->abi : 0) + ", this library " +
             DSINFER_VERSION_STRING + " abi " + std::to_string(kCudaPluginAbi) +
             "): use the plugin installed with this library");
        ::dlclose(handle);
        return nullptr;
    }
    return t;  // never closed
}

LoadedPlugin load_plugin() {
    LoadedPlugin p;
    std::string errors;
    const auto fail = [&p](std::string why) {
        p.error = Status(ErrorCode::unavailable, why);
        return p;
    };
    if (const char* env = std::getenv("DSINFER_CUDA_PLUGIN"); env != nullptr && env[0] != '\0') {
        p.table = try_open(env, errors);
        if (p.table != nullptr) return p;
        return fail("the CUDA plugin set by DSINFER_CUDA_PLUGIN could not be loaded: " + errors);
    }
    std::vector<std::string> candidates;
    if (const std::string dir = own_directory(); !dir.empty()) {
        candidates.push_back(dir + "/" + DSINFER_CUDA_PLUGIN_NAME);
        candidates.push_back(dir + "/" + DSINFER_CUDA_PLUGIN_RELDIR + "/" + DSINFER_CUDA_PLUGIN_NAME);
    }
    for (const auto& c : candidates) {
        // A file that is not there is noted without dlopen's wording; one that is there but
        // does not load (a CUDA library it needs is missing) stops the search: its error is
        // the one that matters.
        if (::access(c.c_str(), F_OK) != 0) {
            errors += (errors.empty() ? "" : "; ") + c + ": no such file";
            continue;
        }
        p.table = try_open(c, errors);
        if (p.table != nullptr) return p;
        return fail("the CUDA plugin could not be loaded: " + errors);
    }
    p.table = try_open(DSINFER_CUDA_PLUGIN_NAME, errors);
    if (p.table != nullptr) return p;
    return fail(std::string("the CUDA plugin " DSINFER_CUDA_PLUGIN_NAME
                            " could not be loaded (install it next to libdsinfer, link "
                            "dsinfer::cuda, or set DSINFER_CUDA_PLUGIN): ") +
                errors);
}

#else  // no CUDA in this build: there is no plugin to open

LoadedPlugin load_plugin() {
    return LoadedPlugin{nullptr,
                        Status(ErrorCode::unsupported,
                               "this build has no CUDA backend (configure with "
                               "-DDSINFER_WITH_CUDA=ON where a CUDA toolkit is installed)")};
}

#endif  // DSINFER_WITH_CUDA

const LoadedPlugin& plugin() {
    static const LoadedPlugin p = load_plugin();  // once per process, thread-safe
    return p;
}

/// "cuda:N": device N of the plugin. Holds nothing but the index: the plugin keeps the
/// device runtimes (one per device and process).
class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int index)
        : Backend("cuda:" + std::to_string(index), Device{DeviceKind::cuda, index},
                  kPriorityCuda, "cuda"),
          index_(index) {}

    Status availability() const override {
        const LoadedPlugin& p = plugin();
        if (p.table == nullptr) return p.error;
        const int n = p.table->device_count();
        if (n == 0) return Status(ErrorCode::unavailable, p.table->status());
        if (index_ < 0 || index_ >= n)
            return Status::error(ErrorCode::unavailable, "no CUDA device ", index_,
                                 ": this machine has ", n, " device(s)");
        return Status::ok();
    }

    Status register_kernels(KernelRegistry& registry) const override {
        DSINFER_RETURN_IF_ERROR(availability());
        plugin().table->register_cuda_backend(registry);
        return Status::ok();
    }

    StatusOr<std::shared_ptr<DeviceRuntime>> device_runtime() const override {
        const LoadedPlugin& p = plugin();
        if (p.table == nullptr) return p.error;
        return p.table->cuda_runtime(index_);  // checks the index and the device's health
    }

private:
    int index_;
};

}  // namespace

}  // namespace dsinfer::detail

namespace dsinfer {

int cuda_device_count() noexcept {
    try {
        const auto& p = detail::plugin();
        return p.table != nullptr ? p.table->device_count() : 0;
    } catch (...) {
        return 0;
    }
}

std::string cuda_status() {
    const auto& p = detail::plugin();
    if (p.table == nullptr) return "no CUDA device: " + p.error.message();
    return p.table->status();
}

bool cuda_set_memory_limit(int device, std::size_t bytes) {
    const auto& p = detail::plugin();
    return p.table != nullptr && p.table->set_memory_limit(device, bytes);
}

MemoryPoolStats cuda_memory_stats(int device) {
    const auto& p = detail::plugin();
    return p.table != nullptr ? p.table->memory_stats(device) : MemoryPoolStats{};
}

std::size_t cuda_trim(int device) {
    const auto& p = detail::plugin();
    return p.table != nullptr ? p.table->trim(device) : 0;
}

std::shared_ptr<const Backend> cuda_backend(int device) {
    return std::make_shared<const detail::CudaBackend>(device);
}

}  // namespace dsinfer
