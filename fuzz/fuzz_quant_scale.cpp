// Fuzz target: scale and zero-point arithmetic of the quantization ops on adversarial float
// arrays (the quantizer of a later step will get its own target; today the scale computation
// lives in DynamicQuantizeLinear).
//
// One-node graphs run on the reference kernels (EngineOptions::backends = {"reference"}):
//   DynamicQuantizeLinear  x f32 [n] -> y u8, y_scale, y_zero_point
//   QuantizeLinear         x f32/f16/f64, scale (initializer or run-time input), zero point of
//                          u8/i8/u16/i16, per tensor / per axis / blocked (opset 21)
//   DequantizeLinear       x of u8/i8/u16/i16/i32, f32 scale, zero point, same layouts
// Arrays mix NaN, ±Inf, denormals, -0.0, FLT_MAX/FLT_MIN, constant arrays and scaled ranges.
//
// Invariants: no crash and no UBSan report (float->int conversion of NaN/Inf, signed overflow);
// constant scales that are 0, negative, NaN or Inf are refused at load as invalid_model, every
// other configuration loads and runs; and the outputs equal a reference written here from the
// ONNX spec:
//   DynamicQuantizeLinear (finite or not; NaN elements are skipped by the range, as the kernel
//   documents): scale = fl32((max(0,max x) - min(0,min x)) / 255), zp = clamp(rint(-min/scale)),
//   y = clamp(rint(x/scale) + zp) — bit-exact; all-zero ranges give scale 1 (as ONNX Runtime),
//   a scale that underflows to 0 or overflows to Inf gives zp 0 and y = 0.
//   QuantizeLinear: y = saturate(rint(x/scale) + zp), the division in x's precision — exact,
//   including saturation to the type range for huge and infinite quotients; NaN maps to zp.
//   DequantizeLinear: y = float(x - zp) * scale — exact.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_common.hpp"

namespace {

using namespace dsinfer;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float special_float(fuzz::ByteReader& in) {
    static const std::array<float, 24> v = {
        0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 127.5f, 128.5f, -128.5f, 255.5f, 3.0f, -7.25f,
        kNaN, -kNaN, kInf, -kInf, std::numeric_limits<float>::denorm_min(),
        -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
        -std::numeric_limits<float>::min(), std::numeric_limits<float>::max(),
        -std::numeric_limits<float>::max(), 1e-30f, 65504.0f};
    switch (in.pick(4)) {
        case 0: return in.f32();  // any bit pattern
        case 1: return static_cast<float>(static_cast<int>(in.pick(64)) - 32) * 0.37f;
        default: return v[in.pick(v.size())];
    }
}

std::vector<float> float_array(fuzz::ByteReader& in, std::size_t n) {
    std::vector<float> x(n);
    const std::uint32_t mode = in.pick(8);
    static const std::array<float, 7> ranges = {1e-38f, 1e-30f, 1e-6f, 1.0f, 1e6f, 1e30f, 1e38f};
    const float range = ranges[in.pick(ranges.size())];
    for (std::size_t i = 0; i < n; ++i) {
        if (mode == 0 && i > 0) {  // constant array
            x[i] = x[0];
        } else if (mode == 1) {  // finite values in one range
            x[i] = static_cast<float>(static_cast<int>(in.pick(256)) - 128) / 128.0f * range;
        } else {
            x[i] = special_float(in);
        }
    }
    return x;
}

float scale_value(fuzz::ByteReader& in, bool adversarial) {
    static const std::array<float, 10> good = {
        1.0f, 0.5f, 1e-3f, 3.7f, 0.1f, std::numeric_limits<float>::min(),
        std::numeric_limits<float>::denorm_min(), 1e30f, std::numeric_limits<float>::max(), 2e-40f};
    static const std::array<float, 6> bad = {0.0f, -0.0f, -1.0f, kNaN, kInf, -kInf};
    if (adversarial) return bad[in.pick(bad.size())];
    return good[in.pick(good.size())];
}

struct QType {
    DType dtype;
    int onnx;
    double lo, hi;
};
constexpr std::array<QType, 5> kQTypes = {{{DType::u8, 2, 0, 255},
                                           {DType::i8, 3, -128, 127},
                                           {DType::u16, 4, 0, 65535},
                                           {DType::i16, 5, -32768, 32767},
                                           {DType::i32, 6, -2147483648.0, 2147483647.0}}};

double read_q(const Tensor& t, std::int64_t i) {
    const auto k = static_cast<std::size_t>(i);
    switch (t.dtype()) {
        case DType::u8: return t.data<std::uint8_t>()[k];
        case DType::i8: return t.data<std::int8_t>()[k];
        case DType::u16: return t.data<std::uint16_t>()[k];
        case DType::i16: return t.data<std::int16_t>()[k];
        case DType::i32: return t.data<std::int32_t>()[k];
        default: fuzz::fail("unexpected quantized dtype");
    }
}

void write_q(Tensor& t, std::int64_t i, std::int64_t v) {
    const auto k = static_cast<std::size_t>(i);
    switch (t.dtype()) {
        case DType::u8: t.data<std::uint8_t>()[k] = static_cast<std::uint8_t>(v); break;
        case DType::i8: t.data<std::int8_t>()[k] = static_cast<std::int8_t>(v); break;
        case DType::u16: t.data<std::uint16_t>()[k] = static_cast<std::uint16_t>(v); break;
        case DType::i16: t.data<std::int16_t>()[k] = static_cast<std::int16_t>(v); break;
        case DType::i32: t.data<std::int32_t>()[k] = static_cast<std::int32_t>(v); break;
        default: fuzz::fail("unexpected quantized dtype");
    }
}

bool same_float(float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0 ||
           (a == b && a != 0.0f);
}

onnx::TensorProto tensor_proto(const std::string& name, const Tensor& t) {
    std::vector<std::int64_t> dims = t.shape().to_vector();
    return fuzz::raw_tensor(name, to_onnx_dtype(t.dtype()), dims, t.raw_data(), t.num_bytes());
}

/// Compiles `m` on the reference kernels. Returns null (after checking the code) on failure.
std::unique_ptr<InferenceEngine> compile(const onnx::ModelProto& m, ErrorCode* code) {
    const std::string bytes = fuzz::serialize(m);
    std::unique_ptr<InferenceEngine> engine;
    *code = fuzz::expect_typed(
        [&] {
            EngineOptions o;
            o.backends = {"reference"};
            o.optimization_level = 0;
            o.num_threads = 1;
            Graph g = load_onnx_from_bytes(bytes.data(), bytes.size());
            engine = std::make_unique<InferenceEngine>(InferenceEngine::compile(std::move(g), o));
        },
        "compile");
    return engine;
}

std::vector<NamedTensor> run(const InferenceEngine& e, const std::vector<NamedTensor>& inputs,
                             const char* what) {
    std::vector<NamedTensor> out;
    const Status st = e.try_run(inputs, out);
    if (!st.is_ok()) fuzz::fail(std::string(what) + ": a valid case failed to run: " + st.to_string());
    return out;
}

void dynamic_case(fuzz::ByteReader& in) {
    const std::size_t n = in.pick(65);
    const std::vector<float> x = float_array(in, n);
    auto m = fuzz::new_model(in.flag() ? 11 : 20, "dql");
    auto& g = *m.mutable_graph();
    *g.add_input() = fuzz::tensor_info("x", 1, {static_cast<std::int64_t>(n)});
    fuzz::add_node(g, "DynamicQuantizeLinear", {"x"}, {"y", "s", "z"});
    *g.add_output() = fuzz::tensor_info("y", 2, {static_cast<std::int64_t>(n)});
    *g.add_output() = fuzz::tensor_info("s", 1, {});
    *g.add_output() = fuzz::tensor_info("z", 2, {});
    ErrorCode code;
    auto e = compile(m, &code);
    if (!e) fuzz::fail("DynamicQuantizeLinear model failed to compile: " + std::string(to_string(code)));
    auto out = run(*e, {{"x", Tensor::from_vector<float>({static_cast<std::int64_t>(n)}, x)}},
                   "DynamicQuantizeLinear");
    const auto* y = out[0].tensor.data<std::uint8_t>();
    const float scale = *out[1].tensor.data<float>();
    const std::uint8_t zp = *out[2].tensor.data<std::uint8_t>();

    // Reference (ONNX spec, float32 arithmetic; NaN elements skipped by the range).
    float lo = 0.0f, hi = 0.0f;
    for (float v : x)
        if (!std::isnan(v)) {
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        }
    float ref_scale, ref_zp = 0.0f;
    if (hi == lo) {
        ref_scale = 1.0f;  // all-zero range: scale 1, as ONNX Runtime
    } else {
        ref_scale = (hi - lo) / 255.0f;
    }
    const bool usable = ref_scale > 0.0f && std::isfinite(ref_scale);
    if (usable) ref_zp = std::clamp(std::nearbyint(0.0f - lo / ref_scale), 0.0f, 255.0f);
    const std::string ctx = " (n=" + std::to_string(n) + ", min " + std::to_string(lo) + ", max " +
                            std::to_string(hi) + ")";
    if (!same_float(scale, ref_scale))
        fuzz::fail("DynamicQuantizeLinear scale " + std::to_string(scale) + ", expected " +
                   std::to_string(ref_scale) + ctx);
    if (zp != static_cast<std::uint8_t>(ref_zp))
        fuzz::fail("DynamicQuantizeLinear zero point " + std::to_string(zp) + ", expected " +
                   std::to_string(ref_zp) + ctx);
    for (std::size_t i = 0; i < n; ++i) {
        double want = ref_zp;
        if (usable && !std::isnan(x[i]))
            want = std::clamp(static_cast<double>(std::nearbyint(x[i] / ref_scale)) + ref_zp, 0.0, 255.0);
        if (y[i] != static_cast<std::uint8_t>(want))
            fuzz::fail("DynamicQuantizeLinear y[" + std::to_string(i) + "] = " + std::to_string(y[i]) +
                       " for x = " + std::to_string(x[i]) + ", expected " + std::to_string(want) + ctx);
    }
}

/// Shapes and parameter layout shared by QuantizeLinear and DequantizeLinear.
struct Layout {
    std::vector<std::int64_t> x_dims;
    std::vector<std::int64_t> param_dims;  // scale / zero point
    int axis = 1;                          // as normalized
    std::int64_t axis_attr = 1;
    std::int64_t block = 0;  // > 0: blocked
    bool set_axis = false;
};

Layout choose_layout(fuzz::ByteReader& in) {
    Layout l;
    const std::int64_t r = 1 + in.pick(4), c = in.pick(6);  // c may be 0
    l.x_dims = {r, c};
    switch (in.pick(4)) {
        case 0:  // per tensor, scalar
            break;
        case 1:  // per tensor, [1]
            l.param_dims = {1};
            break;
        case 2: {  // per axis
            l.axis = static_cast<int>(in.pick(2));
            l.axis_attr = in.flag() ? l.axis : l.axis - 2;
            l.set_axis = true;
            l.param_dims = {l.x_dims[static_cast<std::size_t>(l.axis)]};
            break;
        }
        default: {  // blocked along one axis
            l.axis = static_cast<int>(in.pick(2));
            l.axis_attr = l.axis;
            l.set_axis = true;
            static const std::array<std::int64_t, 6> blocks = {
                1, 2, 3, 7, std::int64_t{1} << 40, std::numeric_limits<std::int64_t>::max()};
            l.block = blocks[in.pick(blocks.size())];
            const std::int64_t len = l.x_dims[static_cast<std::size_t>(l.axis)];
            const std::int64_t nblocks = len == 0 ? 0 : (len - 1) / l.block + 1;
            l.param_dims = l.x_dims;
            l.param_dims[static_cast<std::size_t>(l.axis)] = nblocks;
            break;
        }
    }
    return l;
}

std::int64_t num_elements(const std::vector<std::int64_t>& d) {
    std::int64_t n = 1;
    for (auto v : d) n *= v;
    return n;
}

/// Index of the scale / zero point of x element (i, j) of a [r, c] x.
std::int64_t param_of(const Layout& l, std::int64_t i, std::int64_t j) {
    if (l.block > 0) {
        const std::int64_t pc = l.param_dims[1];
        return l.axis == 0 ? (i / l.block) * pc + j : i * pc + j / l.block;
    }
    if (l.set_axis) return l.axis == 0 ? i : j;
    return 0;
}

void set_layout_attrs(onnx::NodeProto* node, const Layout& l) {
    if (l.set_axis) fuzz::add_int_attr(node, "axis", l.axis_attr);
    if (l.block > 0) fuzz::add_int_attr(node, "block_size", l.block);
}

/// A one-node `op` graph (x, scale as an input or a constant, optional constant zero point ->
/// y) run once. With a bad constant scale, load must fail with invalid_model: returns nullopt.
std::optional<std::vector<NamedTensor>> run_one_node(const char* op, const Layout& l,
                                                     const Tensor& x, int x_onnx,
                                                     const Tensor& scale, int scale_onnx,
                                                     bool scale_is_input, const Tensor* zp,
                                                     int y_onnx, bool bad_scale) {
    auto m = fuzz::new_model(21, op);
    auto& g = *m.mutable_graph();
    *g.add_input() = fuzz::tensor_info("x", x_onnx, l.x_dims);
    std::vector<NamedTensor> inputs = {{"x", x}};
    if (scale_is_input) {
        *g.add_input() = fuzz::tensor_info("scale", scale_onnx, l.param_dims);
        inputs.push_back({"scale", scale});
    } else {
        *g.add_initializer() = tensor_proto("scale", scale);
    }
    std::vector<std::string> node_inputs = {"x", "scale"};
    if (zp != nullptr) {
        *g.add_initializer() = tensor_proto("zp", *zp);
        node_inputs.push_back("zp");
    }
    set_layout_attrs(fuzz::add_node(g, op, node_inputs, {"y"}), l);
    *g.add_output() = fuzz::tensor_info("y", y_onnx, l.x_dims);
    ErrorCode code;
    auto e = compile(m, &code);
    if (!scale_is_input && bad_scale) {
        if (code != ErrorCode::invalid_model)
            fuzz::fail(std::string(op) + " with a zero/negative/NaN/Inf constant scale: expected "
                       "invalid_model at load, got " + std::string(to_string(code)));
        return std::nullopt;
    }
    if (!e) fuzz::fail(std::string(op) + " model failed to compile: " + std::string(to_string(code)));
    return run(*e, inputs, op);
}

void quantize_case(fuzz::ByteReader& in) {
    const Layout l = choose_layout(in);
    const QType q = kQTypes[in.pick(4)];  // int32 is not a QuantizeLinear output type
    static const std::array<DType, 3> xtypes = {DType::f32, DType::f16, DType::f64};
    const DType xt = in.pick(4) == 0 ? xtypes[1 + in.pick(2)] : DType::f32;
    const std::int64_t nx = num_elements(l.x_dims), np = num_elements(l.param_dims);
    const std::vector<float> xv = float_array(in, static_cast<std::size_t>(nx));
    const bool scale_is_input = in.flag();
    const bool adversarial = in.pick(4) == 0;
    const bool has_zp = in.pick(4) != 0 || q.dtype != DType::u8;

    Tensor x = Tensor::empty(xt, Shape::make(l.x_dims).value());
    Tensor scale = Tensor::empty(xt, Shape::make(l.param_dims).value());
    Tensor zp = Tensor::empty(q.dtype, Shape::make(l.param_dims).value());
    for (std::int64_t i = 0; i < nx; ++i) {
        const auto k = static_cast<std::size_t>(i);
        if (xt == DType::f32) x.data<float>()[k] = xv[k];
        else if (xt == DType::f16) x.data<float16>()[k] = float16(xv[k]);
        else x.data<double>()[k] = in.pick(4) == 0 ? static_cast<double>(xv[k]) * 1e300 : xv[k];
    }
    bool bad_scale = false;
    for (std::int64_t i = 0; i < np; ++i) {
        const bool adv = adversarial && in.flag();
        const float s = scale_value(in, adv);
        const auto k = static_cast<std::size_t>(i);
        double stored;
        if (xt == DType::f32) stored = scale.data<float>()[k] = s;
        else if (xt == DType::f16) stored = static_cast<float>(scale.data<float16>()[k] = float16(s));
        else stored = scale.data<double>()[k] = static_cast<double>(s);
        if (!(stored > 0.0) || !std::isfinite(stored)) bad_scale = true;
        write_q(zp, i, static_cast<std::int64_t>(q.lo + static_cast<double>(in.u32() % static_cast<std::uint32_t>(std::min(q.hi - q.lo + 1, 4294967295.0)))));
    }

    const auto out = run_one_node("QuantizeLinear", l, x, to_onnx_dtype(xt), scale,
                                  to_onnx_dtype(xt), scale_is_input, has_zp ? &zp : nullptr,
                                  q.onnx, bad_scale);
    if (!out) return;  // a bad constant scale, refused at load as it must be
    const Tensor& y = (*out)[0].tensor;
    if (y.dtype() != q.dtype || y.shape().to_vector() != l.x_dims) fuzz::fail("QuantizeLinear output type/shape");
    if (bad_scale) return;  // run-time non-positive scales: only "no crash, no UB"
    for (std::int64_t i = 0; i < l.x_dims[0]; ++i)
        for (std::int64_t j = 0; j < l.x_dims[1]; ++j) {
            const std::int64_t e_ = i * l.x_dims[1] + j, p = param_of(l, i, j);
            const auto k = static_cast<std::size_t>(e_), pk = static_cast<std::size_t>(p);
            double quot;
            if (xt == DType::f32) {
                quot = x.data<float>()[k] / scale.data<float>()[pk];
            } else if (xt == DType::f16) {
                quot = static_cast<float>(float16(static_cast<float>(x.data<float16>()[k]) /
                                                  static_cast<float>(scale.data<float16>()[pk])));
            } else {
                quot = x.data<double>()[k] / scale.data<double>()[pk];
            }
            const double z = has_zp ? read_q(zp, p) : 0.0;
            const double want = std::isnan(quot) ? z : std::clamp(std::nearbyint(quot) + z, q.lo, q.hi);
            if (read_q(y, e_) != want)
                fuzz::fail("QuantizeLinear y[" + std::to_string(e_) + "] = " + std::to_string(read_q(y, e_)) +
                           ", expected saturate(rint(x/scale) + zp) = " + std::to_string(want) +
                           " (quotient " + std::to_string(quot) + ", " + std::string(dtype_name(q.dtype)) + ")");
        }
}

void dequantize_case(fuzz::ByteReader& in) {
    const Layout l = choose_layout(in);
    const QType q = kQTypes[in.pick(5)];
    const std::int64_t nx = num_elements(l.x_dims), np = num_elements(l.param_dims);
    const bool scale_is_input = in.flag();
    const bool adversarial = in.pick(4) == 0;
    const bool has_zp = q.dtype != DType::i32 && in.pick(4) != 0;
    Tensor x = Tensor::empty(q.dtype, Shape::make(l.x_dims).value());
    Tensor scale = Tensor::empty(DType::f32, Shape::make(l.param_dims).value());
    Tensor zp = Tensor::empty(q.dtype, Shape::make(l.param_dims).value());
    auto qvalue = [&] {
        switch (in.pick(4)) {
            case 0: return static_cast<std::int64_t>(q.lo);
            case 1: return static_cast<std::int64_t>(q.hi);
            default:
                return static_cast<std::int64_t>(q.lo) +
                       static_cast<std::int64_t>(in.u32() % static_cast<std::uint64_t>(q.hi - q.lo + 1));
        }
    };
    for (std::int64_t i = 0; i < nx; ++i) write_q(x, i, qvalue());
    bool bad_scale = false;
    for (std::int64_t i = 0; i < np; ++i) {
        const float s = in.pick(8) == 0 ? special_float(in) : scale_value(in, adversarial && in.flag());
        scale.data<float>()[static_cast<std::size_t>(i)] = s;
        if (!(s > 0.0f) || !std::isfinite(s)) bad_scale = true;
        write_q(zp, i, qvalue());
    }
    const auto out = run_one_node("DequantizeLinear", l, x, q.onnx, scale, 1, scale_is_input,
                                  has_zp ? &zp : nullptr, 1, bad_scale);
    if (!out) return;  // a bad constant scale, refused at load as it must be
    const Tensor& y = (*out)[0].tensor;
    if (y.dtype() != DType::f32 || y.shape().to_vector() != l.x_dims) fuzz::fail("DequantizeLinear output type/shape");
    for (std::int64_t i = 0; i < l.x_dims[0]; ++i)
        for (std::int64_t j = 0; j < l.x_dims[1]; ++j) {
            const std::int64_t e_ = i * l.x_dims[1] + j, p = param_of(l, i, j);
            const auto xq = static_cast<std::int64_t>(read_q(x, e_));
            const auto zq = has_zp ? static_cast<std::int64_t>(read_q(zp, p)) : 0;
            const float want = static_cast<float>(xq - zq) * scale.data<float>()[static_cast<std::size_t>(p)];
            const float got = y.data<float>()[static_cast<std::size_t>(e_)];
            if (!same_float(got, want))
                fuzz::fail("DequantizeLinear y[" + std::to_string(e_) + "] = " + std::to_string(got) +
                           ", expected (x - zp) * scale = " + std::to_string(want));
        }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::ByteReader in(data, size);
    switch (in.pick(3)) {
        case 0: dynamic_case(in); break;
        case 1: quantize_case(in); break;
        default: dequantize_case(in); break;
    }
    return 0;
}
