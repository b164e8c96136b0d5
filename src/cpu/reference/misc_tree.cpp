// Reference ai.onnx.ml TreeEnsemble (opset 5): evaluates every tree per row, accumulates leaf
// weights per target and aggregates (sum, average, min, max), then post-transforms.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

StatusOr<std::vector<double>> tensor_attr_doubles(const Node& node, const char* name,
                                                  bool required) {
    std::vector<double> out;
    if (!node.has_attr(name)) {
        if (required)
            return Status::error(ErrorCode::invalid_model, "missing required attribute '", name,
                                 "'");
        return out;
    }
    DSINFER_ASSIGN_OR_RETURN(Tensor t, node.attr<Tensor>(name));
    DSINFER_RETURN_IF_ERROR(dispatch_types(t.dtype(), NumericTypes{}, [&]<class T>() -> Status {
        for (int64_t i = 0; i < t.num_elements(); ++i)
            out.push_back(static_cast<double>(load(t.data_unchecked<T>()[i])));
        return Status::ok();
    }));
    return out;
}

struct TreeNode {
    int mode = 0;
    int64_t feature = 0;
    double split = 0;
    bool true_leaf = false, false_leaf = false;
    int64_t true_id = 0, false_id = 0;
    bool missing_true = false;
    std::vector<double> members;
};

class TreeEnsembleKernel final : public Kernel {
public:
    TreeEnsembleKernel(std::vector<TreeNode> nodes, std::vector<int64_t> roots,
                       std::vector<int64_t> leaf_targets, std::vector<double> leaf_weights,
                       int64_t n_targets, int64_t aggregate, int64_t post)
        : nodes_(std::move(nodes)), roots_(std::move(roots)),
          leaf_targets_(std::move(leaf_targets)), leaf_weights_(std::move(leaf_weights)),
          n_targets_(n_targets), aggregate_(aggregate), post_(post) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(kFloatTypes.contains(x.dtype()), ErrorCode::unsupported, "element type ",
                      dtype_name(x.dtype()), " is not supported");
        DSINFER_CHECK(x.shape().rank() == 2, ErrorCode::invalid_argument,
                      "X must be [N, F], got ", x.shape().to_string());
        for (const auto& n : nodes_)
            DSINFER_CHECK(n.feature < x.shape()[1], ErrorCode::invalid_argument, "feature id ",
                          n.feature, " is outside the ", x.shape()[1], " features of X");
        ctx.set_output(0, x.dtype(), Shape{x.shape()[0], n_targets_});
        ctx.set_workspace(static_cast<std::size_t>(n_targets_) * (sizeof(double) + 1));
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int64_t rows = x.shape[0], feats = x.shape[1];
        auto* acc = static_cast<double*>(ctx.workspace());
        auto* hit = reinterpret_cast<bool*>(acc + n_targets_);
        return dispatch_types(x.dtype, FloatTypes{}, [&]<class T>() -> Status {
            const T* px = x.data_unchecked<T>();
            T* py = ctx.output(0).data_unchecked<T>();
            for (int64_t r = 0; r < rows; ++r) {
                std::fill(acc, acc + n_targets_, 0.0);
                std::fill(hit, hit + n_targets_, false);
                for (int64_t root : roots_) {
                    int64_t id = root;
                    // A tree has at most nodes_.size() levels; bound the walk against cycles.
                    for (std::size_t steps = 0;; ++steps) {
                        if (steps > nodes_.size())
                            return Status::error(ErrorCode::invalid_argument,
                                                 "tree walk does not terminate");
                        const TreeNode& n = nodes_[static_cast<std::size_t>(id)];
                        const double v = static_cast<double>(load(px[r * feats + n.feature]));
                        const bool cond = decide(n, v);
                        const bool leaf = cond ? n.true_leaf : n.false_leaf;
                        id = cond ? n.true_id : n.false_id;
                        if (leaf) break;
                    }
                    const auto li = static_cast<std::size_t>(id);
                    const int64_t t = leaf_targets_[li];
                    const double w = leaf_weights_[li];
                    switch (aggregate_) {
                        case 2: acc[t] = hit[t] ? std::min(acc[t], w) : w; break;
                        case 3: acc[t] = hit[t] ? std::max(acc[t], w) : w; break;
                        default: acc[t] += w; break;
                    }
                    hit[t] = true;
                }
                if (aggregate_ == 0 && !roots_.empty())
                    for (int64_t t = 0; t < n_targets_; ++t)
                        acc[t] /= static_cast<double>(roots_.size());
                post_transform(acc);
                for (int64_t t = 0; t < n_targets_; ++t)
                    py[r * n_targets_ + t] = store<T>(acc[t]);
            }
            return Status::ok();
        });
    }

private:
    static bool decide(const TreeNode& n, double v) noexcept {
        if (std::isnan(v) && n.missing_true) return true;
        switch (n.mode) {
            case 0: return v <= n.split;
            case 1: return v < n.split;
            case 2: return v >= n.split;
            case 3: return v > n.split;
            case 4: return v == n.split;
            case 5: return v != n.split;
            case 6:
                return std::find(n.members.begin(), n.members.end(), v) != n.members.end();
            default: return false;
        }
    }

    void post_transform(double* a) const noexcept {
        switch (post_) {
            case 1:
            case 3: {  // softmax (3: softmax with an implicit zero logit is approximated alike)
                double mx = -std::numeric_limits<double>::infinity();
                for (int64_t t = 0; t < n_targets_; ++t) mx = std::max(mx, a[t]);
                double s = 0;
                for (int64_t t = 0; t < n_targets_; ++t) s += (a[t] = std::exp(a[t] - mx));
                for (int64_t t = 0; t < n_targets_; ++t) a[t] /= s;
                break;
            }
            case 2:
                for (int64_t t = 0; t < n_targets_; ++t) a[t] = 1.0 / (1.0 + std::exp(-a[t]));
                break;
            case 4:
                for (int64_t t = 0; t < n_targets_; ++t)
                    a[t] = std::sqrt(2.0) * erfinv(2.0 * a[t] - 1.0);
                break;
            default: break;
        }
    }

    // Inverse error function by Newton iterations on std::erf.
    static double erfinv(double y) noexcept {
        if (y <= -1.0) return -std::numeric_limits<double>::infinity();
        if (y >= 1.0) return std::numeric_limits<double>::infinity();
        double x = 0.0;
        for (int i = 0; i < 60; ++i) {
            const double err = std::erf(x) - y;
            x -= err / (2.0 / std::sqrt(std::acos(-1.0)) * std::exp(-x * x));
        }
        return x;
    }

    std::vector<TreeNode> nodes_;
    std::vector<int64_t> roots_;
    std::vector<int64_t> leaf_targets_;
    std::vector<double> leaf_weights_;
    int64_t n_targets_, aggregate_, post_;
};

StatusOr<std::unique_ptr<Kernel>> make_tree_ensemble(const KernelCreateContext& ctx) {
    const Node& node = ctx.node();
    using Ints = std::vector<int64_t>;
    DSINFER_ASSIGN_OR_RETURN(Ints feat, node.attr<Ints>("nodes_featureids"));
    DSINFER_ASSIGN_OR_RETURN(Ints tids, node.attr<Ints>("nodes_truenodeids"));
    DSINFER_ASSIGN_OR_RETURN(Ints fids, node.attr<Ints>("nodes_falsenodeids"));
    DSINFER_ASSIGN_OR_RETURN(Ints tleaf, node.attr_or<Ints>("nodes_trueleafs", {}));
    DSINFER_ASSIGN_OR_RETURN(Ints fleaf, node.attr_or<Ints>("nodes_falseleafs", {}));
    DSINFER_ASSIGN_OR_RETURN(Ints miss, node.attr_or<Ints>("nodes_missing_value_tracks_true", {}));
    DSINFER_ASSIGN_OR_RETURN(Ints roots, node.attr<Ints>("tree_roots"));
    DSINFER_ASSIGN_OR_RETURN(Ints ltargets, node.attr<Ints>("leaf_targetids"));
    DSINFER_ASSIGN_OR_RETURN(const int64_t n_targets, node.attr<int64_t>("n_targets"));
    DSINFER_ASSIGN_OR_RETURN(const int64_t agg, node.attr_or<int64_t>("aggregate_function", 1));
    DSINFER_ASSIGN_OR_RETURN(const int64_t post, node.attr_or<int64_t>("post_transform", 0));
    DSINFER_ASSIGN_OR_RETURN(auto modes, tensor_attr_doubles(node, "nodes_modes", true));
    DSINFER_ASSIGN_OR_RETURN(auto splits, tensor_attr_doubles(node, "nodes_splits", true));
    DSINFER_ASSIGN_OR_RETURN(auto lweights, tensor_attr_doubles(node, "leaf_weights", true));
    DSINFER_ASSIGN_OR_RETURN(auto members, tensor_attr_doubles(node, "membership_values", false));
    const std::size_t n = feat.size();
    DSINFER_CHECK(tids.size() == n && fids.size() == n && modes.size() == n &&
                      splits.size() == n && (tleaf.empty() || tleaf.size() == n) &&
                      (fleaf.empty() || fleaf.size() == n) && (miss.empty() || miss.size() == n),
                  ErrorCode::invalid_model, "TreeEnsemble node attributes differ in length");
    DSINFER_CHECK(ltargets.size() == lweights.size(), ErrorCode::invalid_model,
                  "leaf_targetids and leaf_weights differ in length");
    DSINFER_CHECK(n_targets > 0, ErrorCode::invalid_model, "n_targets must be > 0");
    DSINFER_CHECK(agg >= 0 && agg <= 3 && post >= 0 && post <= 4, ErrorCode::invalid_model,
                  "aggregate_function/post_transform out of range");
    for (auto t : ltargets)
        DSINFER_CHECK(t >= 0 && t < n_targets, ErrorCode::invalid_model, "leaf target ", t,
                      " is outside [0, ", n_targets, ")");
    std::vector<TreeNode> nodes(n);
    std::size_t member_pos = 0;
    for (std::size_t i = 0; i < n; ++i) {
        TreeNode& t = nodes[i];
        t.mode = static_cast<int>(modes[i]);
        DSINFER_CHECK(t.mode >= 0 && t.mode <= 6, ErrorCode::invalid_model, "node mode ",
                      t.mode, " is not supported");
        DSINFER_CHECK(feat[i] >= 0, ErrorCode::invalid_model, "negative feature id");
        t.feature = feat[i];
        t.split = splits[i];
        t.true_leaf = !tleaf.empty() && tleaf[i] != 0;
        t.false_leaf = !fleaf.empty() && fleaf[i] != 0;
        t.true_id = tids[i];
        t.false_id = fids[i];
        t.missing_true = !miss.empty() && miss[i] != 0;
        const std::size_t tlim = t.true_leaf ? lweights.size() : n;
        const std::size_t flim = t.false_leaf ? lweights.size() : n;
        DSINFER_CHECK(t.true_id >= 0 && static_cast<std::size_t>(t.true_id) < tlim &&
                          t.false_id >= 0 && static_cast<std::size_t>(t.false_id) < flim,
                      ErrorCode::invalid_model, "node ", i, " points outside the tree");
        if (t.mode == 6) {
            // Sets are listed in node order, separated by NaN.
            while (member_pos < members.size() && !std::isnan(members[member_pos]))
                t.members.push_back(members[member_pos++]);
            ++member_pos;
        }
    }
    for (auto r : roots)
        DSINFER_CHECK(r >= 0 && static_cast<std::size_t>(r) < n, ErrorCode::invalid_model,
                      "tree root ", r, " is outside the nodes");
    return make_kernel<TreeEnsembleKernel>(std::move(nodes), std::move(roots),
                                           std::move(ltargets), std::move(lweights), n_targets,
                                           agg, post);
}

}  // namespace

void register_misc_tree_kernels(KernelRegistry& r) {
    r.add({"TreeEnsemble", "ai.onnx.ml", 5, kMaxOpset, DeviceKind::cpu}, &make_tree_ensemble);
}

}  // namespace dsinfer::detail
