// make-bad-models: writes the malformed-model corpus (tests/unit/bad_models.hpp: one defect per
// model, every row of shared/guide/BAD_INPUTS.md sections A-D) into a folder, one sub-folder per
// case (the model plus its side files: external data, symlinks, hard links, FIFOs), with a
// manifest.json listing each case's name, file, expected ErrorCode, description and the
// ModelLimits it must be loaded with where they differ from the defaults.
//
//   make-bad-models OUT_DIR [--filter SUBSTRING]   (CLI11; exit 2 on a bad command line)
//   make-bad-models --help | --version
//
// The folder is for fuzzers and other loaders; the unit test test_bad_models.cpp loads every case
// and checks the code. Note: one case is a sparse 2 GiB + 1 byte file (a few KiB on disk); copy
// the folder with tools that keep sparse files, symlinks, hard links and FIFOs (cp -a, tar).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "bench_cli.hpp"
#include "tool_json.hpp"
#include "unit/bad_models.hpp"

namespace fs = std::filesystem;
using dsinfer::bench::Json;

namespace {

/// The ModelLimits fields that differ from the defaults, as a JSON object.
Json limits_json(const dsinfer::ModelLimits& l) {
    const dsinfer::ModelLimits d;
    Json j = Json::object();
    auto field = [&](const char* name, auto value, auto def) {
        if (value != def) j[name] = value;
    };
    field("max_model_bytes", l.max_model_bytes, d.max_model_bytes);
    field("max_external_bytes", l.max_external_bytes, d.max_external_bytes);
    field("max_tensor_bytes", l.max_tensor_bytes, d.max_tensor_bytes);
    field("max_nodes", l.max_nodes, d.max_nodes);
    field("max_rank", l.max_rank, d.max_rank);
    field("max_subgraph_depth", l.max_subgraph_depth, d.max_subgraph_depth);
    field("max_protobuf_depth", l.max_protobuf_depth, d.max_protobuf_depth);
    field("max_loop_iterations", l.max_loop_iterations, d.max_loop_iterations);
    return j;
}

}  // namespace

int main(int argc, char** argv) {
    std::string out_dir, filter;
    dsinfer::bench::Cli cli(
        {"make-bad-models", "write the malformed-model corpus",
         "usage: make-bad-models OUT_DIR [--filter SUBSTRING]\n"
         "       make-bad-models --help | --version\n",
         "Writes the malformed-model corpus of tests/unit/bad_models.hpp into OUT_DIR, one\n"
         "folder per case (the model and its side files), with a manifest.json listing each\n"
         "case's name, file, expected ErrorCode, description and the ModelLimits to load it with.\n"
         "\n"
         "One case is a sparse 2 GiB + 1 byte file: copy the folder with tools that keep sparse\n"
         "files, symlinks, hard links and FIFOs (cp -a, tar).\n",
         "make-bad-models bad-models\n"
         "    every case\n"
         "make-bad-models bad-models --filter truncated\n"
         "    the cases whose name contains 'truncated'\n",
         "0  ok\n"
         "1  a case could not be written\n"
         "2  bad command line\n"});
    cli.app()
        .add_option("OUT_DIR", out_dir, "the folder to write (created when missing)")
        ->type_name("")
        ->required();
    cli.text("--filter", filter, "SUBSTRING", "only the cases whose name contains SUBSTRING");
    cli.parse(argc, argv);
    const fs::path out = out_dir;
    try {
        fs::create_directories(out);
        Json cases = Json::array();
        for (const auto& c : dsinfer::test::bad_model_cases()) {
            if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
            const fs::path dir = out / c.name;
            fs::remove_all(dir);
            fs::create_directories(dir);
            c.write(dir);
            cases.push_back({{"name", c.name},
                             {"section", std::string(1, c.section)},
                             {"file", c.name + "/" + dsinfer::test::kBadModelFile},
                             {"expected", std::string(dsinfer::to_string(c.expected))},
                             {"description", c.description},
                             {"message_contains", c.mention},
                             {"limits", limits_json(c.limits)}});
        }
        const Json manifest = {{"source", "shared/guide/BAD_INPUTS.md sections A-D"},
                               {"model_file", dsinfer::test::kBadModelFile},
                               {"cases", cases}};
        std::ofstream(out / "manifest.json") << dsinfer::bench::json_text(manifest, 2) << "\n";
        std::cout << "make-bad-models: wrote " << cases.size() << " cases and manifest.json to "
                  << out.string() << "\n";
    } catch (const std::exception& e) {
        std::cerr << "make-bad-models: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
