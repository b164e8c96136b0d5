// Calibration data sources (dsinfer/quantize.hpp): calibration_batches, calibration_callback,
// calibration_folder (subfolders of input_<i>.pb / <input>.npy, or one file per batch) and
// calibration_csv (the digits CSV), with the malformed inputs of BAD_INPUTS.md (truncated,
// big-endian, Fortran-order, overflowing .npy files, stray files, wrong dtypes, ranks, dims)
// each giving a typed error that names the file or line.
#include <catch2/catch.hpp>
#include <onnx/onnx_pb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <dsinfer/engine.hpp>
#include <dsinfer/onnx.hpp>
#include <dsinfer/quantize.hpp>

using namespace dsinfer;
namespace fs = std::filesystem;
using std::int64_t;

namespace {

/// A fresh folder under the system temp dir, removed with everything in it.
struct TempDir {
    fs::path path;
    TempDir() {
        static std::atomic<int> counter{0};
        path = fs::temp_directory_path() /
               ("dsinfer_calib_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

void write_file(const fs::path& p, const std::string& bytes) {
    fs::create_directories(p.parent_path());
    std::ofstream f(p, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(f.good());
}

template <class T>
std::string raw_bytes(const std::vector<T>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

/// A .npy file: `header` is the dict text (padded here as numpy pads it), then `data`.
std::string npy_file(const std::string& header, const std::string& data, int major = 1) {
    const std::size_t pre = major == 1 ? 10 : 12;
    std::string h = header;
    while ((pre + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
    std::string out = "\x93NUMPY";
    out += static_cast<char>(major);
    out += '\0';
    const auto n = static_cast<std::uint32_t>(h.size());
    out += static_cast<char>(n & 0xff);
    out += static_cast<char>((n >> 8) & 0xff);
    if (major != 1) {
        out += static_cast<char>((n >> 16) & 0xff);
        out += static_cast<char>((n >> 24) & 0xff);
    }
    return out + h + data;
}

std::string npy_header(const std::string& descr, const std::string& shape,
                       const std::string& fortran = "False") {
    return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

template <class T>
std::string npy(const std::string& descr, const std::string& shape, const std::vector<T>& v) {
    return npy_file(npy_header(descr, shape), raw_bytes(v));
}

/// A serialized onnx.TensorProto (data_type: 1 float, 7 int64, 11 double, 6 int32).
template <class T>
std::string pb(int data_type, const std::vector<int64_t>& dims, const std::vector<T>& v,
               const std::string& name = "t") {
    onnx::TensorProto t;
    t.set_name(name);
    t.set_data_type(data_type);
    for (int64_t d : dims) t.add_dims(d);
    t.set_raw_data(raw_bytes(v));
    return t.SerializeAsString();
}

/// dims: >= 0 fixed, -1 the symbol "batch", -2 unnamed unknown.
SymbolicShape sym(const std::vector<int64_t>& dims) {
    SymbolicShape s;
    s.known = true;
    for (int64_t d : dims)
        s.dims.push_back(d >= 0 ? Dim::fixed(d) : (d == -1 ? Dim::named("batch") : Dim{}));
    return s;
}

/// A graph with the given inputs (and an initializer listed among them, which is not fed).
Graph graph_with(const std::vector<std::tuple<std::string, DType, std::vector<int64_t>>>& ins) {
    Graph g;
    for (const auto& [name, dtype, dims] : ins)
        g.inputs.push_back(g.add_value(name, dtype, sym(dims)));
    g.inputs.push_back(g.add_initializer("weight", Tensor::from_vector<float>(Shape{2}, {1, 2})));
    return g;
}

Graph one_input(std::vector<int64_t> dims = {-1, 3}, DType dtype = DType::f32) {
    return graph_with({{"x", dtype, std::move(dims)}});
}

std::vector<float> floats(const Tensor& t) {
    REQUIRE(t.dtype() == DType::f32);
    return {t.data<float>(), t.data<float>() + t.num_elements()};
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

/// The first batch's error from a folder whose structure is fine.
Status first_batch_error(const fs::path& dir, const Graph& g) {
    auto src = calibration_folder(dir, g);
    REQUIRE(src.is_ok());
    std::vector<NamedTensor> batch;
    auto r = (*src)->next(batch);
    REQUIRE_FALSE(r.is_ok());
    return r.status();
}

}  // namespace

TEST_CASE("calibration_batches: size, order, end", "[calibration_data]") {
    std::vector<std::vector<NamedTensor>> batches(2);
    batches[0].push_back({"x", Tensor::from_vector<float>(Shape{1, 2}, {1, 2})});
    batches[1].push_back({"x", Tensor::from_vector<float>(Shape{1, 2}, {3, 4})});
    auto src = calibration_batches(std::move(batches));
    REQUIRE(src->size() == 2);
    std::vector<NamedTensor> b;
    auto r = src->next(b);
    REQUIRE(r.is_ok());
    CHECK(*r);
    REQUIRE(b.size() == 1);
    CHECK(b[0].name == "x");
    CHECK(floats(b[0].tensor) == std::vector<float>{1, 2});
    r = src->next(b);
    REQUIRE((r.is_ok() && *r));
    CHECK(floats(b[0].tensor) == std::vector<float>{3, 4});
    for (int i = 0; i < 2; ++i) {  // stays at the end
        r = src->next(b);
        REQUIRE(r.is_ok());
        CHECK_FALSE(*r);
        CHECK(b.empty());
    }
    CHECK(calibration_batches({})->size() == 0);
}

TEST_CASE("calibration_callback: size, end, errors and exceptions", "[calibration_data]") {
    int calls = 0;
    auto src = calibration_callback(
        [&](std::vector<NamedTensor>& b) -> StatusOr<bool> {
            ++calls;
            if (calls > 2) return false;
            b = {{"x", Tensor::scalar<float>(static_cast<float>(calls))}};
            return true;
        },
        2);
    CHECK(src->size() == 2);
    std::vector<NamedTensor> b;
    for (int i = 1; i <= 2; ++i) {
        auto r = src->next(b);
        REQUIRE((r.is_ok() && *r));
        CHECK(b[0].tensor.data<float>()[0] == static_cast<float>(i));
    }
    auto end = src->next(b);
    REQUIRE(end.is_ok());
    CHECK_FALSE(*end);
    CHECK(calibration_callback([](std::vector<NamedTensor>&) -> StatusOr<bool> {
              return false;
          })->size() == 0);

    SECTION("a Status error passes through") {
        auto e = calibration_callback([](std::vector<NamedTensor>&) -> StatusOr<bool> {
            return Status(ErrorCode::io_error, "camera unplugged");
        });
        auto r = e->next(b);
        REQUIRE_FALSE(r.is_ok());
        CHECK(r.status().code() == ErrorCode::io_error);
        CHECK(r.status().message() == "camera unplugged");
    }
    SECTION("exceptions become Statuses") {
        auto e1 = calibration_callback([](std::vector<NamedTensor>&) -> StatusOr<bool> {
            throw std::runtime_error("decoder failed");
        });
        auto r1 = e1->next(b);
        REQUIRE_FALSE(r1.is_ok());
        CHECK(r1.status().code() == ErrorCode::invalid_argument);
        CHECK(contains(r1.status().message(), "decoder failed"));
        auto e2 = calibration_callback([](std::vector<NamedTensor>&) -> StatusOr<bool> {
            throw Error(ErrorCode::unsupported, "jpeg2000");
        });
        auto r2 = e2->next(b);
        REQUIRE_FALSE(r2.is_ok());
        CHECK(r2.status().code() == ErrorCode::unsupported);
        CHECK(contains(r2.status().message(), "jpeg2000"));
    }
    SECTION("an empty callback") {
        auto e = calibration_callback(nullptr, 3);
        CHECK(e->size() == 3);
        auto r = e->next(b);
        REQUIRE_FALSE(r.is_ok());
        CHECK(r.status().code() == ErrorCode::invalid_argument);
    }
}

TEST_CASE("calibration_folder: one subfolder per batch, by index and by name",
          "[calibration_data]") {
    TempDir dir;
    const Graph g = graph_with({{"x", DType::f32, {-1, 3}}, {"ids", DType::i64, {-1}}});
    // Natural order: set_0, set_2, set_10 (byte order would put set_10 before set_2).
    write_file(dir.path / "set_0" / "input_0.pb", pb<float>(1, {2, 3}, {1, 2, 3, 4, 5, 6}));
    write_file(dir.path / "set_0" / "ids.npy", npy<int64_t>("<i8", "(2,)", {7, 8}));
    // float64 data for the float32 input is converted; output_0.pb (ONNX test data) ignored.
    write_file(dir.path / "set_2" / "x.npy",
               npy<double>("<f8", "(1, 3)", {0.5, -1.5, -1e300 * 1e300}));
    write_file(dir.path / "set_2" / "input_1.pb", pb<int64_t>(7, {1}, {9}));
    write_file(dir.path / "set_2" / "output_0.pb", pb<float>(1, {1}, {0}));
    write_file(dir.path / "set_10" / "ids.pb", pb<int64_t>(7, {4}, {1, 2, 3, 4}));
    write_file(dir.path / "set_10" / "input_0.npy",
               npy<float>("<f4", "(4, 3)", std::vector<float>(12, 2.f)));
    write_file(dir.path / "set_10" / ".DS_Store", "junk");
    write_file(dir.path / "model.onnx", "not read");
    write_file(dir.path / ".hidden", "junk");

    auto src = calibration_folder(dir.path, g);
    REQUIRE(src.is_ok());
    CHECK((*src)->size() == 3);
    std::vector<NamedTensor> b;

    auto r = (*src)->next(b);
    REQUIRE(r.is_ok());
    REQUIRE(*r);
    REQUIRE(b.size() == 2);
    CHECK(b[0].name == "x");
    CHECK(b[1].name == "ids");
    CHECK(b[0].tensor.shape() == Shape{2, 3});
    CHECK(floats(b[0].tensor) == std::vector<float>{1, 2, 3, 4, 5, 6});
    REQUIRE(b[1].tensor.dtype() == DType::i64);
    CHECK(b[1].tensor.data<int64_t>()[1] == 8);

    r = (*src)->next(b);
    REQUIRE((r.is_ok() && *r));
    CHECK(b[0].tensor.shape() == Shape{1, 3});
    const auto x = floats(b[0].tensor);
    CHECK(x[0] == 0.5f);
    CHECK(x[1] == -1.5f);
    CHECK((std::isinf(x[2]) && x[2] < 0));  // -inf stays -inf (calibration counts it)
    CHECK(b[1].tensor.data<int64_t>()[0] == 9);

    r = (*src)->next(b);
    REQUIRE((r.is_ok() && *r));
    CHECK(b[0].tensor.shape() == Shape{4, 3});
    CHECK(b[1].tensor.shape() == Shape{4});

    r = (*src)->next(b);
    REQUIRE(r.is_ok());
    CHECK_FALSE(*r);
}

TEST_CASE("calibration_folder: one file per batch for a one-input model", "[calibration_data]") {
    TempDir dir;
    write_file(dir.path / "b.npy", npy<float>("<f4", "(1, 3)", {4, 5, 6}));
    write_file(dir.path / "a.pb", pb<float>(1, {2, 3}, {1, 1, 1, 2, 2, 2}));
    write_file(dir.path / "c.npy",
               npy_file(npy_header("<f4", "(1, 3)"), raw_bytes(std::vector<float>{7, 8, 9}), 2));
    write_file(dir.path / "d.npy",
               npy_file(npy_header("<f4", "(1L, 3L)"), raw_bytes(std::vector<float>{0, 0, 1}), 3));
    auto src = calibration_folder(dir.path, one_input());
    REQUIRE(src.is_ok());
    REQUIRE((*src)->size() == 4);
    std::vector<NamedTensor> b;
    const std::vector<std::vector<float>> want{{1, 1, 1, 2, 2, 2}, {4, 5, 6}, {7, 8, 9}, {0, 0, 1}};
    for (const auto& w : want) {
        auto r = (*src)->next(b);
        REQUIRE(r.is_ok());
        REQUIRE(*r);
        REQUIRE(b.size() == 1);
        CHECK(b[0].name == "x");
        CHECK(floats(b[0].tensor) == w);
    }
    auto r = (*src)->next(b);
    REQUIRE(r.is_ok());
    CHECK_FALSE(*r);

    SECTION("element types other than float") {
        TempDir d2;
        write_file(d2.path / "0.npy", npy<std::uint8_t>("|u1", "(2, 2)", {0, 1, 2, 255}));
        auto s = calibration_folder(d2.path, one_input({-1, 2}, DType::u8));
        REQUIRE(s.is_ok());
        auto rr = (*s)->next(b);
        REQUIRE((rr.is_ok() && *rr));
        REQUIRE(b[0].tensor.dtype() == DType::u8);
        CHECK(b[0].tensor.data<std::uint8_t>()[3] == 255);
        TempDir d3;
        write_file(d3.path / "0.npy", npy<std::uint8_t>("|b1", "(1, 2)", {1, 0}));
        s = calibration_folder(d3.path, one_input({-1, 2}, DType::boolean));
        REQUIRE(s.is_ok());
        rr = (*s)->next(b);
        REQUIRE((rr.is_ok() && *rr));
        CHECK(b[0].tensor.dtype() == DType::boolean);
    }
}

TEST_CASE("calibration_folder: structure errors name the folder or file", "[calibration_data]") {
    const Graph g1 = one_input();
    const Graph g2 = graph_with({{"x", DType::f32, {-1, 3}}, {"ids", DType::i64, {-1}}});
    const std::string good = npy<float>("<f4", "(1, 3)", {1, 2, 3});
    const std::string ids = npy<int64_t>("<i8", "(1,)", {1});
    const auto fails = [](const fs::path& dir, const Graph& g, ErrorCode code,
                          const std::string& part) {
        auto s = calibration_folder(dir, g);
        REQUIRE_FALSE(s.is_ok());
        INFO(s.status().to_string());
        CHECK(s.status().code() == code);
        CHECK(contains(s.status().message(), part));
    };

    SECTION("nonexistent folder") {
        TempDir d;
        fails(d.path / "nope", g1, ErrorCode::io_error, "nope");
    }
    SECTION("a file, not a folder") {
        TempDir d;
        write_file(d.path / "x.npy", good);
        fails(d.path / "x.npy", g1, ErrorCode::invalid_argument, "not a folder");
    }
    SECTION("empty folder (hidden files and a model only)") {
        TempDir d;
        write_file(d.path / ".keep", "");
        write_file(d.path / "model.onnx", "");
        fails(d.path, g1, ErrorCode::invalid_argument, "no batch");
    }
    SECTION("one file per batch for a two-input model") {
        TempDir d;
        write_file(d.path / "0.npy", good);
        fails(d.path, g2, ErrorCode::invalid_argument, "one input");
    }
    SECTION("an unknown extension among batch files") {
        TempDir d;
        write_file(d.path / "0.npy", good);
        write_file(d.path / "1.npz", good);
        fails(d.path, g1, ErrorCode::invalid_argument, "1.npz");
    }
    SECTION("an unknown extension in a batch folder") {
        TempDir d;
        write_file(d.path / "s0" / "x.npy", good);
        write_file(d.path / "s0" / "ids.npy", ids);
        write_file(d.path / "s1" / "x.npy", good);
        write_file(d.path / "s1" / "ids.nyp", ids);
        fails(d.path, g2, ErrorCode::invalid_argument, "ids.nyp");
    }
    SECTION("a missing input") {
        TempDir d;
        write_file(d.path / "s0" / "x.npy", good);
        write_file(d.path / "s0" / "ids.npy", ids);
        write_file(d.path / "s1" / "input_0.npy", good);
        fails(d.path, g2, ErrorCode::invalid_argument, "s1");
        fails(d.path, g2, ErrorCode::invalid_argument, "'ids'");
    }
    SECTION("an empty batch folder") {
        TempDir d;
        fs::create_directories(d.path / "s0");
        fails(d.path, g1, ErrorCode::invalid_argument, "no file for input 'x'");
    }
    SECTION("a file naming no input") {
        TempDir d;
        write_file(d.path / "s0" / "x.npy", good);
        write_file(d.path / "s0" / "ids.npy", ids);
        write_file(d.path / "s0" / "idz.npy", ids);
        fails(d.path, g2, ErrorCode::invalid_argument, "idz.npy");
        TempDir e;
        write_file(e.path / "s0" / "input_0.npy", good);
        write_file(e.path / "s0" / "input_1.npy", good);  // the one-input model has no input_1
        fails(e.path, g1, ErrorCode::invalid_argument, "input_1.npy");
    }
    SECTION("two files for one input") {
        TempDir d;
        write_file(d.path / "s0" / "x.npy", good);
        write_file(d.path / "s0" / "input_0.pb", pb<float>(1, {1, 3}, {1, 2, 3}));
        fails(d.path, g1, ErrorCode::invalid_argument, "both give input 'x'");
    }
    SECTION("batch files beside batch folders") {
        TempDir d;
        write_file(d.path / "s0" / "x.npy", good);
        write_file(d.path / "s1.npy", good);
        fails(d.path, g1, ErrorCode::invalid_argument, "s1.npy");
    }
    SECTION("a folder inside a batch folder") {
        TempDir d;
        write_file(d.path / "s0" / "x.npy", good);
        fs::create_directories(d.path / "s0" / "more");
        fails(d.path, g1, ErrorCode::invalid_argument, "more");
    }
    SECTION("a FIFO is refused, never read") {
        TempDir d;
        write_file(d.path / "0.npy", good);
        REQUIRE(::mkfifo((d.path / "1.npy").c_str(), 0600) == 0);
        fails(d.path, g1, ErrorCode::invalid_argument, "1.npy");
    }
    SECTION("a graph without inputs") {
        TempDir d;
        write_file(d.path / "0.npy", good);
        fails(d.path, Graph{}, ErrorCode::invalid_argument, "no inputs");
    }
}

TEST_CASE("calibration_folder: tensors that do not fit the graph", "[calibration_data]") {
    TempDir d;
    const auto check = [&](const std::string& file_bytes, const Graph& g, const std::string& part,
                           ErrorCode code = ErrorCode::invalid_argument) {
        const fs::path f = d.path / "case.npy";
        write_file(f, file_bytes);
        const Status s = first_batch_error(d.path, g);
        INFO(s.to_string());
        CHECK(s.code() == code);
        CHECK(contains(s.message(), "case.npy"));
        CHECK(contains(s.message(), part));
        fs::remove(f);
    };
    const Graph g = one_input();
    check(npy<std::int32_t>("<i4", "(1, 3)", {1, 2, 3}), g,
          "expected element type float32, got int32");
    check(npy<double>("<f8", "(1, 3)", {1, 2, 1e300}), g, "out of the float32 range");
    check(npy<double>("<f8", "(1, 3)", {1, 2, 3}), one_input({-1, 3}, DType::i64),
          "expected element type int64, got float64");
    check(npy<float>("<f4", "(3,)", {1, 2, 3}), g, "rank");
    check(npy<float>("<f4", "(1, 4)", {1, 2, 3, 4}), g, "dimension 1 must be 3");
    check(npy<std::uint8_t>("|b1", "(1, 3)", {1, 2, 0}), one_input({-1, 3}, DType::boolean),
          "must be 0 or 1");

    SECTION("a symbol binds one value across the inputs of a batch") {
        TempDir e;
        const Graph g2 = graph_with({{"x", DType::f32, {-1, 3}}, {"ids", DType::i64, {-1}}});
        write_file(e.path / "s" / "x.npy", npy<float>("<f4", "(2, 3)", std::vector<float>(6)));
        write_file(e.path / "s" / "ids.npy", npy<int64_t>("<i8", "(3,)", {1, 2, 3}));
        const Status s = first_batch_error(e.path, g2);
        CHECK(s.code() == ErrorCode::invalid_argument);
        CHECK(contains(s.message(), "'batch'"));
        CHECK(contains(s.message(), "ids.npy"));
    }
    SECTION("a .pb that is not a TensorProto, and one of the wrong type") {
        TempDir e;
        write_file(e.path / "bad.pb", std::string("\xff\xff\xff\xff garbage", 13));
        Status s = first_batch_error(e.path, g);
        CHECK(s.code() == ErrorCode::invalid_argument);
        CHECK(contains(s.message(), "bad.pb"));
        fs::remove(e.path / "bad.pb");
        write_file(e.path / "i.pb", pb<int64_t>(7, {1, 3}, {1, 2, 3}));
        s = first_batch_error(e.path, g);
        CHECK(s.code() == ErrorCode::invalid_argument);
        CHECK(contains(s.message(), "i.pb"));
        CHECK(contains(s.message(), "int64"));
    }
    SECTION("the error repeats and the good batches around it still read") {
        TempDir e;
        write_file(e.path / "0.npy", npy<float>("<f4", "(1, 3)", {1, 2, 3}));
        write_file(e.path / "1.npy", npy<float>("<f4", "(1, 2)", {1, 2}));
        auto src = calibration_folder(e.path, g);
        REQUIRE(src.is_ok());
        std::vector<NamedTensor> b;
        auto r = (*src)->next(b);
        REQUIRE((r.is_ok() && *r));
        for (int i = 0; i < 2; ++i) {
            r = (*src)->next(b);
            REQUIRE_FALSE(r.is_ok());
            CHECK(contains(r.status().message(), "1.npy"));
        }
    }
}

TEST_CASE("calibration_folder: malformed .npy files", "[calibration_data]") {
    TempDir d;
    const Graph g = one_input();
    const std::string data = raw_bytes(std::vector<float>{1, 2, 3});
    const auto bad = [&](const std::string& bytes, const std::string& part) {
        const fs::path f = d.path / "m.npy";
        write_file(f, bytes);
        const Status s = first_batch_error(d.path, g);
        INFO(s.to_string());
        CHECK(s.code() == ErrorCode::invalid_argument);
        CHECK(contains(s.message(), "m.npy"));
        CHECK(contains(s.message(), part));
        fs::remove(f);
    };
    const std::string ok = npy_file(npy_header("<f4", "(1, 3)"), data);
    bad(ok.substr(0, ok.size() - 1), "truncated");  // data cut short
    bad(ok + "xx", "bytes after");                  // trailing bytes
    bad(ok.substr(0, 40), "truncated");             // header cut short
    bad(ok.substr(0, 5), "too short");
    bad("PK\x03\x04 this is a zip file", "not a .npy");
    bad(npy_file(npy_header("<f4", "(1, 3)", "True"), data), "Fortran");
    bad(npy_file(npy_header(">f4", "(1, 3)"), data), "big-endian");
    bad(npy_file(npy_header("|O", "(1, 3)"), data), "not supported");
    bad(npy_file(npy_header("<U4", "(1, 3)"), data), "not supported");
    bad(npy_file(npy_header("|f4", "(1, 3)"), data), "not supported");
    bad(npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1, 3), }", data),
        "structured");
    bad(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), 'x': 1}", data),
        "unknown header key");
    bad(npy_file("{'descr': '<f4', 'shape': (1, 3), }", data), "fortran_order");
    bad(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, -3), }", data),
        "non-negative");
    bad(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3) } x", data),
        "after the header");
    // Dims whose product overflows, and dims that fit int64 but not the file: no allocation.
    bad(npy_file(npy_header("<f4", "(4611686018427387904, 4611686018427387904)"), data),
        "overflow");
    bad(npy_file(npy_header("<f4", "(99999999999999999999, 3)"), data), "overflow");
    bad(npy_file(npy_header("<f4", "(1000000000000, 3)"), data), "truncated");
    // A header length beyond the file, and an unknown version.
    std::string huge = ok;
    huge[8] = '\xff';
    huge[9] = '\xff';
    bad(huge, "truncated");
    std::string v4 = ok;
    v4[6] = 4;
    bad(v4, "version 4.0");
    // Rank over the maximum is unsupported (and named).
    write_file(d.path / "r.npy",
               npy_file(npy_header("<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 1, 3)"), data));
    const Status s = first_batch_error(d.path, g);
    CHECK(s.code() == ErrorCode::unsupported);
    CHECK(contains(s.message(), "r.npy"));
}

TEST_CASE("calibration_csv: labels, blank lines, batches and scale", "[calibration_data]") {
    TempDir d;
    const Graph g = one_input({-1, 3});
    const fs::path f = d.path / "data.csv";

    SECTION("with labels, CRLF, blank lines, a short last batch") {
        write_file(f,
                   "\xEF\xBB\xBF"
                   "7, 2,4,6\r\n\n1,0,0,0\n  \ncat,-2,+8,1e1\n9,1,1,1\n5,2,2,2");
        auto src = calibration_csv(f, g, 2, 0.5f);
        REQUIRE(src.is_ok());
        REQUIRE((*src)->size() == 3);
        std::vector<NamedTensor> b;
        auto r = (*src)->next(b);
        REQUIRE((r.is_ok() && *r));
        REQUIRE(b.size() == 1);
        CHECK(b[0].name == "x");
        CHECK(b[0].tensor.shape() == Shape{2, 3});
        CHECK(floats(b[0].tensor) == std::vector<float>{1, 2, 3, 0, 0, 0});
        r = (*src)->next(b);
        REQUIRE((r.is_ok() && *r));
        CHECK(floats(b[0].tensor) == std::vector<float>{-1, 4, 5, 0.5f, 0.5f, 0.5f});
        r = (*src)->next(b);
        REQUIRE((r.is_ok() && *r));
        CHECK(b[0].tensor.shape() == Shape{1, 3});
        CHECK(floats(b[0].tensor) == std::vector<float>{1, 1, 1});
        r = (*src)->next(b);
        REQUIRE(r.is_ok());
        CHECK_FALSE(*r);
    }
    SECTION("without labels; a batch larger than the file") {
        write_file(f, "0.25,0.5,1e-3\n-inf,nan,1e-999\n");
        auto src = calibration_csv(f, g, 32);
        REQUIRE(src.is_ok());
        REQUIRE((*src)->size() == 1);
        std::vector<NamedTensor> b;
        auto r = (*src)->next(b);
        REQUIRE((r.is_ok() && *r));
        CHECK(b[0].tensor.shape() == Shape{2, 3});
        const auto v = floats(b[0].tensor);
        CHECK(v[0] == 0.25f);
        CHECK(v[2] == 1e-3f);
        CHECK(std::isinf(v[3]));
        CHECK(std::isnan(v[4]));
        CHECK(v[5] == 0.f);
    }
    SECTION("a fixed batch dim: full batches only") {
        write_file(f, "1,1,1\n2,2,2\n3,3,3\n4,4,4\n5,5,5\n");
        const Graph fixed = one_input({2, 3});
        auto src = calibration_csv(f, fixed, 2);
        REQUIRE(src.is_ok());
        CHECK((*src)->size() == 2);
        std::vector<NamedTensor> b;
        for (int i = 0; i < 2; ++i) {
            auto r = (*src)->next(b);
            REQUIRE((r.is_ok() && *r));
            CHECK(b[0].tensor.shape() == Shape{2, 3});
        }
        auto r = (*src)->next(b);
        REQUIRE(r.is_ok());
        CHECK_FALSE(*r);
        auto wrong = calibration_csv(f, fixed, 3);
        REQUIRE_FALSE(wrong.is_ok());
        CHECK(wrong.status().code() == ErrorCode::invalid_argument);
    }
}

TEST_CASE("calibration_csv: errors name the line", "[calibration_data]") {
    TempDir d;
    const Graph g = one_input({-1, 3});
    const fs::path f = d.path / "data.csv";
    const auto bad = [&](const std::string& text, const std::string& part,
                         ErrorCode code = ErrorCode::invalid_argument) {
        write_file(f, text);
        auto s = calibration_csv(f, g, 2);
        REQUIRE_FALSE(s.is_ok());
        INFO(s.status().to_string());
        CHECK(s.status().code() == code);
        CHECK(contains(s.status().message(), part));
    };
    bad("1,2,3\n4,5,6\n7,x8,9\n", "line 3, value 2: 'x8' is not a number");
    bad("1,2,3\n4,5,6\n7,8,\n", "line 3, value 3");
    bad("1,2,3\n\n4,5,6,7\n", "line 3 has 4 values");  // width changes
    bad("0,1,2,3\n1,2,3\n", "line 2 has 3 values");    // labeled, then not
    bad("1,2\n", "line 1 has 2 values");               // too narrow for [batch, 3]
    bad("1,2,3,4,5\n", "line 1 has 5 values");         // too wide even with a label
    bad("label,a,b,c\n1,2,3,4\n", "line 1, value 2");  // a header line is not data
    bad("1,2,1e999\n", "out of range");
    bad("1,2,1e300\n", "float32 range");
    bad(",1,2,3\n", "empty label");
    bad("", "no samples");
    bad("\n \n", "no samples");
    bad(std::string(3u << 20, '1'), "longer than");

    write_file(f, "1,2,3\n");
    auto s = calibration_csv(f, g, 0);
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.status().code() == ErrorCode::invalid_argument);
    s = calibration_csv(f, g, 2, std::nanf(""));
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.status().code() == ErrorCode::invalid_argument);
    s = calibration_csv(d.path / "missing.csv", g, 2);
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.status().code() == ErrorCode::io_error);
    CHECK(contains(s.status().message(), "missing.csv"));

    // Graphs of another form.
    for (const Graph& other :
         {graph_with({{"x", DType::f32, {-1, 3}}, {"y", DType::f32, {-1, 3}}}),
          one_input({-1, 3}, DType::i64), one_input({-1, 3, 1}), one_input({-1, -1})}) {
        auto o = calibration_csv(f, other, 2);
        REQUIRE_FALSE(o.is_ok());
        INFO(o.status().to_string());
        CHECK(o.status().code() == ErrorCode::invalid_argument);
    }
}

TEST_CASE("calibration_csv: the digits training split feeds the digits model",
          "[calibration_data]") {
    const fs::path dir = fs::path(__FILE__).parent_path() / ".." / ".." / "models" / "digits";
    if (!fs::exists(dir / "digits_train.csv") || !fs::exists(dir / "digits.onnx")) {
        WARN("models/digits/digits_train.csv not found next to the sources: skipped");
        return;
    }
    Graph g = load_onnx(dir / "digits.onnx");
    auto src = calibration_csv(dir / "digits_train.csv", g, 32, 1.f / 16);
    REQUIRE(src.is_ok());
    CHECK((*src)->size() == (1438 + 31) / 32);

    // The labels the source skips, read here to check the model on what it was given.
    std::vector<int> labels;
    {
        std::ifstream in(dir / "digits_train.csv");
        std::string line;
        while (std::getline(in, line))
            if (!line.empty()) labels.push_back(std::stoi(line.substr(0, line.find(','))));
    }
    REQUIRE(labels.size() == 1438);

    auto engine = InferenceEngine::compile(std::move(g));
    std::vector<NamedTensor> b;
    std::size_t seen = 0, right = 0, batches = 0;
    float lo = 1e9f, hi = -1e9f;
    for (;;) {
        auto r = (*src)->next(b);
        REQUIRE(r.is_ok());
        if (!*r) break;
        ++batches;
        REQUIRE(b.size() == 1);
        CHECK(b[0].name == "pixels");
        const Tensor& x = b[0].tensor;
        REQUIRE(x.shape()[1] == 64);
        CHECK(x.shape()[0] == (batches < 45 ? 32 : 1438 - 44 * 32));
        for (float v : floats(x)) {
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        }
        const auto out = engine.run(b);
        const auto it = std::find_if(out.begin(), out.end(),
                                     [](const NamedTensor& o) { return o.name == "logits"; });
        REQUIRE(it != out.end());
        const Tensor& logits = it->tensor;
        for (int64_t i = 0; i < x.shape()[0]; ++i) {
            const float* row = logits.data<float>() + i * 10;
            const auto pred = std::max_element(row, row + 10) - row;
            right += pred == labels[seen] ? 1 : 0;
            ++seen;
        }
    }
    CHECK(batches == 45);
    CHECK(seen == 1438);
    CHECK(lo == 0.f);
    CHECK(hi == 1.f);  // 16 / 16: the scale is applied
    // The model was trained on these samples (training accuracy 1.0).
    CHECK(static_cast<double>(right) / static_cast<double>(seen) > 0.98);
}
