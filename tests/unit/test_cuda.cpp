// [cuda] tests: run only where a GPU is present; CPU-only machines skip them with a message.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include <dsinfer/config.hpp>
#if DSINFER_WITH_CUDA
#include <dsinfer/backends/cuda.hpp>
#endif

TEST_CASE("cuda: device discovery never fails on a machine without a GPU", "[cuda]") {
#if DSINFER_WITH_CUDA
    const int n = dsinfer::cuda_device_count();
    const std::string status = dsinfer::cuda_status();
    CHECK(n >= 0);
    CHECK_FALSE(status.empty());
    if (n == 0) {
        WARN("SKIPPED: " << status);
        CHECK(status.rfind("no CUDA device", 0) == 0);
    } else {
        CHECK(status.find("device(s)") != std::string::npos);
    }
#else
    WARN("SKIPPED: built without DSINFER_WITH_CUDA");
#endif
}

#if DSINFER_WITH_CUDA
namespace {
/// True when this process has libcublasLt mapped.
bool cublaslt_mapped() {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line))
        if (line.find("libcublasLt") != std::string::npos) return true;
    return false;
}
}  // namespace
#endif

TEST_CASE("cuda: cuBLASLt is opened with the first CUDA device, never by a CPU-only process", "[cuda]") {
#if DSINFER_WITH_CUDA
    // Linked, libcublasLt cost every process ~150 MiB of RSS at start-up. It is now opened by
    // the first device runtime (here through cuda_memory_stats(0), which creates it).
    (void)dsinfer::cuda_memory_stats(0);
    if (dsinfer::cuda_device_count() == 0) {
        CHECK_FALSE(cublaslt_mapped());
        WARN("SKIPPED (the GPU half): " << dsinfer::cuda_status());
    } else {
        CHECK(cublaslt_mapped());
    }
#else
    WARN("SKIPPED: built without DSINFER_WITH_CUDA");
#endif
}
