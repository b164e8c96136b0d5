// Reference CPU kernel for TfIdfVectorizer (ai.onnx, opset 9): n-gram counts of int32/int64/string
// token rows against a pool of n-grams, weighted as TF, IDF or TF-IDF.
//
// The pool (pool_int64s or pool_strings) holds the 1-grams, then the 2-grams, ... starting at the
// offsets ngram_counts; the k-th pool n-gram counts into output column ngram_indexes[k]. Only
// sizes in [min_gram_length, max_gram_length] are looked up. n-grams are gathered with skip
// distance 1 .. max_skip_count + 1 (token i, i + d, i + 2d, ...); 1-grams are counted on the first
// pass only, as they do not depend on the skip distance.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {

void register_misc_text_kernels(KernelRegistry& r);

namespace {

using std::int64_t;

enum class TfIdfMode { tf, idf, tfidf };

/// Trie of the pool n-grams for one token type K (int64_t or std::string): node 0 is the root;
/// a node whose path is a pool n-gram of a looked-up size holds its output column.
template <class K>
struct NgramTrie {
    struct Node {
        std::map<K, std::int32_t> next;
        int64_t column = -1;
    };
    std::vector<Node> nodes{Node{}};

    void insert(const K* gram, int64_t n, int64_t column) {
        std::size_t at = 0;
        for (int64_t i = 0; i < n; ++i) {
            auto it = nodes[at].next.find(gram[i]);
            if (it == nodes[at].next.end()) {
                nodes.emplace_back();
                it = nodes[at]
                         .next.emplace(gram[i], static_cast<std::int32_t>(nodes.size() - 1))
                         .first;
            }
            at = static_cast<std::size_t>(it->second);
        }
        if (nodes[at].column < 0) nodes[at].column = column;
    }
};

struct TfIdfConfig {
    int64_t min_n = 1, max_n = 1, max_skip = 0, out_size = 0;
    TfIdfMode mode = TfIdfMode::tf;
    std::vector<float> weights;  // per output column; empty = 1
    bool strings = false;
    NgramTrie<int64_t> int_trie;
    NgramTrie<std::string> str_trie;
};

class TfIdfKernel final : public Kernel {
public:
    explicit TfIdfKernel(TfIdfConfig c) : c_(std::move(c)) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const bool ok_type = c_.strings ? x.dtype() == DType::string
                                        : (x.dtype() == DType::i32 || x.dtype() == DType::i64);
        DSINFER_CHECK(ok_type, ErrorCode::invalid_argument, "input X has element type ",
                      dtype_name(x.dtype()), ", expected ",
                      c_.strings ? "string (pool_strings)" : "int32 or int64 (pool_int64s)");
        DSINFER_CHECK(x.num_dims() <= 2, ErrorCode::invalid_argument,
                      "input X must be [C] or [N, C], got ", x.shape().to_string());
        if (x.num_dims() == 2)
            ctx.set_output(0, DType::f32, Shape{x.shape()[0], c_.out_size});
        else
            ctx.set_output(0, DType::f32, Shape{c_.out_size});
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const int64_t rows = x.shape.rank() == 2 ? x.shape[0] : 1;
        const int64_t cols = x.shape.rank() == 0 ? 1 : x.shape[x.shape.rank() - 1];
        float* y = ctx.output(0).data_unchecked<float>();
        std::fill(y, y + rows * c_.out_size, 0.f);
        for (int64_t r = 0; r < rows; ++r) {
            float* out = y + r * c_.out_size;
            if (c_.strings) {
                const std::string* row = x.data_unchecked<std::string>() + r * cols;
                count_row(
                    c_.str_trie, [&](int64_t i) -> const std::string& { return row[i]; }, cols,
                    out);
            } else if (x.dtype == DType::i32) {
                const std::int32_t* row = x.data_unchecked<std::int32_t>() + r * cols;
                count_row(
                    c_.int_trie, [&](int64_t i) { return int64_t{row[i]}; }, cols, out);
            } else {
                const int64_t* row = x.data_unchecked<int64_t>() + r * cols;
                count_row(
                    c_.int_trie, [&](int64_t i) { return row[i]; }, cols, out);
            }
            weigh(out);
        }
        return Status::ok();
    }

private:
    template <class K, class Get>
    void count_row(const NgramTrie<K>& trie, Get&& token, int64_t cols, float* out) const noexcept {
        int64_t first_n = c_.min_n;
        for (int64_t skip = 1; skip <= c_.max_skip + 1; ++skip) {
            for (int64_t start = 0; start < cols; ++start) {
                std::size_t at = 0;
                for (int64_t n = 1; n <= c_.max_n; ++n) {
                    const int64_t pos = start + (n - 1) * skip;
                    if (pos >= cols) break;
                    const auto& next = trie.nodes[at].next;
                    auto it = next.find(token(pos));
                    if (it == next.end()) break;
                    at = static_cast<std::size_t>(it->second);
                    const int64_t col = trie.nodes[at].column;
                    if (n >= first_n && col >= 0) out[col] += 1.f;
                }
            }
            if (first_n == 1) first_n = 2;  // 1-grams do not depend on the skip distance
            if (first_n > c_.max_n) break;
        }
    }

    void weigh(float* out) const noexcept {
        for (int64_t i = 0; i < c_.out_size; ++i) {
            const float w = c_.weights.empty() ? 1.f : c_.weights[static_cast<std::size_t>(i)];
            switch (c_.mode) {
                case TfIdfMode::tf: break;
                case TfIdfMode::idf: out[i] = out[i] > 0.f ? w : 0.f; break;
                case TfIdfMode::tfidf: out[i] *= w; break;
            }
        }
    }

    TfIdfConfig c_;
};

template <class K>
Status fill_trie(const std::vector<K>& pool, const std::vector<int64_t>& counts,
                 const std::vector<int64_t>& indexes, TfIdfConfig& c, NgramTrie<K>& trie) {
    const auto total = static_cast<int64_t>(pool.size());
    int64_t k = 0;  // n-gram number across all sizes (index into ngram_indexes)
    for (std::size_t s = 0; s < counts.size(); ++s) {
        const int64_t n = static_cast<int64_t>(s) + 1;
        const int64_t begin = counts[s];
        const int64_t end = s + 1 < counts.size() ? counts[s + 1] : total;
        DSINFER_CHECK(begin >= 0 && begin <= end && end <= total && (end - begin) % n == 0,
                      ErrorCode::invalid_model, "ngram_counts entry ", s, " (", begin,
                      ") does not split the pool of ", total, " items into ", n, "-grams");
        for (int64_t g = begin; g < end; g += n, ++k) {
            DSINFER_CHECK(k < static_cast<int64_t>(indexes.size()), ErrorCode::invalid_model,
                          "ngram_indexes has fewer entries than the pool has n-grams");
            if (n < c.min_n || n > c.max_n) continue;
            trie.insert(pool.data() + g, n, indexes[static_cast<std::size_t>(k)]);
        }
    }
    return Status::ok();
}

StatusOr<std::unique_ptr<Kernel>> make_tfidf(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    TfIdfConfig c;
    DSINFER_ASSIGN_OR_RETURN(c.min_n, n.attr<int64_t>("min_gram_length"));
    DSINFER_ASSIGN_OR_RETURN(c.max_n, n.attr<int64_t>("max_gram_length"));
    DSINFER_ASSIGN_OR_RETURN(c.max_skip, n.attr<int64_t>("max_skip_count"));
    DSINFER_CHECK(c.min_n >= 1 && c.min_n <= c.max_n && c.max_skip >= 0 && c.max_n <= 1024,
                  ErrorCode::invalid_model, "invalid gram lengths [", c.min_n, ", ", c.max_n,
                  "] or max_skip_count ", c.max_skip);
    DSINFER_ASSIGN_OR_RETURN(std::string mode, n.attr<std::string>("mode"));
    if (mode == "TF")
        c.mode = TfIdfMode::tf;
    else if (mode == "IDF")
        c.mode = TfIdfMode::idf;
    else if (mode == "TFIDF")
        c.mode = TfIdfMode::tfidf;
    else
        return Status::error(ErrorCode::invalid_model,
                             "attribute 'mode' must be TF, IDF or TFIDF, "
                             "got '",
                             mode, "'");
    DSINFER_ASSIGN_OR_RETURN(auto counts, n.attr<std::vector<int64_t>>("ngram_counts"));
    DSINFER_ASSIGN_OR_RETURN(auto indexes, n.attr<std::vector<int64_t>>("ngram_indexes"));
    DSINFER_CHECK(!indexes.empty(), ErrorCode::invalid_model, "ngram_indexes is empty");
    for (auto i : indexes)
        DSINFER_CHECK(i >= 0 && i < (int64_t{1} << 31), ErrorCode::invalid_model,
                      "ngram_indexes entry ", i, " is out of range");
    c.out_size = *std::max_element(indexes.begin(), indexes.end()) + 1;
    DSINFER_ASSIGN_OR_RETURN(c.weights, n.attr_or<std::vector<float>>("weights", {}));
    DSINFER_CHECK(c.weights.empty() || static_cast<int64_t>(c.weights.size()) >= c.out_size,
                  ErrorCode::invalid_model, "weights has ", c.weights.size(), " entries for ",
                  c.out_size, " outputs");
    c.strings = n.has_attr("pool_strings");
    if (c.strings) {
        DSINFER_ASSIGN_OR_RETURN(auto pool, n.attr<std::vector<std::string>>("pool_strings"));
        DSINFER_RETURN_IF_ERROR(fill_trie(pool, counts, indexes, c, c.str_trie));
    } else {
        DSINFER_ASSIGN_OR_RETURN(auto pool, n.attr<std::vector<int64_t>>("pool_int64s"));
        DSINFER_RETURN_IF_ERROR(fill_trie(pool, counts, indexes, c, c.int_trie));
    }
    return make_kernel<TfIdfKernel>(std::move(c));
}

}  // namespace

void register_misc_text_kernels(KernelRegistry& r) {
    r.add({"TfIdfVectorizer", "", 9, kMaxOpset, DeviceKind::cpu}, &make_tfidf);
}

}  // namespace dsinfer::detail
