// GPU engines: a whole run captured once per exact shape as a CUDA graph and replayed.
#include "core/executor.hpp"
#include "core/executor_internal.hpp"
#include "core/memory_planner.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <map>
#include <new>
#include <optional>
#include <span>

namespace dsinfer::detail {


std::shared_ptr<CompiledGraph::CapturedRun> CompiledGraph::find_captured(
    const std::vector<std::int64_t>& key) const {
    std::lock_guard<std::mutex> lock(graphs_.mu);
    return lru_find(graphs_.lru, key);
}

Status CompiledGraph::replay(CapturedRun& run, const std::vector<Tensor>& inputs,
                             std::vector<Tensor>& outputs) const {
    DSINFER_RETURN_IF_ERROR(device_->health());
    DSINFER_RETURN_IF_ERROR(device_->activate());
    DeviceScope dev(device_.get());
    DSINFER_ASSIGN_OR_RETURN(dev.stream, device_->acquire_stream());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const auto& b = run.inputs[i];
        if (b.ptr == nullptr) continue;
        if (!(inputs[i].shape() == b.shape) || inputs[i].dtype() != b.dtype)
            return Status::error(ErrorCode::internal, "captured graph replayed with another shape class");
        const void* src = inputs[i].raw_data();
        if (void* pin = dev.staging(inputs[i].num_bytes())) {
            std::memcpy(pin, src, inputs[i].num_bytes());
            src = pin;
        }
        DSINFER_RETURN_IF_ERROR(device_->copy_to_device(b.ptr, src, inputs[i].num_bytes(), dev.stream));
        transfers_.h2d.fetch_add(inputs[i].num_bytes(), std::memory_order_relaxed);
        transfers_.copies.fetch_add(1, std::memory_order_relaxed);
    }
    DSINFER_RETURN_IF_ERROR(device_->replay(run.exec.get(), dev.stream));
    outputs.clear();
    std::vector<void*> pins(run.outputs.size(), nullptr);
    for (std::size_t k = 0; k < run.outputs.size(); ++k) {
        const auto& b = run.outputs[k];
        DSINFER_ASSIGN_OR_RETURN(Tensor h, Tensor::allocate(b.dtype, b.shape, *allocator_));
        pins[k] = dev.staging(h.num_bytes());
        DSINFER_RETURN_IF_ERROR(device_->copy_to_host(pins[k] != nullptr ? pins[k] : h.raw_data(),
                                                      b.ptr, h.num_bytes(), dev.stream));
        transfers_.d2h.fetch_add(h.num_bytes(), std::memory_order_relaxed);
        transfers_.copies.fetch_add(1, std::memory_order_relaxed);
        if (bind_outputs_to_pool_) h = MemoryPool::bind(pool_, std::move(h));
        outputs.push_back(std::move(h));
    }
    DSINFER_RETURN_IF_ERROR(device_->synchronize(dev.stream));
    DSINFER_RETURN_IF_ERROR(check_device_errors(&dev, run.error_slots));
    for (std::size_t k = 0; k < outputs.size(); ++k)
        if (pins[k] != nullptr) std::memcpy(outputs[k].raw_data(), pins[k], outputs[k].num_bytes());
    transfers_.replays.fetch_add(1, std::memory_order_relaxed);
    return Status::ok();
}

Status CompiledGraph::capture_and_run(const std::vector<Tensor>& inputs,
                                      const std::vector<std::int64_t>& key,
                                      const ExecutionPlan& plan, const RunControl& control,
                                      std::vector<Tensor>& outputs, bool& handled) const {
    const Graph& g = *graph_;
    handled = false;
    auto run = std::make_shared<CapturedRun>();
    run->rt = device_.get();
    std::unique_lock<std::mutex> busy(run->busy);
    auto remember = [&] {
        std::lock_guard<std::mutex> lock(graphs_.mu);
        (void)lru_insert(graphs_.lru, key, run, kMaxCapturedGraphs);
    };
    DSINFER_RETURN_IF_ERROR(device_->health());
    DSINFER_RETURN_IF_ERROR(device_->activate());
    {
        DeviceScope dev(device_.get());
        DSINFER_ASSIGN_OR_RETURN(dev.stream, device_->acquire_stream());
        dev.retain = true;
        // Everything below is allocated for the graph's lifetime (retained).
        Status st;
        {
            Frame frame;
            frame.graph = this;
            frame.other.resize(g.values.size());
            fill_frame(frame, g, inputs);
            RunMemory mem;
            mem.plan = &plan;
            if (plan.arena_bytes > 0) {
                const std::size_t bytes = plan.arena_bytes;
                if (void* p = pool_->allocate_replacing_cache(bytes, kTensorAlignment)) {
                    mem.arena = std::shared_ptr<void>(p, [pool = pool_, bytes](void* q) { pool->deallocate(q, bytes); });
                    mem.base = static_cast<unsigned char*>(p);
                }
            }
            if (plan.device_arena_bytes > 0) {
                const std::size_t bytes = plan.device_arena_bytes;
                if (void* p = dev.allocate(bytes, kTensorAlignment)) {
                    mem.device_arena = std::shared_ptr<void>(p, [](void*) {});
                    mem.device_base = static_cast<unsigned char*>(p);
                }
            }
            // Graph inputs go to fixed device buffers before the capture; replays refill them.
            run->inputs.resize(inputs.size());
            for (std::size_t i = 0; i < inputs.size() && st.is_ok(); ++i) {
                const auto v = static_cast<std::size_t>(g.inputs[i]);
                bool device_reader = false;
                for (std::size_t ni = 0; ni < g.nodes.size(); ++ni)
                    for (std::size_t k = 0; k < g.nodes[ni].inputs.size(); ++k)
                        if (g.nodes[ni].inputs[k] == g.inputs[i] && nodes_[ni].on_device &&
                            !(k < 64 && ((nodes_[ni].host_inputs >> k) & 1u) != 0))
                            device_reader = true;
                if (!device_reader) continue;
                auto t = allocate_on(&dev, true, inputs[i].dtype(), inputs[i].shape());
                if (!t.is_ok()) {
                    st = t.status();
                    break;
                }
                st = device_->copy_to_device(t.value().raw_data(), inputs[i].raw_data(), inputs[i].num_bytes(), dev.stream);
                run->inputs[i] = {t.value().raw_data(), inputs[i].dtype(), inputs[i].shape()};
                frame.other[v] = std::move(t).value();
            }
            if (st.is_ok() && reports_device_errors_) {
                auto t = allocate_on(&dev, true, DType::i64, Shape{static_cast<std::int64_t>(4 * g.nodes.size())});
                if (t.is_ok()) run->error_slots = t.value().data_unchecked<std::int64_t>();
                else st = t.status();
            }
            if (st.is_ok()) st = device_->synchronize(dev.stream);
            if (st.is_ok()) st = device_->begin_capture(dev.stream);
            if (st.is_ok()) {
                Status body = Status::ok();
                if (run->error_slots != nullptr)
                    body = device_->memset_async(run->error_slots, 0, 32 * g.nodes.size(), dev.stream);
                NodeScratch scratch;
                if (body.is_ok())
                    body = run_nodes(frame, mem, &dev, scratch, control, run->error_slots);
                auto exec = device_->end_capture(dev.stream);
                if (!body.is_ok() && body.code() != ErrorCode::internal) {
                    st = body;  // a real error of this run (bad input, limits)
                } else if (!body.is_ok() || !exec.is_ok()) {
                    run->failed = true;  // this class cannot be captured: run it normally
                } else {
                    run->exec = std::move(exec).value();
                    run->outputs.reserve(g.outputs.size());
                    for (ValueId id : g.outputs) {
                        const Tensor& t = frame.values[static_cast<std::size_t>(id)];
                        if (t.is_null() || t.device().kind == DeviceKind::cpu) {
                            run->failed = true;
                            break;
                        }
                        run->outputs.push_back({t.raw_data(), t.dtype(), t.shape()});
                    }
                }
            }
        }  // the frame's tensors are released (retained blocks stay)
        const Status sync = device_->synchronize(dev.stream);
        run->owned = std::move(dev.retained);
        dev.retained.clear();
        DSINFER_RETURN_IF_ERROR(st);
        DSINFER_RETURN_IF_ERROR(sync);
    }
    if (run->failed) {
        // Keep only the verdict: the capture run's memory goes back now (its stream is idle).
        run->exec.reset();
        for (const auto& [p, cls] : run->owned) device_->pool()->deallocate(p, cls);
        run->owned.clear();
        remember();
        return Status::ok();
    }
    handled = true;
    Status st = replay(*run, inputs, outputs);
    if (st.is_ok() || st.code() != ErrorCode::internal) remember();
    return st;
}

}  // namespace dsinfer::detail
