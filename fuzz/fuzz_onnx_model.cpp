// Fuzz target: ONNX model bytes -> parse (bounded ModelLimits) -> optimize (level 3) -> compile
// -> one run with generated inputs under a short deadline.
//
// Invariants: every failure is a typed dsinfer error other than `internal`; no non-dsinfer
// exception escapes; no crash, hang or sanitizer report; a successful run returns one tensor
// per declared output. Seeds: ../shared/onnx-backend-tests/node/*/model.onnx (scripts/fuzz.sh)
// plus fuzz/corpus/fuzz_onnx_model/.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dsinfer/memory_pool.hpp"
#include "fuzz_common.hpp"
#include "onnx/onnx_loader.hpp"

namespace {

using namespace dsinfer;

/// Small bounds so one input stays fast (and memory-bounded) under ASan.
ModelLimits fuzz_limits() {
    ModelLimits l;
    l.max_model_bytes = 4u << 20;
    l.max_external_bytes = 0;
    l.max_tensor_bytes = 1u << 20;
    l.max_nodes = 2000;
    l.max_subgraph_depth = 8;
    l.max_protobuf_depth = 100;
    l.max_loop_iterations = 10'000;
    return l;
}

constexpr std::int64_t kMaxInputElements = 4096;   // per input; larger inputs skip the run
constexpr std::int64_t kMaxTotalElements = 16384;  // all inputs together
constexpr auto kRunBudget = std::chrono::milliseconds(250);

/// Run-time tensors come from a pool with a hard limit: a model asking for gigabytes of
/// activations must get resource_exhausted, not an out-of-memory kill.
std::shared_ptr<MemoryPool> fuzz_pool() {
    static std::shared_ptr<MemoryPool> pool = MemoryPool::create({.limit_bytes = 256u << 20});
    return pool;
}

/// Deterministic, mostly small input values (indices stay mostly in range) drawn from the model
/// bytes so different models get different data.
void fill(Tensor& t, const std::uint8_t* data, std::size_t size) {
    const auto n = t.num_elements();
    auto byte = [&](std::int64_t i) -> int {
        return size == 0 ? 1 : data[static_cast<std::size_t>(i) % size];
    };
    for (std::int64_t i = 0; i < n; ++i) {
        const int b = byte(i * 7 + 3);
        const auto k = static_cast<std::size_t>(i);
        switch (t.dtype()) {
            case DType::f32: t.data<float>()[k] = static_cast<float>(b % 9 - 4) * 0.5f; break;
            case DType::f64: t.data<double>()[k] = static_cast<double>(b % 9 - 4) * 0.5; break;
            case DType::f16: t.data<float16>()[k] = float16(static_cast<float>(b % 9 - 4) * 0.5f); break;
            case DType::bf16: t.data<bfloat16>()[k] = bfloat16(static_cast<float>(b % 9 - 4) * 0.5f); break;
            case DType::i8: t.data<std::int8_t>()[k] = static_cast<std::int8_t>(b % 3); break;
            case DType::u8: t.data<std::uint8_t>()[k] = static_cast<std::uint8_t>(b % 3); break;
            case DType::i16: t.data<std::int16_t>()[k] = static_cast<std::int16_t>(b % 3); break;
            case DType::u16: t.data<std::uint16_t>()[k] = static_cast<std::uint16_t>(b % 3); break;
            case DType::i32: t.data<std::int32_t>()[k] = b % 3; break;
            case DType::u32: t.data<std::uint32_t>()[k] = static_cast<std::uint32_t>(b % 3); break;
            case DType::i64: t.data<std::int64_t>()[k] = b % 3; break;
            case DType::u64: t.data<std::uint64_t>()[k] = static_cast<std::uint64_t>(b % 3); break;
            case DType::boolean: t.data<bool>()[k] = (b & 1) != 0; break;
            case DType::string: t.data<std::string>()[k] = std::string(static_cast<std::size_t>(b % 4), 'a'); break;
        }
    }
}

/// Inputs of the declared dtypes (f32 when undeclared), symbolic dims 1, unknown rank -> [1].
/// False when an input would exceed the element caps (then the run is skipped).
bool make_inputs(const InferenceEngine& engine, const std::uint8_t* data, std::size_t size,
                 std::vector<NamedTensor>& inputs) {
    std::int64_t total = 0;
    for (const IOInfo& io : engine.inputs()) {
        std::vector<std::int64_t> dims;
        if (!io.shape.known) {
            dims.push_back(1);
        } else {
            for (const Dim& d : io.shape.dims) dims.push_back(d.is_static() ? d.value : 1);
        }
        std::int64_t n = 1;
        for (auto d : dims) {
            if (d < 0 || d > kMaxInputElements) return false;
            n *= d;
            if (n > kMaxInputElements) return false;
        }
        total += n;
        if (total > kMaxTotalElements) return false;
        auto shape = Shape::make(dims);
        if (!shape.is_ok()) return false;
        auto t = Tensor::allocate(io.dtype.value_or(DType::f32), shape.value());
        if (!t.is_ok()) return false;
        Tensor tensor = std::move(t).value();
        fill(tensor, data, size);
        inputs.push_back(NamedTensor{io.name, std::move(tensor)});
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const ModelLimits limits = fuzz_limits();
    auto graph = detail::parse_onnx_model(data, size, "", limits);
    if (!graph.is_ok()) {
        fuzz::check_status(graph.status(), "parse_onnx_model");
        return 0;
    }
    EngineOptions options;
    options.optimization_level = 3;
    options.num_threads = 1;
    options.limits = limits;
    options.memory_pool = fuzz_pool();
    std::unique_ptr<InferenceEngine> engine;
    const ErrorCode compiled = fuzz::expect_typed(
        [&] {
            engine = std::make_unique<InferenceEngine>(
                InferenceEngine::compile(std::move(graph).value(), options));
        },
        "InferenceEngine::compile");
    if (compiled != ErrorCode::ok) return 0;

    std::vector<NamedTensor> inputs;
    if (!make_inputs(*engine, data, size, inputs)) return 0;
    RunOptions run;
    run.deadline = std::chrono::steady_clock::now() + kRunBudget;
    std::vector<NamedTensor> outputs;
    const Status st = engine->try_run(inputs, outputs, run);
    fuzz::check_status(st, "InferenceEngine::try_run");
    if (st.is_ok()) {
        if (outputs.size() != engine->outputs().size())
            fuzz::fail("try_run returned " + std::to_string(outputs.size()) + " outputs, the model declares " +
                       std::to_string(engine->outputs().size()));
        for (const auto& o : outputs)
            if (o.tensor.is_null()) fuzz::fail("output '" + o.name + "' is a null tensor");
    }
    return 0;
}
