// annotate_shapes(): the evaluator's shape inference, run for the optimizer (pass_utils.hpp).
#include <new>

#include "passes/pass_utils.hpp"

namespace dsinfer::passes {

void annotate_shapes(Graph& g, const GraphEvaluator* evaluator) {
    if (evaluator == nullptr) return;  // declared shapes only: shape-dependent fusions do less
    const Status st = evaluator->infer_shapes(g);
    // Out of memory is not a reason to load a less optimized model: the caller fails the load
    // with resource_exhausted (try_run_passes catches bad_alloc). Any other error: inference is
    // best effort, and fusions needing shapes simply do not fire.
    if (st.code() == ErrorCode::resource_exhausted) throw std::bad_alloc();
}

}  // namespace dsinfer::passes
