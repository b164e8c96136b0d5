// src/server/grpc_frontend.cpp — the gRPC half of the Open Inference Protocol on gRPC++'s
// callback API (Debian's libgrpc++-dev): no thread waits for an inference; the batcher's
// callback finishes the RPC, and a client that cancels (or goes away) cancels its request.
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <fstream>
#include <sstream>

#include "dsinfer/version.hpp"
#include "open_inference.grpc.pb.h"
#include "server/server_impl.hpp"

namespace dsinfer::server {

namespace {

grpc::Status to_grpc(const ApiError& e) {
    grpc::StatusCode code = grpc::StatusCode::INTERNAL;
    switch (e.code) {
        case ApiCode::ok: return grpc::Status::OK;
        case ApiCode::bad_request: code = grpc::StatusCode::INVALID_ARGUMENT; break;
        case ApiCode::not_found: code = grpc::StatusCode::NOT_FOUND; break;
        case ApiCode::unauthenticated: code = grpc::StatusCode::UNAUTHENTICATED; break;
        case ApiCode::too_large: code = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
        case ApiCode::unavailable: code = grpc::StatusCode::UNAVAILABLE; break;
        case ApiCode::deadline_exceeded: code = grpc::StatusCode::DEADLINE_EXCEEDED; break;
        case ApiCode::cancelled: code = grpc::StatusCode::CANCELLED; break;
        case ApiCode::unsupported: code = grpc::StatusCode::UNIMPLEMENTED; break;
        case ApiCode::internal: code = grpc::StatusCode::INTERNAL; break;
    }
    return grpc::Status(code, e.message);
}

std::string read_text(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    if (!f) throw Error(ErrorCode::io_error, "cannot read '" + p.string() + "'");
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// The call's "authorization" metadata ("" when absent).
std::string_view authorization_of(const grpc::CallbackServerContext* ctx) {
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    return it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
}

// ModelInfer: decodes, submits, and finishes from the batcher's callback. Deletes itself when
// gRPC is done with it (OnDone, after Finish).
class InferReactor final : public grpc::ServerUnaryReactor {
public:
    InferReactor(Server::Impl& impl, grpc::CallbackServerContext* ctx,
                 const inference::ModelInferRequest* request,
                 inference::ModelInferResponse* response)
        : impl_(impl), ctx_(ctx), request_(request), response_(response) {}

    void start() {
        if (!impl_.authorized(authorization_of(ctx_))) {
            impl_.count(Protocol::grpc, ApiCode::unauthenticated);
            return finish(ApiError{ApiCode::unauthenticated, "missing or wrong bearer token"});
        }
        const std::string& name = request_->model_name();
        const std::string& version = request_->model_version();
        if (!valid_model_name(name)) {
            impl_.count(Protocol::grpc, ApiCode::not_found);
            return finish(ApiError{ApiCode::not_found, "invalid model name"});
        }
        if (ApiError e = decode_grpc_request(*request_, impl_.limits, decoded_); !e.ok()) {
            impl_.count(Protocol::grpc, e.code);
            return finish(e);
        }
        std::vector<NamedTensor> inputs = std::move(decoded_.inputs);
        // The last use of `this` on this thread: the callback may finish (and delete) the
        // reactor before infer() returns.
        impl_.infer(Protocol::grpc, name, version, std::move(inputs), decoded_, cancel_,
                    [this](ApiError e, std::vector<NamedTensor> out, std::string v) {
                        if (e.ok())
                            e = encode_grpc_response(request_->model_name(), v, decoded_, out,
                                                     *response_);
                        finish(e);
                    });
    }

    void OnCancel() override { cancel_.cancel(); }
    void OnDone() override { delete this; }

private:
    void finish(const ApiError& e) {
        if (e.code == ApiCode::unavailable) ctx_->AddTrailingMetadata("retry-after", "1");
        Finish(to_grpc(e));
    }

    Server::Impl& impl_;
    grpc::CallbackServerContext* ctx_;
    const inference::ModelInferRequest* request_;
    inference::ModelInferResponse* response_;
    InferRequest decoded_;
    CancellationToken cancel_;
};

class Service final : public inference::GRPCInferenceService::CallbackService {
public:
    explicit Service(Server::Impl& impl) : impl_(impl) {}

    grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx,
                                         const inference::ServerLiveRequest*,
                                         inference::ServerLiveResponse* response) override {
        response->set_live(true);
        return done(ctx, grpc::Status::OK);
    }
    grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx,
                                          const inference::ServerReadyRequest*,
                                          inference::ServerReadyResponse* response) override {
        response->set_ready(impl_.ready());
        return done(ctx, grpc::Status::OK);
    }
    grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx,
                                         const inference::ModelReadyRequest* request,
                                         inference::ModelReadyResponse* response) override {
        if (!authorized(ctx)) return unauthenticated(ctx);
        if (!impl_.repository->find(request->name(), request->version()))
            return done(ctx, grpc::Status(grpc::StatusCode::NOT_FOUND,
                                          "model '" + request->name() + "' is not loaded"));
        response->set_ready(impl_.ready());
        return done(ctx, grpc::Status::OK);
    }
    grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                             const inference::ServerMetadataRequest*,
                                             inference::ServerMetadataResponse* response) override {
        if (!authorized(ctx)) return unauthenticated(ctx);
        response->set_name("dsinfer");
        response->set_version(dsinfer::version());
        for (const auto& e : Server::extensions()) response->add_extensions(e);
        return done(ctx, grpc::Status::OK);
    }
    grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                            const inference::ModelMetadataRequest* request,
                                            inference::ModelMetadataResponse* response) override {
        if (!authorized(ctx)) return unauthenticated(ctx);
        auto sv = impl_.repository->find(request->name(), request->version());
        if (!sv)
            return done(ctx, grpc::Status(grpc::StatusCode::NOT_FOUND,
                                          "model '" + request->name() + "'" +
                                              (request->version().empty()
                                                   ? ""
                                                   : " version " + request->version()) +
                                              " is not loaded"));
        response->set_name(sv->name);
        for (auto v : impl_.repository->versions(sv->name))
            response->add_versions(std::to_string(v));
        response->set_platform(sv->platform);
        auto fill = [](const std::vector<IOInfo>& list, auto add) {
            for (const auto& io : list) {
                auto* t = add();
                t->set_name(io.name);
                t->set_datatype(std::string(io.dtype ? protocol_dtype(*io.dtype) : "BYTES"));
                for (const Dim& d : io.shape.dims) t->add_shape(d.is_static() ? d.value : -1);
            }
        };
        fill(sv->inputs, [&] { return response->add_inputs(); });
        fill(sv->outputs, [&] { return response->add_outputs(); });
        return done(ctx, grpc::Status::OK);
    }
    grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx,
                                         const inference::ModelInferRequest* request,
                                         inference::ModelInferResponse* response) override {
        auto* reactor = new InferReactor(impl_, ctx, request, response);
        reactor->start();
        return reactor;
    }

private:
    static grpc::ServerUnaryReactor* done(grpc::CallbackServerContext* ctx, grpc::Status s) {
        auto* r = ctx->DefaultReactor();
        r->Finish(std::move(s));
        return r;
    }
    bool authorized(grpc::CallbackServerContext* ctx) const {
        return impl_.authorized(authorization_of(ctx));
    }
    static grpc::ServerUnaryReactor* unauthenticated(grpc::CallbackServerContext* ctx) {
        return done(ctx, grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                      "missing or wrong bearer token"));
    }

    Server::Impl& impl_;
};

}  // namespace

class GrpcFrontend {
public:
    explicit GrpcFrontend(Server::Impl& impl) : impl_(impl), service_(impl) {}

    int start(const std::string& host, int port) {
        const auto& o = impl_.options;
        std::shared_ptr<grpc::ServerCredentials> creds;
        if (!o.tls_cert.empty()) {
            grpc::SslServerCredentialsOptions ssl;
            ssl.pem_key_cert_pairs.push_back({read_text(o.tls_key), read_text(o.tls_cert)});
            creds = grpc::SslServerCredentials(ssl);
        } else {
            creds = grpc::InsecureServerCredentials();
        }
        grpc::ServerBuilder builder;
        int selected = 0;
        const std::string address =
            (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
            std::to_string(port);
        builder.AddListeningPort(address, creds, &selected);
        builder.RegisterService(&service_);
        const int max_message = static_cast<int>(
            std::min<std::size_t>(o.max_body_bytes, static_cast<std::size_t>(INT32_MAX)));
        builder.SetMaxReceiveMessageSize(max_message);
        builder.SetMaxSendMessageSize(-1);
        server_ = builder.BuildAndStart();
        if (!server_ || selected == 0)
            throw Error(ErrorCode::io_error, "cannot listen for gRPC on " + address +
                                                 " (address in use or not allowed)");
        return selected;
    }

    void stop(std::chrono::milliseconds deadline) {
        if (!server_) return;
        server_->Shutdown(std::chrono::system_clock::now() + deadline);
        server_->Wait();
        server_.reset();
    }

    ~GrpcFrontend() { stop(std::chrono::milliseconds(0)); }

private:
    Server::Impl& impl_;
    Service service_;
    std::unique_ptr<grpc::Server> server_;
};

std::unique_ptr<GrpcFrontend, GrpcDeleter> make_grpc_frontend(Server::Impl& impl) {
    return std::unique_ptr<GrpcFrontend, GrpcDeleter>(new GrpcFrontend(impl));
}
int grpc_start(GrpcFrontend& f, const std::string& host, int port) { return f.start(host, port); }
void grpc_stop(GrpcFrontend& f, std::chrono::milliseconds deadline) { f.stop(deadline); }
void grpc_destroy(GrpcFrontend* f) { delete f; }

}  // namespace dsinfer::server
