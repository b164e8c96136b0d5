// PLACEHOLDER: not implemented yet (replaced by the pass owner).
#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {
class FuseConvBatchnorm final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_conv_batchnorm"; }
    int level() const noexcept override { return 2; }
    Status apply(Graph&, PassContext&) const override { return Status::ok(); }
};
class FuseConvAddActivation final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_conv_add_activation"; }
    int level() const noexcept override { return 2; }
    Status apply(Graph&, PassContext&) const override { return Status::ok(); }
};
}  // namespace

std::unique_ptr<GraphPass> make_fuse_conv_batchnorm() { return std::make_unique<FuseConvBatchnorm>(); }
std::unique_ptr<GraphPass> make_fuse_conv_add_activation() { return std::make_unique<FuseConvAddActivation>(); }

}  // namespace dsinfer::passes
