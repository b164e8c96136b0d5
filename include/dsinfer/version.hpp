// dsinfer/version.hpp — the version of the dsinfer library a program runs with, and how it was
// built.
//
// Purpose: config.hpp's DSINFER_VERSION_STRING is the version of the headers a program was
// compiled against; version() is the version of the library it runs with (the two differ when
// an application built against one shared libdsinfer runs with another). build_info() adds the
// facts a bug report needs and no git checkout is required for: the compiler, the build type and
// the backends compiled in. The command-line tools print these for --version.
//
// Threading: every function is thread-safe (constant data).
//
// Usage:
//   #include <dsinfer/version.hpp>
//   std::printf("dsinfer %s\n", dsinfer::version());
//   const dsinfer::BuildInfo& b = dsinfer::build_info();
//   if (!b.with_onednn) std::puts("no oneDNN backend in this build");
#pragma once

#include "dsinfer/export.hpp"

namespace dsinfer {

/// How the running library was built (all strings are static: never freed).
struct BuildInfo {
    const char* version = "";  ///< "MAJOR.MINOR.PATCH", as version()
    int major = 0;
    int minor = 0;
    int patch = 0;
    const char* compiler = "";    ///< "GCC 12.2.0", "Clang 16.0.6"
    const char* build_type = "";  ///< CMake's configuration: "Release", "Debug", ...
    bool with_onednn = false;     ///< the oneDNN backend is compiled in (DSINFER_WITH_ONEDNN)
    bool with_cuda = false;       ///< the CUDA plugin was built alongside (DSINFER_WITH_CUDA)
    bool shared = false;          ///< libdsinfer is a shared library
};

/// The running library's version, "MAJOR.MINOR.PATCH" (the CMake project version it was built
/// as; config.hpp's DSINFER_VERSION_STRING in the same build).
DSINFER_API const char* version() noexcept;

/// The running library's version and build facts.
DSINFER_API const BuildInfo& build_info() noexcept;

}  // namespace dsinfer
