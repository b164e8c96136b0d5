// annotate_shapes(): the executor's load-time inference, run for the optimizer (pass_utils.hpp).
#include <new>

#include "core/executor.hpp"
#include "passes/pass_utils.hpp"

namespace dsinfer::passes {

void annotate_shapes(Graph& g) {
    try {
        KernelRegistry registry;
        register_reference_kernels(registry);
        detail::CompileOptions co;
        co.registry = &registry;
        auto copy = std::make_shared<Graph>(g);
        auto compiled = detail::CompiledGraph::compile(copy, co);
        // Out of memory is not a reason to load a less optimized model: the caller fails the
        // load with resource_exhausted (try_optimize catches bad_alloc).
        if (!compiled.is_ok() && compiled.status().code() == ErrorCode::resource_exhausted)
            throw std::bad_alloc();
        if (!compiled.is_ok() || copy->values.size() != g.values.size()) return;
        for (std::size_t i = 0; i < g.values.size(); ++i) {
            Value& v = g.values[i];
            const Value& inferred = copy->values[i];
            if (!v.dtype && inferred.dtype) v.dtype = inferred.dtype;
            if (inferred.shape.known && !v.shape.is_static()) v.shape = inferred.shape;
        }
    } catch (const std::bad_alloc&) {
        throw;
    } catch (...) {
        // Inference is best effort: fusions needing shapes simply do not fire.
    }
}

}  // namespace dsinfer::passes
