// convert_float_precision (EngineOptions::precision fp16/bf16 on GPU engines), checked on the
// CPU with the reference kernels: the graph keeps its float32 interface, weights and
// intermediates become float16/bfloat16, and the converted graph computes the same function
// within the storage precision (2e-2 fp16, 6e-2 bf16, relative to 1 + |float32 result|).
// Also the engine's device/precision option checks (fp16/bf16 are accepted on the CPU).
#include <catch2/catch.hpp>

#include <dsinfer/config.hpp>
#include <dsinfer/dsinfer.hpp>
#if DSINFER_WITH_CUDA
#include <dsinfer/backends/cuda.hpp>
#endif

#include "engine_models.hpp"

using namespace dsinfer;

TEST_CASE("precision: float16/bfloat16 conversion keeps the interface and the function", "[precision]") {
    for (const auto& [dt, tol] : {std::pair{DType::f16, 2e-2}, std::pair{DType::bf16, 6e-2}}) {
        INFO(dtype_name(dt));
        for (Graph g : {test::mini_mlp(), test::mini_transformer()}) {
            EngineOptions ref;
            ref.backends = {"reference"};
            const auto e32 = InferenceEngine::compile(g, ref);
            Graph h = g;
            REQUIRE(h.sort_topologically().is_ok());
            const std::size_t converted = convert_float_precision(h, dt).value_or_throw();
            CHECK(converted >= 2);
            // The interface is unchanged.
            REQUIRE(h.inputs.size() == g.inputs.size());
            REQUIRE(h.outputs.size() == g.outputs.size());
            for (std::size_t i = 0; i < g.inputs.size(); ++i) {
                CHECK(h.value(h.inputs[i]).name == g.value(g.inputs[i]).name);
                CHECK(h.value(h.inputs[i]).dtype == g.value(g.inputs[i]).dtype);
            }
            CHECK(h.value(h.outputs[0]).name == g.value(g.outputs[0]).name);
            CHECK(h.value(h.outputs[0]).dtype == DType::f32);
            // Every float initializer is converted.
            for (const auto& v : h.values)
                if (v.initializer) CHECK(v.initializer->dtype() != DType::f32);
            int casts = 0;
            for (const auto& n : h.nodes) casts += n.op_type == "Cast";
            CHECK(casts == (g.value(g.inputs[0]).dtype == DType::f32 ? 2 : 1));
            const auto e16 = InferenceEngine::compile(h, ref);
            std::vector<NamedTensor> feeds;
            if (g.value(g.inputs[0]).dtype == DType::f32)
                feeds = {{"x", test::random_f32({5, 8}, 21)}};
            else
                feeds = {{"ids", test::ids_tensor(2, 7, 50, 22)}};
            const auto want = e32.run(feeds);
            const auto got = e16.run(feeds);
            REQUIRE(got[0].tensor.dtype() == DType::f32);
            CHECK(test::max_rel_diff(got[0].tensor, want[0].tensor) <= tol);
        }
    }
}

TEST_CASE("precision: conversion rejects targets that are not 16-bit floats", "[precision]") {
    Graph g = test::mini_mlp();
    auto r = convert_float_precision(g, DType::i8);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == ErrorCode::invalid_argument);
}

TEST_CASE("engine options: devices and precisions are validated", "[precision][engine]") {
    auto code_of = [](EngineOptions o) {
        try {
            (void)InferenceEngine::compile(test::mini_mlp(), std::move(o));
            return ErrorCode::ok;
        } catch (const Error& e) {
            return e.code();
        }
    };
    EngineOptions o;
    // On the CPU fp16 and bf16 hold the GEMM weights at half width (test_half_precision.cpp);
    // tf32 is a tensor-core mode and needs a CUDA device.
    o.precision = Precision::fp16;
    CHECK(code_of(o) == ErrorCode::ok);
    o.precision = Precision::bf16;
    CHECK(code_of(o) == ErrorCode::ok);
    o.precision = Precision::tf32;
    CHECK(code_of(o) == ErrorCode::invalid_argument);
    o = {};
    o.device = "gpu";
    CHECK(code_of(o) == ErrorCode::invalid_argument);
    o.device = "cuda:x";
    CHECK(code_of(o) == ErrorCode::invalid_argument);
    o = {};
    o.backends = {"cuda"};
    CHECK(code_of(o) == ErrorCode::invalid_argument);  // the GPU is chosen with device
    o = {};
    o.device = "cuda";
#if DSINFER_WITH_CUDA
    if (cuda_device_count() == 0) CHECK(code_of(o) == ErrorCode::unavailable);
#else
    CHECK(code_of(o) == ErrorCode::unsupported);
#endif
}
