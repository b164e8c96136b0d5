// The memory planner: offsets in one arena for tensors with known sizes and lifetimes.
//
// Purpose: the executor records, on the first run of an input-shape class, each intermediate
// value's byte size and the steps (node indices) it lives in, and each node's workspace; this
// file assigns every such tensor a 64-byte aligned offset in one arena so that tensors whose
// lifetimes overlap never overlap in memory. Pure functions, no executor types.
//
// Algorithm: the greedy heuristics of TFLite's offset planners; the smallest arena wins:
//   - greedy by size: tensors by size, largest first; each goes to the smallest gap between
//     the already placed tensors whose lifetimes overlap its own that fits it (best fit), or
//     above them all;
//   - greedy by breadth: steps by the bytes live in them, largest first; the unplaced tensors
//     live in that step, largest first, best fit as above;
//   - while the arena is above the lower bound: up to 32 greedy-by-size orders (fewer above
//     ~3,000 tensors) with the sizes scaled by seeded random factors in [1, 1 + a), a cycling
//     through 0.5, 1, 2, 3. Placing the largest tensors first can block an interleaving
//     (ResNet-50 at batch 1 and 2: big convolution workspaces at offset 0 push a chain of
//     activations up, 1.20x and 1.29x the bound); perturbed orders find it (1.00x).
// lower_bound_bytes = max over steps of the bytes live in the step: no placement can be smaller,
// so peak / lower bound measures how far from optimal a plan is. Deterministic (fixed seeds).
//
// Usage:
//   std::vector<PlanItem> items = {{1024, 0, 2}, {4096, 1, 3}};
//   ArenaLayout a = plan_arena(items);   // a.offsets[i], a.peak_bytes, a.lower_bound_bytes
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dsinfer::detail {

/// One tensor to place: its size and the inclusive range of steps it is live in.
struct PlanItem {
    std::size_t bytes = 0;
    std::int32_t first = 0;
    std::int32_t last = 0;
};

enum class PlanStrategy { greedy_by_size, greedy_by_breadth, greedy_by_size_perturbed, best };

struct ArenaLayout {
    std::vector<std::size_t> offsets;    ///< per item, multiples of 64
    std::size_t peak_bytes = 0;          ///< arena size: max of offset + aligned size
    std::size_t lower_bound_bytes = 0;   ///< max over steps of the aligned bytes live
    PlanStrategy strategy = PlanStrategy::greedy_by_size;  ///< the heuristic that produced it
};

/// Places `items` (sizes rounded up to 64 bytes) with `strategy` (best = all of them, the
/// smallest arena; ties go to the earlier in the list above). greedy_by_size_perturbed alone
/// runs one perturbed order (seed 1, amplitude 0.5).
ArenaLayout plan_arena(std::span<const PlanItem> items, PlanStrategy strategy = PlanStrategy::best);

/// max over steps of the sum of the aligned sizes of the items live in the step.
std::size_t live_bytes_lower_bound(std::span<const PlanItem> items);

}  // namespace dsinfer::detail
