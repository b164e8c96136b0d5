// quantize_dynamic (dsinfer/quantize.hpp): float32 MatMul / Gemm layers with constant weights
// -> ONNX Runtime's dynamic-quantization form, which fuse_dynamic_quant_matmul (fuse_quant.cpp)
// then turns into com.dsinfer DynamicQuantizeMatMul / MatMulIntegerToFloat on the INT8 GEMM.
// Not a GraphPass: quantizing is the caller's choice (ds-benchmark --precision int8, Step 10's
// quantizer), never a default optimization.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "dsinfer/quantize.hpp"
#include "passes/pass_utils.hpp"
#include "passes/quantize_common.hpp"

namespace dsinfer {
namespace {

using std::int64_t;

struct QuantizedWeight {
    Tensor q;      ///< s8 [K, N]
    Tensor scale;  ///< f32 scalar or [N]
    Tensor zero;   ///< s8 scalar or [N] (zeros)
};

/// W [K, N] (from B [K, N], or B [N, K] when `transposed`) -> s8 symmetric, per tensor or per
/// column (quantize_symmetric_s8), transposed to [K, N] when B was [N, K].
StatusOr<QuantizedWeight> quantize_weight(const Tensor& b, bool transposed, bool per_channel) {
    const int64_t k = transposed ? b.shape()[1] : b.shape()[0];
    const int64_t n = transposed ? b.shape()[0] : b.shape()[1];
    DSINFER_ASSIGN_OR_RETURN(passes::SymmetricWeight sw,
                             passes::quantize_symmetric_s8(b, per_channel ? (transposed ? 0 : 1) : -1));
    QuantizedWeight w;
    w.scale = std::move(sw.scale);
    if (transposed) {
        DSINFER_ASSIGN_OR_RETURN(w.q, Tensor::allocate(DType::i8, Shape{k, n}));
        const auto* src = sw.q.data_unchecked<std::int8_t>();
        auto* dst = w.q.data_unchecked<std::int8_t>();
        for (int64_t kk = 0; kk < k; ++kk)
            for (int64_t nn = 0; nn < n; ++nn) dst[kk * n + nn] = src[nn * k + kk];
    } else {
        w.q = std::move(sw.q);
    }
    DSINFER_ASSIGN_OR_RETURN(w.zero, Tensor::allocate(DType::i8, w.scale.shape()));
    std::memset(w.zero.raw_data(), 0, w.zero.num_bytes());
    return w;
}

}  // namespace

StatusOr<DynamicQuantizeReport> quantize_dynamic(Graph& g, const DynamicQuantizeOptions& o) {
    try {
        DynamicQuantizeReport report;
        if (passes::has_quantized_op(g)) {
            report.already_quantized = true;
            return report;
        }
        DSINFER_CHECK(g.opset("") >= 11 || g.nodes.empty(), ErrorCode::unsupported,
                      "quantize_dynamic: the graph imports opset ", g.opset(""),
                      " of the default domain; DynamicQuantizeLinear needs 11 or later");
        const std::unordered_set<std::string> exclude(o.exclude.begin(), o.exclude.end());
        passes::GraphIndex ix(g);
        passes::Rewriter rw(g);
        struct QuantizedActivation {
            ValueId q, scale, zero;
        };
        std::unordered_map<ValueId, QuantizedActivation> activations;
        // One quantized form per weight value (a weight read by several layers is shared).
        std::unordered_map<std::uint64_t, std::array<ValueId, 3>> weights;
        const std::size_t num_nodes = g.nodes.size();
        for (std::size_t ni = 0; ni < num_nodes; ++ni) {
            const Node n = g.nodes[ni];  // a copy: adding values below may grow g.values
            const bool is_matmul = n.op_type == "MatMul" && n.domain.empty();
            const bool is_gemm = n.op_type == "Gemm" && n.domain.empty();
            if (!(is_matmul && o.matmul) && !(is_gemm && o.gemm)) continue;
            const auto skip = [&](const std::string& why) {
                report.skipped.push_back(n.describe() + ": " + why);
            };
            if (n.inputs.size() < 2 || n.outputs.size() != 1) continue;
            if (exclude.count(n.name) != 0 ||
                exclude.count(g.value(n.outputs[0]).name) != 0) {
                skip("excluded by the caller");
                continue;
            }
            const Tensor* b = ix.constant(n.inputs[1]);
            if (b == nullptr || b->dtype() != DType::f32 || b->num_dims() != 2 ||
                b->num_elements() == 0)
                continue;  // activations x activations (attention) stay float: not a candidate
            bool transposed = false;
            ValueId c = kNoValue;
            if (is_gemm) {
                DSINFER_ASSIGN_OR_RETURN(const int64_t trans_a, n.attr_or<int64_t>("transA", 0));
                DSINFER_ASSIGN_OR_RETURN(const int64_t trans_b, n.attr_or<int64_t>("transB", 0));
                DSINFER_ASSIGN_OR_RETURN(const float alpha, n.attr_or<float>("alpha", 1.f));
                DSINFER_ASSIGN_OR_RETURN(const float beta, n.attr_or<float>("beta", 1.f));
                if (trans_a != 0 || alpha != 1.f || (beta != 1.f && n.inputs.size() > 2)) {
                    skip("Gemm with transA, alpha or beta other than 0, 1, 1");
                    continue;
                }
                transposed = trans_b != 0;
                if (n.inputs.size() > 2) c = n.inputs[2];
            }
            if (b->num_elements() < o.min_weight_elements) {
                skip("weight smaller than min_weight_elements");
                continue;
            }
            if (!passes::all_finite_f32(*b)) {
                skip("weight holds NaN or infinity");
                continue;
            }
            const std::string base = n.name.empty() ? g.value(n.outputs[0]).name : n.name;
            // The weight's quantized form.
            const std::uint64_t wkey = (static_cast<std::uint64_t>(n.inputs[1]) << 1) |
                                       (transposed ? 1u : 0u);
            auto wit = weights.find(wkey);
            if (wit == weights.end()) {
                DSINFER_ASSIGN_OR_RETURN(QuantizedWeight w,
                                         quantize_weight(*b, transposed, o.per_channel));
                const std::string wname = g.value(n.inputs[1]).name;
                report.float_weight_bytes += b->num_bytes();
                report.int8_weight_bytes += w.q.num_bytes() + w.scale.num_bytes() + w.zero.num_bytes();
                const ValueId q = rw.new_constant(wname + "_quantized", std::move(w.q));
                const ValueId s = rw.new_constant(wname + "_scale", std::move(w.scale));
                const ValueId z = rw.new_constant(wname + "_zero_point", std::move(w.zero));
                wit = weights.emplace(wkey, std::array<ValueId, 3>{q, s, z}).first;
            }
            const auto [wq, ws, wz] = wit->second;
            // The activation's quantized form, shared by every layer reading it.
            const ValueId x = n.inputs[0];
            auto ait = activations.find(x);
            if (ait == activations.end()) {
                const std::string xname = g.value(x).name;
                QuantizedActivation a{rw.new_value(xname + "_quantized", DType::u8),
                                      rw.new_value(xname + "_scale", DType::f32, SymbolicShape{}),
                                      rw.new_value(xname + "_zero_point", DType::u8, SymbolicShape{})};
                rw.add("DynamicQuantizeLinear", "", {x}, {a.q, a.scale, a.zero},
                       xname + "_QuantizeLinear");
                ait = activations.emplace(x, a).first;
                ++report.activations;
            }
            const QuantizedActivation a = ait->second;
            const ValueId mi = rw.new_value(base + "_output_quantized", DType::i32);
            rw.add("MatMulInteger", "", {a.q, wq, a.zero, wz}, {mi}, base + "_quant");
            const ValueId cast = rw.new_value(base + "_output_quantized_cast", DType::f32);
            passes::set_attr(rw.add("Cast", "", {mi}, {cast}, base + "_output_quantized_cast"),
                             "to", int64_t{1});
            const ValueId scales = rw.new_value(base + "_scales_mul", DType::f32);
            rw.add("Mul", "", {a.scale, ws}, {scales}, base + "_scales_mul");
            const ValueId out = n.outputs[0];
            if (c == kNoValue) {
                rw.add("Mul", "", {cast, scales}, {out}, base + "_output_scale_mul");
            } else {
                const ValueId y = rw.new_value(base + "_output_scaled", DType::f32);
                rw.add("Mul", "", {cast, scales}, {y}, base + "_output_scale_mul");
                rw.add("Add", "", {y, c}, {out}, base + "_bias_add");
            }
            rw.remove(static_cast<int>(ni));
            report.quantized_nodes.push_back(base);
            if (is_matmul) ++report.matmuls;
            else ++report.gemms;
        }
        DSINFER_RETURN_IF_ERROR(rw.commit().status());
        // The float32 weights no node reads any more lose their tensor (as eliminate_dead_code
        // does), so the memory goes at once, whatever the optimization level.
        std::vector<char> read(g.values.size(), 0);
        for (const Node& n : g.nodes)
            for (ValueId v : n.inputs)
                if (v != kNoValue) read[static_cast<std::size_t>(v)] = 1;
        for (ValueId v : g.outputs) read[static_cast<std::size_t>(v)] = 1;
        for (const auto& [key, forms] : weights) {
            const auto v = static_cast<std::size_t>(key >> 1);
            if (!read[v] && !ix.pinned(static_cast<ValueId>(v))) g.values[v].initializer.reset();
        }
        return report;
    } catch (const std::bad_alloc&) {
        return Status::error(ErrorCode::resource_exhausted,
                             "quantize_dynamic: out of memory while quantizing the weights");
    }
}

}  // namespace dsinfer
