// The passes alone: this executable links only the dsinfer_passes target (no executor, no
// kernel, no protobuf), so it builds only while src/passes/ needs nothing of the engine. It runs
// the default pipeline with a user pass and no evaluator, then with an evaluator of its own, on
// graphs built on the IR, and checks what each did. Public headers only.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "dsinfer/passes.hpp"

using namespace dsinfer;

namespace {

int count_ops(const Graph& g, const std::string& op) {
    int n = 0;
    for (const Node& node : g.nodes) n += node.op_type == op ? 1 : 0;
    return n;
}

Tensor f32(const Shape& s, float start) {
    Tensor t = Tensor::zeros(DType::f32, s);
    for (std::int64_t i = 0; i < t.num_elements(); ++i)
        t.data<float>()[i] = start + 0.125f * static_cast<float>(i);
    return t;
}

/// x[batch, 4] -> Identity -> MatMul(W) -> Add(bias) -> Relu -> Mul(Constant 2) -> Add(c2)
/// where c2 = Add(one, one) of initializers; plus a dead Neg of x.
Graph make_graph() {
    Graph g;
    g.opset_imports.push_back({"", 17});
    SymbolicShape xs;
    xs.known = true;
    xs.dims = {Dim::named("batch"), Dim::fixed(4)};
    const ValueId x = g.add_value("x", DType::f32, xs);
    g.inputs = {x};
    const ValueId id = g.add_value("id"), mm = g.add_value("mm"), biased = g.add_value("biased"),
                  act = g.add_value("act"), two = g.add_value("two"), scaled = g.add_value("scaled"),
                  c2 = g.add_value("c2"), y = g.add_value("y"), dead = g.add_value("dead");
    g.add_node("Identity", {x}, {id}, "identity");
    g.add_node("MatMul", {id, g.add_initializer("w", f32(Shape{4, 4}, -1.0f))}, {mm}, "matmul");
    g.add_node("Add", {mm, g.add_initializer("bias", f32(Shape{4}, 0.5f))}, {biased}, "bias");
    g.add_node("Relu", {biased}, {act}, "relu");
    Node& constant = g.add_node("Constant", {}, {two}, "two");
    Attribute value;
    value.kind = AttrKind::t;
    value.t = Tensor::scalar(2.0f);
    constant.attributes.emplace_back("value", value);
    g.add_node("Mul", {act, two}, {scaled}, "scale");
    const ValueId one = g.add_initializer("one", Tensor::scalar(1.0f));
    g.add_node("Add", {one, one}, {c2}, "one_plus_one");
    g.add_node("Add", {scaled, c2}, {y}, "shift");
    g.add_node("Neg", {x}, {dead}, "dead");
    g.outputs = {y};
    throw_if_error(g.sort_topologically());
    return g;
}

/// A user pass: renames every Relu node (and counts them).
class TagRelu final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "tag_relu"; }
    int level() const noexcept override { return 1; }
    Status apply(Graph& g, PassContext& ctx) const override {
        int n = 0;
        for (Node& node : g.nodes)
            if (node.op_type == "Relu") {
                node.name = "tagged_" + node.name;
                ++n;
            }
        ctx.fired(name(), n);
        return Status::ok();
    }
};

/// An offline tool's own evaluator: float32 Add of two same-shape tensors, nothing else.
struct AddOnly final : GraphEvaluator {
    mutable int calls = 0;
    Status infer_shapes(Graph&) const override { return Status::ok(); }
    StatusOr<std::vector<Tensor>> evaluate(const Node& n, const std::vector<Tensor>& in,
                                           const std::vector<OpsetImport>&,
                                           std::uint64_t) const override {
        ++calls;
        if (n.op_type != "Add" || in.size() != 2 || in[0].dtype() != DType::f32 ||
            in[0].shape() != in[1].shape())
            return Status::error(ErrorCode::unsupported, "AddOnly: ", n.op_type);
        Tensor out = Tensor::zeros(DType::f32, in[0].shape());
        for (std::int64_t i = 0; i < out.num_elements(); ++i)
            out.data<float>()[i] = in[0].data<float>()[i] + in[1].data<float>()[i];
        return std::vector<Tensor>{out};
    }
};

}  // namespace

TEST_CASE("offline: the default passes and a user pass run without an evaluator", "[passes]") {
    Graph g = make_graph();
    OptimizeOptions o;
    o.passes = PassPipeline::defaults().insert_before("fuse_matmul_bias_activation",
                                                      std::make_shared<TagRelu>());
    const OptimizeReport r = run_passes(g, o);
    CHECK(r.count("tag_relu") == 1);                 // ran before the fusion took the Relu
    CHECK(r.count("eliminate_identity") == 1);
    CHECK(r.count("constant_folding") == 1);         // the Constant node only
    CHECK(r.count("fuse_matmul_bias_activation") == 1);
    CHECK(count_ops(g, "Identity") == 0);
    CHECK(count_ops(g, "Constant") == 0);
    CHECK(count_ops(g, "Neg") == 0);                 // dead code
    CHECK(count_ops(g, "FusedMatMul") == 1);
    CHECK(count_ops(g, "Relu") == 0);
    // Without an evaluator Add(one, one) cannot be computed: it stays beside the last Add.
    CHECK(count_ops(g, "Add") == 2);
    CHECK(g.opset(kDsinferDomain) == kDsinferOpsetVersion);
    for (const Node& n : g.nodes)
        if (n.op_type == "FusedMatMul") {
            const Attribute* act = n.find_attr("activation");
            REQUIRE(act != nullptr);
            CHECK(act->s == "Relu");
            CHECK(n.inputs.size() == 3);  // A, W, bias
        }
    CHECK(g.sort_topologically().is_ok());
    CHECK(r.nodes_after < r.nodes_before);
}

TEST_CASE("offline: an evaluator of the tool's own folds what it can compute", "[passes]") {
    Graph g = make_graph();
    AddOnly eval;
    OptimizeOptions o;
    o.level = 1;
    o.evaluator = &eval;
    const OptimizeReport r = run_passes(g, o);
    CHECK(eval.calls >= 1);
    CHECK(r.count("constant_folding") == 2);  // the Constant, and Add(one, one) = 2
    // The last Add reads a constant 2 (the folded sum, or the equal Constant CSE merged it with).
    const Node* shift = nullptr;
    for (const Node& n : g.nodes)
        if (n.name == "shift") shift = &n;
    REQUIRE(shift != nullptr);
    const Value& addend = g.value(shift->inputs[1]);
    REQUIRE(addend.initializer.has_value());
    CHECK(addend.initializer->data<float>()[0] == 2.0f);
    CHECK(count_ops(g, "Add") == 2);  // the bias and the last Add: inputs not constant
}
