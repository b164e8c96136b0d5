// dsinfer/tensor.hpp — Tensor (owning value type) and TensorView (non-owning).
//
// Purpose: a Tensor is dtype + shape + a shared, device-tagged, 64-byte-aligned buffer.
// Copying a Tensor shares the buffer (cheap); metadata is immutable. Tensors are dense and
// row-major. TensorView is a trivially copyable, non-owning view that kernels take.
// String tensors hold std::string elements constructed in the buffer. NamedTensors (what
// InferenceEngine::run returns) is a vector of NamedTensor that also finds a tensor by name.
//
// Checked and unchecked access: Tensor::data<T>() and span<T>() check in every build that T
// is the tensor's element type (dsinfer::Error invalid_argument "tensor holds float32, read as
// int64" otherwise); data_unchecked<T>() and span_unchecked<T>() do not (noexcept, for hot
// loops after checking dtype() once, and for reading bits as another type of the same size).
// TensorView::data<T>() is unchecked too: views are what kernels' noexcept run() reads, and
// the dtypes of their inputs are fixed when the kernel is created. An element type outside
// dtype.hpp's list (long double, char, pointers, structs, std::complex) is a compile error.
//
// Ownership/threading: a Tensor keeps its buffer alive; a TensorView does not (the Tensor it
// came from must outlive it). Concurrent reads are safe; writing a buffer that another thread
// reads is the caller's race. Tensors that wrap caller memory (Tensor::wrap) never free it,
// and the caller must keep it valid while any copy of the Tensor exists.
//
// Usage:
//   auto t = dsinfer::Tensor::empty(dsinfer::DType::f32, {2, 3});   // uninitialized
//   float* p = t.data<float>();             // t.data<std::int64_t>() throws: holds float32
//   auto z = dsinfer::Tensor::zeros(dsinfer::DType::i64, {4});
//   std::vector<long long> ids{1, 2, 3};
//   auto i = dsinfer::Tensor::from_vector(dsinfer::Shape{1, 3}, ids);       // int64, a copy
//   std::array<float, 6> a{};
//   auto c = dsinfer::Tensor::from_span<float>({2, 3}, a);                    // a copy
//   std::vector<float> mine(6);
//   auto w = dsinfer::Tensor::wrap<float>(mine, {2, 3});  // no copy; 6 == 2 x 3 is checked
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "dsinfer/allocator.hpp"
#include "dsinfer/dtype.hpp"
#include "dsinfer/shape.hpp"
#include "dsinfer/status.hpp"

namespace dsinfer {

/// Non-owning view of dense, row-major tensor data. Trivially copyable.
struct TensorView {
    void* raw = nullptr;
    DType dtype = DType::f32;
    Shape shape;
    Device device;

    std::int64_t num_elements() const noexcept { return shape.num_elements(); }
    std::size_t num_bytes() const noexcept {
        return static_cast<std::size_t>(num_elements()) * dtype_size(dtype);
    }
    /// The data as T*, unchecked (kernels' run() is noexcept and reads views in its hot loops;
    /// a kernel's input dtypes are fixed when it is created). Compare `dtype` first where the
    /// element type is not already known.
    template <class T>
    T* data() const noexcept {
        return static_cast<T*>(raw);
    }
    /// Same as data<T>(): spelled like Tensor's unchecked accessor.
    template <class T>
    T* data_unchecked() const noexcept {
        return static_cast<T*>(raw);
    }
};
static_assert(std::is_trivially_copyable_v<TensorView>);

class Tensor {
public:
    /// An empty (null) tensor: no buffer, dtype f32, rank 0. is_null() is true.
    Tensor() = default;

    /// Allocates an uninitialized tensor (strings are default-constructed) from `alloc`.
    /// Returns invalid_argument for a negative dim ("negative dimension -1 at axis 0 of shape
    /// [-1,64]") or a shape whose byte size does not fit the address space, and
    /// resource_exhausted if the allocation fails.
    static StatusOr<Tensor> allocate(DType dtype, const Shape& shape,
                                     Allocator& alloc = cpu_allocator()) {
        std::size_t bytes = 0;
        DSINFER_RETURN_IF_ERROR(byte_size(dtype, shape, bytes));
        const auto n = shape.num_elements();
        void* p = alloc.allocate(bytes, kTensorAlignment);
        if (p == nullptr)
            return Status::error(ErrorCode::resource_exhausted, "failed to allocate ", bytes,
                                 " bytes for a tensor of shape ", shape.to_string());
        Tensor t;
        t.dtype_ = dtype;
        t.shape_ = shape;
        t.device_ = alloc.device();
        t.data_ = p;
        Allocator* a = &alloc;
        if (dtype == DType::string) {
            auto* s = static_cast<std::string*>(p);
            for (std::int64_t i = 0; i < n; ++i) new (s + i) std::string();
            t.owner_ = std::shared_ptr<void>(p, [a, bytes, n](void* q) {
                auto* ss = static_cast<std::string*>(q);
                for (std::int64_t i = 0; i < n; ++i) ss[i].~basic_string();
                a->deallocate(q, bytes);
            });
        } else {
            t.owner_ = std::shared_ptr<void>(p, [a, bytes](void* q) { a->deallocate(q, bytes); });
        }
        return t;
    }
    /// Like allocate(), but throws dsinfer::Error on failure (invalid_argument for a negative
    /// or oversized shape, resource_exhausted when the memory is not there).
    static Tensor empty(DType dtype, const Shape& shape, Allocator& alloc = cpu_allocator()) {
        return allocate(dtype, shape, alloc).value_or_throw();
    }
    /// A zero-filled host tensor (empty strings for string tensors).
    static Tensor zeros(DType dtype, const Shape& shape) {
        Tensor t = empty(dtype, shape);
        if (dtype != DType::string) std::memset(t.data_, 0, t.num_bytes());
        return t;
    }
    /// A host tensor holding a copy of `values` (T: any element type of dtype.hpp, so
    /// std::vector<long long> is int64). Throws invalid_argument when the count differs from
    /// the shape's.
    template <class T>
    static Tensor from_vector(const Shape& shape, const std::vector<T>& values) {
        constexpr DType dt = dtype_of<T>();
        Tensor t = empty(dt, shape);
        if (static_cast<std::size_t>(shape.num_elements()) != values.size())
            throw Error(ErrorCode::invalid_argument, "from_vector: shape " + shape.to_string() +
                                                         " does not match " +
                                                         std::to_string(values.size()) + " values");
        if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> is not contiguous
            for (std::size_t i = 0; i < values.size(); ++i) t.data_unchecked<bool>()[i] = values[i];
        } else {
            std::copy(values.begin(), values.end(), t.data_unchecked<T>());
        }
        return t;
    }
    template <class T, std::size_t N>
    static Tensor from_vector(const Shape& shape, const std::array<T, N>& values) {
        return from_span<T>(shape, std::span<const T>(values));
    }
    /// A host tensor holding a copy of `values`: a std::span, or with T given, anything a
    /// std::span<const T> takes (std::vector, std::array, a C array).
    /// Throws invalid_argument when the count differs from the shape's.
    template <class T>
    static Tensor from_span(const Shape& shape, std::span<const T> values) {
        constexpr DType dt = dtype_of<T>();
        Tensor t = empty(dt, shape);
        if (static_cast<std::size_t>(shape.num_elements()) != values.size())
            throw Error(ErrorCode::invalid_argument, "from_span: shape " + shape.to_string() +
                                                         " does not match " +
                                                         std::to_string(values.size()) + " values");
        std::copy(values.begin(), values.end(), t.data_unchecked<T>());
        return t;
    }
    template <class T, std::size_t N>
    static Tensor from_span(const Shape& shape, std::span<T, N> values) {
        using U = std::remove_cv_t<T>;
        return from_span<U>(shape, std::span<const U>(values.data(), values.size()));
    }
    template <class T, std::size_t N>
    static Tensor from_span(const Shape& shape, const std::array<T, N>& values) {
        return from_span<T>(shape, std::span<const T>(values));
    }
    /// A scalar (rank-0) host tensor.
    template <class T>
    static Tensor scalar(T v) {
        constexpr DType dt = dtype_of<T>();
        Tensor t = empty(dt, Shape{});
        *t.data_unchecked<T>() = v;
        return t;
    }
    /// Wraps caller memory without copying. `keep_alive` (optional) is held as long as the
    /// tensor; without it the caller guarantees the memory outlives every copy. Nothing is
    /// checked: prefer wrap<T>(std::span<T>, shape) or wrap_checked.
    static Tensor wrap(void* data, DType dtype, const Shape& shape, Device device = {},
                       std::shared_ptr<void> keep_alive = nullptr) {
        Tensor t;
        t.dtype_ = dtype;
        t.shape_ = shape;
        t.device_ = device;
        t.data_ = data;
        t.owner_ = keep_alive ? std::move(keep_alive) : std::shared_ptr<void>(data, [](void*) {});
        return t;
    }

    /// Wraps host memory of T without copying, checking that it holds exactly the shape's
    /// element count (invalid_argument "wrap: 5 float32 values do not match shape [2,3] (6
    /// elements)" otherwise) and that the shape is valid. `values` must stay valid (and not
    /// move: a std::vector must not grow) while any copy of the tensor exists, unless
    /// `keep_alive` owns it. The memory must be writable (T not const): a tensor's data can be
    /// written through data<T>(); copy read-only data with from_span.
    template <class T>
    static Tensor wrap(std::span<T> values, const Shape& shape,
                       std::shared_ptr<void> keep_alive = nullptr) {
        static_assert(!std::is_const_v<T>,
                      "dsinfer: Tensor::wrap needs writable memory (std::span<T>, T not const); "
                      "copy read-only data with Tensor::from_span");
        constexpr DType dt = dtype_of<T>();
        std::size_t bytes = 0;
        throw_if_error(byte_size(dt, shape, bytes));
        const auto n = static_cast<std::size_t>(shape.num_elements());
        if (n != values.size())
            throw Error(ErrorCode::invalid_argument,
                        "wrap: " + std::to_string(values.size()) + " " +
                            std::string(dtype_name(dt)) + " values do not match shape " +
                            shape.to_string() + " (" + std::to_string(n) + " elements)");
        return wrap(static_cast<void*>(values.data()), dt, shape, Device{}, std::move(keep_alive));
    }

    /// Wraps a caller buffer of `bytes` bytes, checking that it holds exactly `shape` of
    /// `dtype` (invalid_argument "expected N bytes, got M" otherwise) and is not null when
    /// non-empty. Never copies.
    static StatusOr<Tensor> wrap_checked(void* data, std::size_t bytes, DType dtype,
                                         const Shape& shape,
                                         std::shared_ptr<void> keep_alive = nullptr) {
        std::size_t shape_bytes = 0;
        DSINFER_RETURN_IF_ERROR(byte_size(dtype, shape, shape_bytes));
        const auto n = static_cast<std::uint64_t>(shape.num_elements());
        if (dtype == DType::string)
            return Status::error(ErrorCode::invalid_argument,
                                 "string tensors cannot wrap raw bytes");
        if (n > SIZE_MAX / dtype_size(dtype) || n * dtype_size(dtype) != bytes)
            return Status::error(ErrorCode::invalid_argument, "buffer for shape ",
                                 shape.to_string(), " of ", dtype_name(dtype), ": expected ",
                                 n * dtype_size(dtype), " bytes, got ", bytes);
        if (data == nullptr && bytes != 0)
            return Status::error(ErrorCode::invalid_argument, "null data pointer for ", bytes,
                                 " bytes");
        return wrap(data, dtype, shape, Device{}, std::move(keep_alive));
    }

    bool is_null() const noexcept { return !owner_; }
    DType dtype() const noexcept { return dtype_; }
    const Shape& shape() const noexcept { return shape_; }
    Device device() const noexcept { return device_; }
    int num_dims() const noexcept { return shape_.num_dims(); }
    std::int64_t num_elements() const noexcept { return shape_.num_elements(); }
    std::size_t num_bytes() const noexcept {
        return static_cast<std::size_t>(num_elements()) * dtype_size(dtype_);
    }
    void* raw_data() const noexcept { return data_; }
    /// Typed pointer, checked in every build: T must be the element type (dtype_of<T>() ==
    /// dtype(), e.g. float for f32, std::int64_t or long long for i64); otherwise throws
    /// dsinfer::Error invalid_argument ("tensor holds float32, read as int64"). Null for a
    /// null tensor read as float (its dtype).
    template <class T>
    T* data() const {
        check_element_type<T>();
        return static_cast<T*>(data_);
    }
    /// All elements, checked like data<T>().
    template <class T>
    std::span<T> span() const {
        check_element_type<T>();
        return {static_cast<T*>(data_), static_cast<std::size_t>(num_elements())};
    }
    /// Typed pointer without the element-type check: for hot loops after checking dtype()
    /// once, and for reading the bytes as another type of the same size (float16 bits as
    /// std::uint16_t). Reading a tensor as a type of another size is undefined behaviour.
    template <class T>
    T* data_unchecked() const noexcept {
        return static_cast<T*>(data_);
    }
    template <class T>
    std::span<T> span_unchecked() const noexcept {
        return {static_cast<T*>(data_), static_cast<std::size_t>(num_elements())};
    }
    TensorView view() const noexcept { return TensorView{data_, dtype_, shape_, device_}; }
    /// Same buffer, new shape with the same element count.
    StatusOr<Tensor> reshaped(const Shape& shape) const {
        if (shape.num_elements() != num_elements())
            return Status::error(ErrorCode::invalid_argument, "cannot reshape ",
                                 shape_.to_string(), " to ", shape.to_string());
        Tensor t = *this;
        t.shape_ = shape;
        return t;
    }
    /// A deep copy on the host.
    Tensor clone() const {
        Tensor t = empty(dtype_, shape_);
        if (dtype_ == DType::string) {
            for (std::int64_t i = 0; i < num_elements(); ++i)
                t.data_unchecked<std::string>()[i] = data_unchecked<std::string>()[i];
        } else if (num_bytes() > 0) {
            std::memcpy(t.data_, data_, num_bytes());
        }
        return t;
    }
    /// Number of Tensor copies sharing this buffer (for tests and diagnostics).
    long use_count() const noexcept { return owner_.use_count(); }

private:
    /// The byte size of `shape` of `dtype` in `bytes`; invalid_argument for a negative dim or
    /// a size that does not fit the address space.
    static Status byte_size(DType dtype, const Shape& shape, std::size_t& bytes) {
        bool zero = false;
        for (int i = 0; i < shape.num_dims(); ++i) {
            if (shape[i] < 0)
                return Status::error(ErrorCode::invalid_argument, "negative dimension ", shape[i],
                                     " at axis ", i, " of shape ", shape.to_string());
            if (shape[i] == 0) zero = true;
        }
        bytes = 0;
        if (zero) return Status::ok();
        const std::uint64_t esize = dtype_size(dtype);
        std::uint64_t n = 1;
        const std::uint64_t max_elements =
            std::min<std::uint64_t>(std::numeric_limits<std::size_t>::max() / esize, static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
        for (int i = 0; i < shape.num_dims(); ++i) {
            const auto d = static_cast<std::uint64_t>(shape[i]);
            if (n > max_elements / d)
                return Status::error(ErrorCode::invalid_argument, "tensor of shape ",
                                     shape.to_string(), " and type ", dtype_name(dtype),
                                     " is too large: its byte size overflows the address space");
            n *= d;
        }
        bytes = static_cast<std::size_t>(n * esize);
        return Status::ok();
    }
    template <class T>
    void check_element_type() const {
        constexpr DType asked = dtype_of<T>();
        if (asked != dtype_) [[unlikely]]
            throw Error(ErrorCode::invalid_argument, "tensor holds " +
                                                         std::string(dtype_name(dtype_)) +
                                                         ", read as " +
                                                         std::string(dtype_name(asked)));
    }

    DType dtype_ = DType::f32;
    Shape shape_;
    Device device_;
    void* data_ = nullptr;
    std::shared_ptr<void> owner_;
};

/// A tensor with the graph input/output name it binds to.
struct NamedTensor {
    std::string name;
    Tensor tensor;
};

/// Named tensors in order (InferenceEngine::run's outputs, in the graph's output order) that
/// can also be looked up by name. A std::vector<NamedTensor> in every other respect: indexing,
/// iteration, and `std::vector<NamedTensor> v = engine.run(...)` all work as before.
class NamedTensors : public std::vector<NamedTensor> {
public:
    using std::vector<NamedTensor>::vector;
    NamedTensors() = default;
    explicit NamedTensors(std::vector<NamedTensor> v) noexcept
        : std::vector<NamedTensor>(std::move(v)) {}

    /// The tensor named `name`; throws dsinfer::Error invalid_argument ("no output named 'x';
    /// the outputs are: logits, probabilities") when there is none. The first one when a name
    /// repeats.
    const Tensor& get(std::string_view name) const {
        if (const Tensor* t = find(name)) return *t;
        std::string names;
        for (const NamedTensor& nt : *this) {
            if (!names.empty()) names += ", ";
            names += nt.name;
        }
        throw Error(ErrorCode::invalid_argument,
                    "no output named '" + std::string(name) + "'; the outputs are: " +
                        (names.empty() ? std::string("(none)") : names));
    }
    /// The tensor named `name`, or null.
    const Tensor* find(std::string_view name) const noexcept {
        for (const NamedTensor& nt : *this)
            if (nt.name == name) return &nt.tensor;
        return nullptr;
    }
    bool contains(std::string_view name) const noexcept { return find(name) != nullptr; }
};

}  // namespace dsinfer
