// PLACEHOLDER: not implemented yet (replaced by the pass owner).
#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {
class EliminateCommonSubexpressions final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "eliminate_common_subexpressions"; }
    int level() const noexcept override { return 1; }
    Status apply(Graph&, PassContext&) const override { return Status::ok(); }
};
}  // namespace

std::unique_ptr<GraphPass> make_eliminate_common_subexpressions() { return std::make_unique<EliminateCommonSubexpressions>(); }

}  // namespace dsinfer::passes
