// Shared helpers of the fuzz targets (fuzz/fuzz_*.cpp): the invariant checks every target asserts,
// a byte reader that turns the fuzzer's input into choices, and small ONNX model builders.
//
// Invariant shared by all targets: every failure is a typed dsinfer error whose code is not
// `internal`; anything else (an `internal` code, a non-dsinfer exception, a crash, a sanitizer
// report) is a finding. fail() prints what went wrong and executes __builtin_trap(), which
// libFuzzer (and replay_main.cpp) report as a crash and save the input of.
#pragma once

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dsinfer/dsinfer.hpp>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "unit/model_builder.hpp"

namespace dsinfer::fuzz {

/// Reports a broken invariant and traps (libFuzzer saves the input as a crash artifact).
[[noreturn]] inline void fail(std::string_view what) {
    std::fprintf(stderr, "\n*** fuzz invariant violated: %.*s\n", static_cast<int>(what.size()),
                 what.data());
    std::fflush(stderr);
    __builtin_trap();
}

/// A failure must carry a code other than `internal`.
inline void check_status(const Status& st, std::string_view where) {
    if (st.code() == ErrorCode::internal)
        fail(std::string(where) + " returned an internal error: " + st.to_string());
}

/// Runs f(); dsinfer::Error must not be `internal`, other exceptions are findings.
/// Returns the code (ok when f returned normally).
template <class F>
ErrorCode expect_typed(F&& f, std::string_view where) {
    try {
        f();
        return ErrorCode::ok;
    } catch (const Error& e) {
        if (e.code() == ErrorCode::internal)
            fail(std::string(where) + " threw an internal error: " + e.what());
        return e.code();
    } catch (const std::exception& e) {
        fail(std::string(where) + " threw a non-dsinfer exception: " + e.what());
    } catch (...) {
        fail(std::string(where) + " threw a non-std exception");
    }
}

/// Consumes the fuzzer's bytes as choices; past the end every read returns 0 (so short inputs
/// still make a complete, deterministic case).
class ByteReader {
public:
    ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

    bool empty() const noexcept { return pos_ >= size_; }
    std::size_t remaining() const noexcept { return empty() ? 0 : size_ - pos_; }
    std::uint8_t u8() noexcept { return empty() ? 0 : data_[pos_++]; }
    std::uint16_t u16() noexcept { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
    std::uint32_t u32() noexcept { return static_cast<std::uint32_t>(u16()) | (std::uint32_t{u16()} << 16); }
    std::uint64_t u64() noexcept { return static_cast<std::uint64_t>(u32()) | (std::uint64_t{u32()} << 32); }
    bool flag() noexcept { return (u8() & 1) != 0; }
    /// A value in [0, n) (n > 0), from one byte when n <= 256.
    std::uint32_t pick(std::uint32_t n) noexcept { return n <= 256 ? u8() % n : u32() % n; }
    float f32() noexcept {
        const std::uint32_t bits = u32();
        float f;
        std::memcpy(&f, &bits, sizeof f);
        return f;
    }
    /// Up to max_len raw bytes (length from one byte).
    std::string bytes(std::size_t max_len) {
        std::size_t n = u8() % (max_len + 1);
        n = std::min(n, remaining());
        std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
        pos_ += n;
        return s;
    }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t pos_ = 0;
};

// ---- ONNX builders ------------------------------------------------------------------------------

inline onnx::ValueInfoProto tensor_info(const std::string& name, int elem_type,
                                        const std::vector<std::int64_t>& dims,
                                        const std::vector<std::string>& symbols = {}) {
    onnx::ValueInfoProto v;
    v.set_name(name);
    auto* tt = v.mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem_type);
    auto* shape = tt->mutable_shape();
    for (std::size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] < 0)
            shape->add_dim()->set_dim_param(i < symbols.size() ? symbols[i] : "batch");
        else
            shape->add_dim()->set_dim_value(dims[i]);
    }
    return v;
}

/// A tensor-typed value with no shape (rank unknown).
inline onnx::ValueInfoProto untyped_shape_info(const std::string& name, int elem_type) {
    onnx::ValueInfoProto v;
    v.set_name(name);
    v.mutable_type()->mutable_tensor_type()->set_elem_type(elem_type);
    return v;
}

inline onnx::NodeProto* add_node(onnx::GraphProto& g, const std::string& op,
                                 const std::vector<std::string>& ins,
                                 const std::vector<std::string>& outs) {
    auto* n = g.add_node();
    n->set_op_type(op);
    n->set_name(op + "_" + std::to_string(g.node_size()));
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
}

inline void add_int_attr(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
}

/// An empty model at `opset` (the tests' helper, tests/unit/model_builder.hpp).
using dsinfer::test::new_model;

/// An initializer with raw little-endian data.
inline onnx::TensorProto raw_tensor(const std::string& name, int elem_type,
                                    const std::vector<std::int64_t>& dims, const void* data,
                                    std::size_t bytes) {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(elem_type);
    for (auto d : dims) t.add_dims(d);
    t.set_raw_data(std::string(static_cast<const char*>(data), bytes));
    return t;
}

inline std::string serialize(const onnx::ModelProto& m) {
    std::string s;
    if (!m.SerializeToString(&s)) fail("could not serialize a harness-built model");
    return s;
}

}  // namespace dsinfer::fuzz
