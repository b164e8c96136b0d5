// Fuzz target: the external-data path resolver of the ONNX loader.
//
// On the first call a synthetic model directory is made under a temporary folder:
//   model/data.bin        regular file (256 bytes)      model/link.bin  -> data.bin (symlink)
//   model/sub/inner.bin   regular file in a subfolder   model/linkdir   -> sub (dir symlink)
//   model/hard.bin, model/hard2.bin   one file, two hard links (st_nlink 2)
//   model/fifo            FIFO (nobody writes it: a blocking open or read would hang)
//   model/zero            -> /dev/zero (symlink)        model/dir/      empty directory
//   outside.bin           regular file next to model/ (what "../outside.bin" would reach)
// The input bytes choose the location string (raw bytes, or names from the list above,
// traversals, absolute, drive and UNC paths, empty), offset, length, dims and dtype of one
// external initializer; the model is built with the onnx protobuf classes and parsed with
// base_dir = model/.
//
// Invariants: no hang (the FIFO), no crash, no `internal` error; when the load succeeds, the
// location names a regular, non-symlink, single-link file inside model/ (checked component by
// component with lstat) and the tensor's bytes equal that file's bytes at [offset, offset+length).
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "onnx/onnx_loader.hpp"

namespace {

using namespace dsinfer;
namespace fs = std::filesystem;

constexpr std::size_t kDataBytes = 256;
constexpr std::size_t kInnerBytes = 128;

struct Sandbox {
    fs::path root;   // temporary folder
    fs::path model;  // root/model: the base_dir
};

void write_file(const fs::path& p, std::size_t n, unsigned mul, unsigned add) {
    std::ofstream f(p, std::ios::binary);
    for (std::size_t i = 0; i < n; ++i) f.put(static_cast<char>((i * mul + add) & 0xff));
    if (!f) fuzz::fail("cannot write " + p.string());
}

const Sandbox& sandbox() {
    static const Sandbox box = [] {
        const char* tmp = std::getenv("TMPDIR");
        std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/dsinfer-fuzz-ext-XXXXXX";
        std::vector<char> buf(templ.begin(), templ.end());
        buf.push_back('\0');
        if (::mkdtemp(buf.data()) == nullptr) fuzz::fail("mkdtemp failed");
        Sandbox b{fs::path(buf.data()), fs::path(buf.data()) / "model"};
        std::error_code ec;
        fs::create_directories(b.model / "sub", ec);
        fs::create_directories(b.model / "dir", ec);
        write_file(b.model / "data.bin", kDataBytes, 7, 3);
        write_file(b.model / "sub" / "inner.bin", kInnerBytes, 13, 5);
        write_file(b.model / "hard.bin", kDataBytes, 5, 1);
        write_file(b.root / "outside.bin", kDataBytes, 11, 9);
        bool ok = ::symlink("data.bin", (b.model / "link.bin").c_str()) == 0 &&
                  ::symlink("sub", (b.model / "linkdir").c_str()) == 0 &&
                  ::symlink("/dev/zero", (b.model / "zero").c_str()) == 0 &&
                  ::link((b.model / "hard.bin").c_str(), (b.model / "hard2.bin").c_str()) == 0 &&
                  ::mkfifo((b.model / "fifo").c_str(), 0600) == 0;
        if (!ok) fuzz::fail("cannot create the external-data sandbox in " + b.root.string());
        std::atexit([] {
            std::error_code e;
            fs::remove_all(sandbox().root, e);
        });
        return b;
    }();
    return box;
}

std::string choose_location(fuzz::ByteReader& in, const Sandbox& box) {
    static const std::array<const char*, 34> names = {
        "data.bin", "./data.bin", "sub/inner.bin", "sub//inner.bin", "./sub/./inner.bin",
        "link.bin", "linkdir/inner.bin", "hard.bin", "hard2.bin", "fifo", "zero", "dir", "sub",
        "dir/", "data.bin/", "../outside.bin", "sub/../data.bin", "sub/../../outside.bin",
        "a/../../x", "../x", "/etc/passwd", "C:\\x", "C:x", "\\\\server\\share", "", ".", "/",
        "missing.bin", "sub/missing.bin", "*/_ORT_MEM_ADDR_/*", "linkdir", "dir/../data.bin",
        "data.bin\\", "..",
    };
    switch (in.pick(8)) {
        case 0: return in.bytes(48);  // raw bytes
        case 1: return (box.model / "data.bin").string();  // absolute path inside model/
        case 2: return (box.root / "outside.bin").string();
        case 3: {  // two names joined
            std::string a = names[in.pick(names.size())];
            std::string b = names[in.pick(names.size())];
            return a + "/" + b;
        }
        case 4: {  // a name with an embedded NUL / suffix
            std::string a = names[in.pick(names.size())];
            a.push_back(in.flag() ? '\0' : static_cast<char>(in.u8()));
            return a + (in.flag() ? "data.bin" : "");
        }
        default: return names[in.pick(names.size())];
    }
}

/// The value of an offset/length key: absent (nullopt-like empty flag), decimal, or garbage.
bool choose_number(fuzz::ByteReader& in, std::string& out, std::uint64_t exact) {
    switch (in.pick(12)) {
        case 0: return false;  // key absent
        case 1: out = "0"; return true;
        case 2: out = std::to_string(exact); return true;
        case 3: out = std::to_string(in.u8()); return true;
        case 4: out = std::to_string(in.u16() % 512); return true;
        case 5: out = "18446744073709551615"; return true;
        case 6: out = "18446744073709551616"; return true;
        case 7: out = std::to_string(std::uint64_t{1} << (in.u8() % 64)); return true;
        case 8: out = "-1"; return true;
        case 9: out = in.bytes(24); return true;
        case 10: out = std::to_string(exact) + "0"; return true;
        default: out = std::to_string(exact + (in.u8() % 16)); return true;
    }
}

/// lstat walk of `location` from model/: a plain relative path of existing, non-symlink
/// directories ending in a regular, single-link file. Returns the file path or empty.
fs::path resolve_strictly(const Sandbox& box, const std::string& location) {
    if (location.empty() || location.front() == '/' ||
        location.find_first_of(std::string("\\:\0", 3)) != std::string::npos)
        return {};
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start <= location.size()) {
        std::size_t end = location.find('/', start);
        if (end == std::string::npos) end = location.size();
        std::string part = location.substr(start, end - start);
        if (part == "..") return {};
        if (!part.empty() && part != ".") parts.push_back(part);
        start = end + 1;
    }
    if (parts.empty()) return {};
    fs::path p = box.model;
    for (std::size_t i = 0; i < parts.size(); ++i) {
        p /= parts[i];
        struct stat st {};
        if (::lstat(p.c_str(), &st) != 0) return {};
        if (S_ISLNK(st.st_mode)) return {};
        if (i + 1 < parts.size() ? !S_ISDIR(st.st_mode)
                                 : (!S_ISREG(st.st_mode) || st.st_nlink != 1))
            return {};
    }
    return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const Sandbox& box = sandbox();
    fuzz::ByteReader in(data, size);

    static const std::array<int, 10> types = {1, 2, 3, 7, 10, 9, 11, 8, 0, 99};  // f32 u8 i8 i64 f16 bool f64 string; bad
    const int elem_type = types[in.pick(types.size())];
    std::vector<std::int64_t> dims;
    const std::uint32_t rank = in.pick(4);
    for (std::uint32_t i = 0; i < rank; ++i) {
        switch (in.pick(8)) {
            case 0: dims.push_back(0); break;
            case 1: dims.push_back(-1); break;
            case 2: dims.push_back(std::int64_t{1} << (in.u8() % 63)); break;
            default: dims.push_back(in.u8() % 17); break;
        }
    }
    // The element count the "exact length" choice uses (capped: only a guess for the harness).
    std::int64_t numel = 1;
    for (auto d : dims)
        if (d >= 0 && __builtin_mul_overflow(numel, d, &numel)) numel = std::int64_t{1} << 40;
    numel = std::min(numel, std::int64_t{1} << 40);
    const std::size_t esize = elem_type == 1 || elem_type == 11 ? (elem_type == 1 ? 4 : 8)
                              : elem_type == 7                ? 8
                              : elem_type == 10               ? 2
                                                              : 1;
    const auto exact = static_cast<std::uint64_t>(numel) * esize;

    const std::string location = choose_location(in, box);
    std::string offset, length;
    const bool has_offset = choose_number(in, offset, 0);
    const bool has_length = choose_number(in, length, exact);

    onnx::ModelProto m = fuzz::new_model(13, "external");
    auto& g = *m.mutable_graph();
    onnx::TensorProto& t = *g.add_initializer();
    t.set_name("w");
    t.set_data_type(elem_type);
    for (auto d : dims) t.add_dims(d);
    const std::uint32_t layout = in.pick(16);
    t.set_data_location(layout == 0 ? onnx::TensorProto_DataLocation_DEFAULT
                                    : onnx::TensorProto_DataLocation_EXTERNAL);
    auto add_kv = [&](const std::string& k, const std::string& v) {
        auto* kv = t.add_external_data();
        kv->set_key(k);
        kv->set_value(v);
    };
    if (layout != 1) add_kv("location", location);
    if (has_offset) add_kv("offset", offset);
    if (has_length) add_kv("length", length);
    if (layout == 2) add_kv("checksum", "0123");
    if (layout == 3) add_kv("mystery", "1");
    if (layout == 4) add_kv("location", choose_location(in, box));  // a second location
    if (layout == 5) t.set_raw_data(std::string(static_cast<std::size_t>(exact % 64), 'x'));
    if (layout == 6) t.add_float_data(1.0f);
    fuzz::add_node(g, "Identity", {"w"}, {"y"});
    *g.add_output() = fuzz::untyped_shape_info("y", elem_type);

    const std::string bytes = fuzz::serialize(m);
    ModelLimits limits;
    limits.max_tensor_bytes = 1u << 20;
    limits.max_external_bytes = 4u << 20;
    auto graph = detail::parse_onnx_model(bytes.data(), bytes.size(), box.model, limits);
    if (!graph.is_ok()) {
        fuzz::check_status(graph.status(), "parse_onnx_model (external data)");
        return 0;
    }

    // Loaded: find the initializer and check where its bytes came from.
    const Graph& gr = graph.value();
    const Tensor* w = nullptr;
    for (const auto& v : gr.values)
        if (v.name == "w" && v.initializer) w = &*v.initializer;
    if (w == nullptr) fuzz::fail("loaded, but initializer 'w' is missing");
    if (w->shape().to_vector() != dims || to_onnx_dtype(w->dtype()) != elem_type)
        fuzz::fail("initializer 'w' loaded as " + std::string(dtype_name(w->dtype())) + " " +
                   w->shape().to_string() + ", not as declared");
    if (t.data_location() != onnx::TensorProto_DataLocation_EXTERNAL) {
        // A DEFAULT-location tensor ignores external_data; it must not have read a file.
        return 0;
    }
    // The location the loader used is the last "location" entry (protobuf keeps order).
    std::string used;
    for (const auto& kv : t.external_data())
        if (kv.key() == "location") used = kv.value();
    const fs::path file = resolve_strictly(box, used);
    if (file.empty())
        fuzz::fail("external data location '" + used +
                   "' loaded although it is not a regular single-link non-symlink file inside "
                   "the model directory");
    std::uint64_t off = 0;
    for (const auto& kv : t.external_data())
        if (kv.key() == "offset") off = std::strtoull(kv.value().c_str(), nullptr, 10);
    const std::size_t nbytes = w->num_bytes();
    std::ifstream f(file, std::ios::binary);
    std::vector<char> expect(nbytes);
    f.seekg(static_cast<std::streamoff>(off));
    if (nbytes > 0 && !f.read(expect.data(), static_cast<std::streamsize>(nbytes)))
        fuzz::fail("loaded " + std::to_string(nbytes) + " bytes at offset " + std::to_string(off) +
                   " of '" + used + "', which the file does not hold");
    if (nbytes > 0 && std::memcmp(expect.data(), w->raw_data(), nbytes) != 0)
        fuzz::fail("tensor bytes differ from '" + used + "' at [" + std::to_string(off) + ", +" +
                   std::to_string(nbytes) + ")");
    return 0;
}
