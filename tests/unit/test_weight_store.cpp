// The weight store (include/dsinfer/weight_store.hpp): one owner of every constant and of every
// form kernels make of one. On its own: a form is built once per (constant, kind, layout,
// target) and shared; another type under the same key is an error; drop frees what no kernel
// holds and a later get rebuilds it, while a held form stays resident (reported, not owned) and
// comes back without a rebuild; a released constant goes when its last holder lets go. In an
// engine: nodes that read the same weights share one packed copy (dsinfer's packed GEMM, the
// oneDNN reorder) and one Winograd transform, the engine's report (weight_memory) is the
// store's, and dropping the store's references changes no output. Engine cases run once per
// ISA level ([isa]); the forms' target is the ISA the kernels were built for.
#include <catch2/catch.hpp>
#include <dsinfer/backends/onednn.hpp>
#include <dsinfer/dsinfer.hpp>
#include <string>
#include <vector>

#include "unit/engine_models.hpp"

using namespace dsinfer;
using namespace dsinfer::test;

namespace {

struct Blob {
    std::vector<float> v;
};

StatusOr<WeightBuild<Blob>> make_blob(int& builds, std::size_t n) {
    ++builds;
    auto b = std::make_shared<const Blob>(Blob{std::vector<float>(n, 1.f)});
    return WeightBuild<Blob>{b, n * sizeof(float)};
}

const WeightForm* find_form(const std::vector<WeightForm>& forms, const std::string& tensor,
                            const std::string& layout_prefix) {
    for (const WeightForm& f : forms)
        if (f.tensor == tensor && f.layout.rfind(layout_prefix, 0) == 0) return &f;
    return nullptr;
}

int count_forms(const std::vector<WeightForm>& forms, const std::string& tensor, WeightKind kind) {
    int n = 0;
    for (const WeightForm& f : forms) n += f.tensor == tensor && f.kind == kind;
    return n;
}

/// x [batch, 64] -> MatMul W -> Relu -> MatMul W^T... : two MatMuls and a Gemm (transB) read
/// the same W [64, 64]; the MatMuls share B's packing, the Gemm packs it transposed.
Graph shared_gemm_net() {
    Graph g;
    g.name = "shared_gemm_net";
    g.opset_imports = {{"", 17}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::named("batch"), Dim::fixed(64)};
    const ValueId x = g.add_value("x", DType::f32, xs);
    g.inputs.push_back(x);
    const ValueId w = g.add_initializer("W", random_f32({64, 64}, 11, 0.2f));
    const ValueId h1 = g.add_value("h1"), r1 = g.add_value("r1"), h2 = g.add_value("h2"),
                  r2 = g.add_value("r2"), y = g.add_value("y");
    g.add_node("MatMul", {x, w}, {h1}, "mm1");
    g.add_node("Relu", {h1}, {r1}, "relu1");
    g.add_node("MatMul", {r1, w}, {h2}, "mm2");
    g.add_node("Relu", {h2}, {r2}, "relu2");
    g.add_node("Gemm", {r2, w}, {y}, "gemm").attributes = {{"transB", attr_i(1)}};
    g.outputs.push_back(y);
    return g;
}

/// x [batch, 3, 8, 8] -> Conv K0 -> Relu -> Conv K -> Relu -> Conv K -> Relu -> Conv K3
/// -> GlobalAveragePool -> y (3x3 windows, pads 1): two layers read one weight K; at level 3
/// their activations are blocked on both sides (oneDNN's Winograd needs that).
Graph shared_conv_net() {
    Graph g;
    g.name = "shared_conv_net";
    g.opset_imports = {{"", 17}};
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::named("batch"), Dim::fixed(3), Dim::fixed(8), Dim::fixed(8)};
    const ValueId x = g.add_value("x", DType::f32, xs);
    g.inputs.push_back(x);
    // 3 input channels: the first layer takes a plain input and gives a blocked output.
    const ValueId k0 = g.add_initializer("K0", random_f32({16, 3, 3, 3}, 12, 0.2f));
    const ValueId k = g.add_initializer("K", random_f32({16, 16, 3, 3}, 13, 0.2f));
    const ValueId k3 = g.add_initializer("K3", random_f32({16, 16, 3, 3}, 14, 0.2f));
    ValueId in = x;
    int i = 0;
    for (ValueId w : {k0, k, k, k3}) {
        const ValueId c = g.add_value("c" + std::to_string(i)), r = g.add_value("r" + std::to_string(i));
        g.add_node("Conv", {in, w}, {c}, "conv" + std::to_string(i)).attributes = {
            {"pads", attr_ints({1, 1, 1, 1})}};
        g.add_node("Relu", {c}, {r}, "relu" + std::to_string(i));
        in = r;
        ++i;
    }
    const ValueId y = g.add_value("y");
    g.add_node("GlobalAveragePool", {in}, {y}, "gap");
    g.outputs.push_back(y);
    return g;
}

void check_against_reference(const InferenceEngine& engine, Graph (*make)(),
                             const std::vector<NamedTensor>& feeds) {
    EngineOptions ro;
    ro.backends = {"reference"};
    const InferenceEngine ref = InferenceEngine::compile(make(), ro);
    const auto got = engine.run(feeds);
    const auto want = ref.run(feeds);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(max_rel_diff(got[i].tensor, want[i].tensor) < 1e-4);
}

}  // namespace

TEST_CASE("weight store: a form is built once per key and shared", "[weight_store]") {
    WeightStore store;
    const Tensor w = random_f32({4, 4}, 1);
    const auto src = store.add_constant("w", w);
    REQUIRE(src);
    CHECK(store.source(w).id == src.id);  // found by its data
    int builds = 0;
    auto a = store.get<Blob>(src, WeightKind::packed, "blob", "avx2", [&] { return make_blob(builds, 8); });
    auto b = store.get<Blob>(src, WeightKind::packed, "blob", "avx2", [&] { return make_blob(builds, 8); });
    REQUIRE(a.is_ok());
    REQUIRE(b.is_ok());
    CHECK(a.value() == b.value());
    CHECK(builds == 1);
    // Another target or layout is another form.
    auto c = store.get<Blob>(src, WeightKind::packed, "blob", "avx512", [&] { return make_blob(builds, 4); });
    REQUIRE(c.is_ok());
    CHECK(c.value() != a.value());
    CHECK(builds == 2);
    // The same key with another type is an error, not a bad cast.
    auto wrong = store.get<int>(src, WeightKind::packed, "blob", "avx2", [] {
        return StatusOr<WeightBuild<int>>(WeightBuild<int>{std::make_shared<const int>(1), 4});
    });
    REQUIRE_FALSE(wrong.is_ok());
    CHECK(wrong.status().code() == ErrorCode::internal);
    CHECK(wrong.status().message().find("another type") != std::string::npos);
    // A builder's error comes back as it is; nothing is kept.
    auto failed = store.get<Blob>(src, WeightKind::derived, "t", "", [] {
        return StatusOr<WeightBuild<Blob>>(Status(ErrorCode::invalid_model, "bad weights"));
    });
    REQUIRE_FALSE(failed.is_ok());
    CHECK(failed.status().code() == ErrorCode::invalid_model);

    const auto forms = store.forms();
    REQUIRE(forms.size() == 3);  // stored + two packed
    CHECK(forms[0].kind == WeightKind::stored);
    CHECK(forms[0].layout == "onnx");
    CHECK(forms[0].tensor == "w");
    CHECK(forms[0].bytes == 64);
    CHECK(forms[1].bytes == 32);
    CHECK(forms[1].target == "avx2");
    CHECK(forms[1].holders == 2);  // a and b
    CHECK(forms[1].owned);
    const WeightBytes bytes = store.bytes();
    CHECK(bytes.stored == 64);
    CHECK(bytes.packed == 48);
    CHECK(bytes.derived == 0);
    // w is resident as stored and twice packed (same numbers in distinct buffers).
    CHECK(store.held_twice() == std::vector<std::string>{"w"});
}

TEST_CASE("weight store: drop frees unheld forms, keeps held ones, rebuilds on demand",
          "[weight_store]") {
    WeightStore store;
    const Tensor w = random_f32({8}, 2);
    const auto src = store.add_constant("w", w);
    int builds = 0;
    auto get = [&](const char* layout) {
        auto r = store.get<Blob>(src, WeightKind::derived, layout, "", [&] { return make_blob(builds, 16); });
        REQUIRE(r.is_ok());
        return r.value();
    };
    std::shared_ptr<const Blob> held = get("held");
    (void)get("loose");
    CHECK(builds == 2);
    // Only "loose" is freed now: 64 bytes; "held" stays resident, no longer owned.
    CHECK(store.drop() == 64);
    auto forms = store.forms();
    REQUIRE(forms.size() == 2);  // stored + held
    CHECK(forms[1].layout == "held");
    CHECK_FALSE(forms[1].owned);
    CHECK(forms[1].holders == 1);
    // Asking again: the held one comes back without a rebuild (and is owned again), the
    // loose one is rebuilt.
    CHECK(get("held") == held);
    CHECK(builds == 2);
    (void)get("loose");
    CHECK(builds == 3);
    // A prefix drops only matching layouts.
    CHECK(store.drop("lo") == 64);
    CHECK(store.forms().size() == 2);
    held.reset();
    CHECK(store.drop() == 64);
    CHECK(store.forms().size() == 1);  // the stored form is not dropped by drop()
}

TEST_CASE("weight store: a released constant stays while a kernel holds it", "[weight_store]") {
    WeightStore store;
    const auto src = store.add_constant("w", random_f32({16}, 3));
    std::shared_ptr<const Tensor> kept = store.constant(src);
    REQUIRE(kept);
    store.release_constant(src);
    auto forms = store.forms();
    REQUIRE(forms.size() == 1);
    CHECK_FALSE(forms[0].owned);
    CHECK(store.constant(src) == kept);
    kept.reset();
    CHECK(store.forms().empty());
    CHECK(store.constant(src) == nullptr);
    // A form asked for no constant is an error.
    auto none = store.get<Blob>(WeightStore::Source{}, WeightKind::packed, "x", "", [] {
        return StatusOr<WeightBuild<Blob>>(Status(ErrorCode::internal, "unreached"));
    });
    CHECK_FALSE(none.is_ok());
}

TEST_CASE("weight store: nodes that read one weight share its forms", "[weight_store][isa]") {
    const std::string isa = cpu_kernel_isa();
    INFO("ISA " << isa);
    SECTION("dsinfer's packed GEMM") {
        EngineOptions o;
        o.backends = {"cpu"};
        o.num_threads = 2;
        const InferenceEngine engine = InferenceEngine::compile(shared_gemm_net(), o);
        for (std::int64_t batch : {1, 5})
            check_against_reference(engine, &shared_gemm_net, {{"x", random_f32({batch, 64}, 40)}});
        const auto forms = engine.weight_store()->forms();
        const WeightForm* plain = find_form(forms, "W", "sgemm.packed_b");
        REQUIRE(plain != nullptr);
        CHECK(plain->layout == "sgemm.packed_b");
        CHECK(plain->target == isa);
        CHECK(plain->holders == 2);  // mm1 and mm2: one copy
        const WeightForm* trans = find_form(forms, "W", "sgemm.packed_b.trans");
        REQUIRE(trans != nullptr);
        CHECK(trans->holders == 1);
        CHECK(count_forms(forms, "W", WeightKind::packed) == 2);
        CHECK(count_forms(forms, "W", WeightKind::stored) == 0);  // released: every reader packs
        const WeightMemoryStats m = engine.weight_memory();
        CHECK(m.packed_bytes == plain->bytes + trans->bytes);
        CHECK(m.graph_bytes == 0);
        CHECK(m.released_bytes == 64 * 64 * 4);
        // W is resident twice as the same numbers: packed, and packed transposed (another
        // layout of the same values), as the report says.
        CHECK(m.held_twice == std::vector<std::string>{"W"});
        // The store's references dropped: the kernels still hold theirs, outputs unchanged.
        CHECK(engine.weight_store()->drop() == 0);
        check_against_reference(engine, &shared_gemm_net, {{"x", random_f32({3, 64}, 41)}});
        CHECK(engine.weight_memory().packed_bytes == m.packed_bytes);
    }
    SECTION("the oneDNN MatMul's reordered weights") {
        if (!onednn_available()) {
            WARN("dsinfer was built without oneDNN: section skipped");
            return;
        }
        EngineOptions o;
        o.backends = {"onednn"};
        o.num_threads = 2;
        const InferenceEngine engine = InferenceEngine::compile(shared_gemm_net(), o);
        for (std::int64_t batch : {1, 5})
            check_against_reference(engine, &shared_gemm_net, {{"x", random_f32({batch, 64}, 42)}});
        const auto forms = engine.weight_store()->forms();
        // mm1 and mm2 ask for the same layout: at most one reorder of W for them (none when
        // the primitive reads the stored layout in place), and the Gemm's is its own.
        int onednn_forms = 0;
        for (const WeightForm& f : forms) {
            if (f.tensor != "W" || f.layout.rfind("onednn:", 0) != 0) continue;
            ++onednn_forms;
            CHECK(f.target == "onednn");
            CHECK(f.kind == WeightKind::packed);
        }
        CHECK(onednn_forms <= 2);
    }
    SECTION("the Winograd transform") {
        for (const std::vector<std::string>& backends :
             {std::vector<std::string>{"cpu"}, std::vector<std::string>{"onednn"}}) {
            if (backends[0] == "onednn" && !onednn_available()) continue;
            EngineOptions o;
            o.backends = backends;
            o.num_threads = 2;
            const InferenceEngine engine = InferenceEngine::compile(shared_conv_net(), o);
            INFO("backend " << backends[0]);
            // Batch 8: 32 output tiles of 4x4 per layer: Winograd on both kernels.
            check_against_reference(engine, &shared_conv_net, {{"x", random_f32({8, 3, 8, 8}, 43)}});
            const auto forms = engine.weight_store()->forms();
            const WeightForm* u = find_form(forms, "K", "winograd_f4x3.u");
            REQUIRE(u != nullptr);
            CHECK(u->kind == WeightKind::derived);
            CHECK(u->target == isa);
            // conv1 and conv2 (and the oneDNN kernels' cached plans) hold the one transform.
            CHECK(u->holders >= 2);
            CHECK(count_forms(forms, "K", WeightKind::derived) == 1);
            std::uint64_t derived = 0;
            for (const WeightForm& f : forms)
                if (f.kind == WeightKind::derived) derived += f.bytes;
            CHECK(engine.weight_memory().derived_bytes == derived);
            CHECK(engine.weight_memory().held_twice.empty());
        }
    }
}
