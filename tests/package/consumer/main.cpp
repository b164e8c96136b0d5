// Package consumer: builds a one-node graph (Relu) in memory, compiles it with the installed
// dsinfer and checks the result. Exit status 0 on success.
#include <cstdio>
#include <dsinfer/dsinfer.hpp>
#include <exception>
#include <vector>

int main() {
    try {
        dsinfer::Graph g;
        g.name = "relu_only";
        g.opset_imports = {{"", 17}};
        dsinfer::SymbolicShape shape;
        shape.known = true;
        shape.dims = {dsinfer::Dim::named("batch"), dsinfer::Dim::fixed(3)};
        const auto x = g.add_value("x", dsinfer::DType::f32, shape);
        const auto y = g.add_value("y", dsinfer::DType::f32, shape);
        g.inputs = {x};
        g.outputs = {y};
        g.add_node("Relu", {x}, {y}, "relu");
        if (auto st = g.sort_topologically(); !st.is_ok()) throw dsinfer::Error(st);

        const auto engine = dsinfer::InferenceEngine::compile(std::move(g));
        const std::vector<float> in{-1.5f, 0.0f, 2.0f, 3.25f, -7.0f, 0.5f};
        const std::vector<float> expected{0.0f, 0.0f, 2.0f, 3.25f, 0.0f, 0.5f};
        const auto outputs = engine.run({{"x", dsinfer::Tensor::from_vector<float>({2, 3}, in)}});

        if (outputs.size() != 1 || outputs[0].name != "y") {
            std::fprintf(stderr, "consumer: expected one output named 'y'\n");
            return 1;
        }
        const dsinfer::Tensor& out = outputs[0].tensor;
        if (out.dtype() != dsinfer::DType::f32 || out.shape() != dsinfer::Shape{2, 3}) {
            std::fprintf(stderr, "consumer: output has shape %s, expected [2,3] f32\n",
                         out.shape().to_string().c_str());
            return 1;
        }
        for (std::size_t i = 0; i < expected.size(); ++i) {
            if (out.data<float>()[i] != expected[i]) {
                std::fprintf(stderr, "consumer: y[%zu] = %g, expected %g\n", i,
                             static_cast<double>(out.data<float>()[i]),
                             static_cast<double>(expected[i]));
                return 1;
            }
        }
        std::printf("consumer: dsinfer %s, Relu ok\n", DSINFER_VERSION_STRING);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "consumer: %s\n", e.what());
        return 1;
    }
}
