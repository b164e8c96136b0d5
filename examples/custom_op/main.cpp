// dsinfer-custom-op: an application registers its own kernel for an op of its own domain and
// runs a model that uses it.
//
// The model, built here in code and saved as ONNX:
//   x float[batch, 8] --Mul(w)--> h --com.example::Swish(beta)--> y
// where Swish(h; beta) = h * sigmoid(beta * h). Mul runs on dsinfer's kernels, Swish on the one
// below, registered in a KernelRegistry passed as EngineOptions::custom_kernels. The result is
// checked against a plain C++ computation; the exit status is 1 on a mismatch.
//
// Usage: dsinfer-custom-op [model.onnx to write, default dsinfer_custom_op.onnx]
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "dsinfer/engine.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/kernel_registry.hpp"

namespace {

constexpr const char* kDomain = "com.example";
constexpr std::int64_t kFeatures = 8;

/// com.example::Swish on float32: y = x * sigmoid(beta * x).
class SwishKernel final : public dsinfer::Kernel {
public:
    explicit SwishKernel(float beta) : beta_(beta) {}

    // Output dtype and shape from the input's (also called at load with shapes only).
    dsinfer::Status prepare(dsinfer::PrepareContext& ctx) const override {
        const dsinfer::Tensor& x = ctx.input(0);
        if (x.dtype() != dsinfer::DType::f32)
            return dsinfer::Status(dsinfer::ErrorCode::unsupported, "Swish takes float32 only");
        ctx.set_output(0, x.dtype(), x.shape());
        return dsinfer::Status::ok();
    }
    // Computes only: the executor allocated the output; nothing here allocates or throws.
    dsinfer::Status run(dsinfer::RunContext& ctx) const noexcept override {
        const float* x = ctx.input(0).data<float>();
        float* y = ctx.output(0).data<float>();
        const std::int64_t n = ctx.input(0).num_elements();
        for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-beta_ * x[i]));
        return dsinfer::Status::ok();
    }

private:
    float beta_;
};

/// Called once per Swish node at load: reads and checks the attributes.
dsinfer::StatusOr<std::unique_ptr<dsinfer::Kernel>> make_swish(
    const dsinfer::KernelCreateContext& ctx) {
    auto beta = ctx.node().attr_or<float>("beta", 1.0f);
    if (!beta.is_ok()) return beta.status();
    if (!std::isfinite(beta.value()))
        return dsinfer::Status(dsinfer::ErrorCode::invalid_model, "beta must be finite");
    return std::unique_ptr<dsinfer::Kernel>(std::make_unique<SwishKernel>(beta.value()));
}

float swish(float h, float beta) { return h / (1.0f + std::exp(-beta * h)); }

}  // namespace

int main(int argc, char** argv) {
    const std::string path = argc > 1 ? argv[1] : "dsinfer_custom_op.onnx";
    const float beta = 1.5f;
    try {
        // The model: Mul by a weight vector, then the custom op.
        std::vector<float> w(kFeatures);
        for (std::int64_t j = 0; j < kFeatures; ++j) w[static_cast<std::size_t>(j)] = 0.25f * static_cast<float>(j + 1);
        dsinfer::Graph g;
        g.name = "custom_op_example";
        g.opset_imports = {{"", 17}, {kDomain, 1}};
        dsinfer::SymbolicShape xs;
        xs.known = true;
        xs.dims = {dsinfer::Dim::named("batch"), dsinfer::Dim::fixed(kFeatures)};
        const auto x = g.add_value("x", dsinfer::DType::f32, xs);
        const auto wv = g.add_initializer("w", dsinfer::Tensor::from_vector(dsinfer::Shape{kFeatures}, w));
        const auto h = g.add_value("h");
        const auto y = g.add_value("y", dsinfer::DType::f32);
        g.inputs = {x};
        g.outputs = {y};
        g.add_node("Mul", {x, wv}, {h}, "scale");
        dsinfer::Node& sw = g.add_node("Swish", {h}, {y}, "swish");
        sw.domain = kDomain;
        dsinfer::Attribute a;
        a.kind = dsinfer::AttrKind::f;
        a.f = beta;
        sw.attributes.emplace_back("beta", a);
        dsinfer::save_onnx(g, path);

        // The application's kernel: com.example::Swish, opsets 1 and later, float32 input.
        auto kernels = std::make_shared<dsinfer::KernelRegistry>();
        kernels->add({"Swish", kDomain, 1, dsinfer::kMaxOpset, dsinfer::DeviceKind::cpu,
                      dsinfer::DTypeSet{dsinfer::DType::f32}},
                     &make_swish, 0, "example");
        dsinfer::EngineOptions options;
        options.custom_kernels = kernels;
        const auto engine = dsinfer::InferenceEngine::load(path, options);

        const std::int64_t batch = 3;
        dsinfer::Tensor input = dsinfer::Tensor::empty(dsinfer::DType::f32, {batch, kFeatures});
        auto in = input.span<float>();
        for (std::size_t i = 0; i < in.size(); ++i) in[i] = 0.5f * static_cast<float>(i) - 5.0f;
        const auto out = engine.run({{"x", input}});
        const auto got = out.at(0).tensor.span<float>();

        for (std::size_t i = 0; i < engine.graph().nodes.size(); ++i)
            std::printf("node %-8s %-12s runs on %s\n", engine.graph().nodes[i].name.c_str(),
                        engine.graph().nodes[i].op_type.c_str(),
                        engine.node_providers()[i].c_str());
        int mismatches = 0;
        for (std::size_t i = 0; i < in.size(); ++i) {
            const float expected = swish(in[i] * w[i % w.size()], beta);
            const bool ok = std::fabs(got[i] - expected) <= 1e-6f * (1.0f + std::fabs(expected));
            if (!ok) ++mismatches;
            std::printf("x=%6.2f  y=%10.6f  expected=%10.6f%s\n", static_cast<double>(in[i]),
                        static_cast<double>(got[i]), static_cast<double>(expected),
                        ok ? "" : "  MISMATCH");
        }
        if (got.size() != in.size() || mismatches != 0) {
            std::printf("FAILED: %d mismatches\n", mismatches);
            return 1;
        }
        std::printf("OK: %zu values match the C++ computation\n", got.size());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
