// dsinfer/export.hpp — symbol visibility for the compiled library.
//
// DSINFER_API marks functions and classes that dsinfer::dsinfer exports. Header-only code
// (dsinfer::core) needs no export. Nothing here depends on the build configuration except
// DSINFER_SHARED / DSINFER_BUILDING, which the build sets.
#pragma once

#if defined(_WIN32) && defined(DSINFER_SHARED)
#if defined(DSINFER_BUILDING)
#define DSINFER_API __declspec(dllexport)
#else
#define DSINFER_API __declspec(dllimport)
#endif
#elif defined(DSINFER_SHARED)
#define DSINFER_API __attribute__((visibility("default")))
#else
#define DSINFER_API
#endif
