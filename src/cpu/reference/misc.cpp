// Reference loss kernels: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss. Also the
// registration entry point of the misc group, which pulls in misc_*.cpp (signal processing,
// image ops, strings, TfIdfVectorizer, ai.onnx.ml, ai.onnx.preview.training optimizers).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "ops/kernel_utils.hpp"
#include "cpu/reference/groups.hpp"

namespace dsinfer::detail {

// Defined in misc_*.cpp.
void register_misc_signal_kernels(KernelRegistry& r);
void register_misc_image_kernels(KernelRegistry& r);
void register_misc_string_kernels(KernelRegistry& r);
void register_misc_tree_kernels(KernelRegistry& r);
void register_misc_text_kernels(KernelRegistry& r);
void register_misc_training_kernels(KernelRegistry& r);

namespace {

using std::int64_t;

enum class Reduction { none, sum, mean };

StatusOr<Reduction> parse_reduction(const Node& node) {
    auto r = node.attr_or<std::string>("reduction", "mean");
    if (!r.is_ok()) return r.status();
    if (r.value() == "none") return Reduction::none;
    if (r.value() == "sum") return Reduction::sum;
    if (r.value() == "mean") return Reduction::mean;
    return Status::error(ErrorCode::invalid_model, "attribute 'reduction' must be none, sum or ",
                         "mean, got '", r.value(), "'");
}

// Shared by both losses: input 0 is [N, C, d1..dk] scores (SCE) or log-probabilities (NLL),
// input 1 is [N, d1..dk] integer labels, input 2 the optional [C] class weights.
class LossKernel final : public Kernel {
public:
    LossKernel(bool softmax, Reduction reduction, std::optional<int64_t> ignore_index)
        : softmax_(softmax), reduction_(reduction), ignore_index_(ignore_index) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& labels = ctx.input(1);
        DSINFER_CHECK(kFloatTypes.contains(x.dtype()), ErrorCode::unsupported,
                      "input 0: element type ", dtype_name(x.dtype()), " is not supported");
        DSINFER_CHECK(labels.dtype() == DType::i64 || labels.dtype() == DType::i32,
                      ErrorCode::unsupported, "labels must be int32 or int64, got ",
                      dtype_name(labels.dtype()));
        const Shape& xs = x.shape();
        DSINFER_CHECK(xs.rank() >= 2, ErrorCode::invalid_argument,
                      "input 0 must have rank >= 2 ([N, C, ...]), got ", xs.to_string());
        DSINFER_CHECK(labels.shape().rank() == xs.rank() - 1, ErrorCode::invalid_argument,
                      "labels shape ", labels.shape().to_string(), " does not match input ",
                      xs.to_string());
        Shape lshape;
        for (int i = 0; i < xs.rank(); ++i) {
            if (i == 1) continue;
            const int li = i == 0 ? 0 : i - 1;
            DSINFER_CHECK(labels.shape()[li] == xs[i], ErrorCode::invalid_argument,
                          "labels shape ", labels.shape().to_string(),
                          " does not match input ", xs.to_string());
            lshape.push_back(xs[i]);
        }
        if (ctx.has_input(2)) {
            const Tensor& w = ctx.input(2);
            DSINFER_CHECK(w.dtype() == x.dtype(), ErrorCode::invalid_argument,
                          "weights dtype ", dtype_name(w.dtype()), " differs from input ",
                          dtype_name(x.dtype()));
            DSINFER_CHECK(w.shape().rank() == 1 && w.shape()[0] == xs[1],
                          ErrorCode::invalid_argument, "weights must have shape [", xs[1],
                          "], got ", w.shape().to_string());
        }
        ctx.set_output(0, x.dtype(), reduction_ == Reduction::none ? lshape : Shape{});
        if (ctx.has_output(1)) {
            DSINFER_CHECK(softmax_, ErrorCode::invalid_model,
                          "NegativeLogLikelihoodLoss has one output");
            ctx.set_output(1, x.dtype(), xs);
        }
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& labels = ctx.input(1);
        const int64_t n = x.shape[0];
        const int64_t c = x.shape[1];
        const int64_t d = x.shape.size_between(2, x.shape.rank());
        return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() -> Status {
            const T* px = x.data_unchecked<T>();
            const T* pw = ctx.has_input(2) ? ctx.input(2).data_unchecked<T>() : nullptr;
            T* logp = ctx.has_output(1) ? ctx.output(1).data_unchecked<T>() : nullptr;
            T* out = ctx.output(0).data_unchecked<T>();
            double total = 0.0;
            double total_w = 0.0;
            for (int64_t i = 0; i < n; ++i) {
                for (int64_t j = 0; j < d; ++j) {
                    const int64_t pos = i * d + j;
                    const int64_t base = i * c * d + j;
                    const int64_t label = labels.dtype == DType::i64
                                              ? labels.data_unchecked<int64_t>()[pos]
                                              : labels.data_unchecked<std::int32_t>()[pos];
                    // log-softmax over the class axis (computed in double).
                    double mx = 0.0, lse = 0.0;
                    if (softmax_) {
                        mx = -std::numeric_limits<double>::infinity();
                        for (int64_t k = 0; k < c; ++k)
                            mx = std::max(mx, static_cast<double>(load(px[base + k * d])));
                        double s = 0.0;
                        for (int64_t k = 0; k < c; ++k)
                            s += std::exp(static_cast<double>(load(px[base + k * d])) - mx);
                        lse = mx + std::log(s);
                        if (logp != nullptr)
                            for (int64_t k = 0; k < c; ++k)
                                logp[base + k * d] = store<T>(
                                    static_cast<double>(load(px[base + k * d])) - lse);
                    }
                    double loss = 0.0, w = 0.0;
                    if (!(ignore_index_.has_value() && label == *ignore_index_)) {
                        if (label < 0 || label >= c)
                            return Status::error(ErrorCode::invalid_argument, "label ", label,
                                                 " at position ", pos, " is outside [0, ", c,
                                                 ")");
                        const double v = static_cast<double>(load(px[base + label * d]));
                        w = pw != nullptr ? static_cast<double>(load(pw[label])) : 1.0;
                        loss = -(softmax_ ? v - lse : v) * w;
                    }
                    if (reduction_ == Reduction::none) out[pos] = store<T>(loss);
                    total += loss;
                    total_w += w;
                }
            }
            if (reduction_ == Reduction::sum) out[0] = store<T>(total);
            if (reduction_ == Reduction::mean) out[0] = store<T>(total / total_w);
            return Status::ok();
        });
    }

private:
    bool softmax_;
    Reduction reduction_;
    std::optional<int64_t> ignore_index_;
};

StatusOr<std::unique_ptr<Kernel>> make_loss(const KernelCreateContext& ctx, bool softmax) {
    auto red = parse_reduction(ctx.node());
    if (!red.is_ok()) return red.status();
    std::optional<int64_t> ii;
    if (ctx.node().has_attr("ignore_index")) {
        auto v = ctx.node().attr<int64_t>("ignore_index");
        if (!v.is_ok()) return v.status();
        ii = v.value();
    }
    return make_kernel<LossKernel>(softmax, red.value(), ii);
}

StatusOr<std::unique_ptr<Kernel>> make_sce(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    return make_loss(ctx, true);
}
StatusOr<std::unique_ptr<Kernel>> make_nll(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    return make_loss(ctx, false);
}

}  // namespace

void register_misc_kernels(KernelRegistry& r) {
    constexpr auto cpu = DeviceKind::cpu;
    r.add({"SoftmaxCrossEntropyLoss", "", 12, kMaxOpset, cpu}, &make_sce);
    r.add({"NegativeLogLikelihoodLoss", "", 12, kMaxOpset, cpu}, &make_nll);
    register_misc_signal_kernels(r);
    register_misc_image_kernels(r);
    register_misc_string_kernels(r);
    register_misc_tree_kernels(r);
    register_misc_text_kernels(r);
    register_misc_training_kernels(r);
}

}  // namespace dsinfer::detail
