// tools/tool_cli.hpp — the CLI11 pieces every command-line tool shares (Debian's libcli11-dev,
// header-only; tools only, never in include/dsinfer).
//
// Purpose: one wording of a bad command line whichever tool reads it: cli_problem() turns a
// CLI11 parse error into the one-line problem the tools print after "<program>: " (CLI11's
// "--rtol: 1 required X missing" becomes "--rtol: missing value", "json was given a disallowed
// flag override" becomes "--json: takes no value") and extras_problem() an argument no option
// took ("unknown option '--x'", "unexpected argument 'x'"); SynopsisFormatter lays the help out as
// the synopsis, the description, CLI11's option groups and the footer. Used by bench::Cli
// (tools/bench_cli.hpp: ds-benchmark, ds-loadgen, make-bad-models) and ds-conformance.
//
// Usage:
//   try { app.parse(argc, argv); }
//   catch (const CLI::ParseError& e) { std::cerr << "tool: " << bench::cli_problem(e) << "\n"; }
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <utility>

namespace dsinfer::bench {

/// The problem a CLI11 parse error names, in the tools' words.
inline std::string cli_problem(const CLI::ParseError& e) {
    std::string problem = e.what();
    const auto ends_with = [&problem](std::string_view tail) {
        return problem.size() >= tail.size() &&
               problem.compare(problem.size() - tail.size(), tail.size(), tail) == 0;
    };
    const auto colon = problem.find(':');
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
        if (colon != std::string::npos && ends_with(" missing"))
            return problem.substr(0, colon) + ": missing value";
        constexpr std::string_view kOverride = " was given a disallowed flag override";
        if (ends_with(kOverride))
            return "--" + problem.substr(0, problem.size() - kOverride.size()) + ": takes no value";
    }
    return problem;
}

/// With CLI::App::allow_extras(): the first argument no option took, as a problem ("" when
/// there is none).
inline std::string extras_problem(const CLI::App& app) {
    const auto extras = app.remaining();
    if (extras.empty()) return {};
    const std::string& extra = extras.front();
    return extra.size() > 1 && extra[0] == '-' ? "unknown option '" + extra + "'"
                                               : "unexpected argument '" + extra + "'";
}

/// The help: the synopsis first, then the description, every option group and the footer.
class SynopsisFormatter : public CLI::Formatter {
public:
    explicit SynopsisFormatter(std::string synopsis) : synopsis_(std::move(synopsis)) {}
    std::string make_help(const CLI::App* app, std::string,
                          CLI::AppFormatMode mode) const override {
        std::string help = synopsis_ + "\n" + app->get_description() + "\n" +
                           make_groups(app, mode) + "\n" + make_footer(app);
        // CLI11 ends each group with two blank lines: keep one.
        for (auto at = help.find("\n\n\n"); at != std::string::npos; at = help.find("\n\n\n", at))
            help.erase(at, 1);
        return help;
    }

private:
    std::string synopsis_;
};

}  // namespace dsinfer::bench
