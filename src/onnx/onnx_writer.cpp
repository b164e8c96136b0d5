// PLACEHOLDER: save_onnx is implemented by the level-1 pass owner.
#include "dsinfer/passes.hpp"

namespace dsinfer {
void save_onnx(const Graph&, const std::filesystem::path&) {
    throw Error(ErrorCode::unsupported, "save_onnx is not implemented yet");
}
}  // namespace dsinfer
