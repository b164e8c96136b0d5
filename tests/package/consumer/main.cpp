// Package consumer: builds a one-node graph (Relu) in memory, compiles it with the installed
// dsinfer and checks the result. Exit status 0 on success.
//
//   app               CPU engine; afterwards no CUDA library (nor the CUDA plugin) may be mapped.
//   app cuda          (built with COMPONENTS cuda) also a CUDA engine: on a GPU the same Relu;
//                     without one, compile() must fail with a typed `unavailable` error from the
//                     plugin (which must then be mapped: its path is printed).
//   app cuda-missing  (run with DSINFER_CUDA_PLUGIN naming a file that is not there) a CUDA
//                     engine must fail with `unavailable` and a message naming the plugin.
#include <cstdio>
#include <cstring>
#include <dsinfer/dsinfer.hpp>
#include <exception>
#include <fstream>
#include <string>
#include <vector>
#if defined(CONSUMER_CUDA) && DSINFER_WITH_CUDA
#include <dsinfer/backends/cuda.hpp>
#endif

namespace {

dsinfer::Graph relu_graph() {
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
    return g;
}

/// Compiles and runs the Relu on `device`; false (with a message) on a wrong result.
bool run_relu(const std::string& device) {
    dsinfer::EngineOptions options;
    options.device = device;
    const auto engine = dsinfer::InferenceEngine::compile(relu_graph(), options);
    const std::vector<float> in{-1.5f, 0.0f, 2.0f, 3.25f, -7.0f, 0.5f};
    const std::vector<float> expected{0.0f, 0.0f, 2.0f, 3.25f, 0.0f, 0.5f};
    const auto outputs = engine.run({{"x", dsinfer::Tensor::from_vector<float>({2, 3}, in)}});

    if (outputs.size() != 1 || outputs[0].name != "y") {
        std::fprintf(stderr, "consumer: expected one output named 'y'\n");
        return false;
    }
    const dsinfer::Tensor& out = outputs[0].tensor;
    if (out.dtype() != dsinfer::DType::f32 || out.shape() != dsinfer::Shape{2, 3}) {
        std::fprintf(stderr, "consumer: output has shape %s, expected [2,3] f32\n",
                     out.shape().to_string().c_str());
        return false;
    }
    for (std::size_t i = 0; i < expected.size(); ++i) {
        if (out.data<float>()[i] != expected[i]) {
            std::fprintf(stderr, "consumer: y[%zu] = %g, expected %g\n", i,
                         static_cast<double>(out.data<float>()[i]),
                         static_cast<double>(expected[i]));
            return false;
        }
    }
    std::printf("consumer: dsinfer %s, Relu ok on %s\n", DSINFER_VERSION_STRING, device.c_str());
    return true;
}

/// The first line of /proc/self/maps that names one of `needles` ("" when none).
std::string mapped(const std::vector<const char*>& needles) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line))
        for (const char* n : needles)
            if (line.find(n) != std::string::npos) return line;
    return {};
}

/// Creating a CUDA engine must fail with `unavailable`; prints the message.
bool expect_unavailable() {
    try {
        dsinfer::EngineOptions options;
        options.device = "cuda";
        (void)dsinfer::InferenceEngine::compile(relu_graph(), options);
        std::fprintf(stderr, "consumer: a CUDA engine was created where none can be\n");
        return false;
    } catch (const dsinfer::Error& e) {
        std::printf("consumer: cuda engine: %s\n", e.what());
        return e.code() == dsinfer::ErrorCode::unavailable;
    }
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    try {
        if (!run_relu("cpu")) return 1;
        if (mode.empty()) {
            const std::string line = mapped({"libdsinfer_cuda", "libcudart", "libcudnn", "libcublas"});
            if (!line.empty()) {
                std::fprintf(stderr, "consumer: a CPU engine mapped a CUDA library: %s\n", line.c_str());
                return 1;
            }
            std::printf("consumer: no CUDA library mapped\n");
            return 0;
        }
        if (mode == "cuda-missing") return expect_unavailable() ? 0 : 1;
#if defined(CONSUMER_CUDA) && DSINFER_WITH_CUDA
        if (mode == "cuda") {
            if (dsinfer::cuda_device_count() > 0) {
                if (!run_relu("cuda")) return 1;
            } else {
                std::printf("consumer: %s\n", dsinfer::cuda_status().c_str());
                if (!expect_unavailable()) return 1;
            }
            const std::string line = mapped({"libdsinfer_cuda"});
            if (line.empty()) {
                std::fprintf(stderr, "consumer: the CUDA plugin is not mapped\n");
                return 1;
            }
            std::printf("consumer: plugin mapped: %s\n", line.substr(line.find('/')).c_str());
            return 0;
        }
#endif
        std::fprintf(stderr, "consumer: unknown mode '%s'\n", mode.c_str());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "consumer: %s\n", e.what());
        return 1;
    }
}
