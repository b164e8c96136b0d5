// Special float values (BAD_INPUTS.md E: "NaN, ±Inf, denormals, -0.0 in float inputs":
// computes, IEEE propagation, no crash, no UB; ArgMax/TopK/Sort deterministic).
//
// 1. Sweep: every ONNX node conformance test (DSINFER_ONNX_TESTS_DIR/node) whose model loads
//    on the CPU and has float inputs runs with its float inputs (f32, f64, f16, bf16) replaced
//    by special values (shapes and integer/index inputs kept): once with every element special,
//    once with every third element special. Each run must end in success or a typed error
//    other than `internal`, twice with the same bits (except ops that draw random numbers),
//    and never crash, hang or trip a sanitizer (the tests run in forked children, resumed
//    after the test that killed one; the sanitizer build runs this suite too).
// 2. Targeted checks, on every CPU backend configuration (default = oneDNN + cpu, cpu,
//    reference): IEEE results of the elementwise ops (NaN in -> NaN out, Inf arithmetic, signed
//    zeros, denormals kept), of the reductions (contiguous and strided), Softmax/LogSoftmax/
//    LayerNormalization (a bad row stays in its row) and MatMul (0 * Inf = NaN, also with packed
//    constant weights). Every configuration has the reference kernels' semantics, the default
//    backends included: Relu(NaN) = NaN, and Softmax/LogSoftmax of a row with a NaN is a NaN
//    row; a row with +Inf gives NaN at the +Inf and 0 / -Inf elsewhere (the reference's IEEE
//    evaluation, Inf / Inf). oneDNN's own Relu and Softmax differ there; the oneDNN backend
//    avoids them for such inputs (docs/OPS.md). Every op family, the fused operators and whole
//    chains against the reference: test_nonfinite_backends.cpp.
// 3. Ordering with NaN. dsinfer's rule (src/cpu/reference/reduce_arg.cpp, as numpy/PyTorch):
//    a NaN ranks above every number, and ties go to the lower index. So ArgMax returns the
//    first NaN's index (select_last_index=1: the last NaN's); ArgMin also returns a NaN's index
//    (min over data with a NaN is NaN); TopK(largest=1) lists NaNs first, TopK(largest=0) lists
//    them last; Unique (sorted) puts one NaN group last. Float -> integer Cast: NaN -> 0,
//    out-of-range values saturate (src/cpu/reference/elementwise_cast.cpp).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "onnx_test_data.hpp"
#include "unit/model_builder.hpp"

using namespace dsinfer;
using namespace dsinfer::test;
namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kDen = std::numeric_limits<float>::denorm_min();

double as_f32(double v) { return static_cast<double>(static_cast<float>(v)); }

// ---- values in any float dtype ---------------------------------------------------------------

bool is_float_dtype(DType t) {
    return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

double get(const Tensor& t, std::int64_t i) {
    switch (t.dtype()) {
        case DType::f32: return t.data<float>()[i];
        case DType::f64: return t.data<double>()[i];
        case DType::f16: return static_cast<float>(t.data<float16>()[i]);
        case DType::bf16: return static_cast<float>(t.data<bfloat16>()[i]);
        default: return kNaN;
    }
}

void put(Tensor& t, std::int64_t i, double v) {
    switch (t.dtype()) {
        case DType::f32: t.data<float>()[i] = static_cast<float>(v); break;
        case DType::f64: t.data<double>()[i] = v; break;
        case DType::f16: t.data<float16>()[i] = float16(static_cast<float>(v)); break;
        case DType::bf16: t.data<bfloat16>()[i] = bfloat16(static_cast<float>(v)); break;
        default: break;
    }
}

/// The special values of a float dtype: NaN, ±Inf, -0.0, +0.0, ± the smallest denormal, the
/// largest finite values, a negative NaN and two ordinary numbers.
std::vector<double> specials(DType t) {
    double den = std::numeric_limits<float>::denorm_min(), big = std::numeric_limits<float>::max();
    if (t == DType::f64) {
        den = std::numeric_limits<double>::denorm_min();
        big = std::numeric_limits<double>::max();
    } else if (t == DType::f16) {
        den = 5.9604644775390625e-08;  // 2^-24
        big = 65504.0;
    } else if (t == DType::bf16) {
        den = 9.183549615799121e-41;  // 2^-133
        big = 3.3895313892515355e+38;
    }
    return {kNaN, kInf, -kInf, -0.0, den, 0.0, -den, 1.0, -kNaN, -1.5, big, -big};
}

// ---- 1. sweep over the node conformance tests -------------------------------------------------

bool draws_random_numbers(const std::string& name) {
    for (const char* s : {"random", "bernoulli", "multinomial", "dropout"})
        if (name.find(s) != std::string::npos) return true;
    return false;
}

std::string one_line(std::string s) {
    std::replace(s.begin(), s.end(), '\n', ' ');
    if (s.size() > 300) s.resize(300);
    return s;
}

/// One test, in the child: "skip <why>" or "ran <code all-special> <code sprinkled>
/// <deterministic 0/1> <message of an internal error>".
std::string sweep_one(const fs::path& dir) {
    EngineOptions o;
    o.num_threads = 1;
    std::optional<InferenceEngine> engine;
    try {
        engine.emplace(InferenceEngine::load(dir / "model.onnx", o));
    } catch (const Error&) {
        return "skip load";
    }
    const std::vector<fs::path> files =
        dsinfer::tools::numbered_pb_files(dir / "test_data_set_0", "input_");
    const auto& decl = engine->inputs();
    if (files.size() > decl.size()) return "skip inputs";
    std::vector<NamedTensor> original;
    for (std::size_t i = 0; i < files.size(); ++i) {
        try {
            original.push_back({decl[i].name, load_tensor_proto(files[i]).clone()});
        } catch (const Error&) {
            return "skip inputs";
        }
    }
    bool any_float = false;
    for (const auto& nt : original) any_float = any_float || is_float_dtype(nt.tensor.dtype());
    if (!any_float) return "skip no-float";
    std::string out = "ran";
    std::string internal;
    bool deterministic = true;
    for (int variant = 0; variant < 2; ++variant) {
        std::vector<NamedTensor> in;
        for (const auto& nt : original) {
            Tensor t = nt.tensor.clone();
            if (is_float_dtype(t.dtype())) {
                const std::vector<double> sv = specials(t.dtype());
                for (std::int64_t i = 0; i < t.num_elements(); ++i)
                    if (variant == 0)
                        put(t, i, sv[static_cast<std::size_t>(i) % sv.size()]);
                    else if (i % 3 == 1)
                        put(t, i, sv[static_cast<std::size_t>(i / 3) % sv.size()]);
            }
            in.push_back({nt.name, t});
        }
        std::vector<NamedTensor> first, second;
        const Status st = engine->try_run(in, first);
        out += " " + std::string(to_string(st.code()));
        if (st.code() == ErrorCode::internal) internal = st.message();
        if (st.is_ok() && !draws_random_numbers(dir.filename().string())) {
            const Status st2 = engine->try_run(in, second);
            bool same = st2.is_ok() && second.size() == first.size();
            for (std::size_t k = 0; same && k < first.size(); ++k) {
                const Tensor& a = first[k].tensor;
                const Tensor& b = second[k].tensor;
                same = a.dtype() == b.dtype() && a.shape() == b.shape();
                if (same && a.dtype() == DType::string) {
                    for (std::int64_t j = 0; same && j < a.num_elements(); ++j)
                        same = a.data<std::string>()[j] == b.data<std::string>()[j];
                } else if (same) {
                    same = std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
                }
            }
            deterministic = deterministic && same;
        }
    }
    return out + (deterministic ? " 1 " : " 0 ") + one_line(internal);
}

void write_all(int fd, const std::string& s) {
    const char* p = s.data();
    std::size_t left = s.size();
    while (left > 0) {
        const ssize_t w = ::write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        left -= static_cast<std::size_t>(w);
    }
}

struct SweepTotals {
    int tests = 0, not_loaded = 0, no_float = 0, ran = 0, runs = 0, runs_ok = 0;
    std::map<std::string, int> errors;  // typed error code -> runs
    std::vector<std::string> crashed, internal, nondeterministic;
};

/// Runs tests[begin, end) in forked children: each child reports "S i" before test i and
/// "R i <result>" after it; when a child dies, test i is recorded as crashed and a new child
/// resumes at i + 1.
SweepTotals sweep(const std::vector<fs::path>& tests) {
    SweepTotals t;
    std::size_t next = 0;
    while (next < tests.size()) {
        int fds[2];
        REQUIRE(::pipe(fds) == 0);
        std::fflush(nullptr);
        const pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            ::close(fds[0]);
            for (std::size_t i = next; i < tests.size(); ++i) {
                write_all(fds[1], "S " + std::to_string(i) + "\n");
                ::alarm(120);
                std::string r;
                try {
                    r = sweep_one(tests[i]);
                } catch (const std::exception& e) {
                    r = "ran foreign-exception foreign-exception 1 " + one_line(e.what());
                }
                write_all(fds[1], "R " + std::to_string(i) + " " + r + "\n");
            }
            ::close(fds[1]);
            ::_exit(0);
        }
        ::close(fds[1]);
        std::string data;
        char buf[4096];
        for (;;) {
            const ssize_t n = ::read(fds[0], buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            data.append(buf, static_cast<std::size_t>(n));
        }
        ::close(fds[0]);
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        std::istringstream lines(data);
        std::string line;
        constexpr std::size_t kNone = static_cast<std::size_t>(-1);
        std::size_t started = kNone;  // the test the child is inside
        while (std::getline(lines, line)) {
            std::istringstream ls(line);
            std::string kind;
            std::size_t i = 0;
            ls >> kind >> i;
            if (kind == "S") {
                started = i;
                continue;
            }
            if (kind != "R") continue;
            started = kNone;
            next = i + 1;
            ++t.tests;
            const std::string name = tests[i].filename().string();
            std::string what;
            ls >> what;
            if (what == "skip") {
                std::string why;
                ls >> why;
                if (why == "no-float")
                    ++t.no_float;
                else
                    ++t.not_loaded;
                continue;
            }
            ++t.ran;
            std::string c0, c1;
            int det = 1;
            ls >> c0 >> c1 >> det;
            std::string msg;
            std::getline(ls, msg);
            for (const std::string& c : {c0, c1}) {
                ++t.runs;
                if (c == "ok")
                    ++t.runs_ok;
                else
                    ++t.errors[c];
                if (c == "internal" || c == "foreign-exception")
                    t.internal.push_back(name + ": " + c + ":" + msg);
            }
            if (det == 0) t.nondeterministic.push_back(name);
        }
        if (started != kNone) {  // the child died inside this test
            const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
            t.crashed.push_back(tests[started].filename().string() + " (signal " +
                                std::to_string(sig) +
                                (sig ? std::string(" ") + strsignal(sig) : "") + ")");
            ++t.tests;
            next = started + 1;
        } else if (next < tests.size() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            // Died between tests (should not happen): do not loop forever.
            t.crashed.push_back("between tests after #" + std::to_string(next));
            ++next;
        }
    }
    return t;
}

std::vector<fs::path> node_tests() {
    std::vector<fs::path> tests;
#ifdef DSINFER_ONNX_TESTS_DIR
    const fs::path root = fs::path(DSINFER_ONNX_TESTS_DIR) / "node";
    std::error_code ec;
    if (fs::is_directory(root, ec))
        for (const auto& e : fs::directory_iterator(root))
            if (e.is_directory() && fs::exists(e.path() / "model.onnx")) tests.push_back(e.path());
#endif
    std::sort(tests.begin(), tests.end());
    return tests;
}

void run_sweep_shard(int shard, int shards) {
    const std::vector<fs::path> all = node_tests();
    if (all.empty()) {
        WARN("SKIPPED: no ONNX node tests (DSINFER_ONNX_TESTS_DIR)");
        return;
    }
    std::vector<fs::path> mine;
    for (std::size_t i = 0; i < all.size(); ++i)
        if (static_cast<int>(i % static_cast<std::size_t>(shards)) == shard) mine.push_back(all[i]);
    const SweepTotals t = sweep(mine);
    std::ostringstream os;
    os << "shard " << shard + 1 << "/" << shards << ": " << t.tests << " tests, " << t.ran
       << " ran with special values (" << t.not_loaded << " do not load or read, " << t.no_float
       << " without float inputs); " << t.runs << " runs: " << t.runs_ok << " ok";
    for (const auto& [code, n] : t.errors) os << ", " << n << " " << code;
    WARN(os.str());
    CHECK(t.tests == static_cast<int>(mine.size()));
    // About 73% of each shard runs with special values (the rest do not load on the CPU or
    // have no float input): a loader or kernel regression that stops models from loading must
    // not pass as "no crash".
    CHECK(t.ran * 100 >= t.tests * 65);
    for (const auto& c : t.crashed) FAIL_CHECK("crashed or hung: " << c);
    for (const auto& c : t.internal) FAIL_CHECK("internal error: " << c);
    for (const auto& c : t.nondeterministic) FAIL_CHECK("not deterministic: " << c);
}

// ---- single-op models -------------------------------------------------------------------------

struct Input {
    std::string name;
    Tensor tensor;
    bool initializer = false;
};

using AttrFn = std::function<void(onnx::NodeProto*)>;

struct Config {
    const char* name;
    std::vector<std::string> backends;
};

const std::vector<Config>& configs() {
    static const std::vector<Config> c = {
        {"default", {}}, {"cpu", {"cpu"}}, {"reference", {"reference"}}};
    return c;
}

onnx::TensorProto to_proto(const std::string& name, const Tensor& t) {
    onnx::TensorProto p;
    p.set_name(name);
    p.set_data_type(to_onnx_dtype(t.dtype()));
    for (int d = 0; d < t.shape().rank(); ++d) p.add_dims(t.shape()[d]);
    p.set_raw_data(std::string(static_cast<const char*>(t.raw_data()), t.num_bytes()));
    return p;
}

/// Runs one node `op` over `inputs` on backend configuration `cfg`; outputs in order.
std::vector<Tensor> run_op(const std::string& op, const std::vector<Input>& inputs,
                           const std::vector<DType>& out_types, const Config& cfg,
                           const AttrFn& attrs = {}, int opset = 17) {
    onnx::ModelProto m = new_model(opset, op);
    auto* g = m.mutable_graph();
    std::vector<std::string> in_names, out_names;
    std::vector<NamedTensor> feeds;
    for (const auto& in : inputs) {
        in_names.push_back(in.name);
        if (in.initializer) {
            *g->add_initializer() = to_proto(in.name, in.tensor);
        } else {
            std::vector<std::int64_t> dims;
            for (int d = 0; d < in.tensor.shape().rank(); ++d) dims.push_back(in.tensor.shape()[d]);
            *g->add_input() = tensor_info(in.name, to_onnx_dtype(in.tensor.dtype()), dims);
            feeds.push_back({in.name, in.tensor});
        }
    }
    for (std::size_t i = 0; i < out_types.size(); ++i) {
        out_names.push_back("out" + std::to_string(i));
        auto* v = g->add_output();
        v->set_name(out_names.back());
        v->mutable_type()->mutable_tensor_type()->set_elem_type(to_onnx_dtype(out_types[i]));
    }
    auto* n = add_node(*g, op, in_names, out_names, "node");
    if (attrs) attrs(n);
    const std::string b = bytes_of(m);
    EngineOptions o;
    o.backends = cfg.backends;
    o.num_threads = 2;
    InferenceEngine e = InferenceEngine::compile(load_onnx_from_bytes(b.data(), b.size()), o);
    std::vector<Tensor> out;
    for (auto& nt : e.run(feeds)) out.push_back(nt.tensor);
    return out;
}

Tensor f32(const Shape& s, const std::vector<double>& v) {
    Tensor t = Tensor::empty(DType::f32, s);
    REQUIRE(static_cast<std::size_t>(t.num_elements()) == v.size());
    for (std::size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
    return t;
}

Tensor typed(DType dt, const Shape& s, const std::vector<double>& v) {
    Tensor t = Tensor::empty(dt, s);
    REQUIRE(static_cast<std::size_t>(t.num_elements()) == v.size());
    for (std::size_t i = 0; i < v.size(); ++i) put(t, static_cast<std::int64_t>(i), v[i]);
    return t;
}

void set_int(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
}
void set_float(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
}
void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
}

enum class Cmp { exact_signed, exact, close };

/// IEEE agreement of a float result with the expected double value: NaN where NaN, the same
/// infinity, the same signed zero (exact_signed), the same value (exact) or within 1e-5
/// relative / 1e-6 absolute (close: approximated transcendental functions).
bool matches(double a, double e, Cmp cmp) {
    if (std::isnan(e)) return std::isnan(a);
    if (std::isnan(a)) return false;
    if (std::isinf(e)) return a == e;
    if (std::isinf(a)) return false;
    if (cmp == Cmp::exact_signed) return a == e && std::signbit(a) == std::signbit(e);
    if (cmp == Cmp::exact) return a == e;
    return std::fabs(a - e) <= 1e-6 + 1e-5 * std::fabs(e);
}

std::string show(double v) {
    std::ostringstream os;
    os.precision(9);
    if (v == 0 && std::signbit(v))
        os << "-0";
    else
        os << v;
    return os.str();
}

/// Compares every element of float tensor `t` with `expected`; reports the mismatches.
void check_all(const Tensor& t, const std::vector<double>& expected, Cmp cmp,
               const std::function<std::string(std::size_t)>& where) {
    REQUIRE(static_cast<std::size_t>(t.num_elements()) == expected.size());
    int bad = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
        const double a = get(t, static_cast<std::int64_t>(i));
        if (!matches(a, expected[i], cmp)) {
            if (++bad <= 8)
                FAIL_CHECK(where(i) << ": got " << show(a) << ", expected " << show(expected[i]));
        }
    }
    CHECK(bad == 0);
}

// ---- 2. elementwise ---------------------------------------------------------------------------

/// Specials and ordinary numbers, 67 elements (so specials fall on every SIMD lane and in the
/// tail): NaN, ±Inf, ±0, ±denormal, ±1, and a few magnitudes.
std::vector<double> unary_inputs() {
    const std::vector<double> p = {kNaN, kInf, -kInf, -0.0, 0.0, kDen,  -kDen,
                                   1.0,  -1.0, 0.5,   -2.5, 3.0, -100.0};
    std::vector<double> v(67);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = p[(i * 7) % p.size()];
    return v;
}

struct Unary {
    const char* op;
    std::function<double(double)> f;
    Cmp cmp;
    AttrFn attrs;
};

double relu(double x) { return std::isnan(x) ? x : (x > 0 ? x : 0.0); }
double sign(double x) { return std::isnan(x) ? x : (x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0)); }

}  // namespace

TEST_CASE("special values: unary elementwise ops follow IEEE", "[special]") {
    const std::vector<Unary> ops = {
        {"Relu", relu, Cmp::exact, {}},  // Relu(-0): a zero of either sign
        {"Abs", [](double x) { return std::fabs(x); }, Cmp::exact_signed, {}},
        {"Neg", [](double x) { return -x; }, Cmp::exact_signed, {}},
        {"Floor", [](double x) { return std::floor(x); }, Cmp::exact_signed, {}},
        {"Ceil", [](double x) { return std::ceil(x); }, Cmp::exact_signed, {}},
        {"Round", [](double x) { return std::nearbyint(x); }, Cmp::exact_signed, {}},
        {"Sign", sign, Cmp::exact, {}},
        {"Sqrt",
         [](double x) { return static_cast<double>(std::sqrt(static_cast<float>(x))); },
         Cmp::exact_signed,
         {}},
        {"Reciprocal",
         [](double x) { return static_cast<double>(1.0f / static_cast<float>(x)); },
         Cmp::exact_signed,
         {}},
        {"Exp", [](double x) { return std::exp(x); }, Cmp::close, {}},
        {"Log", [](double x) { return std::log(x); }, Cmp::close, {}},
        {"Tanh", [](double x) { return std::tanh(x); }, Cmp::close, {}},
        {"Sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, Cmp::close, {}},
        {"Erf", [](double x) { return std::erf(x); }, Cmp::close, {}},
        {"Sin", [](double x) { return std::sin(x); }, Cmp::close, {}},
        {"Cos", [](double x) { return std::cos(x); }, Cmp::close, {}},
        {"Softplus", [](double x) { return x > 30 ? x : std::log1p(std::exp(x)); }, Cmp::close, {}},
        {"Elu", [](double x) { return x < 0 ? std::expm1(x) : x; }, Cmp::close, {}},
        {"LeakyRelu", [](double x) { return x < 0 ? 0.01 * x : x; }, Cmp::close,
         [](onnx::NodeProto* n) { set_float(n, "alpha", 0.01f); }},
        {"HardSigmoid",
         [](double x) { return std::isnan(x) ? x : std::clamp(0.2 * x + 0.5, 0.0, 1.0); },
         Cmp::close,
         {}},
    };
    const std::vector<double> x = unary_inputs();
    for (const Config& cfg : configs()) {
        for (const Unary& u : ops) {
            std::vector<double> expected;
            for (double v : x) expected.push_back(as_f32(u.f(v)));  // float overflow -> Inf
            const Tensor y =
                run_op(u.op, {{"x", f32(Shape{67}, x)}}, {DType::f32}, cfg, u.attrs)[0];
            check_all(y, expected, u.cmp, [&](std::size_t i) {
                return std::string(cfg.name) + " " + u.op + "(" + show(x[i]) + ")";
            });
        }
        // IsNaN / IsInf: exact classification.
        const Tensor isnan = run_op("IsNaN", {{"x", f32(Shape{67}, x)}}, {DType::boolean}, cfg)[0];
        const Tensor isinf = run_op("IsInf", {{"x", f32(Shape{67}, x)}}, {DType::boolean}, cfg)[0];
        for (std::size_t i = 0; i < x.size(); ++i) {
            CHECK(isnan.data<bool>()[i] == std::isnan(x[i]));
            CHECK(isinf.data<bool>()[i] == std::isinf(x[i]));
        }
        // Clip propagates NaN and clamps the infinities.
        const Tensor clip = run_op("Clip",
                                   {{"x", f32(Shape{67}, x)},
                                    {"lo", f32(Shape{}, {-1.0}), true},
                                    {"hi", f32(Shape{}, {1.0}), true}},
                                   {DType::f32}, cfg)[0];
        std::vector<double> ce;
        for (double v : x) ce.push_back(std::isnan(v) ? v : std::clamp(v, -1.0, 1.0));
        check_all(clip, ce, Cmp::exact, [&](std::size_t i) {
            return std::string(cfg.name) + " Clip(" + show(x[i]) + ", -1, 1)";
        });
    }
}

namespace {

const std::vector<double>& pair_values() {
    static const std::vector<double> p = {kNaN, kInf, -kInf, -0.0, 0.0, kDen, 1.0, -1.0, 2.5, -3.0};
    return p;
}

struct Binary {
    const char* op;
    std::function<double(double, double)> f;
    Cmp cmp;
};

double fmax_nan(double a, double b) {
    return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
}
double fmin_nan(double a, double b) {
    return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
}

}  // namespace

TEST_CASE("special values: binary elementwise ops follow IEEE (same shape and broadcast)",
          "[special]") {
    const std::vector<Binary> ops = {
        {"Add",
         [](double a, double b) { return as_f32(static_cast<float>(a) + static_cast<float>(b)); },
         Cmp::exact_signed},
        {"Sub",
         [](double a, double b) { return as_f32(static_cast<float>(a) - static_cast<float>(b)); },
         Cmp::exact_signed},
        {"Mul",
         [](double a, double b) { return as_f32(static_cast<float>(a) * static_cast<float>(b)); },
         Cmp::exact_signed},
        {"Div",
         [](double a, double b) { return as_f32(static_cast<float>(a) / static_cast<float>(b)); },
         Cmp::exact_signed},
        // ONNX Max/Min are numpy's maximum/minimum: a NaN operand gives NaN.
        {"Max", fmax_nan, Cmp::exact},
        {"Min", fmin_nan, Cmp::exact},
        // C/IEEE pow: pow(x, ±0) = 1 and pow(1, y) = 1 even for NaN; otherwise NaN propagates.
        {"Pow",
         [](double a, double b) {
             return as_f32(std::pow(static_cast<float>(a), static_cast<float>(b)));
         },
         Cmp::close},
    };
    const std::vector<double>& p = pair_values();
    const std::int64_t n = static_cast<std::int64_t>(p.size());
    std::vector<double> a, b;
    for (double x : p)
        for (double y : p) {
            a.push_back(x);
            b.push_back(y);
        }
    for (const Config& cfg : configs()) {
        for (const Binary& op : ops) {
            std::vector<double> expected;
            for (std::size_t i = 0; i < a.size(); ++i) expected.push_back(op.f(a[i], b[i]));
            // Same shape: [n*n] with [n*n].
            const Tensor same =
                run_op(op.op, {{"a", f32(Shape{n * n}, a)}, {"b", f32(Shape{n * n}, b)}},
                       {DType::f32}, cfg)[0];
            check_all(same, expected, op.cmp, [&](std::size_t i) {
                return std::string(cfg.name) + " " + op.op + "(" + show(a[i]) + ", " + show(b[i]) +
                       ") same shape";
            });
            // Broadcast: [n,1] with [1,n].
            const Tensor bc =
                run_op(op.op, {{"a", f32(Shape{n, 1}, p)}, {"b", f32(Shape{1, n}, p)}},
                       {DType::f32}, cfg)[0];
            check_all(bc, expected, op.cmp, [&](std::size_t i) {
                return std::string(cfg.name) + " " + op.op + "(" + show(a[i]) + ", " + show(b[i]) +
                       ") broadcast";
            });
            // Broadcast of a scalar b: the specials as a vector, each b in turn (scalar loop
            // plans).
            for (double s : {kNaN, kInf, -0.0}) {
                const Tensor sc = run_op(op.op, {{"a", f32(Shape{n}, p)}, {"b", f32(Shape{}, {s})}},
                                         {DType::f32}, cfg)[0];
                std::vector<double> e;
                for (double x : p) e.push_back(op.f(x, s));
                check_all(sc, e, op.cmp, [&](std::size_t i) {
                    return std::string(cfg.name) + " " + op.op + "(" + show(p[i]) + ", scalar " +
                           show(s) + ")";
                });
            }
        }
        // Variadic Sum / Mean / Max / Min over three inputs.
        const std::vector<double> x = {kInf, 1.0, kNaN, -0.0, kDen, -kInf};
        const std::vector<double> y = {-kInf, 2.0, 1.0, -0.0, kDen, -kInf};
        const std::vector<double> z = {1.0, 1.0, 1.0, -0.0, 0.0, 5.0};
        std::vector<Input> ins = {
            {"x", f32(Shape{6}, x)}, {"y", f32(Shape{6}, y)}, {"z", f32(Shape{6}, z)}};
        std::vector<double> sum, mean, mx, mn;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const float s =
                static_cast<float>(x[i]) + static_cast<float>(y[i]) + static_cast<float>(z[i]);
            sum.push_back(s);
            mean.push_back(static_cast<double>(s / 3.0f));
            mx.push_back(fmax_nan(fmax_nan(x[i], y[i]), z[i]));
            mn.push_back(fmin_nan(fmin_nan(x[i], y[i]), z[i]));
        }
        const std::string c = cfg.name;
        check_all(run_op("Sum", ins, {DType::f32}, cfg)[0], sum, Cmp::exact,
                  [&](std::size_t i) { return c + " Sum #" + std::to_string(i); });
        check_all(run_op("Mean", ins, {DType::f32}, cfg)[0], mean, Cmp::close,
                  [&](std::size_t i) { return c + " Mean #" + std::to_string(i); });
        check_all(run_op("Max", ins, {DType::f32}, cfg)[0], mx, Cmp::exact,
                  [&](std::size_t i) { return c + " Max #" + std::to_string(i); });
        check_all(run_op("Min", ins, {DType::f32}, cfg)[0], mn, Cmp::exact,
                  [&](std::size_t i) { return c + " Min #" + std::to_string(i); });
    }
}

TEST_CASE("special values: denormals are kept (not flushed to zero)", "[special]") {
    const double d = kDen, d2 = 1e-39;  // smallest and a larger float denormal
    for (const Config& cfg : configs()) {
        const Tensor a = f32(Shape{4}, {d, d2, -d2, d2});
        const Tensor b = f32(Shape{4}, {1.0, 1.0, 0.0, d2});
        const std::string c = cfg.name;
        check_all(run_op("Mul", {{"a", a}, {"b", b}}, {DType::f32}, cfg)[0],
                  {d, as_f32(d2), -0.0, 0.0}, Cmp::exact_signed,
                  [&](std::size_t i) { return c + " Mul denormal #" + std::to_string(i); });
        check_all(run_op("Add", {{"a", a}, {"b", f32(Shape{4}, {0.0, 0.0, 0.0, 0.0})}},
                         {DType::f32}, cfg)[0],
                  {d, as_f32(d2), as_f32(-d2), as_f32(d2)}, Cmp::exact_signed,
                  [&](std::size_t i) { return c + " Add denormal #" + std::to_string(i); });
        check_all(run_op("Relu", {{"a", a}}, {DType::f32}, cfg)[0],
                  {d, as_f32(d2), 0.0, as_f32(d2)}, Cmp::exact,
                  [&](std::size_t i) { return c + " Relu denormal #" + std::to_string(i); });
        // A sum of denormals is a (larger) denormal, not 0.
        std::vector<double> v(37, d);
        const Tensor s = run_op("ReduceSum", {{"x", f32(Shape{1, 37}, v)}}, {DType::f32}, cfg,
                                [](onnx::NodeProto* n) { set_int(n, "keepdims", 0); })[0];
        CHECK(get(s, 0) == as_f32(37 * d));
    }
}

namespace {

/// Rows of a [8, 37] matrix: ordinary values, then one NaN, +Inf, -Inf, +Inf with -Inf, NaN
/// with +Inf, all denormal, all -0.0 (specials on different SIMD lanes and in the tail).
std::vector<std::vector<double>> reduction_rows() {
    std::vector<std::vector<double>> rows(8, std::vector<double>(37));
    for (std::size_t r = 0; r < 6; ++r)
        for (std::size_t c = 0; c < 37; ++c)
            rows[r][c] = 0.9 + 0.2 * static_cast<double>((c * 13 + r * 5) % 37) / 37.0 -
                         (c % 4 == 1 ? 1.5 : 0.0);
    rows[1][5] = kNaN;
    rows[2][20] = kInf;
    rows[3][36] = -kInf;
    rows[4][0] = kInf;
    rows[4][17] = -kInf;
    rows[5][30] = kNaN;
    rows[5][3] = kInf;
    for (auto& v : rows[6]) v = kDen;
    for (auto& v : rows[7]) v = -0.0;
    for (auto& row : rows)
        for (auto& v : row) v = as_f32(v);
    return rows;
}

struct Reduction {
    const char* op;
    std::function<double(const std::vector<double>&)> f;
};

double sum_of(const std::vector<double>& v, const std::function<double(double)>& g) {
    double s = 0;
    for (double x : v) s += g(x);
    return s;
}

double max_of(const std::vector<double>& v) {
    double m = -kInf;
    for (double x : v) {
        if (std::isnan(x)) return kNaN;
        m = std::max(m, x);
    }
    return m;
}

double min_of(const std::vector<double>& v) {
    double m = kInf;
    for (double x : v) {
        if (std::isnan(x)) return kNaN;
        m = std::min(m, x);
    }
    return m;
}

}  // namespace

TEST_CASE("special values: reductions propagate NaN and Inf (contiguous and strided axes)",
          "[special]") {
    const auto id = [](double x) { return x; };
    const std::vector<Reduction> ops = {
        {"ReduceSum", [&](const auto& v) { return sum_of(v, id); }},
        {"ReduceMean",
         [&](const auto& v) { return sum_of(v, id) / static_cast<double>(v.size()); }},
        {"ReduceMax", max_of},
        {"ReduceMin", min_of},
        {"ReduceProd",
         [](const auto& v) {
             double p = 1;
             for (double x : v) p *= x;
             return p;
         }},
        {"ReduceSumSquare",
         [](const auto& v) { return sum_of(v, [](double x) { return x * x; }); }},
        {"ReduceL1",
         [](const auto& v) { return sum_of(v, [](double x) { return std::fabs(x); }); }},
        {"ReduceL2",
         [](const auto& v) { return std::sqrt(sum_of(v, [](double x) { return x * x; })); }},
        // log(sum(exp(x))): +Inf in the row gives +Inf (the limit; not the NaN of Inf - Inf).
        {"ReduceLogSumExp",
         [](const auto& v) {
             const double m = max_of(v);
             if (std::isnan(m)) return kNaN;
             if (std::isinf(m)) return m;
             return m + std::log(sum_of(v, [m](double x) { return std::exp(x - m); }));
         }},
    };
    const auto rows = reduction_rows();
    const std::int64_t R = static_cast<std::int64_t>(rows.size()), C = 37;
    std::vector<double> flat, transposed(static_cast<std::size_t>(R * C));
    for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
    for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t c = 0; c < C; ++c)
            transposed[static_cast<std::size_t>(c * R + r)] =
                rows[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)];
    for (const Config& cfg : configs()) {
        for (const Reduction& op : ops) {
            std::vector<double> expected;
            for (const auto& row : rows) expected.push_back(op.f(row));
            // Opset 17: axes is an attribute of all but ReduceSum (an input since opset 13).
            const bool sum = std::string(op.op) == "ReduceSum";
            for (int layout = 0; layout < 2; ++layout) {
                const Tensor x =
                    layout == 0 ? f32(Shape{R, C}, flat) : f32(Shape{C, R}, transposed);
                const std::int64_t axis = layout == 0 ? 1 : 0;
                std::vector<Input> ins = {{"x", x}};
                if (sum)
                    ins.push_back(
                        {"axes", Tensor::from_vector<std::int64_t>(Shape{1}, {axis}), true});
                const Tensor y = run_op(op.op, ins, {DType::f32}, cfg, [&](onnx::NodeProto* n) {
                    set_int(n, "keepdims", 0);
                    if (!sum) set_ints(n, "axes", {axis});
                })[0];
                check_all(y, expected, Cmp::close, [&](std::size_t i) {
                    return std::string(cfg.name) + " " + op.op + " row " + std::to_string(i) +
                           (layout == 0 ? " (contiguous)" : " (strided)");
                });
            }
        }
    }
}

TEST_CASE("special values: Softmax / LogSoftmax / LayerNormalization keep bad rows to themselves",
          "[special]") {
    const auto rows = reduction_rows();
    const std::int64_t R = static_cast<std::int64_t>(rows.size()), C = 37;
    std::vector<double> flat;
    for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
    const std::vector<double> ones(37, 1.0), zeros(37, 0.0);
    for (const Config& cfg : configs()) {
        const std::string c = cfg.name;
        const Tensor sm = run_op("Softmax", {{"x", f32(Shape{R, C}, flat)}}, {DType::f32}, cfg,
                                 [](onnx::NodeProto* n) { set_int(n, "axis", -1); })[0];
        const Tensor lsm = run_op("LogSoftmax", {{"x", f32(Shape{R, C}, flat)}}, {DType::f32}, cfg,
                                  [](onnx::NodeProto* n) { set_int(n, "axis", -1); })[0];
        const Tensor ln =
            run_op("LayerNormalization",
                   {{"x", f32(Shape{R, C}, flat)},
                    {"g", f32(Shape{C}, ones), true},
                    {"b", f32(Shape{C}, zeros), true}},
                   {DType::f32}, cfg, [](onnx::NodeProto* n) { set_int(n, "axis", -1); })[0];
        for (std::size_t r = 0; r < rows.size(); ++r) {
            const auto& row = rows[r];
            const bool has_nan =
                std::any_of(row.begin(), row.end(), [](double v) { return std::isnan(v); });
            const bool has_pinf =
                std::any_of(row.begin(), row.end(), [](double v) { return v == kInf; });
            const bool has_inf =
                std::any_of(row.begin(), row.end(), [](double v) { return std::isinf(v); });
            double m = -kInf;
            for (double v : row) m = std::max(m, v);
            double s = 0, mean = 0, var = 0;
            for (double v : row) s += std::exp(v - m), mean += v;
            mean /= C;
            for (double v : row) var += (v - mean) * (v - mean);
            var /= C;
            for (std::size_t k = 0; k < row.size(); ++k) {
                const std::int64_t i = static_cast<std::int64_t>(r * row.size() + k);
                INFO(c << " row " << r << " col " << k << " x=" << show(row[k]));
                const double p = get(sm, i), lp = get(lsm, i), l = get(ln, i);
                if (has_nan) {
                    // A NaN in the row: the whole row is NaN, on every configuration.
                    CHECK(std::isnan(p));
                    CHECK(std::isnan(lp));
                    CHECK(std::isnan(l));
                } else if (has_pinf) {
                    // +Inf (the reference's IEEE evaluation, on every configuration): exp(+Inf)
                    // makes the sum +Inf, so the +Inf itself gives Inf / Inf = NaN and the rest
                    // 0 (LogSoftmax: x - Inf = -Inf).
                    CHECK(matches(p, row[k] == kInf ? kNaN : 0.0, Cmp::exact));
                    CHECK(matches(lp, row[k] == kInf ? kNaN : -kInf, Cmp::exact));
                    CHECK((std::isnan(l)));
                } else {
                    CHECK(matches(p, std::exp(row[k] - m) / s, Cmp::close));
                    CHECK(matches(lp, row[k] - m - std::log(s), Cmp::close));
                    if (has_inf)
                        CHECK(std::isnan(l));  // mean is -Inf: x - mean is NaN or Inf
                    else
                        CHECK(matches(l, (row[k] - mean) / std::sqrt(var + 1e-5), Cmp::close));
                }
            }
        }
    }
}

TEST_CASE("special values: MatMul propagates NaN and gives 0 * Inf = NaN (packed weights too)",
          "[special]") {
    constexpr std::int64_t M = 4, K = 37, N = 5;
    std::vector<double> a(M * K), b(K * N);
    for (std::int64_t i = 0; i < M * K; ++i)
        a[static_cast<std::size_t>(i)] = as_f32(0.25 + 0.01 * static_cast<double>(i % 11));
    for (std::int64_t i = 0; i < K * N; ++i)
        b[static_cast<std::size_t>(i)] = as_f32(-0.5 + 0.02 * static_cast<double>(i % 7));
    a[1 * K + 3] = kNaN;  // row 1: NaN
    for (std::int64_t k = 0; k < K; ++k)
        a[static_cast<std::size_t>(2 * K + k)] = 0.0;  // row 2: zeros
    a[0 * K + 10] = 0.5;
    a[3 * K + 10] = -0.25;
    b[10 * N + 2] = kInf;  // B[10][2] = +Inf
    for (const Config& cfg : configs()) {
        for (bool constant_b : {false, true}) {
            const Tensor y = run_op(
                "MatMul", {{"a", f32(Shape{M, K}, a)}, {"b", f32(Shape{K, N}, b), constant_b}},
                {DType::f32}, cfg)[0];
            for (std::int64_t i = 0; i < M; ++i)
                for (std::int64_t j = 0; j < N; ++j) {
                    double e = 0;
                    for (std::int64_t k = 0; k < K; ++k)
                        e += a[static_cast<std::size_t>(i * K + k)] *
                             b[static_cast<std::size_t>(k * N + j)];
                    const double v = get(y, i * N + j);
                    INFO(cfg.name << (constant_b ? " constant B" : " input B") << " y[" << i << "]["
                                  << j << "]");
                    CHECK(matches(v, e, Cmp::close));
                }
        }
    }
}

namespace {

/// The expected order of TopK: indices sorted by (value, NaN highest) descending for largest,
/// ascending otherwise; ties by lower index. Independent of the kernel's implementation.
std::vector<std::int64_t> topk_order(const std::vector<double>& row, bool largest) {
    std::vector<std::int64_t> idx(row.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int64_t>(i);
    auto above = [&](std::int64_t x, std::int64_t y) {
        const double a = row[static_cast<std::size_t>(x)], b = row[static_cast<std::size_t>(y)];
        // NaN above everything, +Inf included.
        if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && !std::isnan(b);
        return a > b;
    };
    std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t x, std::int64_t y) {
        return largest ? above(x, y) : above(y, x);
    });
    return idx;
}

std::int64_t arg_expected(const std::vector<double>& row, bool is_max, bool last) {
    std::int64_t best = 0;
    for (std::size_t k = 1; k < row.size(); ++k) {
        const double v = row[k], b = row[static_cast<std::size_t>(best)];
        bool take;
        if (std::isnan(v) || std::isnan(b))
            take = std::isnan(v) && !std::isnan(b);
        else
            take = is_max ? v > b : v < b;
        const bool tie = (std::isnan(v) && std::isnan(b)) || v == b;
        if (take || (last && tie)) best = static_cast<std::int64_t>(k);
    }
    return best;
}

}  // namespace

TEST_CASE("special values: ArgMax / ArgMin / TopK order NaN deterministically", "[special]") {
    const std::vector<std::vector<double>> rows = {
        {3, kNaN, 5, kNaN, 1, 5, -kInf, kInf, 0},
        {2, 7, -1, 7, -kInf, 3, 3, -0.0, 0},
        {-0.0, 0, 0, -0.0, 0, -0.0, 0, 0, -0.0},
        {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN},
        {kInf, kNaN, -kInf, kInf, kDen, -kDen, kNaN, 1, -1},
    };
    const std::int64_t R = static_cast<std::int64_t>(rows.size()), C = 9, k = 4;
    std::vector<double> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    for (DType dt : {DType::f32, DType::f64, DType::f16}) {
        for (const Config& cfg : configs()) {
            INFO(cfg.name << " " << dtype_name(dt));
            const Tensor x = typed(dt, Shape{R, C}, flat);
            // Expectations from the values as stored (float16 rounds the denormals to ±0).
            std::vector<std::vector<double>> stored(rows.size(), std::vector<double>(C));
            for (std::int64_t r = 0; r < R; ++r)
                for (std::int64_t c = 0; c < C; ++c)
                    stored[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)] =
                        get(x, r * C + c);
            for (int is_max = 0; is_max < 2; ++is_max)
                for (int last = 0; last < 2; ++last) {
                    const Tensor y = run_op(is_max ? "ArgMax" : "ArgMin", {{"x", x}}, {DType::i64},
                                            cfg, [&](onnx::NodeProto* n) {
                                                set_int(n, "axis", 1);
                                                set_int(n, "keepdims", 0);
                                                set_int(n, "select_last_index", last);
                                            })[0];
                    for (std::int64_t r = 0; r < R; ++r)
                        CHECK(y.data<std::int64_t>()[r] ==
                              arg_expected(stored[static_cast<std::size_t>(r)], is_max != 0,
                                           last != 0));
                }
            for (int largest = 0; largest < 2; ++largest) {
                std::vector<Tensor> first;
                for (int rep = 0; rep < 2; ++rep) {
                    const std::vector<Tensor> out = run_op(
                        "TopK",
                        {{"x", x}, {"k", Tensor::from_vector<std::int64_t>(Shape{1}, {k}), true}},
                        {dt, DType::i64}, cfg, [&](onnx::NodeProto* n) {
                            set_int(n, "axis", -1);
                            set_int(n, "largest", largest);
                        });
                    REQUIRE(out.size() == 2);
                    for (std::int64_t r = 0; r < R; ++r) {
                        const auto order =
                            topk_order(stored[static_cast<std::size_t>(r)], largest != 0);
                        for (std::int64_t j = 0; j < k; ++j) {
                            INFO("largest=" << largest << " row " << r << " position " << j);
                            const std::int64_t want = order[static_cast<std::size_t>(j)];
                            CHECK(out[1].data<std::int64_t>()[r * k + j] == want);
                            CHECK(matches(
                                get(out[0], r * k + j),
                                stored[static_cast<std::size_t>(r)][static_cast<std::size_t>(want)],
                                Cmp::exact));
                        }
                    }
                    if (rep == 0) {
                        first = out;
                    } else {
                        for (std::size_t o = 0; o < 2; ++o)
                            CHECK(std::memcmp(first[o].raw_data(), out[o].raw_data(),
                                              out[o].num_bytes()) == 0);
                    }
                }
            }
        }
    }
}

TEST_CASE("special values: Unique sorts NaN last as one value and float-to-int Cast is defined",
          "[special]") {
    for (const Config& cfg : configs()) {
        INFO(cfg.name);
        const std::vector<Tensor> u =
            run_op("Unique", {{"x", f32(Shape{8}, {3, kNaN, 1, kNaN, 3, -0.0, 0.0, kInf})}},
                   {DType::f32, DType::i64, DType::i64, DType::i64}, cfg,
                   [](onnx::NodeProto* n) { set_int(n, "sorted", 1); });
        REQUIRE(u[0].num_elements() == 5);
        CHECK(get(u[0], 0) == 0.0);
        CHECK(get(u[0], 1) == 1.0);
        CHECK(get(u[0], 2) == 3.0);
        CHECK(get(u[0], 3) == kInf);
        CHECK(std::isnan(get(u[0], 4)));
        // Cast: NaN -> 0, out-of-range values saturate (no UB).
        const std::vector<double> v = {kNaN, kInf, -kInf, 3e9, -3e9, 1.5, -1.5, -0.0, -kNaN};
        const Tensor x = f32(Shape{9}, v);
        auto cast = [&](DType to) {
            return run_op("Cast", {{"x", x}}, {to}, cfg,
                          [&](onnx::NodeProto* n) { set_int(n, "to", to_onnx_dtype(to)); })[0];
        };
        const Tensor i32 = cast(DType::i32);
        const std::vector<std::int32_t> e32 = {0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN,
                                               1, -1,        0,         0};
        for (std::size_t i = 0; i < v.size(); ++i) CHECK(i32.data<std::int32_t>()[i] == e32[i]);
        const Tensor u8 = cast(DType::u8);
        const std::vector<std::uint8_t> eu8 = {0, 255, 0, 255, 0, 1, 0, 0, 0};
        for (std::size_t i = 0; i < v.size(); ++i) CHECK(u8.data<std::uint8_t>()[i] == eu8[i]);
        const Tensor i64 = cast(DType::i64);
        const std::vector<std::int64_t> e64 = {
            0, INT64_MAX, INT64_MIN, 3000000000LL, -3000000000LL, 1, -1, 0, 0};
        for (std::size_t i = 0; i < v.size(); ++i) CHECK(i64.data<std::int64_t>()[i] == e64[i]);
    }
}

TEST_CASE("special values: node conformance tests with special inputs (part 1 of 4)",
          "[special][sweep]") {
    run_sweep_shard(0, 4);
}
TEST_CASE("special values: node conformance tests with special inputs (part 2 of 4)",
          "[special][sweep]") {
    run_sweep_shard(1, 4);
}
TEST_CASE("special values: node conformance tests with special inputs (part 3 of 4)",
          "[special][sweep]") {
    run_sweep_shard(2, 4);
}
TEST_CASE("special values: node conformance tests with special inputs (part 4 of 4)",
          "[special][sweep]") {
    run_sweep_shard(3, 4);
}
