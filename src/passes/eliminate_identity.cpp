// PLACEHOLDER: not implemented yet (replaced by the pass owner).
#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {
class EliminateIdentity final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "eliminate_identity"; }
    int level() const noexcept override { return 1; }
    Status apply(Graph&, PassContext&) const override { return Status::ok(); }
};
}  // namespace

std::unique_ptr<GraphPass> make_eliminate_identity() { return std::make_unique<EliminateIdentity>(); }

}  // namespace dsinfer::passes
