// The CUDA op tester: one-node graphs run on the CUDA engine and on the reference CPU kernels,
// outputs compared element-wise with a per-case tolerance. Every CUDA kernel has cases here
// (tests/unit/test_cuda_*.cpp, tag [cuda]). Without a GPU, cuda_ready() says why once and the
// cases return early (Catch2 v2 has no SKIP; the WARN names the reason).
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <dsinfer/config.hpp>
#include <dsinfer/dsinfer.hpp>
#if DSINFER_WITH_CUDA
#include <dsinfer/backends/cuda.hpp>
#endif

#include "unit/engine_models.hpp"  // attr_i, attr_f, attr_s, attr_ints (every build)

namespace dsinfer::test::cuda_ops {

struct In {
    std::string name;
    Tensor t;               // null: omitted optional input
    bool constant = false;  // initializer instead of graph input
};

using Attrs = std::vector<std::pair<std::string, Attribute>>;
using test::attr_f;
using test::attr_i;
using test::attr_ints;
using test::attr_s;

/// True when a CUDA device is usable; otherwise WARNs "SKIPPED: <why>" and returns false.
inline bool cuda_ready() {
#if DSINFER_WITH_CUDA
    if (cuda_device_count() > 0) return true;
    WARN("SKIPPED: " << cuda_status());
    return false;
#else
    WARN("SKIPPED: built without DSINFER_WITH_CUDA");
    return false;
#endif
}

inline Graph one_node(const std::string& op, const std::vector<In>& ins, int num_outputs,
                      const Attrs& attrs, std::int64_t opset, const std::string& domain = "") {
    Graph g;
    g.opset_imports = {{"", opset}};
    if (!domain.empty()) g.opset_imports.push_back({domain, 1});
    std::vector<ValueId> in_ids, out_ids;
    for (const auto& i : ins) {
        if (i.t.is_null()) {
            in_ids.push_back(kNoValue);
        } else if (i.constant) {
            in_ids.push_back(g.add_initializer(i.name, i.t));
        } else {
            ValueId id = g.add_value(i.name, i.t.dtype(), SymbolicShape::from(i.t.shape()));
            g.inputs.push_back(id);
            in_ids.push_back(id);
        }
    }
    for (int k = 0; k < num_outputs; ++k) {
        out_ids.push_back(g.add_value("y" + std::to_string(k)));
        g.outputs.push_back(out_ids.back());
    }
    Node& n = g.add_node(op, in_ids, out_ids, "node");
    n.domain = domain;
    n.attributes = attrs;
    return g;
}

inline std::vector<NamedTensor> feeds_of(const std::vector<In>& ins) {
    std::vector<NamedTensor> feeds;
    for (const auto& i : ins)
        if (!i.t.is_null() && !i.constant) feeds.push_back({i.name, i.t});
    return feeds;
}

/// Element i of a float-type tensor as double.
inline double elem(const Tensor& t, std::int64_t i) {
    switch (t.dtype()) {
        case DType::f32: return t.data<float>()[i];
        case DType::f64: return t.data<double>()[i];
        case DType::f16: return static_cast<float>(t.data<float16>()[i]);
        case DType::bf16: return static_cast<float>(t.data<bfloat16>()[i]);
        case DType::i64: return static_cast<double>(t.data<std::int64_t>()[i]);
        case DType::i32: return t.data<std::int32_t>()[i];
        case DType::i8: return t.data<std::int8_t>()[i];
        case DType::u8: return t.data<std::uint8_t>()[i];
        case DType::boolean: return t.data<bool>()[i] ? 1.0 : 0.0;
        default: return std::nan("");
    }
}

struct Tolerance {
    double atol = 1e-5;
    double rtol = 1e-5;
};

/// Compares `got` with `want`: same dtype and shape, |got - want| <= atol + rtol * |want|
/// per element, NaN where NaN. Reports the first few mismatches with the case name.
inline void expect_close(const std::string& what, const Tensor& got, const Tensor& want, Tolerance tol) {
    INFO(what);
    REQUIRE(got.dtype() == want.dtype());
    REQUIRE(got.shape() == want.shape());
    REQUIRE(got.device().kind == DeviceKind::cpu);
    int bad = 0;
    double worst = 0;
    for (std::int64_t i = 0; i < want.num_elements(); ++i) {
        const double a = elem(got, i), b = elem(want, i);
        bool ok;
        if (std::isnan(b)) ok = std::isnan(a);
        else if (std::isinf(b)) ok = a == b;
        else ok = std::fabs(a - b) <= tol.atol + tol.rtol * std::fabs(b);
        if (!ok) {
            worst = std::max(worst, std::fabs(a - b));
            if (++bad <= 5) UNSCOPED_INFO("element " << i << ": cuda " << a << " reference " << b);
        }
    }
    CHECK(bad == 0);
    if (bad) UNSCOPED_INFO(bad << " of " << want.num_elements() << " elements off, worst |diff| " << worst);
}

/// Runs the one-node graph on the CUDA engine (default backends after cuda) and on the
/// reference kernels; checks that the node ran on "cuda" (unless expect_cuda is false) and
/// that every output matches within `tol`.
inline void check_op(const std::string& what, const std::string& op, const std::vector<In>& ins,
                     const Attrs& attrs = {}, Tolerance tol = {}, std::int64_t opset = 17,
                     int num_outputs = 1, const std::string& domain = "", bool expect_cuda = true) {
    if (!cuda_ready()) return;
    INFO("case: " << what);
    const Graph g = one_node(op, ins, num_outputs, attrs, opset, domain);
    EngineOptions ref;
    ref.backends = {"reference"};
    ref.optimization_level = 0;
    EngineOptions gpu;
    gpu.device = "cuda";
    gpu.optimization_level = 0;
    auto e_ref = InferenceEngine::compile(g, ref);
    auto e_gpu = InferenceEngine::compile(g, gpu);
    if (expect_cuda) {
        REQUIRE(e_gpu.node_providers().size() == 1);
        CHECK(e_gpu.node_providers()[0] == "cuda");
    }
    const auto feeds = feeds_of(ins);
    const auto want = e_ref.run(feeds);
    // Twice: the first run records the memory plan, the second runs from the planned arenas.
    for (int rep = 0; rep < 2; ++rep) {
        const auto got = e_gpu.run(feeds);
        REQUIRE(got.size() == want.size());
        for (std::size_t k = 0; k < want.size(); ++k)
            expect_close(what + " output " + std::to_string(k) + " run " + std::to_string(rep),
                         got[k].tensor, want[k].tensor, tol);
    }
}

// ---- data ---------------------------------------------------------------------------------------

inline std::mt19937& rng() {
    static std::mt19937 r(20261129u);
    return r;
}

inline Tensor rand_tensor(DType dt, const std::vector<std::int64_t>& dims, float lo = -1.f, float hi = 1.f) {
    auto t = Tensor::allocate(dt, Shape::make(dims).value()).value();
    std::uniform_real_distribution<float> u(lo, hi);
    for (std::int64_t i = 0; i < t.num_elements(); ++i) {
        const float v = u(rng());
        switch (dt) {
            case DType::f32: t.data<float>()[i] = v; break;
            case DType::f16: t.data<float16>()[i] = float16(v); break;
            case DType::bf16: t.data<bfloat16>()[i] = bfloat16(v); break;
            case DType::f64: t.data<double>()[i] = v; break;
            default: FAIL("rand_tensor: float types only");
        }
    }
    return t;
}

inline Tensor i64_tensor(const std::vector<std::int64_t>& dims, std::vector<std::int64_t> values) {
    auto t = Tensor::allocate(DType::i64, Shape::make(dims).value()).value();
    for (std::size_t i = 0; i < values.size(); ++i) t.data<std::int64_t>()[i] = values[i];
    return t;
}

/// Per-dtype default tolerances for arithmetic kernels (GEMM-like ops pass their own).
inline Tolerance tol_for(DType dt) {
    switch (dt) {
        case DType::f16: return {2e-3, 2e-3};
        case DType::bf16: return {1.6e-2, 1.6e-2};
        default: return {1e-5, 1e-5};
    }
}

}  // namespace dsinfer::test::cuda_ops
