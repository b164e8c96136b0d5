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
//   std::vector<int> dims{1, 64};
//   dsinfer::Shape t = dsinfer::Shape::from(dims);   // throws dsinfer::Error on bad dims
//   // Shape{1, 2, 3, 4, 5, 6, 7, 8, 9} throws: rank 9 exceeds the maximum rank 8
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <iterator>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "dsinfer/status.hpp"

namespace dsinfer {

/// Largest tensor rank dsinfer handles. Models with higher ranks are rejected as unsupported.
inline constexpr int kMaxRank = 8;

/// Concrete shape: rank <= kMaxRank, every dim >= 0.
class Shape {
public:
    constexpr Shape() noexcept = default;
    /// Dims written in the code (`Shape{2, 3}`). Throws dsinfer::Error invalid_argument past
    /// kMaxRank dims ("rank 9 exceeds the maximum rank 8") rather than truncating. The values
    /// are not checked here: a negative dim is refused where a tensor is created
    /// (Tensor::allocate/empty). For dims that come from data, use Shape::from (throws) or
    /// Shape::make (StatusOr), which check every dim.
    Shape(std::initializer_list<std::int64_t> dims) {
        if (dims.size() > static_cast<std::size_t>(kMaxRank))
            throw Error(ErrorCode::invalid_argument, "rank " + std::to_string(dims.size()) +
                                                         " exceeds the maximum rank " +
                                                         std::to_string(kMaxRank));
        for (auto d : dims) dims_[static_cast<std::size_t>(rank_++)] = d;
    }
    /// Checked construction from untrusted dims: rank (unsupported past kMaxRank), negative
    /// dims and element-count overflow (invalid_argument).
    static StatusOr<Shape> make(std::span<const std::int64_t> dims) {
        if (dims.size() > static_cast<std::size_t>(kMaxRank))
            return Status::error(ErrorCode::unsupported, "rank ", dims.size(),
                                 " exceeds the maximum rank ", kMaxRank);
        Shape s;
        std::int64_t n = 1;
        for (auto d : dims) {
            if (d < 0)
                return Status::error(ErrorCode::invalid_argument, "negative dimension ", d,
                                     " at axis ", s.rank_);
            if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d)
                return Status::error(ErrorCode::invalid_argument,
                                     "element count overflows int64");
            n *= d;
            s.dims_[static_cast<std::size_t>(s.rank_++)] = d;
        }
        return s;
    }
    static StatusOr<Shape> make(std::initializer_list<std::int64_t> dims) {
        return make(std::span<const std::int64_t>(dims.begin(), dims.size()));
    }
    /// Checked construction from any range of integers: std::vector<int>,
    /// std::vector<std::int64_t>, std::array, std::span, ... Throws dsinfer::Error
    /// invalid_argument for a rank above kMaxRank, a negative dim (named with its axis), a
    /// dim that does not fit int64, or an element count that overflows int64.
    template <class R>
    static Shape from(const R& range) {
        using V = std::remove_cvref_t<decltype(*std::begin(range))>;
        static_assert(std::is_integral_v<V> && !std::is_same_v<V, bool>,
                      "dsinfer: Shape::from needs a range of integers (std::vector<int>, "
                      "std::vector<std::int64_t>, std::array, std::span, ...)");
        Shape s;
        std::size_t rank = 0;
        for (const auto& v : range) {
            const V d = v;
            const std::size_t axis = rank++;
            if (axis >= static_cast<std::size_t>(kMaxRank)) continue;  // counted for the message
            if constexpr (std::is_signed_v<V>) {
                if (d < 0)
                    throw Error(ErrorCode::invalid_argument,
                                "negative dimension " + std::to_string(d) + " at axis " +
                                    std::to_string(axis));
            }
            if (static_cast<std::uint64_t>(d) >
                static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                throw Error(ErrorCode::invalid_argument,
                            "dimension " + std::to_string(d) + " at axis " +
                                std::to_string(axis) + " does not fit int64");
            s.dims_[axis] = static_cast<std::int64_t>(d);
        }
        if (rank > static_cast<std::size_t>(kMaxRank))
            throw Error(ErrorCode::invalid_argument, "rank " + std::to_string(rank) +
                                                         " exceeds the maximum rank " +
                                                         std::to_string(kMaxRank));
        s.rank_ = static_cast<int>(rank);
        std::int64_t n = 1;
        for (int i = 0; i < s.rank_; ++i) {
            const std::int64_t d = s.dims_[static_cast<std::size_t>(i)];
            if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d)
                throw Error(ErrorCode::invalid_argument,
                            "the element count of shape " + s.to_string() + " overflows int64");
            n *= d;
        }
        return s;
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
