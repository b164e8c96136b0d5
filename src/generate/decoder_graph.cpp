// The Generator's rewrite of a decoder graph (decoder_graph.hpp, docs/GENERATE.md).
//
// Hugging Face form, per layer l: past_key_values.l.key -> Concat(axis 2) with the new keys ->
// (present.l.key) -> [Unsqueeze -> Expand -> Reshape: repeat_kv] -> Transpose(0,1,3,2) ->
// MatMul(Q, ·) -> Mul/Div(scale) -> Add(mask) -> Softmax -> MatMul(·, values) where the values
// come from past_key_values.l.value -> Concat -> [repeat_kv]. The chain from the QK MatMul to
// the PV MatMul becomes PagedAttention(Q, new K, new V) producing the PV MatMul's output.
// ONNX Attention form: Attention(Q, K, V, [mask], past_key, past_value) whose past inputs are
// graph inputs -> PagedAttention(Q, K, V) producing Y.
#include "generate/decoder_graph.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>

namespace dsinfer::detail {
namespace {

using std::int64_t;

struct Uses {
    std::vector<std::vector<int>> consumers;  // per value: node indices
    std::vector<bool> is_output;              // per value: a graph output
};

Uses uses_of(const Graph& g) {
    Uses u;
    u.consumers.resize(g.values.size());
    u.is_output.assign(g.values.size(), false);
    for (std::size_t n = 0; n < g.nodes.size(); ++n)
        for (ValueId in : g.nodes[n].inputs)
            if (in != kNoValue)
                u.consumers[static_cast<std::size_t>(in)].push_back(static_cast<int>(n));
    for (ValueId o : g.outputs) u.is_output[static_cast<std::size_t>(o)] = true;
    return u;
}

std::optional<double> scalar_constant(const Graph& g, ValueId v) {
    if (v == kNoValue) return std::nullopt;
    const Value& val = g.value(v);
    if (!val.initializer || val.initializer->shape().num_elements() != 1) return std::nullopt;
    const Tensor& t = *val.initializer;
    switch (t.dtype()) {
        case DType::f32: return static_cast<double>(t.data<float>()[0]);
        case DType::f64: return t.data<double>()[0];
        case DType::f16: return static_cast<double>(static_cast<float>(t.data<float16>()[0]));
        default: return std::nullopt;
    }
}

std::int64_t attr_int(const Node& n, std::string_view name, std::int64_t dflt) {
    for (const auto& [k, a] : n.attributes)
        if (k == name && a.kind == AttrKind::i) return a.i;
    return dflt;
}

void set_attr(Node& n, std::string name, std::int64_t v) {
    Attribute a;
    a.kind = AttrKind::i;
    a.i = v;
    n.attributes.emplace_back(std::move(name), std::move(a));
}
void set_attr(Node& n, std::string name, float v) {
    Attribute a;
    a.kind = AttrKind::f;
    a.f = v;
    n.attributes.emplace_back(std::move(name), std::move(a));
}

/// The one consumer of `v` other than graph outputs, or -1.
int single_consumer(const Uses& u, ValueId v) {
    const auto& c = u.consumers[static_cast<std::size_t>(v)];
    return c.size() == 1 ? c[0] : -1;
}

/// The one consumer of `v` that reads its data (Shape and Size read only its shape, as the
/// dynamic shapes of repeat_kv do), or -1.
int data_consumer(const Graph& g, const Uses& u, ValueId v) {
    int found = -1;
    for (int c : u.consumers[static_cast<std::size_t>(v)]) {
        const Node& n = g.nodes[static_cast<std::size_t>(c)];
        if (n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size")) continue;
        if (found >= 0) return -1;
        found = c;
    }
    return found;
}

bool is_op(const Node& n, std::string_view op) { return n.domain.empty() && n.op_type == op; }

/// Removes the nodes no graph output needs, and the graph inputs nothing reads.
void remove_dead(Graph& g) {
    std::vector<bool> needed(g.values.size(), false), keep(g.nodes.size(), false);
    for (ValueId o : g.outputs) needed[static_cast<std::size_t>(o)] = true;
    for (std::size_t i = g.nodes.size(); i-- > 0;) {
        const Node& n = g.nodes[i];
        bool any = false;
        for (ValueId o : n.outputs)
            if (o != kNoValue && needed[static_cast<std::size_t>(o)]) any = true;
        if (!any) continue;
        keep[i] = true;
        for (ValueId in : n.inputs)
            if (in != kNoValue) needed[static_cast<std::size_t>(in)] = true;
        // Subgraphs read outer values by name: keep what they capture.
        for (const auto& [k, a] : n.attributes) {
            (void)k;
            if (a.g != nullptr || !a.graphs.empty())
                for (std::size_t v = 0; v < g.values.size(); ++v) needed[v] = true;
        }
    }
    std::vector<Node> nodes;
    for (std::size_t i = 0; i < g.nodes.size(); ++i)
        if (keep[i]) nodes.push_back(std::move(g.nodes[i]));
    g.nodes = std::move(nodes);
    std::erase_if(g.inputs, [&](ValueId v) { return !needed[static_cast<std::size_t>(v)]; });
}

struct LayerIo {
    ValueId past_key = kNoValue, past_value = kNoValue;
    ValueId present_key = kNoValue, present_value = kNoValue;
};

/// Follows the single-consumer chain from `v` through the ops in `through` and returns the
/// first node of another kind (-1 when the chain forks or ends); `scale` multiplies the scalar
/// Mul constants met on the way.
int follow(const Graph& g, const Uses& u, ValueId v, const std::set<std::string>& through,
           double* scale, std::vector<int>* path) {
    for (int guard = 0; guard < 16; ++guard) {
        const int c = data_consumer(g, u, v);
        if (c < 0) return -1;
        const Node& n = g.nodes[static_cast<std::size_t>(c)];
        if (!(n.domain.empty() && through.contains(n.op_type))) return c;
        if (n.op_type == "Mul") {
            const ValueId other = n.inputs[0] == v ? n.inputs[1] : n.inputs[0];
            const auto s = scalar_constant(g, other);
            if (!s || scale == nullptr) return -1;
            *scale *= *s;
        }
        if (path) path->push_back(c);
        v = n.outputs[0];
    }
    return -1;
}

Status rewrite_hf_layer(Graph& g, const Uses& u, int64_t layer, const LayerIo& io,
                        std::vector<std::pair<int, Node>>& replace) {
    const auto where = [&](const char* what) {
        return Status(ErrorCode::invalid_model,
                      "decoder layer " + std::to_string(layer) + ": " + what +
                          " (the attention over past and new keys is not in a recognized form)");
    };
    ValueId kv_all[2] = {kNoValue, kNoValue}, kv_new[2] = {kNoValue, kNoValue};
    const ValueId past[2] = {io.past_key, io.past_value};
    for (int i = 0; i < 2; ++i) {
        const int c = single_consumer(u, past[i]);
        if (c < 0)
            return where(i == 0 ? "the past keys do not feed one node"
                                : "the past values do not feed one node");
        const Node& cat = g.nodes[static_cast<std::size_t>(c)];
        if (!is_op(cat, "Concat") || cat.inputs.size() != 2 || cat.inputs[0] != past[i])
            return where("the past keys/values do not go into Concat(past, new)");
        const int64_t axis = attr_int(cat, "axis", 0);
        if (axis != 2 && axis != -2) return where("the cache Concat is not along axis 2");
        kv_all[i] = cat.outputs[0];
        kv_new[i] = cat.inputs[1];
    }
    const std::set<std::string> repeat = {"Unsqueeze", "Expand", "Reshape"};
    // Keys: repeat_kv, then Transpose(0,1,3,2) (possibly a Mul by a scalar), then MatMul(Q, Kᵀ).
    double scale = 1.0;
    std::set<std::string> k_path = repeat;
    k_path.insert("Transpose");
    k_path.insert("Mul");
    const int qk = follow(g, u, kv_all[0], k_path, &scale, nullptr);
    if (qk < 0 || !is_op(g.nodes[static_cast<std::size_t>(qk)], "MatMul"))
        return where("the keys do not reach a MatMul through repeat and transpose");
    const Node& qk_node = g.nodes[static_cast<std::size_t>(qk)];
    const ValueId q = qk_node.inputs[0];
    // Scores: scale, mask, softmax.
    ValueId v = qk_node.outputs[0];
    bool softmax = false;
    for (int guard = 0; guard < 8 && !softmax; ++guard) {
        const int c = single_consumer(u, v);
        if (c < 0) return where("the scores fork before the softmax");
        const Node& n = g.nodes[static_cast<std::size_t>(c)];
        if (is_op(n, "Mul") || is_op(n, "Div")) {
            const ValueId other = n.inputs[0] == v ? n.inputs[1] : n.inputs[0];
            const auto s = scalar_constant(g, other);
            if (!s || (is_op(n, "Div") && n.inputs[1] != other))
                return where("a score scale that is not a constant");
            scale = is_op(n, "Mul") ? scale * *s : scale / *s;
        } else if (is_op(n, "Add") || is_op(n, "Where") || is_op(n, "Cast")) {
            // the attention mask (replaced by the cache's causal positions) or a cast
        } else if (is_op(n, "Softmax")) {
            const int64_t axis = attr_int(n, "axis", -1);
            if (axis != -1 && axis != 3) return where("the softmax is not over the last axis");
            softmax = true;
        } else {
            return where(
                ("unexpected " + n.op_type + " between the scores and the softmax").c_str());
        }
        v = n.outputs[0];
    }
    if (!softmax) return where("no softmax after the scores");
    const int pv = single_consumer(u, v);
    if (pv < 0 || !is_op(g.nodes[static_cast<std::size_t>(pv)], "MatMul") ||
        g.nodes[static_cast<std::size_t>(pv)].inputs[0] != v)
        return where("the probabilities do not feed MatMul(P, V)");
    // Values: repeat_kv into the PV MatMul.
    const int pv_from_v = follow(g, u, kv_all[1], repeat, nullptr, nullptr);
    if (pv_from_v != pv) return where("the values do not reach MatMul(P, V) through repeat_kv");
    if (!std::isfinite(scale) || scale <= 0) return where("the score scale is not positive");
    Node n;
    n.op_type = "PagedAttention";
    n.domain = kDsinferDomain;
    n.name = "paged_attention_" + std::to_string(layer);
    n.inputs = {q, kv_new[0], kv_new[1]};
    n.outputs = {g.nodes[static_cast<std::size_t>(pv)].outputs[0]};
    set_attr(n, "layer", layer);
    set_attr(n, "scale", static_cast<float>(scale));
    replace.emplace_back(pv, std::move(n));
    return Status::ok();
}

std::optional<int64_t> static_dim(const Value& v, int i) {
    if (!v.shape.known || v.shape.rank() <= i ||
        !v.shape.dims[static_cast<std::size_t>(i)].is_static())
        return std::nullopt;
    return v.shape.dims[static_cast<std::size_t>(i)].value;
}

void read_metadata(const Graph& g, DecoderConfig& c) {
    for (const auto& [key, value] : g.model_info.metadata) {
        if (key != "dsinfer.decoder") continue;
        // A flat JSON object of numbers: pick the fields by name (no JSON library in this room).
        auto num = [&](const char* field) -> std::optional<int64_t> {
            const std::string pat = std::string("\"") + field + "\"";
            const auto at = value.find(pat);
            if (at == std::string::npos) return std::nullopt;
            const auto colon = value.find(':', at + pat.size());
            if (colon == std::string::npos) return std::nullopt;
            try {
                return std::stoll(value.substr(colon + 1));
            } catch (...) {
                return std::nullopt;
            }
        };
        if (auto v = num("max_position_embeddings")) c.max_positions = *v;
        if (auto v = num("eos_token_id")) c.eos_token = *v;
        if (auto v = num("num_heads"); v && c.num_heads == 0) c.num_heads = *v;
    }
}

}  // namespace

StatusOr<DecoderGraphInfo> prepare_decoder_graph(Graph& g) {
    DSINFER_RETURN_IF_ERROR(g.link());
    DecoderGraphInfo info;
    // Inputs and outputs by name.
    std::map<int64_t, LayerIo> layers;
    const std::regex past_re(R"(past_key_values\.(\d+)\.(key|value))");
    const std::regex present_re(R"(present\.(\d+)\.(key|value))");
    std::smatch m;
    for (ValueId in : g.inputs) {
        const std::string& name = g.value(in).name;
        if (std::regex_match(name, m, past_re))
            (m[2] == "key" ? layers[std::stoll(m[1])].past_key
                           : layers[std::stoll(m[1])].past_value) = in;
        else if (name == "input_ids")
            info.input_ids = name;
        else if (name == "position_ids")
            info.position_ids = name;
    }
    for (ValueId out : g.outputs) {
        const std::string& name = g.value(out).name;
        if (std::regex_match(name, m, present_re))
            (m[2] == "key" ? layers[std::stoll(m[1])].present_key
                           : layers[std::stoll(m[1])].present_value) = out;
        else if (name == "logits")
            info.logits = name;
    }
    DSINFER_CHECK(!info.input_ids.empty(), ErrorCode::invalid_model,
                  "not a decoder in a recognized form: no input 'input_ids'");
    DSINFER_CHECK(!info.logits.empty(), ErrorCode::invalid_model,
                  "not a decoder in a recognized form: no output 'logits'");
    DSINFER_CHECK(!layers.empty(), ErrorCode::invalid_model,
                  "not a decoder in a recognized form: no inputs past_key_values.N.key/value");
    int64_t expect = 0;
    for (const auto& [l, io] : layers) {
        DSINFER_CHECK(l == expect++, ErrorCode::invalid_model,
                      "decoder layers are not numbered 0..", layers.size() - 1, ": layer ",
                      expect - 1, " is missing");
        DSINFER_CHECK(io.past_key != kNoValue && io.past_value != kNoValue,
                      ErrorCode::invalid_model, "decoder layer ", l, " lacks past_key_values.", l,
                      ".key or .value");
    }
    // Cache geometry from the past inputs' declared shapes [batch, kv_heads, past, head_dim].
    {
        const Value& pk = g.value(layers.begin()->second.past_key);
        const auto heads = static_dim(pk, 1), dim = static_dim(pk, 3);
        DSINFER_CHECK(pk.shape.known && pk.shape.rank() == 4 && heads && dim,
                      ErrorCode::invalid_model, "input ", pk.name,
                      " must be declared [batch, kv_heads, past, head_dim] with "
                      "fixed kv_heads and head_dim, got ",
                      pk.shape.to_string());
        DSINFER_CHECK(pk.dtype == DType::f32, ErrorCode::unsupported, "input ", pk.name,
                      ": the cache of a float32 decoder is supported, got ",
                      pk.dtype ? dtype_name(*pk.dtype) : "no type");
        info.config.kv_heads = *heads;
        info.config.head_dim = *dim;
        for (const auto& [l, io] : layers)
            for (ValueId v : {io.past_key, io.past_value}) {
                const Value& x = g.value(v);
                DSINFER_CHECK(static_dim(x, 1) == heads && static_dim(x, 3) == dim,
                              ErrorCode::invalid_model, "input ", x.name, " is ",
                              x.shape.to_string(), ", layer 0's cache is [batch, ", *heads,
                              ", past, ", *dim, "]");
            }
    }
    info.config.layers = static_cast<int64_t>(layers.size());

    const Uses u = uses_of(g);
    std::vector<std::pair<int, Node>> replace;
    bool attention_op = false;
    for (const auto& [l, io] : layers) {
        // The ONNX Attention form: both past inputs feed one Attention node.
        const int c = single_consumer(u, io.past_key);
        if (c >= 0 && is_op(g.nodes[static_cast<std::size_t>(c)], "Attention")) {
            const Node& a = g.nodes[static_cast<std::size_t>(c)];
            DSINFER_CHECK(
                a.inputs.size() >= 6 && a.inputs[4] == io.past_key && a.inputs[5] == io.past_value,
                ErrorCode::invalid_model, "decoder layer ", l,
                ": Attention does not take past_key_values.", l, " as past_key/past_value");
            for (const auto& [k, at] : a.attributes) {
                DSINFER_CHECK(k != "softcap" || at.f == 0.f, ErrorCode::unsupported,
                              "decoder layer ", l, ": Attention softcap is not supported");
                DSINFER_CHECK(k != "qk_matmul_output_mode" || at.i == 0, ErrorCode::unsupported,
                              "decoder layer ", l, ": Attention qk_matmul_output_mode");
            }
            DSINFER_CHECK(a.outputs.size() < 4 || a.outputs[3] == kNoValue ||
                              u.consumers[static_cast<std::size_t>(a.outputs[3])].empty(),
                          ErrorCode::unsupported, "decoder layer ", l,
                          ": Attention's qk_matmul_output is read");
            Node n;
            n.op_type = "PagedAttention";
            n.domain = kDsinferDomain;
            n.name = "paged_attention_" + std::to_string(l);
            n.inputs = {a.inputs[0], a.inputs[1], a.inputs[2]};
            n.outputs = {a.outputs[0]};
            set_attr(n, "layer", l);
            for (const auto& [k, at] : a.attributes) {
                if (k == "scale") set_attr(n, "scale", at.f);
                if (k == "q_num_heads") set_attr(n, "num_heads", at.i);
                if (k == "kv_num_heads") set_attr(n, "kv_num_heads", at.i);
                if (k == "q_num_heads" && info.config.num_heads == 0) info.config.num_heads = at.i;
            }
            replace.emplace_back(c, std::move(n));
            attention_op = true;
            continue;
        }
        DSINFER_RETURN_IF_ERROR(rewrite_hf_layer(g, u, l, io, replace));
    }
    info.config.form = attention_op ? "onnx-attention" : "hf-past-present";
    for (auto& [idx, node] : replace) g.nodes[static_cast<std::size_t>(idx)] = std::move(node);
    // Drop the present outputs and the past inputs.
    std::set<ValueId> drop;
    for (const auto& [l, io] : layers) {
        drop.insert(io.present_key);
        drop.insert(io.present_value);
        drop.insert(io.past_key);
        drop.insert(io.past_value);
    }
    std::erase_if(g.outputs, [&](ValueId v) { return drop.contains(v); });
    std::erase_if(g.inputs, [&](ValueId v) { return drop.contains(v); });
    remove_dead(g);

    // Logits only for the sampled rows: Gather(hidden, rows, axis 1) before the head's MatMul.
    DSINFER_RETURN_IF_ERROR(g.link());
    const ValueId logits = *g.find_value(info.logits);
    const int32_t head = g.value(logits).producer;
    if (head >= 0) {
        Node& mm = g.nodes[static_cast<std::size_t>(head)];
        const bool plain = is_op(mm, "MatMul") && mm.inputs.size() == 2 &&
                           g.value(mm.inputs[1]).initializer.has_value() &&
                           g.value(mm.inputs[1]).initializer->shape().rank() == 2;
        if (plain) {
            info.config.vocab_size = g.value(mm.inputs[1]).initializer->shape()[1];
            const ValueId rows = g.add_value(kLogitsRowsInput, DType::i64,
                                             SymbolicShape{true, {Dim::named("sampled_rows")}});
            const ValueId hidden = g.nodes[static_cast<std::size_t>(head)].inputs[0];
            const ValueId picked = g.add_value("dsinfer_logits_hidden", DType::f32);
            Node gather;
            gather.op_type = "Gather";
            gather.name = "dsinfer_logits_rows_gather";
            gather.inputs = {hidden, rows};
            gather.outputs = {picked};
            set_attr(gather, "axis", int64_t{1});
            g.nodes[static_cast<std::size_t>(head)].inputs[0] = picked;
            g.nodes.push_back(std::move(gather));
            g.inputs.push_back(rows);
            info.logits_rows = true;
        }
    }
    if (info.config.vocab_size == 0) {
        const auto vocab = static_dim(g.value(logits), 2);
        DSINFER_CHECK(vocab.has_value(), ErrorCode::invalid_model,
                      "the vocabulary size is unknown: output logits is ",
                      g.value(logits).shape.to_string(), " and not a MatMul by a constant");
        info.config.vocab_size = *vocab;
    }
    // Whatever inputs remain must be the ones a step feeds.
    for (ValueId in : g.inputs) {
        const std::string& name = g.value(in).name;
        DSINFER_CHECK(
            name == info.input_ids || name == info.position_ids || name == kLogitsRowsInput,
            ErrorCode::unsupported, "decoder input '", name,
            "' is still read after the rewrite (a generation step feeds input_ids, "
            "position_ids and the cache)");
    }
    read_metadata(g, info.config);
    DSINFER_RETURN_IF_ERROR(g.sort_topologically());
    return info;
}

}  // namespace dsinfer::detail
