// Catch2 runner of the unit, fault and concurrency test executables.
//
// DSINFER_TEST_ISA=baseline|avx2|avx512 makes this process the run of its tests at that ISA
// level (tests/CMakeLists.txt registers the dispatch-dependent tests once per level, each as
// its own ctest entry): the level is forced with DSINFER_MAX_CPU_ISA before any kernel is
// dispatched (dsinfer's own kernels and oneDNN's JIT alike), and the process checks that the
// dispatch really is that level. A level the CPU does not have is reported as skipped, by name
// ("SKIPPED (ISA): ...", which the ctest entries' SKIP_REGULAR_EXPRESSION matches), never run
// at a lower level and counted as passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>

#ifndef DSINFER_TEST_NO_ENGINE
#include "kernels/simd.hpp"

namespace {

/// 0: go on; otherwise the exit status (after a skip message or an error).
int force_isa_level() {
    namespace fast = dsinfer::detail::fast;
    const char* want = std::getenv("DSINFER_TEST_ISA");
    if (want == nullptr || *want == '\0') return -1;
    fast::Isa isa{};
    if (!fast::parse_isa(want, isa)) {
        std::fprintf(stderr, "DSINFER_TEST_ISA=%s: want baseline, avx2 or avx512\n", want);
        return 2;
    }
    const fast::Isa host = fast::host_isa();
    if (static_cast<int>(host) < static_cast<int>(isa)) {
        std::printf("SKIPPED (ISA): this CPU's best level is %s, this run needs %s\n",
                    fast::isa_name(host), fast::isa_name(isa));
        return 0;
    }
    if (setenv("DSINFER_MAX_CPU_ISA", want, 1) != 0) return 1;
    if (fast::active_isa() != isa) {
        std::fprintf(stderr, "DSINFER_TEST_ISA=%s: the kernels dispatch to %s\n", want,
                     fast::isa_name(fast::active_isa()));
        return 1;
    }
    return -1;
}

}  // namespace
#endif

int main(int argc, char** argv) {
#ifndef DSINFER_TEST_NO_ENGINE
    if (const int rc = force_isa_level(); rc >= 0) return rc;
#endif
    return Catch::Session().run(argc, argv);
}
