// Test knobs read from the environment (e.g. the storm tests' DSINFER_STORM_THREADS).
#pragma once

#include <cstdlib>

namespace dsinfer::test {

/// The positive integer in environment variable `name`, else `fallback`.
inline int env_int(const char* name, int fallback) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return fallback;
    const int n = std::atoi(v);
    return n > 0 ? n : fallback;
}

}  // namespace dsinfer::test
