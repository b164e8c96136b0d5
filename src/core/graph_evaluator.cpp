// KernelEvaluator, kernel_evaluator() and the full library's optimize()/try_optimize() and
// convert_float_precision(): the passes (src/passes/, the dsinfer_passes target) with the
// executor behind their GraphEvaluator.
//
// The default evaluator is chosen here, at the call, not registered by a static initializer:
// try_optimize() hands kernel_evaluator() to try_run_passes() when the options carry none. The
// passes alone (an offline tool linking dsinfer_passes) call try_run_passes() and get no
// evaluator unless they give one.
#include "core/graph_evaluator.hpp"

#include <memory>
#include <new>

#include "core/executor.hpp"

namespace dsinfer {
namespace detail {

Status KernelEvaluator::infer_shapes(Graph& g) const {
    try {
        CompileOptions co;
        co.registry = &registry_;
        auto copy = std::make_shared<Graph>(g);
        auto compiled = CompiledGraph::compile(copy, co);
        if (!compiled.is_ok() && compiled.status().code() == ErrorCode::resource_exhausted)
            return compiled.status();
        if (!compiled.is_ok() || copy->values.size() != g.values.size()) return Status::ok();
        for (std::size_t i = 0; i < g.values.size(); ++i) {
            Value& v = g.values[i];
            const Value& inferred = copy->values[i];
            if (!v.dtype && inferred.dtype) v.dtype = inferred.dtype;
            if (inferred.shape.known && !v.shape.is_static()) v.shape = inferred.shape;
        }
        return Status::ok();
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "out of memory inferring shapes");
    } catch (const Error& e) {
        if (e.code() == ErrorCode::resource_exhausted) return Status(e.code(), e.message());
        return Status::ok();  // inference is best effort
    } catch (const std::exception&) {
        return Status::ok();
    }
}

StatusOr<std::vector<Tensor>> KernelEvaluator::evaluate(const Node& n,
                                                        const std::vector<Tensor>& inputs,
                                                        const std::vector<OpsetImport>& opsets,
                                                        std::uint64_t max_bytes) const {
    try {
        auto sub = std::make_shared<Graph>();
        sub->name = "constant_folding";
        sub->opset_imports = opsets;
        Node copy;
        copy.name = n.name;
        copy.op_type = n.op_type;
        copy.domain = n.domain;
        copy.attributes = n.attributes;
        for (std::size_t i = 0; i < inputs.size(); ++i)
            copy.inputs.push_back(inputs[i].is_null()
                                      ? kNoValue
                                      : sub->add_initializer("i" + std::to_string(i), inputs[i]));
        for (std::size_t k = 0; k < n.outputs.size(); ++k) {
            if (n.outputs[k] == kNoValue) {
                copy.outputs.push_back(kNoValue);
                continue;
            }
            copy.outputs.push_back(sub->add_value("o" + std::to_string(k)));
            sub->outputs.push_back(copy.outputs.back());
        }
        sub->nodes.push_back(std::move(copy));
        DSINFER_RETURN_IF_ERROR(sub->sort_topologically());
        CompileOptions co;
        co.registry = &registry_;
        DSINFER_ASSIGN_OR_RETURN(auto compiled, CompiledGraph::compile(sub, co));
        // Sizes from the kernel's prepare, before anything is computed.
        std::uint64_t bytes = 0;
        for (ValueId out : sub->outputs) {
            const Value& v = sub->value(out);
            DSINFER_CHECK(v.dtype && v.shape.is_static(), ErrorCode::unsupported, n.describe(),
                          ": output size unknown before running");
            std::uint64_t numel = 1;
            for (const Dim& d : v.shape.dims) {
                const auto dv = static_cast<std::uint64_t>(d.value);
                DSINFER_CHECK(dv == 0 || numel <= max_bytes / dv, ErrorCode::unsupported,
                              n.describe(), ": output over ", max_bytes, " bytes");
                numel *= dv;
            }
            const std::uint64_t esize = *v.dtype == DType::string ? 64 : dtype_size(*v.dtype);
            DSINFER_CHECK(numel <= (max_bytes - bytes) / esize, ErrorCode::unsupported,
                          n.describe(), ": outputs over ", max_bytes, " bytes");
            bytes += numel * esize;
        }
        std::vector<Tensor> results;
        DSINFER_RETURN_IF_ERROR(compiled->execute({}, nullptr, RunControl{}, results));
        std::vector<Tensor> outs(n.outputs.size());
        std::size_t r = 0;
        for (std::size_t k = 0; k < n.outputs.size(); ++k)
            // A plain copy: the run's buffers come from the executor's pool.
            if (n.outputs[k] != kNoValue) outs[k] = results[r++].clone();
        return outs;
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "out of memory evaluating a constant");
    } catch (const Error& e) {  // e.g. Tensor::clone() out of memory; a size refused above
        return Status(e.code(), e.message());
    } catch (const std::exception& e) {
        return Status::error(ErrorCode::internal, n.describe(), ": ", e.what());
    }
}

}  // namespace detail

const GraphEvaluator& kernel_evaluator() {
    // Built on first use (function-local statics), never at static initialization.
    static const KernelRegistry registry = [] {
        KernelRegistry r;
        register_reference_kernels(r);
        return r;
    }();
    static const detail::KernelEvaluator evaluator(registry);
    return evaluator;
}

Status try_optimize(Graph& graph, const OptimizeOptions& options, OptimizeReport& report) noexcept {
    if (options.evaluator != nullptr) return try_run_passes(graph, options, report);
    try {
        OptimizeOptions with = options;
        with.evaluator = &kernel_evaluator();
        return try_run_passes(graph, with, report);
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "out of memory in the graph optimizer");
    }
}

OptimizeReport optimize(Graph& graph, const OptimizeOptions& options) {
    OptimizeReport r;
    Status st = try_optimize(graph, options, r);
    if (!st.is_ok()) throw Error(st);
    return r;
}

StatusOr<std::size_t> convert_float_precision(Graph& graph, DType to) {
    return convert_float_precision(graph, to, &kernel_evaluator());
}

}  // namespace dsinfer
