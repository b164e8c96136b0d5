// Device copies of constants in the weight store, on a fake device: a DeviceRuntime over host
// memory (tagged cuda:0, copies are memcpy) and device kernels registered for it, so that the
// executor's GPU paths (upload_constants, staging) run without a GPU. A device engine's
// constants appear in forms() once, with the device as target; two nodes, two graphs, and a
// device kernel that keeps its own copy (the CUDA plugin's kernels) share that one copy; drop
// lets it go, a later compile or get gets it back (or rebuilds it) with the same bytes; out of
// device memory is resource_exhausted naming the node.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/device_runtime.hpp"
#include "core/executor.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/kernel_registry.hpp"
#include "dsinfer/weight_store.hpp"
#include "unit/engine_models.hpp"

using namespace dsinfer;
using namespace dsinfer::detail;

namespace {

constexpr Device kFakeDevice{DeviceKind::cuda, 0};

/// Host memory that says it is cuda:0's.
class FakeDeviceMemory final : public Allocator {
public:
    Device device() const noexcept override { return kFakeDevice; }
    void* allocate(std::size_t bytes, std::size_t alignment) noexcept override {
        allocations.fetch_add(1, std::memory_order_relaxed);
        return cpu_allocator().allocate(bytes, alignment);
    }
    void deallocate(void* p, std::size_t bytes) noexcept override {
        cpu_allocator().deallocate(p, bytes);
    }
    std::atomic<int> allocations{0};
};

/// A DeviceRuntime whose device memory is host memory: copies are memcpy, streams are tokens,
/// capture is unsupported (the tests compile without CUDA graphs).
class FakeDevice final : public DeviceRuntime {
public:
    explicit FakeDevice(std::size_t limit_bytes = 0) {
        MemoryPoolOptions o;
        o.limit_bytes = limit_bytes;
        o.pass_through = true;  // every constant is an upstream allocation (counted)
        pool_ = std::make_shared<MemoryPool>(o, memory_);
    }
    Device device() const noexcept override { return kFakeDevice; }
    std::string description() const override { return "fake device (host memory)"; }
    const std::shared_ptr<MemoryPool>& pool() const noexcept override { return pool_; }
    const std::shared_ptr<MemoryPool>& pinned_pool() const noexcept override { return pinned_; }
    Status activate() noexcept override { return Status::ok(); }
    Status health() const noexcept override { return Status::ok(); }
    StatusOr<void*> acquire_stream() noexcept override { return static_cast<void*>(&token_); }
    void release_stream(void*) noexcept override {}
    Status copy_to_device(void* dst, const void* src, std::size_t bytes, void*) noexcept override {
        uploads.fetch_add(1, std::memory_order_relaxed);
        if (bytes > 0) std::memcpy(dst, src, bytes);
        return Status::ok();
    }
    Status copy_to_host(void* dst, const void* src, std::size_t bytes, void*) noexcept override {
        if (bytes > 0) std::memcpy(dst, src, bytes);
        return Status::ok();
    }
    Status synchronize(void*) noexcept override { return Status::ok(); }
    Status memset_async(void* dst, int value, std::size_t bytes, void*) noexcept override {
        if (bytes > 0) std::memset(dst, value, bytes);
        return Status::ok();
    }
    Status begin_capture(void*) noexcept override {
        return Status(ErrorCode::unsupported, "no capture on the fake device");
    }
    StatusOr<std::shared_ptr<void>> end_capture(void*) noexcept override {
        return Status(ErrorCode::unsupported, "no capture on the fake device");
    }
    Status replay(void*, void*) noexcept override {
        return Status(ErrorCode::unsupported, "no capture on the fake device");
    }

    int allocations() const noexcept { return memory_.allocations.load(); }
    std::atomic<int> uploads{0};

private:
    FakeDeviceMemory memory_;
    std::shared_ptr<MemoryPool> pool_;
    std::shared_ptr<MemoryPool> pinned_ = std::make_shared<MemoryPool>();
    int token_ = 0;
};

/// The fake device the "keeping" kernels' factories upload to (set by each test).
std::shared_ptr<FakeDevice> g_device;
/// Input 1's address as each device kernel saw it at its last run, by node name.
std::vector<std::pair<std::string, const void*>> g_seen;

/// y = a + b on the fake device (float32, same shapes). With `own` it holds its own device copy
/// of a constant b, from the weight store like the CUDA plugin's kernels (and declares it
/// released), else it reads b as the executor stages it.
class DeviceAdd final : public Kernel {
public:
    DeviceAdd(std::string name, std::shared_ptr<const Tensor> own)
        : name_(std::move(name)), own_(std::move(own)) {}
    Status prepare(PrepareContext& ctx) const override {
        ctx.set_output(0, DType::f32, ctx.input(0).shape());
        return Status::ok();
    }
    std::uint64_t released_constant_inputs() const noexcept override { return own_ ? 2u : 0u; }
    Status run(RunContext& ctx) const noexcept override {
        const float* a = ctx.input(0).data<float>();
        const void* braw = own_ ? own_->raw_data() : ctx.input(1).raw;
        const auto* b = static_cast<const float*>(braw);
        float* y = ctx.output(0).data<float>();
        for (std::int64_t i = 0; i < ctx.input(0).num_elements(); ++i) y[i] = a[i] + b[i];
        for (auto& [n, p] : g_seen)
            if (n == name_) p = braw;
        return Status::ok();
    }

private:
    std::string name_;
    std::shared_ptr<const Tensor> own_;
};

StatusOr<std::unique_ptr<Kernel>> make_device_add(const KernelCreateContext& ctx) {
    std::shared_ptr<const Tensor> own;
    const Tensor* b = ctx.constant_input(1);
    if (ctx.node().op_type == "KeepAdd" && b != nullptr) {
        const std::shared_ptr<WeightStore> store = ctx.weight_store();
        DSINFER_ASSIGN_OR_RETURN(own, device_constant_form(*store, store->source(*b), *b, *g_device));
    }
    g_seen.emplace_back(ctx.node().name, nullptr);
    return std::unique_ptr<Kernel>(std::make_unique<DeviceAdd>(ctx.node().name, std::move(own)));
}

const KernelRegistry& device_registry() {
    static const KernelRegistry r = [] {
        KernelRegistry reg;
        for (const char* op : {"Add", "KeepAdd"})
            reg.add({op, "", 1, kMaxOpset, DeviceKind::cuda, DTypeSet{DType::f32}}, &make_device_add,
                    30, "fake");
        return reg;
    }();
    return r;
}

/// x [2, 3] -> ops[0](x, W) -> ops[1](., W) -> y: two nodes read the initializer W (shared
/// data: graphs built from the same W share one constant).
std::shared_ptr<Graph> two_readers(const Tensor& w, const char* op0, const char* op1) {
    auto g = std::make_shared<Graph>();
    g->name = "two_readers";
    g->opset_imports = {{"", 17}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::fixed(2), Dim::fixed(3)};
    const ValueId x = g->add_value("x", DType::f32, xs);
    g->inputs.push_back(x);
    const ValueId wv = g->add_initializer("W", w);
    const ValueId h = g->add_value("h"), y = g->add_value("y");
    g->add_node(op0, {x, wv}, {h}, "first");
    g->add_node(op1, {h, wv}, {y}, "second");
    g->outputs.push_back(y);
    REQUIRE(g->sort_topologically().is_ok());
    return g;
}

StatusOr<std::shared_ptr<CompiledGraph>> try_compile(const std::shared_ptr<Graph>& g,
                                                     const std::shared_ptr<WeightStore>& store,
                                                     const std::shared_ptr<FakeDevice>& dev) {
    CompileOptions o;
    o.registry = &device_registry();
    o.device_runtime = dev;
    o.cuda_graphs = false;
    o.weights = store;
    return CompiledGraph::compile(g, o);
}

/// Compiles on the fake device; returns the graph and the uploads compile made.
std::pair<std::shared_ptr<CompiledGraph>, int> compile_on(const std::shared_ptr<Graph>& g,
                                                          const std::shared_ptr<WeightStore>& store,
                                                          const std::shared_ptr<FakeDevice>& dev) {
    const int before = dev->uploads.load();
    auto cg = try_compile(g, store, dev);
    if (!cg.is_ok()) FAIL(cg.status().message());
    return {std::move(cg).value(), dev->uploads.load() - before};
}

std::vector<const WeightForm*> forms_of(const std::vector<WeightForm>& forms, const std::string& tensor,
                                        const std::string& target) {
    std::vector<const WeightForm*> out;
    for (const WeightForm& f : forms)
        if (f.tensor == tensor && f.target == target) out.push_back(&f);
    return out;
}

/// Runs the graph on x and checks y = x + 2 W.
void check_run(const CompiledGraph& cg, const Tensor& w) {
    const Tensor x = test::random_f32({2, 3}, 5);
    std::vector<Tensor> outs;
    RunControl control;
    REQUIRE(cg.execute({x}, nullptr, control, outs).is_ok());
    REQUIRE(outs.size() == 1);
    REQUIRE(outs[0].num_elements() == 6);
    CHECK(outs[0].device().kind == DeviceKind::cpu);
    for (int i = 0; i < 6; ++i)
        CHECK(outs[0].data<float>()[i] == Approx(x.data<float>()[i] + 2 * w.data<float>()[i]));
}

const void* seen(const std::string& node) {
    for (const auto& [n, p] : g_seen)
        if (n == node) return p;
    return nullptr;
}

}  // namespace

TEST_CASE("device constants: one copy per constant and device, in the store, shared by nodes and graphs",
          "[device_constants][weight_store]") {
    g_device = std::make_shared<FakeDevice>();
    g_seen.clear();
    auto store = std::make_shared<WeightStore>();
    const Tensor w = test::random_f32({2, 3}, 7);
    auto [cg, uploads] = compile_on(two_readers(w, "Add", "Add"), store, g_device);
    CHECK(uploads == 1);  // one copy for two readers

    auto forms = store->forms();
    auto dev = forms_of(forms, "W", "cuda:0");
    REQUIRE(dev.size() == 1);
    CHECK(dev[0]->kind == WeightKind::stored);
    CHECK(dev[0]->layout == "onnx");
    CHECK(dev[0]->bytes == 24);
    CHECK(dev[0]->owned);
    CHECK(dev[0]->holders == 1);                  // the graph
    CHECK(forms_of(forms, "W", "").size() == 1);  // the host's stored form
    CHECK(store->bytes().stored == 48);           // host + device
    CHECK(store->held_twice().empty());           // one copy per memory
    // The engine's summary is host memory; the device copy is in forms().
    CHECK(cg->weight_memory().graph_bytes == 24);
    CHECK(cg->weight_memory().packed_bytes == 0);

    // Both nodes read the one device copy (not the host's data).
    check_run(*cg, w);
    REQUIRE(seen("first") != nullptr);
    CHECK(seen("first") == seen("second"));
    CHECK(seen("first") != w.raw_data());
    CHECK(std::memcmp(seen("first"), w.raw_data(), 24) == 0);

    // A second graph reading the same constant on the same store and device shares the copy.
    auto [cg2, uploads2] = compile_on(two_readers(w, "Add", "Add"), store, g_device);
    CHECK(uploads2 == 0);
    dev = forms_of(forms = store->forms(), "W", "cuda:0");
    REQUIRE(dev.size() == 1);
    CHECK(dev[0]->holders == 2);
    check_run(*cg2, w);

    // drop: held by the graphs, so still resident (not owned), nothing freed.
    CHECK(store->drop() == 0);
    dev = forms_of(forms = store->forms(), "W", "cuda:0");
    REQUIRE(dev.size() == 1);
    CHECK_FALSE(dev[0]->owned);
    check_run(*cg, w);
    // The graphs go: so does the copy, and a later compile rebuilds it with the same bytes.
    cg.reset();
    cg2.reset();
    CHECK(forms_of(store->forms(), "W", "cuda:0").empty());
    CHECK(forms_of(store->forms(), "W", "").size() == 1);
    g_seen.clear();
    auto [cg3, uploads3] = compile_on(two_readers(w, "Add", "Add"), store, g_device);
    CHECK(uploads3 == 1);
    dev = forms_of(forms = store->forms(), "W", "cuda:0");
    REQUIRE(dev.size() == 1);
    CHECK(dev[0]->bytes == 24);
    CHECK(dev[0]->owned);
    check_run(*cg3, w);
    CHECK(std::memcmp(seen("first"), w.raw_data(), 24) == 0);
}

TEST_CASE("device constants: drop frees an unheld device copy, get rebuilds it with the same bytes",
          "[device_constants][weight_store]") {
    auto device = std::make_shared<FakeDevice>();
    WeightStore store;
    const Tensor w = test::random_f32({4, 4}, 3);
    const auto src = store.add_constant("w", w);
    {
        auto t = device_constant_form(store, src, w, *device);
        REQUIRE(t.is_ok());
        CHECK(t.value()->device() == kFakeDevice);
        CHECK(t.value()->raw_data() != w.raw_data());
        CHECK(std::memcmp(t.value()->raw_data(), w.raw_data(), 64) == 0);
        // Asked again: the same copy, no second upload.
        auto again = device_constant_form(store, src, w, *device);
        REQUIRE(again.is_ok());
        CHECK(again.value() == t.value());
        CHECK(device->uploads.load() == 1);
    }
    // Owned by the store only: drop frees it (a prefix matching the copy's layout).
    CHECK(store.drop("onnx") == 64);
    CHECK(forms_of(store.forms(), "w", "cuda:0").empty());
    CHECK(store.forms().size() == 1);  // the stored form itself stays
    auto rebuilt = device_constant_form(store, src, w, *device);
    REQUIRE(rebuilt.is_ok());
    CHECK(device->uploads.load() == 2);
    CHECK(std::memcmp(rebuilt.value()->raw_data(), w.raw_data(), 64) == 0);
    CHECK(store.bytes().stored == 128);
    // A packed form on the device beside the plain copy is held twice there; not with the host.
    CHECK(store.held_twice().empty());
    auto packed = store.get<Tensor>(src, WeightKind::packed, "fake.t", "cuda:0", [&] {
        return StatusOr<WeightBuild<Tensor>>(WeightBuild<Tensor>{std::make_shared<const Tensor>(w), 64});
    });
    REQUIRE(packed.is_ok());
    CHECK(store.held_twice() == std::vector<std::string>{"w"});
}

TEST_CASE("device constants: a device kernel's own copy is the executor's, and stays when the host's goes",
          "[device_constants][weight_store]") {
    g_device = std::make_shared<FakeDevice>();
    g_seen.clear();
    auto store = std::make_shared<WeightStore>();
    const Tensor w = test::random_f32({2, 3}, 9);
    {
        // "first" reads W as the executor stages it, "second" keeps its own copy from the
        // store: the same one.
        auto [cg, uploads] = compile_on(two_readers(w, "Add", "KeepAdd"), store, g_device);
        CHECK(uploads == 1);
        const auto forms = store->forms();  // forms_of points into it
        auto dev = forms_of(forms, "W", "cuda:0");
        REQUIRE(dev.size() == 1);
        CHECK(dev[0]->holders == 2);  // the kernel and the graph
        check_run(*cg, w);
        CHECK(seen("first") == seen("second"));
    }
    // The store still owns it (until dropped).
    auto held = store->forms();
    auto dev = forms_of(held, "W", "cuda:0");
    REQUIRE(dev.size() == 1);
    CHECK(dev[0]->holders == 0);
    CHECK(store->drop() == 24);
    {
        // Every reader keeps its own copy: the host's stored form is released after compile,
        // the executor uploads nothing more, and the device copy is the kernels' (reported).
        g_seen.clear();
        auto [cg, uploads] = compile_on(two_readers(w, "KeepAdd", "KeepAdd"), store, g_device);
        CHECK(uploads == 1);
        const auto forms = store->forms();
        dev = forms_of(forms, "W", "cuda:0");
        REQUIRE(dev.size() == 1);
        CHECK(dev[0]->holders == 2);  // the two kernels
        CHECK(forms_of(forms, "W", "").empty());
        CHECK(cg->released_constant_bytes() == 24);
        check_run(*cg, w);
        CHECK(seen("first") == seen("second"));
        // drop lets go of the store's reference; the kernels keep the copy.
        CHECK(store->drop() == 0);
        check_run(*cg, w);
    }
}

TEST_CASE("device constants: out of device memory is resource_exhausted naming the node",
          "[device_constants][weight_store]") {
    auto device = std::make_shared<FakeDevice>(/*limit_bytes=*/16);
    auto store = std::make_shared<WeightStore>();
    const Tensor w = test::random_f32({2, 3}, 7);
    auto cg = try_compile(two_readers(w, "Add", "Add"), store, device);
    REQUIRE_FALSE(cg.is_ok());
    CHECK(cg.status().code() == ErrorCode::resource_exhausted);
    CHECK_THAT(cg.status().message(), Catch::Contains("first"));
    CHECK(forms_of(store->forms(), "W", "cuda:0").empty());
}
