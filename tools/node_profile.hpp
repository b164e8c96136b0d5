// tools/node_profile.hpp — per-node wall times of an engine's runs, shared by ds-benchmark
// --profile and ds-profiler.
//
// Purpose: one way to collect and summarize RunOptions::node_ms (dsinfer/engine.hpp: the wall
// time of each node of graph().nodes, top-level graph, subgraphs inside their node):
//   * profile_runs() runs the engine K times with node_ms, each run's times kept apart (the
//     engine adds into the vector it is given, so it is cleared before every run), and the
//     end-to-end wall time of the same runs (engine.run() alone: input checks, plan lookup,
//     the nodes and the outputs' hand-over) and their start times;
//   * NodeProfile::node_median() is each node's median over the runs; median() of any samples;
//   * group_by_op() sums per-node times by op type and kernel provider, slowest first;
//     slowest_nodes() orders node indices by time;
//   * value_shapes() gives every value's dtype and dims at a run's shapes (a ShapeRecorder
//     observing one run), for tables that print shapes.
//
// Ownership/threading: plain values and functions; profile_runs() runs on the calling thread.
//
// Usage:
//   const bench::NodeProfile p = bench::profile_runs(engine, inputs, 10);
//   const std::vector<double> ms = p.node_median();
//   for (const bench::OpGroup& g : bench::group_by_op(engine, ms)) print(g.op, g.ms);
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <dsinfer/engine.hpp>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model_cost.hpp"
#include "stats.hpp"

namespace dsinfer::bench {

/// Per-node and end-to-end wall times of K runs.
struct NodeProfile {
    std::vector<std::vector<double>> node_ms;  ///< [run][node of graph().nodes], milliseconds
    std::vector<double> run_ms;                ///< end-to-end of each run
    std::vector<double> run_start_ms;          ///< each run's start after the first run's

    std::size_t runs() const noexcept { return run_ms.size(); }
    std::size_t nodes() const noexcept { return node_ms.empty() ? 0 : node_ms.front().size(); }
    /// Node `i`'s times over the runs.
    std::vector<double> node_samples(std::size_t i) const {
        std::vector<double> s;
        for (const auto& run : node_ms) s.push_back(i < run.size() ? run[i] : 0.0);
        return s;
    }
    /// Each node's median over the runs.
    std::vector<double> node_median() const {
        std::vector<double> m(nodes());
        for (std::size_t i = 0; i < m.size(); ++i) m[i] = median(node_samples(i));
        return m;
    }
    /// The sum of the node times of each run.
    std::vector<double> run_node_sums() const {
        std::vector<double> s;
        for (const auto& run : node_ms) {
            double t = 0;
            for (double v : run) t += v;
            s.push_back(t);
        }
        return s;
    }
};

/// Runs `engine` on `inputs` `runs` times with RunOptions::node_ms (throws dsinfer::Error).
inline NodeProfile profile_runs(const InferenceEngine& engine,
                                const std::vector<NamedTensor>& inputs, int runs) {
    using Clock = std::chrono::steady_clock;
    const auto ms_between = [](Clock::time_point a, Clock::time_point b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
    };
    NodeProfile p;
    std::vector<double> ms;
    RunOptions ro;
    ro.node_ms = &ms;
    const std::size_t n = engine.graph().nodes.size();
    Clock::time_point first{};
    for (int r = 0; r < runs; ++r) {
        ms.assign(n, 0.0);
        const auto t0 = Clock::now();
        (void)engine.run(inputs, ro);
        const auto t1 = Clock::now();
        if (r == 0) first = t0;
        ms.resize(n, 0.0);
        p.node_ms.push_back(ms);
        p.run_ms.push_back(ms_between(t0, t1));
        p.run_start_ms.push_back(ms_between(first, t0));
    }
    return p;
}

/// The nodes of one op type on one kernel provider and their summed time.
struct OpGroup {
    std::string op, provider;
    std::vector<std::size_t> nodes;  ///< indices into graph().nodes
    double ms = 0;
};

/// `ms` (one time per node of engine.graph().nodes) summed by op type and provider, slowest
/// first.
inline std::vector<OpGroup> group_by_op(const InferenceEngine& engine,
                                        const std::vector<double>& ms) {
    const auto& nodes = engine.graph().nodes;
    const auto& providers = engine.node_providers();
    std::map<std::pair<std::string, std::string>, OpGroup> by;
    for (std::size_t i = 0; i < nodes.size() && i < ms.size(); ++i) {
        const std::string provider = i < providers.size() ? providers[i] : "?";
        OpGroup& g = by[{nodes[i].op_type, provider}];
        g.op = nodes[i].op_type;
        g.provider = provider;
        g.nodes.push_back(i);
        g.ms += ms[i];
    }
    std::vector<OpGroup> rows;
    for (auto& [key, g] : by) rows.push_back(std::move(g));
    std::stable_sort(rows.begin(), rows.end(),
                     [](const OpGroup& x, const OpGroup& y) { return x.ms > y.ms; });
    return rows;
}

/// The indices of `ms`, slowest first (ties in node order).
inline std::vector<std::size_t> slowest_nodes(const std::vector<double>& ms) {
    std::vector<std::size_t> order(ms.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&ms](std::size_t x, std::size_t y) { return ms[x] > ms[y]; });
    return order;
}

// ---- shapes of one run ----

/// Records the element type and shape of every value a run shows (blocked ones too: their
/// views carry the logical shape).
class ShapeRecorder final : public ValueObserver {
public:
    std::unordered_map<std::string, std::pair<DType, Dims>> seen;
    void observe(std::string_view name, const TensorView& value) noexcept override {
        try {
            seen[std::string(name)] = {value.dtype, value.shape.to_vector()};
        } catch (...) {  // out of memory: the value stays unknown
        }
    }
    bool any_layout() const noexcept override { return true; }
};

/// The element type and dims of every value of the compiled graph at the run's shapes (one run
/// with a ShapeRecorder; values no run shows: the inputs given, else the graph's static dims).
struct ValueShapes {
    std::vector<std::optional<Dims>> dims;
    std::vector<std::optional<DType>> dtype;
};

inline ValueShapes value_shapes(const InferenceEngine& engine, const std::vector<NamedTensor>& inputs) {
    ShapeRecorder rec;
    RunOptions ro;
    ro.observer = &rec;
    (void)engine.run(inputs, ro);
    const Graph& g = engine.graph();
    ValueShapes s;
    s.dims.resize(g.num_values());
    s.dtype.resize(g.num_values());
    std::unordered_map<std::string, const Tensor*> given;
    for (const NamedTensor& t : inputs) given[t.name] = &t.tensor;
    for (std::size_t v = 0; v < g.num_values(); ++v) {
        const Value& val = g.values[v];
        if (const auto it = rec.seen.find(val.name); it != rec.seen.end()) {
            s.dtype[v] = it->second.first;
            s.dims[v] = it->second.second;
        } else if (const auto in = given.find(val.name); in != given.end()) {
            s.dtype[v] = in->second->dtype();
            s.dims[v] = in->second->shape().to_vector();
        } else {
            s.dtype[v] = val.dtype;
            s.dims[v] = static_dims(g, static_cast<ValueId>(v));
        }
    }
    return s;
}

}  // namespace dsinfer::bench
