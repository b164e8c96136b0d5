// PLACEHOLDER: not implemented yet (replaced by the pass owner).
#include "passes/pass_utils.hpp"
#include "passes/passes_internal.hpp"

namespace dsinfer::passes {
namespace {
class FuseLayerNorm final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_layer_norm"; }
    int level() const noexcept override { return 2; }
    Status apply(Graph&, PassContext&) const override { return Status::ok(); }
};
class FuseSkipLayerNorm final : public GraphPass {
public:
    std::string_view name() const noexcept override { return "fuse_skip_layer_norm"; }
    int level() const noexcept override { return 2; }
    Status apply(Graph&, PassContext&) const override { return Status::ok(); }
};
}  // namespace

std::unique_ptr<GraphPass> make_fuse_layer_norm() { return std::make_unique<FuseLayerNorm>(); }
std::unique_ptr<GraphPass> make_fuse_skip_layer_norm() { return std::make_unique<FuseSkipLayerNorm>(); }

}  // namespace dsinfer::passes
