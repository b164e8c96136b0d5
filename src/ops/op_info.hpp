// What the passes know of each op, defined once beside its attributes: which inputs are weights
// (and their output/input-channel axes), the activation channel axis, how channels flow through
// the op (for the pruner's dependency groups), whether it is elementwise, and its shape/dtype
// rule on symbolic shapes (SymbolicShape/Dim), which annotate_graph_shapes() runs over a graph.
//
// The rules read attributes with the ops room's readers (conv.hpp, window.hpp, reduce.hpp,
// concat.hpp, slice_ranges.hpp, pad.hpp), so a rule and the kernels agree on what a node means.
// A dim a rule cannot know is an unknown Dim (empty symbol), never a guess; a rule whose inputs
// say too little leaves the output unknown; inputs that contradict each other (Add of static 3
// and 4, a MatMul inner-dim mismatch) are an invalid_argument Status naming the node and the
// input. Small integer values (Shape -> Gather -> Unsqueeze -> Concat chains, integer constants)
// are followed element by element (SymInt), so Reshape/Slice/Expand/ConstantOfShape/Range fed
// by them get shapes, symbolic dims included.
//
// Internal (namespace dsinfer::detail): the passes (src/passes/) use it; the dsinfer_passes
// target compiles src/ops/*.cpp, so an offline tool annotates shapes without linking a kernel.
// Ownership/threading: the table is constant data; annotate_graph_shapes() mutates one graph.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dsinfer/graph.hpp"
#include "dsinfer/shape.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer::detail {

/// "No axis" in OpInfo and WeightAxes.
inline constexpr int kNoAxis = std::numeric_limits<int>::min();

/// How an op carries its input's channels (the activation channel axis) to its output: what a
/// structured pruner needs to build dependency groups (channels removed together).
enum class ChannelFlow : std::uint8_t {
    opaque,       ///< unknown or mixes channels: stops a dependency group
    produces,     ///< new channels from a weight's output-channel axis (Conv, Gemm, MatMul by a
                  ///< constant B); its input channels are the weight's input-channel axis
    per_channel,  ///< one parameter per channel, channels kept (BatchNorm, PRelu, Q/DQ per axis;
                  ///< a binary op with one constant operand: effective_channel_flow())
    passthrough,  ///< elementwise over one activation: channels kept (Relu, Cast, Identity)
    couples,      ///< elementwise over several activations, broadcast: the channels of all of
                  ///< them are one group (residual Add, Mul of two branches, Where)
    concat,       ///< joins inputs along its axis: channel ranges concatenate when it is the
                  ///< channel axis
    split,        ///< takes ranges of its input (Split, Slice): along the channel axis they are
                  ///< sub-ranges of the group
    keeps,        ///< pooling, reductions, Resize, Pad: channels kept (unless reduced/padded)
    normalizes,   ///< normalizes over the channel axis (LayerNorm, Softmax, GroupNorm, LRN):
                  ///< pruning changes the statistics of the kept channels
    reshapes,     ///< Reshape, Flatten, Transpose, (Un)Squeeze, Expand: channels move or merge
                  ///< (Flatten -> Gemm); needs a shape analysis
    heads,        ///< attention: channels come in num_heads blocks, pruned a head at a time
};

/// The name of `f` ("produces", ...), for messages and tests.
std::string_view channel_flow_name(ChannelFlow f) noexcept;

/// The axes of one weight input: output channels and input channels (kNoAxis when none).
/// Negative axes count from the end (-1: the last).
struct WeightAxes {
    int out_channel = kNoAxis;
    int in_channel = kNoAxis;
};

/// A small integer value followed element by element: a known integer, or a named symbol (the
/// size of a symbolic dim), or unknown (neither).
struct SymInt {
    std::optional<std::int64_t> value;
    std::string symbol;

    static SymInt of(std::int64_t v) { return SymInt{v, {}}; }
    static SymInt of(const Dim& d) {
        return d.is_static() ? of(d.value) : SymInt{std::nullopt, d.symbol};
    }
    /// As a dim: a non-negative value is static, a symbol named, anything else unknown.
    Dim to_dim() const {
        if (value) return *value >= 0 ? Dim::fixed(*value) : Dim{};
        return symbol.empty() ? Dim{} : Dim::named(symbol);
    }
    bool known() const noexcept { return value.has_value() || !symbol.empty(); }
};

/// What a rule infers for one output. `value`: the output's integer elements (rank <= 1) when
/// known (a shape-like value).
struct InferredOutput {
    std::optional<DType> dtype;
    SymbolicShape shape;
    std::optional<std::vector<SymInt>> value;
};

/// Shape-like values known during one annotation, by value id.
using ShapeValues = std::unordered_map<ValueId, std::vector<SymInt>>;

/// What a shape rule sees of one node: its inputs (the graph's Value: declared or inferred
/// dtype and shape, initializer data) and the integer values followed so far; it writes the
/// outputs.
class ShapeContext {
public:
    ShapeContext(const Graph& g, const Node& n, std::int64_t opset, const ShapeValues* values);

    const Node& node() const noexcept { return node_; }
    const Graph& graph() const noexcept { return graph_; }
    std::int64_t opset() const noexcept { return opset_; }
    int num_inputs() const noexcept { return static_cast<int>(node_.inputs.size()); }
    int num_outputs() const noexcept { return static_cast<int>(node_.outputs.size()); }
    bool has_input(int i) const noexcept {
        return i >= 0 && i < num_inputs() && node_.inputs[static_cast<std::size_t>(i)] != kNoValue;
    }
    bool has_output(int i) const noexcept {
        return i >= 0 && i < num_outputs() &&
               node_.outputs[static_cast<std::size_t>(i)] != kNoValue;
    }
    /// Input i's value, or nullptr when omitted.
    const Value* input(int i) const noexcept {
        return has_input(i) ? &graph_.value(node_.inputs[static_cast<std::size_t>(i)]) : nullptr;
    }
    std::optional<DType> dtype(int i) const noexcept {
        const Value* v = input(i);
        return v != nullptr ? v->dtype : std::nullopt;
    }
    /// Input i's shape (unknown when omitted or not known).
    const SymbolicShape& shape(int i) const noexcept;
    /// Input i's data when it is an initializer holding data, else nullptr.
    const Tensor* constant(int i) const noexcept;
    /// Input i's integer elements (rank <= 1, at most kMaxFollowed of them) when known: an
    /// integer initializer or a value followed from a Shape/Constant.
    std::optional<std::vector<SymInt>> int_values(int i) const;
    /// Input i's elements as static integers, when all are known.
    std::optional<std::vector<std::int64_t>> static_ints(int i) const;

    void set_output(int i, std::optional<DType> dtype, SymbolicShape shape);
    void set_output_value(int i, std::vector<SymInt> value);
    std::vector<InferredOutput>& outputs() noexcept { return outputs_; }

    /// invalid_argument "<node>: input i ('name') <args>".
    template <class... Args>
    Status input_error(int i, Args&&... args) const {
        const Value* v = input(i);
        return Status::error(ErrorCode::invalid_argument, node_.describe(), ": input ", i, " ('",
                             v != nullptr ? v->name : std::string(), "') ",
                             std::forward<Args>(args)...);
    }
    /// invalid_model "<node>: <args>" (a bad attribute).
    template <class... Args>
    Status node_error(Args&&... args) const {
        return Status::error(ErrorCode::invalid_model, node_.describe(), ": ",
                             std::forward<Args>(args)...);
    }
    /// `st` with the node named in front of its message (an error from an ops-room reader).
    Status named(const Status& st) const;

    /// Integer values are followed up to this many elements.
    static constexpr std::int64_t kMaxFollowed = 64;

private:
    const Graph& graph_;
    const Node& node_;
    std::int64_t opset_;
    const ShapeValues* values_;
    std::vector<InferredOutput> outputs_;
};

/// A shape/dtype rule: fills ctx.outputs() (left unknown what it cannot know); an error only for
/// inputs or attributes that contradict each other.
using ShapeFn = Status (*)(ShapeContext& ctx);
/// The axes of weight input `input` of `node` (attribute-dependent, e.g. Gemm's transB).
using WeightAxesFn = WeightAxes (*)(const Node& node, int input);

/// Everything the passes know of one op.
struct OpInfo {
    std::string_view domain;  ///< "" (ai.onnx), "com.dsinfer", "ai.onnx.ml", ...
    std::string_view op_type;
    ChannelFlow channels = ChannelFlow::opaque;
    bool elementwise = false;  ///< output element i depends on input element i (broadcast)
    /// The activation channel axis of input 0 and output 0: 1 for NCHW ops, -1 (last) for
    /// MatMul/Gemm-like and normalizations over the last axis, kNoAxis when the op has none of
    /// its own (elementwise ops follow their input).
    int channel_axis = kNoAxis;
    /// Bit i: input i is a weight (a parameter normally constant: Conv W/B, Gemm B/C, MatMul B,
    /// BatchNorm scale/B/mean/var, LayerNorm Scale/B, PRelu slope, quantized ops' weights,
    /// scales and zero points).
    std::uint32_t weight_inputs = 0;
    WeightAxesFn weight_axes = nullptr;  ///< nullptr: no weight has channel axes
    ShapeFn infer = nullptr;             ///< nullptr: no shape rule (the evaluator's job)

    bool is_weight(int input) const noexcept {
        return input >= 0 && input < 32 && ((weight_inputs >> input) & 1u) != 0;
    }
    /// The axes of weight input `input` of `node` ({kNoAxis, kNoAxis} for a non-weight).
    WeightAxes axes_of(const Node& node, int input) const {
        return is_weight(input) && weight_axes != nullptr ? weight_axes(node, input) : WeightAxes{};
    }
};

/// The op `op_type` of `domain` ("" and "ai.onnx" are ONNX), or nullptr (unknown: opaque).
const OpInfo* find_op_info(std::string_view domain, std::string_view op_type) noexcept;
inline const OpInfo* find_op_info(const Node& n) noexcept {
    return find_op_info(n.domain, n.op_type);
}
/// Every op the table knows, in no particular order.
std::vector<const OpInfo*> all_op_infos();

/// The channel flow of this node in `g`: the op's, refined by which inputs are constants (a
/// binary elementwise op with one initializer operand is per_channel; a weight-producing op
/// whose weight is not constant, such as the scores MatMul of attention, is opaque). nullptr
/// info: opaque.
ChannelFlow effective_channel_flow(const OpInfo* info, const Graph& g, const Node& n);

/// Numpy broadcasting of two dims: 1 broadcasts, equal static dims or equal symbols match, a
/// static dim > 1 wins over a symbol (which must then be it or 1), anything else is unknown.
/// nullopt: two different static dims, neither 1.
std::optional<Dim> broadcast_dim(const Dim& a, const Dim& b);

/// Runs `n`'s rule under `opset` (`values`: integer values followed so far; may be null).
/// `out` gets one entry per node output. unsupported when the op has no rule.
Status infer_node_shapes(const Graph& g, const Node& n, std::int64_t opset,
                         const ShapeValues* values, std::vector<InferredOutput>& out);

/// What annotate_graph_shapes() did.
struct ShapeAnnotation {
    std::size_t nodes = 0;         ///< nodes visited
    std::size_t without_rule = 0;  ///< unknown ops, ops without a rule, nodes with subgraphs
    std::size_t unresolved = 0;    ///< nodes with some output's dtype, rank or a dim not known
    Status first_error;            ///< the first contradiction a rule found (node and input named)
    /// Every output of every node has a dtype and a shape whose dims are static or named.
    bool complete() const noexcept {
        return without_rule == 0 && unresolved == 0 && first_error.is_ok();
    }
};

/// Runs the rules over `g`'s nodes in order (g sorted), filling Value::dtype where unknown and
/// Value::shape where not static (a declared shape keeps what it knows; an inferred dim replaces
/// only an unknown or symbolic one). A node whose rule errs keeps its outputs as they were; the
/// walk goes on. Subgraphs are not visited.
ShapeAnnotation annotate_graph_shapes(Graph& g);

}  // namespace dsinfer::detail
