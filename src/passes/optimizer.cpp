// run_passes(): runs a pipeline of passes filtered by optimization level (dsinfer/passes.hpp);
// PassPipeline. optimize() (run_passes() with the kernel evaluator) is the engine room's
// (src/core/graph_evaluator.cpp): nothing here links a kernel.
#include <algorithm>
#include <chrono>
#include <new>

#include "dsinfer/passes.hpp"
#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer {

std::vector<std::unique_ptr<GraphPass>> default_passes() {
    using namespace passes;
    std::vector<std::unique_ptr<GraphPass>> p;
    // Level 1: clean-up first, so that fusions see canonical patterns.
    p.push_back(make_eliminate_identity());
    p.push_back(make_constant_folding());
    p.push_back(make_eliminate_common_subexpressions());
    p.push_back(make_eliminate_dead_code());
    // Level 2: fusions; attention before the MatMul+bias fusion (its projections are part of
    // the attention pattern), LayerNorm before skip-LayerNorm; the dynamically quantized
    // Linear layers before skip-LayerNorm, which would otherwise take their bias Add; the QDQ
    // islands into integer ops before any float fusion takes their Conv/MatMul/Gemm.
    p.push_back(make_fuse_conv_batchnorm());
    p.push_back(make_fuse_dynamic_quant_matmul());
    p.push_back(make_fuse_qdq());
    p.push_back(make_fuse_qlinear_conv_add());
    p.push_back(make_fold_weight_dequantize());
    p.push_back(make_fuse_layer_norm());
    p.push_back(make_fuse_rms_norm());
    p.push_back(make_fuse_gelu());
    p.push_back(make_fuse_gated_mlp());  // after fuse_gelu (its Gelu), before the MatMul fusion
    p.push_back(make_fuse_rotary_embedding());
    p.push_back(make_fuse_attention());
    p.push_back(make_fuse_skip_layer_norm());
    p.push_back(make_fuse_matmul_bias_activation());
    p.push_back(make_fuse_conv_add_activation());
    p.push_back(make_fuse_layer_norm_linear());
    // Dead code left behind by fusions.
    p.push_back(make_eliminate_dead_code());
    return p;
}

namespace {

void require_pass(const std::shared_ptr<const GraphPass>& pass) {
    if (pass == nullptr)
        throw Error(Status::error(ErrorCode::invalid_argument, "PassPipeline: null pass"));
}

}  // namespace

PassPipeline PassPipeline::defaults() {
    PassPipeline p;
    for (auto& pass : default_passes()) p.add(std::move(pass));
    return p;
}

PassPipeline& PassPipeline::add(std::shared_ptr<const GraphPass> pass) {
    require_pass(pass);
    passes_.push_back(std::move(pass));
    return *this;
}

std::vector<std::shared_ptr<const GraphPass>>::iterator PassPipeline::find(std::string_view name) {
    auto it = std::find_if(passes_.begin(), passes_.end(),
                           [&](const auto& p) { return p->name() == name; });
    if (it == passes_.end())
        throw Error(Status::error(ErrorCode::invalid_argument, "PassPipeline: no pass named '",
                                  name, "'"));
    return it;
}

PassPipeline& PassPipeline::insert_before(std::string_view name,
                                          std::shared_ptr<const GraphPass> pass) {
    require_pass(pass);
    passes_.insert(find(name), std::move(pass));
    return *this;
}

PassPipeline& PassPipeline::insert_after(std::string_view name,
                                         std::shared_ptr<const GraphPass> pass) {
    require_pass(pass);
    passes_.insert(find(name) + 1, std::move(pass));
    return *this;
}

Status try_run_passes(Graph& graph, const OptimizeOptions& options,
                      OptimizeReport& report) noexcept {
    try {
        const auto t0 = std::chrono::steady_clock::now();
        DSINFER_CHECK(options.level >= 0 && options.level <= 3, ErrorCode::invalid_argument,
                      "optimization level must be 0..3, got ", options.level);
        report = OptimizeReport{};
        report.nodes_before = graph.nodes.size();
        if (options.level > 0) {
            PassContext ctx;
            ctx.options = options;
            ctx.report = &report;
            const PassPipeline pipeline =
                options.passes.empty() ? PassPipeline::defaults() : options.passes;
            bool annotated = false;
            for (const auto& pass : pipeline.passes()) {
                if (pass->level() > options.level) continue;
                const auto& off = options.disabled_passes;
                if (std::find(off.begin(), off.end(), pass->name()) != off.end()) continue;
                // Fusions compare shapes: infer them once, on the cleaned-up graph.
                if (pass->level() >= 2 && !annotated) {
                    passes::annotate_shapes(graph, options.evaluator);
                    annotated = true;
                }
                Status st = pass->apply(graph, ctx);
                if (!st.is_ok())
                    return st.with_context("optimizer pass '" + std::string(pass->name()) + "': ");
            }
        }
        report.nodes_after = graph.nodes.size();
        report.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                        .count();
        return Status::ok();
    } catch (const Error& e) {
        return Status(e.code(), e.message());
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "out of memory in the graph optimizer");
    } catch (const std::exception& e) {
        return Status::error(ErrorCode::internal, "graph optimizer: ", e.what());
    }
}

OptimizeReport run_passes(Graph& graph, const OptimizeOptions& options) {
    OptimizeReport r;
    Status st = try_run_passes(graph, options, r);
    if (!st.is_ok()) throw Error(st);
    return r;
}

}  // namespace dsinfer
