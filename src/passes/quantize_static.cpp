// Static INT8 and weight-only INT8 rewrites (dsinfer/quantize.hpp): which activations a
// calibrated QDQ model quantizes (static_quantize_values), the rewrite itself once their ranges
// are known (apply_static_quantization), and the weight-only form (quantize_weight_only). No
// engine here: calibration is the quantizer room's (src/quantizer/), these are graph rewrites.
//
// The form is onnxruntime.quantization.quantize_static(QuantFormat.QDQ)'s, the one fuse_qdq
// (src/passes/fuse_qdq.cpp) turns back into INT8 kernels:
//   - an activation T that a quantized node reads or writes gets QuantizeLinear ->
//     DequantizeLinear once, after its producer; every reader of T then reads the DQ;
//   - a node's output followed by its only reader Relu / Clip is quantized after the activation
//     (the island X -> Relu -> Q; the Relu is a no-op on the u8 values fuse_qdq drops);
//   - a MatMul whose only reader is an Add of a constant [N] bias keeps a float output (ONNX
//     Runtime's MatMul islands without Q: MatMulIntegerToFloat with the bias);
//   - data movement (Flatten, Reshape, Transpose, Squeeze, Unsqueeze), MaxPool and Concat
//     share one scale and zero point between their inputs and output (a union of the calibrated
//     ranges), so they run on the 8-bit tensor itself;
//   - weights s8 symmetric (per output channel: Conv axis 0, MatMul [K, N] axis 1, Gemm B's N
//     axis; or per tensor) behind DequantizeLinear with no zero point (0); Conv and Gemm biases
//     int32 at scale x_scale * w_scale, zero point 0;
//   - graph outputs stay float32 unless asked (keep_float_outputs = false).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "dsinfer/quantize.hpp"
#include "ops/quantize.hpp"
#include "passes/pass_utils.hpp"
#include "passes/quantize_common.hpp"

namespace dsinfer {
namespace {

using std::int64_t;
using passes::GraphIndex;
using passes::Rewriter;

const std::vector<std::string>& default_static_ops() {
    static const std::vector<std::string> kOps{
        "Conv", "MatMul", "Gemm", "Add", "Mul", "MaxPool", "GlobalAveragePool", "Concat",
        "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze"};
    return kOps;
}

bool shares_params(const std::string& op) {
    return op == "MaxPool" || op == "Flatten" || op == "Reshape" || op == "Transpose" ||
           op == "Squeeze" || op == "Unsqueeze";
}

/// Ops whose float output is float when their first input is (for values whose dtype the
/// model does not declare).
bool keeps_float(const std::string& op) {
    static const std::unordered_set<std::string> kOps{
        "Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Relu", "Clip",
        "LeakyRelu", "Sigmoid", "Tanh", "MaxPool", "AveragePool", "GlobalAveragePool",
        "GlobalMaxPool", "BatchNormalization", "Flatten", "Reshape", "Transpose", "Squeeze",
        "Unsqueeze", "Concat", "Softmax", "Identity", "Pad", "Resize", "HardSwish",
        "HardSigmoid", "Erf", "Gelu", "LayerNormalization", "Split", "Slice"};
    return kOps.count(op) != 0;
}

/// Per value: float32 (declared, or inferred through ops that keep the type).
std::vector<char> float_values(const Graph& g) {
    std::vector<char> f(g.values.size(), 0);
    for (std::size_t v = 0; v < g.values.size(); ++v) {
        const Value& val = g.values[v];
        if (val.dtype) f[v] = *val.dtype == DType::f32;
        else if (val.initializer) f[v] = val.initializer->dtype() == DType::f32;
    }
    for (const Node& n : g.nodes) {
        if (!n.domain.empty()) continue;
        for (ValueId out : n.outputs) {
            if (out == kNoValue || g.value(out).dtype) continue;
            if (n.op_type == "Cast") {
                const Attribute* to = n.find_attr("to");
                f[static_cast<std::size_t>(out)] =
                    to != nullptr && to->kind == AttrKind::i && to->i == 1;
            } else if (keeps_float(n.op_type) && !n.inputs.empty() && n.inputs[0] != kNoValue) {
                f[static_cast<std::size_t>(out)] = f[static_cast<std::size_t>(n.inputs[0])];
            }
        }
    }
    return f;
}

/// A weight to quantize: input `input` of node `node`, per channel along `axis` (-1: per
/// tensor); its bias (input `bias`, -1 when none) goes int32 at scale x_scale * w_scale.
struct WeightUse {
    int node = -1;
    int input = 1;
    int axis = -1;
    int bias = -1;
    ValueId x = kNoValue;  ///< the activation the weight multiplies (the bias scale's x_scale)
};

/// What static quantization does to a graph (before ranges are known).
struct StaticPlan {
    std::vector<ValueId> tensors;           ///< quantized activations, in marking order
    std::unordered_map<ValueId, int> index; ///< tensor -> position in `tensors`
    std::vector<int> parent;                ///< union-find: tensors sharing parameters
    std::vector<WeightUse> weights;
    std::vector<LayerRecord> layers;
    std::size_t quantized_nodes = 0;

    int find(int i) {
        while (parent[static_cast<std::size_t>(i)] != i)
            i = parent[static_cast<std::size_t>(i)] =
                parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(i)])];
        return i;
    }
    void unite(ValueId a, ValueId b) {
        const int ra = find(index.at(a)), rb = find(index.at(b));
        if (ra != rb) parent[static_cast<std::size_t>(std::max(ra, rb))] = std::min(ra, rb);
    }
    bool marked(ValueId v) const { return index.count(v) != 0; }
};

std::string base_name(const Graph& g, const Node& n) {
    return n.name.empty() && !n.outputs.empty() && n.outputs[0] != kNoValue
               ? g.value(n.outputs[0]).name
               : n.name;
}

StatusOr<StaticPlan> plan_static(const Graph& g, const StaticQuantizeOptions& o,
                                 bool weights_only) {
    StaticPlan plan;
    const GraphIndex ix(g);
    const std::vector<char> is_float = float_values(g);
    const std::vector<std::string>& op_list = o.op_types.empty() ? default_static_ops() : o.op_types;
    const std::unordered_set<std::string> ops(op_list.begin(), op_list.end());
    const std::unordered_set<std::string> exclude(o.exclude.begin(), o.exclude.end());
    std::vector<char> is_output(g.values.size(), 0);
    for (ValueId v : g.outputs) is_output[static_cast<std::size_t>(v)] = 1;

    // An activation that may be quantized: float32, not a constant.
    const auto activation = [&](ValueId v) {
        return v != kNoValue && is_float[static_cast<std::size_t>(v)] != 0 &&
               !g.value(v).initializer;
    };
    const auto mark = [&](ValueId v) {
        if (plan.marked(v)) return;
        plan.index.emplace(v, static_cast<int>(plan.tensors.size()));
        plan.parent.push_back(static_cast<int>(plan.tensors.size()));
        plan.tensors.push_back(v);
    };
    // The value a node's output is quantized at: after its only reader when that is Relu or
    // Clip (constant bounds), else the output itself; kNoValue when it must stay float.
    const auto output_point = [&](ValueId y) -> ValueId {
        const int c = ix.sole_consumer(y);
        if (c >= 0) {
            const Node& r = g.nodes[static_cast<std::size_t>(c)];
            const bool clip_const =
                r.op_type == "Clip" &&
                std::all_of(r.inputs.begin() + 1, r.inputs.end(),
                            [&](ValueId b) { return b == kNoValue || ix.constant(b) != nullptr; });
            if (r.domain.empty() && (r.op_type == "Relu" || clip_const) && r.outputs.size() == 1 &&
                exclude.count(r.name) == 0)
                y = r.outputs[0];
        }
        if (!activation(y)) return kNoValue;
        if (o.keep_float_outputs && is_output[static_cast<std::size_t>(y)] != 0) return kNoValue;
        return y;
    };

    for (std::size_t ni = 0; ni < g.nodes.size(); ++ni) {
        const Node& n = g.nodes[ni];
        if (!n.domain.empty() || ops.count(n.op_type) == 0 || n.outputs.empty() ||
            n.outputs[0] == kNoValue)
            continue;
        const std::string& op = n.op_type;
        const bool weighted = op == "Conv" || op == "MatMul" || op == "Gemm";
        if (weights_only && !weighted) continue;
        LayerRecord rec{base_name(g, n), op, "fp32", "", 0, 0};
        const auto reject = [&](std::string why) {
            rec.reason = std::move(why);
            plan.layers.push_back(rec);
        };
        const bool excluded = exclude.count(n.name) != 0 ||
                              exclude.count(g.value(n.outputs[0]).name) != 0;
        if (weighted) {
            if (n.inputs.size() < 2) continue;
            const Tensor* w = ix.constant(n.inputs[1]);
            if (w == nullptr || w->dtype() != DType::f32 || w->num_elements() == 0) {
                if (op == "Conv" || w != nullptr)
                    reject("weight is not a constant float32 tensor");
                continue;  // MatMul of two activations (attention): not a candidate
            }
            rec.weight_bytes_before = w->num_bytes();
            WeightUse use;
            use.node = static_cast<int>(ni);
            use.x = n.inputs[0];
            if (op == "Conv") {
                if (w->num_dims() < 3) { reject("Conv weight of rank below 3"); continue; }
                use.axis = 0;
                if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
                    const Tensor* b = ix.constant(n.inputs[2]);
                    if (b == nullptr || b->dtype() != DType::f32) {
                        reject("bias is not a constant float32 tensor");
                        continue;
                    }
                    use.bias = 2;
                }
            } else if (op == "MatMul") {
                if (w->num_dims() != 2) { reject("MatMul weight is not 2-D"); continue; }
                use.axis = 1;
            } else {  // Gemm
                DSINFER_ASSIGN_OR_RETURN(const int64_t trans_a, n.attr_or<int64_t>("transA", 0));
                DSINFER_ASSIGN_OR_RETURN(const int64_t trans_b, n.attr_or<int64_t>("transB", 0));
                DSINFER_ASSIGN_OR_RETURN(const float alpha, n.attr_or<float>("alpha", 1.f));
                DSINFER_ASSIGN_OR_RETURN(const float beta, n.attr_or<float>("beta", 1.f));
                if (w->num_dims() != 2 || trans_a != 0 || alpha != 1.f ||
                    (beta != 1.f && n.inputs.size() > 2)) {
                    reject("Gemm with transA, alpha or beta other than 0, 1, 1");
                    continue;
                }
                use.axis = trans_b != 0 ? 0 : 1;
                if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
                    const Tensor* c = ix.constant(n.inputs[2]);
                    const int64_t cols = w->shape()[static_cast<std::size_t>(use.axis)];
                    if (c != nullptr && c->dtype() == DType::f32 && c->num_dims() == 1 &&
                        c->shape()[0] == cols)
                        use.bias = 2;  // else C stays float (QGemm's float C)
                }
            }
            if (!o.per_channel) use.axis = -1;
            if (!passes::all_finite_f32(*w)) { reject("weight holds NaN or infinity"); continue; }
            if (excluded) { reject("excluded by the caller"); continue; }
            if (!weights_only) {
                if (!activation(n.inputs[0])) {
                    reject("input is not a float32 activation");
                    continue;
                }
                mark(n.inputs[0]);
                const ValueId y = n.outputs[0];
                bool float_out = false;
                if (op == "MatMul") {
                    const int c = ix.sole_consumer(y);
                    if (c >= 0) {
                        const Node& a = g.nodes[static_cast<std::size_t>(c)];
                        if (a.op_type == "Add" && a.domain.empty() && a.inputs.size() == 2) {
                            const Tensor* b = ix.constant(a.inputs[a.inputs[0] == y ? 1 : 0]);
                            float_out = b != nullptr && b->dtype() == DType::f32 &&
                                        b->num_dims() == 1 && b->shape()[0] == w->shape()[1];
                        }
                    }
                }
                if (!float_out) {
                    const ValueId q = output_point(y);
                    if (q != kNoValue) mark(q);
                }
            }
            const std::int64_t channels = use.axis < 0 ? 1 : w->shape()[static_cast<std::size_t>(use.axis)];
            rec.weight_bytes_after = static_cast<std::uint64_t>(w->num_elements()) +
                                     static_cast<std::uint64_t>(channels) * sizeof(float);
            rec.precision = "int8";
            plan.weights.push_back(use);
            plan.layers.push_back(rec);
            ++plan.quantized_nodes;
            continue;
        }
        // Ops without weights join an INT8 chain: at least one input must already be quantized
        // (a quantized layer wrote it), so a float region stays free of Q/DQ pairs.
        const auto in_chain = [&]() {
            return std::any_of(n.inputs.begin(), n.inputs.end(),
                               [&](ValueId v) { return v != kNoValue && plan.marked(v); });
        };
        if (op == "Add" || op == "Mul") {
            if (n.inputs.size() != 2 || !activation(n.inputs[0]) || !activation(n.inputs[1])) {
                reject("an operand is a constant or not float32");
                continue;
            }
            if (!in_chain()) { reject("no input comes from a quantized layer"); continue; }
            if (excluded) { reject("excluded by the caller"); continue; }
            const ValueId q = output_point(n.outputs[0]);
            if (q == kNoValue) { reject("its output stays float32 (a graph output)"); continue; }
            mark(n.inputs[0]);
            mark(n.inputs[1]);
            mark(q);
        } else if (op == "GlobalAveragePool") {
            if (!activation(n.inputs[0])) { reject("input is not a float32 activation"); continue; }
            if (!in_chain()) { reject("its input comes from no quantized layer"); continue; }
            if (excluded) { reject("excluded by the caller"); continue; }
            if (!activation(n.outputs[0]) ||
                (o.keep_float_outputs && is_output[static_cast<std::size_t>(n.outputs[0])] != 0)) {
                reject("its output stays float32 (a graph output)");
                continue;
            }
            mark(n.inputs[0]);
            mark(n.outputs[0]);
        } else if (shares_params(op) || op == "Concat") {
            // The 8-bit tensor itself moves: only inside a quantized chain.
            const std::size_t data_inputs = op == "Concat" ? n.inputs.size() : 1;
            bool all = data_inputs > 0;
            for (std::size_t i = 0; i < data_inputs; ++i)
                all = all && n.inputs[i] != kNoValue && plan.marked(n.inputs[i]);
            const ValueId y = n.outputs[0];
            if (!all || excluded || !activation(y) ||
                (o.keep_float_outputs && is_output[static_cast<std::size_t>(y)] != 0))
                continue;  // not a layer of its own: stays float quietly
            mark(y);
            for (std::size_t i = 0; i < data_inputs; ++i) plan.unite(n.inputs[i], y);
        } else {
            continue;
        }
        rec.precision = "int8";
        plan.layers.push_back(rec);
        ++plan.quantized_nodes;
    }
    return plan;
}

/// Removes the float32 initializers no node reads any more (their memory goes at once).
void drop_unread_initializers(Graph& g, const std::vector<ValueId>& candidates) {
    std::vector<char> read(g.values.size(), 0);
    for (const Node& n : g.nodes)
        for (ValueId v : n.inputs)
            if (v != kNoValue) read[static_cast<std::size_t>(v)] = 1;
    for (ValueId v : g.outputs) read[static_cast<std::size_t>(v)] = 1;
    const GraphIndex ix(g);
    for (ValueId v : candidates) {
        const auto i = static_cast<std::size_t>(v);
        if (!read[i] && !ix.pinned(v)) g.values[i].initializer.reset();
    }
}

Tensor scalar_f32(float v) {
    Tensor t = Tensor::allocate(DType::f32, Shape{}).value_or_throw();
    t.data_unchecked<float>()[0] = v;
    return t;
}

/// The weights of plan.weights become s8 behind DequantizeLinear (and their biases int32 when
/// `x_scale` gives the activation's scale).
Status rewrite_weights(Graph& g, Rewriter& rw, const StaticPlan& plan,
                       const std::function<float(ValueId)>* x_scale, std::uint64_t& float_bytes,
                       std::uint64_t& int8_bytes) {
    // One quantized form per (weight, axis); biases per (bias, x scale, weight).
    std::unordered_map<std::uint64_t, std::pair<ValueId, Tensor>> forms;
    std::vector<ValueId> replaced;
    for (const WeightUse& use : plan.weights) {
        const ValueId wv =
            g.nodes[static_cast<std::size_t>(use.node)].inputs[static_cast<std::size_t>(use.input)];
        const std::uint64_t key = (static_cast<std::uint64_t>(wv) << 8) |
                                  static_cast<std::uint64_t>(use.axis + 1);
        auto it = forms.find(key);
        if (it == forms.end()) {
            const Tensor& w = *g.value(wv).initializer;
            DSINFER_ASSIGN_OR_RETURN(passes::SymmetricWeight sw,
                                     passes::quantize_symmetric_s8(w, use.axis));
            float_bytes += w.num_bytes();
            int8_bytes += sw.q.num_bytes() + sw.scale.num_bytes();
            const std::string name = g.value(wv).name;
            const ValueId q = rw.new_constant(name + "_q", std::move(sw.q));
            const ValueId s = rw.new_constant(name + "_scale", sw.scale);
            const ValueId dq = rw.new_value(name + "_dq", DType::f32, g.value(wv).shape);
            Node& d = rw.add("DequantizeLinear", "", {q, s}, {dq}, name + "_DQ");
            if (use.axis >= 0) passes::set_attr(d, "axis", static_cast<int64_t>(use.axis));
            it = forms.emplace(key, std::make_pair(dq, std::move(sw.scale))).first;
            replaced.push_back(wv);
        }
        const ValueId wdq = it->second.first;
        const Tensor w_scale = it->second.second;
        g.nodes[static_cast<std::size_t>(use.node)].inputs[static_cast<std::size_t>(use.input)] = wdq;
        if (use.bias < 0 || x_scale == nullptr) continue;
        // Bias: int32 at x_scale * w_scale (f32 products), zero point 0.
        const ValueId bv =
            g.nodes[static_cast<std::size_t>(use.node)].inputs[static_cast<std::size_t>(use.bias)];
        const Tensor& b = *g.value(bv).initializer;
        const float xs = (*x_scale)(use.x);
        const int64_t count = b.num_elements();
        const bool per_channel = w_scale.num_elements() > 1;
        if (per_channel && w_scale.num_elements() != count) continue;  // keeps the float bias
        DSINFER_ASSIGN_OR_RETURN(Tensor bq, Tensor::allocate(DType::i32, b.shape()));
        DSINFER_ASSIGN_OR_RETURN(Tensor bs, Tensor::allocate(DType::f32, per_channel ? Shape{count} : Shape{}));
        for (int64_t c = 0; c < (per_channel ? count : 1); ++c)
            bs.data_unchecked<float>()[c] = xs * w_scale.data_unchecked<float>()[c];
        for (int64_t c = 0; c < count; ++c) {
            const float s = bs.data_unchecked<float>()[per_channel ? c : 0];
            bq.data_unchecked<std::int32_t>()[c] = detail::saturate_round<std::int32_t>(
                static_cast<double>(b.data_unchecked<float>()[c] / s), 0.0);
        }
        float_bytes += b.num_bytes();
        int8_bytes += bq.num_bytes() + bs.num_bytes();
        const std::string name = g.value(bv).name;
        const ValueId q = rw.new_constant(name + "_q", std::move(bq));
        const ValueId s = rw.new_constant(name + "_scale", std::move(bs));
        const ValueId dq = rw.new_value(name + "_dq", DType::f32, g.value(bv).shape);
        Node& d = rw.add("DequantizeLinear", "", {q, s}, {dq}, name + "_DQ");
        if (per_channel) passes::set_attr(d, "axis", int64_t{0});
        g.nodes[static_cast<std::size_t>(use.node)].inputs[static_cast<std::size_t>(use.bias)] = dq;
        replaced.push_back(bv);
    }
    DSINFER_RETURN_IF_ERROR(rw.commit().status());
    drop_unread_initializers(g, replaced);
    return Status::ok();
}

Status check_graph(const Graph& g, const StaticQuantizeOptions& o, const char* what) {
    DSINFER_CHECK(g.opset("") >= 10 || g.nodes.empty(), ErrorCode::unsupported, what,
                  ": the graph imports opset ", g.opset(""),
                  " of the default domain; QuantizeLinear needs 10 or later");
    DSINFER_CHECK(!o.per_channel || g.opset("") >= 13 || g.nodes.empty(), ErrorCode::unsupported,
                  what, ": per-channel weights need DequantizeLinear's axis (opset 13; the graph "
                  "imports ", g.opset(""), "): quantize per tensor instead");
    return Status::ok();
}

}  // namespace

StatusOr<std::vector<std::string>> static_quantize_values(const Graph& g,
                                                          const StaticQuantizeOptions& o) {
    try {
        DSINFER_ASSIGN_OR_RETURN(StaticPlan plan, plan_static(g, o, false));
        std::vector<std::string> names;
        names.reserve(plan.tensors.size());
        for (ValueId v : plan.tensors) names.push_back(g.value(v).name);
        return names;
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "static_quantize_values: out of memory");
    }
}

StatusOr<StaticQuantizeReport> apply_static_quantization(Graph& g, const CalibrationTable& table,
                                                         const StaticQuantizeOptions& o) {
    try {
        StaticQuantizeReport report;
        if (passes::has_quantized_op(g)) {
            report.already_quantized = true;
            return report;
        }
        DSINFER_RETURN_IF_ERROR(check_graph(g, o, "apply_static_quantization"));
        DSINFER_ASSIGN_OR_RETURN(StaticPlan plan, plan_static(g, o, false));
        // The range of each parameter group: the union of its members' ranges.
        const std::size_t nt = plan.tensors.size();
        std::vector<float> lo(nt, 0.f), hi(nt, 0.f);
        for (std::size_t i = 0; i < nt; ++i) {
            const std::string& name = g.value(plan.tensors[i]).name;
            const TensorRange* r = table.find(name);
            DSINFER_CHECK(r != nullptr, ErrorCode::invalid_argument,
                          "apply_static_quantization: the calibration table has no range for '",
                          name, "'");
            DSINFER_CHECK(std::isfinite(r->lo) && std::isfinite(r->hi) && r->lo <= r->hi,
                          ErrorCode::invalid_argument,
                          "apply_static_quantization: the range of '", name, "' is [", r->lo,
                          ", ", r->hi, "]: not finite or empty");
            // Ranges hold 0, so [0, 0] is the union's neutral start.
            const auto root = static_cast<std::size_t>(plan.find(static_cast<int>(i)));
            lo[root] = std::min(lo[root], r->lo);
            hi[root] = std::max(hi[root], r->hi);
        }
        const DType qtype = o.symmetric_activations ? DType::i8 : DType::u8;
        std::vector<detail::StaticQuantParams> params(nt);
        for (std::size_t i = 0; i < nt; ++i) {
            const auto root = static_cast<std::size_t>(plan.find(static_cast<int>(i)));
            params[i] = detail::static_quant_params(lo[root], hi[root], o.symmetric_activations);
        }
        Rewriter rw(g);
        // Activations: Q -> DQ after the producer, every reader reads the DQ. One scale and zero
        // point constant per parameter group.
        std::vector<std::pair<ValueId, ValueId>> group_consts(nt, {kNoValue, kNoValue});
        for (std::size_t i = 0; i < nt; ++i) {
            const ValueId v = plan.tensors[i];
            const std::string name = g.value(v).name;
            const auto root = static_cast<std::size_t>(plan.find(static_cast<int>(i)));
            auto& [s, z] = group_consts[root];
            if (s == kNoValue) {
                s = rw.new_constant(name + "_scale", scalar_f32(params[i].scale));
                Tensor zt = Tensor::allocate(qtype, Shape{}).value_or_throw();
                if (qtype == DType::u8)
                    zt.data_unchecked<std::uint8_t>()[0] = static_cast<std::uint8_t>(params[i].zero_point);
                else
                    zt.data_unchecked<std::int8_t>()[0] = 0;
                z = rw.new_constant(name + "_zero_point", std::move(zt));
            }
            const ValueId q = rw.new_value(name + "_q", qtype, g.value(v).shape);
            const ValueId dq = rw.new_value(name + "_dq", DType::f32, g.value(v).shape);
            rw.replace_uses(v, dq);
            rw.add("QuantizeLinear", "", {v, s, z}, {q}, name + "_Q");
            rw.add("DequantizeLinear", "", {q, s, z}, {dq}, name + "_DQ");
        }
        const std::function<float(ValueId)> x_scale = [&](ValueId x) {
            const auto it = plan.index.find(x);
            return it == plan.index.end() ? 1.f : params[static_cast<std::size_t>(it->second)].scale;
        };
        DSINFER_RETURN_IF_ERROR(rewrite_weights(g, rw, plan, &x_scale, report.float_weight_bytes,
                                                report.int8_weight_bytes));
        report.layers = std::move(plan.layers);
        report.quantized_nodes = plan.quantized_nodes;
        report.quantized_tensors = nt;
        report.calibration = table;
        return report;
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted,
                      "apply_static_quantization: out of memory while quantizing");
    } catch (const Error& e) {
        return Status(e.code(), e.message());
    }
}

StatusOr<StaticQuantizeReport> quantize_weight_only(Graph& g, const StaticQuantizeOptions& o) {
    try {
        StaticQuantizeReport report;
        if (passes::has_quantized_op(g)) {
            report.already_quantized = true;
            return report;
        }
        DSINFER_RETURN_IF_ERROR(check_graph(g, o, "quantize_weight_only"));
        DSINFER_ASSIGN_OR_RETURN(StaticPlan plan, plan_static(g, o, true));
        Rewriter rw(g);
        DSINFER_RETURN_IF_ERROR(rewrite_weights(g, rw, plan, nullptr, report.float_weight_bytes,
                                                report.int8_weight_bytes));
        report.layers = std::move(plan.layers);
        report.quantized_nodes = plan.quantized_nodes;
        return report;
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted,
                      "quantize_weight_only: out of memory while quantizing");
    } catch (const Error& e) {
        return Status(e.code(), e.message());
    }
}

}  // namespace dsinfer
