// Reference CPU kernels for shape and data-movement ops (ai.onnx): Identity,
// OptionalHasElement/OptionalGetElement (tensors only), Dropout (inference),
// Constant, Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice,
// Expand, Tile, DepthToSpace, SpaceToDepth. The other tensor_*.cpp files register the indexing
// ops (tensor_index.cpp) and the padding/generator/scan ops (tensor_misc.cpp).
//
// Ops that only move elements dispatch on the element *size* (plus std::string), so one
// instantiation serves every dtype of that width; strings are always copied by assignment.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cpu/reference/groups.hpp"
#include "cpu/reference/tensor_common.hpp"
#include "ops/concat.hpp"
#include "ops/kernel_utils.hpp"
#include "ops/slice_ranges.hpp"

namespace dsinfer::detail {

// Defined in tensor_index.cpp and tensor_misc.cpp.
void register_tensor_index_kernels(KernelRegistry& r);
void register_tensor_misc_kernels(KernelRegistry& r);

namespace {

using Factory = StatusOr<std::unique_ptr<Kernel>>;

/// out[i] = in[base + sum(idx_d * strides_d)] over out_shape.
template <class T>
void strided_copy(const T* in, std::int64_t base, const Strides& strides, const Shape& out_shape,
                  T* out) noexcept {
    std::int64_t k = 0;
    for_each_offset<1>(out_shape, std::array<Strides, 1>{strides},
                       [&](const std::array<std::int64_t, 1>& off) { out[k++] = in[base + off[0]]; });
}

/// Kernels whose output 0 holds input 0's elements in the same order.
class CopyRunKernel : public Kernel {
public:
    Status run(RunContext& ctx) const noexcept override {
        return copy_all(ctx.input(0), ctx.output(0));
    }
};

// ---- Identity -------------------------------------------------------------------------------

class IdentityKernel final : public CopyRunKernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
        return Status::ok();
    }
};

Factory make_identity(const KernelCreateContext&) { return make_kernel<IdentityKernel>(); }

// ---- OptionalHasElement / OptionalGetElement on tensors -----------------------------------
// dsinfer holds no optional values (graph inputs of optional type are unsupported), so these
// see a tensor or an omitted input: HasElement is whether the input is given, GetElement of a
// tensor is that tensor (opset 18).

class OptionalHasElementKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        ctx.set_output(0, DType::boolean, Shape{});
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        *ctx.output(0).data_unchecked<bool>() = ctx.has_input(0);
        return Status::ok();
    }
};

Factory make_optional_has_element(const KernelCreateContext&) {
    return make_kernel<OptionalHasElementKernel>();
}

Factory make_optional_get_element(const KernelCreateContext& ctx) {
    DSINFER_CHECK(ctx.has_input(0), ErrorCode::invalid_model, "OptionalGetElement needs its input");
    return make_kernel<IdentityKernel>();
}

// ---- Dropout (inference) --------------------------------------------------------------------

class DropoutKernel final : public Kernel {
public:
    explicit DropoutKernel(std::int64_t opset) : opset_(opset) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        ctx.set_output(0, x.dtype(), x.shape());
        if (ctx.has_output(1)) ctx.set_output(1, opset_ >= 10 ? DType::boolean : x.dtype(), x.shape());
        if (opset_ >= 12 && ctx.has_input(2) && ctx.has_data(2)) {
            const Tensor& tm = ctx.input(2);
            DSINFER_CHECK(tm.dtype() == DType::boolean && tm.num_elements() == 1,
                          ErrorCode::invalid_argument,
                          "input 'training_mode' must be a bool scalar");
            if (*tm.data_unchecked<bool>()) {
                double ratio = 0.5;
                if (ctx.has_input(1)) {
                    if (!ctx.has_data(1)) return Status::ok();
                    DSINFER_ASSIGN_OR_RETURN(ratio, read_scalar(ctx.input(1), "ratio"));
                }
                DSINFER_CHECK(ratio == 0.0, ErrorCode::unsupported,
                              "training-mode Dropout with ratio ", ratio,
                              " > 0 (random masks) is not supported");
            }
        }
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        DSINFER_RETURN_IF_ERROR(copy_all(ctx.input(0), ctx.output(0)));
        if (!ctx.has_output(1)) return Status::ok();
        const TensorView& m = ctx.output(1);
        if (m.dtype == DType::boolean) {
            for (std::int64_t i = 0; i < m.num_elements(); ++i) m.data_unchecked<bool>()[i] = true;
            return Status::ok();
        }
        return dispatch_types(m.dtype, NumericTypes{}, [&]<class T>() {
            for (std::int64_t i = 0; i < m.num_elements(); ++i) m.data_unchecked<T>()[i] = store<T>(1.0f);
            return Status::ok();
        });
    }

private:
    std::int64_t opset_;
};

Factory make_dropout(const KernelCreateContext& ctx) {
    // Inference only: before opset 12 the 'ratio' attribute does not change the output.
    DSINFER_RETURN_IF_ERROR(ctx.node().attr_or<float>("ratio", 0.5f).status());
    return make_kernel<DropoutKernel>(ctx.opset());
}

// ---- Constant -------------------------------------------------------------------------------

class ConstantKernel final : public Kernel {
public:
    explicit ConstantKernel(Tensor value) : value_(std::move(value)) {}
    Status prepare(PrepareContext& ctx) const override {
        ctx.set_output(0, value_.dtype(), value_.shape());
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        return copy_all(value_.view(), ctx.output(0));
    }

private:
    Tensor value_;
};

Factory make_constant(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    if (n.has_attr("sparse_value"))
        return Status::error(ErrorCode::unsupported,
                             "attribute 'sparse_value' (sparse tensors) is not supported");
    const std::int64_t count = n.has_attr("value") + n.has_attr("value_float") +
                               n.has_attr("value_floats") + n.has_attr("value_int") +
                               n.has_attr("value_ints") + n.has_attr("value_string") +
                               n.has_attr("value_strings");
    if (count != 1)
        return Status::error(ErrorCode::invalid_model,
                             "exactly one of the value* attributes must be set, got ", count);
    try {
        Tensor t;
        if (n.has_attr("value")) {
            DSINFER_ASSIGN_OR_RETURN(t, n.attr<Tensor>("value"));
            if (t.is_null())
                return Status::error(ErrorCode::invalid_model, "attribute 'value' is empty");
        } else if (n.has_attr("value_float")) {
            DSINFER_ASSIGN_OR_RETURN(float v, n.attr<float>("value_float"));
            t = Tensor::scalar(v);
        } else if (n.has_attr("value_floats")) {
            DSINFER_ASSIGN_OR_RETURN(auto v, n.attr<std::vector<float>>("value_floats"));
            t = Tensor::from_vector(Shape{static_cast<std::int64_t>(v.size())}, v);
        } else if (n.has_attr("value_int")) {
            DSINFER_ASSIGN_OR_RETURN(std::int64_t v, n.attr<std::int64_t>("value_int"));
            t = Tensor::scalar(v);
        } else if (n.has_attr("value_ints")) {
            DSINFER_ASSIGN_OR_RETURN(auto v, n.attr<std::vector<std::int64_t>>("value_ints"));
            t = Tensor::from_vector(Shape{static_cast<std::int64_t>(v.size())}, v);
        } else if (n.has_attr("value_string")) {
            DSINFER_ASSIGN_OR_RETURN(std::string v, n.attr<std::string>("value_string"));
            t = Tensor::empty(DType::string, Shape{});
            t.data_unchecked<std::string>()[0] = v;
        } else {
            DSINFER_ASSIGN_OR_RETURN(auto v, n.attr<std::vector<std::string>>("value_strings"));
            t = Tensor::from_vector(Shape{static_cast<std::int64_t>(v.size())}, v);
        }
        return make_kernel<ConstantKernel>(std::move(t));
    } catch (const Error& e) {
        return Status(e.code(), e.message());
    }
}

// ---- Shape / Size ---------------------------------------------------------------------------

class ShapeKernel final : public Kernel {
public:
    ShapeKernel(std::int64_t start, std::optional<std::int64_t> end) : start_(start), end_(end) {}

    void range(int rank, std::int64_t& b, std::int64_t& e) const noexcept {
        b = start_ < 0 ? start_ + rank : start_;
        e = end_ ? (*end_ < 0 ? *end_ + rank : *end_) : rank;
        b = std::clamp<std::int64_t>(b, 0, rank);
        e = std::clamp<std::int64_t>(e, 0, rank);
        if (e < b) e = b;
    }
    Status prepare(PrepareContext& ctx) const override {
        std::int64_t b = 0, e = 0;
        range(ctx.input(0).num_dims(), b, e);
        ctx.set_output(0, DType::i64, Shape{e - b});
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const Shape& s = ctx.input(0).shape;
        std::int64_t b = 0, e = 0;
        range(s.rank(), b, e);
        auto* out = ctx.output(0).data_unchecked<std::int64_t>();
        for (std::int64_t i = b; i < e; ++i) out[i - b] = s[static_cast<int>(i)];
        return Status::ok();
    }

private:
    std::int64_t start_;
    std::optional<std::int64_t> end_;
};

Factory make_shape(const KernelCreateContext& ctx) {
    std::int64_t start = 0;
    std::optional<std::int64_t> end;
    if (ctx.opset() >= 15) {
        DSINFER_ASSIGN_OR_RETURN(start, ctx.node().attr_or<std::int64_t>("start", 0));
        if (ctx.node().has_attr("end")) {
            DSINFER_ASSIGN_OR_RETURN(std::int64_t e, ctx.node().attr<std::int64_t>("end"));
            end = e;
        }
    }
    return make_kernel<ShapeKernel>(start, end);
}

class SizeKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        ctx.set_output(0, DType::i64, Shape{});
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        *ctx.output(0).data_unchecked<std::int64_t>() = ctx.input(0).num_elements();
        return Status::ok();
    }
};

Factory make_size(const KernelCreateContext&) { return make_kernel<SizeKernel>(); }

// ---- Reshape --------------------------------------------------------------------------------

StatusOr<Shape> reshape_target(const Shape& in, const std::vector<std::int64_t>& spec,
                               bool allowzero) {
    if (spec.size() > static_cast<std::size_t>(kMaxRank))
        return Status::error(ErrorCode::invalid_argument, "reshape to rank ", spec.size(),
                             " exceeds the maximum rank ", kMaxRank);
    std::vector<std::int64_t> dims(spec.size());
    int infer = -1;
    std::int64_t known = 1;
    for (std::size_t i = 0; i < spec.size(); ++i) {
        std::int64_t d = spec[i];
        if (d == 0 && !allowzero) {
            if (static_cast<int>(i) >= in.rank())
                return Status::error(ErrorCode::invalid_argument, "shape[", i,
                                     "] is 0 (copy input dim) but the input ", in.to_string(),
                                     " has rank ", in.rank());
            d = in[static_cast<int>(i)];
        }
        if (d == -1) {
            if (infer >= 0)
                return Status::error(ErrorCode::invalid_argument,
                                     "shape has more than one -1 dimension");
            infer = static_cast<int>(i);
            dims[i] = 1;
            continue;
        }
        if (d < -1)
            return Status::error(ErrorCode::invalid_argument, "shape[", i, "] is ", d,
                                 " (only -1 may be negative)");
        if (d != 0 && known > std::numeric_limits<std::int64_t>::max() / d)
            return Status::error(ErrorCode::invalid_argument, "shape's element count overflows int64");
        dims[i] = d;
        known *= d;
    }
    const std::int64_t total = in.num_elements();
    if (infer >= 0) {
        if (known == 0 || total % known != 0)
            return Status::error(ErrorCode::invalid_argument, "cannot reshape ", in.to_string(),
                                 " (", total, " elements): the -1 dimension cannot be inferred");
        dims[static_cast<std::size_t>(infer)] = total / known;
    }
    DSINFER_ASSIGN_OR_RETURN(Shape out, shape_from(dims));
    if (out.num_elements() != total)
        return Status::error(ErrorCode::invalid_argument, "cannot reshape ", in.to_string(),
                             " (", total, " elements) to ", out.to_string(), " (",
                             out.num_elements(), " elements)");
    return out;
}

class ReshapeKernel final : public CopyRunKernel {
public:
    ReshapeKernel(std::optional<std::vector<std::int64_t>> attr_shape, bool allowzero)
        : attr_shape_(std::move(attr_shape)), allowzero_(allowzero) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        std::vector<std::int64_t> spec;
        if (attr_shape_) {
            spec = *attr_shape_;
        } else {
            DSINFER_CHECK(ctx.has_input(1), ErrorCode::invalid_model, "input 'shape' is missing");
            if (!ctx.has_data(1)) return Status::ok();
            DSINFER_RETURN_IF_ERROR(check_int_input(ctx.input(1), "shape"));
            DSINFER_CHECK(ctx.input(1).num_dims() == 1, ErrorCode::invalid_argument,
                          "input 'shape' must be 1-D, got shape ", ctx.input(1).shape().to_string());
            DSINFER_ASSIGN_OR_RETURN(spec, read_ints(ctx.input(1), "shape"));
        }
        DSINFER_ASSIGN_OR_RETURN(Shape out, reshape_target(x.shape(), spec, allowzero_));
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }

private:
    std::optional<std::vector<std::int64_t>> attr_shape_;
    bool allowzero_;
};

Factory make_reshape(const KernelCreateContext& ctx) {
    std::optional<std::vector<std::int64_t>> attr_shape;
    if (ctx.opset() < 5) {
        DSINFER_ASSIGN_OR_RETURN(auto s, ctx.node().attr<std::vector<std::int64_t>>("shape"));
        attr_shape = std::move(s);
    }
    DSINFER_ASSIGN_OR_RETURN(std::int64_t allowzero,
                             ctx.node().attr_or<std::int64_t>("allowzero", 0));
    return make_kernel<ReshapeKernel>(std::move(attr_shape), allowzero != 0);
}

// ---- Flatten --------------------------------------------------------------------------------

class FlattenKernel final : public CopyRunKernel {
public:
    explicit FlattenKernel(std::int64_t axis) : axis_(axis) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const int r = x.num_dims();
        const std::int64_t a = axis_ < 0 ? axis_ + r : axis_;
        DSINFER_CHECK(a >= 0 && a <= r, ErrorCode::invalid_model, "attribute 'axis' ", axis_,
                      " is outside [", -r, ", ", r, "] for input rank ", r);
        const int ai = static_cast<int>(a);
        ctx.set_output(0, x.dtype(),
                       Shape{x.shape().size_between(0, ai), x.shape().size_between(ai, r)});
        return Status::ok();
    }

private:
    std::int64_t axis_;
};

Factory make_flatten(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, ctx.node().attr_or<std::int64_t>("axis", 1));
    return make_kernel<FlattenKernel>(axis);
}

// ---- Squeeze / Unsqueeze --------------------------------------------------------------------

/// Reads the axes (attribute before `input_opset`, optional input 1 from it). Sets `known` to
/// false when the axes input has no data yet.
Status read_axes(const PrepareContext& ctx, const std::optional<std::vector<std::int64_t>>& attr,
                 std::vector<std::int64_t>& axes, bool& present, bool& known) {
    known = true;
    present = false;
    if (attr) {
        axes = *attr;
        present = true;
        return Status::ok();
    }
    if (!ctx.has_input(1)) return Status::ok();
    present = true;
    if (!ctx.has_data(1)) {
        known = false;
        return Status::ok();
    }
    DSINFER_RETURN_IF_ERROR(check_int_input(ctx.input(1), "axes"));
    DSINFER_ASSIGN_OR_RETURN(axes, read_ints(ctx.input(1), "axes"));
    return Status::ok();
}

class SqueezeKernel final : public CopyRunKernel {
public:
    explicit SqueezeKernel(std::optional<std::vector<std::int64_t>> axes) : axes_(std::move(axes)) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const int r = x.num_dims();
        std::vector<std::int64_t> axes;
        bool present = false, known = true;
        DSINFER_RETURN_IF_ERROR(read_axes(ctx, axes_, axes, present, known));
        if (!known) return Status::ok();
        std::array<bool, kMaxRank> drop{};
        if (!present) {
            for (int d = 0; d < r; ++d) drop[static_cast<std::size_t>(d)] = x.shape()[d] == 1;
        } else {
            for (auto a : axes) {
                DSINFER_ASSIGN_OR_RETURN(int d, normalize_axis(a, r, "axes entry"));
                DSINFER_CHECK(!drop[static_cast<std::size_t>(d)], ErrorCode::invalid_model,
                              "axes contains axis ", a, " twice");
                DSINFER_CHECK(x.shape()[d] == 1, ErrorCode::invalid_argument, "cannot squeeze axis ",
                              a, " of input shape ", x.shape().to_string(), ": its size is not 1");
                drop[static_cast<std::size_t>(d)] = true;
            }
        }
        Shape out;
        for (int d = 0; d < r; ++d)
            if (!drop[static_cast<std::size_t>(d)]) out.push_back(x.shape()[d]);
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }

private:
    std::optional<std::vector<std::int64_t>> axes_;
};

class UnsqueezeKernel final : public CopyRunKernel {
public:
    explicit UnsqueezeKernel(std::optional<std::vector<std::int64_t>> axes)
        : axes_(std::move(axes)) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        std::vector<std::int64_t> axes;
        bool present = false, known = true;
        DSINFER_RETURN_IF_ERROR(read_axes(ctx, axes_, axes, present, known));
        if (!known) return Status::ok();
        DSINFER_CHECK(present, ErrorCode::invalid_model, "axes are required");
        const int out_rank = x.num_dims() + static_cast<int>(axes.size());
        DSINFER_CHECK(out_rank <= kMaxRank, ErrorCode::unsupported, "output rank ", out_rank,
                      " exceeds the maximum rank ", kMaxRank);
        std::array<bool, kMaxRank> added{};
        for (auto a : axes) {
            DSINFER_ASSIGN_OR_RETURN(int d, normalize_axis(a, out_rank, "axes entry"));
            DSINFER_CHECK(!added[static_cast<std::size_t>(d)], ErrorCode::invalid_model,
                          "axes contains axis ", a, " twice");
            added[static_cast<std::size_t>(d)] = true;
        }
        Shape out;
        int k = 0;
        for (int d = 0; d < out_rank; ++d)
            out.push_back(added[static_cast<std::size_t>(d)] ? 1 : x.shape()[k++]);
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }

private:
    std::optional<std::vector<std::int64_t>> axes_;
};

template <class K>
Factory make_axes_kernel(const KernelCreateContext& ctx) {
    std::optional<std::vector<std::int64_t>> axes;
    if (ctx.opset() < 13 && ctx.node().has_attr("axes")) {
        DSINFER_ASSIGN_OR_RETURN(auto a, ctx.node().attr<std::vector<std::int64_t>>("axes"));
        axes = std::move(a);
    }
    return make_kernel<K>(std::move(axes));
}

// ---- Transpose ------------------------------------------------------------------------------

/// Copies `in` (viewed with shape `in_shape`) into `out` with out dim i = in dim perm[i].
Status permute_copy(const TensorView& in, const Shape& in_shape, const int* perm,
                    const TensorView& out) noexcept {
    const Strides cs = contiguous_strides(in_shape);
    Strides st{};
    Shape out_shape;
    for (int i = 0; i < in_shape.rank(); ++i) {
        out_shape.push_back(in_shape[perm[i]]);
        st[static_cast<std::size_t>(i)] = cs[static_cast<std::size_t>(perm[i])];
    }
    return dispatch_storage(in.dtype, [&]<class T>() {
        strided_copy(in.data_unchecked<T>(), 0, st, out_shape, out.data_unchecked<T>());
        return Status::ok();
    });
}

class TransposeKernel final : public Kernel {
public:
    explicit TransposeKernel(std::vector<std::int64_t> perm) : perm_(std::move(perm)) {}

    void perm_for(int r, std::array<int, kMaxRank>& p) const noexcept {
        for (int i = 0; i < r; ++i)
            p[static_cast<std::size_t>(i)] =
                perm_.empty() ? r - 1 - i : static_cast<int>(perm_[static_cast<std::size_t>(i)]);
    }
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const int r = x.num_dims();
        DSINFER_CHECK(perm_.empty() || static_cast<int>(perm_.size()) == r,
                      ErrorCode::invalid_argument, "attribute 'perm' has ", perm_.size(),
                      " entries but the input has rank ", r);
        std::array<int, kMaxRank> p{};
        perm_for(r, p);
        Shape out;
        for (int i = 0; i < r; ++i) out.push_back(x.shape()[p[static_cast<std::size_t>(i)]]);
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        std::array<int, kMaxRank> p{};
        perm_for(ctx.input(0).shape.rank(), p);
        return permute_copy(ctx.input(0), ctx.input(0).shape, p.data(), ctx.output(0));
    }

private:
    std::vector<std::int64_t> perm_;
};

Factory make_transpose(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(auto perm, ctx.node().attr_or<std::vector<std::int64_t>>(
                                            "perm", std::vector<std::int64_t>{}));
    std::vector<bool> seen(perm.size(), false);
    for (auto p : perm) {
        if (p < 0 || p >= static_cast<std::int64_t>(perm.size()) ||
            seen[static_cast<std::size_t>(p)])
            return Status::error(ErrorCode::invalid_model,
                                 "attribute 'perm' is not a permutation of 0..", perm.size() - 1);
        seen[static_cast<std::size_t>(p)] = true;
    }
    return make_kernel<TransposeKernel>(std::move(perm));
}

// ---- Concat ---------------------------------------------------------------------------------

class ConcatKernel final : public Kernel {
public:
    explicit ConcatKernel(std::int64_t axis) : axis_(axis) {}
    Status prepare(PrepareContext& ctx) const override {
        DSINFER_ASSIGN_OR_RETURN(
            Shape out, concat_output_shape(
                           axis_, ctx.num_inputs(),
                           [&](int i) -> const Shape& { return ctx.input(i).shape(); },
                           [&](int i) { return ctx.input(i).dtype(); }));
        ctx.set_output(0, ctx.input(0).dtype(), out);
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& y = ctx.output(0);
        const int r = y.shape.rank();
        const int axis = concat_run_axis(axis_, r);
        if (axis < 0)
            return Status::error(ErrorCode::invalid_argument, "axis ", axis_,
                                 " is outside the rank ", r);
        const std::int64_t outer = y.shape.size_between(0, axis);
        const std::int64_t out_inner = y.shape.size_between(axis, r);
        return dispatch_storage(y.dtype, [&]<class T>() {
            std::int64_t off = 0;
            for (int i = 0; i < ctx.num_inputs(); ++i) {
                const TensorView& x = ctx.input(i);
                const std::int64_t inner = x.shape.size_between(axis, r);
                for (std::int64_t o = 0; o < outer; ++o)
                    copy_elems(x.data_unchecked<T>() + o * inner, inner,
                               y.data_unchecked<T>() + o * out_inner + off);
                off += inner;
            }
            return Status::ok();
        });
    }

private:
    std::int64_t axis_;
};

Factory make_concat(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(const ConcatAttrs a, parse_concat_attrs(ctx));
    return make_kernel<ConcatKernel>(a.axis);
}

// ---- Split ----------------------------------------------------------------------------------

class SplitKernel final : public Kernel {
public:
    SplitKernel(std::int64_t opset, std::int64_t axis, std::optional<std::vector<std::int64_t>> split,
                std::int64_t num_outputs)
        : opset_(opset), axis_(axis), split_(std::move(split)), num_outputs_(num_outputs) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const int r = x.num_dims();
        DSINFER_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_, r));
        const std::int64_t dim = x.shape()[axis];
        const int n = ctx.num_outputs();
        std::vector<std::int64_t> sizes;
        if (split_) {
            sizes = *split_;
        } else if (ctx.has_input(1)) {
            if (!ctx.has_data(1)) return Status::ok();
            DSINFER_RETURN_IF_ERROR(check_int_input(ctx.input(1), "split"));
            DSINFER_ASSIGN_OR_RETURN(sizes, read_ints(ctx.input(1), "split"));
        }
        if (!sizes.empty() || (ctx.has_input(1) && !split_)) {
            DSINFER_CHECK(static_cast<int>(sizes.size()) == n, ErrorCode::invalid_argument,
                          "split has ", sizes.size(), " entries but the node has ", n,
                          " outputs");
            std::int64_t sum = 0;
            for (auto s : sizes) {
                DSINFER_CHECK(s >= 0, ErrorCode::invalid_argument, "split entry ", s,
                              " is negative");
                sum += s;
            }
            DSINFER_CHECK(sum == dim, ErrorCode::invalid_argument, "split sizes sum to ", sum,
                          " but axis ", axis, " of input shape ", x.shape().to_string(),
                          " has size ", dim);
        } else if (opset_ >= 18 && num_outputs_ > 0) {
            DSINFER_CHECK(num_outputs_ == n, ErrorCode::invalid_model, "attribute 'num_outputs' is ",
                          num_outputs_, " but the node has ", n, " outputs");
            const std::int64_t chunk = (dim + n - 1) / n;
            for (int i = 0; i < n; ++i)
                sizes.push_back(std::clamp<std::int64_t>(dim - i * chunk, 0, chunk));
        } else {
            DSINFER_CHECK(n > 0 && dim % n == 0, ErrorCode::invalid_argument, "axis ", axis,
                          " of input shape ", x.shape().to_string(), " (size ", dim,
                          ") cannot be split evenly into ", n, " outputs");
            sizes.assign(static_cast<std::size_t>(n), dim / n);
        }
        for (int i = 0; i < n; ++i) {
            Shape s = x.shape();
            s[axis] = sizes[static_cast<std::size_t>(i)];
            ctx.set_output(i, x.dtype(), s);
        }
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int r = x.shape.rank();
        const int axis = static_cast<int>(axis_ < 0 ? axis_ + r : axis_);
        const std::int64_t outer = x.shape.size_between(0, axis);
        const std::int64_t in_inner = x.shape.size_between(axis, r);
        return dispatch_storage(x.dtype, [&]<class T>() {
            std::int64_t off = 0;
            for (int i = 0; i < ctx.num_outputs(); ++i) {
                // make_split rejects omitted outputs, so every output view is valid here.
                const TensorView& y = ctx.output(i);
                const std::int64_t inner = y.shape.size_between(axis, r);
                for (std::int64_t o = 0; o < outer; ++o)
                    copy_elems(x.data_unchecked<T>() + o * in_inner + off, inner, y.data_unchecked<T>() + o * inner);
                off += inner;
            }
            return Status::ok();
        });
    }

private:
    std::int64_t opset_;
    std::int64_t axis_;
    std::optional<std::vector<std::int64_t>> split_;
    std::int64_t num_outputs_;
};

Factory make_split(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::int64_t axis, ctx.node().attr_or<std::int64_t>("axis", 0));
    std::optional<std::vector<std::int64_t>> split;
    if (ctx.opset() < 13 && ctx.node().has_attr("split")) {
        DSINFER_ASSIGN_OR_RETURN(auto s, ctx.node().attr<std::vector<std::int64_t>>("split"));
        split = std::move(s);
    }
    for (int i = 0; i < ctx.num_outputs(); ++i)
        if (!ctx.has_output(i))
            return Status::error(ErrorCode::invalid_model, "Split output ", i, " is omitted");
    std::int64_t num_outputs = 0;
    if (ctx.opset() >= 18) {
        DSINFER_ASSIGN_OR_RETURN(num_outputs,
                                 ctx.node().attr_or<std::int64_t>("num_outputs", 0));
        if (ctx.node().has_attr("num_outputs") && ctx.has_input(1))
            return Status::error(ErrorCode::invalid_model,
                                 "'num_outputs' and the 'split' input are both set");
        if (ctx.node().has_attr("num_outputs") && num_outputs < 1)
            return Status::error(ErrorCode::invalid_model, "attribute 'num_outputs' is ",
                                 num_outputs, "; it must be at least 1");
    }
    return make_kernel<SplitKernel>(ctx.opset(), axis, std::move(split), num_outputs);
}

// ---- Slice ----------------------------------------------------------------------------------

struct SliceGeom {
    Shape out;
    Strides strides{};
    std::int64_t base = 0;
};

/// Slice geometry for n (start, end, axis, step) entries read through the accessors.
template <class FS, class FE, class FA, class FP>
Status slice_geometry(const Shape& in, std::int64_t n, FS&& starts, FE&& ends, FA&& axes,
                      FP&& steps, SliceGeom& g) {
    const int r = in.rank();
    SliceRanges sr;
    DSINFER_RETURN_IF_ERROR(slice_ranges(in, n, starts, ends, axes, steps, sr));
    const Strides cs = contiguous_strides(in);
    g = SliceGeom{};
    for (int d = 0; d < r; ++d) {
        const auto du = static_cast<std::size_t>(d);
        g.out.push_back(sr.length[du]);
        g.strides[du] = cs[du] * sr.step[du];
        g.base += sr.start[du] * cs[du];
    }
    if (g.out.num_elements() == 0) g.base = 0;
    return Status::ok();
}

class SliceKernel final : public Kernel {
public:
    // Opset < 10: starts/ends/axes attributes. Opset >= 10: inputs 1..4.
    SliceKernel(bool from_inputs, std::vector<std::int64_t> starts, std::vector<std::int64_t> ends,
                std::vector<std::int64_t> axes)
        : from_inputs_(from_inputs), starts_(std::move(starts)), ends_(std::move(ends)),
          axes_(std::move(axes)) {}

    /// `v` holds inputs 1..4 (null views for omitted axes/steps) when from_inputs_.
    Status geometry(const Shape& in, const std::array<TensorView, 4>& v, SliceGeom& g) const {
        if (!from_inputs_) {
            const bool has_axes = !axes_.empty();
            return slice_geometry(
                in, static_cast<std::int64_t>(starts_.size()),
                [&](std::int64_t i) { return starts_[static_cast<std::size_t>(i)]; },
                [&](std::int64_t i) { return ends_[static_cast<std::size_t>(i)]; },
                [&](std::int64_t i) {
                    return has_axes ? axes_[static_cast<std::size_t>(i)] : i;
                },
                [](std::int64_t) { return std::int64_t{1}; }, g);
        }
        const bool has_axes = v[2].shape.rank() == 1;
        const bool has_steps = v[3].shape.rank() == 1;
        return slice_geometry(
            in, v[0].num_elements(), [&](std::int64_t i) { return int_at(v[0], i); },
            [&](std::int64_t i) { return int_at(v[1], i); },
            [&](std::int64_t i) { return has_axes ? int_at(v[2], i) : i; },
            [&](std::int64_t i) { return has_steps ? int_at(v[3], i) : std::int64_t{1}; }, g);
    }

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        std::array<TensorView, 4> v{};
        if (from_inputs_) {
            static constexpr const char* kNames[] = {"", "starts", "ends", "axes", "steps"};
            for (int i = 1; i < 5; ++i) {
                if (!ctx.has_input(i)) {
                    DSINFER_CHECK(i > 2, ErrorCode::invalid_model, "input '", kNames[i],
                                  "' is required");
                    continue;
                }
                if (!ctx.has_data(i)) return Status::ok();
                DSINFER_RETURN_IF_ERROR(check_int_input(ctx.input(i), kNames[i]));
                DSINFER_CHECK(ctx.input(i).num_dims() == 1 &&
                                  ctx.input(i).num_elements() == ctx.input(1).num_elements(),
                              ErrorCode::invalid_argument, "input '", kNames[i], "' has shape ",
                              ctx.input(i).shape().to_string(), "; expected [",
                              ctx.input(1).num_elements(), "] like 'starts'");
                v[static_cast<std::size_t>(i - 1)] = ctx.input(i).view();
            }
        }
        SliceGeom g;
        DSINFER_RETURN_IF_ERROR(geometry(x.shape(), v, g));
        ctx.set_output(0, x.dtype(), g.out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        std::array<TensorView, 4> v{};
        if (from_inputs_)
            for (int i = 1; i < 5; ++i)
                if (ctx.has_input(i)) v[static_cast<std::size_t>(i - 1)] = ctx.input(i);
        SliceGeom g;
        DSINFER_RETURN_IF_ERROR(geometry(x.shape, v, g));
        return dispatch_storage(x.dtype, [&]<class T>() {
            strided_copy(x.data_unchecked<T>(), g.base, g.strides, g.out, ctx.output(0).data_unchecked<T>());
            return Status::ok();
        });
    }

private:
    bool from_inputs_;
    std::vector<std::int64_t> starts_, ends_, axes_;
};

Factory make_slice(const KernelCreateContext& ctx) {
    if (ctx.opset() >= 10) return make_kernel<SliceKernel>(true, std::vector<std::int64_t>{},
                                                           std::vector<std::int64_t>{},
                                                           std::vector<std::int64_t>{});
    const Node& n = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(auto starts, n.attr<std::vector<std::int64_t>>("starts"));
    DSINFER_ASSIGN_OR_RETURN(auto ends, n.attr<std::vector<std::int64_t>>("ends"));
    DSINFER_ASSIGN_OR_RETURN(auto axes, n.attr_or<std::vector<std::int64_t>>(
                                            "axes", std::vector<std::int64_t>{}));
    if (starts.size() != ends.size() || (!axes.empty() && axes.size() != starts.size()))
        return Status::error(ErrorCode::invalid_model,
                             "attributes 'starts', 'ends' and 'axes' differ in length");
    return make_kernel<SliceKernel>(false, std::move(starts), std::move(ends), std::move(axes));
}

// ---- Expand ---------------------------------------------------------------------------------

class ExpandKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (!ctx.has_data(1)) return Status::ok();
        DSINFER_RETURN_IF_ERROR(check_int_input(ctx.input(1), "shape"));
        DSINFER_CHECK(ctx.input(1).num_dims() == 1, ErrorCode::invalid_argument,
                      "input 'shape' must be 1-D, got shape ", ctx.input(1).shape().to_string());
        DSINFER_ASSIGN_OR_RETURN(auto dims, read_ints(ctx.input(1), "shape"));
        DSINFER_ASSIGN_OR_RETURN(Shape target, shape_from(dims));
        DSINFER_ASSIGN_OR_RETURN(Shape out, broadcast_shapes(x.shape(), target));
        DSINFER_ASSIGN_OR_RETURN(out, shape_from(out.dims()));  // element-count overflow
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const Strides st = broadcast_strides(x.shape, y.shape);
        return dispatch_storage(x.dtype, [&]<class T>() {
            strided_copy(x.data_unchecked<T>(), 0, st, y.shape, y.data_unchecked<T>());
            return Status::ok();
        });
    }
};

Factory make_expand(const KernelCreateContext&) { return make_kernel<ExpandKernel>(); }

// ---- Tile -----------------------------------------------------------------------------------

class TileKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (!ctx.has_data(1)) return Status::ok();
        DSINFER_RETURN_IF_ERROR(check_int_input(ctx.input(1), "repeats"));
        DSINFER_ASSIGN_OR_RETURN(auto reps, read_ints(ctx.input(1), "repeats"));
        DSINFER_CHECK(ctx.input(1).num_dims() == 1 &&
                          static_cast<int>(reps.size()) == x.num_dims(),
                      ErrorCode::invalid_argument, "input 'repeats' has shape ",
                      ctx.input(1).shape().to_string(), "; expected [", x.num_dims(),
                      "] (the input rank)");
        std::vector<std::int64_t> dims;
        for (int d = 0; d < x.num_dims(); ++d) {
            const std::int64_t rep = reps[static_cast<std::size_t>(d)];
            DSINFER_CHECK(rep >= 0, ErrorCode::invalid_argument, "repeats[", d, "] is negative (",
                          rep, ")");
            DSINFER_CHECK(rep == 0 || x.shape()[d] <= std::numeric_limits<std::int64_t>::max() / rep,
                          ErrorCode::invalid_argument, "tiled dimension overflows int64");
            dims.push_back(x.shape()[d] * rep);
        }
        DSINFER_ASSIGN_OR_RETURN(Shape out, shape_from(dims));
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const int r = y.shape.rank();
        const std::int64_t total = y.num_elements();
        if (total == 0) return Status::ok();
        const Strides cs = contiguous_strides(x.shape);
        return dispatch_storage(x.dtype, [&]<class T>() {
            const T* in = x.data_unchecked<T>();
            T* out = y.data_unchecked<T>();
            std::array<std::int64_t, kMaxRank> idx{}, src{};
            std::int64_t off = 0;
            for (std::int64_t e = 0; e < total; ++e) {
                out[e] = in[off];
                for (int d = r - 1; d >= 0; --d) {
                    const auto du = static_cast<std::size_t>(d);
                    ++idx[du];
                    ++src[du];
                    off += cs[du];
                    if (src[du] == x.shape[d]) {
                        src[du] = 0;
                        off -= cs[du] * x.shape[d];
                    }
                    if (idx[du] < y.shape[d]) break;
                    idx[du] = 0;
                    off -= cs[du] * src[du];
                    src[du] = 0;
                }
            }
            return Status::ok();
        });
    }
};

Factory make_tile(const KernelCreateContext&) { return make_kernel<TileKernel>(); }

// ---- DepthToSpace / SpaceToDepth ------------------------------------------------------------

class DepthToSpaceKernel final : public Kernel {
public:
    DepthToSpaceKernel(std::int64_t block, bool crd) : b_(block), crd_(crd) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(x.num_dims() == 4, ErrorCode::invalid_argument,
                      "input must be 4-D [N,C,H,W], got shape ", x.shape().to_string());
        const Shape& s = x.shape();
        DSINFER_CHECK(s[1] % (b_ * b_) == 0, ErrorCode::invalid_argument, "channels ", s[1],
                      " are not divisible by blocksize^2 = ", b_ * b_);
        const std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
        DSINFER_CHECK(s[2] <= kMax / b_ && s[3] <= kMax / b_, ErrorCode::invalid_argument,
                      "output of input shape ", s.to_string(), " overflows int64");
        const std::int64_t dims[] = {s[0], s[1] / (b_ * b_), s[2] * b_, s[3] * b_};
        DSINFER_ASSIGN_OR_RETURN(Shape out, shape_from(dims));
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const Shape& s = ctx.input(0).shape;
        const std::int64_t c = s[1] / (b_ * b_);
        // View the input as 6-D and permute it into [N, C', H, b, W, b].
        if (crd_) {
            const Shape v{s[0], c, b_, b_, s[2], s[3]};
            const int perm[] = {0, 1, 4, 2, 5, 3};
            return permute_copy(ctx.input(0), v, perm, ctx.output(0));
        }
        const Shape v{s[0], b_, b_, c, s[2], s[3]};
        const int perm[] = {0, 3, 4, 1, 5, 2};
        return permute_copy(ctx.input(0), v, perm, ctx.output(0));
    }

private:
    std::int64_t b_;
    bool crd_;
};

Factory make_depth_to_space(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::int64_t b, ctx.node().attr<std::int64_t>("blocksize"));
    // The bound keeps blocksize^2 far from overflow.
    if (b <= 0 || b > (1 << 20))
        return Status::error(ErrorCode::invalid_model,
                             "attribute 'blocksize' must be in [1, 2^20], got ", b);
    DSINFER_ASSIGN_OR_RETURN(std::string mode,
                             ctx.node().attr_or<std::string>("mode", std::string("DCR")));
    if (mode != "DCR" && mode != "CRD")
        return Status::error(ErrorCode::invalid_model, "attribute 'mode' must be DCR or CRD, got '",
                             mode, "'");
    return make_kernel<DepthToSpaceKernel>(b, mode == "CRD");
}

class SpaceToDepthKernel final : public Kernel {
public:
    explicit SpaceToDepthKernel(std::int64_t block) : b_(block) {}
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(x.num_dims() == 4, ErrorCode::invalid_argument,
                      "input must be 4-D [N,C,H,W], got shape ", x.shape().to_string());
        const Shape& s = x.shape();
        DSINFER_CHECK(s[2] % b_ == 0 && s[3] % b_ == 0, ErrorCode::invalid_argument,
                      "spatial dims of shape ", s.to_string(), " are not divisible by blocksize ",
                      b_);
        DSINFER_CHECK(s[1] <= std::numeric_limits<std::int64_t>::max() / (b_ * b_),
                      ErrorCode::invalid_argument, "output of input shape ", s.to_string(),
                      " overflows int64");
        ctx.set_output(0, x.dtype(), Shape{s[0], s[1] * b_ * b_, s[2] / b_, s[3] / b_});
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        const Shape& s = ctx.input(0).shape;
        const Shape v{s[0], s[1], s[2] / b_, b_, s[3] / b_, b_};
        const int perm[] = {0, 3, 5, 1, 2, 4};
        return permute_copy(ctx.input(0), v, perm, ctx.output(0));
    }

private:
    std::int64_t b_;
};

Factory make_space_to_depth(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(std::int64_t b, ctx.node().attr<std::int64_t>("blocksize"));
    // The bound keeps blocksize^2 far from overflow.
    if (b <= 0 || b > (1 << 20))
        return Status::error(ErrorCode::invalid_model,
                             "attribute 'blocksize' must be in [1, 2^20], got ", b);
    return make_kernel<SpaceToDepthKernel>(b);
}

}  // namespace

void register_tensor_kernels(KernelRegistry& r) {
    r.add({"Identity", "", 1, kMaxOpset, DeviceKind::cpu}, &make_identity);
    r.add({"OptionalHasElement", "", 18, kMaxOpset, DeviceKind::cpu}, &make_optional_has_element);
    r.add({"OptionalGetElement", "", 18, kMaxOpset, DeviceKind::cpu}, &make_optional_get_element);
    r.add({"Dropout", "", 1, kMaxOpset, DeviceKind::cpu}, &make_dropout);
    r.add({"Constant", "", 1, kMaxOpset, DeviceKind::cpu}, &make_constant);
    r.add({"Shape", "", 1, kMaxOpset, DeviceKind::cpu}, &make_shape);
    r.add({"Size", "", 1, kMaxOpset, DeviceKind::cpu}, &make_size);
    r.add({"Reshape", "", 1, kMaxOpset, DeviceKind::cpu}, &make_reshape);
    r.add({"Flatten", "", 1, kMaxOpset, DeviceKind::cpu}, &make_flatten);
    r.add({"Squeeze", "", 1, kMaxOpset, DeviceKind::cpu}, &make_axes_kernel<SqueezeKernel>);
    r.add({"Unsqueeze", "", 1, kMaxOpset, DeviceKind::cpu}, &make_axes_kernel<UnsqueezeKernel>);
    r.add({"Transpose", "", 1, kMaxOpset, DeviceKind::cpu}, &make_transpose);
    r.add({"Concat", "", 1, kMaxOpset, DeviceKind::cpu}, &make_concat);
    r.add({"Split", "", 1, kMaxOpset, DeviceKind::cpu}, &make_split);
    r.add({"Slice", "", 1, kMaxOpset, DeviceKind::cpu}, &make_slice);
    r.add({"Expand", "", 8, kMaxOpset, DeviceKind::cpu}, &make_expand);
    r.add({"Tile", "", 6, kMaxOpset, DeviceKind::cpu}, &make_tile);
    r.add({"DepthToSpace", "", 1, kMaxOpset, DeviceKind::cpu}, &make_depth_to_space);
    r.add({"SpaceToDepth", "", 1, kMaxOpset, DeviceKind::cpu}, &make_space_to_depth);
    register_tensor_index_kernels(r);
    register_tensor_misc_kernels(r);
}

}  // namespace dsinfer::detail
