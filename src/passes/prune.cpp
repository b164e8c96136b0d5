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
#include <functional>
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

/// An element of a Reshape's constant shape that counts the group's units (heads) or channels,
/// rewritten in a copy of the shape for that node (shapes are often shared between layers).
struct ShapeEdit {
    int node = -1;
    int index = 0;       ///< element of the shape tensor
    bool units = false;  ///< holds the kept units (heads), else the kept channels
};

struct Space {
    int parent = -1;  ///< union-find; -1: a root
    std::int64_t channels = 0;
    /// Channels per selectable unit: 1, or the head size once a Reshape splits the channels
    /// into heads (attention): whole heads are scored and removed.
    std::int64_t unit = 1;
    std::vector<ShapeEdit> shape_edits;
    std::string bad;  ///< why it stays intact ("" = prunable)
    bool protect = false;
    std::vector<int> producers;           ///< nodes whose weight makes these channels
    std::vector<std::pair<int, int>> out_weights;  ///< (producer node, weight input) for scoring
    std::vector<ValueId> bn_scales;       ///< BatchNormalization scales in the group
    std::vector<Edit> edits;
    std::vector<int> depthwise;           ///< Conv nodes whose `group` follows the channels
    std::vector<int> consumers;           ///< weight layers whose input channels these are
    /// Channels derived from other spaces: a Concat's (the spaces it joins, or -1: channels
    /// of no group, always kept) or a Split or Slice output's (a window of one space). Each
    /// source puts `channels` channels of `space`, from its channel `from` on, at `offset`.
    /// Their kept channels follow the sources'; a derived space is never a group.
    struct Source {
        int space;
        std::int64_t offset, channels, from = 0;
    };
    std::vector<Source> sources;
};

struct Carrier {
    int space = -1;
    int axis = 0;  ///< non-negative, of the value's rank
    std::int64_t block = 1;
    /// One element along `axis` per unit of the space (the head axis of [B, heads, S, D]),
    /// instead of `block` elements per channel.
    bool per_unit = false;
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
        if ((!sa.sources.empty() || !sb.sources.empty()) && sa.bad.empty())
            sa.bad = where + " joins the channels of a Concat, Split or Slice with other channels";
        sa.sources.insert(sa.sources.end(), sb.sources.begin(), sb.sources.end());
        if (sa.channels != sb.channels) {
            const std::string why = where + " joins " + std::to_string(sa.channels) + " and " +
                                    std::to_string(sb.channels) + " channels";
            if (sa.bad.empty()) sa.bad = why;
        }
        if (sa.unit != sb.unit) {
            if (sa.unit == 1 || sb.unit == 1) sa.unit = std::max(sa.unit, sb.unit);
            else if (sa.bad.empty())
                sa.bad = where + " joins heads of " + std::to_string(sa.unit) + " and " +
                         std::to_string(sb.unit) + " channels";
        }
        if (sa.bad.empty()) sa.bad = sb.bad;
        sa.protect = sa.protect || sb.protect;
        auto append = [](auto& to, auto& from) { to.insert(to.end(), from.begin(), from.end()); };
        append(sa.producers, sb.producers);
        append(sa.out_weights, sb.out_weights);
        append(sa.bn_scales, sb.bn_scales);
        append(sa.edits, sb.edits);
        append(sa.depthwise, sb.depthwise);
        append(sa.consumers, sb.consumers);
        append(sa.shape_edits, sb.shape_edits);
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

    void set_out(ValueId v, int s, int axis, std::int64_t block = 1, bool per_unit = false) {
        if (v == kNoValue) return;
        carriers_[static_cast<std::size_t>(v)] = Carrier{s, axis, block, per_unit};
    }
    /// The output carries what input `from` carried (same space, axis, block and kind).
    void pass_on(ValueId y, const Carrier& c) { set_out(y, c.space, c.axis, c.block, c.per_unit); }
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

    /// A Split or Slice along a group's channels: its sizes (Split) or starts and ends (Slice,
    /// element `index`) follow what the source keeps of each window.
    struct WindowEdit {
        int node = -1;
        int source = -1;
        std::vector<std::pair<std::int64_t, std::int64_t>> windows;  ///< (from, channels)
        int index = 0;
    };
    std::vector<WindowEdit> window_edits;
    std::vector<Space> spaces_;
    std::vector<Carrier> carriers_;
    std::vector<int> producer_nodes;  ///< in graph order

private:
    void conv(int ni);
    void linear(int ni, bool gemm);
    void per_channel_binary(const Node& n, int act, int cst);
    void reshape(int ni);
    void concat(const Node& n);
    void split(int ni);
    void slice(int ni);
    void transpose(const Node& n);
    void matmul_heads(const Node& n);
    /// Whether `v` (not a carrier) broadcasts along `c`'s axis of a value of rank `r`: it has
    /// size 1 there or does not reach it.
    bool broadcasts_along(ValueId v, const Carrier& c, int r) const;

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
            if (c.axis != 1 || c.block != 1 || space(c.space).channels != in_per_group) {
                mark_bad(c.space, n.describe() + " reads the channels in another layout");
            } else {
                add_edit(c.space, w, 1, 1, n);
                space(c.space).consumers.push_back(ni);
            }
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
        if (ra < 1 || c.axis != ra - 1 || space(c.space).channels * c.block != k) {
            mark_bad(c.space, n.describe() + " reads the channels in another layout");
        } else {
            add_edit(c.space, bv, in_axis, c.block, n);
            space(c.space).consumers.push_back(ni);
        }
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
        if (c.per_unit) {
            if (d != 1)
                mark_bad(c.space, n.describe() + "'s constant has " + std::to_string(d) +
                                      " elements along the heads");
        } else if (d == space(c.space).channels * c.block) {
            add_edit(c.space, k, at, c.block, n);
        } else if (d != 1) {
            mark_bad(c.space, n.describe() + "'s constant has " + std::to_string(d) +
                                  " elements along the channels");
        }
    }
    pass_on(y, c);
}

bool Walk::broadcasts_along(ValueId v, const Carrier& c, int r) const {
    const int rv = rank(v);
    if (rv < 0 || rv > r) return false;
    const int at = c.axis - (r - rv);
    if (at < 0) return true;
    const Dim& d = shape(v).dims[static_cast<std::size_t>(at)];
    return d.is_static() && d.value == 1;
}

/// Whether two dims are the same: equal fixed sizes or the same symbol.
bool same_dim(const Dim& a, const Dim& b) {
    if (a.is_static() || b.is_static()) return a.value == b.value;
    return !a.symbol.empty() && a.symbol == b.symbol;
}

// Attention heads. A Reshape that splits the channel axis into [heads, head size] makes the
// head size the group's unit (whole heads are removed) and carries one element per head; the
// Reshape that merges [heads, head size] back carries channels again. Each rewrites the
// element of its constant shape that counts heads or channels (a -1 there needs nothing).
void Walk::reshape(int ni) {
    const Node& n = g_.nodes[static_cast<std::size_t>(ni)];
    const ValueId x = n.inputs[0], y = n.outputs[0];
    const Carrier c = carrier(x);
    const ValueId sv = n.inputs.size() > 1 ? n.inputs[1] : kNoValue;
    const Tensor* st = constant(sv);
    const int rx = rank(x), ry = rank(y);
    const std::string why = n.describe() + " reshapes the channels other than into or out of "
                                           "heads";
    if (st == nullptr || st->dtype() != DType::i64 || st->shape().rank() != 1 || rx < 0 ||
        ry < 0 || st->num_elements() != ry || c.block != 1 ||
        int_attr(n, "allowzero", 0, 1) != 0) {
        mark_bad(c.space, st == nullptr ? n.describe() + "'s shape is not a constant" : why);
        return;
    }
    const auto* dims = static_cast<const std::int64_t*>(st->raw_data());
    const SymbolicShape& xs = shape(x);
    const SymbolicShape& ys = shape(y);
    const int a = c.axis;
    Space& sp = space(c.space);
    bool ok = a + 1 < std::max(rx, ry);
    for (int i = 0; ok && i < a; ++i)
        ok = same_dim(xs.dims[static_cast<std::size_t>(i)], ys.dims[static_cast<std::size_t>(i)]);
    if (!sp.sources.empty()) ok = false;  // concatenated channels are never split into heads
    if (ok && !c.per_unit && ry == rx + 1) {
        // Split: x [..., C, rest...] -> y [..., H, D, rest...].
        const Dim& h = ys.dims[static_cast<std::size_t>(a)];
        const Dim& d = ys.dims[static_cast<std::size_t>(a) + 1];
        ok = h.is_static() && d.is_static() && h.value > 1 && d.value >= 1 &&
             h.value * d.value == sp.channels && (sp.unit == 1 || sp.unit == d.value) &&
             dims[a] != 0;
        for (int i = a + 1; ok && i < rx; ++i)
            ok = same_dim(xs.dims[static_cast<std::size_t>(i)],
                          ys.dims[static_cast<std::size_t>(i) + 1]);
        if (ok) {
            sp.unit = d.value;
            if (dims[a] > 0) sp.shape_edits.push_back(ShapeEdit{ni, a, true});
            set_out(y, c.space, a, 1, true);
            return;
        }
    } else if (ok && c.per_unit && ry + 1 == rx) {
        // Merge: x [..., H, D, rest...] -> y [..., H * D, rest...].
        const Dim& d = xs.dims[static_cast<std::size_t>(a) + 1];
        const Dim& hd = ys.dims[static_cast<std::size_t>(a)];
        ok = d.is_static() && d.value == sp.unit && hd.is_static() && hd.value == sp.channels &&
             dims[a] != 0;
        for (int i = a + 1; ok && i < ry; ++i)
            ok = same_dim(xs.dims[static_cast<std::size_t>(i) + 1],
                          ys.dims[static_cast<std::size_t>(i)]);
        if (ok) {
            if (dims[a] > 0) sp.shape_edits.push_back(ShapeEdit{ni, a, false});
            set_out(y, c.space, a, 1, false);
            return;
        }
    }
    mark_bad(c.space, why);
}

/// Concat along the channel axis: a derived space over the inputs' spaces (an input that
/// carries none is a run of channels that are always kept).
void Walk::concat(const Node& n) {
    const ValueId y = n.outputs[0];
    const int r = rank(y);
    std::int64_t axis = int_attr(n, "axis", 0, r);
    if (axis < 0) axis += r;
    std::vector<Space::Source> sources;
    std::int64_t offset = 0;
    std::string why;
    for (ValueId in : n.inputs) {
        if (in == kNoValue || rank(in) != r || axis < 0 || axis >= r) {
            why = n.describe() + " joins inputs of other ranks";
            break;
        }
        if (carries(in)) {
            const Carrier& c = carrier(in);
            if (c.axis != axis || c.block != 1 || c.per_unit) {
                why = n.describe() + " concatenates along another axis";
                break;
            }
            const std::int64_t ch = space(c.space).channels;
            sources.push_back({root(c.space), offset, ch, 0});
            offset += ch;
            continue;
        }
        const Dim& d = shape(in).dims[static_cast<std::size_t>(axis)];
        if (!d.is_static()) {
            why = n.describe() + " joins channels of unknown count";
            break;
        }
        sources.push_back({-1, offset, d.value, 0});
        offset += d.value;
    }
    if (!why.empty()) {
        stop_at(n, why);
        return;
    }
    const int s = new_space(offset);
    space(s).sources = std::move(sources);
    set_out(y, s, static_cast<int>(axis));
}

/// Split along the channel axis: each output a window of the input's channels.
void Walk::split(int ni) {
    const Node& n = g_.nodes[static_cast<std::size_t>(ni)];
    const ValueId x = n.inputs[0];
    const Carrier c = carrier(x);
    const int r = rank(x);
    std::int64_t axis = int_attr(n, "axis", 0, r);
    if (axis < 0) axis += r;
    const std::string why = n.describe() + " splits the channels";
    if (r < 0 || axis != c.axis || c.block != 1 || c.per_unit) {
        mark_bad(c.space, why + " in another layout");
        return;
    }
    if (!space(c.space).sources.empty()) {
        mark_bad(c.space, why + " of a Concat, Split or Slice");
        return;
    }
    const std::int64_t channels = space(c.space).channels;
    std::vector<std::int64_t> sizes;
    if (n.inputs.size() > 1 && n.inputs[1] != kNoValue) {
        const Tensor* t = constant(n.inputs[1]);
        if (t == nullptr || t->dtype() != DType::i64 || t->shape().rank() != 1) {
            mark_bad(c.space, why + " by sizes that are not a constant");
            return;
        }
        const auto* d = static_cast<const std::int64_t*>(t->raw_data());
        sizes.assign(d, d + t->num_elements());
    } else {
        const StatusOr<std::vector<std::int64_t>> a = n.attr_or<std::vector<std::int64_t>>("split", {});
        if (a.is_ok()) sizes = a.value();
    }
    const auto outs = static_cast<std::int64_t>(n.outputs.size());
    if (sizes.empty() && outs > 0 && channels % outs == 0)
        sizes.assign(static_cast<std::size_t>(outs), channels / outs);
    std::int64_t total = 0;
    for (std::int64_t v : sizes) total += v < 0 ? channels + 1 : v;
    if (static_cast<std::int64_t>(sizes.size()) != outs || total != channels) {
        mark_bad(c.space, why + " unevenly or into sizes that do not add up");
        return;
    }
    WindowEdit we{ni, root(c.space), {}, 0};
    std::int64_t from = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        we.windows.push_back({from, sizes[i]});
        if (n.outputs[i] != kNoValue) {
            const int s = new_space(sizes[i]);
            space(s).sources = {{root(c.space), 0, sizes[i], from}};
            set_out(n.outputs[i], s, static_cast<int>(axis));
        }
        from += sizes[i];
    }
    window_edits.push_back(std::move(we));
}

/// Slice of the channel axis with constant starts/ends (step 1): a window of the channels.
void Walk::slice(int ni) {
    const Node& n = g_.nodes[static_cast<std::size_t>(ni)];
    const ValueId x = n.inputs[0];
    const Carrier c = carrier(x);
    const int r = rank(x);
    const std::string why = n.describe() + " slices the channels";
    const auto ints = [&](std::size_t i, std::vector<std::int64_t>& out) {
        if (i >= n.inputs.size() || n.inputs[i] == kNoValue) return true;  // absent
        const Tensor* t = constant(n.inputs[i]);
        if (t == nullptr || t->shape().rank() != 1) return false;
        if (t->dtype() == DType::i64) {
            const auto* d = static_cast<const std::int64_t*>(t->raw_data());
            out.assign(d, d + t->num_elements());
        } else if (t->dtype() == DType::i32) {
            const auto* d = static_cast<const std::int32_t*>(t->raw_data());
            out.assign(d, d + t->num_elements());
        } else {
            return false;
        }
        return true;
    };
    std::vector<std::int64_t> starts, ends, axes, steps;
    if (n.inputs.size() < 3 || r < 0 || c.block != 1 || c.per_unit || !ints(1, starts) ||
        !ints(2, ends) || !ints(3, axes) || !ints(4, steps) || starts.size() != ends.size()) {
        mark_bad(c.space, why + " by bounds that are not constants (or in another layout)");
        return;
    }
    if (axes.empty())
        for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
    int at = -1;
    for (std::size_t i = 0; i < axes.size(); ++i) {
        const std::int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        if (a == c.axis) at = static_cast<int>(i);
    }
    if (axes.size() != starts.size() || (!steps.empty() && steps.size() != starts.size())) {
        mark_bad(c.space, why + " with bounds of different lengths");
        return;
    }
    if (at < 0) {  // the channels pass whole
        pass_on(n.outputs[0], c);
        return;
    }
    if (!space(c.space).sources.empty()) {
        mark_bad(c.space, why + " of a Concat, Split or Slice");
        return;
    }
    const auto k = static_cast<std::size_t>(at);
    const std::int64_t channels = space(c.space).channels;
    if (!steps.empty() && steps[k] != 1) {
        mark_bad(c.space, why + " with a step");
        return;
    }
    const auto clamp = [&](std::int64_t v) {
        if (v < 0) v += channels;
        return std::clamp<std::int64_t>(v, 0, channels);
    };
    const std::int64_t from = clamp(starts[k]), to = clamp(ends[k]);
    if (to <= from) {
        mark_bad(c.space, why + " to nothing");
        return;
    }
    const int s = new_space(to - from);
    space(s).sources = {{root(c.space), 0, to - from, from}};
    set_out(n.outputs[0], s, c.axis);
    window_edits.push_back(WindowEdit{ni, root(c.space), {{from, to - from}}, at});
}

void Walk::transpose(const Node& n) {
    const ValueId x = n.inputs[0];
    const Carrier c = carrier(x);
    const int r = rank(x);
    std::vector<std::int64_t> perm;
    if (r >= 0) {
        const StatusOr<std::vector<std::int64_t>> p =
            n.attr_or<std::vector<std::int64_t>>("perm", {});
        if (p.is_ok()) perm = p.value();
        if (perm.empty())
            for (int i = r - 1; i >= 0; --i) perm.push_back(i);
    }
    if (r < 0 || c.block != 1 || static_cast<int>(perm.size()) != r) {
        mark_bad(c.space, n.describe() + " transposes channels of unknown rank or in blocks");
        return;
    }
    for (int i = 0; i < r; ++i)
        if (perm[static_cast<std::size_t>(i)] == c.axis) {
            set_out(n.outputs[0], c.space, i, 1, c.per_unit);
            return;
        }
    mark_bad(c.space, n.describe() + " has a perm without the channel axis");
}

/// MatMul of two activations: per-head products (Q K^T, P V) keep the heads when both
/// operands carry them on the same batch axis; they join the two groups.
void Walk::matmul_heads(const Node& n) {
    const ValueId a = n.inputs[0], b = n.inputs.size() > 1 ? n.inputs[1] : kNoValue;
    const int r = rank(a);
    if (carries(a) && carries(b) && carrier(a).per_unit && carrier(b).per_unit &&
        carrier(a).axis == carrier(b).axis && r >= 3 && rank(b) == r && rank(n.outputs[0]) == r &&
        carrier(a).axis < r - 2) {
        const Carrier ca = carrier(a);
        unite(ca.space, carrier(b).space, n.describe());
        set_out(n.outputs[0], ca.space, ca.axis, 1, true);
        return;
    }
    stop_at(n);
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
    static const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div", "Max", "Min",
                                                  "Sum", "Mean"};
    const detail::OpInfo* info = detail::find_op_info(n);
    const bool passthrough = info != nullptr && info->channels == detail::ChannelFlow::passthrough;
    bool heads = false;
    for (ValueId in : n.inputs) heads = heads || (carries(in) && carrier(in).per_unit);
    const bool weight_b = constant(n.inputs.size() > 1 ? n.inputs[1] : kNoValue) != nullptr;
    if (heads && !(op == "Reshape" || op == "Transpose" || (op == "MatMul" && !weight_b) ||
                   op == "Softmax" || op == "LogSoftmax" || kBinary.count(op) != 0 ||
                   passthrough)) {
        stop_at(n, n.describe() + " reads the attention heads");
        return;
    }
    if (op == "Conv") return conv(ni);
    if (op == "Gemm") return linear(ni, true);
    if (op == "MatMul") {
        if (weight_b) return linear(ni, false);
        return matmul_heads(n);
    }
    if (!any) return;  // nothing of ours flows through
    const ValueId x = n.inputs[0];
    const ValueId y = n.outputs.empty() ? kNoValue : n.outputs[0];
    if (op == "Reshape" && carries(x) && n.outputs.size() == 1 &&
        !(n.inputs.size() > 1 && carries(n.inputs[1])))
        return reshape(ni);
    if (op == "Transpose" && carries(x) && n.outputs.size() == 1) return transpose(n);
    if (op == "Concat" && n.outputs.size() == 1) return concat(n);
    if (op == "Split" && carries(x) && !(n.inputs.size() > 1 && carries(n.inputs[1])))
        return split(ni);
    if (op == "Slice" && carries(x) && n.outputs.size() == 1 && g_.opset("") >= 10) {
        bool others = false;
        for (std::size_t i = 1; i < n.inputs.size(); ++i) others = others || carries(n.inputs[i]);
        if (!others) return slice(ni);
    }
    if ((op == "Softmax" || op == "LogSoftmax") && carries(x) && n.outputs.size() == 1 &&
        rank(x) > 0) {
        // Normalizes along `axis` (opset 13: that axis alone; before: every axis from it on).
        const bool v13 = g_.opset("") >= 13;
        std::int64_t axis = int_attr(n, "axis", v13 ? -1 : 1, rank(x));
        if (axis < 0) axis += rank(x);
        const Carrier c = carrier(x);
        if (axis >= 0 && axis < rank(x) && (v13 ? c.axis != axis : c.axis < axis)) {
            pass_on(y, c);
            return;
        }
        stop_at(n, n.describe() + " normalizes along the channels");
        return;
    }
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
    if (kBinary.count(op) != 0) {
        // One activation and one constant: per channel. Several activations: one group.
        if (n.inputs.size() == 2) {
            const bool c0 = constant(n.inputs[0]) != nullptr, c1 = constant(n.inputs[1]) != nullptr;
            if (c0 != c1) return per_channel_binary(n, c0 ? 1 : 0, c0 ? 0 : 1);
        }
        // Several activations: the carriers join; an input that carries nothing must broadcast
        // along the channel axis (an attention mask [B, 1, 1, S] added to per-head scores).
        int first = -1, ref_rank = -1;
        Carrier ref{};
        for (ValueId in : n.inputs) {
            if (!carries(in)) continue;
            const Carrier& c = carrier(in);
            if (first < 0) {
                first = c.space;
                ref = c;
                ref_rank = rank(in);
                continue;
            }
            if (c.axis != ref.axis || c.block != ref.block || c.per_unit != ref.per_unit ||
                rank(in) != ref_rank) {
                stop_at(n, n.describe() + " broadcasts its inputs' channels differently");
                return;
            }
            unite(first, c.space, n.describe());
        }
        for (ValueId in : n.inputs)
            if (!carries(in) && (in == kNoValue || ref_rank < 0 || rank(y) != ref_rank ||
                                 !broadcasts_along(in, ref, ref_rank))) {
                stop_at(n, n.describe() + " adds channels that are not in the group");
                return;
            }
        set_out(y, first, ref.axis, ref.block, ref.per_unit);
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
    if (passthrough && carries(x)) {
        bool others = false;
        for (std::size_t i = 1; i < n.inputs.size(); ++i) others = others || carries(n.inputs[i]);
        std::size_t read_outputs = 0;
        for (ValueId o : n.outputs)
            if (o != kNoValue) ++read_outputs;
        if (!others && read_outputs <= 1 && (rank(y) < 0 || rank(y) == rank(x))) {
            pass_on(y, carrier(x));
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
        for (const auto& [name, r] : o.group_ratios) {
            DSINFER_CHECK(std::isfinite(r) && r >= 0 && r < 1, ErrorCode::invalid_argument,
                          "prune_channels: the ratio of group '", name, "' must be in [0, 1), got ", r);
            bool found = false;
            for (const Node& n : g.nodes) found = found || n.name == name;
            DSINFER_CHECK(found, ErrorCode::invalid_argument, "prune_channels: group_ratios names '",
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
        if (o.protect_first && !prods.empty() && out_space(prods.front()) >= 0 &&
            g.nodes[static_cast<std::size_t>(prods.front())].op_type == "Conv")
            walk.space(out_space(prods.front())).protect = true;
        if (o.protect_last && !prods.empty() && out_space(prods.back()) >= 0)
            walk.space(out_space(prods.back())).protect = true;
        for (const std::string& name : o.protect)
            for (std::size_t ni = 0; ni < g.nodes.size(); ++ni)
                if (g.nodes[ni].name == name && !g.nodes[ni].outputs.empty() &&
                    walk.carries(g.nodes[ni].outputs[0]))
                    walk.space(walk.carrier(g.nodes[ni].outputs[0]).space).protect = true;

        // Concatenated channels: a Concat that stays intact keeps its inputs' groups intact
        // (to a fixed point: Concats of Concats), and the layers reading it are consumers of
        // those groups too (recovery refits them).
        for (bool changed = true; changed;) {
            changed = false;
            for (std::size_t s = 0; s < walk.spaces_.size(); ++s) {
                const Space& sp = walk.spaces_[s];
                if (sp.parent >= 0 || sp.sources.empty() || sp.bad.empty()) continue;
                for (const Space::Source& src : sp.sources)
                    if (src.space >= 0 && walk.space(src.space).bad.empty()) {
                        walk.space(src.space).bad = sp.bad;
                        changed = true;
                    }
            }
        }
        for (std::size_t s = walk.spaces_.size(); s-- > 0;) {  // outer Concats first
            const Space& sp = walk.spaces_[s];
            if (sp.parent >= 0 || sp.sources.empty()) continue;
            for (const Space::Source& src : sp.sources)
                if (src.space >= 0 && walk.root(src.space) != static_cast<int>(s)) {
                    Space& t = walk.space(src.space);
                    t.consumers.insert(t.consumers.end(), sp.consumers.begin(), sp.consumers.end());
                }
        }

        // Groups and their scores.
        struct Group {
            int root;
            std::vector<double> score;  ///< per unit (channel, or head)
            std::int64_t unit = 1;
            std::int64_t keep = 0;      ///< units
        };
        std::vector<Group> groups;
        for (std::size_t s = 0; s < walk.spaces_.size(); ++s) {
            const Space& sp = walk.spaces_[s];
            if (sp.parent >= 0 || sp.producers.empty()) continue;
            PruneGroup pg;
            for (int p : sp.producers) pg.producers.push_back(g.nodes[static_cast<std::size_t>(p)].name);
            std::vector<int> consumers = sp.consumers;  // in graph order, once each
            std::sort(consumers.begin(), consumers.end());
            consumers.erase(std::unique(consumers.begin(), consumers.end()), consumers.end());
            for (int c : consumers) pg.consumers.push_back(g.nodes[static_cast<std::size_t>(c)].name);
            pg.channels = pg.kept = sp.channels;
            pg.unit = sp.unit;
            if (!sp.bad.empty()) pg.intact_reason = sp.bad;
            else if (sp.protect) pg.intact_reason = "protected";
            else if (sp.channels < 2) pg.intact_reason = "one channel";
            else if (sp.channels / sp.unit < 2) pg.intact_reason = "one head";
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
            if (sp.unit > 1) {  // a head's score: the mean of its channels'
                const auto units = static_cast<std::size_t>(sp.channels / sp.unit);
                std::vector<double> per(units, 0.0);
                for (std::size_t c = 0; c < gr.score.size(); ++c)
                    per[c / static_cast<std::size_t>(sp.unit)] += gr.score[c] / static_cast<double>(sp.unit);
                gr.score = std::move(per);
                gr.unit = sp.unit;
            }
            groups.push_back(std::move(gr));
            report.prunable_channels += sp.channels;
        }

        // How many channels each group keeps.
        // Kept channels to the nearest multiple (at least one multiple), never above the group.
        // In units: whole heads whose channels make the multiple where they can.
        auto rounded = [&](std::int64_t keep, std::int64_t channels, std::int64_t unit) {
            const std::int64_t m = o.channel_multiple / std::gcd(o.channel_multiple, unit);
            keep = std::max<std::int64_t>(m, (std::max<std::int64_t>(1, keep) + m / 2) / m * m);
            return std::min(keep, channels);
        };
        // A group's own ratio (PruneOptions::group_ratios), or -1.
        std::vector<double> own(groups.size(), -1.0);
        {
            std::size_t k = 0;
            for (const PruneGroup& pg : report.groups) {
                if (!pg.intact_reason.empty()) continue;
                for (const auto& [name, r] : o.group_ratios)
                    if (std::find(pg.producers.begin(), pg.producers.end(), name) != pg.producers.end())
                        own[k] = r;
                ++k;
            }
        }
        auto uniform_keep = [&](const Group& gr, double ratio) {
            const auto c = static_cast<std::int64_t>(gr.score.size());
            return rounded(c - static_cast<std::int64_t>(std::floor(ratio * static_cast<double>(c))), c,
                           gr.unit);
        };
        if (o.global) {
            std::vector<double> all;  // every channel once (a head's score once per channel)
            for (std::size_t k = 0; k < groups.size(); ++k)
                if (own[k] < 0)
                    for (double v : groups[k].score)
                        all.insert(all.end(), static_cast<std::size_t>(groups[k].unit), v);
            const auto drop = static_cast<std::size_t>(std::floor(o.ratio * static_cast<double>(all.size())));
            double threshold = -std::numeric_limits<double>::infinity();
            if (drop > 0 && !all.empty()) {
                std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(drop - 1), all.end());
                threshold = all[drop - 1];
            }
            for (std::size_t k = 0; k < groups.size(); ++k) {
                Group& gr = groups[k];
                if (own[k] >= 0) {
                    gr.keep = uniform_keep(gr, own[k]);
                    continue;
                }
                std::int64_t above = 0;
                for (double v : gr.score) above += v > threshold;
                gr.keep = rounded(above, static_cast<std::int64_t>(gr.score.size()), gr.unit);
            }
        } else {
            for (std::size_t k = 0; k < groups.size(); ++k)
                groups[k].keep = uniform_keep(groups[k], own[k] >= 0 ? own[k] : o.ratio);
        }

        // The kept channels of each pruned group.
        passes::Rewriter rw(g);
        std::vector<std::vector<std::int64_t>> kept_of(walk.spaces_.size());  // pruned roots
        std::vector<char> pruned_root(walk.spaces_.size(), 0);
        std::vector<Group*> group_of(walk.spaces_.size(), nullptr);
        for (Group& gr : groups) {
            group_of[static_cast<std::size_t>(gr.root)] = &gr;
            if (gr.keep == static_cast<std::int64_t>(gr.score.size())) continue;
            std::vector<std::int64_t> units(gr.score.size());
            std::iota(units.begin(), units.end(), 0);
            std::stable_sort(units.begin(), units.end(), [&](std::int64_t a, std::int64_t b) {
                return gr.score[static_cast<std::size_t>(a)] > gr.score[static_cast<std::size_t>(b)];
            });
            units.resize(static_cast<std::size_t>(gr.keep));
            std::sort(units.begin(), units.end());
            std::vector<std::int64_t> order;
            for (std::int64_t u : units)
                for (std::int64_t c = 0; c < gr.unit; ++c) order.push_back(u * gr.unit + c);
            kept_of[static_cast<std::size_t>(gr.root)] = std::move(order);
            pruned_root[static_cast<std::size_t>(gr.root)] = 1;
        }
        // A Split or Slice window that would lose every channel keeps its best one.
        for (const Walk::WindowEdit& we : walk.window_edits) {
            const auto r = static_cast<std::size_t>(walk.root(we.source));
            if (pruned_root[r] == 0 || group_of[r] == nullptr || group_of[r]->unit != 1) continue;
            std::vector<std::int64_t>& order = kept_of[r];
            const std::vector<double>& score = group_of[r]->score;
            for (const auto& [from, len] : we.windows) {
                bool any = false;
                for (std::int64_t c : order) any = any || (c >= from && c < from + len);
                if (any || len <= 0) continue;
                std::int64_t best = from;
                for (std::int64_t c = from; c < from + len; ++c)
                    if (score[static_cast<std::size_t>(c)] > score[static_cast<std::size_t>(best)]) best = c;
                order.insert(std::upper_bound(order.begin(), order.end(), best), best);
                group_of[r]->keep = static_cast<std::int64_t>(order.size());
            }
        }

        // Rewrite.
        std::size_t gi = 0;
        for (PruneGroup& pg : report.groups) {
            if (!pg.intact_reason.empty()) continue;
            Group& gr = groups[gi++];
            const std::int64_t kept_channels = gr.keep * gr.unit;
            pg.kept = kept_channels;
            if (pruned_root[static_cast<std::size_t>(gr.root)] == 0) continue;
            const std::vector<std::int64_t>& order = kept_of[static_cast<std::size_t>(gr.root)];
            pg.kept_channels = order;
            const Space& sp = walk.spaces_[static_cast<std::size_t>(gr.root)];
            for (const Edit& e : sp.edits) {
                Value& v = g.value(e.constant);
                v.initializer = gather_channels(*v.initializer, e.axis, e.block, order);
                v.shape = SymbolicShape::from(v.initializer->shape());
            }
            for (int dw : sp.depthwise)
                passes::set_attr(g.nodes[static_cast<std::size_t>(dw)], "group", kept_channels);
            for (const ShapeEdit& se : sp.shape_edits) {
                Node& rn = g.nodes[static_cast<std::size_t>(se.node)];
                Tensor shape = g.value(rn.inputs[1]).initializer->clone();
                static_cast<std::int64_t*>(shape.raw_data())[se.index] =
                    se.units ? gr.keep : kept_channels;
                rn.inputs[1] = rw.new_constant(rn.name + "/pruned_shape", std::move(shape));
            }
            report.removed_channels += pg.channels - kept_channels;
        }
        // Concatenations: their kept channels are their inputs' (in order, at their offsets).
        std::vector<char> done(walk.spaces_.size(), 0);
        std::function<const std::vector<std::int64_t>*(int)> kept_list =
            [&](int s) -> const std::vector<std::int64_t>* {
            s = walk.root(s);
            const auto i = static_cast<std::size_t>(s);
            if (pruned_root[i] != 0) return &kept_of[i];
            if (walk.spaces_[i].sources.empty()) return nullptr;  // all
            if (done[i] == 0) {
                done[i] = 1;
                std::vector<std::int64_t> kept;
                for (const Space::Source& src : walk.spaces_[i].sources) {
                    const std::vector<std::int64_t>* k = src.space >= 0 ? kept_list(src.space) : nullptr;
                    if (k == nullptr) {
                        for (std::int64_t c = 0; c < src.channels; ++c) kept.push_back(src.offset + c);
                    } else {
                        for (std::int64_t c : *k)
                            if (c >= src.from && c < src.from + src.channels)
                                kept.push_back(src.offset + c - src.from);
                    }
                }
                if (static_cast<std::int64_t>(kept.size()) < walk.spaces_[i].channels) {
                    kept_of[i] = std::move(kept);
                    pruned_root[i] = 1;
                }
            }
            return pruned_root[i] != 0 ? &kept_of[i] : nullptr;
        };
        for (std::size_t s = 0; s < walk.spaces_.size(); ++s) {
            const Space& sp = walk.spaces_[s];
            if (sp.parent >= 0 || sp.sources.empty() || !sp.bad.empty()) continue;
            const std::vector<std::int64_t>* kept = kept_list(static_cast<int>(s));
            if (kept == nullptr) continue;
            for (const Edit& e : sp.edits) {
                Value& v = g.value(e.constant);
                v.initializer = gather_channels(*v.initializer, e.axis, e.block, *kept);
                v.shape = SymbolicShape::from(v.initializer->shape());
            }
            for (int dw : sp.depthwise)
                passes::set_attr(g.nodes[static_cast<std::size_t>(dw)], "group",
                                 static_cast<std::int64_t>(kept->size()));
        }
        // Split sizes and Slice bounds: what each window keeps.
        for (const Walk::WindowEdit& we : walk.window_edits) {
            const std::vector<std::int64_t>* k = kept_list(we.source);
            if (k == nullptr) continue;
            Node& n = g.nodes[static_cast<std::size_t>(we.node)];
            std::vector<std::int64_t> counts, before;
            for (const auto& [from, len] : we.windows) {
                std::int64_t b = 0, in = 0;
                for (std::int64_t c : *k) {
                    b += c < from;
                    in += c >= from && c < from + len;
                }
                counts.push_back(in);
                before.push_back(b);
            }
            if (n.op_type == "Split") {
                if (g.opset("") >= 13) {
                    n.inputs.resize(std::max<std::size_t>(n.inputs.size(), 2), kNoValue);
                    n.inputs[1] = rw.new_constant(
                        n.name + "/pruned_split",
                        Tensor::from_vector<std::int64_t>(Shape{static_cast<std::int64_t>(counts.size())}, counts));
                    std::erase_if(n.attributes, [](const auto& a) { return a.first == "num_outputs"; });
                } else {
                    passes::set_attr(n, "split", counts);
                }
                continue;
            }
            // Slice: the window's start is the kept channels before it, its end adds its own.
            for (int which = 1; which <= 2; ++which) {
                Tensor t = g.value(n.inputs[static_cast<std::size_t>(which)]).initializer->clone();
                const std::int64_t v = which == 1 ? before[0] : before[0] + counts[0];
                if (t.dtype() == DType::i64) static_cast<std::int64_t*>(t.raw_data())[we.index] = v;
                else static_cast<std::int32_t*>(t.raw_data())[we.index] = static_cast<std::int32_t>(v);
                n.inputs[static_cast<std::size_t>(which)] =
                    rw.new_constant(n.name + (which == 1 ? "/pruned_starts" : "/pruned_ends"), std::move(t));
            }
        }
        DSINFER_RETURN_IF_ERROR(g.link());  // new constants (no node was added or removed)

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
