// serving::Cascade (dsinfer/cascade.hpp): the small model's rows judged by the rule, the unsure
// ones gathered into one request to the large model and scattered back, over BatchingEngine's
// public API only.
#include "dsinfer/cascade.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <new>

namespace dsinfer::serving {

namespace {

using Clock = std::chrono::steady_clock;
using std::int64_t;

/// The rows of a request: dim 0 of every input, which must agree.
Status request_rows(const std::vector<NamedTensor>& inputs, int64_t& rows) {
    DSINFER_CHECK(!inputs.empty(), ErrorCode::invalid_argument,
                  "cascade: the request has no inputs");
    rows = -1;
    for (const NamedTensor& in : inputs) {
        const Shape& s = in.tensor.shape();
        DSINFER_CHECK(s.rank() >= 1, ErrorCode::invalid_argument, "cascade: input '", in.name,
                      "' is a scalar: every input carries the request's rows on dim 0");
        if (rows < 0) rows = s[0];
        DSINFER_CHECK(s[0] == rows, ErrorCode::invalid_argument, "cascade: input '", in.name,
                      "' has ", s[0], " rows on dim 0, input '", inputs.front().name, "' ", rows,
                      ": every input carries the request's rows on dim 0");
    }
    return Status::ok();
}

/// Elements per row (dim 0) of `t`, which holds `rows` > 0 rows.
std::size_t row_elements(const Tensor& t, int64_t rows) {
    return static_cast<std::size_t>(t.num_elements() / rows);
}

/// Copies `count` rows of `row_elems` elements from row `from` of `src` to row `to` of `dst`
/// (same dtype; strings element by element).
void copy_rows(const Tensor& src, int64_t from, Tensor& dst, int64_t to, int64_t count,
               std::size_t row_elems) {
    const auto n = static_cast<std::size_t>(count) * row_elems;
    if (n == 0) return;
    const auto s0 = static_cast<std::size_t>(from) * row_elems;
    const auto d0 = static_cast<std::size_t>(to) * row_elems;
    if (src.dtype() == DType::string) {
        const std::string* s = src.data_unchecked<std::string>() + s0;
        std::copy(s, s + n, dst.data_unchecked<std::string>() + d0);
        return;
    }
    const std::size_t esz = dtype_size(src.dtype());
    std::memcpy(static_cast<unsigned char*>(dst.raw_data()) + d0 * esz,
                static_cast<const unsigned char*>(src.raw_data()) + s0 * esz, n * esz);
}

/// A tensor of `t`'s dtype and non-batch dims with `rows` rows (uninitialized).
StatusOr<Tensor> with_rows(const Tensor& t, int64_t rows) {
    Shape shape = t.shape();
    shape[0] = rows;
    return Tensor::allocate(t.dtype(), shape);
}

/// Marks (sets to 1) the rows of `t` holding a NaN or an infinity; `t` has `rows` > 0 rows.
template <class T, class IsFinite>
void mark_nonfinite_rows(const Tensor& t, int64_t rows, std::vector<char>& bad, IsFinite finite) {
    const std::size_t per_row = row_elements(t, rows);
    const T* p = t.data_unchecked<T>();
    for (int64_t r = 0; r < rows; ++r, p += per_row) {
        if (bad[static_cast<std::size_t>(r)]) continue;
        for (std::size_t i = 0; i < per_row; ++i)
            if (!finite(p[i])) {
                bad[static_cast<std::size_t>(r)] = 1;
                break;
            }
    }
}

void mark_nonfinite_rows(const Tensor& t, int64_t rows, std::vector<char>& bad) {
    // float16/bfloat16: exponent all ones is Inf or NaN.
    switch (t.dtype()) {
        case DType::f32:
            mark_nonfinite_rows<float>(t, rows, bad, [](float v) { return std::isfinite(v); });
            break;
        case DType::f64:
            mark_nonfinite_rows<double>(t, rows, bad, [](double v) { return std::isfinite(v); });
            break;
        case DType::f16:
            mark_nonfinite_rows<std::uint16_t>(
                t, rows, bad, [](std::uint16_t b) { return (b & 0x7c00u) != 0x7c00u; });
            break;
        case DType::bf16:
            mark_nonfinite_rows<std::uint16_t>(
                t, rows, bad, [](std::uint16_t b) { return (b & 0x7f80u) != 0x7f80u; });
            break;
        default: break;
    }
}

/// The confidence of one position's scores under `o`'s built-in rule; NaN when it is not
/// defined (a non-finite score, no classes).
double confidence(const float* z, int64_t classes, const CascadeOptions& o) {
    constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    if (classes <= 0) return kNaN;
    // The two largest scores (equal maxima count twice).
    float top = -std::numeric_limits<float>::infinity(), second = top;
    for (int64_t i = 0; i < classes; ++i) {
        const float v = z[i];
        if (!std::isfinite(v)) return kNaN;
        if (v > top) {
            second = top;
            top = v;
        } else if (v > second) {
            second = v;
        }
    }
    const bool margin = o.rule == CascadeOptions::Rule::margin_below;
    if (o.scores == CascadeOptions::Scores::probabilities)
        return margin ? static_cast<double>(top) - static_cast<double>(second)
                      : static_cast<double>(top);
    // softmax: p_i = exp(z_i - top) / sum, so p_top = 1 / sum.
    double sum = 0.0;
    for (int64_t i = 0; i < classes; ++i) sum += std::exp(static_cast<double>(z[i]) - top);
    if (!margin) return 1.0 / sum;
    const double next = classes > 1 ? std::exp(static_cast<double>(second) - top) : 0.0;
    return (1.0 - next) / sum;
}

/// What the first stage decided for one request.
struct Plan {
    int64_t rows = 0;
    std::vector<int64_t> escalate;  ///< ascending row indices
    std::uint64_t nonfinite = 0;    ///< of them, rows escalated for a non-finite value
};

/// The large model's answers for `plan.escalate` merged into the small model's outputs.
Status merge(const std::vector<NamedTensor>& small, const std::vector<NamedTensor>& large,
             const Plan& plan, std::vector<NamedTensor>& out) {
    const auto k = static_cast<int64_t>(plan.escalate.size());
    out.clear();
    out.reserve(small.size());
    for (const NamedTensor& s : small) {
        auto it = std::find_if(large.begin(), large.end(),
                               [&](const NamedTensor& l) { return l.name == s.name; });
        DSINFER_CHECK(it != large.end(), ErrorCode::invalid_argument,
                      "cascade: the large model returned no output '", s.name, "'");
        const Tensor& l = it->tensor;
        const Shape& ss = s.tensor.shape();
        const Shape& ls = l.shape();
        bool same = l.dtype() == s.tensor.dtype() && ls.rank() == ss.rank() && ls[0] == k;
        for (int d = 1; same && d < ss.rank(); ++d) same = ls[d] == ss[d];
        DSINFER_CHECK(same, ErrorCode::invalid_argument, "cascade: output '", s.name,
                      "' of the large model is ", dtype_name(l.dtype()), " ", ls.to_string(),
                      " for ", k, " escalated rows; the small model's is ",
                      dtype_name(s.tensor.dtype()), " ", ss.to_string(), " for ", plan.rows);
        if (k == plan.rows) {  // every row escalated: the large model's tensor as it is
            out.push_back(NamedTensor{s.name, it->tensor});
            continue;
        }
        DSINFER_ASSIGN_OR_RETURN(Tensor t, with_rows(s.tensor, plan.rows));
        const std::size_t per_row = row_elements(s.tensor, plan.rows);
        int64_t next = 0;  // first row not copied yet
        for (int64_t j = 0; j < k; ++j) {
            const int64_t row = plan.escalate[static_cast<std::size_t>(j)];
            copy_rows(s.tensor, next, t, next, row - next, per_row);
            copy_rows(l, j, t, row, 1, per_row);
            next = row + 1;
        }
        copy_rows(s.tensor, next, t, next, plan.rows - next, per_row);
        out.push_back(NamedTensor{s.name, std::move(t)});
    }
    return Status::ok();
}

/// The request's rows `pick` (ascending), every input cut to them.
Status gather(const std::vector<NamedTensor>& inputs, int64_t rows,
              const std::vector<int64_t>& pick, std::vector<NamedTensor>& out) {
    const auto k = static_cast<int64_t>(pick.size());
    out.clear();
    out.reserve(inputs.size());
    for (const NamedTensor& in : inputs) {
        DSINFER_ASSIGN_OR_RETURN(Tensor t, with_rows(in.tensor, k));
        const std::size_t per_row = row_elements(in.tensor, rows);
        for (int64_t j = 0; j < k; ++j)
            copy_rows(in.tensor, pick[static_cast<std::size_t>(j)], t, j, 1, per_row);
        out.push_back(NamedTensor{in.name, std::move(t)});
    }
    return Status::ok();
}

std::string names_of(const std::vector<IOInfo>& ios) {
    std::string s;
    for (const IOInfo& io : ios) s += (s.empty() ? "'" : ", '") + io.name + "'";
    return s.empty() ? std::string("none") : s;
}

/// The small and the large model's declarations of the same inputs or outputs (`kind`) agree:
/// the same names, and element types, ranks and non-batch dims wherever both declare them.
Status check_same(const std::vector<IOInfo>& small, const std::vector<IOInfo>& large,
                  const char* kind) {
    for (const IOInfo& s : small) {
        auto it = std::find_if(large.begin(), large.end(),
                               [&](const IOInfo& l) { return l.name == s.name; });
        DSINFER_CHECK(it != large.end(), ErrorCode::invalid_argument, "cascade: the small model's ",
                      kind, " '", s.name, "' is not one of the large model's (", names_of(large),
                      ")");
        const IOInfo& l = *it;
        DSINFER_CHECK(!s.dtype || !l.dtype || *s.dtype == *l.dtype, ErrorCode::invalid_argument,
                      "cascade: ", kind, " '", s.name, "' is ", dtype_name(*s.dtype),
                      " in the small model but ", dtype_name(*l.dtype), " in the large model");
        if (!s.shape.known || !l.shape.known) continue;
        bool same = s.shape.rank() == l.shape.rank();
        for (int d = 1; same && d < s.shape.rank(); ++d) {
            const Dim& a = s.shape.dims[static_cast<std::size_t>(d)];
            const Dim& b = l.shape.dims[static_cast<std::size_t>(d)];
            same = !a.is_static() || !b.is_static() || a.value == b.value;
        }
        DSINFER_CHECK(same, ErrorCode::invalid_argument, "cascade: ", kind, " '", s.name, "' is ",
                      s.shape.to_string(), " in the small model but ", l.shape.to_string(),
                      " in the large model");
    }
    for (const IOInfo& l : large)
        DSINFER_CHECK(std::any_of(small.begin(), small.end(),
                                  [&](const IOInfo& s) { return s.name == l.name; }),
                      ErrorCode::invalid_argument, "cascade: the large model's ", kind, " '",
                      l.name, "' is not one of the small model's (", names_of(small), ")");
    return Status::ok();
}

enum class Path : std::uint8_t { small_only, escalated, failed };

/// The Status of the exception being handled (inside a catch block).
Status current_exception_status() noexcept {
    try {
        throw;
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "cascade: out of memory");
    } catch (const Error& e) {
        return Status::error(e.code(), "cascade: ", e.message());
    } catch (const std::exception& e) {
        return Status::error(ErrorCode::internal, "cascade: ", e.what());
    } catch (...) {
        return Status(ErrorCode::internal, "cascade: unknown exception");
    }
}

}  // namespace

struct Cascade::Impl {
    std::shared_ptr<const BatchingEngine> small, large;
    CascadeOptions options;

    std::atomic<std::uint64_t> requests{0}, failed{0}, rows{0}, escalated_rows{0},
        nonfinite_rows{0}, escalated_requests{0};
    LatencyHistogram small_only_latency, escalated_latency;

    /// submit()s not answered yet; the destructor waits for none.
    std::mutex mu;
    std::condition_variable idle;
    std::size_t in_flight = 0;

    ~Impl() {
        std::unique_lock lock(mu);
        idle.wait(lock, [this] { return in_flight == 0; });
    }

    Status plan(const std::vector<NamedTensor>& small_out, int64_t n, Plan& p) const;
    void record_plan(const Plan& p) noexcept {
        rows.fetch_add(static_cast<std::uint64_t>(p.rows), std::memory_order_relaxed);
        escalated_rows.fetch_add(p.escalate.size(), std::memory_order_relaxed);
        nonfinite_rows.fetch_add(p.nonfinite, std::memory_order_relaxed);
        if (!p.escalate.empty()) escalated_requests.fetch_add(1, std::memory_order_relaxed);
    }
    void record(Path path, Clock::time_point start) noexcept {
        requests.fetch_add(1, std::memory_order_relaxed);
        const auto total = Clock::now() - start;
        switch (path) {
            case Path::small_only: small_only_latency.record(total); break;
            case Path::escalated: escalated_latency.record(total); break;
            case Path::failed: failed.fetch_add(1, std::memory_order_relaxed); break;
        }
    }

    struct Pending;
    void on_small(const std::shared_ptr<Pending>& p, StatusOr<Outputs> r);
    void on_large(const std::shared_ptr<Pending>& p, StatusOr<Outputs> r);
    void finish(Pending& p, StatusOr<Outputs> r, Path path) noexcept;
};

/// One submit() in flight: shared by the callbacks of its two stages.
struct Cascade::Impl::Pending {
    Impl* impl = nullptr;
    Callback done;
    std::vector<NamedTensor> inputs;  ///< kept for the second stage's gather
    RequestOptions options;
    Clock::time_point start;
    std::atomic<bool> answered{false};
    Outputs small_out;
    Plan plan;
};

Status Cascade::Impl::plan(const std::vector<NamedTensor>& out, int64_t n, Plan& p) const {
    p = Plan{};
    p.rows = n;
    for (const NamedTensor& o : out)
        DSINFER_CHECK(o.tensor.num_dims() >= 1 && o.tensor.shape()[0] == n,
                      ErrorCode::invalid_argument, "cascade: the small model's output '", o.name,
                      "' is ", o.tensor.shape().to_string(), ", not ", n,
                      " rows on dim 0 like the request");
    if (n == 0) return Status::ok();
    const auto rows_n = static_cast<std::size_t>(n);
    std::vector<char> nonfinite(rows_n, 0);
    for (const NamedTensor& o : out) mark_nonfinite_rows(o.tensor, n, nonfinite);
    std::vector<char> escalate = nonfinite;

    if (options.rule == CascadeOptions::Rule::custom) {
        std::vector<bool> flags;
        try {
            flags = options.custom(out);
        } catch (const Error& e) {
            return Status::error(e.code(), "cascade: the escalation rule failed: ", e.message());
        } catch (const std::bad_alloc&) {
            throw;
        } catch (const std::exception& e) {
            return Status::error(ErrorCode::invalid_argument,
                                 "cascade: the escalation rule threw: ", e.what());
        } catch (...) {
            return Status(ErrorCode::invalid_argument,
                          "cascade: the escalation rule threw an unknown exception");
        }
        DSINFER_CHECK(flags.size() == rows_n, ErrorCode::invalid_argument,
                      "cascade: the escalation rule returned ", flags.size(), " flags for ", n,
                      " rows");
        for (std::size_t r = 0; r < rows_n; ++r) escalate[r] = escalate[r] || flags[r];
    } else {
        const Tensor* scores = nullptr;
        for (const NamedTensor& o : out)
            if (o.name == options.output) scores = &o.tensor;
        DSINFER_CHECK(scores != nullptr, ErrorCode::invalid_argument,
                      "cascade: the small model returned no output '", options.output, "'");
        DSINFER_CHECK(scores->dtype() == DType::f32 && scores->num_dims() >= 2,
                      ErrorCode::invalid_argument, "cascade: the rule's output '", options.output,
                      "' is ", dtype_name(scores->dtype()), " ", scores->shape().to_string(),
                      ", not float32 [batch, ..., classes]");
        const int64_t classes = scores->shape()[scores->num_dims() - 1];
        const std::size_t per_row = row_elements(*scores, n);
        const std::size_t stride = static_cast<std::size_t>(std::max<int64_t>(classes, 1));
        const std::size_t positions = per_row / stride;  // 0: no scores at all
        const float* z = scores->data_unchecked<float>();
        for (std::size_t r = 0; r < rows_n; ++r) {
            if (escalate[r]) continue;
            // A row without scores has no confidence (NaN); NaN escalates: !(NaN >= t).
            double worst = positions == 0 ? std::numeric_limits<double>::quiet_NaN()
                                          : std::numeric_limits<double>::infinity();
            for (std::size_t q = 0; q < positions && !std::isnan(worst); ++q) {
                const double c = confidence(z + r * per_row + q * stride, classes, options);
                worst = std::isnan(c) ? c : std::min(worst, c);
            }
            if (!(worst >= options.threshold)) escalate[r] = 1;
        }
    }
    for (std::size_t r = 0; r < rows_n; ++r) {
        if (!escalate[r]) continue;
        p.escalate.push_back(static_cast<int64_t>(r));
        if (nonfinite[r]) ++p.nonfinite;
    }
    return Status::ok();
}

void Cascade::Impl::finish(Pending& p, StatusOr<Outputs> r, Path path) noexcept {
    if (p.answered.exchange(true, std::memory_order_acq_rel)) return;
    record(r.is_ok() ? path : Path::failed, p.start);
    try {
        p.done(std::move(r));
    } catch (...) {  // contained, as the scheduler's callbacks are
    }
    // Last: once in_flight drops, the Cascade may be destroyed.
    std::lock_guard lock(mu);
    if (--in_flight == 0) idle.notify_all();
}

void Cascade::Impl::on_small(const std::shared_ptr<Pending>& p, StatusOr<Outputs> r) {
    if (!r.is_ok())
        return finish(*p, r.status().with_context("cascade: the small model: "), Path::failed);
    try {
        p->small_out = std::move(r).value();
        if (Status st = plan(p->small_out, p->plan.rows, p->plan); !st.is_ok())
            return finish(*p, st, Path::failed);
        record_plan(p->plan);
        if (p->plan.escalate.empty()) {
            p->inputs.clear();
            return finish(*p, std::move(p->small_out), Path::small_only);
        }
        std::vector<NamedTensor> unsure;
        if (p->plan.escalate.size() == static_cast<std::size_t>(p->plan.rows)) {
            unsure = std::move(p->inputs);
        } else if (Status st = gather(p->inputs, p->plan.rows, p->plan.escalate, unsure);
                   !st.is_ok()) {
            return finish(*p, st, Path::failed);
        }
        p->inputs.clear();
        large->submit(
            std::move(unsure), [p](StatusOr<Outputs> l) { p->impl->on_large(p, std::move(l)); },
            p->options);
    } catch (...) {
        finish(*p, current_exception_status(), Path::failed);
    }
}

void Cascade::Impl::on_large(const std::shared_ptr<Pending>& p, StatusOr<Outputs> r) {
    if (!r.is_ok())
        return finish(*p, r.status().with_context("cascade: the large model: "), Path::failed);
    try {
        Outputs merged;
        Status st = merge(p->small_out, r.value(), p->plan, merged);
        p->small_out.clear();
        if (!st.is_ok()) return finish(*p, st, Path::failed);
        finish(*p, std::move(merged), Path::escalated);
    } catch (...) {
        finish(*p, current_exception_status(), Path::failed);
    }
}

Status Cascade::validate(const CascadeOptions& o) {
    using Rule = CascadeOptions::Rule;
    DSINFER_CHECK(
        o.rule == Rule::max_softmax_below || o.rule == Rule::margin_below || o.rule == Rule::custom,
        ErrorCode::invalid_argument, "CascadeOptions::rule is not a Rule (",
        static_cast<int>(o.rule), ")");
    if (o.rule == Rule::custom) {
        DSINFER_CHECK(static_cast<bool>(o.custom), ErrorCode::invalid_argument,
                      "CascadeOptions::custom is empty (Rule::custom needs a rule)");
        return Status::ok();
    }
    DSINFER_CHECK(!o.output.empty(), ErrorCode::invalid_argument,
                  "CascadeOptions::output is empty: the built-in rules need the output they read");
    DSINFER_CHECK(o.threshold >= 0.0 && o.threshold <= 1.0, ErrorCode::invalid_argument,
                  "CascadeOptions::threshold must be in [0, 1], got ", o.threshold);
    DSINFER_CHECK(o.scores == CascadeOptions::Scores::logits ||
                      o.scores == CascadeOptions::Scores::probabilities,
                  ErrorCode::invalid_argument, "CascadeOptions::scores is not a Scores (",
                  static_cast<int>(o.scores), ")");
    return Status::ok();
}

Cascade::Cascade(std::shared_ptr<const BatchingEngine> small,
                 std::shared_ptr<const BatchingEngine> large, CascadeOptions options)
    : impl_(std::make_unique<Impl>()) {
    if (small == nullptr || large == nullptr)
        throw Error(ErrorCode::invalid_argument, std::string("cascade: the ") +
                                                     (small == nullptr ? "small" : "large") +
                                                     " model's BatchingEngine is null");
    throw_if_error(validate(options));
    const InferenceEngine& s = *small->engine();
    const InferenceEngine& l = *large->engine();
    if (s.inputs().empty())
        throw Error(ErrorCode::invalid_argument,
                    "cascade: the models have no inputs (rows are dim 0 of the inputs)");
    throw_if_error(check_same(s.inputs(), l.inputs(), "input"));
    throw_if_error(check_same(s.outputs(), l.outputs(), "output"));
    if (options.rule != CascadeOptions::Rule::custom) {
        auto it = std::find_if(s.outputs().begin(), s.outputs().end(),
                               [&](const IOInfo& io) { return io.name == options.output; });
        if (it == s.outputs().end())
            throw Error(ErrorCode::invalid_argument,
                        "CascadeOptions::output: the models have no output '" + options.output +
                            "' (their outputs: " + names_of(s.outputs()) + ")");
        if ((it->dtype && *it->dtype != DType::f32) || (it->shape.known && it->shape.rank() < 2))
            throw Error(ErrorCode::invalid_argument,
                        "CascadeOptions::output: '" + options.output + "' is " +
                            (it->dtype ? std::string(dtype_name(*it->dtype)) : "?") + " " +
                            it->shape.to_string() + ", not float32 [batch, ..., classes]");
    }
    impl_->small = std::move(small);
    impl_->large = std::move(large);
    impl_->options = std::move(options);
}

Cascade::Cascade(Cascade&&) noexcept = default;
Cascade& Cascade::operator=(Cascade&&) noexcept = default;
Cascade::~Cascade() = default;

Status Cascade::try_run(const std::vector<NamedTensor>& inputs, Outputs& outputs,
                        const RunOptions& options) const noexcept {
    Impl& im = *impl_;
    const auto start = Clock::now();
    Path path = Path::failed;
    Status st;
    try {
        Plan plan;
        st = request_rows(inputs, plan.rows);
        Outputs small_out;
        if (st.is_ok())
            st = im.small->try_run(inputs, small_out, options)
                     .with_context("cascade: the small model: ");
        if (st.is_ok()) st = im.plan(small_out, plan.rows, plan);
        if (st.is_ok()) {
            im.record_plan(plan);
            if (plan.escalate.empty()) {
                outputs = std::move(small_out);
                path = Path::small_only;
            } else {
                std::vector<NamedTensor> gathered;
                const bool all = plan.escalate.size() == static_cast<std::size_t>(plan.rows);
                if (!all) st = gather(inputs, plan.rows, plan.escalate, gathered);
                Outputs large_out;
                if (st.is_ok())
                    st = im.large->try_run(all ? inputs : gathered, large_out, options)
                             .with_context("cascade: the large model: ");
                if (st.is_ok()) st = merge(small_out, large_out, plan, outputs);
                if (st.is_ok()) path = Path::escalated;
            }
        }
    } catch (...) {
        st = current_exception_status();
    }
    im.record(st.is_ok() ? path : Path::failed, start);
    return st;
}

Cascade::Outputs Cascade::run(const std::vector<NamedTensor>& inputs,
                              const RunOptions& options) const {
    Outputs outputs;
    throw_if_error(try_run(inputs, outputs, options));
    return outputs;
}

void Cascade::submit(std::vector<NamedTensor> inputs, Callback done, RequestOptions options) const {
    if (!done) throw Error(ErrorCode::invalid_argument, "submit: the callback is empty");
    Impl& im = *impl_;
    std::shared_ptr<Impl::Pending> p;
    try {
        p = std::make_shared<Impl::Pending>();
    } catch (...) {
        try {
            done(current_exception_status());
        } catch (...) {  // contained, as the scheduler's callbacks are
        }
        return;
    }
    p->impl = &im;
    p->done = std::move(done);
    p->start = Clock::now();
    {
        std::lock_guard lock(im.mu);
        ++im.in_flight;
    }
    try {
        if (Status st = request_rows(inputs, p->plan.rows); !st.is_ok())
            return im.finish(*p, st, Path::failed);
        p->inputs = inputs;  // shares the buffers
        p->options = options;
        im.small->submit(
            std::move(inputs), [p](StatusOr<Outputs> r) { p->impl->on_small(p, std::move(r)); },
            std::move(options));
    } catch (...) {
        im.finish(*p, current_exception_status(), Path::failed);
    }
}

std::future<Cascade::Outputs> Cascade::submit(std::vector<NamedTensor> inputs,
                                              RequestOptions options) const {
    auto promise = std::make_shared<std::promise<Outputs>>();
    std::future<Outputs> f = promise->get_future();
    submit(
        std::move(inputs),
        [promise](StatusOr<Outputs> r) {
            if (r.is_ok())
                promise->set_value(std::move(r).value());
            else
                promise->set_exception(std::make_exception_ptr(Error(r.status())));
        },
        std::move(options));
    return f;
}

CascadeStats Cascade::stats() const {
    const Impl& im = *impl_;
    CascadeStats s;
    s.requests = im.requests.load(std::memory_order_relaxed);
    s.failed = im.failed.load(std::memory_order_relaxed);
    s.rows = im.rows.load(std::memory_order_relaxed);
    s.escalated_rows = im.escalated_rows.load(std::memory_order_relaxed);
    s.nonfinite_rows = im.nonfinite_rows.load(std::memory_order_relaxed);
    s.escalated_requests = im.escalated_requests.load(std::memory_order_relaxed);
    s.small_only_latency = im.small_only_latency.snapshot();
    s.escalated_latency = im.escalated_latency.snapshot();
    return s;
}

void Cascade::reset_stats() const noexcept {
    Impl& im = *impl_;
    for (auto* c : {&im.requests, &im.failed, &im.rows, &im.escalated_rows, &im.nonfinite_rows,
                    &im.escalated_requests})
        c->store(0, std::memory_order_relaxed);
    im.small_only_latency.reset();
    im.escalated_latency.reset();
}

const CascadeOptions& Cascade::options() const noexcept { return impl_->options; }
const std::shared_ptr<const BatchingEngine>& Cascade::small_model() const noexcept {
    return impl_->small;
}
const std::shared_ptr<const BatchingEngine>& Cascade::large_model() const noexcept {
    return impl_->large;
}

}  // namespace dsinfer::serving
