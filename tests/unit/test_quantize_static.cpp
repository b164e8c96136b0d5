// The quantizer (dsinfer/quantize.hpp): the run-time value observer it calibrates through,
// static INT8 to QDQ on a small CNN (every calibration method; the result runs on the INT8
// kernels after fuse_qdq and stays close to float32), the other Quantizer modes, the digits
// model's held-out accuracy, and bad inputs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <dsinfer/dsinfer.hpp>
#include <dsinfer/quantize.hpp>

#include "unit/engine_models.hpp"

namespace dsinfer::test {
namespace {

namespace fs = std::filesystem;
using std::int64_t;

SymbolicShape batch_shape(std::vector<int64_t> rest) {
    SymbolicShape s;
    s.known = true;
    s.dims.push_back(Dim::named("N"));
    for (int64_t d : rest) s.dims.push_back(Dim::fixed(d));
    return s;
}

Tensor positive_f32(const std::vector<int64_t>& dims, std::uint32_t seed) {
    Tensor t = random_f32(dims, seed, 0.5f);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = 1.f + t.data<float>()[i];
    return t;
}

/// x [N,3,16,16] -> Conv 3x3 (bias) -> BatchNorm -> Relu (a) -> MaxPool 2x2 (b) -> Conv 3x3 (c)
/// -> Relu (d) -> Conv 1x1 (e) -> Add(e, b) (f) -> Relu (g) -> GlobalAveragePool (h) ->
/// Flatten (i) -> Gemm transB (y [N,5]). `sensitive_fc`: each row of the Gemm's weight has one
/// weight 100x the others, so per-channel INT8 rounds the rest of the row coarsely (the layer
/// the precision controller must keep float).
Graph mini_cnn(bool sensitive_fc = false) {
    Graph g;
    g.name = "mini_cnn";
    g.opset_imports = {{"", 17}};
    const ValueId x = g.add_value("x", DType::f32, batch_shape({3, 16, 16}));
    g.inputs.push_back(x);
    const ValueId w1 = g.add_initializer("w1", random_f32({8, 3, 3, 3}, 1, 0.4f));
    const ValueId b1 = g.add_initializer("b1", random_f32({8}, 2, 0.1f));
    const ValueId bn_s = g.add_initializer("bn_scale", positive_f32({8}, 3));
    const ValueId bn_b = g.add_initializer("bn_bias", random_f32({8}, 4, 0.1f));
    const ValueId bn_m = g.add_initializer("bn_mean", random_f32({8}, 5, 0.1f));
    const ValueId bn_v = g.add_initializer("bn_var", positive_f32({8}, 6));
    const ValueId w2 = g.add_initializer("w2", random_f32({8, 8, 3, 3}, 7, 0.2f));
    const ValueId w3 = g.add_initializer("w3", random_f32({8, 8, 1, 1}, 8, 0.3f));
    Tensor wf_t = random_f32({5, 8}, 9, 0.5f);
    if (sensitive_fc)
        for (int64_t r = 0; r < 5; ++r) wf_t.data<float>()[r * 8 + r] = 50.f;
    const ValueId wf = g.add_initializer("wf", wf_t);
    const ValueId bf = g.add_initializer("bf", random_f32({5}, 10, 0.1f));
    ValueId c1 = g.add_value("c1"), bn = g.add_value("bn"), a = g.add_value("a"),
            b = g.add_value("b"), c = g.add_value("c"), d = g.add_value("d"),
            e = g.add_value("e"), f = g.add_value("f"), gg = g.add_value("g"),
            h = g.add_value("h"), i = g.add_value("i"), y = g.add_value("y");
    Node& conv1 = g.add_node("Conv", {x, w1, b1}, {c1}, "conv1");
    conv1.attributes.emplace_back("pads", attr_ints({1, 1, 1, 1}));
    g.add_node("BatchNormalization", {c1, bn_s, bn_b, bn_m, bn_v}, {bn}, "bn1");
    g.add_node("Relu", {bn}, {a}, "relu1");
    Node& pool = g.add_node("MaxPool", {a}, {b}, "pool");
    pool.attributes.emplace_back("kernel_shape", attr_ints({2, 2}));
    pool.attributes.emplace_back("strides", attr_ints({2, 2}));
    Node& conv2 = g.add_node("Conv", {b, w2}, {c}, "conv2");
    conv2.attributes.emplace_back("pads", attr_ints({1, 1, 1, 1}));
    g.add_node("Relu", {c}, {d}, "relu2");
    g.add_node("Conv", {d, w3}, {e}, "conv3");
    g.add_node("Add", {e, b}, {f}, "residual");
    g.add_node("Relu", {f}, {gg}, "relu3");
    g.add_node("GlobalAveragePool", {gg}, {h}, "gap");
    g.add_node("Flatten", {h}, {i}, "flatten");
    Node& fc = g.add_node("Gemm", {i, wf, bf}, {y}, "fc");
    fc.attributes.emplace_back("transB", attr_i(1));
    g.outputs.push_back(y);
    REQUIRE(g.sort_topologically().is_ok());
    return g;
}

std::vector<std::vector<NamedTensor>> cnn_batches(int count, int64_t batch, std::uint32_t seed) {
    std::vector<std::vector<NamedTensor>> out;
    for (int k = 0; k < count; ++k)
        out.push_back({{"x", random_f32({batch, 3, 16, 16}, seed + static_cast<std::uint32_t>(k), 1.f)}});
    return out;
}

double cosine(const Tensor& a, const Tensor& b) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t k = 0; k < a.num_elements(); ++k) {
        const double x = a.data<float>()[k], y = b.data<float>()[k];
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    return ab / std::sqrt(aa * bb);
}

Tensor run1(const InferenceEngine& e, const std::vector<NamedTensor>& in) { return e.run(in)[0].tensor; }

int count_ops(const Graph& g, const std::string& op) {
    return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(),
                                          [&](const Node& n) { return n.op_type == op; }));
}

/// Collects every value it is shown.
struct Recorder final : ValueObserver {
    std::map<std::string, std::vector<float>> seen;
    void observe(std::string_view name, const TensorView& v) noexcept override {
        if (v.dtype != DType::f32) return;
        seen[std::string(name)].assign(v.data<float>(), v.data<float>() + v.num_elements());
    }
};

}  // namespace

TEST_CASE("observer: sees node outputs; observed_values keeps fused-away values visible",
          "[quantize_static]") {
    const auto in = cnn_batches(1, 2, 100)[0];
    // Level 0: every value is computed and shown.
    EngineOptions plain;
    plain.optimization_level = 0;
    const InferenceEngine e0 = InferenceEngine::compile(mini_cnn(), plain);
    Recorder all;
    RunOptions ro;
    ro.observer = &all;
    (void)e0.run(in, ro);
    for (const char* name : {"c1", "a", "b", "c", "e", "f", "h", "y"}) CHECK(all.seen.count(name) == 1);
    // Level 3: conv2 + relu2 fuse, so "c" is internal and not shown ...
    const InferenceEngine e3 = InferenceEngine::compile(mini_cnn());
    Recorder fused;
    ro.observer = &fused;
    (void)e3.run(in, ro);
    CHECK(fused.seen.count("c") == 0);
    // ... unless it is observed: then it is computed with the values level 0 gave.
    EngineOptions keep;
    keep.observed_values = {"c", "e"};
    const InferenceEngine ek = InferenceEngine::compile(mini_cnn(), keep);
    Recorder kept;
    ro.observer = &kept;
    const Tensor y = ek.run(in, ro)[0].tensor;
    for (const char* name : {"c", "e"}) {
        INFO(name);
        REQUIRE(kept.seen.count(name) == 1);
        const auto& got = kept.seen[name];
        const auto& want = all.seen[name];
        REQUIRE(got.size() == want.size());
        for (std::size_t k = 0; k < got.size(); ++k) REQUIRE(got[k] == Approx(want[k]).margin(1e-4));
    }
    CHECK(max_rel_diff(y, run1(e0, in)) < 1e-4);
    // Without an observer, nothing changes; a name the graph lacks is refused at load.
    CHECK(max_rel_diff(ek.run(in)[0].tensor, y) == 0.0);
    EngineOptions bad;
    bad.observed_values = {"no_such_value"};
    try {
        (void)InferenceEngine::compile(mini_cnn(), bad);
        FAIL("observed_values with an unknown name loaded");
    } catch (const Error& err) {
        CHECK(err.code() == ErrorCode::invalid_argument);
        CHECK_THAT(err.what(), Catch::Contains("no_such_value"));
    }
}

TEST_CASE("quantize_static: a CNN becomes QDQ that runs on the INT8 kernels, close to float32",
          "[quantize_static]") {
    const Graph fp32 = mini_cnn();
    const InferenceEngine ref = InferenceEngine::compile(Graph(fp32));
    const auto held_out = cnn_batches(2, 3, 900);
    for (const CalibrationMethod method : {CalibrationMethod::minmax, CalibrationMethod::percentile,
                                           CalibrationMethod::entropy, CalibrationMethod::mse}) {
        INFO(to_string(method));
        Graph g = fp32;
        auto data = calibration_batches(cnn_batches(6, 4, 10));
        StaticQuantizeOptions o;
        o.calibration.method = method;
        std::vector<std::size_t> progress;
        o.calibration.progress = [&](std::string_view phase, std::size_t done, std::size_t total) {
            CHECK(phase == "calibration");
            CHECK(total == 6);
            progress.push_back(done);
        };
        const StaticQuantizeReport r = quantize_static(g, *data, o).value_or_throw();
        CHECK(progress == std::vector<std::size_t>{1, 2, 3, 4, 5, 6});
        CHECK_FALSE(r.already_quantized);
        CHECK(r.calibration.batches == 6);
        // conv1 (BatchNorm folded), pool, conv2, conv3, residual, gap, flatten, fc.
        CHECK(r.quantized_nodes == 8);
        CHECK(count_ops(g, "BatchNormalization") == 0);
        CHECK(count_ops(g, "QuantizeLinear") == static_cast<int>(r.quantized_tensors));
        for (const TensorRange& t : r.calibration.ranges) {
            INFO(t.name);
            CHECK(t.lo <= 0.f);
            CHECK(t.hi >= 0.f);
            CHECK(t.lo >= std::min(t.min, 0.f));
            CHECK(t.hi <= std::max(t.max, 0.f));
            CHECK(t.nonfinite == 0);
        }
        // Weights are int8 in the graph; the float ones are gone.
        for (const Value& v : g.values)
            if (v.initializer && v.initializer->num_elements() >= 64)
                CHECK(v.initializer->dtype() != DType::f32);
        // dsinfer runs it on INT8 kernels: fuse_qdq leaves no float Conv.
        const InferenceEngine q = InferenceEngine::compile(Graph(g));
        CHECK(q.optimization_report().count("fuse_qdq") >= 6);
        int qconv = 0;
        for (const Node& n : q.graph().nodes) {
            CHECK(n.op_type != "Conv");
            // A residual Add after a QLinearConv fuses into it (QLinearConvAdd).
            qconv += n.op_type == "QLinearConv" || n.op_type == "QLinearConvAdd";
        }
        CHECK(qconv == 3);
        for (const auto& in : held_out) {
            const Tensor want = run1(ref, in), got = run1(q, in);
            CHECK(cosine(got, want) > 0.995);
        }
        // What ONNX writes is what runs: a save / load round trip gives the same bits.
        const fs::path file = fs::temp_directory_path() / "dsinfer_quantize_static_cnn.onnx";
        save_onnx(g, file);
        const InferenceEngine reloaded = InferenceEngine::load(file);
        CHECK(max_rel_diff(run1(reloaded, held_out[0]), run1(q, held_out[0])) == 0.0);
        fs::remove(file);
    }
}

TEST_CASE("quantize_static: options (per tensor, symmetric activations, exclude, float outputs)",
          "[quantize_static]") {
    StaticQuantizeOptions o;
    o.per_channel = false;
    o.symmetric_activations = true;
    o.exclude = {"conv2"};
    Graph g = mini_cnn();
    auto data = calibration_batches(cnn_batches(3, 2, 20));
    const StaticQuantizeReport r = quantize_static(g, *data, o).value_or_throw();
    bool saw_conv2 = false;
    for (const LayerRecord& l : r.layers)
        if (l.node == "conv2") {
            saw_conv2 = true;
            CHECK(l.precision == "fp32");
            CHECK(l.reason == "excluded by the caller");
        }
    CHECK(saw_conv2);
    for (const Node& n : g.nodes) {
        if (n.op_type == "QuantizeLinear") {
            const Value& z = g.value(n.inputs[2]);
            REQUIRE(z.initializer);
            CHECK(z.initializer->dtype() == DType::i8);
            CHECK(z.initializer->data<std::int8_t>()[0] == 0);
        }
        if (n.op_type == "DequantizeLinear" && !n.has_attr("axis")) {
            CHECK(g.value(n.inputs[1]).initializer->num_elements() == 1);
        }
    }
    // conv2 stays float but the model still runs close to float32.
    const InferenceEngine q = InferenceEngine::compile(Graph(g));
    const InferenceEngine ref = InferenceEngine::compile(mini_cnn());
    const auto in = cnn_batches(1, 2, 77)[0];
    CHECK(cosine(run1(q, in), run1(ref, in)) > 0.99);
    // keep_float_outputs = false quantizes the Gemm's output too.
    StaticQuantizeOptions all;
    all.keep_float_outputs = false;
    Graph g2 = mini_cnn();
    auto data2 = calibration_batches(cnn_batches(3, 2, 20));
    const StaticQuantizeReport r2 = quantize_static(g2, *data2, all).value_or_throw();
    bool y_quantized = false;
    for (const Node& n : g2.nodes)
        if (n.op_type == "QuantizeLinear" && g2.value(n.inputs[0]).name == "y") y_quantized = true;
    CHECK(y_quantized);
    CHECK(r2.quantized_tensors > 0);
}

TEST_CASE("quantize_static: bad input gets typed errors, the graph is left as it was",
          "[quantize_static]") {
    const auto expect = [](const auto& result, ErrorCode code, const std::string& words) {
        REQUIRE_FALSE(result.is_ok());
        CHECK(result.status().code() == code);
        CHECK_THAT(result.status().message(), Catch::Contains(words));
    };
    {  // an empty source
        Graph g = mini_cnn();
        auto data = calibration_batches({});
        expect(quantize_static(g, *data), ErrorCode::invalid_argument, "no batch");
        CHECK(count_ops(g, "QuantizeLinear") == 0);
        CHECK(count_ops(g, "BatchNormalization") == 1);
    }
    {  // NaN in a batch
        Graph g = mini_cnn();
        auto batches = cnn_batches(3, 2, 30);
        batches[1][0].tensor.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
        auto data = calibration_batches(std::move(batches));
        expect(quantize_static(g, *data), ErrorCode::invalid_argument, "batch 1, input 'x'");
    }
    {  // a batch of the wrong shape names the input and the batch
        Graph g = mini_cnn();
        auto batches = cnn_batches(2, 2, 40);
        batches[1][0].tensor = random_f32({2, 3, 8, 8}, 1, 1.f);
        auto data = calibration_batches(std::move(batches));
        expect(quantize_static(g, *data), ErrorCode::invalid_argument, "calibration batch 1");
    }
    {  // a wrong input name
        Graph g = mini_cnn();
        auto data = calibration_batches({{{"pixels", random_f32({2, 3, 16, 16}, 1, 1.f)}}});
        expect(quantize_static(g, *data), ErrorCode::invalid_argument, "x");
    }
    {  // a source that fails
        Graph g = mini_cnn();
        auto data = calibration_callback([](std::vector<NamedTensor>&) -> StatusOr<bool> {
            return Status(ErrorCode::io_error, "disk on fire");
        });
        expect(quantize_static(g, *data), ErrorCode::io_error, "disk on fire");
    }
    {  // no quantizable layer
        Graph g;
        g.opset_imports = {{"", 17}};
        const ValueId x = g.add_value("x", DType::f32, batch_shape({4}));
        const ValueId y = g.add_value("y", DType::f32);
        g.inputs.push_back(x);
        g.add_node("Softmax", {x}, {y}, "sm");
        g.outputs.push_back(y);
        REQUIRE(g.sort_topologically().is_ok());
        auto data = calibration_batches({{{"x", random_f32({2, 4}, 1, 1.f)}}});
        expect(quantize_static(g, *data), ErrorCode::invalid_argument, "no layer to quantize");
    }
    {  // a bad percentile
        Graph g = mini_cnn();
        auto data = calibration_batches(cnn_batches(1, 2, 1));
        StaticQuantizeOptions o;
        o.calibration.method = CalibrationMethod::percentile;
        o.calibration.percentile = 40.0;
        expect(quantize_static(g, *data, o), ErrorCode::invalid_argument, "percentile");
    }
    {  // a table without a needed range
        Graph g = mini_cnn();
        CalibrationTable empty;
        expect(apply_static_quantization(g, empty), ErrorCode::invalid_argument, "no range for");
    }
    {  // quantized once: an already quantized graph is left alone
        Graph g = mini_cnn();
        auto data = calibration_batches(cnn_batches(2, 2, 50));
        (void)quantize_static(g, *data).value_or_throw();
        const std::size_t nodes = g.nodes.size();
        auto again = calibration_batches(cnn_batches(2, 2, 50));
        const auto r = quantize_static(g, *again).value_or_throw();
        CHECK(r.already_quantized);
        CHECK(g.nodes.size() == nodes);
    }
    // Names.
    CHECK(parse_calibration_method("entropy").value_or_throw() == CalibrationMethod::entropy);
    expect(parse_calibration_method("kl"), ErrorCode::invalid_argument, "minmax, percentile");
    CHECK(parse_quantize_mode("int8-static").value_or_throw() == QuantizeMode::int8_static);
    expect(parse_quantize_mode("int4"), ErrorCode::invalid_argument, "int8-dynamic");
}

TEST_CASE("Quantizer: weight-only INT8, bf16 and fp16 weights shrink the model and stay close",
          "[quantize_static]") {
    const auto in = cnn_batches(1, 2, 60)[0];
    const InferenceEngine ref = InferenceEngine::compile(mini_cnn());
    const Tensor want = run1(ref, in);
    struct Case {
        QuantizeMode mode;
        double min_cosine;
        double max_ratio;  // quantized / float weight bytes
    };
    for (const Case c : {Case{QuantizeMode::int8_weight, 0.999, 0.30},
                         Case{QuantizeMode::bf16, 0.9999, 0.51},
                         Case{QuantizeMode::fp16, 0.99999, 0.51}}) {
        INFO(to_string(c.mode));
        QuantizerOptions o;
        o.mode = c.mode;
        Graph g = mini_cnn();
        const QuantizeReport r = Quantizer(o).run(g).value_or_throw();
        CHECK(r.mode == c.mode);
        CHECK(r.quantized_nodes >= 4);
        REQUIRE(r.float_weight_bytes > 0);
        CHECK(static_cast<double>(r.quantized_weight_bytes) / static_cast<double>(r.float_weight_bytes) <= c.max_ratio);
        for (const LayerRecord& l : r.layers) {
            INFO(l.node);
            CHECK(l.weight_bytes_after < l.weight_bytes_before);
        }
        const InferenceEngine q = InferenceEngine::compile(std::move(g));
        CHECK(cosine(run1(q, in), want) > c.min_cosine);
        // Weight-only INT8: the weights' DequantizeLinear is folded at load
        // (fold_weight_dequantize), so the float kernels run on packed constants.
        CHECK(count_ops(q.graph(), "DequantizeLinear") == 0);
    }
    // int8-static without data is refused; none changes nothing.
    QuantizerOptions st;
    st.mode = QuantizeMode::int8_static;
    Graph g = mini_cnn();
    const auto r = Quantizer(st).run(g);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == ErrorCode::invalid_argument);
    QuantizerOptions none;
    none.mode = QuantizeMode::none;
    const std::size_t nodes = g.nodes.size();
    CHECK(Quantizer(none).run(g).value_or_throw().quantized_nodes == 0);
    CHECK(g.nodes.size() == nodes);
}

TEST_CASE("quantize_static: the digits model keeps its held-out accuracy within 0.5 points",
          "[quantize_static]") {
    const fs::path dir = fs::path(__FILE__).parent_path() / ".." / ".." / "models" / "digits";
    if (!fs::exists(dir / "digits_train.csv")) {
        WARN("models/digits/digits_train.csv not found: skipped");
        return;
    }
    Graph g = load_onnx(dir / "digits.onnx");
    const Graph fp32 = g;
    auto data = calibration_csv(dir / "digits_train.csv", g, 64, 1.f / 16.f).value_or_throw();
    StaticQuantizeOptions o;
    const StaticQuantizeReport r = quantize_static(g, *data, o).value_or_throw();
    CHECK(r.quantized_nodes >= 2);
    // Held-out accuracy of both.
    std::ifstream csv(dir / "digits_test.csv");
    std::vector<int> labels;
    std::vector<float> pixels;
    for (std::string line; std::getline(csv, line);) {
        if (line.empty()) continue;
        std::stringstream ss(line);
        std::string cell;
        std::getline(ss, cell, ',');
        labels.push_back(std::stoi(cell));
        while (std::getline(ss, cell, ',')) pixels.push_back(std::stof(cell) / 16.f);
    }
    const auto n = static_cast<int64_t>(labels.size());
    REQUIRE(n > 300);
    Tensor x = Tensor::allocate(DType::f32, Shape{n, 64}).value();
    std::copy(pixels.begin(), pixels.end(), x.data<float>());
    const auto accuracy = [&](Graph model) {
        const InferenceEngine e = InferenceEngine::compile(std::move(model));
        const Tensor logits = e.run({{"pixels", x}})[0].tensor;
        int right = 0;
        for (int64_t k = 0; k < n; ++k) {
            const float* row = logits.data<float>() + k * 10;
            right += static_cast<int>(std::max_element(row, row + 10) - row) == labels[static_cast<std::size_t>(k)];
        }
        return 100.0 * right / static_cast<double>(n);
    };
    const double before = accuracy(fp32), after = accuracy(g);
    INFO("fp32 " << before << "%, int8 " << after << "%");
    CHECK(before > 90.0);
    CHECK(before - after <= 0.5);
}

}  // namespace dsinfer::test

namespace dsinfer::test {

TEST_CASE("Quantizer auto: the precision controller meets the budget with the fewest float layers",
          "[quantize_static]") {
    const auto run_auto = [](const AccuracyBudget& budget, Graph& g) {
        QuantizerOptions o;
        o.mode = QuantizeMode::automatic;
        o.automatic.budget = budget;
        o.automatic.eval_batches = 2;
        o.automatic.timing_runs = 1;
        std::vector<std::string> phases;
        o.int8.calibration.progress = [&](std::string_view phase, std::size_t, std::size_t) {
            if (phases.empty() || phases.back() != phase) phases.emplace_back(phase);
        };
        auto data = calibration_batches(cnn_batches(4, 3, 500));
        QuantizeReport r = Quantizer(o).run(g, data.get()).value_or_throw();
        CHECK(phases == std::vector<std::string>{"calibration", "sensitivity"});
        return r;
    };
    const auto in = cnn_batches(4, 3, 500);  // the eval batches are the source's first ones
    const InferenceEngine ref = InferenceEngine::compile(mini_cnn());
    // A loose budget: every layer INT8.
    {
        AccuracyBudget b;
        b.threshold = 0.9;
        Graph g = mini_cnn();
        const QuantizeReport r = run_auto(b, g);
        REQUIRE(r.automatic);
        CHECK(r.automatic->met);
        CHECK(r.automatic->int8_form == "static");
        CHECK(r.automatic->float_layers == 0);
        CHECK(r.automatic->int8_layers == 4);
        CHECK(r.automatic->achieved >= 0.9);
        for (const LayerRecord& l : r.layers) {
            CHECK(l.precision == "int8");
            CHECK(std::isfinite(l.sensitivity));
            CHECK(l.sensitivity <= 1.0);
        }
    }
    // A budget all-INT8 misses: the sensitive layer comes back to float, the result meets it.
    {
        Graph probe = mini_cnn(true);
        AccuracyBudget loose;
        loose.threshold = 0.9;
        const QuantizeReport pr = run_auto(loose, probe);
        const double all_int8 = pr.automatic->all_int8_value;
        double fc_alone = 0, others_worst = 1;
        for (const LayerRecord& l : pr.layers) {
            if (l.node == "fc") fc_alone = l.sensitivity;
            else others_worst = std::min(others_worst, l.sensitivity);
        }
        REQUIRE(fc_alone < others_worst);  // the crafted layer is the sensitive one
        AccuracyBudget b;
        b.threshold = 1.0 - (1.0 - all_int8) * 0.5;  // between all-INT8 and float32
        Graph g = mini_cnn(true);
        const QuantizeReport r = run_auto(b, g);
        REQUIRE(r.automatic);
        INFO(std::setprecision(10) << "all int8 " << all_int8 << ", budget " << b.threshold << ", achieved "
                         << r.automatic->achieved);
        CHECK(r.automatic->all_int8_value < b.threshold);
        CHECK(r.automatic->met);
        CHECK(r.automatic->achieved >= b.threshold);
        CHECK(r.automatic->float_layers == 1);
        for (const LayerRecord& l : r.layers) {
            INFO(l.node);
            CHECK((l.precision == "int8") == (l.node != "fc"));
            if (l.node == "fc") CHECK_THAT(l.reason, Catch::Contains("kept float"));
        }
        // The returned graph is the model measured: re-measure its cosine.
        EngineOptions eo;
        eo.precision = r.automatic->float_precision == "bf16" ? Precision::bf16 : Precision::fp32;
        const InferenceEngine q = InferenceEngine::compile(std::move(g), eo);
        const InferenceEngine ref_fc = InferenceEngine::compile(mini_cnn(true));
        double dot = 0, nq = 0, nr = 0;
        for (std::size_t k = 0; k < 2; ++k) {
            const Tensor a = run1(q, in[k]), b2 = run1(ref_fc, in[k]);
            for (int64_t i = 0; i < a.num_elements(); ++i) {
                dot += double(a.data<float>()[i]) * b2.data<float>()[i];
                nq += double(a.data<float>()[i]) * a.data<float>()[i];
                nr += double(b2.data<float>()[i]) * b2.data<float>()[i];
            }
        }
        CHECK(dot / std::sqrt(nq * nr) == Approx(r.automatic->achieved).margin(1e-4));
    }
    // A budget nothing meets (a task metric only the float32 reference scores on): the best
    // model found, met false.
    {
        AccuracyBudget b;
        int calls = 0;
        b.task_metric = [&](const InferenceEngine&) -> StatusOr<double> { return calls++ == 0 ? 1.0 : 0.0; };
        b.max_drop = 0.1;
        Graph g = mini_cnn();
        const QuantizeReport r = run_auto(b, g);
        REQUIRE(r.automatic);
        CHECK_FALSE(r.automatic->met);
        CHECK(r.automatic->float_precision == "fp32");
        CHECK(r.automatic->float_layers == 4);
    }
    // A task metric from the caller.
    {
        AccuracyBudget b;
        int calls = 0;
        b.task_metric = [&](const InferenceEngine& e) -> StatusOr<double> {
            ++calls;
            return cosine(run1(e, in[3]), run1(ref, in[3]));
        };
        b.max_drop = 0.5;
        Graph g = mini_cnn();
        const QuantizeReport r = run_auto(b, g);
        CHECK(r.automatic->task_metric);
        CHECK(r.automatic->met);
        CHECK(r.automatic->float32_value == Approx(1.0));
        CHECK(calls >= 6);  // float32, four sensitivities, all-INT8
    }
    // Bad budgets and a missing source.
    {
        QuantizerOptions o;
        o.mode = QuantizeMode::automatic;
        o.automatic.budget.threshold = 2.0;
        Graph g = mini_cnn();
        auto data = calibration_batches(cnn_batches(1, 2, 1));
        const auto r = Quantizer(o).run(g, data.get());
        REQUIRE_FALSE(r.is_ok());
        CHECK(r.status().code() == ErrorCode::invalid_argument);
        const auto r2 = Quantizer(o).run(g, nullptr);
        REQUIRE_FALSE(r2.is_ok());
        CHECK_THAT(r2.status().message(), Catch::Contains("calibration data"));
    }
}

}  // namespace dsinfer::test

namespace dsinfer::test {

TEST_CASE("EngineOptions::precision int8 quantizes a float32 model dynamically at load",
          "[quantize_static]") {
    EngineOptions o;
    o.precision = Precision::int8;
    const InferenceEngine e = InferenceEngine::compile(mini_mlp(), o);
    REQUIRE(e.int8_report() != nullptr);
    CHECK(e.int8_report()->matmuls == 1);
    const bool fused = std::any_of(e.graph().nodes.begin(), e.graph().nodes.end(), [](const Node& n) {
        return n.op_type == "DynamicQuantizeMatMul" || n.op_type == "MatMulIntegerToFloat";
    });
    CHECK(fused);
    const InferenceEngine ref = InferenceEngine::compile(mini_mlp());
    CHECK(ref.int8_report() == nullptr);
    const std::vector<NamedTensor> in{{"x", random_f32({4, 8}, 3, 1.f)}};
    CHECK(cosine(e.run(in)[0].tensor, ref.run(in)[0].tensor) > 0.999);
    // Not on a GPU engine.
    EngineOptions gpu = o;
    gpu.device = "cuda";
    try {
        (void)InferenceEngine::compile(mini_mlp(), gpu);
        FAIL("int8 on cuda compiled");
    } catch (const Error& err) {
        CHECK(err.code() == ErrorCode::invalid_argument);
        CHECK_THAT(err.what(), Catch::Contains("runs on the CPU"));
    }
}

}  // namespace dsinfer::test
