// dsinfer/tensor.hpp — Tensor (owning value type) and TensorView (non-owning).
//
// Purpose: a Tensor is dtype + shape + a shared, device-tagged, 64-byte-aligned buffer.
// Copying a Tensor shares the buffer (cheap); metadata is immutable. Tensors are dense and
// row-major. TensorView is a trivially copyable, non-owning view that kernels take.
// String tensors hold std::string elements constructed in the buffer.
//
// Ownership/threading: a Tensor keeps its buffer alive; a TensorView does not (the Tensor it
// came from must outlive it). Concurrent reads are safe; writing a buffer that another thread
// reads is the caller's race. Tensors that wrap caller memory (Tensor::wrap) never free it,
// and the caller must keep it valid while any copy of the Tensor exists.
//
// Usage:
//   auto t = dsinfer::Tensor::empty(dsinfer::DType::f32, {2, 3});   // uninitialized
//   float* p = t.data<float>();
//   auto z = dsinfer::Tensor::zeros(dsinfer::DType::i64, {4});
//   std::vector<float> mine(6);
//   auto w = dsinfer::Tensor::wrap(mine.data(), dsinfer::DType::f32, {2, 3}); // no copy
#pragma once

#include <cassert>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
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
    template <class T>
    T* data() const noexcept {
        return static_cast<T*>(raw);
    }
};
static_assert(std::is_trivially_copyable_v<TensorView>);

class Tensor {
public:
    /// An empty (null) tensor: no buffer, dtype f32, rank 0. is_null() is true.
    Tensor() = default;

    /// Allocates an uninitialized tensor (strings are default-constructed) from `alloc`.
    /// Returns resource_exhausted if the allocation fails or the byte size overflows.
    static StatusOr<Tensor> allocate(DType dtype, const Shape& shape,
                                     Allocator& alloc = cpu_allocator()) {
        const auto n = shape.num_elements();
        const auto esize = dtype_size(dtype);
        if (n < 0 || static_cast<std::uint64_t>(n) > SIZE_MAX / esize)
            return Status::error(ErrorCode::resource_exhausted, "tensor of shape ",
                                 shape.to_string(), " overflows the address space");
        const std::size_t bytes = static_cast<std::size_t>(n) * esize;
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
    /// Like allocate(), but throws dsinfer::Error on failure.
    static Tensor empty(DType dtype, const Shape& shape, Allocator& alloc = cpu_allocator()) {
        return allocate(dtype, shape, alloc).value_or_throw();
    }
    /// A zero-filled host tensor (empty strings for string tensors).
    static Tensor zeros(DType dtype, const Shape& shape) {
        Tensor t = empty(dtype, shape);
        if (dtype != DType::string) std::memset(t.data_, 0, t.num_bytes());
        return t;
    }
    /// A host tensor holding a copy of `values`.
    template <class T>
    static Tensor from_vector(const Shape& shape, const std::vector<T>& values) {
        Tensor t = empty(dtype_of<T>(), shape);
        if (static_cast<std::size_t>(shape.num_elements()) != values.size())
            throw Error(ErrorCode::invalid_argument, "from_vector: shape " + shape.to_string() +
                                                         " does not match " +
                                                         std::to_string(values.size()) + " values");
        if constexpr (std::is_same_v<T, bool>) {
            for (std::size_t i = 0; i < values.size(); ++i) t.data<bool>()[i] = values[i];
        } else {
            std::copy(values.begin(), values.end(), t.data<T>());
        }
        return t;
    }
    /// A scalar (rank-0) host tensor.
    template <class T>
    static Tensor scalar(T v) {
        Tensor t = empty(dtype_of<T>(), Shape{});
        *t.data<T>() = v;
        return t;
    }
    /// Wraps caller memory without copying. `keep_alive` (optional) is held as long as the
    /// tensor; without it the caller guarantees the memory outlives every copy.
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

    /// Wraps a caller buffer of `bytes` bytes, checking that it holds exactly `shape` of
    /// `dtype` (invalid_argument "expected N bytes, got M" otherwise) and is not null when
    /// non-empty. Never copies.
    static StatusOr<Tensor> wrap_checked(void* data, std::size_t bytes, DType dtype,
                                         const Shape& shape,
                                         std::shared_ptr<void> keep_alive = nullptr) {
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
    /// Typed pointer. Debug builds check that T matches dtype().
    template <class T>
    T* data() const noexcept {
        assert(dtype_of<T>() == dtype_);
        return static_cast<T*>(data_);
    }
    template <class T>
    std::span<T> span() const noexcept {
        return {data<T>(), static_cast<std::size_t>(num_elements())};
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
                t.data<std::string>()[i] = data<std::string>()[i];
        } else if (num_bytes() > 0) {
            std::memcpy(t.data_, data_, num_bytes());
        }
        return t;
    }
    /// Number of Tensor copies sharing this buffer (for tests and diagnostics).
    long use_count() const noexcept { return owner_.use_count(); }

private:
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

}  // namespace dsinfer
