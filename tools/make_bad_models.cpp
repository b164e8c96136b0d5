// make-bad-models: writes the malformed-model corpus (tests/unit/bad_models.hpp: one defect per
// model, every row of shared/guide/BAD_INPUTS.md sections A-D) into a folder, one sub-folder per
// case (the model plus its side files: external data, symlinks, hard links, FIFOs), with a
// manifest.json listing each case's name, file, expected ErrorCode, description and the
// ModelLimits it must be loaded with where they differ from the defaults.
//
//   make-bad-models OUT_DIR [--filter SUBSTRING]
//
// The folder is for fuzzers and other loaders; the unit test test_bad_models.cpp loads every case
// and checks the code. Note: one case is a sparse 2 GiB + 1 byte file (a few KiB on disk); copy
// the folder with tools that keep sparse files, symlinks, hard links and FIFOs (cp -a, tar).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "unit/bad_models.hpp"

namespace fs = std::filesystem;

namespace {

std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += static_cast<char>(c);
                }
        }
    }
    return out + "\"";
}

/// The ModelLimits fields that differ from the defaults, as a JSON object.
std::string limits_json(const dsinfer::ModelLimits& l) {
    const dsinfer::ModelLimits d;
    std::ostringstream os;
    const char* sep = "";
    auto field = [&](const char* name, auto value, auto def) {
        if (value == def) return;
        os << sep << "\"" << name << "\": " << value;
        sep = ", ";
    };
    field("max_model_bytes", l.max_model_bytes, d.max_model_bytes);
    field("max_external_bytes", l.max_external_bytes, d.max_external_bytes);
    field("max_tensor_bytes", l.max_tensor_bytes, d.max_tensor_bytes);
    field("max_nodes", l.max_nodes, d.max_nodes);
    field("max_rank", l.max_rank, d.max_rank);
    field("max_subgraph_depth", l.max_subgraph_depth, d.max_subgraph_depth);
    field("max_protobuf_depth", l.max_protobuf_depth, d.max_protobuf_depth);
    field("max_loop_iterations", l.max_loop_iterations, d.max_loop_iterations);
    std::string json = "{";
    json += os.str();
    json += "}";
    return json;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
        std::cerr << "usage: make-bad-models OUT_DIR [--filter SUBSTRING]\n";
        return argc < 2 ? 2 : 0;
    }
    const fs::path out = argv[1];
    std::string filter;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--filter" && i + 1 < argc) {
            filter = argv[++i];
        } else {
            std::cerr << "make-bad-models: unknown argument '" << a << "'\n";
            return 2;
        }
    }
    try {
        fs::create_directories(out);
        std::ostringstream manifest;
        manifest << "{\n  \"source\": \"shared/guide/BAD_INPUTS.md sections A-D\",\n"
                 << "  \"model_file\": " << json_string(dsinfer::test::kBadModelFile) << ",\n"
                 << "  \"cases\": [\n";
        int written = 0;
        for (const auto& c : dsinfer::test::bad_model_cases()) {
            if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
            const fs::path dir = out / c.name;
            fs::remove_all(dir);
            fs::create_directories(dir);
            c.write(dir);
            manifest << (written ? ",\n" : "") << "    {\"name\": " << json_string(c.name)
                     << ", \"section\": \"" << c.section << "\""
                     << ", \"file\": " << json_string(c.name + "/" + dsinfer::test::kBadModelFile)
                     << ", \"expected\": "
                     << json_string(std::string(dsinfer::to_string(c.expected)))
                     << ", \"description\": " << json_string(c.description)
                     << ", \"message_contains\": " << json_string(c.mention)
                     << ", \"limits\": " << limits_json(c.limits) << "}";
            ++written;
        }
        manifest << "\n  ]\n}\n";
        std::ofstream(out / "manifest.json") << manifest.str();
        std::cout << "make-bad-models: wrote " << written << " cases and manifest.json to "
                  << out.string() << "\n";
    } catch (const std::exception& e) {
        std::cerr << "make-bad-models: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
