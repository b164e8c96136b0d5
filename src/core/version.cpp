// dsinfer::version() and build_info() (dsinfer/version.hpp): the values config.hpp had when this
// library was compiled. DSINFER_BUILD_TYPE comes from the build (CMakeLists.txt).
#include "dsinfer/version.hpp"

#include "dsinfer/config.hpp"

#ifndef DSINFER_BUILD_TYPE
#define DSINFER_BUILD_TYPE ""
#endif

#define DSINFER_STR2(x) #x
#define DSINFER_STR(x) DSINFER_STR2(x)

namespace dsinfer {

namespace {

#if defined(__clang__)
constexpr const char* kCompiler = "Clang " DSINFER_STR(__clang_major__) "." DSINFER_STR(
    __clang_minor__) "." DSINFER_STR(__clang_patchlevel__);
#elif defined(__GNUC__)
constexpr const char* kCompiler = "GCC " DSINFER_STR(__GNUC__) "." DSINFER_STR(
    __GNUC_MINOR__) "." DSINFER_STR(__GNUC_PATCHLEVEL__);
#elif defined(_MSC_VER)
constexpr const char* kCompiler = "MSVC " DSINFER_STR(_MSC_FULL_VER);
#else
constexpr const char* kCompiler = "unknown";
#endif

#if defined(DSINFER_SHARED)
constexpr bool kShared = true;
#else
constexpr bool kShared = false;
#endif

constexpr BuildInfo kBuildInfo{DSINFER_VERSION_STRING,
                               DSINFER_VERSION_MAJOR,
                               DSINFER_VERSION_MINOR,
                               DSINFER_VERSION_PATCH,
                               kCompiler,
                               DSINFER_BUILD_TYPE,
                               DSINFER_WITH_ONEDNN != 0,
                               DSINFER_WITH_CUDA != 0,
                               kShared};

}  // namespace

const char* version() noexcept { return kBuildInfo.version; }

const BuildInfo& build_info() noexcept { return kBuildInfo; }

}  // namespace dsinfer
