// dsinfer/dsinfer.hpp — umbrella header: everything a consumer normally needs.
//
// Usage:
//   #include <dsinfer/dsinfer.hpp>
//   auto engine = dsinfer::InferenceEngine::load("model.onnx");
#pragma once

#include "dsinfer/batch_scheduler.hpp"
#include "dsinfer/cancellation.hpp"
#include "dsinfer/config.hpp"
#include "dsinfer/engine.hpp"
#include "dsinfer/graph.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/kernel_registry.hpp"
#include "dsinfer/memory_pool.hpp"
#include "dsinfer/prune.hpp"
#include "dsinfer/status.hpp"
#include "dsinfer/tensor.hpp"
#include "dsinfer/threads.hpp"
#include "dsinfer/version.hpp"
#include "dsinfer/weight_store.hpp"
