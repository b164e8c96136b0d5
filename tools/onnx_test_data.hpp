// tools/onnx_test_data.hpp — the layout of an ONNX backend-test folder (model.onnx beside
// test_data_set_*/input_N.pb and output_N.pb, the ONNX project's own conformance data).
//
// Shared by ds-conformance and the unit tests that replay the conformance inputs
// (tests/unit/test_special_values.cpp). Plain functions; thread-safe.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace dsinfer::tools {

/// DIR/PREFIX0.pb, DIR/PREFIX1.pb, ... up to the first number with no file.
inline std::vector<std::filesystem::path> numbered_pb_files(const std::filesystem::path& dir,
                                                            const std::string& prefix) {
    std::vector<std::filesystem::path> files;
    for (int i = 0;; ++i) {
        std::filesystem::path p = dir / (prefix + std::to_string(i) + ".pb");
        if (!std::filesystem::exists(p)) break;
        files.push_back(p);
    }
    return files;
}

}  // namespace dsinfer::tools
