// dsinfer::version() and build_info() (dsinfer/version.hpp): the running library's version is
// the one config.hpp was configured with (the CMake project version), and its build facts agree
// with config.hpp's macros.
#include <catch2/catch.hpp>
#include <string>

#include "dsinfer/backends/onednn.hpp"
#include "dsinfer/config.hpp"
#include "dsinfer/dsinfer.hpp"

TEST_CASE("version() is the configured project version", "[version]") {
    const std::string v = dsinfer::version();
    CHECK(v == DSINFER_VERSION_STRING);
    CHECK(v == std::to_string(DSINFER_VERSION_MAJOR) + "." + std::to_string(DSINFER_VERSION_MINOR) +
                   "." + std::to_string(DSINFER_VERSION_PATCH));
}

TEST_CASE("build_info() agrees with config.hpp", "[version]") {
    const dsinfer::BuildInfo& b = dsinfer::build_info();
    CHECK(std::string(b.version) == dsinfer::version());
    CHECK(b.major == DSINFER_VERSION_MAJOR);
    CHECK(b.minor == DSINFER_VERSION_MINOR);
    CHECK(b.patch == DSINFER_VERSION_PATCH);
    CHECK(b.with_onednn == (DSINFER_WITH_ONEDNN != 0));
    CHECK(b.with_onednn == dsinfer::onednn_available());
    CHECK(b.with_cuda == (DSINFER_WITH_CUDA != 0));
#if defined(DSINFER_SHARED)
    CHECK(b.shared);
#else
    CHECK_FALSE(b.shared);
#endif
    CHECK(std::string(b.compiler) != "");
    CHECK(std::string(b.compiler) != "unknown");
    CHECK(&dsinfer::build_info() == &b);  // one object for the process
}
