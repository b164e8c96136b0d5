// dsinfer/shape.hpp — concrete tensor shapes and symbolic (model-declared) shapes.
//
// Purpose: Shape is the concrete shape of a tensor: up to kMaxRank dims stored inline, so it
// is trivially copyable and never allocates. SymbolicShape is what a model declares for a
// value: dims that are fixed numbers, named symbols ("batch"), or unknown.
//
// Ownership/threading: plain values; thread-safe.
//
// Usage:
//   dsinfer::Shape s{2, 3, 4};
//   auto n = s.num_elements();          // 24
//   auto checked = dsinfer::Shape::make({1LL << 40, 1LL << 40});  // error: overflow
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "dsinfer/status.hpp"

namespace dsinfer {

/// Largest tensor rank dsinfer handles. Models with higher ranks are rejected as unsupported.
inline constexpr int kMaxRank = 8;

/// Concrete shape: rank <= kMaxRank, every dim >= 0.
class Shape {
public:
    constexpr Shape() noexcept = default;
    /// Unchecked constructor for trusted dims (asserts rank in debug builds via make()).
    Shape(std::initializer_list<std::int64_t> dims) noexcept {
        for (auto d : dims) {
            if (rank_ < kMaxRank) dims_[rank_++] = d;
        }
    }
    /// Checked construction from untrusted dims: rank, negative dims, element-count overflow.
    static StatusOr<Shape> make(std::span<const std::int64_t> dims) {
        if (dims.size() > static_cast<std::size_t>(kMaxRank))
            return Status::error(ErrorCode::unsupported, "rank ", dims.size(),
                                 " exceeds the maximum rank ", kMaxRank);
        Shape s;
        std::int64_t n = 1;
        for (auto d : dims) {
            if (d < 0) return Status::error(ErrorCode::invalid_argument, "negative dimension ", d);
            if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d)
                return Status::error(ErrorCode::invalid_argument,
                                     "element count overflows int64");
            n *= d;
            s.dims_[s.rank_++] = d;
        }
        return s;
    }
    static StatusOr<Shape> make(std::initializer_list<std::int64_t> dims) {
        return make(std::span<const std::int64_t>(dims.begin(), dims.size()));
    }

    constexpr int num_dims() const noexcept { return rank_; }
    constexpr int rank() const noexcept { return rank_; }
    constexpr std::int64_t operator[](int i) const noexcept { return dims_[static_cast<std::size_t>(i)]; }
    constexpr std::int64_t& operator[](int i) noexcept { return dims_[static_cast<std::size_t>(i)]; }
    constexpr std::int64_t num_elements() const noexcept {
        std::int64_t n = 1;
        for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
        return n;
    }
    std::span<const std::int64_t> dims() const noexcept {
        return {dims_.data(), static_cast<std::size_t>(rank_)};
    }
    std::vector<std::int64_t> to_vector() const { return {dims_.begin(), dims_.begin() + rank_}; }
    /// Appends a dim (caller guarantees rank < kMaxRank).
    constexpr void push_back(std::int64_t d) noexcept {
        if (rank_ < kMaxRank) dims_[static_cast<std::size_t>(rank_++)] = d;
    }
    /// Product of dims [begin, end).
    constexpr std::int64_t size_between(int begin, int end) const noexcept {
        std::int64_t n = 1;
        for (int i = begin; i < end; ++i) n *= dims_[static_cast<std::size_t>(i)];
        return n;
    }
    friend constexpr bool operator==(const Shape& a, const Shape& b) noexcept {
        if (a.rank_ != b.rank_) return false;
        for (int i = 0; i < a.rank_; ++i)
            if (a.dims_[static_cast<std::size_t>(i)] != b.dims_[static_cast<std::size_t>(i)]) return false;
        return true;
    }
    std::string to_string() const {
        std::string s = "[";
        for (int i = 0; i < rank_; ++i) {
            if (i) s += ",";
            s += std::to_string(dims_[static_cast<std::size_t>(i)]);
        }
        return s + "]";
    }

private:
    std::array<std::int64_t, kMaxRank> dims_{};
    int rank_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.to_string(); }

/// One declared dimension: a fixed value, a named symbol, or unknown.
struct Dim {
    std::int64_t value = -1;  ///< >= 0 when fixed
    std::string symbol;       ///< non-empty for a named symbolic dim ("batch")
    bool is_static() const noexcept { return value >= 0; }
    static Dim fixed(std::int64_t v) { return Dim{v, {}}; }
    static Dim named(std::string s) { return Dim{-1, std::move(s)}; }
};

/// Declared shape of a model value. `known == false` means even the rank is unknown.
struct SymbolicShape {
    bool known = false;
    std::vector<Dim> dims;

    static SymbolicShape unknown() { return {}; }
    static SymbolicShape from(const Shape& s) {
        SymbolicShape r;
        r.known = true;
        for (auto d : s.dims()) r.dims.push_back(Dim::fixed(d));
        return r;
    }
    int rank() const noexcept { return static_cast<int>(dims.size()); }
    bool is_static() const noexcept {
        if (!known) return false;
        for (const auto& d : dims)
            if (!d.is_static()) return false;
        return true;
    }
    std::string to_string() const {
        if (!known) return "?";
        std::string s = "[";
        for (std::size_t i = 0; i < dims.size(); ++i) {
            if (i) s += ",";
            s += dims[i].is_static() ? std::to_string(dims[i].value)
                                     : (dims[i].symbol.empty() ? "?" : dims[i].symbol);
        }
        return s + "]";
    }
};

}  // namespace dsinfer
