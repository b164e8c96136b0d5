#include "core/memory_planner.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

namespace dsinfer::detail {
namespace {

constexpr std::size_t kAlign = 64;
constexpr std::size_t kUnplaced = std::numeric_limits<std::size_t>::max();
constexpr unsigned kPerturbedTries = 32;
constexpr std::size_t kPerturbedWork = std::size_t{1} << 28;  // ~n^2 x tries

std::size_t aligned(std::size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

bool overlap(const PlanItem& a, const PlanItem& b) {
    return a.first <= b.last && b.first <= a.last;
}

/// Places items in `order`, each at the best-fitting gap among the placed items whose
/// lifetimes overlap it.
class Placer {
public:
    explicit Placer(std::span<const PlanItem> items)
        : items_(items), size_(items.size()), offsets_(items.size(), kUnplaced) {
        for (std::size_t i = 0; i < items.size(); ++i) size_[i] = aligned(items[i].bytes);
    }

    bool placed(std::size_t i) const { return offsets_[i] != kUnplaced; }

    void place(std::size_t i) {
        // Placed neighbours in time, by offset.
        neighbours_.clear();
        for (std::size_t j : placed_)
            if (overlap(items_[i], items_[j])) neighbours_.push_back(j);
        std::sort(neighbours_.begin(), neighbours_.end(),
                  [&](std::size_t a, std::size_t b) { return offsets_[a] < offsets_[b]; });
        std::size_t best = kUnplaced, best_gap = kUnplaced, end = 0;
        for (std::size_t j : neighbours_) {
            if (offsets_[j] > end) {
                const std::size_t gap = offsets_[j] - end;
                if (gap >= size_[i] && gap < best_gap) {
                    best = end;
                    best_gap = gap;
                }
            }
            end = std::max(end, offsets_[j] + size_[j]);
        }
        offsets_[i] = best != kUnplaced ? best : end;
        placed_.push_back(i);
    }

    ArenaLayout finish(std::size_t lower_bound, PlanStrategy strategy) && {
        ArenaLayout a;
        a.offsets = std::move(offsets_);
        for (std::size_t i = 0; i < a.offsets.size(); ++i)
            a.peak_bytes = std::max(a.peak_bytes, a.offsets[i] + size_[i]);
        a.lower_bound_bytes = lower_bound;
        a.strategy = strategy;
        return a;
    }

    std::size_t size(std::size_t i) const { return size_[i]; }

private:
    std::span<const PlanItem> items_;
    std::vector<std::size_t> size_;
    std::vector<std::size_t> offsets_;
    std::vector<std::size_t> placed_;
    std::vector<std::size_t> neighbours_;
};

/// Greedy by size; with `seed` != 0 the sizes are scaled by random factors in [1, 1 + amp)
/// for the ordering only, amp cycling through 0.5, 1, 2, 3 with the seed (a perturbed order
/// escapes the cases where placing the largest tensors first blocks a better interleaving).
ArenaLayout greedy_by_size(std::span<const PlanItem> items, std::size_t lower_bound,
                           unsigned seed = 0) {
    Placer p(items);
    std::vector<double> key(items.size());
    std::mt19937 rng(seed);
    static constexpr double kAmplitude[] = {3.0, 0.5, 1.0, 2.0};
    std::uniform_real_distribution<double> noise(1.0, 1.0 + kAmplitude[seed % 4]);
    for (std::size_t i = 0; i < items.size(); ++i)
        key[i] = static_cast<double>(p.size(i)) * (seed == 0 ? 1.0 : noise(rng));
    std::vector<std::size_t> order(items.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        if (key[a] != key[b]) return key[a] > key[b];
        return items[a].first < items[b].first;
    });
    for (std::size_t i : order) p.place(i);
    return std::move(p).finish(lower_bound, seed == 0 ? PlanStrategy::greedy_by_size
                                                      : PlanStrategy::greedy_by_size_perturbed);
}

ArenaLayout greedy_by_breadth(std::span<const PlanItem> items, std::size_t lower_bound) {
    Placer p(items);
    std::int32_t lo = std::numeric_limits<std::int32_t>::max(), hi = std::numeric_limits<std::int32_t>::min();
    for (const auto& it : items) {
        lo = std::min(lo, it.first);
        hi = std::max(hi, it.last);
    }
    if (items.empty()) return std::move(p).finish(lower_bound, PlanStrategy::greedy_by_breadth);
    const auto steps = static_cast<std::size_t>(hi - lo + 1);
    // Items live in each step, and each step's breadth (bytes live).
    std::vector<std::vector<std::size_t>> live(steps);
    std::vector<std::size_t> breadth(steps, 0);
    for (std::size_t i = 0; i < items.size(); ++i)
        for (std::int32_t s = items[i].first; s <= items[i].last; ++s) {
            live[static_cast<std::size_t>(s - lo)].push_back(i);
            breadth[static_cast<std::size_t>(s - lo)] += p.size(i);
        }
    std::vector<std::size_t> order(steps);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return breadth[a] > breadth[b]; });
    for (std::size_t s : order) {
        auto& l = live[s];
        std::stable_sort(l.begin(), l.end(),
                         [&](std::size_t a, std::size_t b) { return p.size(a) > p.size(b); });
        for (std::size_t i : l)
            if (!p.placed(i)) p.place(i);
    }
    return std::move(p).finish(lower_bound, PlanStrategy::greedy_by_breadth);
}

}  // namespace

std::size_t live_bytes_lower_bound(std::span<const PlanItem> items) {
    if (items.empty()) return 0;
    // Sweep: +size at first, -size after last.
    std::vector<std::pair<std::int64_t, std::int64_t>> events;
    events.reserve(items.size() * 2);
    for (const auto& it : items) {
        const auto b = static_cast<std::int64_t>(aligned(it.bytes));
        events.emplace_back(it.first, b);
        events.emplace_back(static_cast<std::int64_t>(it.last) + 1, -b);
    }
    // At equal steps, frees (negative) come first: an item ending at s-1 is not live in s.
    std::sort(events.begin(), events.end());
    std::int64_t live = 0, best = 0;
    for (const auto& [step, delta] : events) {
        live += delta;
        best = std::max(best, live);
    }
    return static_cast<std::size_t>(best);
}

ArenaLayout plan_arena(std::span<const PlanItem> items, PlanStrategy strategy) {
    const std::size_t lower = live_bytes_lower_bound(items);
    if (strategy == PlanStrategy::greedy_by_size) return greedy_by_size(items, lower);
    if (strategy == PlanStrategy::greedy_by_breadth) return greedy_by_breadth(items, lower);
    if (strategy == PlanStrategy::greedy_by_size_perturbed) return greedy_by_size(items, lower, 1);
    // The better of the two orders, then perturbed size orders while above the bound.
    ArenaLayout best = greedy_by_size(items, lower);
    auto keep_better = [&](ArenaLayout a) {
        if (a.peak_bytes < best.peak_bytes) best = std::move(a);
    };
    if (best.peak_bytes > lower) keep_better(greedy_by_breadth(items, lower));
    // Each try is O(n^2) in the worst case: fewer tries for very large graphs.
    const std::size_t n = std::max<std::size_t>(items.size(), 1);
    const auto tries = static_cast<unsigned>(
        std::clamp<std::size_t>(kPerturbedWork / (n * n), 4, kPerturbedTries));
    for (unsigned seed = 1; seed <= tries && best.peak_bytes > lower; ++seed)
        keep_better(greedy_by_size(items, lower, seed));
    return best;
}

}  // namespace dsinfer::detail
