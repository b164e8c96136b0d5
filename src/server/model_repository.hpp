// src/server/model_repository.hpp — the model repository ds-serve serves from: a folder of
// NAME/VERSION/model.onnx with an optional NAME/config.json per model; loading, unloading and
// reloading (by the API or on file change) while requests are in flight.
//
// Purpose: owns, per served (model, version), the InferenceEngine and its BatchingEngine
// (dsinfer::serving), or for a generative model (config.json "generate") its Generator,
// resolves a request's model and version, and submits it. A reload loads
// the new engines first (outside every lock), swaps them in under a short exclusive lock and
// drains the old ones in the background: a request takes the shared lock while it resolves
// and submits, so it lands either on the old engine (which answers it while draining) or on
// the new one, never on neither.
//
// Threading: every member is thread-safe. Control operations (load, unload, poll) are
// serialized among themselves; requests never wait for a load.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "dsinfer/cascade.hpp"
#include "dsinfer/engine.hpp"
#include "dsinfer/generate.hpp"
#include "dsinfer/result_cache.hpp"
#include "dsinfer/server.hpp"
#include "dsinfer/serving.hpp"
#include "server/protocol.hpp"

namespace dsinfer::server {

/// Which versions of a model are served (config.json "version_policy").
struct VersionPolicy {
    enum class Kind : std::uint8_t { latest, all, specific };
    Kind kind = Kind::latest;
    int latest = 1;                      ///< Kind::latest: the N highest versions
    std::vector<std::int64_t> versions;  ///< Kind::specific
};

/// A cascade entry (config.json "platform": "dsinfer_cascade"): two other models of the
/// repository, the small one first.
struct CascadeConfig {
    std::string small;
    std::string large;
    std::string output;           ///< the output the rule reads
    double threshold = 0.9;       ///< escalate rows whose max softmax is below it
    bool output_is_probabilities = false;
};

/// One model's config.json, defaults filled in.
/// config.json "limits": a model's own bounds on its requests, each tighter than or instead of
/// the server's (0 or -1: the server's own, unbounded where the server has none).
struct ModelLimits {
    std::size_t max_request_bytes = 0;     ///< "max_request_bytes": all input tensors' bytes
    std::int64_t max_tensor_elements = 0;  ///< "max_tensor_elements": one input's elements
                                           ///< (generate: input_ids' length)
    std::int64_t timeout_us = -1;          ///< "timeout_ms": a request naming none (0: no deadline)
    std::int64_t max_timeout_us = 0;       ///< "max_timeout_ms": a request's own timeout is cut
                                           ///< to this (and a request naming none gets at most it)
    std::int64_t max_tokens = 0;           ///< "max_tokens" (generative models): per request
};

/// A request's timeout parameter (microseconds; 0: none) and the server's default.
struct RequestTimeout {
    std::optional<std::int64_t> requested_us;
    std::int64_t server_default_us = 0;
};

/// The deadline of a request that starts now under a model's limits: its own timeout (0: none),
/// else the model's timeout_ms, else the server's; none when that is 0; a max_timeout_ms cuts
/// it, and bounds "none" too.
std::optional<std::chrono::steady_clock::time_point> request_deadline(const RequestTimeout& t,
                                                                      const ModelLimits& l);

struct ModelConfig {
    serving::BatchingOptions batching;
    Precision precision = Precision::fp32;
    int num_threads = 0;
    int optimization_level = 3;
    VersionPolicy version_policy;
    /// Weights read into memory (false, the server's default: a model file replaced in place
    /// can then never fault a running engine) or mapped from the file (true).
    bool map_weights = false;
    /// Before a version takes requests (at start and on every reload), run it once at each
    /// batch size the batcher can form (1..max_batch_size; past 64 only powers of two and the
    /// maximum) on zeros, so no request pays for a first run's planning and kernel
    /// preparation. Only for models whose inputs all have a symbolic dim 0 and static other
    /// dims (others are served cold, said in the log). config.json "warmup".
    bool warmup = true;
    /// config.json "result_cache": {"max_bytes", "max_entries", "ttl_ms"}: answers repeated
    /// inputs from an LRU of this model's results (off without the section).
    std::optional<serving::ResultCacheOptions> result_cache;
    /// Set for "platform": "dsinfer_cascade" (the entry is a cascade, no model file).
    std::optional<CascadeConfig> cascade;
    /// config.json "generate": the model is a decoder served through dsinfer::Generator
    /// (POST .../generate and .../generate_stream) instead of the batcher. Its engine options
    /// come from precision (fp32 or bf16), num_threads, optimization_level and map_weights,
    /// its warm-up from warmup.
    std::optional<GeneratorOptions> generate;
    ModelLimits limits;  ///< config.json "limits"
};

/// Parses a config.json (an unknown key or a value out of range is invalid_argument naming
/// it), starting from `defaults`.
StatusOr<ModelConfig> parse_model_config(std::string_view text, const ModelConfig& defaults);

/// A file's identity and contents' stamp: a change of any field is a change of the file.
struct FileStamp {
    bool exists = false;
    std::uint64_t device = 0, inode = 0, size = 0;
    std::int64_t mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
};
FileStamp stamp_of(const std::filesystem::path& file) noexcept;

/// A generative entry's Generator and the generations in flight on it, so that a drain
/// (reload, unload, shutdown) can wait for them and then cancel what is left.
///
/// Threading: thread-safe. The Generator's destructor joins its scheduler thread, so the last
/// owner of a GenerativeModel must never be that thread: the front ends and the repository
/// hold it, the token callbacks (which run on the scheduler thread) never do.
class GenerativeModel {
public:
    GenerativeModel(Generator generator, GeneratorOptions options)
        : generator_(std::move(generator)), options_(std::move(options)) {}
    const DecoderConfig& config() const noexcept { return generator_.config(); }
    const GeneratorOptions& options() const noexcept { return options_; }
    GeneratorMetrics metrics() const { return generator_.metrics(); }

    /// Submits `request` and registers it: call done() with the ticket once its result has
    /// been read. unavailable once drain() has begun (nothing submitted).
    StatusOr<std::uint64_t> submit(GenerateRequest request, GenerateHandle& handle);
    void done(std::uint64_t ticket);
    /// Takes no more generations, waits up to `timeout` for those in flight, then cancels the
    /// rest (each stops at the Generator's next step). True when none had to be cancelled.
    bool drain(std::chrono::milliseconds timeout);
    /// drain() has begun.
    bool draining() const {
        std::lock_guard lock(mutex_);
        return closed_;
    }

private:
    Generator generator_;
    GeneratorOptions options_;
    mutable std::mutex mutex_;
    std::condition_variable idle_;  ///< calls_ became empty
    std::map<std::uint64_t, GenerateHandle> calls_;
    std::uint64_t next_ticket_ = 0;
    bool closed_ = false;
};

/// One served version.
struct ServedVersion {
    std::string name;
    std::int64_t version = 0;
    FileStamp stamp;
    std::shared_ptr<serving::BatchingEngine> batcher;  ///< null for a cascade
    std::shared_ptr<serving::Cascade> cascade;         ///< a cascade entry's
    std::shared_ptr<serving::ResultCache> cache;       ///< the model's, when configured
    std::shared_ptr<GenerativeModel> generator;        ///< a generative entry's (no batcher)
    /// The result cache's version key: unique per load, so a rewritten file never answers
    /// from the results of its predecessor.
    std::string cache_version;
    std::vector<IOInfo> inputs, outputs;
    /// As the protocol's metadata names it: onnx_onnxv1, dsinfer_cascade, dsinfer_generate.
    std::string platform;
    ModelLimits limits;  ///< its config.json's "limits" at load
};

struct RepositoryOptions {
    ModelConfig defaults;
    std::chrono::milliseconds drain{30000};  ///< how long a replaced engine may finish
    /// Called with every load/unload outcome (for the server's log).
    std::function<void(const std::string&)> log;
};

/// RequestOptions::priority of a request that names none: the model's middle level.
inline constexpr int kDefaultPriority = -1;

/// The result of an inference through the repository.
using InferDone = std::function<void(ApiError, std::vector<NamedTensor>, std::string version)>;

/// A generation submitted through the repository (ModelRepository::generate): the model it
/// runs on (held, so its Generator outlives the request), its handle and its ticket
/// (GenerativeModel::done).
struct GenerateSubmission {
    std::shared_ptr<GenerativeModel> model;
    std::string version;
    GenerateHandle handle;
    std::uint64_t ticket = 0;
};

class ModelRepository {
public:
    ModelRepository(std::filesystem::path root, RepositoryOptions options);
    ~ModelRepository();
    ModelRepository(const ModelRepository&) = delete;
    ModelRepository& operator=(const ModelRepository&) = delete;

    /// Loads (or reloads, if its files changed) the model `name` from the repository:
    /// not_found-like invalid_argument when the folder is missing or the name is not a valid
    /// model name; the model's previous versions stay served when the load fails.
    Status load(const std::string& name);
    /// Stops serving `name` (in-flight requests are answered).
    Status unload(const std::string& name);
    /// Loads every model folder of the repository (errors are logged; ok when all loaded).
    Status load_all();
    /// Poll mode: reloads models whose files changed, loads new folders, unloads removed ones.
    void poll(bool load_new);

    /// Every model folder on disk and every model served (state READY or UNAVAILABLE, with
    /// the reason of the last failed load).
    std::vector<ModelStatus> index() const;
    /// A model folder `name` exists in the repository (name validated).
    bool has_folder(const std::string& name) const;
    /// `name` is registered (served, or a cascade waiting for its members).
    bool has_model(const std::string& name) const;
    /// The names of the repository's model folders, sorted (io_error when it cannot be read).
    StatusOr<std::vector<std::string>> model_folders() const;

    /// The version a request for (name, version) reaches: version "" = the highest served.
    std::shared_ptr<const ServedVersion> find(std::string_view name,
                                              std::string_view version) const;
    /// Every served version of `name`, ascending.
    std::vector<std::int64_t> versions(std::string_view name) const;
    /// Every model served now.
    std::vector<std::string> models() const;

    /// Resolves and submits one request; `done` is called exactly once (possibly before
    /// submit returns, e.g. for an unknown model or a cache hit). `options.priority` is mapped
    /// onto the model's levels: kDefaultPriority to the middle one, one past them to the last.
    /// A generative model answers bad_request (it takes generate()). The model's "limits" apply
    /// here: inputs over its max_tensor_elements / max_request_bytes answer too_large naming
    /// the limit, and `options.deadline` is set from `timeout` (request_deadline).
    void submit(const std::string& name, const std::string& version,
                std::vector<NamedTensor> inputs, serving::RequestOptions options,
                const RequestTimeout& timeout, InferDone done) const;

    /// Resolves a generative model and submits one generation under the shared lock, as
    /// submit() does (a reload's swap orders after it; the replaced Generator finishes it
    /// while it drains). not_found for an unknown model or version, bad_request for a model
    /// that is not generative or ids it cannot take (check_generate_call), unavailable while
    /// shutting down, too_large for a prompt or max_tokens over the model's limits. The
    /// request's deadline is set from `timeout` (request_deadline). The Generator's own
    /// refusals come back through the handle.
    ApiError generate(const std::string& name, const std::string& version, const GenerateCall& call,
                      GenerateRequest request, const RequestTimeout& timeout,
                      GenerateSubmission& out) const;

    /// Prometheus text: every served version's serving metrics and queue, labelled.
    std::string prometheus() const;
    /// Stops accepting requests (answered unavailable) and drains every engine: queued
    /// requests run at once; what is still queued after `drain` is answered cancelled. True
    /// when everything finished in time.
    bool shutdown(std::chrono::milliseconds drain);

private:
    struct Model {
        std::string name;
        ModelConfig config;
        FileStamp config_stamp;
        std::map<std::int64_t, std::shared_ptr<const ServedVersion>> versions;
        std::string reason;  ///< last load failure
        std::shared_ptr<serving::ResultCache> cache;  ///< kept across reloads
    };
    StatusOr<std::shared_ptr<const ServedVersion>> load_version(
        const std::string& name, std::int64_t version, const std::filesystem::path& file,
        const ModelConfig& config, std::shared_ptr<serving::ResultCache> cache) const;
    /// load_version's part for a generative model: its Generator instead of an engine.
    StatusOr<std::shared_ptr<const ServedVersion>> load_generative(
        std::shared_ptr<ServedVersion> sv, const std::filesystem::path& file,
        const ModelConfig& config, const EngineOptions& engine) const;
    /// A cascade entry over the members served now (unavailable when one is not).
    StatusOr<std::shared_ptr<const ServedVersion>> make_cascade(const std::string& name,
                                                                const ModelConfig& config);
    /// Rebuilds the cascade entries that read `member` (after it loaded or went away); returns
    /// the entries replaced, for retire().
    std::vector<std::shared_ptr<const ServedVersion>> refresh_cascades(const std::string& member);
    /// Drains replaced versions in the background: cascades first (each waits for its
    /// requests), then the engines' batchers (shutdown with the drain timeout).
    void retire(std::vector<std::shared_ptr<const ServedVersion>> old);
    void log(const std::string& message) const;
    /// The version (name, version) reaches ("" = the highest served), or not_found naming
    /// what is missing. The caller holds mutex_.
    ApiError resolve_locked(const std::string& name, const std::string& version,
                            std::shared_ptr<const ServedVersion>& out) const;

    std::filesystem::path root_;
    RepositoryOptions options_;
    mutable std::shared_mutex mutex_;  ///< guards models_ and failed_
    std::map<std::string, Model, std::less<>> models_;
    std::map<std::string, std::string, std::less<>> failed_;  ///< not served: last error
    bool shut_down_ = false;
    std::mutex control_;  ///< serializes load/unload/poll
    struct Retiring {
        std::thread thread;
        std::shared_ptr<std::atomic<bool>> done;
    };
    std::mutex retire_mutex_;
    std::vector<Retiring> retiring_;  ///< replaced engines draining in the background
    std::mutex poll_mutex_;
    std::map<std::string, std::vector<FileStamp>> poll_failed_;  ///< folders that failed, as seen
};

}  // namespace dsinfer::server
