// Level-1 graph passes (eliminate_identity, constant_folding, eliminate_common_subexpressions,
// eliminate_dead_code) and save_onnx: each pass fires where it should (report counts and the
// resulting graph), does not fire where it must not (pinned values, captured names, oversize
// folds, random ops), and the optimized graph computes what the unoptimized one does. Also the
// pipeline: user passes in order, disabled passes, levels, with and without a GraphEvaluator.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <unistd.h>

#include "passes/pass_utils.hpp"
#include "unit/model_builder.hpp"

using namespace dsinfer;
using passes::set_attr;

namespace {

Tensor f32(const Shape& s, std::vector<float> v) { return Tensor::from_vector<float>(s, v); }
Tensor i64(std::vector<std::int64_t> v) {
    return Tensor::from_vector<std::int64_t>(Shape{static_cast<std::int64_t>(v.size())}, v);
}
Tensor iota_f32(const Shape& s, float scale = 0.25f) {
    Tensor t = Tensor::empty(DType::f32, s);
    for (std::int64_t i = 0; i < t.num_elements(); ++i)
        t.data<float>()[i] = scale * static_cast<float>(i % 17) - 1.5f;
    return t;
}

/// Builds small graphs directly on the IR (opset 17 unless given).
struct Builder {
    Graph g;
    explicit Builder(std::int64_t opset = 17) { g.opset_imports.push_back({"", opset}); }
    /// dims < 0 are the symbol "batch".
    ValueId input(const std::string& name, DType t, const std::vector<std::int64_t>& dims) {
        SymbolicShape s;
        s.known = true;
        for (auto d : dims) s.dims.push_back(d < 0 ? Dim::named("batch") : Dim::fixed(d));
        const ValueId id = g.add_value(name, t, s);
        g.inputs.push_back(id);
        return id;
    }
    ValueId init(const std::string& name, Tensor t) { return g.add_initializer(name, std::move(t)); }
    ValueId op(const std::string& op, std::vector<ValueId> ins, const std::string& out,
               const std::function<void(Node&)>& attrs = {}) {
        const ValueId o = g.add_value(out);
        Node& n = g.add_node(op, std::move(ins), {o}, out + "_node");
        if (attrs) attrs(n);
        return o;
    }
    void output(ValueId v) { g.outputs.push_back(v); }
    Graph done() {
        throw_if_error(g.sort_topologically());
        return g;
    }
};

const std::vector<std::string> kLevel1 = {"eliminate_identity", "constant_folding",
                                          "eliminate_common_subexpressions", "eliminate_dead_code"};

/// Runs only `passes` of level 1 on `g`.
OptimizeReport run_level1(Graph& g, const std::vector<std::string>& passes,
                          std::uint64_t max_folded_bytes = std::uint64_t{64} << 20) {
    OptimizeOptions o;
    o.level = 1;
    o.max_folded_bytes = max_folded_bytes;
    for (const auto& p : kLevel1)
        if (std::find(passes.begin(), passes.end(), p) == passes.end()) o.disabled_passes.push_back(p);
    return optimize(g, o);
}

std::vector<NamedTensor> run_graph(Graph g, const std::vector<NamedTensor>& in) {
    EngineOptions eo;
    eo.optimization_level = 0;
    return InferenceEngine::compile(std::move(g), eo).run(in);
}

/// Outputs of `a` and `b` (both run unoptimized) agree: same names/shapes/dtypes, integers
/// exactly, floats within 1e-6 relative (the reference kernels fold; fast kernels run).
void check_same(const Graph& a, const Graph& b, const std::vector<NamedTensor>& in) {
    auto ra = run_graph(a, in);
    auto rb = run_graph(b, in);
    REQUIRE(ra.size() == rb.size());
    for (std::size_t i = 0; i < ra.size(); ++i) {
        INFO("output " << ra[i].name);
        CHECK(ra[i].name == rb[i].name);
        REQUIRE(ra[i].tensor.dtype() == rb[i].tensor.dtype());
        REQUIRE(ra[i].tensor.shape() == rb[i].tensor.shape());
        const Tensor& x = ra[i].tensor;
        const Tensor& y = rb[i].tensor;
        if (x.dtype() == DType::f32) {
            for (std::int64_t k = 0; k < x.num_elements(); ++k)
                CHECK(std::fabs(x.data<float>()[k] - y.data<float>()[k]) <=
                      1e-6f * (1.0f + std::fabs(x.data<float>()[k])));
        } else if (x.dtype() != DType::string) {
            CHECK(std::memcmp(x.raw_data(), y.raw_data(), x.num_bytes()) == 0);
        }
    }
}

int count_ops(const Graph& g, const std::string& op) {
    int n = 0;
    for (const Node& node : g.nodes) n += node.op_type == op ? 1 : 0;
    return n;
}

ValueId id_of(const Graph& g, const std::string& name) {
    auto v = g.find_value(name);
    REQUIRE(v.has_value());
    return *v;
}

/// then_branch: out = Identity(<captured>) ; else_branch: out = constant `other`.
Attribute branch(const std::string& captured, const Value& like, const std::string& out) {
    auto sub = std::make_shared<Graph>();
    sub->name = "branch_" + out;
    sub->opset_imports.push_back({"", 17});
    Value cap;
    cap.name = captured;
    cap.is_capture = true;
    cap.dtype = like.dtype;
    cap.shape = like.shape;
    sub->values.push_back(cap);
    const ValueId o = sub->add_value(out, like.dtype);
    sub->add_node("Identity", {0}, {o}, out + "_id");
    sub->outputs = {o};
    Attribute a;
    a.kind = AttrKind::g;
    a.g = sub;
    return a;
}

}  // namespace

// ---- eliminate_identity ---------------------------------------------------------------------

TEST_CASE("eliminate_identity removes Identity, same-type Cast, inference Dropout, inverse Transposes",
          "[passes]") {
    auto make = [] {
        Builder b;
        const ValueId x = b.input("x", DType::f32, {2, 3, 4});
        ValueId v = b.op("Identity", {x}, "i1");
        v = b.op("Cast", {v}, "c1", [](Node& n) { set_attr(n, "to", std::int64_t{1}); });
        v = b.op("Dropout", {v}, "d1");
        v = b.op("Transpose", {v}, "t1", [](Node& n) { set_attr(n, "perm", std::vector<std::int64_t>{1, 0, 2}); });
        v = b.op("Transpose", {v}, "t2", [](Node& n) { set_attr(n, "perm", std::vector<std::int64_t>{1, 0, 2}); });
        b.output(b.op("Relu", {v}, "y"));
        return b.done();
    };
    Graph g = make();
    auto r = run_level1(g, {"eliminate_identity"});
    CHECK(r.count("eliminate_identity") == 4);
    // The first Transpose is left for eliminate_dead_code; Relu reads x directly.
    CHECK(count_ops(g, "Identity") + count_ops(g, "Cast") + count_ops(g, "Dropout") == 0);
    const Node& relu = g.nodes.back();
    CHECK(relu.op_type == "Relu");
    CHECK(relu.inputs[0] == id_of(g, "x"));
    run_level1(g, {"eliminate_dead_code"});
    CHECK(g.nodes.size() == 1);
    check_same(make(), g, {{"x", iota_f32({2, 3, 4})}});
}

TEST_CASE("eliminate_identity keeps what it must: pinned outputs, used masks, training mode, other types",
          "[passes]") {
    auto make = [] {
        Builder b;
        const ValueId x = b.input("x", DType::f32, {2, 3});
        // r -> Identity -> y (graph output): Relu produces y itself afterwards.
        b.output(b.op("Identity", {b.op("Relu", {x}, "r")}, "y"));
        // Graph input straight to a graph output: the Identity must stay.
        b.output(b.op("Identity", {x}, "z"));
        // Dropout whose mask is read, training-mode Dropout, Cast to another type.
        Node* drop = nullptr;
        const ValueId d = b.g.add_value("d");
        const ValueId mask = b.g.add_value("mask");
        drop = &b.g.add_node("Dropout", {x}, {d, mask}, "drop_mask");
        (void)drop;
        b.output(d);
        b.output(b.op("Cast", {mask}, "mask_f", [](Node& n) { set_attr(n, "to", std::int64_t{1}); }));
        const ValueId ratio = b.init("ratio", Tensor::scalar(0.0f));
        const ValueId train = b.init("train", Tensor::scalar(true));
        b.output(b.op("Dropout", {x, ratio, train}, "dt"));
        b.output(b.op("Cast", {x}, "xd", [](Node& n) { set_attr(n, "to", std::int64_t{11}); }));
        return b.done();
    };
    Graph g = make();
    auto r = run_level1(g, {"eliminate_identity", "eliminate_dead_code"});
    CHECK(r.count("eliminate_identity") == 1);
    const ValueId y = id_of(g, "y");
    REQUIRE(g.value(y).producer >= 0);
    CHECK(g.nodes[static_cast<std::size_t>(g.value(y).producer)].op_type == "Relu");
    CHECK(g.nodes[static_cast<std::size_t>(g.value(id_of(g, "z")).producer)].op_type == "Identity");
    CHECK(count_ops(g, "Dropout") == 2);
    CHECK(count_ops(g, "Cast") == 2);
    CHECK(g.outputs.size() == 6);
    check_same(make(), g, {{"x", iota_f32({2, 3})}});
}

TEST_CASE("eliminate_identity keeps a name a subgraph captures", "[passes]") {
    auto make = [] {
        Builder b;
        const ValueId x = b.input("x", DType::f32, {2, 2});
        const ValueId c = b.input("c", DType::boolean, {});
        const ValueId r = b.op("Relu", {x}, "r");
        const ValueId v = b.op("Identity", {r}, "v");
        (void)v;
        const Value& like = b.g.value(x);
        const Attribute then_b = branch("v", like, "then_out");
        const Attribute else_b = branch("x", like, "else_out");
        b.output(b.op("If", {c}, "y", [&](Node& n) {
            n.attributes.emplace_back("then_branch", then_b);
            n.attributes.emplace_back("else_branch", else_b);
        }));
        return b.done();
    };
    Graph g = make();
    run_level1(g, kLevel1);
    // "v" is still produced under its name (Relu now writes it).
    const ValueId v = id_of(g, "v");
    REQUIRE(g.value(v).producer >= 0);
    CHECK(count_ops(g, "Identity") == 0);
    for (bool cond : {true, false})
        check_same(make(), g, {{"x", iota_f32({2, 2})}, {"c", Tensor::scalar(cond)}});
}

TEST_CASE("eliminate_identity collapses Reshape chains and removes no-op reshapes", "[passes]") {
    SECTION("chain ending in a constant Reshape") {
        auto make = [] {
            Builder b;
            const ValueId x = b.input("x", DType::f32, {2, 3, 4});
            ValueId v = b.op("Reshape", {x, b.init("s1", i64({6, 4}))}, "a");
            v = b.op("Unsqueeze", {v, b.init("ax", i64({0}))}, "b");
            b.output(b.op("Reshape", {v, b.init("s2", i64({4, -1}))}, "y"));
            return b.done();
        };
        Graph g = make();
        auto r = run_level1(g, kLevel1);
        CHECK(r.count("eliminate_identity") == 1);
        REQUIRE(g.nodes.size() == 1);
        CHECK(g.nodes[0].op_type == "Reshape");
        CHECK(g.nodes[0].inputs[0] == id_of(g, "x"));
        check_same(make(), g, {{"x", iota_f32({2, 3, 4})}});
    }
    SECTION("Squeeze/Unsqueeze with a static declared result") {
        auto make = [] {
            Builder b;
            const ValueId x = b.input("x", DType::f32, {1, 6});
            ValueId v = b.op("Squeeze", {x, b.init("ax0", i64({0}))}, "s");
            v = b.op("Unsqueeze", {v, b.init("ax1", i64({1}))}, "z");
            b.g.value(v).dtype = DType::f32;
            b.g.value(v).shape = SymbolicShape::from(Shape{6, 1});
            b.output(v);
            return b.done();
        };
        Graph g = make();
        auto r = run_level1(g, kLevel1);
        CHECK(r.count("eliminate_identity") == 1);
        REQUIRE(g.nodes.size() == 1);
        CHECK(g.nodes[0].op_type == "Reshape");
        CHECK(g.nodes[0].outputs[0] == id_of(g, "z"));
        check_same(make(), g, {{"x", iota_f32({1, 6})}});
    }
    SECTION("Reshape to the same shape, Flatten of a matrix") {
        auto make = [] {
            Builder b;
            const ValueId x = b.input("x", DType::f32, {2, 3, 4});
            ValueId v = b.op("Reshape", {x, b.init("same", i64({2, -1, 4}))}, "a");
            v = b.op("Relu", {v}, "r");
            const ValueId m = b.input("m", DType::f32, {3, 5});
            b.output(b.op("Flatten", {m}, "f", [](Node& n) { set_attr(n, "axis", std::int64_t{1}); }));
            b.output(v);
            return b.done();
        };
        Graph g = make();
        auto r = run_level1(g, kLevel1);
        // The Flatten reads a graph input and writes a graph output: it stays.
        CHECK(r.count("eliminate_identity") == 1);
        CHECK(count_ops(g, "Reshape") == 0);
        CHECK(count_ops(g, "Flatten") == 1);
        check_same(make(), g, {{"x", iota_f32({2, 3, 4})}, {"m", iota_f32({3, 5})}});
    }
    SECTION("a copied dim (0) with symbolic input is left alone") {
        Builder b;
        const ValueId x = b.input("x", DType::f32, {-1, 3, 4});
        ValueId v = b.op("Reshape", {x, b.init("s1", i64({0, 12}))}, "a");
        b.output(b.op("Reshape", {v, b.init("s2", i64({0, 3, 4}))}, "y"));
        Graph g = b.done();
        auto r = run_level1(g, {"eliminate_identity"});
        CHECK(r.count("eliminate_identity") == 0);
        CHECK(g.nodes.size() == 2);
    }
}

TEST_CASE("eliminate_identity merges Transposes and removes no-op Expand/Tile", "[passes]") {
    auto make = [] {
        Builder b;
        const ValueId x = b.input("x", DType::f32, {2, 3, 4});
        ValueId t = b.op("Transpose", {x}, "t1", [](Node& n) { set_attr(n, "perm", std::vector<std::int64_t>{0, 2, 1}); });
        b.output(b.op("Transpose", {t}, "t2", [](Node& n) { set_attr(n, "perm", std::vector<std::int64_t>{1, 0, 2}); }));
        const ValueId m = b.input("m", DType::f32, {2, 3});
        ValueId v = b.op("Expand", {m, b.init("ones", i64({1, 3}))}, "e1");
        v = b.op("Tile", {v, b.init("reps", i64({1, 1}))}, "tl");
        v = b.op("Expand", {v, b.init("same", i64({2, 3}))}, "e2");
        b.output(b.op("Expand", {v, b.init("grow", i64({3, 2, 3}))}, "e3"));
        return b.done();
    };
    Graph g = make();
    auto r = run_level1(g, kLevel1);
    CHECK(r.count("eliminate_identity") == 4);  // one merge, two Expands, one Tile
    CHECK(count_ops(g, "Transpose") == 1);
    CHECK(count_ops(g, "Tile") == 0);
    CHECK(count_ops(g, "Expand") == 1);
    check_same(make(), g, {{"x", iota_f32({2, 3, 4})}, {"m", iota_f32({2, 3})}});
}

// ---- constant_folding -----------------------------------------------------------------------

TEST_CASE("constant_folding folds Constant chains and keeps graph outputs by name", "[passes]") {
    auto make = [] {
        Builder b;
        const ValueId x = b.input("x", DType::f32, {2, 3});
        const ValueId c = b.op("Constant", {}, "c", [](Node& n) {
            Attribute a;
            a.kind = AttrKind::t;
            a.t = f32({3}, {1.0f, 2.0f, 3.0f});
            n.attributes.emplace_back("value", a);
        });
        const ValueId w = b.init("w", f32({3}, {0.5f, -1.0f, 2.0f}));
        const ValueId s = b.op("Add", {c, w}, "s");
        b.output(b.op("Mul", {x, s}, "y"));
        b.output(b.op("Neg", {s}, "k"));  // a graph output computed from constants only
        return b.done();
    };
    Graph g = make();
    auto r = run_level1(g, kLevel1);
    CHECK(r.count("constant_folding") == 3);  // Constant, Add, Neg
    REQUIRE(g.nodes.size() == 1);
    CHECK(g.nodes[0].op_type == "Mul");
    const Value& k = g.value(id_of(g, "k"));
    REQUIRE(k.initializer);
    CHECK(k.initializer->data<float>()[2] == -5.0f);
    CHECK(g.value(g.outputs[1]).name == "k");
    check_same(make(), g, {{"x", iota_f32({2, 3})}});
    // The engine returns the folded output as a copy it owns.
    auto out = InferenceEngine::compile(g).run({{"x", iota_f32({2, 3})}});
    CHECK(out[1].name == "k");
    CHECK(out[1].tensor.data<float>()[0] == -1.5f);
}

TEST_CASE("constant_folding folds Shape chains of static and partly symbolic shapes", "[passes]") {
    SECTION("static input shape") {
        auto make = [] {
            Builder b;
            const ValueId x = b.input("x", DType::f32, {2, 3, 4});
            const ValueId s = b.op("Shape", {x}, "s");
            ValueId d = b.op("Gather", {s, b.init("one", Tensor::scalar(std::int64_t{1}))}, "d",
                             [](Node& n) { set_attr(n, "axis", std::int64_t{0}); });
            d = b.op("Unsqueeze", {d, b.init("ax", i64({0}))}, "du");
            const ValueId shp = b.op("Concat", {d, b.init("m1", i64({-1}))}, "shp",
                                     [](Node& n) { set_attr(n, "axis", std::int64_t{0}); });
            b.output(b.op("Reshape", {x, shp}, "y"));
            return b.done();
        };
        Graph g = make();
        auto r = run_level1(g, kLevel1);
        CHECK(r.count("constant_folding") == 4);
        REQUIRE(g.nodes.size() == 1);
        const Value& shp = g.value(g.nodes[0].inputs[1]);
        REQUIRE(shp.initializer);
        CHECK(shp.initializer->data<std::int64_t>()[0] == 3);
        check_same(make(), g, {{"x", iota_f32({2, 3, 4})}});
    }
    SECTION("symbolic batch: static dims fold, the batch dim does not") {
        auto make = [] {
            Builder b;
            const ValueId x = b.input("x", DType::f32, {-1, 3, 4});
            const ValueId s = b.op("Shape", {x}, "s");
            auto gather = [&](std::int64_t i, const std::string& name) {
                ValueId d = b.op("Gather", {s, b.init(name + "_i", Tensor::scalar(i))}, name,
                                 [](Node& n) { set_attr(n, "axis", std::int64_t{0}); });
                return b.op("Unsqueeze", {d, b.init(name + "_ax", i64({0}))}, name + "_u");
            };
            const ValueId d0 = gather(0, "d0");
            const ValueId d2 = gather(2, "d2");
            const ValueId shp = b.op("Concat", {d0, b.init("m1", i64({-1})), d2}, "shp",
                                     [](Node& n) { set_attr(n, "axis", std::int64_t{0}); });
            b.output(b.op("Reshape", {x, shp}, "y"));
            return b.done();
        };
        Graph g = make();
        auto r = run_level1(g, {"constant_folding"});
        CHECK(r.count("constant_folding") == 2);  // Gather(s, 2) and its Unsqueeze
        CHECK(g.value(id_of(g, "d2_u")).initializer.has_value());
        CHECK_FALSE(g.value(id_of(g, "d0_u")).initializer.has_value());
        CHECK_FALSE(g.value(id_of(g, "shp")).initializer.has_value());
        for (std::int64_t batch : {1, 5})
            check_same(make(), g, {{"x", iota_f32({batch, 3, 4})}});
    }
    SECTION("intermediate shapes come from load-time inference") {
        auto make = [] {
            Builder b;
            const ValueId x = b.input("x", DType::f32, {2, 3});
            const ValueId r = b.op("Relu", {x}, "r");
            const ValueId s = b.op("Shape", {r}, "s");
            b.output(b.op("Cast", {s}, "y", [](Node& n) { set_attr(n, "to", std::int64_t{1}); }));
            b.output(r);
            return b.done();
        };
        Graph g = make();
        auto r = run_level1(g, {"constant_folding"});
        CHECK(r.count("constant_folding") == 2);
        CHECK(g.value(id_of(g, "r")).shape.to_string() == "[2,3]");
        check_same(make(), g, {{"x", iota_f32({2, 3})}});
    }
}

TEST_CASE("constant_folding refuses oversize results before evaluating them", "[passes]") {
    auto make = [] {
        Builder b;
        const std::int64_t big = std::int64_t{1} << 20;  // [2^20, 2^20]: 2^40 elements
        const ValueId one = b.init("one", f32({1}, {1.0f}));
        b.output(b.op("Expand", {one, b.init("big", i64({big, big}))}, "e"));
        b.output(b.op("ConstantOfShape", {b.init("big2", i64({big, big}))}, "c"));
        b.output(b.op("Tile", {one, b.init("reps", i64({big * big}))}, "t"));
        b.output(b.op("Range", {b.init("r0", Tensor::scalar(std::int64_t{0})),
                                b.init("r1", Tensor::scalar(big * big)),
                                b.init("r2", Tensor::scalar(std::int64_t{1}))},
                      "r"));
        return b.done();
    };
    Graph g = make();
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_level1(g, kLevel1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(s < 2.0);
    CHECK(r.count("constant_folding") == 0);
    CHECK(g.nodes.size() == 4);

    // A small limit: 8 floats (32 bytes) do not fit in 16 bytes.
    Builder b2;
    const ValueId x = b2.input("x", DType::f32, {8});
    const ValueId a = b2.init("a", iota_f32({8}));
    b2.output(b2.op("Mul", {x, b2.op("Neg", {a}, "na")}, "y"));
    Graph small = b2.done();
    Graph copy = small;
    CHECK(run_level1(small, {"constant_folding"}, 16).count("constant_folding") == 0);
    CHECK(run_level1(copy, {"constant_folding"}, 32).count("constant_folding") == 1);
}

TEST_CASE("constant_folding skips random ops, subgraphs and nodes that fail", "[passes]") {
    Builder b;
    const ValueId rn = b.op("RandomNormal", {}, "rn", [](Node& n) {
        set_attr(n, "shape", std::vector<std::int64_t>{2, 2});
    });
    b.output(b.op("Add", {rn, b.init("c", f32({1}, {1.0f}))}, "y"));
    // Reshape of 6 elements to 4: fails when run; must stay for the engine to report.
    b.output(b.op("Reshape", {b.init("six", iota_f32({6})), b.init("four", i64({4}))}, "bad"));
    Graph g = b.done();
    OptimizeReport r;
    OptimizeOptions o;
    o.level = 1;
    REQUIRE(try_optimize(g, o, r).is_ok());
    CHECK(r.count("constant_folding") == 0);
    CHECK(count_ops(g, "RandomNormal") == 1);
    CHECK(count_ops(g, "Reshape") == 1);
}

TEST_CASE("constant_folding folds a value a subgraph captures into an initializer", "[passes]") {
    auto make = [] {
        Builder b;
        const ValueId c = b.input("c", DType::boolean, {});
        const ValueId x = b.input("x", DType::f32, {3});
        const ValueId v = b.op("Add", {b.init("a", f32({3}, {1, 2, 3})), b.init("b", f32({3}, {4, 5, 6}))}, "v");
        const Attribute then_b = branch("v", b.g.value(x), "then_out");
        const Attribute else_b = branch("x", b.g.value(x), "else_out");
        (void)v;
        b.output(b.op("If", {c}, "y", [&](Node& n) {
            n.attributes.emplace_back("then_branch", then_b);
            n.attributes.emplace_back("else_branch", else_b);
        }));
        return b.done();
    };
    Graph g = make();
    auto r = run_level1(g, kLevel1);
    CHECK(r.count("constant_folding") == 1);
    CHECK(g.value(id_of(g, "v")).initializer.has_value());
    for (bool cond : {true, false})
        check_same(make(), g, {{"c", Tensor::scalar(cond)}, {"x", iota_f32({3})}});
}

// ---- eliminate_common_subexpressions --------------------------------------------------------

TEST_CASE("eliminate_common_subexpressions merges identical nodes and initializers", "[passes]") {
    auto make = [] {
        Builder b;
        const ValueId x = b.input("x", DType::f32, {2, 3});
        const ValueId r1 = b.op("Relu", {x}, "r1");
        const ValueId r2 = b.op("Relu", {x}, "r2");
        // Same values under two names: merged first, then the Muls match.
        const ValueId m1 = b.op("Mul", {r1, b.init("w1", f32({3}, {1, 2, 3}))}, "m1");
        const ValueId m2 = b.op("Mul", {r2, b.init("w2", f32({3}, {1, 2, 3}))}, "m2");
        // Different attributes: not merged.
        const ValueId s0 = b.op("Softmax", {m1}, "s0", [](Node& n) { set_attr(n, "axis", std::int64_t{0}); });
        const ValueId s1 = b.op("Softmax", {m2}, "s1", [](Node& n) { set_attr(n, "axis", std::int64_t{1}); });
        b.output(b.op("Add", {s0, s1}, "y"));
        return b.done();
    };
    Graph g = make();
    auto r = run_level1(g, {"eliminate_common_subexpressions", "eliminate_dead_code"});
    CHECK(r.count("eliminate_common_subexpressions") == 3);  // w2, r2, m2
    CHECK(count_ops(g, "Relu") == 1);
    CHECK(count_ops(g, "Mul") == 1);
    CHECK(count_ops(g, "Softmax") == 2);
    CHECK_FALSE(g.value(id_of(g, "w2")).initializer.has_value());  // dropped as unread
    check_same(make(), g, {{"x", iota_f32({2, 3})}});
}

TEST_CASE("eliminate_common_subexpressions leaves random ops and pinned outputs alone", "[passes]") {
    Builder b;
    const ValueId x = b.input("x", DType::f32, {2, 3});
    auto random = [](Node& n) { set_attr(n, "shape", std::vector<std::int64_t>{2, 3}); };
    b.output(b.op("Add", {b.op("RandomUniform", {}, "u1", random), b.op("RandomUniform", {}, "u2", random)}, "y"));
    b.output(b.op("Sigmoid", {x}, "o1"));
    b.output(b.op("Sigmoid", {x}, "o2"));  // both graph outputs: each keeps its producer
    Graph g = b.done();
    auto r = run_level1(g, {"eliminate_common_subexpressions"});
    CHECK(r.count("eliminate_common_subexpressions") == 0);
    CHECK(count_ops(g, "RandomUniform") == 2);
    CHECK(count_ops(g, "Sigmoid") == 2);
}

// ---- eliminate_dead_code --------------------------------------------------------------------

TEST_CASE("eliminate_dead_code removes unused nodes and frees unread initializers", "[passes]") {
    auto make = [] {
        Builder b;
        const ValueId x = b.input("x", DType::f32, {2, 3});
        const ValueId w = b.init("w", iota_f32({3}));
        b.init("never_read", iota_f32({4}));
        b.op("Tanh", {b.op("Mul", {x, w}, "dead1")}, "dead2");
        b.output(b.op("Relu", {x}, "y"));
        return b.done();
    };
    Graph g = make();
    auto r = run_level1(g, {"eliminate_dead_code"});
    CHECK(r.count("eliminate_dead_code") == 4);  // 2 nodes, 2 initializers
    CHECK(g.nodes.size() == 1);
    CHECK_FALSE(g.value(id_of(g, "w")).initializer.has_value());
    CHECK_FALSE(g.value(id_of(g, "never_read")).initializer.has_value());
    check_same(make(), g, {{"x", iota_f32({2, 3})}});
    // The optimized graph still saves and reloads.
    const auto path = std::filesystem::temp_directory_path() /
                      ("dsinfer_dce_" + std::to_string(::getpid()) + ".onnx");
    save_onnx(g, path);
    Graph back = load_onnx(path);
    std::filesystem::remove(path);
    CHECK(back.nodes.size() == 1);
    CHECK_FALSE(back.find_value("never_read").has_value());
}

TEST_CASE("eliminate_dead_code keeps captured values and frees them with their reader", "[passes]") {
    auto make = [](bool if_used) {
        Builder b;
        const ValueId c = b.input("c", DType::boolean, {});
        const ValueId x = b.input("x", DType::f32, {3});
        const ValueId v = b.op("Relu", {x}, "v");
        (void)v;
        const Attribute then_b = branch("v", b.g.value(x), "then_out");
        const Attribute else_b = branch("x", b.g.value(x), "else_out");
        const ValueId y = b.op("If", {c}, "y", [&](Node& n) {
            n.attributes.emplace_back("then_branch", then_b);
            n.attributes.emplace_back("else_branch", else_b);
        });
        b.output(if_used ? y : b.op("Sigmoid", {x}, "s"));
        return b.done();
    };
    Graph used = make(true);
    CHECK(run_level1(used, {"eliminate_dead_code"}).count("eliminate_dead_code") == 0);
    CHECK(count_ops(used, "Relu") == 1);
    check_same(make(true), used, {{"c", Tensor::scalar(true)}, {"x", iota_f32({3})}});

    Graph unused = make(false);
    CHECK(run_level1(unused, {"eliminate_dead_code"}).count("eliminate_dead_code") == 2);
    REQUIRE(unused.nodes.size() == 1);
    CHECK(unused.nodes[0].op_type == "Sigmoid");
}

// ---- all of level 1, and save_onnx ----------------------------------------------------------

TEST_CASE("save_onnx round trip runs identically (attributes, subgraphs, opsets, value_info)",
          "[passes][onnx]") {
    auto make = [] {
        Builder b;
        const ValueId x = b.input("x", DType::f32, {-1, 4});
        const ValueId c = b.input("c", DType::boolean, {});
        const ValueId w = b.init("w", iota_f32({4, 4}, 0.125f));
        ValueId v = b.op("MatMul", {x, w}, "mm");
        v = b.op("LeakyRelu", {v}, "lr", [](Node& n) { set_attr(n, "alpha", 0.2f); });
        v = b.op("Pad", {v, b.init("pads", i64({0, 1, 0, 1}))}, "pad",
                 [](Node& n) { set_attr(n, "mode", std::string("reflect")); });
        v = b.op("Transpose", {v}, "tr", [](Node& n) { set_attr(n, "perm", std::vector<std::int64_t>{1, 0}); });
        const ValueId k = b.op("Constant", {}, "k", [](Node& n) {
            Attribute a;
            a.kind = AttrKind::t;
            a.t = f32({1}, {0.5f});
            n.attributes.emplace_back("value", a);
        });
        v = b.op("Mul", {v, k}, "scaled");
        const Attribute then_b = branch("scaled", Value{}, "then_out");
        const Attribute else_b = branch("tr", Value{}, "else_out");
        b.output(b.op("If", {c}, "y", [&](Node& n) {
            n.attributes.emplace_back("then_branch", then_b);
            n.attributes.emplace_back("else_branch", else_b);
        }));
        b.output(b.op("Cast", {b.op("Shape", {x}, "shape")}, "shape_f",
                      [](Node& n) { set_attr(n, "to", std::int64_t{1}); }));
        passes::ensure_dsinfer_opset(b.g);
        return b.done();
    };
    const auto dir = std::filesystem::temp_directory_path();
    const auto path = dir / ("dsinfer_roundtrip_" + std::to_string(::getpid()) + ".onnx");
    const std::vector<NamedTensor> in = {{"x", iota_f32({3, 4})}, {"c", Tensor::scalar(true)}};
    const std::vector<NamedTensor> in2 = {{"x", iota_f32({2, 4})}, {"c", Tensor::scalar(false)}};

    Graph g = make();
    save_onnx(g, path);
    Graph back = load_onnx(path);
    CHECK(back.opset("com.dsinfer") == 1);
    CHECK(back.opset("") == 17);
    CHECK(back.value(back.inputs[0]).shape.to_string() == "[batch,4]");
    CHECK(back.nodes.size() == g.nodes.size());
    check_same(make(), back, in);
    check_same(make(), back, in2);

    // The engine's dump of the optimized graph reloads and runs the same; it carries inferred
    // shapes as value_info.
    const auto dump = dir / ("dsinfer_dump_" + std::to_string(::getpid()) + ".onnx");
    EngineOptions eo;
    eo.dump_optimized_graph = dump;
    auto engine = InferenceEngine::compile(make(), eo);
    CHECK(engine.optimization_report().count("constant_folding") >= 1);
    Graph dumped = load_onnx(dump);
    CHECK(dumped.nodes.size() == engine.graph().nodes.size());
    check_same(make(), dumped, in);
    check_same(make(), dumped, in2);
    std::filesystem::remove(path);
    std::filesystem::remove(dump);

    // Attribute kinds whose values the IR does not hold cannot be written.
    Graph bad = make();
    Attribute sparse;
    sparse.kind = AttrKind::sparse_tensor;
    bad.nodes[0].attributes.emplace_back("sparse", sparse);
    try {
        save_onnx(bad, path);
        FAIL("save_onnx accepted a sparse_tensor attribute");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::unsupported);
    }
}

TEST_CASE("level 1 on a transformer-like block: fires and matches level 0", "[passes]") {
    // Shape-derived head split with a symbolic batch, duplicated mask arithmetic, Identity and
    // Dropout as exporters leave them.
    auto make = [] {
        Builder b(13);
        const ValueId x = b.input("x", DType::f32, {-1, 8, 16});
        const ValueId wq = b.init("wq", iota_f32({16, 16}, 0.01f));
        const ValueId bq = b.init("bq", iota_f32({16}, 0.02f));
        ValueId q = b.op("Add", {b.op("MatMul", {x, wq}, "q_mm"), bq}, "q");
        q = b.op("Dropout", {q}, "q_drop");
        const ValueId s = b.op("Shape", {x}, "x_shape");
        auto dim = [&](std::int64_t i, const std::string& n) {
            ValueId d = b.op("Gather", {s, b.init(n + "_i", Tensor::scalar(i))}, n,
                             [](Node& node) { set_attr(node, "axis", std::int64_t{0}); });
            return b.op("Unsqueeze", {d, b.init(n + "_ax", i64({0}))}, n + "_u");
        };
        const ValueId shp = b.op("Concat", {dim(0, "b"), dim(1, "t"), b.init("heads", i64({4})), b.init("hd", i64({4}))},
                                 "split_shape", [](Node& n) { set_attr(n, "axis", std::int64_t{0}); });
        ValueId h = b.op("Reshape", {q, shp}, "split");
        h = b.op("Transpose", {h}, "heads_first", [](Node& n) { set_attr(n, "perm", std::vector<std::int64_t>{0, 2, 1, 3}); });
        h = b.op("Transpose", {h}, "heads_back", [](Node& n) { set_attr(n, "perm", std::vector<std::int64_t>{0, 2, 1, 3}); });
        const ValueId merged = b.op("Reshape", {h, b.init("merge", i64({0, 0, 16}))}, "merged");
        const ValueId scale = b.op("Sqrt", {b.init("sixteen", Tensor::scalar(16.0f))}, "scale");
        const ValueId a1 = b.op("Div", {merged, scale}, "a1");
        const ValueId a2 = b.op("Div", {merged, scale}, "a2");
        b.output(b.op("Identity", {b.op("Add", {a1, a2}, "sum")}, "y"));
        return b.done();
    };
    Graph g = make();
    OptimizeOptions o;
    o.level = 1;
    auto r = optimize(g, o);
    CHECK(r.count("eliminate_identity") >= 3);  // Dropout, Transpose pair, Identity
    CHECK(r.count("constant_folding") >= 3);    // Sqrt, Gather(1) chain
    CHECK(r.count("eliminate_common_subexpressions") == 2);  // Div, and "hd" == "heads"

    CHECK(r.count("eliminate_dead_code") >= 2);
    CHECK(r.nodes_after < r.nodes_before);
    CHECK(count_ops(g, "Transpose") == 0);
    CHECK(count_ops(g, "Div") == 1);
    for (std::int64_t batch : {1, 3})
        check_same(make(), g, {{"x", iota_f32({batch, 8, 16})}});
}

// ---- the pipeline: user passes, disabled passes, the evaluator ----------------------------

namespace {

/// A user pass: logs its name and how many `op` nodes the graph has when it runs.
class ProbePass final : public GraphPass {
public:
    ProbePass(std::string name, int level, std::string op, std::vector<std::string>* log)
        : name_(std::move(name)), level_(level), op_(std::move(op)), log_(log) {}
    std::string_view name() const noexcept override { return name_; }
    int level() const noexcept override { return level_; }
    Status apply(Graph& graph, PassContext& ctx) const override {
        log_->push_back(name_ + ":" + std::to_string(count_ops(graph, op_)));
        ctx.fired(name_);
        return Status::ok();
    }

private:
    std::string name_;
    int level_;
    std::string op_;
    std::vector<std::string>* log_;
};

/// y = x + Sqrt(16): Sqrt folds only with an evaluator.
Graph sqrt_graph() {
    Builder b;
    const ValueId x = b.input("x", DType::f32, {-1, 4});
    b.output(b.op("Add", {x, b.op("Sqrt", {b.init("sixteen", Tensor::scalar(16.0f))}, "s")}, "y"));
    return b.done();
}

/// An evaluator that counts its calls and forwards to kernel_evaluator().
struct CountingEvaluator final : GraphEvaluator {
    mutable int shapes = 0, evaluations = 0;
    Status infer_shapes(Graph& g) const override {
        ++shapes;
        return kernel_evaluator().infer_shapes(g);
    }
    StatusOr<std::vector<Tensor>> evaluate(const Node& n, const std::vector<Tensor>& inputs,
                                           const std::vector<OpsetImport>& opsets,
                                           std::uint64_t max_bytes) const override {
        ++evaluations;
        return kernel_evaluator().evaluate(n, inputs, opsets, max_bytes);
    }
};

}  // namespace

TEST_CASE("pipeline: user passes join the defaults and run in order", "[passes]") {
    std::vector<std::string> log;
    OptimizeOptions o;
    o.passes = PassPipeline::defaults()
                   .insert_before("constant_folding",
                                  std::make_shared<ProbePass>("before_fold", 1, "Sqrt", &log))
                   .insert_after("constant_folding",
                                 std::make_shared<ProbePass>("after_fold", 1, "Sqrt", &log))
                   .add(std::make_shared<ProbePass>("last", 2, "Sqrt", &log));
    CHECK(o.passes.size() == default_passes().size() + 3);
    Graph g = sqrt_graph();
    OptimizeReport r = optimize(g, o);
    CHECK(log == std::vector<std::string>{"before_fold:1", "after_fold:0", "last:0"});
    CHECK(r.count("before_fold") == 1);
    CHECK(r.count("constant_folding") == 1);
    check_same(sqrt_graph(), g, {{"x", iota_f32({3, 4})}});

    SECTION("levels filter user passes too") {
        log.clear();
        o.level = 1;
        Graph h = sqrt_graph();
        (void)optimize(h, o);
        CHECK(log == std::vector<std::string>{"before_fold:1", "after_fold:0"});
    }
    SECTION("an explicit list replaces the defaults") {
        log.clear();
        OptimizeOptions only;
        only.passes.add(std::make_shared<ProbePass>("alone", 1, "Sqrt", &log));
        Graph h = sqrt_graph();
        const OptimizeReport rr = optimize(h, only);
        CHECK(log == std::vector<std::string>{"alone:1"});
        CHECK(rr.count("constant_folding") == 0);
        CHECK(count_ops(h, "Sqrt") == 1);
    }
    SECTION("inserting next to a pass that is not there, or a null pass, is invalid_argument") {
        PassPipeline p = PassPipeline::defaults();
        const auto probe = std::make_shared<ProbePass>("p", 1, "Sqrt", &log);
        const auto code = [](const std::function<void()>& f) {
            try {
                f();
            } catch (const Error& e) {
                return e.code();
            }
            return ErrorCode::ok;
        };
        CHECK(code([&] { p.insert_after("no_such_pass", probe); }) == ErrorCode::invalid_argument);
        CHECK(code([&] { p.insert_before("no_such_pass", probe); }) == ErrorCode::invalid_argument);
        CHECK(code([&] { p.add(nullptr); }) == ErrorCode::invalid_argument);
        CHECK(p.size() == default_passes().size());
    }
}

TEST_CASE("pipeline: disabled passes, default and user, and unknown names", "[passes]") {
    std::vector<std::string> log;
    OptimizeOptions o;
    o.passes = PassPipeline::defaults().add(std::make_shared<ProbePass>("probe", 1, "Sqrt", &log));
    o.disabled_passes = {"constant_folding", "probe"};
    Graph g = sqrt_graph();
    OptimizeReport r = optimize(g, o);
    CHECK(log.empty());
    CHECK(r.count("constant_folding") == 0);
    CHECK(count_ops(g, "Sqrt") == 1);
    // A name no pass has is ignored (as before pipelines existed), not an error.
    OptimizeOptions unknown;
    unknown.disabled_passes = {"no_such_pass"};
    Graph h = sqrt_graph();
    OptimizeReport ru;
    REQUIRE(try_optimize(h, unknown, ru).is_ok());
    CHECK(ru.count("constant_folding") == 1);
    CHECK(count_ops(h, "Sqrt") == 0);
}

TEST_CASE("pipeline: with an evaluator constants fold and shapes are inferred; without, less",
          "[passes]") {
    // x[batch, 8] -> MatMul W1, MatMul W2 -> Add -> LayerNormalization: proving the Add a
    // same-shape residual (fuse_skip_layer_norm) needs the MatMuls' inferred shapes.
    const auto make = [] {
        Builder b;
        const ValueId x = b.input("x", DType::f32, {-1, 8});
        const ValueId a = b.op("MatMul", {x, b.init("w1", iota_f32({8, 8}, 0.1f))}, "a");
        const ValueId c = b.op("MatMul", {x, b.init("w2", iota_f32({8, 8}, 0.2f))}, "c");
        const ValueId s = b.op("Add", {a, c}, "s");
        const ValueId y = b.op("LayerNormalization",
                               {s, b.init("gamma", iota_f32({8}, 0.3f)),
                                b.init("beta", iota_f32({8}, 0.05f))},
                               "ln", [](Node& n) { set_attr(n, "axis", std::int64_t{-1}); });
        const ValueId k = b.op("Sqrt", {b.init("sixteen", Tensor::scalar(16.0f))}, "k");
        b.output(b.op("Mul", {y, k}, "y"));
        return b.done();
    };
    const std::vector<NamedTensor> in{{"x", iota_f32({3, 8})}};

    Graph without = make();
    const OptimizeReport r0 = run_passes(without, {.level = 2});  // no evaluator
    CHECK(r0.count("constant_folding") == 0);
    // The ops' own shape rules (src/ops/op_info.hpp) prove the residual without an evaluator.
    CHECK(r0.count("fuse_skip_layer_norm") == 1);
    CHECK(count_ops(without, "Sqrt") == 1);
    check_same(make(), without, in);

    Graph with = make();
    const OptimizeReport r1 = optimize(with, {.level = 2});  // kernel_evaluator() by default
    CHECK(r1.count("constant_folding") == 1);
    CHECK(r1.count("fuse_skip_layer_norm") == 1);
    CHECK(count_ops(with, "Sqrt") == 0);
    check_same(make(), with, in);

    // The options' evaluator is the one used, by optimize() and run_passes() alike.
    CountingEvaluator counting;
    Graph g = make();
    OptimizeOptions o;
    o.level = 2;
    o.evaluator = &counting;
    const OptimizeReport r2 = run_passes(g, o);
    CHECK(counting.evaluations >= 1);
    CHECK(counting.shapes == 0);  // the ops' rules annotated every node: not asked
    CHECK(r2.fired == r1.fired);
}
