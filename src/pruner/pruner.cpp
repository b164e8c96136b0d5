// The Pruner (dsinfer/prune.hpp): prune_channels (src/passes/prune.cpp) driven by calibration
// data — a target met by a per-group allocation from measured sensitivity, recovery of the
// layers after the removed channels, and the fidelity of the result against the unpruned model.
//
// Recovery, per consumer layer L (a Conv, Gemm or MatMul whose input channels shrank), in graph
// order: the unpruned model gives L's input X0 and so its output T = X0 W0 + b0; the pruned
// model as corrected so far gives L's new input X1 (the kept channels). The rows of X1 (for a
// convolution, its im2col patches at sampled output positions) and a column of ones form Phi;
// least squares with a ridge toward the pruned weights W1,
//     min ||Phi [W; b] - T||^2 + lambda ||W - W1||^2,
// lambda = ridge * (inputs / rows) * mean diag(Phi^T Phi),
// is solved from the accumulated normal equations (Phi^T Phi, Phi^T T in double) by LDL^T.
// Bias-only recovery keeps W1 and sets b to the mean residual (what the removed channels
// contributed on average). The per-layer errors come from the same sums.
#include <Eigen/Dense>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dsinfer/engine.hpp"
#include "dsinfer/prune.hpp"
#include "passes/pass_utils.hpp"
#include "runtime/fidelity.hpp"

namespace dsinfer {

std::string_view to_string(PruneRecovery r) noexcept {
    switch (r) {
        case PruneRecovery::none: return "none";
        case PruneRecovery::bias: return "bias";
        case PruneRecovery::least_squares: return "lsq";
    }
    return "unknown";
}

StatusOr<PruneRecovery> parse_prune_recovery(std::string_view name) {
    if (name == "none") return PruneRecovery::none;
    if (name == "bias") return PruneRecovery::bias;
    if (name == "lsq" || name == "least-squares" || name == "least_squares")
        return PruneRecovery::least_squares;
    return Status::error(ErrorCode::invalid_argument, "unknown prune recovery '", name,
                         "' (none, bias or lsq)");
}

namespace {

using Batches = std::vector<std::vector<NamedTensor>>;
using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

StatusOr<InferenceEngine> compile(Graph g, const EngineOptions& eo) {
    try {
        return InferenceEngine::compile(std::move(g), eo);
    } catch (const Error& e) {
        return Status(e.code(), "prune: " + e.message());
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "prune: out of memory compiling the model");
    }
}

int node_index(const Graph& g, const std::string& name) {
    for (std::size_t i = 0; i < g.nodes.size(); ++i)
        if (g.nodes[i].name == name) return static_cast<int>(i);
    return -1;
}

/// Copies the observed value of one name (the others are ignored).
class Capture final : public ValueObserver {
public:
    explicit Capture(std::string name) : name_(std::move(name)) {}
    void observe(std::string_view name, const TensorView& v) noexcept override {
        if (name != name_ || v.dtype != DType::f32) return;
        try {
            got_ = Tensor::empty(DType::f32, v.shape);
            std::memcpy(got_.raw_data(), v.raw, v.num_bytes());
            seen_ = true;
        } catch (...) {
            seen_ = false;
        }
    }
    /// The value of the last run (moved out), or an error naming it.
    StatusOr<Tensor> take() {
        if (!seen_)
            return Status::error(ErrorCode::internal, "prune: the run did not show '", name_,
                                 "' (float32) to the recovery's observer");
        seen_ = false;
        return std::move(got_);
    }

private:
    std::string name_;
    Tensor got_;
    bool seen_ = false;
};

/// A consumer layer's geometry: how its input becomes rows of features, and its weights in
/// the [features, outputs] form (alpha folded in for Gemm).
struct Layer {
    std::string node, op;
    std::int64_t n_out = 0;
    // Conv: kernel, strides, pads (begin), dilations over (H, W) (a 1-D conv as H = 1).
    std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
    int spatial = 0;
    // Gemm.
    bool trans_b = false;
    double alpha = 1.0, beta = 1.0;
};

/// `w` (float32) as [features, outputs] in double.
MatrixD weights_of(const Layer& l, const Tensor& w) {
    const float* p = w.data_unchecked<float>();
    const Shape& s = w.shape();
    if (l.op == "Conv") {
        const std::int64_t out = s[0], per = w.num_elements() / out;
        MatrixD m(per, out);
        for (std::int64_t o = 0; o < out; ++o)
            for (std::int64_t f = 0; f < per; ++f) m(f, o) = p[o * per + f];
        return m;
    }
    const std::int64_t r = s[0], c = s[1];
    MatrixD m(l.trans_b ? c : r, l.trans_b ? r : c);
    for (std::int64_t i = 0; i < r; ++i)
        for (std::int64_t j = 0; j < c; ++j) {
            const double v = p[i * c + j] * l.alpha;
            if (l.trans_b) m(j, i) = v;
            else m(i, j) = v;
        }
    return m;
}

/// [features, outputs] back into the stored form of `like`.
Tensor stored_weights(const Layer& l, const MatrixD& m, const Tensor& like) {
    Tensor t = Tensor::empty(DType::f32, like.shape());
    float* p = t.data_unchecked<float>();
    const Shape& s = like.shape();
    if (l.op == "Conv") {
        const std::int64_t out = s[0], per = like.num_elements() / out;
        for (std::int64_t o = 0; o < out; ++o)
            for (std::int64_t f = 0; f < per; ++f) p[o * per + f] = static_cast<float>(m(f, o));
        return t;
    }
    const std::int64_t r = s[0], c = s[1];
    for (std::int64_t i = 0; i < r; ++i)
        for (std::int64_t j = 0; j < c; ++j)
            p[i * c + j] = static_cast<float>((l.trans_b ? m(j, i) : m(i, j)) / l.alpha);
    return t;
}

/// Rows of features of `x` (the layer's input): the selected rows `rows` of the flattened
/// leading dims (linear) or of the output positions (Conv, as im2col patches).
MatrixD features(const Layer& l, const Tensor& x, const std::vector<std::int64_t>& rows) {
    const float* p = x.data_unchecked<float>();
    const Shape& s = x.shape();
    if (l.op != "Conv") {
        const std::int64_t k = s[s.rank() - 1];
        MatrixD m(static_cast<Eigen::Index>(rows.size()), k);
        for (std::size_t r = 0; r < rows.size(); ++r)
            for (std::int64_t j = 0; j < k; ++j)
                m(static_cast<Eigen::Index>(r), j) = p[rows[r] * k + j];
        return m;
    }
    const std::int64_t c = s[1], h = l.spatial == 2 ? s[2] : 1, w = s[s.rank() - 1];
    const std::int64_t ho = (h + 2 * l.ph - l.dh * (l.kh - 1) - 1) / l.sh + 1;
    const std::int64_t wo = (w + 2 * l.pw - l.dw * (l.kw - 1) - 1) / l.sw + 1;
    MatrixD m(static_cast<Eigen::Index>(rows.size()), c * l.kh * l.kw);
    for (std::size_t r = 0; r < rows.size(); ++r) {
        const std::int64_t pos = rows[r];
        const std::int64_t n = pos / (ho * wo), oh = (pos / wo) % ho, ow = pos % wo;
        std::int64_t f = 0;
        for (std::int64_t ch = 0; ch < c; ++ch)
            for (std::int64_t i = 0; i < l.kh; ++i)
                for (std::int64_t j = 0; j < l.kw; ++j, ++f) {
                    const std::int64_t y = oh * l.sh - l.ph + i * l.dh;
                    const std::int64_t xx = ow * l.sw - l.pw + j * l.dw;
                    m(static_cast<Eigen::Index>(r), f) =
                        y < 0 || y >= h || xx < 0 || xx >= w ? 0.0 : p[((n * c + ch) * h + y) * w + xx];
                }
    }
    return m;
}

/// The rows a batch contributes: every row, or an even sample of at most `cap`.
std::vector<std::int64_t> sample_rows(std::int64_t total, std::int64_t cap) {
    std::vector<std::int64_t> rows;
    const std::int64_t step = std::max<std::int64_t>(1, (total + cap - 1) / cap);
    for (std::int64_t r = 0; r < total; r += step) rows.push_back(r);
    return rows;
}

class Driver {
public:
    Driver(const PrunerOptions& o, Batches batches) : o_(o), batches_(std::move(batches)) {
        eval_ = std::min<std::size_t>(std::max<std::size_t>(o.eval_batches, 1), batches_.size());
    }

    EngineOptions engine_options() const {
        EngineOptions eo;
        eo.num_threads = o_.num_threads;
        return eo;
    }

    void progress(std::string_view phase, std::size_t done, std::size_t total) const {
        if (o_.progress) o_.progress(phase, done, total);
    }

    /// The unpruned model's outputs on the eval batches.
    Status reference(const Graph& original) {
        if (have_ref_) return Status::ok();
        DSINFER_ASSIGN_OR_RETURN(InferenceEngine e, compile(original, engine_options()));
        ref_.clear();
        for (std::size_t b = 0; b < eval_; ++b) {
            std::vector<NamedTensor> outs;
            DSINFER_RETURN_IF_ERROR(e.try_run(batches_[b], outs));
            ref_.push_back(std::move(outs));
        }
        have_ref_ = true;
        return Status::ok();
    }

    /// The outputs of `g` against reference()'s.
    StatusOr<PruneFidelity> fidelity(const Graph& g) {
        if (!have_ref_) return Status::error(ErrorCode::internal, "prune: no reference outputs");
        ++evaluations_;
        DSINFER_ASSIGN_OR_RETURN(InferenceEngine e, compile(g, engine_options()));
        std::vector<detail::OutputSums> sums;
        for (std::size_t b = 0; b < eval_; ++b) {
            std::vector<NamedTensor> outs;
            DSINFER_RETURN_IF_ERROR(e.try_run(batches_[b], outs));
            if (sums.size() < outs.size()) sums.resize(outs.size());
            for (std::size_t k = 0; k < outs.size() && k < ref_[b].size(); ++k)
                sums[k].add(outs[k].tensor, ref_[b][k].tensor);
        }
        PruneFidelity f;
        f.measured = true;
        f.cosine = detail::worst_fidelity(sums, FidelityMetric::cosine);
        f.relative_l2 = detail::worst_fidelity(sums, FidelityMetric::relative_l2);
        f.top1 = detail::worst_fidelity(sums, FidelityMetric::top1);
        return f;
    }

    Status recover(const Graph& original, Graph& pruned, const PruneReport& pr,
                   PruneRecovery method, std::vector<RecoveredLayer>& out);

    Status allocate(const Graph& original, PrunerReport& report, PruneOptions& chosen);

    std::size_t evaluations_ = 0;

private:
    StatusOr<RecoveredLayer> refit(const Graph& original, Graph& pruned, const std::string& node,
                                   const std::vector<std::int64_t>& kept_outputs,
                                   PruneRecovery method, InferenceEngine& e0);

    const PrunerOptions& o_;
    Batches batches_;
    std::size_t eval_ = 0;
    Batches ref_;
    bool have_ref_ = false;
};

/// An attribute, or `fallback` when absent or of another type.
template <class T>
T attr(const Node& n, std::string_view name, T fallback) {
    StatusOr<T> v = n.attr_or<T>(name, fallback);
    return v.is_ok() ? std::move(v).value() : fallback;
}

/// The layer of node `ni` of `g`, or the reason recovery skips it.
StatusOr<Layer> layer_of(const Graph& g, int ni) {
    const Node& n = g.nodes[static_cast<std::size_t>(ni)];
    Layer l;
    l.node = n.name;
    l.op = n.op_type;
    const Value& w = g.value(n.inputs[1]);
    if (!w.initializer || w.initializer->dtype() != DType::f32)
        return Status::error(ErrorCode::unsupported, "its weight is not a float32 constant");
    const Shape& ws = w.initializer->shape();
    if (l.op == "Conv") {
        if (attr<std::string>(n, "auto_pad", "NOTSET") != "NOTSET")
            return Status::error(ErrorCode::unsupported, "auto_pad is set");
        if (attr<std::int64_t>(n, "group", 1) != 1)
            return Status::error(ErrorCode::unsupported, "a grouped convolution");
        l.spatial = ws.rank() - 2;
        if (l.spatial < 1 || l.spatial > 2)
            return Status::error(ErrorCode::unsupported, "a ", l.spatial, "-D convolution");
        l.n_out = ws[0];
        const auto ints = [&](const char* name, std::int64_t dflt, std::size_t count) {
            std::vector<std::int64_t> v = attr<std::vector<std::int64_t>>(n, name, {});
            if (v.empty()) v.assign(count, dflt);
            return v;
        };
        const auto k = static_cast<std::size_t>(l.spatial);
        const auto strides = ints("strides", 1, k), dil = ints("dilations", 1, k);
        const auto pads = ints("pads", 0, 2 * k);
        if (strides.size() != k || dil.size() != k || pads.size() != 2 * k)
            return Status::error(ErrorCode::unsupported, "malformed attributes");
        for (std::size_t i = 0; i < k; ++i)
            if (pads[i] != pads[i + k])
                return Status::error(ErrorCode::unsupported, "asymmetric pads");
        if (l.spatial == 2) {
            l.kh = ws[2]; l.kw = ws[3];
            l.sh = strides[0]; l.sw = strides[1];
            l.dh = dil[0]; l.dw = dil[1];
            l.ph = pads[0]; l.pw = pads[1];
        } else {
            l.kw = ws[2]; l.sw = strides[0]; l.dw = dil[0]; l.pw = pads[0];
        }
        return l;
    }
    if (ws.rank() != 2) return Status::error(ErrorCode::unsupported, "a weight of rank ", ws.rank());
    if (l.op == "Gemm") {
        l.trans_b = attr<std::int64_t>(n, "transB", 0) != 0;
        l.alpha = attr<float>(n, "alpha", 1.0f);
        l.beta = attr<float>(n, "beta", 1.0f);
        if (l.alpha == 0.0) return Status::error(ErrorCode::unsupported, "alpha is 0");
    }
    l.n_out = l.trans_b ? ws[0] : ws[1];
    return l;
}

/// Where a layer's per-output bias lives in `g`: (node, input) of a constant with n_out
/// elements along its last axis read only there — a Conv's B, a Gemm's C, or the bias Add
/// after a MatMul — or (-1, -1).
std::pair<int, int> bias_site(const Graph& g, int ni, std::int64_t n_out) {
    const passes::GraphIndex index(g);
    const Node& n = g.nodes[static_cast<std::size_t>(ni)];
    const auto fits = [&](ValueId v) {
        const Tensor* t = index.constant(v);
        return t != nullptr && t->dtype() == DType::f32 && t->num_elements() == n_out &&
               t->shape().rank() >= 1 && t->shape()[t->shape().rank() - 1] == n_out &&
               index.sole_consumer(v) >= 0;
    };
    if (n.op_type == "Conv" || n.op_type == "Gemm") {
        if (n.inputs.size() > 2 && fits(n.inputs[2])) return {ni, 2};
        return {-1, -1};
    }
    const int add = index.sole_consumer(n.outputs[0]);
    if (add < 0) return {-1, -1};
    const Node& a = g.nodes[static_cast<std::size_t>(add)];
    if (a.op_type != "Add" || !(a.domain.empty() || a.domain == "ai.onnx") || a.inputs.size() != 2)
        return {-1, -1};
    const int other = a.inputs[0] == n.outputs[0] ? 1 : 0;
    if (fits(a.inputs[static_cast<std::size_t>(other)])) return {add, other};
    return {-1, -1};
}

StatusOr<RecoveredLayer> Driver::refit(const Graph& original, Graph& pruned,
                                       const std::string& node,
                                       const std::vector<std::int64_t>& kept_outputs,
                                       PruneRecovery method, InferenceEngine& e0) {
    RecoveredLayer rec;
    rec.node = node;
    const int i0 = node_index(original, node), i1 = node_index(pruned, node);
    if (i0 < 0 || i1 < 0) {
        rec.skipped = "not found in both models";
        return rec;
    }
    rec.op = pruned.nodes[static_cast<std::size_t>(i1)].op_type;
    StatusOr<Layer> l0s = layer_of(original, i0), l1s = layer_of(pruned, i1);
    if (!l0s.is_ok() || !l1s.is_ok()) {
        rec.skipped = std::string((!l0s.is_ok() ? l0s : l1s).status().message());
        return rec;
    }
    const Layer l0 = l0s.value(), l1 = l1s.value();
    const Node& n0 = original.nodes[static_cast<std::size_t>(i0)];
    Node& n1 = pruned.nodes[static_cast<std::size_t>(i1)];
    const std::string input = pruned.value(n1.inputs[0]).name;
    // The unpruned weights, of the outputs the layer keeps (its own channels may be pruned).
    MatrixD w0 = weights_of(l0, *original.value(n0.inputs[1]).initializer);
    const MatrixD w1 = weights_of(l1, *pruned.value(n1.inputs[1]).initializer);
    const Eigen::Index k1 = w1.rows(), n_out = w1.cols();
    std::vector<std::int64_t> outs = kept_outputs;
    if (outs.empty()) {
        outs.resize(static_cast<std::size_t>(w0.cols()));
        std::iota(outs.begin(), outs.end(), std::int64_t{0});
    }
    if (static_cast<Eigen::Index>(outs.size()) != n_out) {
        rec.skipped = "its outputs do not match the pruned layer's";
        return rec;
    }
    {
        MatrixD kept(w0.rows(), n_out);
        for (Eigen::Index j = 0; j < n_out; ++j) kept.col(j) = w0.col(outs[static_cast<std::size_t>(j)]);
        w0 = std::move(kept);
    }
    // Biases: the unpruned model's (part of the target) and the pruned model's site.
    const auto site0 = bias_site(original, i0, l0.n_out);
    const auto site1 = bias_site(pruned, i1, l1.n_out);
    Eigen::RowVectorXd b0 = Eigen::RowVectorXd::Zero(n_out);
    if (site0.first >= 0) {
        const Tensor& t = *original.value(original.nodes[static_cast<std::size_t>(site0.first)]
                                              .inputs[static_cast<std::size_t>(site0.second)])
                               .initializer;
        const double scale = l0.op == "Gemm" ? l0.beta : 1.0;
        for (Eigen::Index j = 0; j < n_out; ++j)
            b0(j) = scale * t.data_unchecked<float>()[outs[static_cast<std::size_t>(j)]];
    }
    // A Conv or Gemm without a bias gets one; a MatMul needs its bias Add.
    const bool with_bias = site1.first >= 0 || ((l1.op == "Conv" || (l1.op == "Gemm" && l1.beta != 0.0)) &&
                                                (n1.inputs.size() < 3 || n1.inputs[2] == kNoValue));
    rec.bias = with_bias;
    const Eigen::Index f = k1 + (with_bias ? 1 : 0);
    MatrixD gram = MatrixD::Zero(f, f), cross = MatrixD::Zero(f, n_out);
    double tt = 0.0;
    // Where the layer keeps its bias but cannot take a new one, the target excludes it.
    const bool bias_in_target = with_bias || site0.first >= 0;
    const Eigen::RowVectorXd fixed_bias = with_bias ? Eigen::RowVectorXd::Zero(n_out) : b0;

    EngineOptions eo = engine_options();
    eo.observed_values = {input};
    DSINFER_ASSIGN_OR_RETURN(InferenceEngine e1, compile(pruned, eo));
    Capture c0(input), c1(input);
    RunOptions r0, r1;
    r0.observer = &c0;
    r1.observer = &c1;
    for (const auto& batch : batches_) {
        std::vector<NamedTensor> outs;
        DSINFER_RETURN_IF_ERROR(e0.try_run(batch, outs, r0));
        DSINFER_RETURN_IF_ERROR(e1.try_run(batch, outs, r1));
        DSINFER_ASSIGN_OR_RETURN(Tensor x0, c0.take());
        DSINFER_ASSIGN_OR_RETURN(Tensor x1, c1.take());
        std::int64_t total = 0;
        if (l1.op == "Conv") {
            const Shape& s = x1.shape();
            const std::int64_t h = l1.spatial == 2 ? s[2] : 1, w = s[s.rank() - 1];
            const std::int64_t ho = (h + 2 * l1.ph - l1.dh * (l1.kh - 1) - 1) / l1.sh + 1;
            const std::int64_t wo = (w + 2 * l1.pw - l1.dw * (l1.kw - 1) - 1) / l1.sw + 1;
            total = s[0] * ho * wo;
        } else {
            total = x1.num_elements() / std::max<std::int64_t>(1, x1.shape()[x1.shape().rank() - 1]);
        }
        const std::vector<std::int64_t> rows = sample_rows(total, o_.max_rows_per_batch);
        for (std::size_t at = 0; at < rows.size(); at += 1024) {
            const std::vector<std::int64_t> chunk(rows.begin() + static_cast<std::ptrdiff_t>(at),
                                                  rows.begin() + static_cast<std::ptrdiff_t>(std::min(rows.size(), at + 1024)));
            const MatrixD f0 = features(l0, x0, chunk);
            if (f0.cols() != w0.rows())
                return Status::error(ErrorCode::internal, "prune: recovery of ", node,
                                     ": the unpruned input has ", f0.cols(), " features, its weight ",
                                     w0.rows());
            MatrixD t = f0 * w0;
            if (bias_in_target) t.rowwise() += b0;
            t.rowwise() -= fixed_bias;
            MatrixD phi(static_cast<Eigen::Index>(chunk.size()), f);
            phi.leftCols(k1) = features(l1, x1, chunk);
            if (with_bias) phi.col(k1).setOnes();
            gram.selfadjointView<Eigen::Lower>().rankUpdate(phi.transpose());
            cross.noalias() += phi.transpose() * t;
            tt += t.squaredNorm();
            rec.rows += static_cast<std::int64_t>(chunk.size());
        }
    }
    gram.triangularView<Eigen::StrictlyUpper>() = gram.transpose();
    rec.inputs = k1;
    // Before: the pruned weights (and the unpruned bias).
    MatrixD before(f, n_out);
    before.topRows(k1) = w1;
    if (with_bias) before.row(k1) = b0;
    const auto rel_error = [&](const MatrixD& z) {
        const double e = (z.transpose() * gram * z).trace() - 2.0 * (z.transpose() * cross).trace() + tt;
        return tt > 0 ? std::sqrt(std::max(0.0, e) / tt) : 0.0;
    };
    rec.error_before = rel_error(before);
    MatrixD after = before;
    if (method == PruneRecovery::bias) {
        if (with_bias && rec.rows > 0)
            after.row(k1) = (cross.row(k1) - gram.row(k1).head(k1) * w1) / static_cast<double>(rec.rows);
    } else {
        // lambda = ridge * (inputs / rows) * mean diag(Phi^T Phi): strong where the rows barely
        // outnumber the inputs (the fit would follow the calibration data's noise), fading as
        // data grows.
        double mean_diag = 0.0;
        for (Eigen::Index i = 0; i < k1; ++i) mean_diag += gram(i, i);
        mean_diag = k1 > 0 ? mean_diag / static_cast<double>(k1) : 0.0;
        const double lambda = std::max(o_.ridge * static_cast<double>(k1) /
                                           static_cast<double>(std::max<std::int64_t>(rec.rows, 1)) *
                                           mean_diag,
                                       1e-12);
        MatrixD a = gram, rhs = cross;
        for (Eigen::Index i = 0; i < k1; ++i) a(i, i) += lambda;
        rhs.topRows(k1) += lambda * w1;
        if (with_bias) a(k1, k1) += 1e-12 * std::max(1.0, static_cast<double>(rec.rows));
        Eigen::LDLT<MatrixD> ldlt(a);
        if (ldlt.info() == Eigen::Success) {
            MatrixD z = ldlt.solve(rhs);
            if (z.allFinite() && rel_error(z) <= rec.error_before) after = std::move(z);
        }
    }
    if (!after.allFinite() || !std::isfinite(tt) || !gram.allFinite()) {
        // NaN or infinity in the calibration activations: nothing trustworthy to fit.
        rec.skipped = "the calibration data gave non-finite activations at its input";
        rec.error_before = rec.error_after = 0.0;
        return rec;
    }
    rec.error_after = rel_error(after);
    // Write the recovered weights and bias into the pruned graph (new tensors: the graph's
    // tensors may be shared with the caller's copies).
    Value& wv = pruned.value(n1.inputs[1]);
    wv.initializer = stored_weights(l1, after.topRows(k1), *wv.initializer);
    if (with_bias) {
        std::vector<float> b(static_cast<std::size_t>(n_out));
        const double scale = l1.op == "Gemm" ? l1.beta : 1.0;
        for (Eigen::Index j = 0; j < n_out; ++j)
            b[static_cast<std::size_t>(j)] = static_cast<float>(after(k1, j) / scale);
        if (site1.first >= 0) {
            Value& bv = pruned.value(pruned.nodes[static_cast<std::size_t>(site1.first)]
                                         .inputs[static_cast<std::size_t>(site1.second)]);
            Tensor t = Tensor::empty(DType::f32, bv.initializer->shape());
            std::memcpy(t.raw_data(), b.data(), b.size() * sizeof(float));
            bv.initializer = std::move(t);
        } else {
            std::string name = node + "/recovered_bias";
            while (pruned.find_value(name).has_value()) name += "_";
            const ValueId id =
                pruned.add_initializer(name, Tensor::from_vector<float>({n_out}, b));
            n1.inputs.resize(3, kNoValue);
            n1.inputs[2] = id;
        }
    }
    return rec;
}

Status Driver::recover(const Graph& original, Graph& pruned, const PruneReport& pr,
                       PruneRecovery method, std::vector<RecoveredLayer>& out) {
    std::set<std::string> consumers;
    std::map<std::string, std::vector<std::int64_t>> kept_outputs;  // of pruned producers
    for (const PruneGroup& g : pr.groups) {
        if (g.kept_channels.empty()) continue;
        consumers.insert(g.consumers.begin(), g.consumers.end());
        for (const std::string& p : g.producers) kept_outputs[p] = g.kept_channels;
    }
    std::vector<std::string> order;  // graph order
    for (const Node& n : pruned.nodes)
        if (consumers.count(n.name) != 0) order.push_back(n.name);
    if (order.empty()) return Status::ok();
    // The unpruned model, compiled once, shows every consumer's input.
    EngineOptions eo = engine_options();
    for (const std::string& name : order) {
        const int i = node_index(original, name);
        if (i >= 0) eo.observed_values.push_back(original.value(original.nodes[static_cast<std::size_t>(i)].inputs[0]).name);
    }
    DSINFER_ASSIGN_OR_RETURN(InferenceEngine e0, compile(original, eo));
    for (std::size_t i = 0; i < order.size(); ++i) {
        const auto it = kept_outputs.find(order[i]);
        DSINFER_ASSIGN_OR_RETURN(
            RecoveredLayer rec,
            refit(original, pruned, order[i],
                  it == kept_outputs.end() ? std::vector<std::int64_t>{} : it->second, method, e0));
        out.push_back(std::move(rec));
        progress("recovery", i + 1, order.size());
    }
    return pruned.link();
}

/// Fraction of the weight layers' FLOPs (or of the parameters) removed.
double reduction(const PruneReport& r, PruneTargetKind kind) {
    if (kind == PruneTargetKind::params)
        return r.params_before > 0 ? 1.0 - static_cast<double>(r.params_after) /
                                               static_cast<double>(r.params_before)
                                   : 0.0;
    return r.flops_before > 0 ? 1.0 - r.flops_after / r.flops_before : 0.0;
}

double saved_by(const PruneReport& r, PruneTargetKind kind) {
    return kind == PruneTargetKind::params
               ? static_cast<double>(r.params_before - r.params_after)
               : r.flops_before - r.flops_after;
}

Status Driver::allocate(const Graph& original, PrunerReport& report, PruneOptions& chosen) {
    const PruneTargetKind kind = o_.target;
    PruneOptions base = o_.prune;
    base.global = false;
    base.ratio = 0.0;
    base.group_ratios.clear();
    Graph probe = original;
    DSINFER_ASSIGN_OR_RETURN(PruneReport dry, prune_channels(probe, base));
    std::vector<std::string> groups;
    for (const PruneGroup& g : dry.groups)
        if (g.intact_reason.empty() && !g.producers.empty()) groups.push_back(g.producers.front());
    DSINFER_CHECK(!groups.empty(), ErrorCode::invalid_argument,
                  "prune: the target needs prunable groups; this graph has none (see the report's "
                  "intact reasons)");
    const auto achieved = [&](const PruneOptions& po) -> StatusOr<double> {
        Graph g = original;
        DSINFER_ASSIGN_OR_RETURN(PruneReport r, prune_channels(g, po));
        return reduction(r, kind);
    };
    if (batches_.empty()) {
        // No data: one global threshold, the smallest ratio meeting the target (bisection).
        report.allocation = "global threshold (no calibration data)";
        PruneOptions po = base;
        po.global = true;
        double lo = 0.0, hi = 0.99;
        po.ratio = hi;
        DSINFER_ASSIGN_OR_RETURN(const double most, achieved(po));
        if (most < o_.target_fraction) {
            chosen = po;
            return Status::ok();
        }
        for (int it = 0; it < 24; ++it) {
            po.ratio = 0.5 * (lo + hi);
            DSINFER_ASSIGN_OR_RETURN(const double got, achieved(po));
            (got >= o_.target_fraction ? hi : lo) = po.ratio;
        }
        po.ratio = hi;
        chosen = po;
        return Status::ok();
    }
    // Sensitivity of each group alone at each level.
    report.allocation = "sensitivity";
    DSINFER_RETURN_IF_ERROR(reference(original));
    std::vector<double> levels = o_.sensitivity_levels;
    std::sort(levels.begin(), levels.end());
    const std::size_t steps = groups.size() * levels.size();
    std::size_t done = 0;
    for (const std::string& name : groups) {
        PruneSensitivity s;
        s.group = name;
        s.levels = levels;
        for (const double level : levels) {
            PruneOptions po = base;
            po.group_ratios = {{name, level}};
            Graph g = original;
            DSINFER_ASSIGN_OR_RETURN(PruneReport r, prune_channels(g, po));
            DSINFER_ASSIGN_OR_RETURN(const PruneFidelity fid, fidelity(g));
            s.loss.push_back(std::max(0.0, 1.0 - fid.cosine));
            s.saved.push_back(saved_by(r, kind));
            progress("sensitivity", ++done, steps);
        }
        report.sensitivity.push_back(std::move(s));
    }
    // Greedy: the step (a group to its next level) that loses least per unit saved, until the
    // real pruned model meets the target.
    std::vector<int> at(groups.size(), -1);
    const auto options_now = [&]() {
        PruneOptions po = base;
        for (std::size_t gi = 0; gi < groups.size(); ++gi)
            if (at[gi] >= 0) po.group_ratios.push_back({groups[gi], levels[static_cast<std::size_t>(at[gi])]});
        return po;
    };
    double total_saved = 0.0, needed = o_.target_fraction * (kind == PruneTargetKind::params
                                                                 ? static_cast<double>(dry.params_before)
                                                                 : dry.flops_before);
    for (;;) {
        std::size_t best = groups.size();
        double best_cost = 0.0;
        for (std::size_t gi = 0; gi < groups.size(); ++gi) {
            const PruneSensitivity& s = report.sensitivity[gi];
            const auto next = static_cast<std::size_t>(at[gi] + 1);
            if (next >= levels.size()) continue;
            const double loss0 = at[gi] < 0 ? 0.0 : s.loss[static_cast<std::size_t>(at[gi])];
            const double saved0 = at[gi] < 0 ? 0.0 : s.saved[static_cast<std::size_t>(at[gi])];
            const double gain = s.saved[next] - saved0;
            if (gain <= 0) continue;
            const double cost = std::max(0.0, s.loss[next] - loss0) / gain;
            if (best == groups.size() || cost < best_cost) {
                best = gi;
                best_cost = cost;
            }
        }
        if (best == groups.size()) break;  // every group at its last level
        const PruneSensitivity& s = report.sensitivity[best];
        total_saved -= at[best] < 0 ? 0.0 : s.saved[static_cast<std::size_t>(at[best])];
        ++at[best];
        total_saved += s.saved[static_cast<std::size_t>(at[best])];
        if (total_saved < needed) continue;
        DSINFER_ASSIGN_OR_RETURN(const double got, achieved(options_now()));
        if (got >= o_.target_fraction) break;
    }
    chosen = options_now();
    for (std::size_t gi = 0; gi < groups.size(); ++gi)
        report.sensitivity[gi].chosen = at[gi] < 0 ? 0.0 : levels[static_cast<std::size_t>(at[gi])];
    return Status::ok();
}

}  // namespace

Pruner::Pruner(PrunerOptions options) : options_(std::move(options)) {}

StatusOr<PrunerReport> Pruner::run(Graph& graph, CalibrationSource* data) const {
    const PrunerOptions& o = options_;
    const auto t0 = std::chrono::steady_clock::now();
    if (o.target != PruneTargetKind::none)
        DSINFER_CHECK(std::isfinite(o.target_fraction) && o.target_fraction > 0 && o.target_fraction < 1,
                      ErrorCode::invalid_argument,
                      "prune: the target fraction must be in (0, 1) (the share of FLOPs or "
                      "parameters removed), got ", o.target_fraction);
    for (const double l : o.sensitivity_levels)
        DSINFER_CHECK(std::isfinite(l) && l > 0 && l < 1, ErrorCode::invalid_argument,
                      "prune: sensitivity levels must be in (0, 1), got ", l);
    DSINFER_CHECK(o.target == PruneTargetKind::none || !o.sensitivity_levels.empty(),
                  ErrorCode::invalid_argument, "prune: a target needs sensitivity levels");
    DSINFER_CHECK(std::isfinite(o.ridge) && o.ridge >= 0, ErrorCode::invalid_argument,
                  "prune: ridge must be finite and >= 0, got ", o.ridge);
    DSINFER_CHECK(o.max_rows_per_batch >= 1, ErrorCode::invalid_argument,
                  "prune: max_rows_per_batch must be >= 1, got ", o.max_rows_per_batch);
    try {
        Batches batches;
        if (data != nullptr) {
            for (;;) {
                if (o.max_batches != 0 && batches.size() >= o.max_batches) break;
                std::vector<NamedTensor> b;
                DSINFER_ASSIGN_OR_RETURN(const bool more, data->next(b));
                if (!more) break;
                batches.push_back(std::move(b));
            }
            DSINFER_CHECK(!batches.empty(), ErrorCode::invalid_argument,
                          "prune: the calibration source gave no batch");
        }
        Graph original = graph;
        DSINFER_RETURN_IF_ERROR(original.link());
        DSINFER_RETURN_IF_ERROR(original.sort_topologically());
        Driver d(o, std::move(batches));
        PrunerReport report;
        PruneOptions po = o.prune;
        if (o.target != PruneTargetKind::none) {
            report.target = o.target;
            report.target_fraction = o.target_fraction;
            DSINFER_RETURN_IF_ERROR(d.allocate(original, report, po));
        }
        Graph g = original;
        DSINFER_ASSIGN_OR_RETURN(report.prune, prune_channels(g, po));
        if (o.target != PruneTargetKind::none)
            report.achieved_fraction = reduction(report.prune, o.target);
        if (data != nullptr) {
            DSINFER_RETURN_IF_ERROR(d.reference(original));
            DSINFER_ASSIGN_OR_RETURN(report.before_recovery, d.fidelity(g));
            report.after_recovery = report.before_recovery;
            if (o.recovery != PruneRecovery::none && report.prune.removed_channels > 0) {
                report.recovery = o.recovery;
                DSINFER_RETURN_IF_ERROR(d.recover(original, g, report.prune, o.recovery, report.recovered));
                DSINFER_ASSIGN_OR_RETURN(report.after_recovery, d.fidelity(g));
            }
        }
        report.evaluations = d.evaluations_;
        report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        graph = std::move(g);
        return report;
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "prune: out of memory");
    }
}

}  // namespace dsinfer
