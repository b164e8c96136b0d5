// annotate_shapes(): the ops' own shape/dtype rules (src/ops/op_info.hpp) over the graph, then
// the evaluator's shape inference for what they leave unknown (pass_utils.hpp).
#include <new>

#include "ops/op_info.hpp"
#include "passes/pass_utils.hpp"

namespace dsinfer::passes {

void annotate_shapes(Graph& g, const GraphEvaluator* evaluator) {
    // The rules first: no kernel, no compile. A contradiction they find is left for the real
    // compile to report (the outputs of that node stay as they were).
    const detail::ShapeAnnotation a = detail::annotate_graph_shapes(g);
    if (a.complete() || evaluator == nullptr) return;
    // Nodes without a rule (control flow, rare ops) or with outputs still unknown: the
    // evaluator fills what it can prove of the rest.
    const Status st = evaluator->infer_shapes(g);
    // Out of memory is not a reason to load a less optimized model: the caller fails the load
    // with resource_exhausted (try_run_passes catches bad_alloc). Any other error: inference is
    // best effort, and fusions needing shapes simply do not fire.
    if (st.code() == ErrorCode::resource_exhausted) throw std::bad_alloc();
}

}  // namespace dsinfer::passes
