// PLACEHOLDER: not implemented yet (replaced by the pass owner).
#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {
class FuseGelu final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_gelu"; }
    int level() const noexcept override { return 2; }
    Status apply(Graph&, PassContext&) const override { return Status::ok(); }
};
}  // namespace

std::unique_ptr<GraphPass> make_fuse_gelu() { return std::make_unique<FuseGelu>(); }

}  // namespace dsinfer::passes
