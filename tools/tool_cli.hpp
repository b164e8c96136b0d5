// tools/tool_cli.hpp — the CLI11 pieces every command-line tool shares (Debian's libcli11-dev,
// header-only; tools only, never in include/dsinfer).
//
// Purpose: one wording of a bad command line whichever tool reads it: cli_problem() turns a
// CLI11 parse error into the one-line problem the tools print after "<program>: " (CLI11's
// "--rtol: 1 required X missing" becomes "--rtol: missing value", "json was given a disallowed
// flag override" becomes "--json: takes no value") and extras_problem() an argument no option
// took ("unknown option '--x'", "unexpected argument 'x'"). One help and one version for every
// tool: a ManPage holds a tool's manual page and use_man_page() makes it the tool's --help, in
// the sections of a man page (NAME, SYNOPSIS, DESCRIPTION, OPTIONS as CLI11 lays out the option
// groups, EXAMPLES, EXIT STATUS); ManPage::usage() is the short usage a bad command line prints
// after its problem; add_version_flag() adds --version, which prints version_text(): "<program>
// (dsinfer X.Y.Z)" (the running library's dsinfer::version()) and a line of build facts. Used
// by bench::Cli (tools/bench_cli.hpp: ds-benchmark, ds-compare, ds-convert, ds-inspect,
// ds-loadgen, ds-profiler, make-bad-models) and ds-conformance.
//
// Usage:
//   const bench::ManPage page{"ds-tool", "what it does", kSynopsis, kDescription, kExamples,
//                             kExitStatus};
//   CLI::App app(page.summary, page.program);
//   bench::use_man_page(app, page, 26);   // the option column 26 wide
//   bench::add_version_flag(app, page.program);
//   try { app.parse(argc, argv); }
//   catch (const CLI::CallForHelp&) { std::cout << app.help(); }
//   catch (const CLI::CallForVersion& v) { std::cout << v.what() << "\n"; }
//   catch (const CLI::ParseError& e) {
//       std::cerr << "ds-tool: " << bench::cli_problem(e) << "\n" << page.usage();
//   }
#pragma once

#include <CLI/CLI.hpp>
#include <dsinfer/version.hpp>

#include <algorithm>
#include <cstddef>
#include <iostream>
#include <memory>
#include <optional>
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

/// A tool's manual page: its --help, around the option groups CLI11 lays out. Each text is
/// lines ending in '\n', unindented: the help indents them under their section's heading.
struct ManPage {
    std::string program;      ///< "ds-inspect"
    std::string summary;      ///< NAME: what it does, in a few words ("describe an ONNX model")
    /// "usage: ds-x ARGS\n       ds-x --help | --version\n": the SYNOPSIS (without "usage: ")
    /// and, as it is, the usage a bad command line prints.
    std::string synopsis;
    std::string description;  ///< DESCRIPTION: what it does, its output and its caveats
    std::string examples;     ///< EXAMPLES: command lines, each followed by what it does
    std::string exit_status;  ///< EXIT STATUS: "0  ok\n1  ...\n2  bad command line\n"

    /// What a bad command line prints after its problem: the synopsis and where the rest is.
    std::string usage() const {
        return synopsis + "Run '" + program + " --help' for the options, examples and exit status.\n";
    }
};

/// `text`, each non-empty line indented by `indent` spaces.
inline std::string indented(std::string_view text, std::size_t indent) {
    std::string out;
    while (!text.empty()) {
        const auto eol = text.find('\n');
        const std::string_view line = text.substr(0, eol);
        if (!line.empty()) out.append(indent, ' ').append(line);
        out += '\n';
        if (eol == std::string_view::npos) break;
        text.remove_prefix(eol + 1);
    }
    return out;
}

/// The help as a manual page: NAME, SYNOPSIS, DESCRIPTION, OPTIONS (the positional arguments,
/// then CLI11's option groups), EXAMPLES and EXIT STATUS.
class ManPageFormatter : public CLI::Formatter {
public:
    explicit ManPageFormatter(ManPage page) : page_(std::move(page)) {
        label("Positionals", "Arguments");
    }
    std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode mode) const override {
        // The synopsis without "usage: ", its continuation lines moved left as far.
        constexpr std::string_view kUsage = "usage: ";
        std::string synopsis;
        std::string_view text = page_.synopsis;
        while (!text.empty()) {
            const auto eol = text.find('\n');
            std::string_view line = text.substr(0, eol);
            if (line.substr(0, kUsage.size()) == kUsage ||
                line.find_first_not_of(' ') >= kUsage.size())
                line.remove_prefix(std::min(kUsage.size(), line.size()));
            synopsis.append(line).append("\n");
            if (eol == std::string_view::npos) break;
            text.remove_prefix(eol + 1);
        }
        std::string options = make_positionals(app) + make_groups(app, mode);
        if (!options.empty() && options[0] == '\n') options.erase(0, 1);
        std::string help = "NAME\n" + indented(page_.program + " - " + page_.summary, 4) +
                           "\nSYNOPSIS\n" + indented(synopsis, 4) + "\nDESCRIPTION\n" +
                           indented(page_.description, 4) + "\nOPTIONS\n" + options + "\n";
        if (!page_.examples.empty()) help += "EXAMPLES\n" + indented(page_.examples, 4) + "\n";
        if (!page_.exit_status.empty()) help += "EXIT STATUS\n" + indented(page_.exit_status, 4);
        // CLI11 ends each group with blank lines: keep one between sections, none at the end.
        for (auto at = help.find("\n\n\n"); at != std::string::npos; at = help.find("\n\n\n", at))
            help.erase(at, 1);
        while (help.size() > 1 && help.compare(help.size() - 2, 2, "\n\n") == 0) help.pop_back();
        return help;
    }

private:
    ManPage page_;
};

/// Makes `page` the help of `app` (the option list `column_width` wide before the
/// descriptions).
inline void use_man_page(CLI::App& app, const ManPage& page, std::size_t column_width) {
    app.formatter(std::make_shared<ManPageFormatter>(page));
    app.get_formatter()->column_width(column_width);
}

/// What --version prints: "<program> (dsinfer X.Y.Z)" with the running library's version, then
/// how the library was built.
inline std::string version_text(const std::string& program) {
    const dsinfer::BuildInfo& b = dsinfer::build_info();
    std::string build_type = *b.build_type != '\0' ? std::string(", ") + b.build_type : "";
    return program + " (dsinfer " + dsinfer::version() + ")\nbuilt with " + b.compiler +
           build_type + "; oneDNN backend: " + (b.with_onednn ? "yes" : "no") +
           "; CUDA plugin: " + (b.with_cuda ? "yes" : "no");
}

/// Adds --version to `app`: parsing it throws CLI::CallForVersion, whose what() is
/// version_text(program); the caller prints it on stdout and exits 0.
inline CLI::Option* add_version_flag(CLI::App& app, const std::string& program) {
    return app.set_version_flag(
        "--version", [program] { return version_text(program); }, "print the version and exit");
}

/// A bad command line: "<program>: <problem>" and the usage on stderr; returns exit status 2.
inline int command_line_error(const ManPage& page, const std::string& problem) {
    std::cerr << page.program << ": " << problem << "\n" << page.usage();
    return 2;
}

/// Parses the command line of a tool whose app allow_extras() (the arguments no option took
/// are reported as problems): nullopt to go on, or the exit status to stop with: 0 after
/// printing --help or --version on stdout, 2 after command_line_error().
inline std::optional<int> parse_command_line(CLI::App& app, const ManPage& page, int argc,
                                             char** argv) {
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
        std::cout << app.help();
        return 0;
    } catch (const CLI::CallForVersion& v) {
        std::cout << v.what() << "\n";
        return 0;
    } catch (const CLI::ParseError& e) {
        return command_line_error(page, cli_problem(e));  // "--rtol: missing value"
    }
    if (auto problem = extras_problem(app); !problem.empty())
        return command_line_error(page, problem);
    return std::nullopt;
}

}  // namespace dsinfer::bench
