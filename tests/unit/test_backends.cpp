// Backend objects (dsinfer/backend.hpp, dsinfer/backends/*.hpp): lookup by the names
// EngineOptions uses, availability and its reasons, what each backend registers (priority,
// provider), the engine's use of them (node_providers), the CUDA backend on a machine
// without a GPU, and the errors for names no backend has.
#include <catch2/catch.hpp>

#include <dsinfer/backend.hpp>
#include <dsinfer/backends/cpu.hpp>
#include <dsinfer/backends/cuda.hpp>
#include <dsinfer/backends/onednn.hpp>
#include <dsinfer/config.hpp>
#include <dsinfer/engine.hpp>

#include <algorithm>
#include <set>

#include "engine_models.hpp"

using namespace dsinfer;

namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}

/// The error compile() throws for `o` on the mini MLP (ok when it compiles).
Status compile_status(const EngineOptions& o) {
    try {
        (void)InferenceEngine::compile(test::mini_mlp(), o);
        return Status::ok();
    } catch (const Error& e) {
        return Status(e.code(), e.message());
    }
}

/// node_providers() of the mini MLP (MatMul, Add, Relu: optimization off, so nothing fuses).
std::vector<std::string> mlp_providers(std::vector<std::string> backends) {
    EngineOptions o;
    o.backends = std::move(backends);
    o.optimization_level = 0;
    const auto e = InferenceEngine::compile(test::mini_mlp(), o);
    return e.node_providers();
}

}  // namespace

TEST_CASE("backends: lookup by the names EngineOptions uses", "[backends]") {
    struct Want {
        const char* name;
        DeviceKind kind;
        int index;
        int priority;
        const char* provider;
        const char* canonical;
    };
    for (const Want& w : {Want{"onednn", DeviceKind::cpu, 0, kPriorityOnednn, "onednn", "onednn"},
                          Want{"cpu", DeviceKind::cpu, 0, kPriorityCpu, "cpu", "cpu"},
                          Want{"reference", DeviceKind::cpu, 0, kPriorityReference, "reference",
                               "reference"},
                          Want{"cuda", DeviceKind::cuda, 0, kPriorityCuda, "cuda", "cuda:0"},
                          Want{"cuda:0", DeviceKind::cuda, 0, kPriorityCuda, "cuda", "cuda:0"},
                          Want{"cuda:17", DeviceKind::cuda, 17, kPriorityCuda, "cuda", "cuda:17"},
                          Want{"cuda:999", DeviceKind::cuda, 999, kPriorityCuda, "cuda",
                               "cuda:999"}}) {
        INFO(w.name);
        const auto b = find_backend(w.name);
        REQUIRE(b != nullptr);
        CHECK(b->name() == w.canonical);
        CHECK(b->device().kind == w.kind);
        CHECK(b->device().index == w.index);
        CHECK(b->priority() == w.priority);
        CHECK(b->provider() == w.provider);
    }
    // The factories and the lookup give the same objects for the host backends.
    CHECK(find_backend("cpu") == cpu_backend());
    CHECK(find_backend("reference") == reference_backend());
    CHECK(find_backend("onednn") == onednn_backend());
    CHECK(cuda_backend(2)->name() == "cuda:2");
    // The priorities order the backends: device, oneDNN, dsinfer's fast kernels, reference.
    CHECK(kPriorityCuda > kPriorityOnednn);
    CHECK(kPriorityOnednn > kPriorityCpu);
    CHECK(kPriorityCpu > kPriorityReference);

    for (const char* bad : {"", "gpu", "CPU", "cpu ", "onednn2", "cuda:", "cuda:x", "cuda:-1",
                            "cuda:1234", "cuda0", "cuda:1x"}) {
        INFO("'" << bad << "'");
        CHECK(find_backend(bad) == nullptr);
    }
    CHECK(host_backend_names() == std::vector<std::string>{"onednn", "cpu", "reference"});
}

TEST_CASE("backends: availability and its reasons", "[backends]") {
    CHECK(cpu_backend()->availability().is_ok());
    CHECK(reference_backend()->availability().is_ok());
    const Status onednn = onednn_backend()->availability();
    CHECK(onednn.is_ok() == onednn_available());
    CHECK(onednn_backend()->available() == onednn_available());
    if (!onednn.is_ok()) {
        CHECK(onednn.code() == ErrorCode::unsupported);
        CHECK(onednn.message().find("DSINFER_WITH_ONEDNN") != std::string::npos);
    }

    const std::vector<std::string> avail = available_backends();
    CHECK(contains(avail, "cpu"));
    CHECK(contains(avail, "reference"));
    CHECK(contains(avail, "onednn") == onednn_available());
    const int gpus = cuda_device_count();
    CHECK(contains(avail, "cuda:0") == (gpus > 0));
    CHECK(static_cast<int>(std::count_if(avail.begin(), avail.end(), [](const std::string& s) {
              return s.rfind("cuda:", 0) == 0;
          })) == gpus);
    // Every name listed is a backend that says it is available.
    for (const auto& name : avail) {
        INFO(name);
        const auto b = find_backend(name);
        REQUIRE(b != nullptr);
        CHECK(b->available());
    }

    // The defaults: every available host backend but the reference (the fall-through).
    const std::vector<std::string> defaults = default_backends();
    CHECK(defaults.front() == (onednn_available() ? "onednn" : "cpu"));
    CHECK(contains(defaults, "cpu"));
    CHECK_FALSE(contains(defaults, "reference"));
    CHECK(contains(defaults, "onednn") == onednn_available());

    // Host backends have no device runtime.
    for (const auto& b : {cpu_backend(), reference_backend(), onednn_backend()}) {
        INFO(b->name());
        const auto rt = b->device_runtime();
        REQUIRE(rt.is_ok());
        CHECK(rt.value() == nullptr);
    }
}

TEST_CASE("backends: each registers its own kernels at its priority, under its provider",
          "[backends]") {
    for (const auto& b : {cpu_backend(), reference_backend(), onednn_backend()}) {
        INFO(b->name());
        KernelRegistry r;
        const Status st = b->register_kernels(r);
        if (!b->available()) {  // oneDNN not in this build: nothing added, the same reason
            CHECK(st.code() == b->availability().code());
            CHECK(r.entries().empty());
            continue;
        }
        REQUIRE(st.is_ok());
        CHECK_FALSE(r.entries().empty());
        std::set<std::string> providers;
        std::set<int> priorities;
        for (const auto& e : r.entries()) {
            providers.insert(e.provider);
            priorities.insert(e.priority);
            CHECK(e.key.device == DeviceKind::cpu);
        }
        CHECK(providers == std::set<std::string>{b->provider()});
        CHECK(priorities == std::set<int>{b->priority()});
    }
    // The fast kernels do not bring the reference ones: the engine adds those itself.
    KernelRegistry fast;
    REQUIRE(cpu_backend()->register_kernels(fast).is_ok());
    CHECK(fast.find("Relu", "", 14, DeviceKind::cpu) != nullptr);
    CHECK(fast.find("Einsum", "", 12, DeviceKind::cpu) == nullptr);
    KernelRegistry ref;
    REQUIRE(reference_backend()->register_kernels(ref).is_ok());
    CHECK(ref.find("Einsum", "", 12, DeviceKind::cpu) != nullptr);
}

TEST_CASE("backends: the engine's providers follow EngineOptions::backends", "[backends]") {
    const auto reference = mlp_providers({"reference"});
    REQUIRE(reference.size() == 3);
    CHECK(reference == std::vector<std::string>(3, "reference"));

    const auto cpu = mlp_providers({"cpu"});
    REQUIRE(cpu.size() == 3);
    CHECK(cpu[0] == "cpu");  // MatMul on dsinfer's packed GEMM
    CHECK(std::all_of(cpu.begin(), cpu.end(),
                      [](const std::string& p) { return p == "cpu" || p == "reference"; }));
    // Listing a backend twice, or the reference kernels beside it, changes nothing.
    CHECK(mlp_providers({"cpu", "cpu"}) == cpu);
    CHECK(mlp_providers({"reference", "cpu"}) == cpu);

    if (onednn_available()) {
        const auto onednn = mlp_providers({"onednn"});
        REQUIRE(onednn.size() == 3);
        // Without "cpu" the fall-through is the reference kernels: never a "cpu" kernel.
        CHECK(std::none_of(onednn.begin(), onednn.end(),
                           [](const std::string& p) { return p == "cpu"; }));
        CHECK(std::count(onednn.begin(), onednn.end(), "onednn") >= 1);
    }
}

TEST_CASE("backends: the cuda backend without a GPU is unavailable and says why",
          "[backends]") {
    const auto cuda = cuda_backend(0);
    const int gpus = cuda_device_count();
    const Status why = cuda->availability();
    if (gpus > 0) {  // a machine with a GPU: cuda:0 works, a device past the last does not
        CHECK(why.is_ok());
        const Status past = cuda_backend(gpus)->availability();
        CHECK(past.code() == ErrorCode::unavailable);
        CHECK(past.message().find(std::to_string(gpus)) != std::string::npos);
        return;
    }
    REQUIRE_FALSE(why.is_ok());
    CHECK_FALSE(cuda->available());
    CHECK(why.code() == (DSINFER_WITH_CUDA ? ErrorCode::unavailable : ErrorCode::unsupported));
    CHECK_FALSE(why.message().empty());
    if (!DSINFER_WITH_CUDA) CHECK(why.message().find("DSINFER_WITH_CUDA") != std::string::npos);
    // cuda_status() tells the same story.
    CHECK(cuda_status().find(why.message()) != std::string::npos);

    // Nothing registers, no runtime, and an engine on the device fails with the same code.
    KernelRegistry r;
    CHECK(cuda->register_kernels(r).code() == why.code());
    CHECK(r.entries().empty());
    CHECK(cuda->device_runtime().status().code() == why.code());
    EngineOptions o;
    o.device = "cuda";
    CHECK(compile_status(o).code() == why.code());
    CHECK(cuda_memory_stats(0).bytes_in_use == 0);
    CHECK_FALSE(cuda_set_memory_limit(0, 1 << 20));
}

TEST_CASE("backends: names no backend has, and backends in the wrong option", "[backends]") {
    EngineOptions o;
    o.backends = {"cpu", "gpu"};
    Status st = compile_status(o);
    CHECK(st.code() == ErrorCode::invalid_argument);
    CHECK(st.message().find("unknown backend 'gpu'") != std::string::npos);
    CHECK(st.message().find("known: onednn, cpu, reference") != std::string::npos);

    // A device backend among the host backends: the GPU is chosen with `device`.
    for (const char* gpu : {"cuda", "cuda:1"}) {
        o.backends = {gpu};
        st = compile_status(o);
        CHECK(st.code() == ErrorCode::invalid_argument);
        CHECK(st.message().find("EngineOptions::device") != std::string::npos);
    }

    // A host backend as the device, or a device name no backend has.
    o = {};
    for (const char* device : {"reference", "onednn", "gpu", "cuda:", "cuda:1234"}) {
        INFO(device);
        o.device = device;
        st = compile_status(o);
        CHECK(st.code() == ErrorCode::invalid_argument);
        CHECK(st.message().find("is not one of cpu, cuda, cuda:N") != std::string::npos);
    }

    // oneDNN named in a build without it.
    o = {};
    o.backends = {"onednn"};
    st = compile_status(o);
    if (onednn_available()) {
        CHECK(st.is_ok());
    } else {
        CHECK(st.code() == ErrorCode::unsupported);
        CHECK(st.message().find("backend 'onednn' is not available in this build") !=
              std::string::npos);
    }
}
