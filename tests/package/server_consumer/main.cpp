// Server package consumer: embeds dsinfer::server from an installed dsinfer. Serves the model
// repository given as argv[1] on an ephemeral localhost port (gRPC off), checks it is ready,
// that the repository index lists the model READY and that /metrics names it, then shuts down.
// Exit status 0 on success.
#include <dsinfer/server.hpp>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: server_app REPOSITORY\n");
        return 2;
    }
    try {
        dsinfer::server::ServerOptions o;
        o.model_repository = argv[1];
        o.http_port = 0;
        o.grpc_port = -1;
        o.num_threads = 1;
        dsinfer::server::Server server(o);
        server.start();
        const auto index = server.repository_index();
        const bool listed = index.size() == 1 && index[0].state == "READY";
        const bool metrics = server.metrics_text().find("model=\"digits\"") != std::string::npos;
        std::printf("server consumer: port %d, ready %d, %zu routes, index ok %d, metrics ok %d\n",
                    server.http_port(), server.ready() ? 1 : 0,
                    dsinfer::server::Server::http_routes().size(), listed ? 1 : 0, metrics ? 1 : 0);
        const bool ok = server.http_port() > 0 && server.ready() && listed && metrics;
        return server.shutdown() && ok ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "server consumer: %s\n", e.what());
        return 1;
    }
}
