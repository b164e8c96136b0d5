// Calibration data sources (dsinfer/quantize.hpp): batches in memory, a callback, a folder of
// ONNX TensorProto (.pb) / NumPy (.npy) files, and a CSV file of samples.
//
// The file sources read untrusted input: every size a file declares is checked against what
// the file holds before memory is committed to it, files are opened non-blocking and must be
// regular (a FIFO never blocks a calibration run), and every error names the file (and, for
// CSV, the line). The folder is listed up front (its structure is checked before any batch is
// read; size() is known); tensors are read one batch per next(). The CSV file is parsed once
// up front to validate every line and count the samples, then again, batch by batch, in next().
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "dsinfer/onnx.hpp"
#include "dsinfer/quantize.hpp"

namespace dsinfer {
namespace {

namespace fs = std::filesystem;
using std::int64_t;

std::string quoted(const fs::path& p) {
    // Appended rather than "'" + s + "'": GCC 12's -Wrestrict misfires on that form.
    std::string s = p.string();
    std::string out;
    out.reserve(s.size() + 2);
    out.push_back('\'');
    out.append(s);
    out.push_back('\'');
    return out;
}

/// Runs `f` (returning a StatusOr or Status), turning the exceptions that may escape the
/// standard library into Statuses: the public functions never throw.
template <class F>
auto guarded(std::string_view what, F&& f) noexcept -> decltype(f()) {
    try {
        return f();
    } catch (const Error& e) {
        return Status(e.code() == ErrorCode::ok ? ErrorCode::internal : e.code(),
                      std::string(what) + ": " + e.message());
    } catch (const std::bad_alloc&) {
        return Status::error(ErrorCode::resource_exhausted, what, ": out of memory");
    } catch (const fs::filesystem_error& e) {
        return Status::error(ErrorCode::io_error, what, ": ", e.what());
    } catch (const std::exception& e) {
        return Status::error(ErrorCode::internal, what, ": unexpected exception: ", e.what());
    } catch (...) {
        return Status::error(ErrorCode::internal, what, ": unexpected exception");
    }
}

// ---- in memory, callback ---------------------------------------------------------------------

class BatchListSource final : public CalibrationSource {
public:
    explicit BatchListSource(std::vector<std::vector<NamedTensor>> batches)
        : batches_(std::move(batches)) {}
    std::size_t size() const override { return batches_.size(); }
    StatusOr<bool> next(std::vector<NamedTensor>& batch) override {
        if (next_ >= batches_.size()) {
            batch.clear();
            return false;
        }
        // Moved out: a batch's memory is released once the caller is done with it.
        batch = std::move(batches_[next_++]);
        return true;
    }

private:
    std::vector<std::vector<NamedTensor>> batches_;
    std::size_t next_ = 0;
};

class CallbackSource final : public CalibrationSource {
public:
    CallbackSource(std::function<StatusOr<bool>(std::vector<NamedTensor>&)> next, std::size_t size)
        : next_(std::move(next)), size_(size) {}
    std::size_t size() const override { return size_; }
    StatusOr<bool> next(std::vector<NamedTensor>& batch) override {
        if (!next_)
            return Status(ErrorCode::invalid_argument,
                          "calibration_callback: the callback is empty");
        try {
            return next_(batch);
        } catch (const Error& e) {
            return Status(e.code() == ErrorCode::ok ? ErrorCode::invalid_argument : e.code(),
                          "calibration callback: " + e.message());
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "calibration callback: out of memory");
        } catch (const std::exception& e) {
            return Status::error(ErrorCode::invalid_argument,
                                 "calibration callback threw: ", e.what());
        } catch (...) {
            return Status(ErrorCode::invalid_argument,
                          "calibration callback threw a non-standard exception");
        }
    }

private:
    std::function<StatusOr<bool>(std::vector<NamedTensor>&)> next_;
    std::size_t size_;
};

// ---- the graph's inputs ----------------------------------------------------------------------

struct InputSpec {
    std::string name;
    std::optional<DType> dtype;
    SymbolicShape shape;
};

/// The inputs a caller feeds (initializer-backed inputs excluded), in declaration order.
StatusOr<std::vector<InputSpec>> fed_inputs(const Graph& graph) {
    std::vector<InputSpec> out;
    for (ValueId id : graph.inputs) {
        DSINFER_CHECK(id >= 0 && static_cast<std::size_t>(id) < graph.values.size(),
                      ErrorCode::invalid_argument, "graph input id ", id, " out of range");
        const Value& v = graph.value(id);
        if (v.initializer) continue;
        out.push_back({v.name, v.dtype, v.shape});
    }
    DSINFER_CHECK(!out.empty(), ErrorCode::invalid_argument, "the graph has no inputs to feed");
    return out;
}

std::string input_list(const std::vector<InputSpec>& inputs) {
    std::string s;
    for (const InputSpec& in : inputs) s += (s.empty() ? "'" : ", '") + in.name + "'";
    return s;
}

/// Symbolic dims bound by one batch: a symbol takes one value across the batch's inputs (as
/// the engine checks at run time).
struct SymbolBinding {
    std::string symbol;
    int64_t value;
    std::string input;
};

/// Checks `t` (read from `file`) against `spec`: element type (float64 data for a float32
/// input is converted to float32), rank, static dims, symbols bound consistently, bool bytes.
Status check_input(const InputSpec& spec, Tensor& t, const fs::path& file,
                   std::vector<SymbolBinding>& symbols) {
    const auto where = [&] { return quoted(file) + " (input '" + spec.name + "')"; };
    if (spec.dtype && *spec.dtype == DType::f32 && t.dtype() == DType::f64) {
        DSINFER_ASSIGN_OR_RETURN(Tensor f, Tensor::allocate(DType::f32, t.shape()));
        const double* src = t.data_unchecked<double>();
        float* dst = f.data_unchecked<float>();
        constexpr double kMax = std::numeric_limits<float>::max();
        for (int64_t i = 0; i < t.num_elements(); ++i) {
            // Finite values beyond float32 are bad data, not infinities (NaN and +-inf pass:
            // calibration counts them).
            DSINFER_CHECK(!(std::fabs(src[i]) > kMax) || std::isinf(src[i]),
                          ErrorCode::invalid_argument, where(), ": float64 element ", i, " (",
                          src[i], ") is out of the float32 range");
            dst[i] = static_cast<float>(src[i]);
        }
        t = std::move(f);
    }
    if (spec.dtype)
        DSINFER_CHECK(t.dtype() == *spec.dtype, ErrorCode::invalid_argument, where(),
                      ": expected element type ", dtype_name(*spec.dtype), ", got ",
                      dtype_name(t.dtype()));
    if (spec.shape.known) {
        DSINFER_CHECK(t.num_dims() == spec.shape.rank(), ErrorCode::invalid_argument, where(),
                      ": expected rank ", spec.shape.rank(), " ", spec.shape.to_string(),
                      ", got rank ", t.num_dims(), " ", t.shape().to_string());
        for (int d = 0; d < spec.shape.rank(); ++d) {
            const Dim& dim = spec.shape.dims[static_cast<std::size_t>(d)];
            const int64_t got = t.shape()[d];
            if (dim.is_static()) {
                DSINFER_CHECK(got == dim.value, ErrorCode::invalid_argument, where(),
                              ": dimension ", d, " must be ", dim.value, " (model shape ",
                              spec.shape.to_string(), "), got ", got, " (shape ",
                              t.shape().to_string(), ")");
            } else if (!dim.symbol.empty()) {
                auto it = std::find_if(symbols.begin(), symbols.end(), [&](const SymbolBinding& b) {
                    return b.symbol == dim.symbol;
                });
                if (it == symbols.end()) {
                    symbols.push_back({dim.symbol, got, spec.name});
                } else {
                    DSINFER_CHECK(it->value == got, ErrorCode::invalid_argument, where(),
                                  ": dimension ", d, " ('", dim.symbol, "') is ", got,
                                  " but input '", it->input, "' of the same batch binds '",
                                  dim.symbol, "' to ", it->value);
                }
            }
        }
    }
    if (t.dtype() == DType::boolean) {  // the kernels read bools as bool: bytes 0 or 1 only
        const auto* b = static_cast<const std::uint8_t*>(t.raw_data());
        for (int64_t k = 0; k < t.num_elements(); ++k)
            DSINFER_CHECK(b[k] <= 1, ErrorCode::invalid_argument, where(), ": bool element ", k,
                          " is stored as byte ", static_cast<int>(b[k]), " (must be 0 or 1)");
    }
    return Status::ok();
}

// ---- files -----------------------------------------------------------------------------------

/// An open file descriptor, closed on destruction.
class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Fd& operator=(Fd&& o) noexcept {
        if (this != &o) {
            reset();
            fd_ = std::exchange(o.fd_, -1);
        }
        return *this;
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { reset(); }
    int get() const noexcept { return fd_; }

private:
    void reset() noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }
    int fd_ = -1;
};

/// Opens a regular file for reading without blocking on a FIFO or device; its size.
StatusOr<std::pair<Fd, std::uint64_t>> open_regular(const fs::path& file) {
    Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
    if (fd.get() < 0)
        return Status::error(ErrorCode::io_error, "cannot open ", quoted(file), ": ",
                             std::strerror(errno));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
        return Status::error(ErrorCode::io_error, "cannot stat ", quoted(file), ": ",
                             std::strerror(errno));
    DSINFER_CHECK(S_ISREG(st.st_mode), ErrorCode::invalid_argument, quoted(file),
                  " is not a regular file");
    // Regular files ignore O_NONBLOCK; clear it anyway so reads behave as documented.
    const int flags = ::fcntl(fd.get(), F_GETFL);
    if (flags >= 0) (void)::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    return std::pair<Fd, std::uint64_t>(std::move(fd), static_cast<std::uint64_t>(st.st_size));
}

/// Reads exactly `n` bytes at `offset`; invalid_argument when the file ends first.
Status read_at(int fd, const fs::path& file, std::uint64_t offset, void* dst, std::size_t n) {
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
        const std::size_t chunk = std::min<std::size_t>(n, std::size_t{1} << 30);
        const ssize_t got = ::pread(fd, p, chunk, static_cast<off_t>(offset));
        if (got < 0) {
            if (errno == EINTR) continue;
            return Status::error(ErrorCode::io_error, "cannot read ", quoted(file), ": ",
                                 std::strerror(errno));
        }
        DSINFER_CHECK(got != 0, ErrorCode::invalid_argument, quoted(file),
                      " is truncated (it ended while being read)");
        p += got;
        n -= static_cast<std::size_t>(got);
        offset += static_cast<std::uint64_t>(got);
    }
    return Status::ok();
}

// ---- .npy ------------------------------------------------------------------------------------

/// The header of a .npy file: a Python dict literal with exactly 'descr', 'fortran_order' and
/// 'shape', e.g. "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".
struct NpyHeader {
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
};

class NpyHeaderParser {
public:
    explicit NpyHeaderParser(std::string_view s) : s_(s) {}

    StatusOr<NpyHeader> parse() {
        NpyHeader h;
        bool have_descr = false, have_order = false, have_shape = false;
        skip_ws();
        DSINFER_RETURN_IF_ERROR(expect('{'));
        skip_ws();
        while (!at('}')) {
            DSINFER_ASSIGN_OR_RETURN(std::string key, string_literal());
            skip_ws();
            DSINFER_RETURN_IF_ERROR(expect(':'));
            skip_ws();
            if (key == "descr") {
                DSINFER_CHECK(!have_descr, ErrorCode::invalid_argument, "'descr' given twice");
                DSINFER_CHECK(!at('['), ErrorCode::invalid_argument,
                              "structured (record) arrays are not supported");
                DSINFER_ASSIGN_OR_RETURN(h.descr, string_literal());
                have_descr = true;
            } else if (key == "fortran_order") {
                DSINFER_CHECK(!have_order, ErrorCode::invalid_argument,
                              "'fortran_order' given twice");
                DSINFER_ASSIGN_OR_RETURN(h.fortran_order, boolean());
                have_order = true;
            } else if (key == "shape") {
                DSINFER_CHECK(!have_shape, ErrorCode::invalid_argument, "'shape' given twice");
                DSINFER_ASSIGN_OR_RETURN(h.shape, tuple());
                have_shape = true;
            } else {
                return Status::error(ErrorCode::invalid_argument, "unknown header key '", key, "'");
            }
            skip_ws();
            if (!at('}')) {
                DSINFER_RETURN_IF_ERROR(expect(','));
                skip_ws();
            }
        }
        ++i_;  // '}'
        skip_ws();
        DSINFER_CHECK(i_ == s_.size(), ErrorCode::invalid_argument,
                      "unexpected text after the header dict");
        DSINFER_CHECK(have_descr && have_order && have_shape, ErrorCode::invalid_argument,
                      "the header lacks ",
                      !have_descr ? "'descr'" : (!have_order ? "'fortran_order'" : "'shape'"));
        return h;
    }

private:
    bool at(char c) const noexcept { return i_ < s_.size() && s_[i_] == c; }
    void skip_ws() noexcept {
        while (i_ < s_.size() &&
               (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
            ++i_;
    }
    Status expect(char c) {
        DSINFER_CHECK(at(c), ErrorCode::invalid_argument, "malformed header: expected '", c,
                      "' at offset ", i_);
        ++i_;
        return Status::ok();
    }
    StatusOr<std::string> string_literal() {
        DSINFER_CHECK(at('\'') || at('"'), ErrorCode::invalid_argument,
                      "malformed header: expected a string at offset ", i_);
        const char q = s_[i_++];
        const std::size_t begin = i_;
        while (i_ < s_.size() && s_[i_] != q) {
            DSINFER_CHECK(s_[i_] != '\\' && s_[i_] != '\n', ErrorCode::invalid_argument,
                          "malformed header: unsupported string at offset ", begin);
            ++i_;
        }
        DSINFER_CHECK(i_ < s_.size(), ErrorCode::invalid_argument,
                      "malformed header: unterminated string");
        return std::string(s_.substr(begin, i_++ - begin));
    }
    StatusOr<bool> boolean() {
        if (s_.substr(i_, 4) == "True") {
            i_ += 4;
            return true;
        }
        if (s_.substr(i_, 5) == "False") {
            i_ += 5;
            return false;
        }
        return Status::error(ErrorCode::invalid_argument,
                             "malformed header: expected True or False at offset ", i_);
    }
    StatusOr<int64_t> integer() {
        const std::size_t begin = i_;
        int64_t v = 0;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
            const int digit = s_[i_] - '0';
            DSINFER_CHECK(v <= (std::numeric_limits<int64_t>::max() - digit) / 10,
                          ErrorCode::invalid_argument, "shape dimension at offset ", begin,
                          " overflows int64");
            v = v * 10 + digit;
            ++i_;
        }
        DSINFER_CHECK(i_ > begin, ErrorCode::invalid_argument,
                      "malformed header: expected a non-negative integer at offset ", begin);
        if (at('L')) ++i_;  // Python 2 long literals (old files)
        return v;
    }
    StatusOr<std::vector<int64_t>> tuple() {
        DSINFER_RETURN_IF_ERROR(expect('('));
        std::vector<int64_t> dims;
        skip_ws();
        while (!at(')')) {
            DSINFER_CHECK(dims.size() <= static_cast<std::size_t>(kMaxRank), ErrorCode::unsupported,
                          "rank over the maximum ", kMaxRank);
            DSINFER_ASSIGN_OR_RETURN(int64_t d, integer());
            dims.push_back(d);
            skip_ws();
            if (!at(')')) {
                DSINFER_RETURN_IF_ERROR(expect(','));
                skip_ws();
            }
        }
        ++i_;  // ')'
        return dims;
    }

    std::string_view s_;
    std::size_t i_ = 0;
};

/// The element type of a .npy 'descr' ('<f4', '|u1', '|b1', ...).
StatusOr<DType> npy_dtype(std::string_view descr) {
    const auto unsupported = [&] {
        return Status::error(ErrorCode::invalid_argument, "dtype '", descr,
                             "' is not supported (bool, int8..int64, uint8..uint64, "
                             "float16/32/64; little-endian)");
    };
    if (descr.size() < 2) return unsupported();
    const char order = descr[0];
    const std::string_view code = descr.substr(1);
    static constexpr std::pair<std::string_view, DType> kCodes[] = {
        {"b1", DType::boolean}, {"?", DType::boolean}, {"i1", DType::i8},  {"u1", DType::u8},
        {"i2", DType::i16},     {"u2", DType::u16},    {"i4", DType::i32}, {"u4", DType::u32},
        {"i8", DType::i64},     {"u8", DType::u64},    {"f2", DType::f16}, {"f4", DType::f32},
        {"f8", DType::f64},
    };
    std::optional<DType> t;
    for (const auto& [c, dt] : kCodes)
        if (c == code) t = dt;
    if (!t) return unsupported();
    if (order == '>' && dtype_size(*t) > 1)
        return Status::error(ErrorCode::invalid_argument, "big-endian data ('", descr,
                             "') is not supported: save it little-endian (a.astype('<", code,
                             "'))");
    const bool ok_order = order == '<' || (dtype_size(*t) == 1 && (order == '|' || order == '>'));
    if (!ok_order) return unsupported();
    return *t;
}

StatusOr<Tensor> read_npy(const fs::path& file) {
    DSINFER_ASSIGN_OR_RETURN(auto opened, open_regular(file));
    const int fd = opened.first.get();
    const std::uint64_t size = opened.second;
    const auto bad = [&](const Status& s) { return s.with_context(quoted(file) + ": "); };

    unsigned char pre[12] = {};
    DSINFER_CHECK(size >= 10, ErrorCode::invalid_argument, quoted(file), " is ", size,
                  " bytes: too short for a .npy file");
    DSINFER_RETURN_IF_ERROR(read_at(fd, file, 0, pre, 10));
    DSINFER_CHECK(std::memcmp(pre, "\x93NUMPY", 6) == 0, ErrorCode::invalid_argument, quoted(file),
                  " is not a .npy file (no \\x93NUMPY magic)");
    const int major = pre[6], minor = pre[7];
    DSINFER_CHECK((major == 1 || major == 2 || major == 3) && minor == 0,
                  ErrorCode::invalid_argument, quoted(file), ": unsupported .npy version ", major,
                  ".", minor, " (1.0, 2.0 and 3.0 are)");
    std::uint64_t header_len = 0, header_at = 0;
    if (major == 1) {
        header_len = static_cast<std::uint64_t>(pre[8]) | (static_cast<std::uint64_t>(pre[9]) << 8);
        header_at = 10;
    } else {
        DSINFER_CHECK(size >= 12, ErrorCode::invalid_argument, quoted(file),
                      " is truncated (in its header)");
        DSINFER_RETURN_IF_ERROR(read_at(fd, file, 10, pre + 10, 2));
        header_len = static_cast<std::uint64_t>(pre[8]) |
                     (static_cast<std::uint64_t>(pre[9]) << 8) |
                     (static_cast<std::uint64_t>(pre[10]) << 16) |
                     (static_cast<std::uint64_t>(pre[11]) << 24);
        header_at = 12;
    }
    // numpy writes headers of a few hundred bytes and by default refuses to read ones over
    // 10000; 1 MiB bounds what a hostile file can make us read before the data.
    constexpr std::uint64_t kMaxHeader = 1u << 20;
    DSINFER_CHECK(header_len <= kMaxHeader, ErrorCode::invalid_argument, quoted(file),
                  ": header of ", header_len, " bytes (over ", kMaxHeader, ")");
    DSINFER_CHECK(header_at + header_len <= size, ErrorCode::invalid_argument, quoted(file),
                  " is truncated (its header says ", header_len, " bytes, the file has ",
                  size - header_at, " after the preamble)");
    std::string text(static_cast<std::size_t>(header_len), '\0');
    DSINFER_RETURN_IF_ERROR(read_at(fd, file, header_at, text.data(), text.size()));

    auto parsed = NpyHeaderParser(text).parse();
    if (!parsed) return bad(parsed.status());
    const NpyHeader& h = *parsed;
    auto dtype = npy_dtype(h.descr);
    if (!dtype) return bad(dtype.status());
    DSINFER_CHECK(!h.fortran_order, ErrorCode::invalid_argument, quoted(file),
                  ": Fortran-order arrays are not supported (save np.ascontiguousarray(a))");
    auto shape = Shape::make(h.shape);
    if (!shape) return bad(shape.status());

    const std::uint64_t data_at = header_at + header_len;
    const auto n = static_cast<std::uint64_t>(shape->num_elements());
    const std::uint64_t esize = dtype_size(*dtype);
    DSINFER_CHECK(n <= (size - data_at) / esize, ErrorCode::invalid_argument, quoted(file),
                  " is truncated: shape ", shape->to_string(), " of ", dtype_name(*dtype),
                  " needs ", n, " elements, the file holds ", size - data_at, " data bytes");
    DSINFER_CHECK(n * esize == size - data_at, ErrorCode::invalid_argument, quoted(file), " has ",
                  size - data_at - n * esize, " bytes after the ", n * esize,
                  " data bytes of shape ", shape->to_string());
    auto t = Tensor::allocate(*dtype, *shape);
    if (!t) return bad(t.status());
    DSINFER_RETURN_IF_ERROR(read_at(fd, file, data_at, t->raw_data(), t->num_bytes()));
    if constexpr (std::endian::native == std::endian::big) {
        auto* b = static_cast<unsigned char*>(t->raw_data());
        if (esize > 1)
            for (std::uint64_t i = 0; i < n; ++i) std::reverse(b + i * esize, b + (i + 1) * esize);
    }
    return std::move(t).value();
}

/// A .pb (onnx.TensorProto) file through the importer; its errors name the file, and a
/// malformed tensor is the caller's invalid_argument rather than invalid_model.
StatusOr<Tensor> read_pb(const fs::path& file) {
    try {
        // Regular files only (the importer itself refuses others without blocking).
        return load_tensor_proto(file);
    } catch (const Error& e) {
        const ErrorCode code =
            e.code() == ErrorCode::invalid_model ? ErrorCode::invalid_argument : e.code();
        const bool named = e.message().find(file.string()) != std::string::npos;
        return Status(code, named ? e.message() : quoted(file) + ": " + e.message());
    }
}

StatusOr<Tensor> read_tensor_file(const fs::path& file) {
    return file.extension() == ".npy" ? read_npy(file) : read_pb(file);
}

// ---- folders ---------------------------------------------------------------------------------

/// Name order with digit runs compared as numbers ("set_2" before "set_10"), then byte order
/// (a total order: "set_02" and "set_2" both have a place).
bool natural_less(const std::string& a, const std::string& b) {
    std::size_t i = 0, j = 0;
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    while (i < a.size() && j < b.size()) {
        if (digit(a[i]) && digit(b[j])) {
            std::size_t ie = i, je = j;
            while (ie < a.size() && digit(a[ie])) ++ie;
            while (je < b.size() && digit(b[je])) ++je;
            std::size_t iz = i, jz = j;  // skip leading zeros
            while (iz + 1 < ie && a[iz] == '0') ++iz;
            while (jz + 1 < je && b[jz] == '0') ++jz;
            const std::string_view da(a.data() + iz, ie - iz), db(b.data() + jz, je - jz);
            if (da.size() != db.size()) return da.size() < db.size();
            if (da != db) return da < db;
            i = ie;
            j = je;
        } else {
            if (a[i] != b[j])
                return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
            ++i;
            ++j;
        }
    }
    if ((i < a.size()) != (j < b.size())) return j < b.size();
    return a < b;
}

enum class EntryKind { file, folder };
struct Entry {
    fs::path path;
    std::string name;
    EntryKind kind;
};

/// The visible entries of `dir` (names starting with '.' are skipped), in natural name order.
/// Symbolic links are followed; anything but a regular file or folder is an error.
StatusOr<std::vector<Entry>> list_folder(const fs::path& dir) {
    std::vector<Entry> out;
    std::error_code ec;
    fs::directory_iterator it(dir, ec), end;
    if (ec)
        return Status::error(ErrorCode::io_error, "cannot list ", quoted(dir), ": ", ec.message());
    for (; it != end; it.increment(ec)) {
        if (ec) break;
        const fs::path p = it->path();
        std::string name = p.filename().string();
        if (name.empty() || name[0] == '.') continue;
        const fs::file_status st = it->status(ec);  // follows symlinks
        if (ec)
            return Status::error(ErrorCode::io_error, "cannot stat ", quoted(p), ": ",
                                 ec.message());
        if (fs::is_directory(st)) {
            out.push_back({p, std::move(name), EntryKind::folder});
        } else if (fs::is_regular_file(st)) {
            out.push_back({p, std::move(name), EntryKind::file});
        } else {
            return Status::error(ErrorCode::invalid_argument, quoted(p),
                                 " is neither a regular file nor a folder");
        }
    }
    if (ec)
        return Status::error(ErrorCode::io_error, "cannot list ", quoted(dir), ": ", ec.message());
    std::sort(out.begin(), out.end(),
              [](const Entry& a, const Entry& b) { return natural_less(a.name, b.name); });
    return out;
}

bool is_tensor_file(const fs::path& p) { return p.extension() == ".pb" || p.extension() == ".npy"; }

/// `stem` is "<prefix><decimal>"; the number (at most 9 digits), or nullopt.
std::optional<std::size_t> numbered(std::string_view stem, std::string_view prefix) {
    if (stem.size() <= prefix.size() || stem.substr(0, prefix.size()) != prefix) return {};
    const std::string_view digits = stem.substr(prefix.size());
    if (digits.size() > 9) return {};
    std::size_t v = 0;
    for (char c : digits) {
        if (c < '0' || c > '9') return {};
        v = v * 10 + static_cast<std::size_t>(c - '0');
    }
    return v;
}

/// One batch: where it comes from and one file per input (in the graph's input order).
struct BatchFiles {
    fs::path where;
    std::vector<fs::path> files;
};

constexpr std::string_view kBatchFolderNames =
    "<input name>.pb/.npy or input_<i>.pb/.npy (output_<i> files are ignored)";

/// The files of one batch folder, matched to the inputs: by name first, then input_<i> (the
/// i-th fed input); output_<i> (ONNX test data's expected outputs) is skipped.
StatusOr<BatchFiles> match_batch_folder(const fs::path& folder,
                                        const std::vector<InputSpec>& inputs) {
    DSINFER_ASSIGN_OR_RETURN(std::vector<Entry> entries, list_folder(folder));
    BatchFiles b;
    b.where = folder;
    b.files.resize(inputs.size());
    for (const Entry& e : entries) {
        DSINFER_CHECK(e.kind == EntryKind::file, ErrorCode::invalid_argument, "unexpected folder ",
                      quoted(e.path), " inside batch folder ", quoted(folder));
        DSINFER_CHECK(is_tensor_file(e.path), ErrorCode::invalid_argument, "unexpected file ",
                      quoted(e.path), ": a batch folder holds ", kBatchFolderNames);
        const std::string stem = e.path.stem().string();
        std::optional<std::size_t> index;
        for (std::size_t i = 0; i < inputs.size() && !index; ++i)
            if (inputs[i].name == stem) index = i;
        if (!index) {
            if (auto k = numbered(stem, "input_"); k && *k < inputs.size()) {
                index = *k;
            } else if (numbered(stem, "output_")) {
                continue;
            } else {
                return Status::error(ErrorCode::invalid_argument, "file ", quoted(e.path),
                                     " names no input of the graph (inputs: ", input_list(inputs),
                                     "; ", inputs.size(), " of them for input_<i>)");
            }
        }
        fs::path& slot = b.files[*index];
        DSINFER_CHECK(slot.empty(), ErrorCode::invalid_argument, "files ", quoted(slot), " and ",
                      quoted(e.path), " both give input '", inputs[*index].name, "'");
        slot = e.path;
    }
    for (std::size_t i = 0; i < inputs.size(); ++i)
        DSINFER_CHECK(!b.files[i].empty(), ErrorCode::invalid_argument, "batch folder ",
                      quoted(folder), " has no file for input '", inputs[i].name, "' (",
                      inputs[i].name, ".pb, ", inputs[i].name, ".npy or input_", i, ".pb/.npy)");
    return b;
}

class FolderSource final : public CalibrationSource {
public:
    FolderSource(std::vector<InputSpec> inputs, std::vector<BatchFiles> batches)
        : inputs_(std::move(inputs)), batches_(std::move(batches)) {}
    std::size_t size() const override { return batches_.size(); }
    StatusOr<bool> next(std::vector<NamedTensor>& batch) override {
        return guarded("calibration folder", [&]() -> StatusOr<bool> {
            if (next_ >= batches_.size()) {
                batch.clear();
                return false;
            }
            const BatchFiles& b = batches_[next_];
            std::vector<NamedTensor> out;
            out.reserve(inputs_.size());
            std::vector<SymbolBinding> symbols;
            for (std::size_t i = 0; i < inputs_.size(); ++i) {
                DSINFER_ASSIGN_OR_RETURN(Tensor t, read_tensor_file(b.files[i]));
                DSINFER_RETURN_IF_ERROR(check_input(inputs_[i], t, b.files[i], symbols));
                out.push_back({inputs_[i].name, std::move(t)});
            }
            batch = std::move(out);
            ++next_;
            return true;
        });
    }

private:
    std::vector<InputSpec> inputs_;
    std::vector<BatchFiles> batches_;
    std::size_t next_ = 0;
};

StatusOr<std::unique_ptr<CalibrationSource>> make_folder_source(const fs::path& dir,
                                                                const Graph& graph) {
    DSINFER_ASSIGN_OR_RETURN(std::vector<InputSpec> inputs, fed_inputs(graph));
    std::error_code ec;
    const fs::file_status st = fs::status(dir, ec);  // a missing path is not an error here
    if (ec)
        return Status::error(ErrorCode::io_error, "cannot stat calibration folder ", quoted(dir),
                             ": ", ec.message());
    DSINFER_CHECK(fs::exists(st), ErrorCode::io_error, "calibration folder ", quoted(dir),
                  " does not exist");
    DSINFER_CHECK(fs::is_directory(st), ErrorCode::invalid_argument, "calibration data ",
                  quoted(dir), " is not a folder");
    DSINFER_ASSIGN_OR_RETURN(std::vector<Entry> entries, list_folder(dir));
    const bool by_folder = std::any_of(entries.begin(), entries.end(),
                                       [](const Entry& e) { return e.kind == EntryKind::folder; });
    std::vector<BatchFiles> batches;
    for (const Entry& e : entries) {
        // A model file beside its data (ONNX test-data layout: model.onnx, test_data_set_N/).
        if (e.kind == EntryKind::file && e.path.extension() == ".onnx") continue;
        if (by_folder) {
            DSINFER_CHECK(e.kind == EntryKind::folder, ErrorCode::invalid_argument, "file ",
                          quoted(e.path), " beside batch folders in ", quoted(dir),
                          is_tensor_file(e.path)
                              ? ": use one layout, one subfolder per batch or one file per batch"
                              : ": expected only batch folders (and a .onnx model)");
            DSINFER_ASSIGN_OR_RETURN(BatchFiles b, match_batch_folder(e.path, inputs));
            batches.push_back(std::move(b));
        } else {
            DSINFER_CHECK(is_tensor_file(e.path), ErrorCode::invalid_argument, "unexpected file ",
                          quoted(e.path),
                          ": calibration files are .pb (onnx.TensorProto) or "
                          ".npy");
            DSINFER_CHECK(inputs.size() == 1, ErrorCode::invalid_argument, "calibration folder ",
                          quoted(dir),
                          " holds one file per batch, which fits a model with one "
                          "input; this one has ",
                          inputs.size(), " (", input_list(inputs),
                          "): use one subfolder per batch, holding ", kBatchFolderNames);
            batches.push_back({e.path, {e.path}});
        }
    }
    DSINFER_CHECK(!batches.empty(), ErrorCode::invalid_argument, "calibration folder ", quoted(dir),
                  " holds no batch (no subfolder, no .pb or .npy file)");
    return std::unique_ptr<CalibrationSource>(
        std::make_unique<FolderSource>(std::move(inputs), std::move(batches)));
}

// ---- CSV -------------------------------------------------------------------------------------

/// Lines of a file read through a buffer, each at most `max_line` bytes (a file without line
/// breaks cannot make us hold all of it). '\r' before '\n' is dropped.
class LineReader {
public:
    LineReader(Fd fd, fs::path file, std::size_t max_line)
        : fd_(std::move(fd)), file_(std::move(file)), max_line_(max_line), buf_(1 << 16) {}

    /// Back to the first line.
    void rewind() noexcept {
        offset_ = 0;
        pos_ = len_ = 0;
        line_no_ = 0;
        eof_ = false;
    }
    std::size_t line_no() const noexcept { return line_no_; }
    const fs::path& file() const noexcept { return file_; }

    /// The next line into `line` and true, or false at the end of the file.
    StatusOr<bool> next(std::string& line) {
        line.clear();
        bool any = false;
        for (;;) {
            if (pos_ == len_) {
                if (eof_) break;
                DSINFER_RETURN_IF_ERROR(fill());
                if (len_ == 0) break;
            }
            any = true;
            const char* begin = buf_.data() + pos_;
            const auto* nl = static_cast<const char*>(std::memchr(begin, '\n', len_ - pos_));
            const std::size_t take = nl ? static_cast<std::size_t>(nl - begin) : len_ - pos_;
            DSINFER_CHECK(line.size() + take <= max_line_, ErrorCode::invalid_argument,
                          quoted(file_), " line ", line_no_ + 1, " is longer than ", max_line_,
                          " bytes");
            line.append(begin, take);
            pos_ += take;
            if (nl) {
                ++pos_;
                break;
            }
        }
        if (!any) return false;
        ++line_no_;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line_no_ == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // UTF-8 BOM
        return true;
    }

private:
    Status fill() {
        pos_ = len_ = 0;
        for (;;) {
            const ssize_t got =
                ::pread(fd_.get(), buf_.data(), buf_.size(), static_cast<off_t>(offset_));
            if (got < 0) {
                if (errno == EINTR) continue;
                return Status::error(ErrorCode::io_error, "cannot read ", quoted(file_), ": ",
                                     std::strerror(errno));
            }
            len_ = static_cast<std::size_t>(got);
            offset_ += static_cast<std::uint64_t>(got);
            if (got == 0) eof_ = true;
            return Status::ok();
        }
    }

    Fd fd_;
    fs::path file_;
    std::size_t max_line_;
    std::vector<char> buf_;
    std::uint64_t offset_ = 0;
    std::size_t pos_ = 0, len_ = 0;
    std::size_t line_no_ = 0;
    bool eof_ = false;
};

bool blank(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t'; });
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

std::size_t count_fields(std::string_view line) {
    return static_cast<std::size_t>(std::count(line.begin(), line.end(), ',')) + 1;
}

/// Parses one CSV line of `fields` values (the first a skipped label when fields == width + 1)
/// into `dst`, each value times `scale` (dst nullptr: validate only).
Status parse_csv_row(std::string_view line, std::size_t line_no, std::size_t fields, int64_t width,
                     float scale, float* dst) {
    const std::size_t got = count_fields(line);
    DSINFER_CHECK(got == fields, ErrorCode::invalid_argument, "line ", line_no, " has ", got,
                  " values, the lines before it ", fields);
    const bool labeled = fields == static_cast<std::size_t>(width) + 1;
    std::size_t k = 0;
    for (std::size_t f = 0; f < fields; ++f) {
        const std::size_t comma = line.find(',');
        const std::string_view field = trim(line.substr(0, comma));
        line = comma == std::string_view::npos ? std::string_view{} : line.substr(comma + 1);
        if (labeled && f == 0) {  // any text: class names are labels too
            DSINFER_CHECK(!field.empty(), ErrorCode::invalid_argument, "line ", line_no,
                          ": empty label");
            continue;
        }
        std::string_view num = field;
        if (num.size() > 1 && num[0] == '+' && num[1] != '-' && num[1] != '+') num.remove_prefix(1);
        double v = 0.0;
        const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
        DSINFER_CHECK(
            !num.empty() && ec != std::errc::invalid_argument && end == num.data() + num.size(),
            ErrorCode::invalid_argument, "line ", line_no, ", value ", f + 1, ": '", field,
            "' is not a number");
        if (ec == std::errc::result_out_of_range) {
            // Underflow (a negative exponent) is +-0 in float32; overflow is an error.
            const std::size_t e = num.find_first_of("eE");
            DSINFER_CHECK(e != std::string_view::npos && e + 1 < num.size() && num[e + 1] == '-',
                          ErrorCode::invalid_argument, "line ", line_no, ", value ", f + 1, ": '",
                          field, "' is out of range");
            v = num[0] == '-' ? -0.0 : 0.0;
        }
        const auto x = static_cast<float>(v * static_cast<double>(scale));
        DSINFER_CHECK(std::isfinite(x) || !std::isfinite(v), ErrorCode::invalid_argument, "line ",
                      line_no, ", value ", f + 1, ": '", field, "' (times ", scale,
                      ") is out of the float32 range");
        if (dst) dst[k] = x;
        ++k;
    }
    return Status::ok();
}

class CsvSource final : public CalibrationSource {
public:
    CsvSource(LineReader reader, std::string input, int64_t width, std::size_t fields,
              std::size_t rows, std::size_t batch, std::size_t batches, float scale)
        : reader_(std::move(reader)),
          input_(std::move(input)),
          width_(width),
          fields_(fields),
          rows_(rows),
          batch_(batch),
          batches_(batches),
          scale_(scale) {}

    std::size_t size() const override { return batches_; }

    StatusOr<bool> next(std::vector<NamedTensor>& batch) override {
        return guarded("calibration CSV", [&]() -> StatusOr<bool> {
            if (done_ >= batches_) {
                batch.clear();
                return false;
            }
            const std::size_t rows = std::min(batch_, rows_ - done_ * batch_);
            DSINFER_ASSIGN_OR_RETURN(
                Tensor t, Tensor::allocate(DType::f32, Shape{static_cast<int64_t>(rows), width_}));
            float* dst = t.data_unchecked<float>();
            const std::size_t saved_line = reader_.line_no();
            for (std::size_t r = 0; r < rows;) {
                DSINFER_ASSIGN_OR_RETURN(bool more, reader_.next(line_));
                if (!more) {
                    const std::size_t ended = reader_.line_no();
                    rewind_to(saved_line);
                    return Status::error(ErrorCode::invalid_argument, quoted(reader_.file()),
                                         " ended at line ", ended,
                                         " (it changed while being read)");
                }
                if (blank(line_)) continue;
                Status s = parse_csv_row(line_, reader_.line_no(), fields_, width_, scale_,
                                         dst + r * static_cast<std::size_t>(width_));
                if (!s) {
                    rewind_to(saved_line);
                    return s.with_context(quoted(reader_.file()) + ": ");
                }
                ++r;
            }
            batch.clear();
            batch.push_back({input_, std::move(t)});
            ++done_;
            return true;
        });
    }

private:
    /// After a failed batch: back to where it started, so that a retry reports the same error.
    void rewind_to(std::size_t line_no) {
        reader_.rewind();
        std::string skip;
        while (reader_.line_no() < line_no) {
            auto more = reader_.next(skip);
            if (!more || !*more) break;
        }
    }

    LineReader reader_;
    std::string input_;
    int64_t width_;
    std::size_t fields_;  ///< values per line: width_, or width_ + 1 with a label
    std::size_t rows_;
    std::size_t batch_;
    std::size_t batches_;
    float scale_;
    std::size_t done_ = 0;
    std::string line_;
};

StatusOr<std::unique_ptr<CalibrationSource>> make_csv_source(const fs::path& file,
                                                             const Graph& graph, int64_t batch_size,
                                                             float scale) {
    DSINFER_CHECK(batch_size > 0, ErrorCode::invalid_argument, "calibration CSV batch size ",
                  batch_size, " (must be positive)");
    DSINFER_CHECK(std::isfinite(scale), ErrorCode::invalid_argument, "calibration CSV scale ",
                  scale, " is not finite");
    DSINFER_ASSIGN_OR_RETURN(std::vector<InputSpec> inputs, fed_inputs(graph));
    DSINFER_CHECK(inputs.size() == 1, ErrorCode::invalid_argument,
                  "calibration from CSV needs a model with one input of shape [batch, N]; "
                  "this one has ",
                  inputs.size(), " (", input_list(inputs), ")");
    const InputSpec& in = inputs[0];
    DSINFER_CHECK(!in.dtype || *in.dtype == DType::f32, ErrorCode::invalid_argument,
                  "calibration from CSV needs a float32 input; '", in.name, "' is ",
                  dtype_name(*in.dtype));
    DSINFER_CHECK(in.shape.known && in.shape.rank() == 2 && in.shape.dims[1].is_static() &&
                      in.shape.dims[1].value > 0,
                  ErrorCode::invalid_argument,
                  "calibration from CSV needs an input of shape [batch, N] with N fixed; '",
                  in.name, "' is ", in.shape.to_string());
    const int64_t width = in.shape.dims[1].value;
    const Dim& batch_dim = in.shape.dims[0];
    if (batch_dim.is_static())
        DSINFER_CHECK(batch_dim.value == batch_size, ErrorCode::invalid_argument,
                      "calibration CSV batch size ", batch_size, " does not match input '", in.name,
                      "' of fixed shape ", in.shape.to_string());
    // Lines of up to N + 1 values of 256 characters each, and never less than 1 MiB.
    const std::size_t max_line = std::max<std::size_t>(
        std::size_t{1} << 20,
        (static_cast<std::size_t>(std::min<int64_t>(width, int64_t{1} << 40)) + 1) * 256);

    DSINFER_ASSIGN_OR_RETURN(auto opened, open_regular(file));
    LineReader reader(std::move(opened.first), file, max_line);
    const auto ctx = quoted(file) + ": ";

    // First pass: every line parses, and the samples are counted.
    std::size_t fields = 0, rows = 0, first_line = 0;
    std::string line;
    for (;;) {
        auto more = reader.next(line);
        if (!more) return more.status().with_context(ctx);
        if (!*more) break;
        if (blank(line)) continue;
        if (fields == 0) {
            fields = count_fields(line);
            first_line = reader.line_no();
            if (fields != static_cast<std::size_t>(width) &&
                fields != static_cast<std::size_t>(width) + 1)
                return Status::error(ErrorCode::invalid_argument, ctx, "line ", first_line, " has ",
                                     fields, " values; input '", in.name, "' ",
                                     in.shape.to_string(), " takes ", width, " per sample (",
                                     width + 1, " with a leading label)");
        }
        Status s = parse_csv_row(line, reader.line_no(), fields, width, scale, nullptr);
        if (!s) return s.with_context(ctx);
        ++rows;
    }
    DSINFER_CHECK(rows > 0, ErrorCode::invalid_argument, ctx, "no samples (the file is empty)");
    const auto batch =
        static_cast<std::size_t>(std::min<int64_t>(batch_size, static_cast<int64_t>(rows)));
    std::size_t batches = 0;
    if (batch_dim.is_static()) {
        // A fixed batch dim takes only full batches: the rows past the last one are left out.
        batches = rows / static_cast<std::size_t>(batch_size);
        DSINFER_CHECK(batches > 0, ErrorCode::invalid_argument, ctx, rows,
                      " samples, fewer than one batch of input '", in.name, "' of fixed shape ",
                      in.shape.to_string());
    } else {
        batches = (rows + batch - 1) / batch;
    }
    reader.rewind();
    return std::unique_ptr<CalibrationSource>(std::make_unique<CsvSource>(
        std::move(reader), in.name, width, fields, rows,
        batch_dim.is_static() ? static_cast<std::size_t>(batch_size) : batch, batches, scale));
}

}  // namespace

std::unique_ptr<CalibrationSource> calibration_batches(
    std::vector<std::vector<NamedTensor>> batches) {
    return std::make_unique<BatchListSource>(std::move(batches));
}

std::unique_ptr<CalibrationSource> calibration_callback(
    std::function<StatusOr<bool>(std::vector<NamedTensor>&)> next, std::size_t size) {
    return std::make_unique<CallbackSource>(std::move(next), size);
}

StatusOr<std::unique_ptr<CalibrationSource>> calibration_folder(const std::filesystem::path& dir,
                                                                const Graph& graph) {
    return guarded("calibration_folder", [&] { return make_folder_source(dir, graph); });
}

StatusOr<std::unique_ptr<CalibrationSource>> calibration_csv(const std::filesystem::path& file,
                                                             const Graph& graph,
                                                             std::int64_t batch_size, float scale) {
    return guarded("calibration_csv",
                   [&] { return make_csv_source(file, graph, batch_size, scale); });
}

}  // namespace dsinfer
