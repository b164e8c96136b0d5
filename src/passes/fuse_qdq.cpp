// fuse_qdq (level 2): ONNX Runtime's QDQ form (quantize_static, QuantFormat.QDQ) turned into
// integer ops, so that a pre-quantized model runs on the INT8 kernels instead of dequantizing
// to float around every op. Islands, each anchored on one float op X:
//   DQ(x_q), DQ(w_q const) [, DQ(bias_i32 const)] -> Conv [-> Relu|Clip] -> Q
//       ==> QLinearConv(x_q, xs, xz, w_q, ws, wz, ys, yz [, bias_i32])
//   DQ(a_q), DQ(b_q const, 2-D) -> MatMul [-> Relu|Clip] -> Q ==> QLinearMatMul
//   DQ(a_q), DQ(b_q const, 2-D) -> MatMul [-> Add(bias f32 [N])] (no Q: ORT's
//       OpTypesToExcludeOutputQuantization) ==> com.dsinfer MatMulIntegerToFloat(a_q, b_q, as,
//       bs, az, bz [, bias])
//   DQ(a_q), DQ(b_q const) [, DQ(c_i32 const)] -> Gemm [-> Relu|Clip] [-> Q]
//       ==> com.microsoft QGemm (quantized output with Q, float32 without)
//   DQ(a_q), DQ(b_q) -> Add | Mul [-> Relu|Clip] -> Q ==> com.microsoft QLinearAdd | QLinearMul;
//   DQ(x_q) -> GlobalAveragePool | Sigmoid -> Q ==> com.microsoft QLinearGlobalAveragePool |
//       QLinearSigmoid (operands and output of one 8-bit type, per tensor);
//   DQ(x_q) -> MaxPool | Flatten | Reshape | Transpose | Squeeze | Unsqueeze -> Q, DQ(x_i) ->
//       Concat -> Q: the op on the 8-bit tensor itself when every DQ and the Q have the same
//       scale and zero point (data movement and max commute with a monotone quantization);
//   Relu / Clip between X and its Q is dropped when Q already clamps there: Q(clip(y, lo, hi))
//   = clamp(Q(y), Q(lo), Q(hi)), so the clip is a no-op when Q(lo) is Q's lowest value and Q(hi)
//   its highest (Relu: zero point = qmin).
// The new node reads the DQs' 8-bit inputs and produces the Q's output (same ValueId), so two
// consecutive integer ops exchange the 8-bit tensor: the Q -> DQ pair between them is left
// unread and dead-code elimination drops it; a DQ still read by a float consumer stays.
//
// Conditions (else the island is left alone and runs on the QuantizeLinear/DequantizeLinear
// kernels): scales constant float32, positive and finite, zero points constant 8-bit of the
// data's type (absent: 0); activations per tensor; weights per tensor or per output channel
// (Conv: axis 0; MatMul [K, N]: axis 1; Gemm: the N axis of B); a bias int32 with zero point
// 0 and scale equal (in f32) to x_scale * w_scale per channel, Gemm's with alpha = beta = 1;
// no block_size; the intermediate float values (X's output, the Relu's) read only inside the
// island and not pinned (graph outputs, subgraph captures).
//
// Numerics: the fused op computes (A - za)(B - zb) exactly in int32 and rounds once, the
// unfused graph sums float products of dequantized values in f32 and rounds that: results
// agree within one quantization step of the output (a value near a rounding boundary may
// land on either side); data-movement and MaxPool islands, and the dropped Relu/Clip, are
// bitwise (docs/OPTIMIZER.md, "QDQ").
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "ops/quantize.hpp"
#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {

using std::int64_t;

constexpr const char* kMsDomain = "com.microsoft";

/// One quantization parameter pair: scale (f32) and zero point (8-bit, or kNoValue) values.
struct QParam {
    int node = -1;              ///< the Q / DQ node
    ValueId data = kNoValue;    ///< DQ: its 8-bit input; Q: its 8-bit output
    ValueId scale = kNoValue, zero = kNoValue;
    const Tensor* s = nullptr;
    const Tensor* z = nullptr;  ///< null when absent
    DType type = DType::u8;     ///< the 8-bit type
    int64_t axis = 1;           ///< normalized when per-axis
    bool per_tensor() const { return s->num_elements() == 1; }
    float scale0() const { return s->data_unchecked<float>()[0]; }
    std::int32_t zero0() const {
        if (z == nullptr) return 0;
        return type == DType::u8 ? std::int32_t{z->data_unchecked<std::uint8_t>()[0]}
                                 : std::int32_t{z->data_unchecked<std::int8_t>()[0]};
    }
};

bool good_scales(const Tensor& s) {
    if (s.dtype() != DType::f32 || s.num_dims() > 1 || s.num_elements() == 0) return false;
    for (int64_t i = 0; i < s.num_elements(); ++i) {
        const float v = s.data_unchecked<float>()[i];
        if (!(v > 0.f) || !std::isfinite(v)) return false;
    }
    return true;
}

/// The node's integer attribute, or `def`; nullopt when it is not an int.
std::optional<int64_t> int_attr(const Node& n, const char* name, int64_t def) {
    auto v = n.attr_or<int64_t>(name, def);
    if (!v.is_ok()) return std::nullopt;
    return v.value();
}

class FuseQdq final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_qdq"; }
    int level() const noexcept override { return 2; }

    Status apply(Graph& g, PassContext& ctx) const override {
        Run r(g);
        r.go();
        if (r.fired > 0 && r.uses_ms && g.opset(kMsDomain) == 0)
            g.opset_imports.push_back(OpsetImport{kMsDomain, 1});
        return r.rw.finish_fusion(ctx, name(), r.fired);
    }

private:
    struct Run {
        explicit Run(Graph& graph) : g(graph), ix(graph), rw(graph) {}
        Graph& g;
        GraphIndex ix;
        Rewriter rw;
        int fired = 0;
        bool uses_ms = false;

        const Node& node(int i) const { return g.nodes[static_cast<std::size_t>(i)]; }
        bool live(int i) const { return i >= 0 && !rw.removed(i); }

        /// The DequantizeLinear producing `v`, with usable parameters; `data_len`: the length of
        /// a per-axis scale's axis (-1: per tensor only), `want_axis` its axis.
        std::optional<QParam> dq(ValueId v, int64_t want_axis = -1) const {
            const int p = ix.producer(v);
            if (!live(p)) return std::nullopt;
            const Node& n = node(p);
            if (!is_op(n, "DequantizeLinear") || n.inputs.size() < 2 || n.outputs.size() != 1)
                return std::nullopt;
            QParam q;
            q.node = p;
            q.data = n.inputs[0];
            q.scale = n.inputs[1];
            q.zero = n.inputs.size() > 2 ? n.inputs[2] : kNoValue;
            if (!params(n, q, /*dq=*/true)) return std::nullopt;
            if (q.per_tensor()) return q;
            if (want_axis < 0 || q.axis != want_axis) return std::nullopt;
            return q;
        }

        /// The QuantizeLinear that is the only reader of `v`, per tensor.
        std::optional<QParam> q_of(ValueId v) const {
            const int c = ix.sole_consumer(v);
            if (!live(c)) return std::nullopt;
            const Node& n = node(c);
            if (!is_op(n, "QuantizeLinear") || n.inputs.size() < 2 || n.outputs.size() != 1 ||
                n.inputs[0] != v)
                return std::nullopt;
            QParam q;
            q.node = c;
            q.data = n.outputs[0];
            q.scale = n.inputs[1];
            q.zero = n.inputs.size() > 2 ? n.inputs[2] : kNoValue;
            if (!params(n, q, /*dq=*/false) || !q.per_tensor()) return std::nullopt;
            const auto odt = int_attr(n, "output_dtype", 0);
            const auto prec = int_attr(n, "precision", 0);
            if (!odt || !prec || *prec != 0) return std::nullopt;
            if (*odt != 0 && from_onnx_dtype(static_cast<int>(*odt)) != q.type) return std::nullopt;
            return q;
        }

        /// Scale and zero point of a Q/DQ node: constants, f32 scales positive and finite, an
        /// 8-bit zero point of the scale's shape, no block_size.
        bool params(const Node& n, QParam& q, bool is_dq) const {
            q.s = ix.constant(q.scale);
            if (q.s == nullptr || !good_scales(*q.s)) return false;
            const auto block = int_attr(n, "block_size", 0);
            const auto axis = int_attr(n, "axis", 1);
            if (!block || *block != 0 || !axis) return false;
            if (is_dq) {
                const auto odt = int_attr(n, "output_dtype", 0);
                if (!odt || (*odt != 0 && *odt != 1)) return false;
            }
            if (q.zero != kNoValue) {
                q.z = ix.constant(q.zero);
                if (q.z == nullptr || (q.z->dtype() != DType::u8 && q.z->dtype() != DType::i8) ||
                    !(q.z->shape() == q.s->shape()))
                    return false;
                q.type = q.z->dtype();
            } else if (is_dq) {
                // The data's type decides (known for constants and annotated values).
                const Value& x = g.value(q.data);
                const Tensor* c = ix.constant(q.data);
                const std::optional<DType> t = c != nullptr ? std::optional<DType>(c->dtype()) : x.dtype;
                if (!t || (*t != DType::u8 && *t != DType::i8)) return false;
                q.type = *t;
            }
            if (is_dq) {
                const Tensor* c = ix.constant(q.data);
                const Value& x = g.value(q.data);
                if (c != nullptr && c->dtype() != q.type) return false;
                if (c == nullptr && x.dtype && *x.dtype != q.type) return false;
            }
            if (q.s->num_elements() != 1) {
                // Per axis: needs the data's rank (constants: weights).
                const Tensor* c = is_dq ? ix.constant(q.data) : nullptr;
                if (c == nullptr) return false;
                const int64_t rank = c->num_dims();
                const int64_t a = *axis < 0 ? *axis + rank : *axis;
                if (a < 0 || a >= rank || c->shape()[static_cast<int>(a)] != q.s->num_elements())
                    return false;
                q.axis = a;
            }
            return true;
        }

        /// Zero point input for a new node: the existing one, or a new constant of zeros of
        /// `type` shaped like the scale.
        ValueId zero_input(const QParam& q) {
            if (q.zero != kNoValue) return q.zero;
            Tensor z = Tensor::allocate(q.type, q.s->shape()).value();
            std::memset(z.raw_data(), 0, z.num_bytes());
            return rw.new_constant("qdq_zero_point", std::move(z));
        }

        /// Walks X's output through a Relu / Clip that the following Q makes a no-op, to that
        /// Q; returns it with the nodes passed (removed with X). nullopt: no such Q.
        std::optional<QParam> output_q(ValueId out, std::vector<int>& pattern) const {
            const int c = ix.sole_consumer(out);
            if (live(c) && node(c).outputs.size() == 1 &&
                (is_op(node(c), "Relu") || is_op(node(c), "Clip"))) {
                const Node& act = node(c);
                auto q = q_of(act.outputs[0]);
                if (!q || !clip_is_noop(act, *q)) return std::nullopt;
                pattern.push_back(c);
                return q;
            }
            return q_of(out);
        }

        /// Relu/Clip(lo, hi) followed by q changes nothing: Q(lo) = qmin (or lo absent) and
        /// Q(hi) = qmax (or hi absent), with QuantizeLinear's own rounding.
        bool clip_is_noop(const Node& act, const QParam& q) const {
            float lo = -INFINITY, hi = INFINITY;
            if (act.op_type == "Relu") {
                lo = 0.f;
            } else {
                if (!act.attributes.empty()) return false;  // opset < 11 min/max: not taken
                for (std::size_t i = 1; i < act.inputs.size() && i < 3; ++i) {
                    if (act.inputs[i] == kNoValue) continue;
                    const Tensor* t = ix.constant(act.inputs[i]);
                    if (t == nullptr || t->dtype() != DType::f32 || t->num_elements() != 1)
                        return false;
                    (i == 1 ? lo : hi) = t->data_unchecked<float>()[0];
                }
            }
            const float s = q.scale0();
            const double zp = q.zero0();
            auto quant = [&](float v) -> int64_t {
                return q.type == DType::u8
                           ? int64_t{detail::saturate_round<std::uint8_t>(static_cast<double>(v / s), zp)}
                           : int64_t{detail::saturate_round<std::int8_t>(static_cast<double>(v / s), zp)};
            };
            const int64_t qmin = q.type == DType::u8 ? 0 : -128;
            const int64_t qmax = q.type == DType::u8 ? 255 : 127;
            return (lo == -INFINITY || quant(lo) == qmin) && (hi == INFINITY || quant(hi) == qmax);
        }

        /// X's float output and every value between it and the Q read only inside `pattern`.
        bool internal_chain(const std::vector<int>& pattern, ValueId keep) const {
            for (int p : pattern)
                for (ValueId v : node(p).outputs)
                    if (v != keep && !ix.internal(v, pattern)) return false;
            return true;
        }

        void finish(std::vector<int>& pattern) {
            for (int p : pattern) rw.remove(p);
            ++fired;
        }

        // ---- the islands ----------------------------------------------------------------------

        void conv(int xi) {
            const Node& x = node(xi);
            if (x.inputs.size() < 2 || x.outputs.size() != 1) return;
            const Tensor* w = ix.constant(dq_data(x.inputs[1]));
            if (w == nullptr || w->num_dims() < 3) return;
            auto a = dq(x.inputs[0]);
            auto wq = dq(x.inputs[1], 0);
            if (!a || !wq) return;
            std::vector<int> pattern{xi};
            auto q = output_q(x.outputs[0], pattern);
            if (!q) return;
            pattern.push_back(q->node);
            ValueId bias = kNoValue;
            if (x.inputs.size() > 2 && x.inputs[2] != kNoValue) {
                bias = bias_input(x.inputs[2], *a, *wq, w->shape()[0]);
                if (bias == kNoValue) return;
            }
            if (!internal_chain(pattern, q->data)) return;
            Node& f = rw.add("QLinearConv", "",
                             {a->data, a->scale, zero_input(*a), wq->data, wq->scale,
                              zero_input(*wq), q->scale, zero_input(*q)},
                             {q->data}, x.name);
            if (bias != kNoValue) f.inputs.push_back(bias);
            copy_attributes(x, f);
            finish(pattern);
        }

        /// The int32 bias behind DQ(b): zero point 0, scale = x_scale * w_scale[c] in f32 for
        /// each of the m channels (per tensor when w_scale is). kNoValue when it does not fit.
        ValueId bias_input(ValueId v, const QParam& a, const QParam& w, int64_t m) const {
            const int p = ix.producer(v);
            if (!live(p) || !is_op(node(p), "DequantizeLinear")) return kNoValue;
            const Node& n = node(p);
            if (n.inputs.size() < 2 || n.outputs.size() != 1) return kNoValue;
            const Tensor* b = ix.constant(n.inputs[0]);
            const Tensor* s = ix.constant(n.inputs[1]);
            if (b == nullptr || s == nullptr || b->dtype() != DType::i32 || b->num_dims() != 1 ||
                b->shape()[0] != m || !good_scales(*s))
                return kNoValue;
            const auto block = int_attr(n, "block_size", 0);
            if (!block || *block != 0) return kNoValue;
            if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
                const Tensor* z = ix.constant(n.inputs[2]);
                if (z == nullptr || z->dtype() != DType::i32) return kNoValue;
                for (int64_t i = 0; i < z->num_elements(); ++i)
                    if (z->data_unchecked<std::int32_t>()[i] != 0) return kNoValue;
            }
            const int64_t count = s->num_elements();
            if (count != 1 && count != m) return kNoValue;
            if (count == 1 && !w.per_tensor()) return kNoValue;
            for (int64_t c = 0; c < count; ++c) {
                const float ws = w.s->data_unchecked<float>()[w.per_tensor() ? 0 : c];
                if (s->data_unchecked<float>()[c] != a.scale0() * ws) return kNoValue;
            }
            return n.inputs[0];
        }

        ValueId dq_data(ValueId v) const {
            const int p = ix.producer(v);
            if (!live(p) || !is_op(node(p), "DequantizeLinear") || node(p).inputs.empty())
                return kNoValue;
            return node(p).inputs[0];
        }

        void matmul(int xi) {
            const Node& x = node(xi);
            if (x.inputs.size() != 2 || x.outputs.size() != 1) return;
            const Tensor* b = ix.constant(dq_data(x.inputs[1]));
            if (b == nullptr || b->num_dims() != 2) return;
            auto a = dq(x.inputs[0]);
            auto bq = dq(x.inputs[1], 1);
            if (!a || !bq) return;
            std::vector<int> pattern{xi};
            auto q = output_q(x.outputs[0], pattern);
            if (q) pattern.push_back(q->node);
            if (q && internal_chain(pattern, q->data)) {
                rw.add("QLinearMatMul", "",
                       {a->data, a->scale, zero_input(*a), bq->data, bq->scale, zero_input(*bq),
                        q->scale, zero_input(*q)},
                       {q->data}, x.name);
                finish(pattern);
                return;
            }
            // No Q: the float output (A's zero point one element, as MatMulIntegerToFloat has),
            // with the bias Add that follows it (a constant float32 [N]: BERT's Linear layers).
            std::vector<int> only{xi};
            ValueId out = x.outputs[0], bias = kNoValue;
            const int ai = ix.sole_consumer(out);
            if (live(ai) && is_op(node(ai), "Add") && node(ai).outputs.size() == 1) {
                const ValueId bv = other_operand(node(ai), out);
                const Tensor* bt = ix.constant(bv);
                if (bv != out && bt != nullptr && bt->dtype() == DType::f32 && bt->num_dims() == 1 &&
                    bt->shape()[0] == b->shape()[1]) {
                    bias = bv;
                    only.push_back(ai);
                    out = node(ai).outputs[0];
                }
            }
            Node& f = rw.add("MatMulIntegerToFloat", kDsinferDomain,
                             {a->data, bq->data, a->scale, bq->scale, a->zero, bq->zero, bias},
                             {out}, x.name);
            while (!f.inputs.empty() && f.inputs.back() == kNoValue) f.inputs.pop_back();
            finish(only);
        }

        void gemm(int xi) {
            const Node& x = node(xi);
            if (x.inputs.size() < 2 || x.outputs.size() != 1) return;
            const auto ta = int_attr(x, "transA", 0), tb = int_attr(x, "transB", 0);
            auto alpha = x.attr_or<float>("alpha", 1.f);
            auto beta = x.attr_or<float>("beta", 1.f);
            if (!ta || !tb || *ta != 0 || !alpha.is_ok() || !beta.is_ok()) return;
            const Tensor* b = ix.constant(dq_data(x.inputs[1]));
            if (b == nullptr || b->num_dims() != 2) return;
            const int64_t n_axis = *tb != 0 ? 0 : 1;
            const int64_t n = b->shape()[static_cast<int>(n_axis)];
            auto a = dq(x.inputs[0]);
            auto bq = dq(x.inputs[1], n_axis);
            if (!a || !bq) return;
            ValueId c = kNoValue;
            if (x.inputs.size() > 2 && x.inputs[2] != kNoValue) {
                if (alpha.value() != 1.f || beta.value() != 1.f) return;
                c = bias_input(x.inputs[2], *a, *bq, n);
                if (c == kNoValue) return;
            }
            std::vector<int> pattern{xi};
            auto q = output_q(x.outputs[0], pattern);
            if (q) pattern.push_back(q->node);
            if (q && !internal_chain(pattern, q->data)) {
                q.reset();  // the float output
                pattern.assign(1, xi);
            }
            std::vector<ValueId> in{a->data, a->scale, zero_input(*a), bq->data, bq->scale,
                                    zero_input(*bq), c};
            ValueId out = x.outputs[0];
            if (q) {
                in.push_back(q->scale);
                in.push_back(zero_input(*q));
                out = q->data;
            }
            Node& f = rw.add("QGemm", kMsDomain, std::move(in), {out}, x.name);
            while (!f.inputs.empty() && f.inputs.back() == kNoValue) f.inputs.pop_back();
            set_attr(f, "alpha", alpha.value());
            set_attr(f, "transB", *tb);
            uses_ms = true;
            finish(pattern);
        }

        /// Data movement / MaxPool on the 8-bit tensor: every float input of `data_inputs` is a
        /// DQ with the Q's scale and zero point (bitwise the same values).
        void movement(int xi, bool all_inputs) {
            const Node& x = node(xi);
            if (x.outputs.size() != 1 || x.inputs.empty()) return;  // MaxPool: no Indices
            std::vector<int> pattern{xi};
            auto q = q_of(x.outputs[0]);
            if (!q) return;
            pattern.push_back(q->node);
            std::vector<ValueId> in = x.inputs;
            const std::size_t count = all_inputs ? in.size() : 1;
            for (std::size_t i = 0; i < count; ++i) {
                auto d = dq(in[i]);
                if (!d || d->type != q->type || d->scale0() != q->scale0() ||
                    d->zero0() != q->zero0())
                    return;
                in[i] = d->data;
            }
            if (!internal_chain(pattern, q->data)) return;
            Node& f = rw.add(x.op_type, "", std::move(in), {q->data}, x.name);
            copy_attributes(x, f);
            finish(pattern);
        }

        /// DQ(a) [, DQ(b)] -> Add | Mul | GlobalAveragePool | Sigmoid [-> Relu|Clip] -> Q ==> the
        /// com.microsoft QLinear op; every operand and the output of one 8-bit type.
        void elementwise(int xi, const char* ms_op) {
            const Node& x = node(xi);
            const std::size_t arity = x.op_type == "Add" || x.op_type == "Mul" ? 2 : 1;
            if (x.inputs.size() != arity || x.outputs.size() != 1) return;
            std::vector<int> pattern{xi};
            auto q = output_q(x.outputs[0], pattern);
            if (!q) return;
            pattern.push_back(q->node);
            std::vector<ValueId> in;
            for (ValueId v : x.inputs) {
                auto d = dq(v);
                if (!d || d->type != q->type) return;
                in.insert(in.end(), {d->data, d->scale, d->zero});
            }
            if (!internal_chain(pattern, q->data)) return;
            in.insert(in.end(), {q->scale, q->zero});
            Node& f = rw.add(ms_op, kMsDomain, std::move(in), {q->data}, x.name);
            while (!f.inputs.empty() && f.inputs.back() == kNoValue) f.inputs.pop_back();
            if (x.op_type == "GlobalAveragePool") set_attr(f, "channels_last", int64_t{0});
            uses_ms = true;
            finish(pattern);
        }

        void go() {
            const std::size_t count = g.nodes.size();
            for (std::size_t i = 0; i < count; ++i) {
                const int xi = static_cast<int>(i);
                if (rw.removed(xi)) continue;
                const Node& x = node(xi);
                if (!x.domain.empty()) continue;
                const std::string& op = x.op_type;
                if (op == "Conv") conv(xi);
                else if (op == "MatMul") matmul(xi);
                else if (op == "Gemm") gemm(xi);
                else if (op == "Add") elementwise(xi, "QLinearAdd");
                else if (op == "Mul") elementwise(xi, "QLinearMul");
                else if (op == "GlobalAveragePool") elementwise(xi, "QLinearGlobalAveragePool");
                else if (op == "Sigmoid") elementwise(xi, "QLinearSigmoid");
                else if (op == "Concat") movement(xi, true);
                else if (op == "MaxPool" || op == "Flatten" || op == "Reshape" ||
                         op == "Transpose" || op == "Squeeze" || op == "Unsqueeze")
                    movement(xi, false);
            }
        }
    };
};

}  // namespace

std::unique_ptr<GraphPass> make_fuse_qdq() { return std::make_unique<FuseQdq>(); }

}  // namespace dsinfer::passes
