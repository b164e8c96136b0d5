// PLACEHOLDER: not implemented yet (replaced by the pass owner).
#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {
class ConstantFolding final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "constant_folding"; }
    int level() const noexcept override { return 1; }
    Status apply(Graph&, PassContext&) const override { return Status::ok(); }
};
}  // namespace

std::unique_ptr<GraphPass> make_constant_folding() { return std::make_unique<ConstantFolding>(); }

}  // namespace dsinfer::passes
