// Shared by the server tests: a temporary model repository of small ONNX models written here,
// a Server on ephemeral localhost ports, and clients for both protocols.
#pragma once

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <netinet/in.h>
#include <onnx/onnx_pb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dsinfer/server.hpp"
#include "open_inference.grpc.pb.h"
#include "unit/model_builder.hpp"

namespace dsinfer::test {

namespace fs = std::filesystem;

/// The servers under test share the process with their clients, as in a host application: a
/// peer that closes its connection while a response is being written must not end the process
/// with SIGPIPE, so the process ignores it, as ds-serve's main does (include/dsinfer/server.hpp).
/// (A reload test under load died of it once in a CI run on the 2-core VM.)
inline const bool kSigpipeIgnored = [] {
    std::signal(SIGPIPE, SIG_IGN);
    return true;
}();

/// x float[batch,4] -> Mul(scale) -> y; Add(scale) -> z. Version k of the repository's
/// "scale" model uses scale = k, so an answer says which version computed it.
inline onnx::ModelProto scale_model(float scale) {
    onnx::ModelProto m = new_model(13, "scale");
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", onnx::TensorProto::FLOAT, {-1, 4});
    *g->add_output() = tensor_info("y", onnx::TensorProto::FLOAT, {-1, 4});
    *g->add_output() = tensor_info("z", onnx::TensorProto::FLOAT, {-1, 4});
    auto* s = g->add_initializer();
    s->set_name("s");
    s->set_data_type(onnx::TensorProto::FLOAT);
    s->add_dims(4);
    for (int i = 0; i < 4; ++i) s->add_float_data(scale);
    add_node(*g, "Mul", {"x", "s"}, {"y"});
    add_node(*g, "Add", {"x", "s"}, {"z"});
    return m;
}

/// x float[batch,4] -> p = Softmax(x * scale + bias) float[batch,4] (cascade members: the same
/// interface, different answers).
inline onnx::ModelProto softmax_model(float scale, const std::vector<float>& bias) {
    onnx::ModelProto m = new_model(13, "softmax");
    auto* g = m.mutable_graph();
    *g->add_input() = tensor_info("x", onnx::TensorProto::FLOAT, {-1, 4});
    *g->add_output() = tensor_info("p", onnx::TensorProto::FLOAT, {-1, 4});
    for (const auto& [name, values] :
         {std::pair<std::string, std::vector<float>>{"s", {scale, scale, scale, scale}}, {"b", bias}}) {
        auto* t = g->add_initializer();
        t->set_name(name);
        t->set_data_type(onnx::TensorProto::FLOAT);
        t->add_dims(4);
        for (float v : values) t->add_float_data(v);
    }
    add_node(*g, "Mul", {"x", "s"}, {"xs"});
    add_node(*g, "Add", {"xs", "b"}, {"l"});
    add_node(*g, "Softmax", {"l"}, {"p"});
    return m;
}

inline void write_model(const fs::path& file, const onnx::ModelProto& m) {
    fs::create_directories(file.parent_path());
    // Written beside and renamed in: a reader never sees half a file (docs/SERVING.md).
    const fs::path tmp = file.string() + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary);
        m.SerializeToOstream(&f);
    }
    fs::rename(tmp, file);
}

class TempRepository {
public:
    TempRepository() {
        std::string tmpl = (fs::temp_directory_path() / "dsinfer-serve-test-XXXXXX").string();
        if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        root_ = tmpl;
    }
    ~TempRepository() {
        std::error_code ec;
        fs::remove_all(root_, ec);
    }
    const fs::path& root() const { return root_; }
    void add(const std::string& name, int version, const onnx::ModelProto& m) {
        write_model(root_ / name / std::to_string(version) / "model.onnx", m);
    }
    void config(const std::string& name, const std::string& json) {
        fs::create_directories(root_ / name);
        std::ofstream(root_ / name / "config.json") << json;
    }

private:
    fs::path root_;
};

inline server::ServerOptions local_options(const fs::path& repo) {
    server::ServerOptions o;
    o.model_repository = repo;
    o.http_port = 0;
    o.grpc_port = 0;
    o.num_threads = 1;
    o.log = [](const std::string&) {};
    return o;
}

inline std::unique_ptr<inference::GRPCInferenceService::Stub> grpc_stub(int port) {
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                       grpc::InsecureChannelCredentials());
    return inference::GRPCInferenceService::NewStub(channel);
}

/// A REST body asking for y and z of x (batch rows of 4 floats), JSON data.
inline std::string json_infer_body(const std::vector<float>& x) {
    std::string data;
    for (std::size_t i = 0; i < x.size(); ++i) {
        if (i) data += ',';
        data += std::to_string(x[i]);
    }
    return R"({"inputs":[{"name":"x","datatype":"FP32","shape":[)" +
           std::to_string(x.size() / 4) + R"(,4],"data":[)" + data + "]}]}";
}

/// The binary form: JSON header then the raw floats; returns the header length.
inline std::size_t binary_infer_body(const std::vector<float>& x, std::string& body,
                                     bool binary_output = true) {
    const std::string header =
        R"({"inputs":[{"name":"x","datatype":"FP32","shape":[)" + std::to_string(x.size() / 4) +
        R"(,4],"parameters":{"binary_data_size":)" + std::to_string(x.size() * 4) +
        R"(}}],"outputs":[{"name":"y","parameters":{"binary_data":)" +
        (binary_output ? "true" : "false") + "}}]}";
    body = header;
    body.append(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
    return header.size();
}

/// A raw TCP connection to 127.0.0.1:port that has sent `request` (for what an HTTP client
/// library would not send: a hang-up mid-request, a POST without Content-Length). -1 on error.
inline int send_raw(int port, const std::string& request) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
        if (fd >= 0) ::close(fd);
        return -1;
    }
    return fd;
}

/// Sends `request` (which should say "Connection: close") and reads the response to the end.
inline std::string exchange_raw(int port, const std::string& request) {
    const int fd = send_raw(port, request);
    if (fd < 0) return {};
    std::string response;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) response.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    return response;
}

inline std::size_t resident_bytes() {
    std::ifstream f("/proc/self/statm");
    std::size_t pages = 0, resident = 0;
    f >> pages >> resident;
    return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace dsinfer::test
