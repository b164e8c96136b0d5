// Reference string kernels (StringNormalizer, StringSplit, StringConcat, RegexFullMatch) and
// ai.onnx.ml kernels (LabelEncoder, Binarizer, ArrayFeatureExtractor). String outputs assign
// into the preallocated std::string elements (which may allocate: unavoidable for strings).
#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ops/kernel_utils.hpp"

namespace dsinfer::detail {
namespace {

using std::int64_t;

std::string ascii_lower(std::string s) {
    for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
}
std::string ascii_upper(std::string s) {
    for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return s;
}

Status check_string_input(const Tensor& t, const char* what) {
    DSINFER_CHECK(t.dtype() == DType::string, ErrorCode::unsupported, what,
                  " must be a string tensor, got ", dtype_name(t.dtype()));
    return Status::ok();
}

// ---- StringNormalizer -------------------------------------------------------------------------

class StringNormalizerKernel final : public Kernel {
public:
    enum class Case { none, lower, upper };

    StringNormalizerKernel(Case mode, bool case_sensitive, std::vector<std::string> stop)
        : mode_(mode), case_sensitive_(case_sensitive), stop_(std::move(stop)) {
        if (!case_sensitive_)
            for (auto& s : stop_) s = ascii_lower(s);
    }

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(check_string_input(x, "input"));
        const Shape& s = x.shape();
        DSINFER_CHECK(s.rank() == 1 || (s.rank() == 2 && s[0] == 1),
                      ErrorCode::invalid_argument, "input must be [C] or [1, C], got ",
                      s.to_string());
        if (!ctx.has_data(0)) return Status::ok();
        int64_t kept = 0;
        for (int64_t i = 0; i < x.num_elements(); ++i)
            if (!is_stopword(x.data_unchecked<std::string>()[i])) ++kept;
        // All filtered out: a single empty string.
        const int64_t n = std::max<int64_t>(kept, 1);
        ctx.set_output(0, DType::string, s.rank() == 1 ? Shape{n} : Shape{1, n});
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const std::string* px = x.data_unchecked<std::string>();
        std::string* py = y.data_unchecked<std::string>();
        try {
            int64_t o = 0;
            for (int64_t i = 0; i < x.num_elements(); ++i) {
                if (is_stopword(px[i])) continue;
                if (o >= y.num_elements()) break;
                py[o++] = mode_ == Case::lower   ? ascii_lower(px[i])
                          : mode_ == Case::upper ? ascii_upper(px[i])
                                                 : px[i];
            }
            if (o == 0 && y.num_elements() > 0) py[0].clear();
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory");
        }
        return Status::ok();
    }

private:
    bool is_stopword(const std::string& s) const {
        if (stop_.empty()) return false;
        const std::string key = case_sensitive_ ? s : ascii_lower(s);
        return std::find(stop_.begin(), stop_.end(), key) != stop_.end();
    }

    Case mode_;
    bool case_sensitive_;
    std::vector<std::string> stop_;
};

StatusOr<std::unique_ptr<Kernel>> make_string_normalizer(const KernelCreateContext& ctx) {
    const Node& node = ctx.node();
    DSINFER_ASSIGN_OR_RETURN(auto action,
                             node.attr_or<std::string>("case_change_action", "NONE"));
    DSINFER_ASSIGN_OR_RETURN(const int64_t cs, node.attr_or<int64_t>("is_case_sensitive", 0));
    DSINFER_ASSIGN_OR_RETURN(auto stop, node.attr_or<std::vector<std::string>>("stopwords", {}));
    StringNormalizerKernel::Case mode;
    if (action == "NONE") mode = StringNormalizerKernel::Case::none;
    else if (action == "LOWER") mode = StringNormalizerKernel::Case::lower;
    else if (action == "UPPER") mode = StringNormalizerKernel::Case::upper;
    else
        return Status::error(ErrorCode::invalid_model,
                             "case_change_action must be NONE, LOWER or UPPER, got '", action,
                             "'");
    return make_kernel<StringNormalizerKernel>(mode, cs != 0, std::move(stop));
}

// ---- StringSplit ------------------------------------------------------------------------------

bool is_py_space(char c) {
    const auto u = static_cast<unsigned char>(c);
    return u == ' ' || (u >= 0x09 && u <= 0x0d) || (u >= 0x1c && u <= 0x1f);
}

// Python str.split semantics. Calls emit(piece) per piece; returns the number of pieces.
template <class F>
int64_t py_split(std::string_view s, const std::string& delim, int64_t maxsplit, F&& emit) {
    int64_t count = 0;
    if (delim.empty()) {
        std::size_t i = 0;
        int64_t splits = 0;
        while (true) {
            while (i < s.size() && is_py_space(s[i])) ++i;
            if (i >= s.size()) break;
            if (maxsplit >= 0 && splits >= maxsplit) {
                emit(s.substr(i));
                ++count;
                break;
            }
            std::size_t j = i;
            while (j < s.size() && !is_py_space(s[j])) ++j;
            emit(s.substr(i, j - i));
            ++count;
            ++splits;
            i = j;
        }
        return count;
    }
    std::size_t start = 0;
    int64_t splits = 0;
    while (true) {
        const std::size_t p =
            (maxsplit >= 0 && splits >= maxsplit) ? std::string_view::npos
                                                  : s.find(delim, start);
        if (p == std::string_view::npos) {
            emit(s.substr(start));
            return count + 1;
        }
        emit(s.substr(start, p - start));
        ++count;
        ++splits;
        start = p + delim.size();
    }
}

class StringSplitKernel final : public Kernel {
public:
    StringSplitKernel(std::string delim, int64_t maxsplit)
        : delim_(std::move(delim)), maxsplit_(maxsplit) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_RETURN_IF_ERROR(check_string_input(x, "input"));
        DSINFER_CHECK(x.shape().rank() < kMaxRank, ErrorCode::unsupported, "input rank ",
                      x.shape().rank(), " is too large");
        ctx.set_output(1, DType::i64, x.shape());
        if (!ctx.has_data(0)) return Status::ok();
        int64_t most = 0;
        for (int64_t i = 0; i < x.num_elements(); ++i)
            most = std::max(most, py_split(x.data_unchecked<std::string>()[i], delim_, maxsplit_,
                                           [](std::string_view) {}));
        Shape out = x.shape();
        out.push_back(most);
        ctx.set_output(0, DType::string, out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const std::string* px = x.data_unchecked<std::string>();
        std::string* py = y.data_unchecked<std::string>();
        int64_t* pn = ctx.has_output(1) ? ctx.output(1).data_unchecked<int64_t>() : nullptr;
        const int64_t width = y.shape[y.shape.rank() - 1];
        try {
            for (int64_t i = 0; i < x.num_elements(); ++i) {
                int64_t k = 0;
                const int64_t n = py_split(px[i], delim_, maxsplit_, [&](std::string_view p) {
                    if (k < width) py[i * width + k].assign(p);
                    ++k;
                });
                for (int64_t j = n; j < width; ++j) py[i * width + j].clear();
                if (pn != nullptr) pn[i] = n;
            }
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory");
        }
        return Status::ok();
    }

private:
    std::string delim_;
    int64_t maxsplit_;
};

StatusOr<std::unique_ptr<Kernel>> make_string_split(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(auto delim, ctx.node().attr_or<std::string>("delimiter", ""));
    DSINFER_ASSIGN_OR_RETURN(const int64_t maxsplit, ctx.node().attr_or<int64_t>("maxsplit", -1));
    return make_kernel<StringSplitKernel>(std::move(delim), maxsplit);
}

// ---- StringConcat -----------------------------------------------------------------------------

class StringConcatKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(check_string_input(ctx.input(0), "X"));
        DSINFER_RETURN_IF_ERROR(check_string_input(ctx.input(1), "Y"));
        DSINFER_ASSIGN_OR_RETURN(const Shape out,
                                 broadcast_shapes(ctx.input(0).shape(), ctx.input(1).shape()));
        ctx.set_output(0, DType::string, out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        const TensorView& b = ctx.input(1);
        const TensorView& y = ctx.output(0);
        const std::array<Strides, 2> st{broadcast_strides(a.shape, y.shape),
                                        broadcast_strides(b.shape, y.shape)};
        const std::string* pa = a.data_unchecked<std::string>();
        const std::string* pb = b.data_unchecked<std::string>();
        std::string* py = y.data_unchecked<std::string>();
        int64_t i = 0;
        try {
            for_each_offset(y.shape, st, [&](const std::array<int64_t, 2>& off) {
                py[i].assign(pa[off[0]]);
                py[i].append(pb[off[1]]);
                ++i;
            });
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory");
        }
        return Status::ok();
    }
};

StatusOr<std::unique_ptr<Kernel>> make_string_concat(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    return make_kernel<StringConcatKernel>();
}

// ---- RegexFullMatch ---------------------------------------------------------------------------

class RegexFullMatchKernel final : public Kernel {
public:
    explicit RegexFullMatchKernel(std::regex re) : re_(std::move(re)) {}

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(check_string_input(ctx.input(0), "X"));
        ctx.set_output(0, DType::boolean, ctx.input(0).shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const std::string* px = x.data_unchecked<std::string>();
        bool* py = ctx.output(0).data_unchecked<bool>();
        try {
            for (int64_t i = 0; i < x.num_elements(); ++i) py[i] = std::regex_match(px[i], re_);
        } catch (const std::exception& e) {
            return Status::error(ErrorCode::resource_exhausted, "regex evaluation failed: ",
                                 e.what());
        }
        return Status::ok();
    }

private:
    std::regex re_;
};

StatusOr<std::unique_ptr<Kernel>> make_regex_full_match(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(auto pattern, ctx.node().attr<std::string>("pattern"));
    try {
        // ECMAScript covers the RE2 subset used in practice (\w, \b, classes, alternation).
        return make_kernel<RegexFullMatchKernel>(std::regex(pattern, std::regex::ECMAScript));
    } catch (const std::regex_error& e) {
        // RE2 syntax that std::regex lacks ((?i), \p{..}, ...) lands here too.
        return Status::error(ErrorCode::unsupported, "attribute 'pattern' '", pattern,
                             "' is not a regular expression this build supports: ", e.what());
    }
}

// ---- ai.onnx.ml: LabelEncoder -----------------------------------------------------------------

class LabelEncoderKernel final : public Kernel {
public:
    LabelEncoderKernel(bool string_keys, std::unordered_map<std::string, int64_t> skeys,
                       std::map<double, int64_t> nkeys, Tensor values, Tensor fallback)
        : string_keys_(string_keys), skeys_(std::move(skeys)), nkeys_(std::move(nkeys)),
          values_(std::move(values)), default_(std::move(fallback)) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        if (string_keys_) {
            DSINFER_CHECK(x.dtype() == DType::string, ErrorCode::invalid_argument,
                          "keys are strings but the input is ", dtype_name(x.dtype()));
        } else {
            DSINFER_CHECK(kNumericTypes.contains(x.dtype()), ErrorCode::invalid_argument,
                          "keys are numeric but the input is ", dtype_name(x.dtype()));
        }
        ctx.set_output(0, values_.dtype(), x.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& y = ctx.output(0);
        const int64_t n = x.num_elements();
        return dispatch_types(y.dtype, AllTypes{}, [&]<class V>() -> Status {
            const V* vals = values_.data_unchecked<V>();
            const V& dflt = *default_.data_unchecked<V>();
            V* py = y.data_unchecked<V>();
            try {
                if (string_keys_) {
                    const std::string* px = x.data_unchecked<std::string>();
                    for (int64_t i = 0; i < n; ++i) {
                        auto it = skeys_.find(px[i]);
                        py[i] = it == skeys_.end() ? dflt : vals[it->second];
                    }
                    return Status::ok();
                }
                return dispatch_types(x.dtype, NumericTypes{}, [&]<class K>() -> Status {
                    const K* px = x.data_unchecked<K>();
                    for (int64_t i = 0; i < n; ++i) {
                        auto it = nkeys_.find(static_cast<double>(load(px[i])));
                        py[i] = it == nkeys_.end() ? dflt : vals[it->second];
                    }
                    return Status::ok();
                });
            } catch (const std::bad_alloc&) {
                return Status(ErrorCode::resource_exhausted, "out of memory");
            }
        });
    }

private:
    bool string_keys_;
    std::unordered_map<std::string, int64_t> skeys_;
    std::map<double, int64_t> nkeys_;
    Tensor values_;
    Tensor default_;
};

StatusOr<std::unique_ptr<Kernel>> make_label_encoder(const KernelCreateContext& ctx) {
    const Node& node = ctx.node();
    // Keys.
    bool string_keys = false;
    std::vector<std::string> skeys;
    std::vector<double> nkeys;
    if (node.has_attr("keys_strings")) {
        DSINFER_ASSIGN_OR_RETURN(skeys, node.attr<std::vector<std::string>>("keys_strings"));
        string_keys = true;
    } else if (node.has_attr("keys_int64s")) {
        DSINFER_ASSIGN_OR_RETURN(auto v, node.attr<std::vector<int64_t>>("keys_int64s"));
        for (auto k : v) nkeys.push_back(static_cast<double>(k));
    } else if (node.has_attr("keys_floats")) {
        DSINFER_ASSIGN_OR_RETURN(auto v, node.attr<std::vector<float>>("keys_floats"));
        for (auto k : v) nkeys.push_back(static_cast<double>(k));
    } else if (node.has_attr("keys_tensor")) {
        DSINFER_ASSIGN_OR_RETURN(Tensor t, node.attr<Tensor>("keys_tensor"));
        if (t.dtype() == DType::string) {
            string_keys = true;
            for (int64_t i = 0; i < t.num_elements(); ++i)
                skeys.push_back(t.data_unchecked<std::string>()[i]);
        } else {
            DSINFER_RETURN_IF_ERROR(
                dispatch_types(t.dtype(), NumericTypes{}, [&]<class T>() -> Status {
                    for (int64_t i = 0; i < t.num_elements(); ++i)
                        nkeys.push_back(static_cast<double>(load(t.data_unchecked<T>()[i])));
                    return Status::ok();
                }));
        }
    } else {
        return Status::error(ErrorCode::invalid_model, "LabelEncoder needs a keys_* attribute");
    }
    // Values.
    Tensor values;
    if (node.has_attr("values_strings")) {
        DSINFER_ASSIGN_OR_RETURN(auto v, node.attr<std::vector<std::string>>("values_strings"));
        values = Tensor::from_vector<std::string>(Shape{static_cast<int64_t>(v.size())}, v);
    } else if (node.has_attr("values_int64s")) {
        DSINFER_ASSIGN_OR_RETURN(auto v, node.attr<std::vector<int64_t>>("values_int64s"));
        values = Tensor::from_vector<int64_t>(Shape{static_cast<int64_t>(v.size())}, v);
    } else if (node.has_attr("values_floats")) {
        DSINFER_ASSIGN_OR_RETURN(auto v, node.attr<std::vector<float>>("values_floats"));
        values = Tensor::from_vector<float>(Shape{static_cast<int64_t>(v.size())}, v);
    } else if (node.has_attr("values_tensor")) {
        DSINFER_ASSIGN_OR_RETURN(values, node.attr<Tensor>("values_tensor"));
    } else {
        return Status::error(ErrorCode::invalid_model,
                             "LabelEncoder needs a values_* attribute");
    }
    const auto nk = static_cast<int64_t>(string_keys ? skeys.size() : nkeys.size());
    DSINFER_CHECK(values.num_elements() == nk, ErrorCode::invalid_model, "LabelEncoder has ",
                  nk, " keys but ", values.num_elements(), " values");
    // Default.
    Tensor fallback;
    if (node.has_attr("default_tensor")) {
        DSINFER_ASSIGN_OR_RETURN(fallback, node.attr<Tensor>("default_tensor"));
        DSINFER_CHECK(fallback.dtype() == values.dtype() && fallback.num_elements() == 1,
                      ErrorCode::invalid_model,
                      "default_tensor must hold one value of the values' type");
    } else if (values.dtype() == DType::string) {
        DSINFER_ASSIGN_OR_RETURN(auto d, node.attr_or<std::string>("default_string", "_Unused"));
        fallback = Tensor::scalar<std::string>(d);
    } else if (values.dtype() == DType::i64 && node.has_attr("default_int64")) {
        DSINFER_ASSIGN_OR_RETURN(auto d, node.attr<int64_t>("default_int64"));
        fallback = Tensor::scalar<int64_t>(d);
    } else if (values.dtype() == DType::f32 && node.has_attr("default_float")) {
        DSINFER_ASSIGN_OR_RETURN(auto d, node.attr<float>("default_float"));
        fallback = Tensor::scalar<float>(d);
    } else {
        const bool fl = is_floating(values.dtype());
        fallback = Tensor::empty(values.dtype(), Shape{});
        DSINFER_RETURN_IF_ERROR(
            dispatch_types(values.dtype(), PodTypes{}, [&]<class T>() -> Status {
                *fallback.data_unchecked<T>() = fl ? store<T>(-0.0f) : store<T>(-1);
                return Status::ok();
            }));
    }
    std::unordered_map<std::string, int64_t> smap;
    std::map<double, int64_t> nmap;
    // The first occurrence of a duplicated key wins.
    for (int64_t i = 0; i < nk; ++i) {
        if (string_keys) smap.emplace(skeys[static_cast<std::size_t>(i)], i);
        else nmap.emplace(nkeys[static_cast<std::size_t>(i)], i);
    }
    return make_kernel<LabelEncoderKernel>(string_keys, std::move(smap), std::move(nmap),
                                           std::move(values), std::move(fallback));
}

// ---- ai.onnx.ml: Binarizer --------------------------------------------------------------------

class BinarizerKernel final : public Kernel {
public:
    explicit BinarizerKernel(float threshold) : threshold_(threshold) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        DSINFER_CHECK(kNumericTypes.contains(x.dtype()), ErrorCode::unsupported,
                      "element type ", dtype_name(x.dtype()), " is not supported");
        ctx.set_output(0, x.dtype(), x.shape());
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        return dispatch_types(x.dtype, NumericTypes{}, [&]<class T>() -> Status {
            const T* px = x.data_unchecked<T>();
            T* py = ctx.output(0).data_unchecked<T>();
            for (int64_t i = 0; i < x.num_elements(); ++i) {
                const double v = static_cast<double>(load(px[i]));
                // NaN stays NaN (the comparison is false for it).
                py[i] = v != v ? px[i] : store<T>(v > threshold_ ? 1 : 0);
            }
            return Status::ok();
        });
    }

private:
    float threshold_;
};

StatusOr<std::unique_ptr<Kernel>> make_binarizer(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(const float t, ctx.node().attr_or<float>("threshold", 0.0f));
    return make_kernel<BinarizerKernel>(t);
}

// ---- ai.onnx.ml: ArrayFeatureExtractor --------------------------------------------------------

class ArrayFeatureExtractorKernel final : public Kernel {
public:
    Status prepare(PrepareContext& ctx) const override {
        const Tensor& x = ctx.input(0);
        const Tensor& ind = ctx.input(1);
        DSINFER_CHECK(ind.dtype() == DType::i64, ErrorCode::unsupported,
                      "Y must be int64, got ", dtype_name(ind.dtype()));
        DSINFER_CHECK(x.shape().rank() >= 1, ErrorCode::invalid_argument,
                      "X must have rank >= 1");
        Shape out;
        if (x.shape().rank() == 1) {
            out = Shape{1, ind.num_elements()};
        } else {
            out = x.shape();
            out[out.rank() - 1] = ind.num_elements();
        }
        ctx.set_output(0, x.dtype(), out);
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& ind = ctx.input(1);
        const int64_t last = x.shape[x.shape.rank() - 1];
        const int64_t outer = x.num_elements() / std::max<int64_t>(last, 1);
        const int64_t k = ind.num_elements();
        const int64_t* pi = ind.data_unchecked<int64_t>();
        for (int64_t j = 0; j < k; ++j)
            if (pi[j] < 0 || pi[j] >= last)
                return Status::error(ErrorCode::invalid_argument, "index ", pi[j],
                                     " is outside [0, ", last, ")");
        return dispatch_types(x.dtype, AllTypes{}, [&]<class T>() -> Status {
            const T* px = x.data_unchecked<T>();
            T* py = ctx.output(0).data_unchecked<T>();
            try {
                for (int64_t o = 0; o < (last == 0 ? 0 : outer); ++o)
                    for (int64_t j = 0; j < k; ++j) py[o * k + j] = px[o * last + pi[j]];
            } catch (const std::bad_alloc&) {
                return Status(ErrorCode::resource_exhausted, "out of memory");
            }
            return Status::ok();
        });
    }
};

StatusOr<std::unique_ptr<Kernel>> make_array_feature_extractor(const KernelCreateContext& ctx) {
    DSINFER_RETURN_IF_ERROR(require_inputs(ctx, 2));
    return make_kernel<ArrayFeatureExtractorKernel>();
}

}  // namespace

void register_misc_string_kernels(KernelRegistry& r) {
    constexpr auto cpu = DeviceKind::cpu;
    r.add({"StringNormalizer", "", 10, kMaxOpset, cpu}, &make_string_normalizer);
    r.add({"StringSplit", "", 20, kMaxOpset, cpu}, &make_string_split);
    r.add({"StringConcat", "", 20, kMaxOpset, cpu}, &make_string_concat);
    r.add({"RegexFullMatch", "", 20, kMaxOpset, cpu}, &make_regex_full_match);
    // LabelEncoder-1 (classes_strings) is not implemented; 2 added keys_*/values_*, 4 tensors.
    r.add({"LabelEncoder", "ai.onnx.ml", 2, kMaxOpset, cpu}, &make_label_encoder);
    r.add({"Binarizer", "ai.onnx.ml", 1, kMaxOpset, cpu}, &make_binarizer);
    r.add({"ArrayFeatureExtractor", "ai.onnx.ml", 1, kMaxOpset, cpu},
          &make_array_feature_extractor);
}

}  // namespace dsinfer::detail
