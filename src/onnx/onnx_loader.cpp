// ONNX importer: ModelProto -> dsinfer::Graph.
//
// Model files are untrusted. Every length, count, dim and offset is validated before memory
// is committed to it; protobuf parsing is bounded in bytes and nesting; subgraph conversion
// recursion is bounded by ModelLimits::max_subgraph_depth (checked before recursing);
// external data is resolved strictly inside the model's directory on opened descriptors.
#include "onnx/onnx_loader.hpp"

#include <fcntl.h>
#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <onnx/onnx_pb.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dsinfer::detail {
namespace {

// ---- file helpers ---------------------------------------------------------------------------

struct Fd {
    int fd = -1;
    explicit Fd(int f = -1) : fd(f) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
    Fd& operator=(Fd&& o) noexcept {
        if (this != &o) {
            if (fd >= 0) ::close(fd);
            fd = o.fd;
            o.fd = -1;
        }
        return *this;
    }
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

/// A private copy-on-write mapping of a file, released when the last owner goes away. Weights
/// used in place point into one: writing into such a tensor changes a private copy of the page,
/// never the file.
struct Mapping {
    void* base = MAP_FAILED;
    std::size_t length = 0;
    /// Copy-on-write. False when the system refused the commit charge of a private writable
    /// mapping (vm.overcommit_memory = 2) and it is read-only: then nothing uses it in place.
    bool writable = true;
    ~Mapping() {
        if (base != MAP_FAILED && length > 0) ::munmap(base, length);
    }
};

/// Initializers' raw_data of at least this many bytes is used in place from the model file's
/// mapping (ModelLimits::map_weights); smaller ones are read into memory.
constexpr std::uint32_t kMapMinBytes = 64u << 10;

/// The bytes [data, data + length) of a mapping, owned by the tensors that use them in place.
/// When the last of them goes away (e.g. a weight replaced by its packed copy) the pages lying
/// wholly inside the range are dropped from the process (MADV_DONTNEED: clean file pages are
/// read again only if touched again, private copies are discarded); pages shared with a
/// neighbouring range stay until the mapping goes.
struct MappedRange {
    std::shared_ptr<Mapping> map;
    char* data = nullptr;
    std::size_t length = 0;
    ~MappedRange() {
        const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
        const auto begin = (reinterpret_cast<std::uintptr_t>(data) + page - 1) / page * page;
        const auto end = (reinterpret_cast<std::uintptr_t>(data) + length) / page * page;
        if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    }
};

/// A u8 tensor over `length` bytes at `offset` of a whole-file mapping.
Tensor mapped_bytes(const std::shared_ptr<Mapping>& map, std::uint64_t offset, std::size_t length) {
    auto range = std::make_shared<MappedRange>();
    range->map = map;
    range->data = static_cast<char*>(map->base) + offset;
    range->length = length;
    // Start reading the pages into the page cache (not into the process): the first run then
    // faults them in from memory, whichever of them it touches.
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<std::uintptr_t>(range->data) / page * page;
    ::madvise(reinterpret_cast<void*>(begin),
              reinterpret_cast<std::uintptr_t>(range->data) + length - begin, MADV_WILLNEED);
    void* data = range->data;
    return Tensor::wrap(data, DType::u8, Shape{static_cast<std::int64_t>(length)}, Device{},
                        std::move(range));
}

/// Whether a tensor of `dtype` can use data at `p` in place (element alignment; kernels load
/// unaligned vectors, as they do from callers' buffers).
bool usable_in_place(const void* p, DType dtype) {
    const std::size_t align = std::min<std::size_t>(dtype_size(dtype), 8);
    return align == 0 || reinterpret_cast<std::uintptr_t>(p) % align == 0;
}

StatusOr<std::shared_ptr<Mapping>> map_fd(int fd, std::uint64_t offset, std::uint64_t length,
                                          const std::string& what) {
    auto m = std::make_shared<Mapping>();
    if (length == 0) return m;
    const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    const std::uint64_t aligned = offset - offset % page;
    const std::uint64_t span = length + (offset - aligned);
    void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd,
                     static_cast<off_t>(aligned));
    if (p == MAP_FAILED && errno == ENOMEM) {
        p = ::mmap(nullptr, span, PROT_READ, MAP_PRIVATE, fd, static_cast<off_t>(aligned));
        m->writable = false;
    }
    if (p == MAP_FAILED)
        return Status::error(ErrorCode::io_error, "cannot map ", what, ": ", std::strerror(errno));
    m->base = p;
    m->length = span;
    return m;
}

// ---- conversion context ---------------------------------------------------------------------

struct Scope {
    std::unordered_map<std::string, ValueId> names;
    Graph* graph = nullptr;
};

class Converter {
public:
    Converter(std::filesystem::path base_dir, const ModelLimits& limits)
        : base_dir_(std::move(base_dir)), limits_(limits) {}

    Status convert_model(const onnx::ModelProto& model, Graph& out);
    StatusOr<Tensor> convert_tensor(const onnx::TensorProto& t, const std::string& what);
    /// The converter owns the parsed message: each raw_data buffer is freed once copied, so a
    /// model's weights are held twice only one tensor at a time (peak memory at load).
    void release_raw_data() noexcept { release_raw_ = true; }
    /// raw_data of the top-level graph's initializers, read straight into aligned buffers by
    /// the streaming reader (index = initializer index; a null tensor = none streamed).
    void use_streamed_raw_data(std::vector<Tensor> raw) { streamed_raw_ = std::move(raw); }

private:
    Status convert_graph(const onnx::GraphProto& g, Graph& out, std::vector<Scope*>& scopes,
                         int depth);
    Status convert_attribute(const onnx::AttributeProto& a, Attribute& out,
                             std::vector<Scope*>& scopes, int depth, const std::string& where);
    Status convert_type(const onnx::TypeProto& type, Value& v, const std::string& what);
    StatusOr<Tensor> read_external(const onnx::TensorProto& t, DType dtype, const Shape& shape,
                                   std::size_t bytes, const std::string& what);
    StatusOr<ValueId> resolve(const std::string& name, std::vector<Scope*>& scopes,
                              const std::string& where);

    std::filesystem::path base_dir_;
    const ModelLimits& limits_;
    std::int64_t node_count_ = 0;
    std::uint64_t external_bytes_ = 0;
    std::vector<OpsetImport> opsets_;
    bool release_raw_ = false;
    std::vector<Tensor> streamed_raw_;
    const Tensor* streamed_ = nullptr;  // the streamed raw_data of the tensor being converted
};

Status check_name(const std::string& s, const std::string& what) {
    DSINFER_CHECK(s.size() <= 4096, ErrorCode::invalid_model, what, " name is ", s.size(),
                  " bytes long (limit 4096)");
    return Status::ok();
}

StatusOr<std::uint64_t> parse_u64(const std::string& s, const std::string& what) {
    DSINFER_CHECK(!s.empty() && s.size() <= 20, ErrorCode::invalid_model, what,
                  " is not a non-negative integer: '", s, "'");
    std::uint64_t v = 0;
    for (char c : s) {
        DSINFER_CHECK(c >= '0' && c <= '9', ErrorCode::invalid_model, what,
                      " is not a non-negative integer: '", s, "'");
        const auto d = static_cast<std::uint64_t>(c - '0');
        DSINFER_CHECK(v <= (std::numeric_limits<std::uint64_t>::max() - d) / 10,
                      ErrorCode::invalid_model, what, " overflows: '", s, "'");
        v = v * 10 + d;
    }
    return v;
}

StatusOr<Tensor> Converter::read_external(const onnx::TensorProto& t, DType dtype,
                                          const Shape& shape, std::size_t bytes,
                                          const std::string& what) {
    std::string location;
    bool has_offset = false, has_length = false;
    std::uint64_t offset = 0, length = 0;
    for (const auto& kv : t.external_data()) {
        if (kv.key() == "location") {
            location = kv.value();
        } else if (kv.key() == "offset") {
            DSINFER_ASSIGN_OR_RETURN(offset, parse_u64(kv.value(), what + " external offset"));
            has_offset = true;
        } else if (kv.key() == "length") {
            DSINFER_ASSIGN_OR_RETURN(length, parse_u64(kv.value(), what + " external length"));
            has_length = true;
        } else if (kv.key() == "checksum") {
            // Not verified (no hash is prescribed by the spec); ignored by design.
        } else {
            return Status::error(ErrorCode::invalid_model, what, ": unknown external_data key '",
                                 kv.key(), "'");
        }
    }
    (void)has_offset;
    DSINFER_CHECK(dtype != DType::string, ErrorCode::invalid_model, what,
                  ": string tensors cannot use external data");
    DSINFER_CHECK(!location.empty(), ErrorCode::invalid_model, what,
                  ": external data has an empty location");
    DSINFER_CHECK(!base_dir_.empty(), ErrorCode::invalid_model, what,
                  ": external data '", location, "' but the model was not loaded from a file");
    // Reject anything that is not a plain relative path inside the model directory.
    DSINFER_CHECK(location.find('\\') == std::string::npos && location.find(':') == std::string::npos &&
                      location.find('\0') == std::string::npos && location.front() != '/',
                  ErrorCode::invalid_model, what, ": external data location '", location,
                  "' escapes the model directory (absolute, drive or UNC path)");
    if (location.rfind("*/_ORT_MEM_ADDR_/*", 0) == 0 || location.rfind("*/", 0) == 0)
        return Status::error(ErrorCode::invalid_model, what, ": external data location '",
                             location, "' is an in-memory sentinel, not a file");
    std::vector<std::string> parts;
    {
        std::size_t start = 0;
        while (start <= location.size()) {
            std::size_t end = location.find('/', start);
            if (end == std::string::npos) end = location.size();
            std::string part = location.substr(start, end - start);
            if (part == "..")
                return Status::error(ErrorCode::invalid_model, what, ": external data location '",
                                     location, "' escapes the model directory ('..')");
            if (!part.empty() && part != ".") parts.push_back(std::move(part));
            start = end + 1;
        }
    }
    DSINFER_CHECK(!parts.empty(), ErrorCode::invalid_model, what,
                  ": external data location '", location, "' names no file");

    Fd dir(::open(base_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir.fd < 0)
        return Status::error(ErrorCode::io_error, "cannot open model directory '",
                             base_dir_.string(), "': ", std::strerror(errno));
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
        Fd next(::openat(dir.fd, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (next.fd < 0)
            return Status::error(ErrorCode::invalid_model, what, ": external data location '",
                                 location, "': directory component '", parts[i],
                                 "' is missing, not a directory, or a symlink (",
                                 std::strerror(errno), ")");
        dir = std::move(next);
    }
    Fd file(::openat(dir.fd, parts.back().c_str(),
                     O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (file.fd < 0)
        return Status::error(ErrorCode::invalid_model, what, ": cannot open external data file '",
                             location, "' (missing or a symlink): ", std::strerror(errno));
    struct stat st {};
    if (::fstat(file.fd, &st) != 0)
        return Status::error(ErrorCode::io_error, what, ": cannot stat '", location, "'");
    DSINFER_CHECK(S_ISREG(st.st_mode), ErrorCode::invalid_model, what, ": external data '",
                  location, "' is not a regular file");
    DSINFER_CHECK(st.st_nlink == 1, ErrorCode::invalid_model, what, ": external data '", location,
                  "' has ", st.st_nlink, " hard links (refused: it may alias a file outside the "
                  "model directory)");
    const auto file_size = static_cast<std::uint64_t>(st.st_size);
    if (!has_length) length = bytes;
    DSINFER_CHECK(length == bytes, ErrorCode::invalid_model, what, ": external data length ",
                  length, " does not match ", bytes, " bytes for shape ", shape.to_string(), " ",
                  dtype_name(dtype));
    DSINFER_CHECK(offset <= file_size && length <= file_size - offset, ErrorCode::invalid_model,
                  what, ": external data [", offset, ", +", length, ") exceeds file '", location,
                  "' of ", file_size, " bytes");
    DSINFER_CHECK(length <= limits_.max_external_bytes - std::min(limits_.max_external_bytes,
                                                                  external_bytes_),
                  ErrorCode::resource_exhausted, what, ": external data exceeds the limit of ",
                  limits_.max_external_bytes, " bytes");
    external_bytes_ += length;
    if (length == 0) return Tensor::allocate(dtype, shape);
    // Use the mapping in place (ModelLimits::map_weights) when the data is aligned to its
    // elements; else copy it out.
    DSINFER_ASSIGN_OR_RETURN(auto mapping, map_fd(file.fd, offset, length, "'" + location + "'"));
    const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    auto* ptr = static_cast<char*>(mapping->base) + (offset % page);
    if (limits_.map_weights && mapping->writable && usable_in_place(ptr, dtype)) {
        return Tensor::wrap(ptr, dtype, shape, Device{}, std::shared_ptr<void>(mapping, ptr));
    }
    DSINFER_ASSIGN_OR_RETURN(Tensor copy, Tensor::allocate(dtype, shape));
    std::memcpy(copy.raw_data(), ptr, bytes);
    return copy;
}

template <class Dst, class Src>
void copy_typed(Tensor& t, const Src& field) {
    auto* d = static_cast<Dst*>(t.raw_data());
    for (int i = 0; i < field.size(); ++i) d[i] = static_cast<Dst>(field.Get(i));
}

/// copy_typed for a narrower integer type: a value outside Dst's range is invalid_model.
template <class Dst, class Src>
Status copy_ranged(Tensor& t, const Src& field, const std::string& what, const char* name) {
    auto* d = static_cast<Dst*>(t.raw_data());
    for (int i = 0; i < field.size(); ++i) {
        const auto v = field.Get(i);
        DSINFER_CHECK(std::in_range<Dst>(v), ErrorCode::invalid_model, what, ": ", name, "[", i,
                      "] = ", v, " is outside the range of ", dtype_name(t.dtype()));
        d[i] = static_cast<Dst>(v);
    }
    return Status::ok();
}

/// A bool tensor's bytes must be 0 or 1: any other byte is not a bool value (reading it as
/// one is undefined behaviour in every kernel).
Status check_bool_bytes(const Tensor& t, const std::string& what) {
    if (t.dtype() != DType::boolean) return Status::ok();
    const auto* b = static_cast<const std::uint8_t*>(t.raw_data());
    for (std::int64_t i = 0; i < t.num_elements(); ++i)
        DSINFER_CHECK(b[i] <= 1, ErrorCode::invalid_model, what, ": bool element ", i,
                      " is stored as byte ", static_cast<int>(b[i]), " (must be 0 or 1)");
    return Status::ok();
}

StatusOr<Tensor> Converter::convert_tensor(const onnx::TensorProto& t, const std::string& what) {
    DSINFER_CHECK(!t.has_segment(), ErrorCode::unsupported, what, ": segmented tensors are not supported");
    const int onnx_type = t.data_type();
    auto dtype_opt = from_onnx_dtype(onnx_type);
    if (!dtype_opt) {
        if (onnx_type == 0 || onnx_type > 26 || onnx_type < 0)
            return Status::error(ErrorCode::invalid_model, what, ": invalid element type ",
                                 onnx_type);
        return Status::error(ErrorCode::unsupported, what, ": element type ",
                             onnx_dtype_name(onnx_type), " is not supported");
    }
    const DType dtype = *dtype_opt;
    DSINFER_CHECK(t.dims_size() <= limits_.max_rank, ErrorCode::invalid_model, what, ": rank ",
                  t.dims_size(), " exceeds the maximum rank ", limits_.max_rank);
    std::vector<std::int64_t> dims(t.dims().begin(), t.dims().end());
    auto shape_or = Shape::make(dims);
    if (!shape_or.is_ok())
        return Status(ErrorCode::invalid_model, what + ": " + shape_or.status().message());
    const Shape shape = shape_or.value();
    const auto numel = static_cast<std::uint64_t>(shape.num_elements());
    const std::size_t esize = dtype == DType::string ? 1 : dtype_size(dtype);
    DSINFER_CHECK(numel <= limits_.max_tensor_bytes / esize, ErrorCode::invalid_model, what,
                  ": shape ", shape.to_string(), " of ", dtype_name(dtype), " exceeds the tensor "
                  "size limit of ", limits_.max_tensor_bytes, " bytes");
    const std::size_t bytes = static_cast<std::size_t>(numel) * dtype_size(dtype);

    const bool external = t.has_data_location() &&
                          t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL;
    const int typed_count = t.float_data_size() + t.int32_data_size() + t.string_data_size() +
                            t.int64_data_size() + t.double_data_size() + t.uint64_data_size();
    if (external) {
        DSINFER_CHECK(!t.has_raw_data() && streamed_ == nullptr && typed_count == 0,
                      ErrorCode::invalid_model, what, ": external tensor also carries inline data");
        DSINFER_ASSIGN_OR_RETURN(Tensor ext, read_external(t, dtype, shape, bytes, what));
        DSINFER_RETURN_IF_ERROR(check_bool_bytes(ext, what));
        return ext;
    }
    if (streamed_ != nullptr) {  // raw_data from the streaming reader: an aligned buffer or
                                 // a range of the file's mapping
        DSINFER_CHECK(typed_count == 0, ErrorCode::invalid_model, what,
                      ": data in both raw_data and a typed field");
        DSINFER_CHECK(dtype != DType::string, ErrorCode::invalid_model, what,
                      ": string tensors cannot use raw_data");
        DSINFER_CHECK(streamed_->num_bytes() == bytes, ErrorCode::invalid_model, what,
                      ": raw_data has ", streamed_->num_bytes(), " bytes, expected ", bytes,
                      " for shape ", shape.to_string(), " of ", dtype_name(dtype));
        if (!usable_in_place(streamed_->raw_data(), dtype)) {  // a mapped range, misaligned
            DSINFER_ASSIGN_OR_RETURN(Tensor out, Tensor::allocate(dtype, shape));
            if (bytes > 0) std::memcpy(out.raw_data(), streamed_->raw_data(), bytes);
            DSINFER_RETURN_IF_ERROR(check_bool_bytes(out, what));
            return out;
        }
        Tensor out = Tensor::wrap(streamed_->raw_data(), dtype, shape, Device{},
                                  std::make_shared<Tensor>(*streamed_));
        DSINFER_RETURN_IF_ERROR(check_bool_bytes(out, what));
        return out;
    }
    if (t.has_raw_data()) {
        DSINFER_CHECK(typed_count == 0, ErrorCode::invalid_model, what,
                      ": data in both raw_data and a typed field");
        DSINFER_CHECK(dtype != DType::string, ErrorCode::invalid_model, what,
                      ": string tensors cannot use raw_data");
        DSINFER_CHECK(t.raw_data().size() == bytes, ErrorCode::invalid_model, what,
                      ": raw_data has ", t.raw_data().size(), " bytes, expected ", bytes,
                      " for shape ", shape.to_string(), " of ", dtype_name(dtype));
        DSINFER_ASSIGN_OR_RETURN(Tensor out, Tensor::allocate(dtype, shape));
        if (bytes > 0) std::memcpy(out.raw_data(), t.raw_data().data(), bytes);
        DSINFER_RETURN_IF_ERROR(check_bool_bytes(out, what));
        // Safe: with release_raw_ the message is the converter's own (parse_model), mutable.
        if (release_raw_) std::string().swap(*const_cast<onnx::TensorProto&>(t).mutable_raw_data());
        return out;
    }
    // Before allocating: the typed fields must hold exactly one value per element (dims
    // claiming gigabytes with a few values are refused here, not after a huge allocation).
    DSINFER_CHECK(static_cast<std::uint64_t>(typed_count) == numel, ErrorCode::invalid_model, what,
                  ": ", typed_count, " typed data values for shape ", shape.to_string(), " of ",
                  numel, " elements");
    auto expect = [&](int count, const char* field) -> Status {
        DSINFER_CHECK(static_cast<std::uint64_t>(count) == numel && typed_count == count,
                      ErrorCode::invalid_model, what, ": ", field, " has ", count,
                      " values (other typed fields ", typed_count - count, "), expected ", numel,
                      " for shape ", shape.to_string());
        return Status::ok();
    };
    DSINFER_ASSIGN_OR_RETURN(Tensor out, Tensor::allocate(dtype, shape));
    switch (dtype) {
        case DType::f32:
            DSINFER_RETURN_IF_ERROR(expect(t.float_data_size(), "float_data"));
            copy_typed<float>(out, t.float_data());
            break;
        case DType::f64:
            DSINFER_RETURN_IF_ERROR(expect(t.double_data_size(), "double_data"));
            copy_typed<double>(out, t.double_data());
            break;
        case DType::i64:
            DSINFER_RETURN_IF_ERROR(expect(t.int64_data_size(), "int64_data"));
            copy_typed<std::int64_t>(out, t.int64_data());
            break;
        case DType::u32:
            DSINFER_RETURN_IF_ERROR(expect(t.uint64_data_size(), "uint64_data"));
            DSINFER_RETURN_IF_ERROR(copy_ranged<std::uint32_t>(out, t.uint64_data(), what, "uint64_data"));
            break;
        case DType::u64:
            DSINFER_RETURN_IF_ERROR(expect(t.uint64_data_size(), "uint64_data"));
            copy_typed<std::uint64_t>(out, t.uint64_data());
            break;
        case DType::i32:
            DSINFER_RETURN_IF_ERROR(expect(t.int32_data_size(), "int32_data"));
            copy_typed<std::int32_t>(out, t.int32_data());
            break;
        case DType::i16:
            DSINFER_RETURN_IF_ERROR(expect(t.int32_data_size(), "int32_data"));
            DSINFER_RETURN_IF_ERROR(copy_ranged<std::int16_t>(out, t.int32_data(), what, "int32_data"));
            break;
        case DType::u16:
            DSINFER_RETURN_IF_ERROR(expect(t.int32_data_size(), "int32_data"));
            DSINFER_RETURN_IF_ERROR(copy_ranged<std::uint16_t>(out, t.int32_data(), what, "int32_data"));
            break;
        case DType::f16:
        case DType::bf16:  // bit patterns in int32_data
            DSINFER_RETURN_IF_ERROR(expect(t.int32_data_size(), "int32_data"));
            copy_typed<std::uint16_t>(out, t.int32_data());
            break;
        case DType::i8:
            DSINFER_RETURN_IF_ERROR(expect(t.int32_data_size(), "int32_data"));
            DSINFER_RETURN_IF_ERROR(copy_ranged<std::int8_t>(out, t.int32_data(), what, "int32_data"));
            break;
        case DType::u8:
            DSINFER_RETURN_IF_ERROR(expect(t.int32_data_size(), "int32_data"));
            DSINFER_RETURN_IF_ERROR(copy_ranged<std::uint8_t>(out, t.int32_data(), what, "int32_data"));
            break;
        case DType::boolean: {
            DSINFER_RETURN_IF_ERROR(expect(t.int32_data_size(), "int32_data"));
            auto* d = static_cast<bool*>(out.raw_data());
            for (int i = 0; i < t.int32_data_size(); ++i) d[i] = t.int32_data(i) != 0;
            break;
        }
        case DType::string: {
            DSINFER_RETURN_IF_ERROR(expect(t.string_data_size(), "string_data"));
            auto* d = static_cast<std::string*>(out.raw_data());
            for (int i = 0; i < t.string_data_size(); ++i) d[i] = t.string_data(i);
            break;
        }
    }
    return out;
}

Status Converter::convert_type(const onnx::TypeProto& type, Value& v, const std::string& what) {
    switch (type.value_case()) {
        case onnx::TypeProto::kTensorType: {
            const auto& tt = type.tensor_type();
            v.kind = ValueKind::tensor;
            if (tt.has_elem_type() && tt.elem_type() != 0) {
                auto d = from_onnx_dtype(tt.elem_type());
                if (!d) {
                    if (tt.elem_type() < 0 || tt.elem_type() > 26)
                        return Status::error(ErrorCode::invalid_model, what,
                                             ": invalid element type ", tt.elem_type());
                    return Status::error(ErrorCode::unsupported, what, ": element type ",
                                         onnx_dtype_name(tt.elem_type()), " is not supported");
                }
                v.dtype = *d;
            }
            if (tt.has_shape()) {
                DSINFER_CHECK(tt.shape().dim_size() <= limits_.max_rank, ErrorCode::invalid_model,
                              what, ": declared rank ", tt.shape().dim_size(),
                              " exceeds the maximum rank ", limits_.max_rank);
                v.shape.known = true;
                v.shape.dims.clear();
                for (const auto& d : tt.shape().dim()) {
                    if (d.has_dim_value()) {
                        DSINFER_CHECK(d.dim_value() >= 0, ErrorCode::invalid_model, what,
                                      ": negative declared dimension ", d.dim_value());
                        v.shape.dims.push_back(Dim::fixed(d.dim_value()));
                    } else {
                        v.shape.dims.push_back(Dim::named(d.dim_param()));
                    }
                }
            }
            return Status::ok();
        }
        case onnx::TypeProto::kSequenceType: v.kind = ValueKind::sequence; return Status::ok();
        case onnx::TypeProto::kOptionalType: v.kind = ValueKind::optional; return Status::ok();
        case onnx::TypeProto::kMapType: v.kind = ValueKind::map; return Status::ok();
        case onnx::TypeProto::kSparseTensorType: v.kind = ValueKind::other; return Status::ok();
        default: return Status::ok();  // no type given: inferred later
    }
}

StatusOr<ValueId> Converter::resolve(const std::string& name, std::vector<Scope*>& scopes,
                                     const std::string& where) {
    Scope& cur = *scopes.back();
    if (auto it = cur.names.find(name); it != cur.names.end()) return it->second;
    for (std::size_t i = scopes.size() - 1; i-- > 0;) {
        if (scopes[i]->names.count(name) != 0) {
            // A capture: the subgraph reads this name from an enclosing graph at run time.
            Value v;
            v.name = name;
            v.is_capture = true;
            const Value& outer = scopes[i]->graph->value(scopes[i]->names.at(name));
            v.kind = outer.kind;
            v.dtype = outer.dtype;
            v.shape = outer.shape;
            cur.graph->values.push_back(std::move(v));
            const auto id = static_cast<ValueId>(cur.graph->values.size() - 1);
            cur.names.emplace(name, id);
            return id;
        }
    }
    return Status::error(ErrorCode::invalid_model, where, ": input '", name,
                         "' is not defined (no graph input, initializer, node output or "
                         "outer-scope value has that name)");
}

Status Converter::convert_attribute(const onnx::AttributeProto& a, Attribute& out,
                                    std::vector<Scope*>& scopes, int depth,
                                    const std::string& where) {
    const std::string what = where + " attribute '" + a.name() + "'";
    DSINFER_CHECK(!a.has_ref_attr_name() || a.ref_attr_name().empty(), ErrorCode::unsupported,
                  what, ": attribute references (function bodies) are not supported");
    using AP = onnx::AttributeProto;
    auto type = a.has_type() ? a.type() : AP::UNDEFINED;
    if (type == AP::UNDEFINED) {
        // Old models omit the type: infer it from the single populated field.
        if (a.has_f()) type = AP::FLOAT;
        else if (a.has_i()) type = AP::INT;
        else if (a.has_s()) type = AP::STRING;
        else if (a.has_t()) type = AP::TENSOR;
        else if (a.has_g()) type = AP::GRAPH;
        else if (a.floats_size()) type = AP::FLOATS;
        else if (a.ints_size()) type = AP::INTS;
        else if (a.strings_size()) type = AP::STRINGS;
        else if (a.tensors_size()) type = AP::TENSORS;
        else if (a.graphs_size()) type = AP::GRAPHS;
        else return Status::error(ErrorCode::invalid_model, what, ": no type and no value");
    }
    switch (type) {
        case AP::FLOAT: out.kind = AttrKind::f; out.f = a.f(); break;
        case AP::INT: out.kind = AttrKind::i; out.i = a.i(); break;
        case AP::STRING: out.kind = AttrKind::s; out.s = a.s(); break;
        case AP::FLOATS:
            out.kind = AttrKind::floats;
            out.floats.assign(a.floats().begin(), a.floats().end());
            break;
        case AP::INTS:
            out.kind = AttrKind::ints;
            out.ints.assign(a.ints().begin(), a.ints().end());
            break;
        case AP::STRINGS:
            out.kind = AttrKind::strings;
            out.strings.assign(a.strings().begin(), a.strings().end());
            break;
        case AP::TENSOR: {
            out.kind = AttrKind::t;
            DSINFER_ASSIGN_OR_RETURN(out.t, convert_tensor(a.t(), what));
            break;
        }
        case AP::TENSORS:
            out.kind = AttrKind::tensors;
            for (const auto& t : a.tensors()) {
                DSINFER_ASSIGN_OR_RETURN(Tensor tt, convert_tensor(t, what));
                out.tensors.push_back(std::move(tt));
            }
            break;
        case AP::GRAPH:
        case AP::GRAPHS: {
            DSINFER_CHECK(depth + 1 <= limits_.max_subgraph_depth, ErrorCode::invalid_model, what,
                          ": subgraph nesting exceeds the limit of ", limits_.max_subgraph_depth);
            std::vector<const onnx::GraphProto*> gs;
            if (type == AP::GRAPH) gs.push_back(&a.g());
            else for (const auto& g : a.graphs()) gs.push_back(&g);
            out.kind = type == AP::GRAPH ? AttrKind::g : AttrKind::graphs;
            for (const auto* gp : gs) {
                auto sub = std::make_shared<Graph>();
                sub->opset_imports = opsets_;
                DSINFER_RETURN_IF_ERROR(convert_graph(*gp, *sub, scopes, depth + 1));
                if (type == AP::GRAPH) out.g = sub;
                else out.graphs.push_back(sub);
            }
            break;
        }
        case AP::SPARSE_TENSOR: out.kind = AttrKind::sparse_tensor; break;
        case AP::SPARSE_TENSORS: out.kind = AttrKind::sparse_tensors; break;
        case AP::TYPE_PROTO: out.kind = AttrKind::type_proto; break;
        case AP::TYPE_PROTOS: out.kind = AttrKind::type_protos; break;
        default:
            return Status::error(ErrorCode::invalid_model, what, ": unknown attribute type ",
                                 static_cast<int>(type));
    }
    return Status::ok();
}

Status Converter::convert_graph(const onnx::GraphProto& g, Graph& out,
                                std::vector<Scope*>& scopes, int depth) {
    Scope scope;
    scope.graph = &out;
    scopes.push_back(&scope);
    struct Pop {
        std::vector<Scope*>& s;
        ~Pop() { s.pop_back(); }
    } pop{scopes};
    out.name = g.name();
    const std::string gname = depth == 0 ? "graph" : "subgraph '" + g.name() + "'";
    DSINFER_CHECK(g.sparse_initializer_size() == 0, ErrorCode::unsupported, gname,
                  ": sparse initializers are not supported");

    node_count_ += g.node_size();
    DSINFER_CHECK(node_count_ <= limits_.max_nodes, ErrorCode::resource_exhausted,
                  "model has more than ", limits_.max_nodes, " nodes (limit)");

    auto define = [&](const std::string& name, const std::string& what) -> StatusOr<ValueId> {
        DSINFER_RETURN_IF_ERROR(check_name(name, what));
        DSINFER_CHECK(!name.empty(), ErrorCode::invalid_model, what, " has an empty name");
        DSINFER_CHECK(scope.names.count(name) == 0, ErrorCode::invalid_model, what, " '", name,
                      "' is defined more than once in ", gname);
        const auto id = out.add_value(name);
        scope.names.emplace(name, id);
        return id;
    };

    for (int i = 0; i < g.initializer_size(); ++i) {
        const auto& t = g.initializer(i);
        DSINFER_ASSIGN_OR_RETURN(ValueId id, define(t.name(), "initializer"));
        streamed_ = depth == 0 && static_cast<std::size_t>(i) < streamed_raw_.size() &&
                            !streamed_raw_[static_cast<std::size_t>(i)].is_null()
                        ? &streamed_raw_[static_cast<std::size_t>(i)]
                        : nullptr;
        auto converted = convert_tensor(t, "initializer '" + t.name() + "'");
        streamed_ = nullptr;
        if (depth == 0 && static_cast<std::size_t>(i) < streamed_raw_.size())
            streamed_raw_[static_cast<std::size_t>(i)] = Tensor();
        DSINFER_ASSIGN_OR_RETURN(Tensor tensor, std::move(converted));
        Value& v = out.value(id);
        v.dtype = tensor.dtype();
        v.shape = SymbolicShape::from(tensor.shape());
        v.initializer = std::move(tensor);
    }
    for (const auto& in : g.input()) {
        const std::string what = "graph input '" + in.name() + "'";
        if (auto it = scope.names.find(in.name()); it != scope.names.end() &&
                                                   out.value(it->second).initializer) {
            // Old exporters list initializers among the inputs: they keep their value.
            continue;
        }
        DSINFER_ASSIGN_OR_RETURN(ValueId id, define(in.name(), "graph input"));
        DSINFER_RETURN_IF_ERROR(convert_type(in.type(), out.value(id), what));
        out.inputs.push_back(id);
    }
    // Define node outputs first so inputs may refer to later nodes (unsorted graphs).
    for (int ni = 0; ni < g.node_size(); ++ni) {
        for (const auto& o : g.node(ni).output()) {
            if (o.empty()) continue;
            DSINFER_RETURN_IF_ERROR(define(o, "output of node '" + g.node(ni).name() + "'").status());
        }
    }
    for (const auto& vi : g.value_info()) {
        auto it = scope.names.find(vi.name());
        if (it == scope.names.end()) continue;  // information about an unused name
        Value& v = out.value(it->second);
        if (v.initializer) continue;
        DSINFER_RETURN_IF_ERROR(convert_type(vi.type(), v, "value_info '" + vi.name() + "'"));
    }
    out.nodes.reserve(static_cast<std::size_t>(g.node_size()));
    for (int ni = 0; ni < g.node_size(); ++ni) {
        const auto& np = g.node(ni);
        Node n;
        n.name = np.name();
        n.op_type = np.op_type();
        n.domain = np.domain() == "ai.onnx" ? std::string() : np.domain();
        const std::string where = n.describe();
        DSINFER_CHECK(!n.op_type.empty(), ErrorCode::invalid_model, where, ": empty op_type");
        DSINFER_RETURN_IF_ERROR(check_name(n.name, "node"));
        // Kernels read their inputs by position: in the standard domains input 0 is required
        // (absent or omitted as "" is malformed) except for the ops whose first input is
        // optional (Loop's M, Scan-8's sequence_lens, Optional's and OptionalHasElement's
        // value) or that take none.
        if ((np.input_size() == 0 || np.input(0).empty()) &&
            (n.domain.empty() || n.domain == "ai.onnx.ml" || n.domain == "com.dsinfer" ||
             n.domain.rfind("ai.onnx.preview", 0) == 0)) {
            static constexpr std::string_view kOptionalFirstInput[] = {
                "Constant", "RandomNormal",       "RandomUniform", "SequenceEmpty",
                "Optional", "OptionalHasElement", "Loop",          "Scan"};
            bool allowed = false;
            for (std::string_view op : kOptionalFirstInput) allowed = allowed || n.op_type == op;
            DSINFER_CHECK(allowed, ErrorCode::invalid_model, where, ": input 0 is ",
                          np.input_size() == 0 ? "missing (the node has no inputs)" : "omitted",
                          "; ", n.op_type, " requires it");
        }
        for (const auto& in : np.input()) {
            if (in.empty()) {
                n.inputs.push_back(kNoValue);
                continue;
            }
            DSINFER_ASSIGN_OR_RETURN(ValueId id, resolve(in, scopes, where));
            n.inputs.push_back(id);
        }
        for (const auto& o : np.output())
            n.outputs.push_back(o.empty() ? kNoValue : scope.names.at(o));
        for (const auto& a : np.attribute()) {
            Attribute attr;
            DSINFER_RETURN_IF_ERROR(convert_attribute(a, attr, scopes, depth, where));
            for (const auto& [existing, unused] : n.attributes)
                DSINFER_CHECK(existing != a.name(), ErrorCode::invalid_model, where,
                              ": attribute '", a.name(), "' given twice");
            n.attributes.emplace_back(a.name(), std::move(attr));
        }
        out.nodes.push_back(std::move(n));
    }
    for (const auto& o : g.output()) {
        DSINFER_CHECK(!o.name().empty(), ErrorCode::invalid_model, gname,
                      ": graph output with an empty name");
        DSINFER_ASSIGN_OR_RETURN(ValueId id, resolve(o.name(), scopes, gname + " output"));
        Value& v = out.value(id);
        if (!v.initializer)
            DSINFER_RETURN_IF_ERROR(convert_type(o.type(), v, "graph output '" + o.name() + "'"));
        out.outputs.push_back(id);
    }
    return out.sort_topologically().with_context(depth == 0 ? "" : gname + ": ");
}

Status Converter::convert_model(const onnx::ModelProto& model, Graph& out) {
    DSINFER_CHECK(model.has_ir_version(), ErrorCode::invalid_model,
                  "not an ONNX model: ir_version is missing");
    DSINFER_CHECK(model.ir_version() >= 1, ErrorCode::invalid_model, "invalid ir_version ",
                  model.ir_version());
    DSINFER_CHECK(model.ir_version() <= kMaxKnownIrVersion, ErrorCode::unsupported,
                  "ONNX IR version ", model.ir_version(), " is newer than the newest supported (",
                  kMaxKnownIrVersion, ")");
    DSINFER_CHECK(model.has_graph(), ErrorCode::invalid_model, "not an ONNX model: no graph");
    DSINFER_CHECK(model.functions_size() == 0, ErrorCode::unsupported,
                  "model-local functions are not supported (", model.functions_size(),
                  " defined)");
    for (const auto& op : model.opset_import()) {
        std::string domain = op.domain() == "ai.onnx" ? std::string() : op.domain();
        DSINFER_CHECK(op.version() >= 1, ErrorCode::invalid_model, "opset import for domain '",
                      domain, "' has invalid version ", op.version());
        if (domain.empty())
            DSINFER_CHECK(op.version() <= kMaxKnownOnnxOpset, ErrorCode::unsupported,
                          "ai.onnx opset ", op.version(), " is newer than the newest supported (",
                          kMaxKnownOnnxOpset, ")");
        for (const auto& o : opsets_)
            DSINFER_CHECK(o.domain != domain, ErrorCode::invalid_model, "opset for domain '",
                          domain, "' imported twice");
        opsets_.push_back({domain, op.version()});
    }
    if (model.opset_import_size() == 0) {
        // IR version 1/2 models predate opset_import: they mean opset 1.
        DSINFER_CHECK(model.ir_version() < 3, ErrorCode::invalid_model,
                      "model imports no opset");
        opsets_.push_back({"", 1});
    }
    out.opset_imports = opsets_;
    out.model_info = {model.ir_version(), model.producer_name(), model.producer_version(),
                      model.domain(), model.model_version(), {}};
    for (const auto& kv : model.metadata_props())
        out.model_info.metadata.emplace_back(kv.key(), kv.value());
    std::vector<Scope*> scopes;
    return convert_graph(model.graph(), out, scopes, 0);
}

// ---- repeated-entry amplification ----------------------------------------------------------
// Each entry of a graph's repeated message fields (node, initializer, input, output, value_info,
// ...) becomes a parsed message of a few hundred bytes however small the entry is (2 bytes when
// empty), so each of these lists is bounded by ModelLimits::max_nodes *before* protobuf parses
// them (at the wire level: the streaming reader counts as it goes, the in-memory path pre-scans).

struct GraphEntryCounts {
    std::int64_t n[16] = {};
};

/// Counts graph field `tag`; returns the name of the list when it exceeds the limit.
const char* count_graph_entry(std::uint32_t tag, GraphEntryCounts& c, const ModelLimits& limits) {
    if ((tag & 7u) != 2u) return nullptr;
    const char* name = nullptr;
    switch (tag >> 3) {
        case 1: name = "nodes"; break;
        case 5: name = "initializers"; break;
        case 11: name = "graph inputs"; break;
        case 12: name = "graph outputs"; break;
        case 13: name = "value_info entries"; break;
        case 14: name = "quantization annotations"; break;
        case 15: name = "sparse initializers"; break;
        default: return nullptr;
    }
    return ++c.n[tag >> 3] > limits.max_nodes ? name : nullptr;
}

Status too_many_entries(const char* what, const ModelLimits& limits) {
    return Status::error(ErrorCode::resource_exhausted, "graph has more than ", limits.max_nodes,
                         " ", what, " (limit: ModelLimits::max_nodes per list)");
}

/// The in-memory path's pre-scan: counts the top-level graph's entries without parsing them.
/// Malformed input is left to the parse that follows.
Status check_graph_entries(const void* data, std::size_t size, const ModelLimits& limits) {
    using google::protobuf::internal::WireFormatLite;
    google::protobuf::io::ArrayInputStream raw(data, static_cast<int>(size));
    google::protobuf::io::CodedInputStream in(&raw);
    in.SetTotalBytesLimit(static_cast<int>(size));
    GraphEntryCounts counts;
    while (const std::uint32_t tag = in.ReadTag()) {
        if (tag != ((7u << 3) | 2u)) {
            if (!WireFormatLite::SkipField(&in, tag)) return Status::ok();
            continue;
        }
        std::uint32_t len = 0;
        if (!in.ReadVarint32(&len) || len > static_cast<std::uint32_t>(INT_MAX)) return Status::ok();
        const auto limit = in.PushLimit(static_cast<int>(len));
        while (const std::uint32_t t = in.ReadTag()) {
            if (const char* what = count_graph_entry(t, counts, limits))
                return too_many_entries(what, limits);
            if (!WireFormatLite::SkipField(&in, t)) return Status::ok();
        }
        if (!in.ConsumedEntireMessage()) return Status::ok();
        in.PopLimit(limit);
    }
    return Status::ok();
}

bool parse_bounded(google::protobuf::MessageLite& msg, const void* data, std::size_t size,
                   int depth_limit) {
    google::protobuf::io::ArrayInputStream raw(data, static_cast<int>(size));
    google::protobuf::io::CodedInputStream cis(&raw);
    cis.SetTotalBytesLimit(static_cast<int>(size));
    cis.SetRecursionLimit(depth_limit);
    return msg.ParseFromCodedStream(&cis) && cis.ConsumedEntireMessage();
}

struct MappedFile {
    Fd fd;
    std::shared_ptr<Mapping> map;
    std::size_t size = 0;
};

StatusOr<MappedFile> map_file(const std::filesystem::path& path, std::uint64_t max_bytes) {
    MappedFile f;
    f.fd = Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
    if (f.fd.fd < 0)
        return Status::error(ErrorCode::io_error, "cannot open '", path.string(),
                             "': ", std::strerror(errno));
    struct stat st {};
    if (::fstat(f.fd.fd, &st) != 0)
        return Status::error(ErrorCode::io_error, "cannot stat '", path.string(), "'");
    DSINFER_CHECK(S_ISREG(st.st_mode), ErrorCode::invalid_model, "'", path.string(),
                  "' is not a regular file");
    const auto size = static_cast<std::uint64_t>(st.st_size);
    DSINFER_CHECK(size <= max_bytes, ErrorCode::resource_exhausted, "'", path.string(), "' is ",
                  size, " bytes, over the limit of ", max_bytes, " bytes");
    DSINFER_CHECK(size <= static_cast<std::uint64_t>(INT_MAX), ErrorCode::invalid_model, "'",
                  path.string(), "' is ", size,
                  " bytes: a single protobuf message cannot exceed 2 GiB (use external data)");
    DSINFER_CHECK(size > 0, ErrorCode::invalid_model, "'", path.string(), "' is empty");
    DSINFER_ASSIGN_OR_RETURN(f.map, map_fd(f.fd.fd, 0, size, "'" + path.string() + "'"));
    f.size = static_cast<std::size_t>(size);
    return f;
}

}  // namespace

namespace {

/// Converts a parsed model (owned: its raw_data buffers are released as they are copied).
StatusOr<Graph> convert_parsed(onnx::ModelProto& model, const std::filesystem::path& base_dir,
                               const ModelLimits& limits) {
    Graph g;
    Converter conv(base_dir, limits);
    conv.release_raw_data();
    DSINFER_RETURN_IF_ERROR(conv.convert_model(model, g));
    return g;
}

Status parse_failed(const ModelLimits& limits) {
    return Status::error(ErrorCode::invalid_model,
                         "not a valid ONNX ModelProto (protobuf parse failed: truncated, "
                         "corrupt, or nested deeper than ", limits.max_protobuf_depth, ")");
}

}  // namespace

StatusOr<Graph> parse_onnx_model(const void* data, std::size_t size,
                                 const std::filesystem::path& base_dir,
                                 const ModelLimits& limits) {
    DSINFER_CHECK(size > 0, ErrorCode::invalid_model, "model is empty (0 bytes)");
    DSINFER_CHECK(size <= limits.max_model_bytes, ErrorCode::resource_exhausted, "model is ",
                  size, " bytes, over the limit of ", limits.max_model_bytes, " bytes");
    DSINFER_CHECK(size <= static_cast<std::size_t>(INT_MAX), ErrorCode::invalid_model,
                  "model is ", size, " bytes: a single protobuf message cannot exceed 2 GiB");
    try {
        DSINFER_RETURN_IF_ERROR(check_graph_entries(data, size, limits));
        // On an arena: protobuf leaks a half-built element when an allocation throws
        // mid-parse; the arena frees everything it handed out (fault-injection tests).
        google::protobuf::Arena arena;
        onnx::ModelProto& model = *google::protobuf::Arena::CreateMessage<onnx::ModelProto>(&arena);
        if (!parse_bounded(model, data, size, limits.max_protobuf_depth))
            return parse_failed(limits);
        return convert_parsed(model, base_dir, limits);
    } catch (const std::bad_alloc&) {
        return Status::error(ErrorCode::resource_exhausted, "out of memory while loading the model");
    }
}

namespace {

// ---- streaming reader -------------------------------------------------------------------
// Reads a ModelProto from a file so that the top-level graph's initializer raw_data (the
// weights) goes straight from the file into 64-byte-aligned tensors: the weights are held once
// during load, not twice (protobuf strings, then copies). Everything else is re-encoded field by
// field into small buffers and parsed by protobuf as usual; concatenating the payloads of a
// repeated embedded message is protobuf's own merge semantics, so the result is the message a
// plain parse gives, minus the streamed raw_data.

using google::protobuf::io::CodedInputStream;

void put_varint(std::string& out, std::uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

/// Copies one field (its tag already read) into `out`, re-encoded. False on malformed input or
/// groups (ONNX has none).
bool copy_field(CodedInputStream& in, std::uint32_t tag, std::string& out) {
    put_varint(out, tag);
    switch (tag & 7) {
        case 0: {
            std::uint64_t v = 0;
            if (!in.ReadVarint64(&v)) return false;
            put_varint(out, v);
            return true;
        }
        case 1: {
            std::uint64_t v = 0;
            if (!in.ReadLittleEndian64(&v)) return false;
            out.append(reinterpret_cast<const char*>(&v), 8);
            return true;
        }
        case 5: {
            std::uint32_t v = 0;
            if (!in.ReadLittleEndian32(&v)) return false;
            out.append(reinterpret_cast<const char*>(&v), 4);
            return true;
        }
        case 2: {
            std::uint32_t len = 0;
            if (!in.ReadVarint32(&len) || len > static_cast<std::uint32_t>(INT_MAX)) return false;
            std::string payload;
            if (!in.ReadString(&payload, static_cast<int>(len))) return false;
            put_varint(out, len);
            out += payload;
            return true;
        }
        default: return false;
    }
}

struct StreamState {
    std::string model_rest, graph_rest;
    std::vector<std::string> initializers;  // each TensorProto without raw_data
    std::vector<Tensor> raw;                // its raw_data (null if none)
    const ModelLimits* limits = nullptr;
    /// The whole file, mapped (ModelLimits::map_weights): raw_data of kMapMinBytes or more is
    /// skipped by the reader and used in place from here.
    std::shared_ptr<Mapping> map;
    bool too_big = false;
    bool has_graph = false;  // the file has a graph field (re-assembled only then)
    GraphEntryCounts counts;
    const char* too_many = nullptr;  // the graph list over ModelLimits::max_nodes
};

bool read_tensor(CodedInputStream& in, StreamState& s) {
    std::string rest;
    Tensor raw;
    while (const std::uint32_t tag = in.ReadTag()) {
        if (tag == ((9u << 3) | 2u)) {  // raw_data
            std::uint32_t len = 0;
            if (!in.ReadVarint32(&len)) return false;
            if (len > s.limits->max_tensor_bytes || len > static_cast<std::uint32_t>(INT_MAX)) {
                s.too_big = true;
                return false;
            }
            if (in.BytesUntilTotalBytesLimit() >= 0 &&
                static_cast<std::int64_t>(len) > in.BytesUntilTotalBytesLimit())
                return false;  // truncated: never allocate what the file cannot hold
            if (s.map != nullptr && len >= kMapMinBytes) {
                // CurrentPosition() is the file offset: the stream starts at offset 0.
                const auto offset = static_cast<std::uint64_t>(in.CurrentPosition());
                if (!in.Skip(static_cast<int>(len))) return false;
                raw = mapped_bytes(s.map, offset, len);
                continue;
            }
            auto t = Tensor::allocate(DType::u8, Shape{static_cast<std::int64_t>(len)});
            if (!t.is_ok()) throw std::bad_alloc();
            raw = std::move(t).value();
            if (len > 0 && !in.ReadRaw(raw.raw_data(), static_cast<int>(len))) return false;
            continue;
        }
        if (!copy_field(in, tag, rest)) return false;
    }
    s.initializers.push_back(std::move(rest));
    s.raw.push_back(std::move(raw));
    return true;
}

bool read_graph(CodedInputStream& in, StreamState& s) {
    while (const std::uint32_t tag = in.ReadTag()) {
        if ((s.too_many = count_graph_entry(tag, s.counts, *s.limits)) != nullptr) return false;
        if (tag == ((5u << 3) | 2u)) {  // initializer
            std::uint32_t len = 0;
            if (!in.ReadVarint32(&len)) return false;
            const auto limit = in.PushLimit(static_cast<int>(std::min<std::uint32_t>(len, INT_MAX)));
            if (!read_tensor(in, s) || !in.ConsumedEntireMessage()) return false;
            in.PopLimit(limit);
            continue;
        }
        if (!copy_field(in, tag, s.graph_rest)) return false;
    }
    return true;
}

bool read_model(CodedInputStream& in, StreamState& s) {
    // At the top level ReadTag() returns 0 both at the end of the file and on a malformed tag
    // (consuming it): the end is where the total-bytes limit (the file size) is reached, so it
    // is tested before each tag and a 0 tag is always malformed.
    while (in.BytesUntilTotalBytesLimit() > 0) {
        const std::uint32_t tag = in.ReadTag();
        if (tag == 0) return false;
        if (tag == ((7u << 3) | 2u)) {  // graph
            s.has_graph = true;
            std::uint32_t len = 0;
            if (!in.ReadVarint32(&len)) return false;
            const auto limit = in.PushLimit(static_cast<int>(std::min<std::uint32_t>(len, INT_MAX)));
            if (!read_graph(in, s) || !in.ConsumedEntireMessage()) return false;
            in.PopLimit(limit);
            continue;
        }
        if (!copy_field(in, tag, s.model_rest)) return false;
    }
    return true;
}

}  // namespace

StatusOr<Graph> read_onnx_model(const std::filesystem::path& path, const ModelLimits& limits) {
    // Streamed through read(), with the weights read straight into their final buffers (see
    // the streaming reader); with ModelLimits::map_weights, large raw_data is skipped and used
    // in place from a private mapping of the file instead (its pages become resident only as
    // they are used: an embedding table only by the rows a run gathers).
    DSINFER_ASSIGN_OR_RETURN(MappedFile f, map_file(path, limits.max_model_bytes));
    if (!limits.map_weights || !f.map->writable) f.map.reset();
    std::filesystem::path dir = path.parent_path();
    if (dir.empty()) dir = ".";
    try {
        StreamState s;
        s.limits = &limits;
        s.map = f.map;
        {
            if (::lseek(f.fd.fd, 0, SEEK_SET) != 0)
                return Status::error(ErrorCode::io_error, "cannot read '", path.string(), "'");
            google::protobuf::io::FileInputStream raw(f.fd.fd, 1 << 20);
            CodedInputStream cis(&raw);
            cis.SetTotalBytesLimit(static_cast<int>(f.size));
            const bool ok = read_model(cis, s);
            if (raw.GetErrno() != 0)
                return Status::error(ErrorCode::io_error, "cannot read '", path.string(),
                                     "': ", std::strerror(raw.GetErrno()));
            if (s.too_big)
                return Status::error(ErrorCode::invalid_model, "an initializer's raw_data exceeds "
                                     "the tensor size limit of ", limits.max_tensor_bytes, " bytes");
            if (s.too_many != nullptr) return too_many_entries(s.too_many, limits);
            if (!ok) return parse_failed(limits);
            // Tensors now point into the mapping: a file cut short since it was opened would
            // fault on their pages (SIGBUS) instead of failing here.
            struct stat st {};
            if (s.map != nullptr &&
                (::fstat(f.fd.fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < f.size))
                return Status::error(ErrorCode::io_error, "'", path.string(),
                                     "' was truncated while it was being loaded");
        }
        // Re-assemble the small remainder and parse it with protobuf (bounded as before).
        std::string graph_bytes = std::move(s.graph_rest);
        for (const auto& t : s.initializers) {
            put_varint(graph_bytes, (5u << 3) | 2u);
            put_varint(graph_bytes, t.size());
            graph_bytes += t;
        }
        s.initializers.clear();
        std::string model_bytes = std::move(s.model_rest);
        if (s.has_graph) {
            put_varint(model_bytes, (7u << 3) | 2u);
            put_varint(model_bytes, graph_bytes.size());
            model_bytes += graph_bytes;
        }
        graph_bytes.clear();
        google::protobuf::Arena arena;  // as in parse_onnx_model: no leak if parsing throws
        onnx::ModelProto& model = *google::protobuf::Arena::CreateMessage<onnx::ModelProto>(&arena);
        if (model_bytes.size() > static_cast<std::size_t>(INT_MAX) ||
            !parse_bounded(model, model_bytes.data(), model_bytes.size(), limits.max_protobuf_depth))
            return parse_failed(limits);
        model_bytes = std::string();
        Graph g;
        Converter conv(dir, limits);
        conv.release_raw_data();
        conv.use_streamed_raw_data(std::move(s.raw));
        DSINFER_RETURN_IF_ERROR(conv.convert_model(model, g));
        return g;
    } catch (const std::bad_alloc&) {
        return Status::error(ErrorCode::resource_exhausted, "out of memory while loading the model");
    }
}

StatusOr<Tensor> read_tensor_proto(const std::filesystem::path& path, const ModelLimits& limits) {
    DSINFER_ASSIGN_OR_RETURN(MappedFile f, map_file(path, limits.max_model_bytes));
    try {
        google::protobuf::Arena arena;  // as in parse_onnx_model: no leak if parsing throws
        onnx::TensorProto& t = *google::protobuf::Arena::CreateMessage<onnx::TensorProto>(&arena);
        if (!parse_bounded(t, f.map->base, f.size, limits.max_protobuf_depth))
            return Status::error(ErrorCode::invalid_argument, "'", path.string(),
                                 "' is not a valid TensorProto");
        Converter conv({}, limits);
        return conv.convert_tensor(t, "tensor '" + t.name() + "'");
    } catch (const std::bad_alloc&) {
        return Status::error(ErrorCode::resource_exhausted, "out of memory reading a tensor");
    }
}

}  // namespace dsinfer::detail

namespace dsinfer {

Graph load_onnx(const std::filesystem::path& model, const ModelLimits& limits) {
    return detail::read_onnx_model(model, limits).value_or_throw();
}

Graph load_onnx_from_bytes(const void* data, std::size_t size, const std::filesystem::path& base_dir,
                           const ModelLimits& limits) {
    return detail::parse_onnx_model(data, size, base_dir, limits).value_or_throw();
}

Tensor load_tensor_proto(const std::filesystem::path& file, const ModelLimits& limits) {
    return detail::read_tensor_proto(file, limits).value_or_throw();
}

}  // namespace dsinfer
