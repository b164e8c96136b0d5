// Structured channel pruning (dsinfer/prune.hpp): dependency groups over the ops' channel flow,
// scoring, selection, and the rewrite of every weight the kept channels touch.
//
// The walk visits the nodes in order and gives every activation value that carries channels a
// *carrier*: the group (a union-find "space") its channels belong to, the axis they lie on,
// and the block (elements per channel along that axis: 1, or H x W after a Flatten). Each
// space collects the edits that removing channels needs (a constant and the axis to gather
// along, a depthwise Conv's group attribute) and the reason it cannot be pruned, if any.
#include "dsinfer/prune.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

#include "ops/op_info.hpp"
#include "passes/pass_utils.hpp"

namespace dsinfer {

std::string_view to_string(PruneCriterion c) noexcept {
    switch (c) {
        case PruneCriterion::l1: return "l1";
        case PruneCriterion::l2: return "l2";
        case PruneCriterion::bn_scale: return "bn";
    }
    return "unknown";
}

StatusOr<PruneCriterion> parse_prune_criterion(std::string_view name) {
    if (name == "l1") return PruneCriterion::l1;
    if (name == "l2") return PruneCriterion::l2;
    if (name == "bn" || name == "bn_scale") return PruneCriterion::bn_scale;
    return Status::error(ErrorCode::invalid_argument, "unknown prune criterion '", name,
                         "' (l1, l2 or bn)");
}

namespace {

using detail::kNoAxis;

/// Gather `keep` channels (each `block` elements) along `axis` of a constant.
struct Edit {
    ValueId constant = kNoValue;
    int axis = 0;
    std::int64_t block = 1;
};

struct Space {
    int parent = -1;  ///< union-find; -1: a root
    std::int64_t channels = 0;
    std::string bad;  ///< why it stays intact ("" = prunable)
    bool protect = false;
    std::vector<int> producers;           ///< nodes whose weight makes these channels
    std::vector<std::pair<int, int>> out_weights;  ///< (producer node, weight input) for scoring
    std::vector<ValueId> bn_scales;       ///< BatchNormalization scales in the group
    std::vector<Edit> edits;
    std::vector<int> depthwise;           ///< Conv nodes whose `group` follows the channels
};

struct Carrier {
    int space = -1;
    int axis = 0;  ///< non-negative, of the value's rank
    std::int64_t block = 1;
};

std::int64_t dim_or_one(const Dim& d) { return d.is_static() ? d.value : 1; }

/// An integer attribute: `absent` when missing, `bad` when of another type.
std::int64_t int_attr(const Node& n, std::string_view name, std::int64_t absent, std::int64_t bad) {
    const StatusOr<std::int64_t> v = n.attr_or<std::int64_t>(name, absent);
    return v.is_ok() ? v.value() : bad;
}

class Walk {
public:
    explicit Walk(Graph& g) : g_(g), index_(g) {
        carriers_.assign(g.values.size(), Carrier{});
        uses_.assign(g.values.size(), 0);
        for (const Node& n : g.nodes)
            for (ValueId in : n.inputs)
                if (in != kNoValue) ++uses_[static_cast<std::size_t>(in)];
    }

    int root(int s) {
        while (spaces_[static_cast<std::size_t>(s)].parent >= 0)
            s = spaces_[static_cast<std::size_t>(s)].parent;
        return s;
    }
    Space& space(int s) { return spaces_[static_cast<std::size_t>(root(s))]; }

    void mark_bad(int s, const std::string& why) {
        Space& sp = space(s);
        if (sp.bad.empty()) sp.bad = why;
    }
    void mark_bad_value(ValueId v, const std::string& why) {
        if (v == kNoValue) return;
        const Carrier& c = carriers_[static_cast<std::size_t>(v)];
        if (c.space >= 0) mark_bad(c.space, why);
    }

    int new_space(std::int64_t channels) {
        spaces_.push_back(Space{});
        spaces_.back().channels = channels;
        return static_cast<int>(spaces_.size() - 1);
    }

    void unite(int a, int b, const std::string& where) {
        a = root(a);
        b = root(b);
        if (a == b) return;
        Space& sa = spaces_[static_cast<std::size_t>(a)];
        Space& sb = spaces_[static_cast<std::size_t>(b)];
        if (sa.channels != sb.channels) {
            const std::string why = where + " joins " + std::to_string(sa.channels) + " and " +
                                    std::to_string(sb.channels) + " channels";
            if (sa.bad.empty()) sa.bad = why;
        }
        if (sa.bad.empty()) sa.bad = sb.bad;
        sa.protect = sa.protect || sb.protect;
        auto append = [](auto& to, auto& from) { to.insert(to.end(), from.begin(), from.end()); };
        append(sa.producers, sb.producers);
        append(sa.out_weights, sb.out_weights);
        append(sa.bn_scales, sb.bn_scales);
        append(sa.edits, sb.edits);
        append(sa.depthwise, sb.depthwise);
        sb.parent = a;
    }

    const Tensor* constant(ValueId v) const { return index_.constant(v); }
    const SymbolicShape& shape(ValueId v) const { return g_.value(v).shape; }
    int rank(ValueId v) const {
        const SymbolicShape& s = shape(v);
        return s.known ? s.rank() : -1;
    }

    /// Adds an edit of constant `v` to space `s`; a constant read by several nodes cannot be
    /// sliced for one of them.
    void add_edit(int s, ValueId v, int axis, std::int64_t block, const Node& n) {
        if (uses_[static_cast<std::size_t>(v)] > 1) {
            mark_bad(s, "weight '" + g_.value(v).name + "' of " + n.describe() +
                            " is shared by several nodes");
            return;
        }
        space(s).edits.push_back(Edit{v, axis, block});
    }

    void set_out(ValueId v, int s, int axis, std::int64_t block = 1) {
        if (v == kNoValue) return;
        carriers_[static_cast<std::size_t>(v)] = Carrier{s, axis, block};
    }
    const Carrier& carrier(ValueId v) const { return carriers_[static_cast<std::size_t>(v)]; }
    bool carries(ValueId v) const { return v != kNoValue && carrier(v).space >= 0; }

    /// Every input carrier of `n` stays intact: `n` reads its channels in a way the pruner
    /// does not rewrite.
    void stop_at(const Node& n, const std::string& why = "") {
        for (ValueId in : n.inputs)
            mark_bad_value(in, why.empty() ? "read by " + n.describe() : why);
    }

    void visit(int ni);
    Status run();

    std::vector<Space> spaces_;
    std::vector<Carrier> carriers_;
    std::vector<int> producer_nodes;  ///< in graph order

private:
    void conv(int ni);
    void linear(int ni, bool gemm);
    void per_channel_binary(const Node& n, int act, int cst);

    Graph& g_;
    passes::GraphIndex index_;
    std::vector<int> uses_;
};

bool is_onnx(const Node& n) { return n.domain.empty() || n.domain == "ai.onnx"; }

void Walk::conv(int ni) {
    const Node& n = g_.nodes[static_cast<std::size_t>(ni)];
    const ValueId x = n.inputs[0];
    const ValueId w = n.inputs.size() > 1 ? n.inputs[1] : kNoValue;
    const Tensor* wt = constant(w);
    if (wt == nullptr || wt->shape().rank() < 3) {
        stop_at(n);
        return;
    }
    const std::int64_t group = int_attr(n, "group", 1, 1);
    const std::int64_t out_ch = wt->shape()[0], in_per_group = wt->shape()[1];
    const ValueId b = n.inputs.size() > 2 ? n.inputs[2] : kNoValue;
    const ValueId y = n.outputs[0];
    if (group == 1) {
        if (carries(x)) {
            const Carrier& c = carrier(x);
            if (c.axis != 1 || c.block != 1 || space(c.space).channels != in_per_group)
                mark_bad(c.space, n.describe() + " reads the channels in another layout");
            else
                add_edit(c.space, w, 1, 1, n);
        }
        const int s = new_space(out_ch);
        space(s).producers.push_back(ni);
        space(s).out_weights.push_back({ni, 1});
        add_edit(s, w, 0, 1, n);
        if (b != kNoValue) {
            if (constant(b) != nullptr) add_edit(s, b, 0, 1, n);
            else mark_bad(s, n.describe() + " has a bias that is not constant");
        }
        producer_nodes.push_back(ni);
        set_out(y, s, 1);
        return;
    }
    // Depthwise (one filter per input channel): the filters and `group` follow the channels.
    if (in_per_group == 1 && out_ch == group && carries(x) &&
        space(carrier(x).space).channels == group && carrier(x).axis == 1 &&
        carrier(x).block == 1) {
        const int s = carrier(x).space;
        add_edit(s, w, 0, 1, n);
        if (b != kNoValue) {
            if (constant(b) != nullptr) add_edit(s, b, 0, 1, n);
            else mark_bad(s, n.describe() + " has a bias that is not constant");
        }
        space(s).depthwise.push_back(ni);
        set_out(y, s, 1);
        return;
    }
    stop_at(n, "read by the grouped convolution " + n.describe());
    const int s = new_space(out_ch);
    mark_bad(s, "made by the grouped convolution " + n.describe());
    set_out(y, s, 1);
}

void Walk::linear(int ni, bool gemm) {
    const Node& n = g_.nodes[static_cast<std::size_t>(ni)];
    const ValueId a = n.inputs[0];
    const ValueId bv = n.inputs.size() > 1 ? n.inputs[1] : kNoValue;
    const Tensor* bt = constant(bv);
    bool trans_b = false;
    if (gemm) {
        const std::int64_t trans_a = int_attr(n, "transA", 0, 1);
        trans_b = int_attr(n, "transB", 0, 0) != 0;
        if (trans_a != 0) bt = nullptr;
    }
    if (bt == nullptr || bt->shape().rank() != 2) {
        stop_at(n);
        return;
    }
    const int in_axis = trans_b ? 1 : 0, out_axis = trans_b ? 0 : 1;
    const std::int64_t k = bt->shape()[in_axis], out_ch = bt->shape()[out_axis];
    const int ra = rank(a);
    if (carries(a)) {
        const Carrier& c = carrier(a);
        if (ra < 1 || c.axis != ra - 1 || space(c.space).channels * c.block != k)
            mark_bad(c.space, n.describe() + " reads the channels in another layout");
        else
            add_edit(c.space, bv, in_axis, c.block, n);
    }
    const int s = new_space(out_ch);
    space(s).producers.push_back(ni);
    space(s).out_weights.push_back({ni, 1});
    add_edit(s, bv, out_axis, 1, n);
    if (gemm && n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
        const ValueId cv = n.inputs[2];
        const Tensor* ct = constant(cv);
        const int rc = ct != nullptr ? ct->shape().rank() : -1;
        if (ct == nullptr || rc > 2 || (rc == 2 && ct->shape()[0] != 1))
            mark_bad(s, n.describe() + "'s C is not a constant row");
        else if (rc >= 1 && ct->shape()[rc - 1] == out_ch)
            add_edit(s, cv, rc - 1, 1, n);
        else if (rc >= 1 && ct->shape()[rc - 1] != 1)
            mark_bad(s, n.describe() + "'s C does not broadcast along the outputs");
    }
    producer_nodes.push_back(ni);
    const ValueId y = n.outputs[0];
    set_out(y, s, std::max(0, rank(y) - 1));
    if (rank(y) < 1) mark_bad(s, "the output of " + n.describe() + " has no known rank");
}

void Walk::per_channel_binary(const Node& n, int act, int cst) {
    const ValueId x = n.inputs[static_cast<std::size_t>(act)];
    const ValueId k = n.inputs[static_cast<std::size_t>(cst)];
    const Carrier c = carrier(x);
    const Tensor* kt = constant(k);
    const int rx = rank(x), rk = kt->shape().rank();
    const ValueId y = n.outputs[0];
    if (rx < 0 || rk > rx) {
        mark_bad(c.space, n.describe() + " broadcasts its constant over more axes");
        return;
    }
    const int at = c.axis - (rx - rk);  // the constant's axis under the channel axis
    if (at >= 0) {
        const std::int64_t d = kt->shape()[at];
        if (d == space(c.space).channels * c.block)
            add_edit(c.space, k, at, c.block, n);
        else if (d != 1)
            mark_bad(c.space, n.describe() + "'s constant has " + std::to_string(d) +
                                  " elements along the channels");
    }
    set_out(y, c.space, c.axis, c.block);
}

void Walk::visit(int ni) {
    const Node& n = g_.nodes[static_cast<std::size_t>(ni)];
    const std::string& op = n.op_type;
    if (!is_onnx(n)) {
        stop_at(n);
        return;
    }
    bool any = false;
    for (ValueId in : n.inputs) any = any || carries(in);
    // Malformed nodes (no input 0 or output 0: the compile names them) stop what they read.
    if (n.inputs.empty() || n.inputs[0] == kNoValue || n.outputs.empty() ||
        n.outputs[0] == kNoValue) {
        stop_at(n);
        return;
    }
    if (op == "Conv") return conv(ni);
    if (op == "Gemm") return linear(ni, true);
    if (op == "MatMul") {
        if (constant(n.inputs.size() > 1 ? n.inputs[1] : kNoValue) != nullptr)
            return linear(ni, false);
        stop_at(n);
        return;
    }
    if (!any) return;  // nothing of ours flows through
    const ValueId x = n.inputs[0];
    const ValueId y = n.outputs.empty() ? kNoValue : n.outputs[0];
    if (op == "BatchNormalization") {
        const Carrier c = carrier(x);
        if (!carries(x) || n.outputs.size() > 1 || n.inputs.size() != 5 || c.axis != 1 ||
            c.block != 1) {
            stop_at(n);
            return;
        }
        for (std::size_t i = 1; i < 5 && i < n.inputs.size(); ++i) {
            if (constant(n.inputs[i]) == nullptr) {
                mark_bad(c.space, n.describe() + " has parameters that are not constant");
                return;
            }
            add_edit(c.space, n.inputs[i], 0, 1, n);
        }
        space(c.space).bn_scales.push_back(n.inputs[1]);
        set_out(y, c.space, 1);
        return;
    }
    if (op == "PRelu" && n.inputs.size() == 2 && carries(x) && constant(n.inputs[1]) != nullptr &&
        !carries(n.inputs[1]))
        return per_channel_binary(n, 0, 1);
    static const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div", "Max", "Min",
                                                  "Sum", "Mean"};
    if (kBinary.count(op) != 0) {
        // One activation and one constant: per channel. Several activations: one group.
        if (n.inputs.size() == 2) {
            const bool c0 = constant(n.inputs[0]) != nullptr, c1 = constant(n.inputs[1]) != nullptr;
            if (c0 != c1) return per_channel_binary(n, c0 ? 1 : 0, c0 ? 0 : 1);
        }
        int first = -1;
        Carrier ref{};
        for (ValueId in : n.inputs) {
            if (!carries(in)) {
                stop_at(n, n.describe() + " adds channels that are not in the group");
                return;
            }
            const Carrier& c = carrier(in);
            if (first < 0) {
                first = c.space;
                ref = c;
                continue;
            }
            if (c.axis != ref.axis || c.block != ref.block || rank(in) != rank(x)) {
                stop_at(n, n.describe() + " broadcasts its inputs' channels differently");
                return;
            }
            unite(first, c.space, n.describe());
        }
        set_out(y, first, ref.axis, ref.block);
        return;
    }
    static const std::set<std::string> kPools = {"MaxPool", "AveragePool", "GlobalAveragePool",
                                                 "GlobalMaxPool", "LpPool"};
    if (kPools.count(op) != 0 && n.outputs.size() == 1 && carrier(x).axis == 1 &&
        carrier(x).block == 1) {
        set_out(y, carrier(x).space, 1);
        return;
    }
    if (op == "Flatten") {
        const Carrier c = carrier(x);
        const std::int64_t axis = int_attr(n, "axis", 1, 0);
        const SymbolicShape& s = shape(x);
        bool ok = axis == 1 && c.axis == 1 && c.block == 1 && s.known && s.rank() >= 2;
        std::int64_t block = 1;
        for (int i = 2; ok && i < s.rank(); ++i) {
            ok = s.dims[static_cast<std::size_t>(i)].is_static();
            if (ok) block *= s.dims[static_cast<std::size_t>(i)].value;
        }
        if (!ok) {
            stop_at(n, n.describe() + " flattens the channels with unknown or leading dims");
            return;
        }
        set_out(y, c.space, 1, block);
        return;
    }
    // Elementwise over one activation, channels kept (Relu, Sigmoid, Clip, Cast, Dropout...).
    const detail::OpInfo* info = detail::find_op_info(n);
    if (info != nullptr && info->channels == detail::ChannelFlow::passthrough && carries(x)) {
        bool others = false;
        for (std::size_t i = 1; i < n.inputs.size(); ++i) others = others || carries(n.inputs[i]);
        std::size_t read_outputs = 0;
        for (ValueId o : n.outputs)
            if (o != kNoValue) ++read_outputs;
        if (!others && read_outputs <= 1 && (rank(y) < 0 || rank(y) == rank(x))) {
            const Carrier c = carrier(x);
            set_out(y, c.space, c.axis, c.block);
            return;
        }
    }
    stop_at(n);
}

Status Walk::run() {
    for (std::size_t ni = 0; ni < g_.nodes.size(); ++ni) {
        if (!g_.nodes[ni].attributes.empty()) {
            bool subgraph = false;
            for (const auto& [name, a] : g_.nodes[ni].attributes)
                subgraph = subgraph || a.kind == AttrKind::g || a.kind == AttrKind::graphs;
            if (subgraph) {
                stop_at(g_.nodes[ni]);
                continue;
            }
        }
        visit(static_cast<int>(ni));
    }
    for (std::size_t v = 0; v < g_.values.size(); ++v)
        if (carriers_[v].space >= 0 && index_.pinned(static_cast<ValueId>(v)))
            mark_bad(carriers_[v].space, "'" + g_.values[v].name +
                                             "' is a graph output (or read by a subgraph or an "
                                             "observer)");
    return Status::ok();
}

/// `t` with only the `keep` channels (blocks of `block` elements) along `axis`.
Tensor gather_channels(const Tensor& t, int axis, std::int64_t block,
                       const std::vector<std::int64_t>& keep) {
    const Shape& s = t.shape();
    std::int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; ++i) outer *= s[i];
    for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
    std::vector<std::int64_t> dims = s.to_vector();
    dims[static_cast<std::size_t>(axis)] = static_cast<std::int64_t>(keep.size()) * block;
    Tensor out = Tensor::empty(t.dtype(), Shape::from(dims));
    const std::size_t es = dtype_size(t.dtype());
    const auto* src = static_cast<const unsigned char*>(t.raw_data());
    auto* dst = static_cast<unsigned char*>(out.raw_data());
    const std::int64_t along = s[axis];
    const std::size_t run = static_cast<std::size_t>(block * inner) * es;
    for (std::int64_t o = 0; o < outer; ++o)
        for (std::size_t k = 0; k < keep.size(); ++k) {
            const std::int64_t from = (o * along + keep[k] * block) * inner;
            const std::int64_t to =
                (o * static_cast<std::int64_t>(keep.size()) * block +
                 static_cast<std::int64_t>(k) * block) * inner;
            std::memcpy(dst + static_cast<std::size_t>(to) * es,
                        src + static_cast<std::size_t>(from) * es, run);
        }
    return out;
}

/// Per output channel of a producer's weight: L1 or L2 norm of the filter.
std::vector<double> filter_norms(const Tensor& w, int out_axis, bool l2) {
    const Shape& s = w.shape();
    const std::int64_t c = s[out_axis];
    std::vector<double> norms(static_cast<std::size_t>(c), 0.0);
    std::int64_t outer = 1, inner = 1;
    for (int i = 0; i < out_axis; ++i) outer *= s[i];
    for (int i = out_axis + 1; i < s.rank(); ++i) inner *= s[i];
    const bool f32 = w.dtype() == DType::f32;
    auto value = [&](std::int64_t i) -> double {
        if (f32) return static_cast<const float*>(w.raw_data())[i];
        if (w.dtype() == DType::f16) return static_cast<float>(static_cast<const float16*>(w.raw_data())[i]);
        if (w.dtype() == DType::bf16) return static_cast<float>(static_cast<const bfloat16*>(w.raw_data())[i]);
        if (w.dtype() == DType::f64) return static_cast<const double*>(w.raw_data())[i];
        return 0.0;
    };
    for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t ch = 0; ch < c; ++ch)
            for (std::int64_t j = 0; j < inner; ++j) {
                const double v = value((o * c + ch) * inner + j);
                norms[static_cast<std::size_t>(ch)] += l2 ? v * v : std::fabs(v);
            }
    if (l2)
        for (double& n : norms) n = std::sqrt(n);
    return norms;
}

/// Divides by the mean (so coupled producers of different scales weigh alike).
void normalize(std::vector<double>& v) {
    double mean = 0;
    for (double x : v) mean += x;
    mean /= std::max<std::size_t>(1, v.size());
    if (mean > 0 && std::isfinite(mean))
        for (double& x : v) x /= mean;
}

/// FLOPs (2 per multiply-add, symbolic dims as 1) and parameter elements of a weight layer.
void layer_cost(const Graph& g, const Node& n, double& flops, std::int64_t& params) {
    flops = 0;
    params = 0;
    for (std::size_t i = 1; i < n.inputs.size(); ++i)
        if (n.inputs[i] != kNoValue && g.value(n.inputs[i]).initializer)
            params += g.value(n.inputs[i]).initializer->num_elements();
    if (n.inputs.size() < 2 || n.outputs.empty() || n.outputs[0] == kNoValue) return;
    const Value& w = g.value(n.inputs[1]);
    const SymbolicShape& y = g.value(n.outputs[0]).shape;
    if (!w.initializer || !y.known) return;
    double out = 1;
    for (const Dim& d : y.dims) out *= static_cast<double>(dim_or_one(d));
    const Shape& ws = w.initializer->shape();
    if (n.op_type == "Conv") {
        double per = 1;
        for (int i = 1; i < ws.rank(); ++i) per *= static_cast<double>(ws[i]);
        flops = 2 * out * per;
    } else {
        bool trans_b = false;
        if (n.op_type == "Gemm") trans_b = int_attr(n, "transB", 0, 0) != 0;
        const double k = static_cast<double>(ws.rank() == 2 ? ws[trans_b ? 1 : 0] : 1);
        flops = 2 * out * k;
    }
}

}  // namespace

StatusOr<PruneReport> prune_channels(Graph& graph, const PruneOptions& o) {
    DSINFER_CHECK(std::isfinite(o.ratio) && o.ratio >= 0 && o.ratio < 1,
                  ErrorCode::invalid_argument,
                  "prune_channels: ratio must be in [0, 1) (the fraction of channels removed; 1 "
                  "would remove them all), got ", o.ratio);
    DSINFER_CHECK(o.channel_multiple >= 1, ErrorCode::invalid_argument,
                  "prune_channels: channel_multiple must be >= 1, got ", o.channel_multiple);
    try {
        Graph g = graph;  // tensors are shared, not copied: the original stays as it was on error
        DSINFER_RETURN_IF_ERROR(g.link());
        DSINFER_RETURN_IF_ERROR(g.sort_topologically());
        for (const std::string& name : o.protect) {
            bool found = false;
            for (const Node& n : g.nodes) found = found || n.name == name;
            DSINFER_CHECK(found, ErrorCode::invalid_argument, "prune_channels: protect names '",
                          name, "', which no node of the graph is");
        }
        (void)detail::annotate_graph_shapes(g);

        PruneReport report;
        Walk walk(g);
        DSINFER_RETURN_IF_ERROR(walk.run());
        const std::vector<int>& prods = walk.producer_nodes;
        std::vector<double> flops_before(g.nodes.size(), 0.0);
        std::vector<std::int64_t> params_before(g.nodes.size(), 0);
        for (int p : prods)
            layer_cost(g, g.nodes[static_cast<std::size_t>(p)], flops_before[static_cast<std::size_t>(p)],
                       params_before[static_cast<std::size_t>(p)]);
        for (const Value& v : g.values)
            if (v.initializer) report.params_before += v.initializer->num_elements();

        // Protection.
        auto out_space = [&](int node) {
            const ValueId y = g.nodes[static_cast<std::size_t>(node)].outputs[0];
            return walk.carriers_[static_cast<std::size_t>(y)].space;
        };
        if (o.protect_first && !prods.empty() && out_space(prods.front()) >= 0)
            walk.space(out_space(prods.front())).protect = true;
        if (o.protect_last && !prods.empty() && out_space(prods.back()) >= 0)
            walk.space(out_space(prods.back())).protect = true;
        for (const std::string& name : o.protect)
            for (std::size_t ni = 0; ni < g.nodes.size(); ++ni)
                if (g.nodes[ni].name == name && !g.nodes[ni].outputs.empty() &&
                    walk.carries(g.nodes[ni].outputs[0]))
                    walk.space(walk.carrier(g.nodes[ni].outputs[0]).space).protect = true;

        // Groups and their scores.
        struct Group {
            int root;
            std::vector<double> score;
            std::int64_t keep = 0;
        };
        std::vector<Group> groups;
        for (std::size_t s = 0; s < walk.spaces_.size(); ++s) {
            const Space& sp = walk.spaces_[s];
            if (sp.parent >= 0 || sp.producers.empty()) continue;
            PruneGroup pg;
            for (int p : sp.producers) pg.producers.push_back(g.nodes[static_cast<std::size_t>(p)].name);
            pg.channels = pg.kept = sp.channels;
            if (!sp.bad.empty()) pg.intact_reason = sp.bad;
            else if (sp.protect) pg.intact_reason = "protected";
            else if (sp.channels < 2) pg.intact_reason = "one channel";
            report.groups.push_back(pg);
            if (!pg.intact_reason.empty()) continue;
            Group gr{static_cast<int>(s), std::vector<double>(static_cast<std::size_t>(sp.channels), 0.0)};
            const bool bn = o.criterion == PruneCriterion::bn_scale && !sp.bn_scales.empty();
            if (bn) {
                for (ValueId sc : sp.bn_scales) {
                    std::vector<double> v = filter_norms(*g.value(sc).initializer, 0, false);
                    normalize(v);
                    for (std::size_t c = 0; c < v.size(); ++c) gr.score[c] += v[c];
                }
            } else {
                for (const auto& [node, input] : sp.out_weights) {
                    const Node& pn = g.nodes[static_cast<std::size_t>(node)];
                    const Tensor& w = *g.value(pn.inputs[static_cast<std::size_t>(input)]).initializer;
                    int axis = 0;
                    if (pn.op_type == "MatMul") axis = 1;
                    if (pn.op_type == "Gemm")
                        axis = int_attr(pn, "transB", 0, 0) != 0 ? 0 : 1;
                    std::vector<double> v = filter_norms(w, axis, o.criterion == PruneCriterion::l2);
                    normalize(v);
                    for (std::size_t c = 0; c < v.size(); ++c) gr.score[c] += v[c];
                }
            }
            groups.push_back(std::move(gr));
            report.prunable_channels += sp.channels;
        }

        // How many channels each group keeps.
        // Kept channels to the nearest multiple (at least one multiple), never above the group.
        auto rounded = [&](std::int64_t keep, std::int64_t channels) {
            const std::int64_t m = o.channel_multiple;
            keep = std::max<std::int64_t>(m, (std::max<std::int64_t>(1, keep) + m / 2) / m * m);
            return std::min(keep, channels);
        };
        if (o.global) {
            std::vector<double> all;
            for (const Group& gr : groups) all.insert(all.end(), gr.score.begin(), gr.score.end());
            const auto drop = static_cast<std::size_t>(std::floor(o.ratio * static_cast<double>(all.size())));
            double threshold = -std::numeric_limits<double>::infinity();
            if (drop > 0 && !all.empty()) {
                std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(drop - 1), all.end());
                threshold = all[drop - 1];
            }
            for (Group& gr : groups) {
                std::int64_t above = 0;
                for (double v : gr.score) above += v > threshold;
                gr.keep = rounded(above, static_cast<std::int64_t>(gr.score.size()));
            }
        } else {
            for (Group& gr : groups) {
                const auto c = static_cast<std::int64_t>(gr.score.size());
                gr.keep = rounded(c - static_cast<std::int64_t>(std::floor(o.ratio * static_cast<double>(c))), c);
            }
        }

        // Rewrite.
        std::size_t gi = 0;
        for (PruneGroup& pg : report.groups) {
            if (!pg.intact_reason.empty()) continue;
            Group& gr = groups[gi++];
            pg.kept = gr.keep;
            if (gr.keep == pg.channels) continue;
            std::vector<std::int64_t> order(gr.score.size());
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
                return gr.score[static_cast<std::size_t>(a)] > gr.score[static_cast<std::size_t>(b)];
            });
            order.resize(static_cast<std::size_t>(gr.keep));
            std::sort(order.begin(), order.end());
            const Space& sp = walk.spaces_[static_cast<std::size_t>(gr.root)];
            for (const Edit& e : sp.edits) {
                Value& v = g.value(e.constant);
                v.initializer = gather_channels(*v.initializer, e.axis, e.block, order);
                v.shape = SymbolicShape::from(v.initializer->shape());
            }
            for (int dw : sp.depthwise)
                passes::set_attr(g.nodes[static_cast<std::size_t>(dw)], "group", gr.keep);
            report.removed_channels += pg.channels - gr.keep;
        }

        // Shapes: every intermediate value is inferred again.
        std::vector<bool> keep_shape(g.values.size(), false);
        for (ValueId v : g.inputs) keep_shape[static_cast<std::size_t>(v)] = true;
        for (ValueId v : g.outputs) keep_shape[static_cast<std::size_t>(v)] = true;
        for (std::size_t v = 0; v < g.values.size(); ++v)
            if (!keep_shape[v] && !g.values[v].initializer) g.values[v].shape = SymbolicShape::unknown();
        (void)detail::annotate_graph_shapes(g);

        for (int p : prods) {
            const Node& n = g.nodes[static_cast<std::size_t>(p)];
            PruneLayer l;
            l.node = n.name;
            l.op = n.op_type;
            l.flops_before = flops_before[static_cast<std::size_t>(p)];
            l.params_before = params_before[static_cast<std::size_t>(p)];
            layer_cost(g, n, l.flops_after, l.params_after);
            report.flops_before += l.flops_before;
            report.flops_after += l.flops_after;
            report.layers.push_back(std::move(l));
        }
        for (const Value& v : g.values)
            if (v.initializer) report.params_after += v.initializer->num_elements();
        graph = std::move(g);
        return report;
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "prune_channels: out of memory");
    }
}

}  // namespace dsinfer
