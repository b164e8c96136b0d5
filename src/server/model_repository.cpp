// src/server/model_repository.cpp — see model_repository.hpp.
#include "server/model_repository.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

namespace dsinfer::server {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- config.json ----

namespace {

Status config_error(const std::string& key, const std::string& what) {
    return Status::error(ErrorCode::invalid_argument, "config.json: '", key, "' ", what);
}

StatusOr<std::int64_t> get_int(const json& v, const std::string& key, std::int64_t lo,
                               std::int64_t hi) {
    if (!v.is_number_integer()) return config_error(key, "must be an integer");
    const auto x = v.get<std::int64_t>();
    if (x < lo || x > hi)
        return config_error(key, "must be in [" + std::to_string(lo) + ", " +
                                     std::to_string(hi) + "], not " + std::to_string(x));
    return x;
}

StatusOr<double> get_double(const json& v, const std::string& key, double lo, double hi) {
    if (!v.is_number()) return config_error(key, "must be a number");
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
        return config_error(key, "must be in [" + std::to_string(lo) + ", " +
                                     std::to_string(hi) + "]");
    return x;
}

StatusOr<bool> get_bool(const json& v, const std::string& key) {
    if (!v.is_boolean()) return config_error(key, "must be true or false");
    return v.get<bool>();
}

StatusOr<std::string> get_string(const json& v, const std::string& key) {
    if (!v.is_string()) return config_error(key, "must be a string");
    return v.get<std::string>();
}

// config.json "generate": the Generator's options (GeneratorOptions), by the same names.
StatusOr<GeneratorOptions> parse_generate_section(const json& section) {
    if (!section.is_object())
        return config_error("generate", "must be an object of the Generator's options");
    GeneratorOptions g;
    for (auto it = section.begin(); it != section.end(); ++it) {
        const std::string k = "generate." + it.key();
        const json& v = it.value();
        if (it.key() == "kv_cache_mb") {
            DSINFER_ASSIGN_OR_RETURN(auto x, get_int(v, k, 1, 1 << 20));
            g.kv_cache_bytes = static_cast<std::size_t>(x) << 20;
        } else if (it.key() == "kv_dtype") {
            DSINFER_ASSIGN_OR_RETURN(auto s, get_string(v, k));
            if (s == "f32")
                g.kv_dtype = DType::f32;
            else if (s == "f16")
                g.kv_dtype = DType::f16;
            else if (s == "bf16")
                g.kv_dtype = DType::bf16;
            else if (s == "i8")
                g.kv_dtype = DType::i8;
            else
                return config_error(k, "must be f32, f16, bf16 or i8");
        } else if (it.key() == "block_tokens") {
            DSINFER_ASSIGN_OR_RETURN(g.block_tokens, get_int(v, k, 1, 1024));
        } else if (it.key() == "max_sequences") {
            DSINFER_ASSIGN_OR_RETURN(g.max_sequences, get_int(v, k, 1, 4096));
        } else if (it.key() == "prefill_chunk") {
            DSINFER_ASSIGN_OR_RETURN(g.prefill_chunk, get_int(v, k, 1, 1 << 20));
        } else if (it.key() == "max_step_tokens") {
            DSINFER_ASSIGN_OR_RETURN(g.max_step_tokens, get_int(v, k, 1, 1 << 20));
        } else if (it.key() == "prefix_sharing") {
            DSINFER_ASSIGN_OR_RETURN(g.prefix_sharing, get_bool(v, k));
        } else if (it.key() == "weights") {
            DSINFER_ASSIGN_OR_RETURN(g.weights, get_string(v, k));
            if (g.weights != "none" && g.weights != "int8")
                return config_error(k, "must be \"none\" or \"int8\"");
        } else if (it.key() == "max_queued") {
            DSINFER_ASSIGN_OR_RETURN(auto x, get_int(v, k, 1, 1 << 24));
            g.max_queued = static_cast<std::size_t>(x);
        } else {
            return config_error(k,
                                "is not a generate setting (kv_cache_mb, kv_dtype, "
                                "block_tokens, max_sequences, prefill_chunk, max_step_tokens, "
                                "prefix_sharing, weights, max_queued)");
        }
    }
    if (g.max_step_tokens < g.max_sequences)
        return config_error("generate.max_step_tokens", "must be >= generate.max_sequences (" +
                                                            std::to_string(g.max_sequences) +
                                                            ": one token of each)");
    return g;
}

}  // namespace

StatusOr<ModelConfig> parse_model_config(std::string_view text, const ModelConfig& defaults) {
    json doc;
    try {
        doc = json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {
        return Status::error(ErrorCode::invalid_argument, "config.json: malformed JSON: ",
                             e.what());
    }
    if (!doc.is_object())
        return Status::error(ErrorCode::invalid_argument, "config.json: must be a JSON object");
    ModelConfig c = defaults;
    std::string platform = "onnx";
    for (auto it = doc.begin(); it != doc.end(); ++it) {
        const std::string& k = it.key();
        const json& v = it.value();
        if (k == "platform") {
            DSINFER_ASSIGN_OR_RETURN(platform, get_string(v, k));
            if (platform != "onnx" && platform != "dsinfer_cascade")
                return config_error(k, "must be \"onnx\" or \"dsinfer_cascade\"");
        } else if (k == "max_batch_size") {
            DSINFER_ASSIGN_OR_RETURN(auto x, get_int(v, k, 1, 1 << 20));
            c.batching.max_batch_size = static_cast<std::size_t>(x);
        } else if (k == "max_queue_delay_us") {
            DSINFER_ASSIGN_OR_RETURN(auto x, get_int(v, k, 0, 10'000'000));
            c.batching.max_queue_delay = std::chrono::microseconds(x);
        } else if (k == "preferred_batch_sizes") {
            if (!v.is_array()) return config_error(k, "must be an array of positive integers");
            c.batching.preferred_batch_sizes.clear();
            for (const json& e : v) {
                DSINFER_ASSIGN_OR_RETURN(auto x, get_int(e, k, 1, 1 << 20));
                c.batching.preferred_batch_sizes.push_back(static_cast<std::size_t>(x));
            }
        } else if (k == "max_queue_size") {
            DSINFER_ASSIGN_OR_RETURN(auto x, get_int(v, k, 1, 1 << 24));
            c.batching.max_queue_size = static_cast<std::size_t>(x);
        } else if (k == "instance_count") {
            DSINFER_ASSIGN_OR_RETURN(auto x, get_int(v, k, 1, 64));
            c.batching.num_workers = static_cast<int>(x);
        } else if (k == "priority_levels") {
            DSINFER_ASSIGN_OR_RETURN(auto x, get_int(v, k, 1, 16));
            c.batching.priority_levels = static_cast<int>(x);
        } else if (k == "adaptive") {
            DSINFER_ASSIGN_OR_RETURN(c.batching.adaptive, get_bool(v, k));
        } else if (k == "p99_target_ms") {
            DSINFER_ASSIGN_OR_RETURN(c.batching.p99_target_ms, get_double(v, k, 0.0, 1e6));
        } else if (k == "ragged") {
            DSINFER_ASSIGN_OR_RETURN(auto s, get_string(v, k));
            if (s == "group") c.batching.ragged = serving::BatchingOptions::Ragged::group;
            else if (s == "pad") c.batching.ragged = serving::BatchingOptions::Ragged::pad;
            else return config_error(k, "must be \"group\" or \"pad\"");
        } else if (k == "precision") {
            DSINFER_ASSIGN_OR_RETURN(auto s, get_string(v, k));
            if (s == "fp32") c.precision = Precision::fp32;
            else if (s == "bf16") c.precision = Precision::bf16;
            else if (s == "fp16") c.precision = Precision::fp16;
            else if (s == "int8") c.precision = Precision::int8;
            else return config_error(k, "must be fp32, bf16, fp16 or int8");
        } else if (k == "num_threads") {
            DSINFER_ASSIGN_OR_RETURN(auto x, get_int(v, k, 0, 1024));
            c.num_threads = static_cast<int>(x);
        } else if (k == "optimization_level") {
            DSINFER_ASSIGN_OR_RETURN(auto x, get_int(v, k, 0, 3));
            c.optimization_level = static_cast<int>(x);
        } else if (k == "warmup") {
            DSINFER_ASSIGN_OR_RETURN(c.warmup, get_bool(v, k));
        } else if (k == "map_weights") {
            DSINFER_ASSIGN_OR_RETURN(c.map_weights, get_bool(v, k));
        } else if (k == "version_policy") {
            if (!v.is_object() || v.size() != 1)
                return config_error(k, "must be one of {\"latest\": N}, {\"all\": true}, "
                                       "{\"specific\": [versions]}");
            const auto& [pk, pv] = *v.items().begin();
            if (pk == "latest") {
                DSINFER_ASSIGN_OR_RETURN(auto n, get_int(pv, k + ".latest", 1, 1024));
                c.version_policy = VersionPolicy{VersionPolicy::Kind::latest, static_cast<int>(n), {}};
            } else if (pk == "all") {
                c.version_policy = VersionPolicy{VersionPolicy::Kind::all, 0, {}};
            } else if (pk == "specific") {
                if (!pv.is_array() || pv.empty())
                    return config_error(k, ".specific must be a non-empty array of versions");
                VersionPolicy p{VersionPolicy::Kind::specific, 0, {}};
                for (const json& e : pv) {
                    DSINFER_ASSIGN_OR_RETURN(auto x, get_int(e, k + ".specific", 1, INT64_MAX));
                    p.versions.push_back(x);
                }
                c.version_policy = std::move(p);
            } else {
                return config_error(k, "has an unknown policy '" + pk + "'");
            }
        } else if (k == "result_cache") {
            if (!v.is_object()) return config_error(k, "must be an object");
            serving::ResultCacheOptions rc;
            for (auto ci = v.begin(); ci != v.end(); ++ci) {
                const std::string ck = "result_cache." + ci.key();
                if (ci.key() == "max_bytes") {
                    DSINFER_ASSIGN_OR_RETURN(auto x, get_int(*ci, ck, 1, INT64_MAX));
                    rc.max_bytes = static_cast<std::size_t>(x);
                } else if (ci.key() == "max_entries") {
                    DSINFER_ASSIGN_OR_RETURN(auto x, get_int(*ci, ck, 1, INT64_MAX));
                    rc.max_entries = static_cast<std::size_t>(x);
                } else if (ci.key() == "ttl_ms") {
                    DSINFER_ASSIGN_OR_RETURN(auto x, get_int(*ci, ck, 0, 1000LL * 86400 * 365));
                    rc.ttl = std::chrono::milliseconds(x);
                } else {
                    return config_error(ck, "is not a result cache setting (max_bytes, "
                                            "max_entries, ttl_ms)");
                }
            }
            DSINFER_RETURN_IF_ERROR(serving::ResultCache::validate(rc));
            c.result_cache = std::move(rc);
        } else if (k == "cascade") {
            if (!v.is_object()) return config_error(k, "must be an object");
            CascadeConfig cc;
            for (auto ci = v.begin(); ci != v.end(); ++ci) {
                const std::string ck = "cascade." + ci.key();
                if (ci.key() == "small") { DSINFER_ASSIGN_OR_RETURN(cc.small, get_string(*ci, ck)); }
                else if (ci.key() == "large") { DSINFER_ASSIGN_OR_RETURN(cc.large, get_string(*ci, ck)); }
                else if (ci.key() == "output") { DSINFER_ASSIGN_OR_RETURN(cc.output, get_string(*ci, ck)); }
                else if (ci.key() == "threshold") { DSINFER_ASSIGN_OR_RETURN(cc.threshold, get_double(*ci, ck, 0.0, 1.0)); }
                else if (ci.key() == "output_is_probabilities") { DSINFER_ASSIGN_OR_RETURN(cc.output_is_probabilities, get_bool(*ci, ck)); }
                else return config_error(ck, "is not a cascade setting (small, large, output, "
                                             "threshold, output_is_probabilities)");
            }
            if (!valid_model_name(cc.small) || !valid_model_name(cc.large) || cc.output.empty())
                return config_error(k, "needs 'small' and 'large' model names and an 'output'");
            c.cascade = std::move(cc);
        } else if (k == "generate") {
            DSINFER_ASSIGN_OR_RETURN(auto g, parse_generate_section(v));
            c.generate = std::move(g);
        } else if (k == "limits") {
            if (!v.is_object()) return config_error(k, "must be an object");
            constexpr std::int64_t kDayMs = 1000LL * 86400;
            for (auto li = v.begin(); li != v.end(); ++li) {
                const std::string lk = "limits." + li.key();
                if (li.key() == "max_request_bytes") {
                    DSINFER_ASSIGN_OR_RETURN(auto x, get_int(*li, lk, 1, INT64_MAX));
                    c.limits.max_request_bytes = static_cast<std::size_t>(x);
                } else if (li.key() == "max_tensor_elements") {
                    DSINFER_ASSIGN_OR_RETURN(c.limits.max_tensor_elements,
                                             get_int(*li, lk, 1, INT64_MAX));
                } else if (li.key() == "timeout_ms") {
                    DSINFER_ASSIGN_OR_RETURN(auto x, get_int(*li, lk, 0, kDayMs));
                    c.limits.timeout_us = x * 1000;
                } else if (li.key() == "max_timeout_ms") {
                    DSINFER_ASSIGN_OR_RETURN(auto x, get_int(*li, lk, 1, kDayMs));
                    c.limits.max_timeout_us = x * 1000;
                } else if (li.key() == "max_tokens") {
                    DSINFER_ASSIGN_OR_RETURN(c.limits.max_tokens, get_int(*li, lk, 1, INT64_MAX));
                } else {
                    return config_error(lk,
                                        "is not a limit (max_request_bytes, "
                                        "max_tensor_elements, timeout_ms, max_timeout_ms, "
                                        "max_tokens)");
                }
            }
        } else {
            return config_error(k,
                                "is not a setting (platform, max_batch_size, "
                                "max_queue_delay_us, preferred_batch_sizes, max_queue_size, "
                                "instance_count, priority_levels, adaptive, p99_target_ms, "
                                "ragged, precision, num_threads, optimization_level, "
                                "warmup, map_weights, version_policy, result_cache, cascade, "
                                "generate, limits)");
        }
    }
    if (c.limits.max_tokens > 0 && !c.generate)
        return config_error("limits.max_tokens", "applies to generative models only");
    if (c.limits.max_timeout_us > 0 && c.limits.timeout_us > c.limits.max_timeout_us)
        return config_error("limits.timeout_ms", "is longer than limits.max_timeout_ms");
    if (c.generate) {
        // A generative model is served by its Generator, which batches its sequences itself:
        // the batcher's settings would silently do nothing.
        for (const char* k : {"max_batch_size", "max_queue_delay_us", "preferred_batch_sizes",
                              "max_queue_size", "instance_count", "priority_levels", "adaptive",
                              "p99_target_ms", "ragged", "result_cache", "cascade"})
            if (doc.contains(k))
                return config_error(k,
                                    "does not apply to a generative model (its Generator "
                                    "batches the sequences: see the 'generate' section)");
        if (platform != "onnx")
            return config_error("platform", "must be \"onnx\" for a generative model");
        if (c.precision != Precision::fp32 && c.precision != Precision::bf16)
            return config_error("precision",
                                "of a generative model must be fp32 or bf16 "
                                "(INT8 weights: generate.weights \"int8\")");
    }
    if (platform == "dsinfer_cascade" && !c.cascade)
        return Status::error(ErrorCode::invalid_argument,
                             "config.json: platform dsinfer_cascade needs a 'cascade' section");
    if (platform != "dsinfer_cascade" && c.cascade)
        return Status::error(ErrorCode::invalid_argument,
                             "config.json: a 'cascade' section needs \"platform\": "
                             "\"dsinfer_cascade\"");
    DSINFER_RETURN_IF_ERROR(serving::BatchingEngine::validate(c.batching));
    return c;
}

FileStamp stamp_of(const fs::path& file) noexcept {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) return {};
    FileStamp s;
    s.exists = true;
    s.device = static_cast<std::uint64_t>(st.st_dev);
    s.inode = static_cast<std::uint64_t>(st.st_ino);
    s.size = static_cast<std::uint64_t>(st.st_size);
    s.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    return s;
}

// ---- the repository ----

namespace {

// The version folders of a model folder that hold a model.onnx, ascending.
std::vector<std::int64_t> versions_on_disk(const fs::path& dir) {
    std::vector<std::int64_t> out;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const auto v = parse_version(it->path().filename().string());
        if (!v) continue;
        if (stamp_of(it->path() / "model.onnx").exists) out.push_back(*v);
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<std::int64_t> select_versions(const VersionPolicy& p,
                                          const std::vector<std::int64_t>& on_disk) {
    switch (p.kind) {
        case VersionPolicy::Kind::all: return on_disk;
        case VersionPolicy::Kind::latest: {
            const std::size_t n = std::min<std::size_t>(on_disk.size(), static_cast<std::size_t>(p.latest));
            return {on_disk.end() - static_cast<std::ptrdiff_t>(n), on_disk.end()};
        }
        case VersionPolicy::Kind::specific: {
            std::vector<std::int64_t> r;
            for (auto v : on_disk)
                if (std::find(p.versions.begin(), p.versions.end(), v) != p.versions.end())
                    r.push_back(v);
            return r;
        }
    }
    return {};
}

// What a model folder holds, as stamps: config.json, every version folder and its model.onnx.
std::vector<FileStamp> folder_signature(const fs::path& dir) {
    std::vector<FileStamp> sig{stamp_of(dir), stamp_of(dir / "config.json")};
    std::error_code ec;
    std::vector<fs::path> entries;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        entries.push_back(it->path());
    std::sort(entries.begin(), entries.end());
    for (const auto& e : entries) {
        sig.push_back(stamp_of(e));
        sig.push_back(stamp_of(e / "model.onnx"));
    }
    return sig;
}

// The batch sizes a batcher capped at `max_batch` forms: all up to 64, then powers of two and
// the cap.
std::vector<std::int64_t> warmup_sizes(std::size_t max_batch) {
    std::vector<std::int64_t> sizes;
    for (std::size_t b = 1; b <= max_batch; b = b < 64 ? b + 1 : b * 2)
        sizes.push_back(static_cast<std::int64_t>(b));
    if (sizes.back() != static_cast<std::int64_t>(max_batch))
        sizes.push_back(static_cast<std::int64_t>(max_batch));
    return sizes;
}

// Runs `engine` at each batch size on zeros; a model whose inputs are not [batch, static...]
// is left cold (the reason returned).
std::string warm_up(const InferenceEngine& engine, std::size_t max_batch) {
    for (const IOInfo& in : engine.inputs()) {
        if (!in.dtype || *in.dtype == DType::string || !in.shape.known || in.shape.dims.empty() ||
            in.shape.dims[0].is_static())
            return "input '" + in.name + "' has no symbolic batch dim";
        for (std::size_t d = 1; d < in.shape.dims.size(); ++d)
            if (!in.shape.dims[d].is_static())
                return "input '" + in.name + "' has a symbolic dim past the batch dim";
    }
    for (std::int64_t b : warmup_sizes(max_batch)) {
        std::vector<NamedTensor> inputs;
        for (const IOInfo& in : engine.inputs()) {
            std::vector<std::int64_t> dims{b};
            for (std::size_t d = 1; d < in.shape.dims.size(); ++d) dims.push_back(in.shape.dims[d].value);
            auto shape = Shape::make(dims);
            if (!shape) return shape.status().message();
            inputs.push_back({in.name, Tensor::zeros(*in.dtype, *shape)});
        }
        std::vector<NamedTensor> outputs;
        if (Status st = engine.try_run(inputs, outputs); !st)
            return "batch " + std::to_string(b) + ": " + st.message();
    }
    return {};
}

bool read_file(const fs::path& p, std::string& out) {
    std::ifstream f(p, std::ios::binary);
    if (!f) return false;
    std::ostringstream ss;
    ss << f.rdbuf();
    out = ss.str();
    return static_cast<bool>(f) || f.eof();
}

}  // namespace

ModelRepository::ModelRepository(fs::path root, RepositoryOptions options)
    : root_(std::move(root)), options_(std::move(options)) {}

ModelRepository::~ModelRepository() {
    shutdown(std::chrono::milliseconds(0));
}

void ModelRepository::log(const std::string& message) const {
    if (options_.log) options_.log(message);
}

namespace {
std::atomic<std::uint64_t> g_load_generation{0};
}  // namespace

StatusOr<std::shared_ptr<const ServedVersion>> ModelRepository::load_version(
    const std::string& name, std::int64_t version, const fs::path& file,
    const ModelConfig& config, std::shared_ptr<serving::ResultCache> cache) const {
    auto sv = std::make_shared<ServedVersion>();
    sv->cache = std::move(cache);
    sv->cache_version = std::to_string(version) + "#" + std::to_string(++g_load_generation);
    sv->name = name;
    sv->version = version;
    sv->platform = "onnx_onnxv1";
    sv->limits = config.limits;
    // The stamp before loading: a file replaced during the load is seen as changed again.
    sv->stamp = stamp_of(file);
    EngineOptions eo;
    eo.precision = config.precision;
    eo.num_threads = config.num_threads;
    eo.optimization_level = config.optimization_level;
    eo.limits.map_weights = config.map_weights;
    if (config.generate) return load_generative(std::move(sv), file, config, eo);
    try {
        auto engine = std::make_shared<InferenceEngine>(InferenceEngine::load(file, eo));
        if (config.warmup) {
            const auto t0 = std::chrono::steady_clock::now();
            const std::string cold = warm_up(*engine, config.batching.max_batch_size);
            const double ms = std::chrono::duration<double, std::milli>(
                                  std::chrono::steady_clock::now() - t0).count();
            log("'" + name + "' version " + std::to_string(version) +
                (cold.empty() ? ": warmed up batch sizes 1.." +
                                    std::to_string(config.batching.max_batch_size) + " in " +
                                    std::to_string(static_cast<long long>(ms)) + " ms"
                              : ": served without warm-up (" + cold + ")"));
        }
        sv->inputs = engine->inputs();
        sv->outputs = engine->outputs();
        sv->batcher = std::make_shared<serving::BatchingEngine>(std::move(engine), config.batching);
    } catch (const Error& e) {
        return Status::error(e.code(), "model '", name, "' version ", version, ": ",
                             e.message());
    } catch (const std::exception& e) {
        return Status::error(ErrorCode::internal, "model '", name, "' version ", version, ": ",
                             e.what());
    }
    return std::shared_ptr<const ServedVersion>(std::move(sv));
}

StatusOr<std::shared_ptr<const ServedVersion>> ModelRepository::load_generative(
    std::shared_ptr<ServedVersion> sv, const fs::path& file, const ModelConfig& config,
    const EngineOptions& engine) const {
    GeneratorOptions go = *config.generate;
    go.engine = engine;
    go.warmup = config.warmup;
    const auto t0 = std::chrono::steady_clock::now();
    auto loaded = Generator::try_load(file, go);
    if (!loaded)
        return Status::error(loaded.status().code(), "model '", sv->name, "' version ", sv->version,
                             " (generate): ", loaded.status().message());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    sv->generator = std::make_shared<GenerativeModel>(std::move(*loaded), go);
    const DecoderConfig& dc = sv->generator->config();
    const GeneratorMetrics m = sv->generator->metrics();
    log("'" + sv->name + "' version " + std::to_string(sv->version) + ": generative (" + dc.form +
        ", vocabulary " + std::to_string(dc.vocab_size) + ", " + std::to_string(m.kv_blocks_total) +
        " KV blocks in " + std::to_string(m.kv_bytes >> 20) + " MiB), loaded" +
        (go.warmup ? " and warmed up" : "") + " in " + std::to_string(static_cast<long long>(ms)) +
        " ms");
    // The generate extension's fields, as the metadata lists a model's tensors.
    const SymbolicShape ids{true, {Dim::named("sequence")}};
    sv->platform = "dsinfer_generate";
    sv->inputs = {IOInfo{"input_ids", DType::i64, ids}};
    sv->outputs = {IOInfo{"output_ids", DType::i64, ids}};
    return std::shared_ptr<const ServedVersion>(std::move(sv));
}

// ---- GenerativeModel ----

StatusOr<std::uint64_t> GenerativeModel::submit(GenerateRequest request, GenerateHandle& handle) {
    std::lock_guard lock(mutex_);
    if (closed_)
        return Status::error(ErrorCode::unavailable,
                             "the model is being replaced or the server is stopping");
    const std::uint64_t ticket = ++next_ticket_;
    handle = generator_.submit(std::move(request));
    calls_.emplace(ticket, handle);
    return ticket;
}

void GenerativeModel::done(std::uint64_t ticket) {
    std::lock_guard lock(mutex_);
    calls_.erase(ticket);
    if (calls_.empty()) idle_.notify_all();
}

bool GenerativeModel::drain(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    closed_ = true;
    if (idle_.wait_for(lock, timeout, [&] { return calls_.empty(); })) return true;
    // Cancelled ones end at the next step; their front ends answer them and call done().
    for (auto& [ticket, handle] : calls_) handle.cancel();
    return false;
}

void ModelRepository::retire(std::vector<std::shared_ptr<const ServedVersion>> old) {
    if (old.empty()) return;
    std::lock_guard lock(retire_mutex_);
    // Join the retirements that have finished, then drain these in the background: the
    // control operation that replaced them does not wait for their in-flight requests.
    std::erase_if(retiring_, [](Retiring& r) {
        if (!r.done->load()) return false;
        r.thread.join();
        return true;
    });
    auto done = std::make_shared<std::atomic<bool>>(false);
    retiring_.push_back(Retiring{
        std::thread([old = std::move(old), drain = options_.drain, done]() mutable {
            // Replaced cascades first: releasing one waits for its requests (~Cascade), whose
            // second stage may still be queued on a replaced member, which keeps taking
            // requests until it is shut down below.
            // A request being submitted to one right now holds it for a moment (its cascade
            // counts the request before that ends); nothing can find it any more. Then the
            // last reference goes here and ~Cascade waits for its requests.
            const auto until = std::chrono::steady_clock::now() + drain;
            for (auto& v : old) {
                if (!v->cascade) continue;
                while (v.use_count() > 1 && std::chrono::steady_clock::now() < until)
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                v.reset();
            }
            for (const auto& v : old) {
                if (v && v->batcher) v->batcher->shutdown(drain);
                if (v && v->generator) v->generator->drain(drain);
            }
            old.clear();
            done->store(true);
        }),
        done});
}

Status ModelRepository::load(const std::string& name) {
    if (!valid_model_name(name))
        return Status::error(ErrorCode::invalid_argument, "'", name,
                             "' is not a valid model name ([A-Za-z0-9_.-], not starting with '.')");
    std::lock_guard control(control_);
    const fs::path dir = root_ / name;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        return Status::error(ErrorCode::invalid_argument, "model '", name,
                             "' is not in the repository");
    ModelConfig config = options_.defaults;
    const fs::path config_file = dir / "config.json";
    const FileStamp config_stamp = stamp_of(config_file);
    auto fail = [&](const Status& s) {
        std::unique_lock lock(mutex_);
        if (auto it = models_.find(name); it != models_.end()) it->second.reason = s.message();
        else failed_[name] = s.message();
        log("load of '" + name + "' failed: " + s.message());
        return s;
    };
    if (config_stamp.exists) {
        std::string text;
        if (!read_file(config_file, text))
            return fail(Status::error(ErrorCode::io_error, "model '", name,
                                      "': cannot read config.json"));
        auto parsed = parse_model_config(text, options_.defaults);
        if (!parsed) return fail(Status::error(parsed.status().code(), "model '", name, "': ",
                                               parsed.status().message()));
        config = std::move(*parsed);
    }

    std::map<std::int64_t, std::shared_ptr<const ServedVersion>> current;
    FileStamp current_config_stamp;
    std::shared_ptr<serving::ResultCache> cache;
    {
        std::shared_lock lock(mutex_);
        if (auto it = models_.find(name); it != models_.end()) {
            current = it->second.versions;
            current_config_stamp = it->second.config_stamp;
            cache = it->second.cache;
        }
    }
    const bool config_changed = current_config_stamp != config_stamp;
    if (config_changed || !config.result_cache) cache.reset();
    if (config.result_cache && !cache)
        cache = std::make_shared<serving::ResultCache>(*config.result_cache);

    std::map<std::int64_t, std::shared_ptr<const ServedVersion>> next;
    if (config.cascade) {
        auto c = make_cascade(name, config);
        if (!c) {
            // Registered without versions: it is served once its members are
            // (refresh_cascades).
            std::unique_lock lock(mutex_);
            Model& m = models_[name];
            m.name = name;
            m.config = config;
            m.config_stamp = config_stamp;
            m.reason = c.status().message();
            std::vector<std::shared_ptr<const ServedVersion>> old;
            for (auto& [v, sv] : m.versions) old.push_back(sv);
            m.versions.clear();
            failed_.erase(name);
            lock.unlock();
            retire(std::move(old));
            log("cascade '" + name + "' waits: " + c.status().message());
            return c.status();
        }
        next[1] = std::move(*c);
    } else {
        const auto wanted = select_versions(config.version_policy, versions_on_disk(dir));
        if (wanted.empty())
            return fail(Status::error(ErrorCode::invalid_argument, "model '", name,
                                      "': no version folder with a model.onnx matches its "
                                      "version policy"));
        for (std::int64_t v : wanted) {
            const fs::path file = dir / std::to_string(v) / "model.onnx";
            auto it = current.find(v);
            if (it != current.end() && !config_changed && it->second->stamp == stamp_of(file)) {
                next[v] = it->second;  // unchanged: keep serving it
                continue;
            }
            auto loaded = load_version(name, v, file, config, cache);
            if (!loaded) return fail(loaded.status());
            next[v] = std::move(*loaded);
            log("loaded '" + name + "' version " + std::to_string(v));
        }
    }

    std::vector<std::shared_ptr<const ServedVersion>> old;
    {
        std::unique_lock lock(mutex_);
        if (shut_down_)
            return Status::error(ErrorCode::unavailable, "the repository is shutting down");
        Model& m = models_[name];
        m.name = name;
        m.config = config;
        m.config_stamp = config_stamp;
        m.cache = cache;
        m.reason.clear();
        for (auto& [v, sv] : m.versions) {
            auto n = next.find(v);
            if (n == next.end() || n->second != sv) old.push_back(sv);
        }
        m.versions = std::move(next);
        failed_.erase(name);
    }
    // The cascades over this model are rebuilt on its new versions before the old ones are
    // retired, and retire() lets the old cascades finish first.
    auto cascades = refresh_cascades(name);
    // Moved, not copied: retire() waits for an old cascade only once it holds the last reference.
    old.insert(old.end(), std::make_move_iterator(cascades.begin()),
               std::make_move_iterator(cascades.end()));
    retire(std::move(old));
    return Status::ok();
}

StatusOr<std::shared_ptr<const ServedVersion>> ModelRepository::make_cascade(
    const std::string& name, const ModelConfig& config) {
    const CascadeConfig& cc = *config.cascade;
    std::shared_ptr<const ServedVersion> small, large;
    {
        std::shared_lock lock(mutex_);
        auto top = [&](const std::string& member) -> std::shared_ptr<const ServedVersion> {
            auto it = models_.find(member);
            if (it == models_.end() || it->second.versions.empty()) return nullptr;
            return it->second.versions.rbegin()->second;
        };
        small = top(cc.small);
        large = top(cc.large);
    }
    for (const auto& [role, member, sv] :
         {std::tuple{"small", &cc.small, small}, std::tuple{"large", &cc.large, large}}) {
        if (!sv || !sv->batcher)
            return Status::error(ErrorCode::unavailable, "cascade '", name, "': its ", role,
                                 " model '", *member, "' is not served (as an ONNX model)");
    }
    auto sv = std::make_shared<ServedVersion>();
    sv->name = name;
    sv->version = 1;
    sv->platform = "dsinfer_cascade";
    sv->limits = config.limits;
    sv->inputs = small->inputs;
    sv->outputs = small->outputs;
    sv->cache_version = "1#" + std::to_string(++g_load_generation);
    try {
        sv->cascade = std::make_shared<serving::Cascade>(
            small->batcher, large->batcher,
            serving::CascadeOptions::max_softmax_below(
                cc.output, cc.threshold,
                cc.output_is_probabilities ? serving::CascadeOptions::Scores::probabilities
                                           : serving::CascadeOptions::Scores::logits));
    } catch (const Error& e) {
        return Status::error(e.code(), "cascade '", name, "': ", e.message());
    }
    log("cascade '" + name + "': '" + cc.small + "' first, '" + cc.large + "' below " +
        std::to_string(cc.threshold));
    return std::shared_ptr<const ServedVersion>(std::move(sv));
}

std::vector<std::shared_ptr<const ServedVersion>> ModelRepository::refresh_cascades(
    const std::string& member) {
    std::vector<std::shared_ptr<const ServedVersion>> replaced;
    std::vector<std::pair<std::string, ModelConfig>> readers;
    {
        std::shared_lock lock(mutex_);
        for (const auto& [n, m] : models_)
            if (m.config.cascade && (m.config.cascade->small == member || m.config.cascade->large == member))
                readers.emplace_back(n, m.config);
    }
    for (const auto& [n, config] : readers) {
        auto c = make_cascade(n, config);
        std::vector<std::shared_ptr<const ServedVersion>> old;
        {
            std::unique_lock lock(mutex_);
            auto it = models_.find(n);
            if (it == models_.end()) continue;
            for (auto& [v, sv] : it->second.versions) old.push_back(sv);
            it->second.versions.clear();
            if (c) {
                it->second.versions[1] = std::move(*c);
                it->second.reason.clear();
            } else {
                it->second.reason = c.status().message();
            }
        }
        replaced.insert(replaced.end(), old.begin(), old.end());
    }
    return replaced;
}

Status ModelRepository::unload(const std::string& name) {
    std::lock_guard control(control_);
    std::vector<std::shared_ptr<const ServedVersion>> old;
    {
        std::unique_lock lock(mutex_);
        auto it = models_.find(name);
        if (it == models_.end())
            return Status::error(ErrorCode::invalid_argument, "model '", name,
                                 "' is not loaded");
        for (auto& [v, sv] : it->second.versions) old.push_back(sv);
        models_.erase(it);
    }
    log("unloaded '" + name + "'");
    auto cascades = refresh_cascades(name);
    // Moved, not copied: retire() waits for an old cascade only once it holds the last reference.
    old.insert(old.end(), std::make_move_iterator(cascades.begin()),
               std::make_move_iterator(cascades.end()));
    retire(std::move(old));
    return Status::ok();
}

bool ModelRepository::has_folder(const std::string& name) const {
    std::error_code ec;
    return valid_model_name(name) && fs::is_directory(root_ / name, ec);
}

bool ModelRepository::has_model(const std::string& name) const {
    std::shared_lock lock(mutex_);
    return models_.count(name) != 0;
}

StatusOr<std::vector<std::string>> ModelRepository::model_folders() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string n = it->path().filename().string();
        std::error_code dir_ec;
        if (valid_model_name(n) && fs::is_directory(it->path(), dir_ec)) names.push_back(n);
    }
    if (ec)
        return Status::error(ErrorCode::io_error, "cannot list the model repository: ",
                             ec.message());
    std::sort(names.begin(), names.end());
    return names;
}

Status ModelRepository::load_all() {
    DSINFER_ASSIGN_OR_RETURN(const auto names, model_folders());
    std::vector<std::pair<std::string, Status>> failures;
    for (const auto& n : names) {
        Status s = load(n);
        if (!s) failures.emplace_back(n, s);
    }
    // A cascade loaded before its members is served once they are (refresh_cascades).
    for (const auto& [n, s] : failures)
        if (!find(n, "")) return s;
    return Status::ok();
}

void ModelRepository::poll(bool load_new) {
    auto listed = model_folders();
    if (!listed) return;  // a repository that cannot be listed right now keeps what is served
    const std::vector<std::string>& on_disk = *listed;
    struct Seen {
        std::string name;
        FileStamp config_stamp;
        std::map<std::int64_t, FileStamp> stamps;
        VersionPolicy policy;
        bool cascade = false;
    };
    std::vector<Seen> served;
    {
        std::shared_lock lock(mutex_);
        for (const auto& [n, m] : models_) {
            Seen s{n, m.config_stamp, {}, m.config.version_policy, m.config.cascade.has_value()};
            for (const auto& [v, sv] : m.versions) s.stamps[v] = sv->stamp;
            served.push_back(std::move(s));
        }
    }
    for (const auto& s : served) {
        if (std::find(on_disk.begin(), on_disk.end(), s.name) == on_disk.end()) {
            (void)unload(s.name);
            continue;
        }
        const fs::path dir = root_ / s.name;
        bool changed = stamp_of(dir / "config.json") != s.config_stamp;
        if (!changed && !s.cascade) {
            const auto wanted = select_versions(s.policy, versions_on_disk(dir));
            std::vector<std::int64_t> have;
            for (const auto& [v, st] : s.stamps) have.push_back(v);
            changed = wanted != have;
            for (auto v : wanted)
                if (!changed && stamp_of(dir / std::to_string(v) / "model.onnx") != s.stamps.at(v))
                    changed = true;
        }
        if (changed) (void)load(s.name);
    }
    if (load_new) {
        for (const auto& n : on_disk) {
            bool known = false;
            {
                std::shared_lock lock(mutex_);
                known = models_.count(n) != 0;
            }
            if (!known) {
                // A folder that failed is tried again only once its files change.
                const auto sig = folder_signature(root_ / n);
                {
                    std::lock_guard lock(poll_mutex_);
                    auto it = poll_failed_.find(n);
                    if (it != poll_failed_.end() && it->second == sig) continue;
                }
                const bool ok = load(n).is_ok();
                std::lock_guard lock(poll_mutex_);
                if (ok) poll_failed_.erase(n);
                else poll_failed_[n] = sig;
            }
        }
    }
}

std::vector<ModelStatus> ModelRepository::index() const {
    std::vector<ModelStatus> out;
    auto listed = model_folders();
    const std::vector<std::string> on_disk = listed ? *listed : std::vector<std::string>{};
    std::shared_lock lock(mutex_);
    for (const auto& n : on_disk) {
        auto it = models_.find(n);
        if (it == models_.end()) {
            auto f = failed_.find(n);
            out.push_back({n, "", "UNAVAILABLE", f == failed_.end() ? "unloaded" : f->second});
            continue;
        }
        for (const auto& [v, sv] : it->second.versions)
            out.push_back({n, std::to_string(v), "READY", ""});
        if (it->second.versions.empty())
            out.push_back({n, "", "UNAVAILABLE", it->second.reason});
    }
    for (const auto& [n, m] : models_)
        if (std::find(on_disk.begin(), on_disk.end(), n) == on_disk.end())
            for (const auto& [v, sv] : m.versions)
                out.push_back({n, std::to_string(v), "READY", "its folder was removed"});
    return out;
}

std::shared_ptr<const ServedVersion> ModelRepository::find(std::string_view name,
                                                           std::string_view version) const {
    std::shared_lock lock(mutex_);
    auto it = models_.find(name);
    if (it == models_.end() || it->second.versions.empty()) return nullptr;
    if (version.empty()) return it->second.versions.rbegin()->second;
    const auto v = parse_version(version);
    if (!v) return nullptr;
    auto vi = it->second.versions.find(*v);
    return vi == it->second.versions.end() ? nullptr : vi->second;
}

std::vector<std::int64_t> ModelRepository::versions(std::string_view name) const {
    std::shared_lock lock(mutex_);
    std::vector<std::int64_t> out;
    if (auto it = models_.find(name); it != models_.end())
        for (const auto& [v, sv] : it->second.versions) out.push_back(v);
    return out;
}

std::vector<std::string> ModelRepository::models() const {
    std::shared_lock lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [n, m] : models_)
        if (!m.versions.empty()) out.push_back(n);
    return out;
}

std::optional<std::chrono::steady_clock::time_point> request_deadline(const RequestTimeout& t,
                                                                      const ModelLimits& l) {
    // The request's own value (0: no deadline), else the model's, else the server's.
    std::int64_t us = t.requested_us      ? *t.requested_us
                      : l.timeout_us >= 0 ? l.timeout_us
                                          : t.server_default_us;
    if (l.max_timeout_us > 0 && (us <= 0 || us > l.max_timeout_us)) us = l.max_timeout_us;
    if (us <= 0) return std::nullopt;
    return std::chrono::steady_clock::now() + std::chrono::microseconds(us);
}

namespace {

/// The model's "limits" on an inference's inputs: too_large naming the limit, or ok.
ApiError check_input_limits(const std::string& name, const std::vector<NamedTensor>& inputs,
                            const ModelLimits& l) {
    std::size_t bytes = 0;
    for (const NamedTensor& in : inputs) {
        if (l.max_tensor_elements > 0 && in.tensor.num_elements() > l.max_tensor_elements)
            return ApiError{ApiCode::too_large,
                            "input '" + in.name + "' has " +
                                std::to_string(in.tensor.num_elements()) + " elements; model '" +
                                name + "' takes at most " + std::to_string(l.max_tensor_elements) +
                                " (its config.json limits.max_tensor_elements)"};
        bytes += static_cast<std::size_t>(in.tensor.num_bytes());
    }
    if (l.max_request_bytes > 0 && bytes > l.max_request_bytes)
        return ApiError{ApiCode::too_large, "the inputs hold " + std::to_string(bytes) +
                                                " bytes; model '" + name + "' takes at most " +
                                                std::to_string(l.max_request_bytes) +
                                                " (its config.json limits.max_request_bytes)"};
    return {};
}

}  // namespace

void ModelRepository::submit(const std::string& name, const std::string& version,
                             std::vector<NamedTensor> inputs, serving::RequestOptions options,
                             const RequestTimeout& timeout, InferDone done) const {
    std::shared_ptr<const ServedVersion> target;
    {
        // Resolve and submit under the shared lock: a reload's swap (exclusive) orders after
        // the submission, and the replaced engine answers what it has accepted while it drains.
        std::shared_lock lock(mutex_);
        if (shut_down_) {
            lock.unlock();
            done(ApiError{ApiCode::unavailable, "the server is shutting down"}, {}, {});
            return;
        }
        if (ApiError e = resolve_locked(name, version, target); !e.ok()) {
            lock.unlock();
            done(std::move(e), {}, {});
            return;
        }
        std::string v = std::to_string(target->version);
        if (target->generator) {
            lock.unlock();
            done(
                ApiError{ApiCode::bad_request, "model '" + name +
                                                   "' is a generative model: POST its token ids to "
                                                   "/v2/models/" +
                                                   name + "/generate (or generate_stream)"},
                {}, std::move(v));
            return;
        }
        if (ApiError e = check_input_limits(name, inputs, target->limits); !e.ok()) {
            lock.unlock();
            done(std::move(e), {}, std::move(v));
            return;
        }
        options.deadline = request_deadline(timeout, target->limits);
        // The request's priority on this model's levels: the middle one by default, the least
        // urgent one for a priority past them.
        const int levels = target->cascade
                               ? target->cascade->small_model()->options().priority_levels
                               : target->batcher->options().priority_levels;
        options.priority = options.priority == kDefaultPriority
                               ? (levels - 1) / 2
                               : std::clamp(options.priority, 0, levels - 1);
        if (target->cache) {
            if (auto hit = target->cache->lookup(name, target->cache_version, inputs)) {
                lock.unlock();
                done({}, std::move(*hit), std::move(v));
                return;
            }
        }
        // The inputs share their buffers with the request (copies of tensors are handles),
        // kept to store the result under.
        std::vector<NamedTensor> key;
        if (target->cache) key = inputs;
        auto answer = [done = std::move(done), v = std::move(v), key = std::move(key),
                       cache = target->cache, model = name,
                       cache_version = target->cache_version](
                          StatusOr<serving::BatchingEngine::Outputs> r) {
            if (!r) return done(api_error(r.status()), {}, v);
            if (cache) cache->insert(model, cache_version, key, *r);
            done({}, std::move(*r), v);
        };
        // An immediate rejection runs `done` here, under the shared lock: `done` must not call
        // the repository (the front ends' callbacks only answer their request).
        if (target->cascade)
            target->cascade->submit(std::move(inputs), std::move(answer), std::move(options));
        else
            target->batcher->submit(std::move(inputs), std::move(answer), std::move(options));
    }
}

ApiError ModelRepository::resolve_locked(const std::string& name, const std::string& version,
                                         std::shared_ptr<const ServedVersion>& out) const {
    auto it = models_.find(name);
    if (it == models_.end() || it->second.versions.empty())
        return ApiError{ApiCode::not_found, "unknown model '" + name + "'"};
    if (version.empty()) {
        out = it->second.versions.rbegin()->second;
        return {};
    }
    const auto v = parse_version(version);
    auto vi = v ? it->second.versions.find(*v) : it->second.versions.end();
    if (vi == it->second.versions.end())
        return ApiError{ApiCode::not_found,
                        "model '" + name + "' has no version '" + version + "' loaded"};
    out = vi->second;
    return {};
}

ApiError ModelRepository::generate(const std::string& name, const std::string& version,
                                   const GenerateCall& call, GenerateRequest request,
                                   const RequestTimeout& timeout, GenerateSubmission& out) const {
    // Resolve and submit under the shared lock, as submit() does: a reload's swap orders
    // after the submission, and the replaced Generator's drain waits for it.
    std::shared_lock lock(mutex_);
    if (shut_down_) return ApiError{ApiCode::unavailable, "the server is shutting down"};
    std::shared_ptr<const ServedVersion> target;
    if (ApiError e = resolve_locked(name, version, target); !e.ok()) return e;
    if (!target->generator)
        return ApiError{ApiCode::bad_request,
                        "model '" + name +
                            "' is not a generative model (its config.json has no "
                            "'generate' section): POST its tensors to /v2/models/" +
                            name + "/infer"};
    if (ApiError e = check_generate_call(call, target->generator->config()); !e.ok()) return e;
    const ModelLimits& l = target->limits;
    if (l.max_tensor_elements > 0 &&
        static_cast<std::int64_t>(call.input_ids.size()) > l.max_tensor_elements)
        return ApiError{ApiCode::too_large, "'input_ids' holds " +
                                                std::to_string(call.input_ids.size()) +
                                                " tokens; model '" + name + "' takes at most " +
                                                std::to_string(l.max_tensor_elements) +
                                                " (its config.json limits.max_tensor_elements)"};
    if (l.max_tokens > 0 && call.max_tokens > l.max_tokens)
        return ApiError{ApiCode::too_large,
                        "parameter 'max_tokens' is " + std::to_string(call.max_tokens) +
                            "; model '" + name + "' generates at most " +
                            std::to_string(l.max_tokens) + " (its config.json limits.max_tokens)"};
    request.deadline = request_deadline(timeout, l);
    auto ticket = target->generator->submit(std::move(request), out.handle);
    if (!ticket) return api_error(ticket.status());
    out.model = target->generator;
    out.version = std::to_string(target->version);
    out.ticket = *ticket;
    return {};
}

namespace {

// The Generators' metrics in Prometheus text, one family after another (a family's samples
// must follow its HELP and TYPE lines together), per served generative version.
struct GenerateSeries {
    std::string requests, tokens, sequences, kv_blocks, preempted, steps, ttft, inter_token;
    bool any = false;

    void add(const std::string& labels, const GeneratorMetrics& m) {
        any = true;
        auto line = [&](std::string& family, const char* name, const std::string& extra,
                        const std::string& value) {
            family += std::string(name) + labels + extra + "} " + value + "\n";
        };
        const auto n = [](auto v) { return std::to_string(v); };
        line(requests, "dsinfer_generate_requests_total", ",outcome=\"submitted\"", n(m.requests));
        line(requests, "dsinfer_generate_requests_total", ",outcome=\"finished\"", n(m.finished));
        line(requests, "dsinfer_generate_requests_total", ",outcome=\"cancelled\"", n(m.cancelled));
        line(requests, "dsinfer_generate_requests_total", ",outcome=\"error\"", n(m.errors));
        line(tokens, "dsinfer_generate_tokens_total", ",kind=\"prompt\"", n(m.prompt_tokens));
        line(tokens, "dsinfer_generate_tokens_total", ",kind=\"prefix_hit\"",
             n(m.prefix_hit_tokens));
        line(tokens, "dsinfer_generate_tokens_total", ",kind=\"generated\"", n(m.generated_tokens));
        line(sequences, "dsinfer_generate_sequences", ",state=\"running\"", n(m.running));
        line(sequences, "dsinfer_generate_sequences", ",state=\"queued\"", n(m.queued));
        line(kv_blocks, "dsinfer_generate_kv_blocks", ",state=\"used\"", n(m.kv_blocks_used));
        line(kv_blocks, "dsinfer_generate_kv_blocks", ",state=\"total\"", n(m.kv_blocks_total));
        line(preempted, "dsinfer_generate_preempted_total", "", n(m.preempted));
        line(steps, "dsinfer_generate_steps_total", "", n(m.steps));
        summary(ttft, "dsinfer_generate_ttft_seconds", labels, m.ttft);
        summary(inter_token, "dsinfer_generate_inter_token_seconds", labels, m.inter_token);
    }

    static void summary(std::string& family, const char* name, const std::string& labels,
                        const HistogramSnapshot& h) {
        for (const char* q : {"0.5", "0.9", "0.99"})
            family += std::string(name) + labels + ",quantile=\"" + q + "\"} " +
                      std::to_string(h.quantile_ns(std::stod(q)) / 1e9) + "\n";
        family += std::string(name) + "_sum" + labels + "} " +
                  std::to_string(static_cast<double>(h.sum_ns) / 1e9) + "\n";
        family += std::string(name) + "_count" + labels + "} " + std::to_string(h.count) + "\n";
    }

    std::string text() const {
        if (!any) return {};
        auto family = [](const char* name, const char* type, const char* help,
                         const std::string& samples) {
            return std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type +
                   "\n" + samples;
        };
        return family("dsinfer_generate_requests_total", "counter",
                      "Generations submitted, and how they ended (finished: length or stop "
                      "token).",
                      requests) +
               family("dsinfer_generate_tokens_total", "counter",
                      "Prompt tokens computed, prompt tokens found in the prefix cache, tokens "
                      "generated.",
                      tokens) +
               family("dsinfer_generate_sequences", "gauge",
                      "Sequences in the Generator's steps, and waiting to be admitted.",
                      sequences) +
               family("dsinfer_generate_kv_blocks", "gauge",
                      "KV cache blocks held by sequences, and in the cache.", kv_blocks) +
               family("dsinfer_generate_preempted_total", "counter",
                      "Sequences preempted when the KV cache ran out (recomputed later).",
                      preempted) +
               family("dsinfer_generate_steps_total", "counter", "Generator steps run.", steps) +
               family("dsinfer_generate_ttft_seconds", "summary",
                      "Time from submission to the first generated token.", ttft) +
               family("dsinfer_generate_inter_token_seconds", "summary",
                      "Time between a sequence's consecutive tokens.", inter_token);
    }
};

}  // namespace

std::string ModelRepository::prometheus() const {
    std::vector<std::shared_ptr<const ServedVersion>> all;
    {
        std::shared_lock lock(mutex_);
        for (const auto& [n, m] : models_)
            for (const auto& [v, sv] : m.versions) all.push_back(sv);
    }
    std::vector<MetricsSnapshot> snaps;
    snaps.reserve(all.size());
    std::string queue =
        "# HELP dsinfer_queue_requests Requests waiting in the model's batcher.\n"
        "# TYPE dsinfer_queue_requests gauge\n";
    std::string running =
        "# HELP dsinfer_running_requests Requests in batches executing.\n"
        "# TYPE dsinfer_running_requests gauge\n";
    std::string cascade =
        "# HELP dsinfer_cascade_rows_total Rows a cascade's rule judged, and those it escalated.\n"
        "# TYPE dsinfer_cascade_rows_total counter\n";
    std::string cache =
        "# HELP dsinfer_result_cache_lookups_total Result cache lookups by outcome.\n"
        "# TYPE dsinfer_result_cache_lookups_total counter\n";
    std::string cache_held =
        "# HELP dsinfer_result_cache_bytes Bytes of inputs and outputs the result cache holds.\n"
        "# TYPE dsinfer_result_cache_bytes gauge\n";
    GenerateSeries gen;
    std::vector<std::shared_ptr<const ServedVersion>> batched;
    std::vector<const serving::ResultCache*> caches_seen;
    for (const auto& sv : all) {
        const std::string labels =
            "{model=\"" + sv->name + "\",version=\"" + std::to_string(sv->version) + "\"";
        if (sv->cache && std::find(caches_seen.begin(), caches_seen.end(), sv->cache.get()) ==
                             caches_seen.end()) {
            caches_seen.push_back(sv->cache.get());
            const auto cs = sv->cache->stats();
            const std::string ml = "{model=\"" + sv->name + "\"";
            cache += "dsinfer_result_cache_lookups_total" + ml + ",outcome=\"hit\"} " +
                     std::to_string(cs.hits) + "\n";
            cache += "dsinfer_result_cache_lookups_total" + ml + ",outcome=\"miss\"} " +
                     std::to_string(cs.misses) + "\n";
            cache_held += "dsinfer_result_cache_bytes" + ml + "} " + std::to_string(cs.bytes) + "\n";
        }
        if (sv->cascade) {
            const auto st = sv->cascade->stats();
            cascade += "dsinfer_cascade_rows_total" + labels + ",path=\"judged\"} " +
                       std::to_string(st.rows) + "\n";
            cascade += "dsinfer_cascade_rows_total" + labels + ",path=\"escalated\"} " +
                       std::to_string(st.escalated_rows) + "\n";
            continue;
        }
        if (sv->generator) {
            gen.add(labels, sv->generator->metrics());
            continue;
        }
        if (!sv->batcher) continue;
        batched.push_back(sv);
        snaps.push_back(sv->batcher->metrics());
        const auto st = sv->batcher->batching_state();
        queue += "dsinfer_queue_requests" + labels + "} " + std::to_string(st.queued) + "\n";
        running += "dsinfer_running_requests" + labels + "} " + std::to_string(st.running) + "\n";
    }
    std::vector<PrometheusSeries> series;
    for (std::size_t i = 0; i < batched.size(); ++i)
        series.push_back({&snaps[i], {{"model", batched[i]->name},
                                      {"version", std::to_string(batched[i]->version)}}});
    std::string out = series.empty() ? std::string() : to_prometheus(series, "dsinfer");
    return out + queue + running + cascade + cache + cache_held + gen.text();
}

bool ModelRepository::shutdown(std::chrono::milliseconds drain) {
    std::vector<std::shared_ptr<const ServedVersion>> all;
    {
        std::unique_lock lock(mutex_);
        shut_down_ = true;
        for (auto& [n, m] : models_)
            for (auto& [v, sv] : m.versions) all.push_back(sv);
    }
    // One deadline for all: each batcher gets what is left of it.
    const auto deadline = std::chrono::steady_clock::now() + drain;
    bool finished = true;
    for (const auto& sv : all) {
        const auto left = std::max(std::chrono::milliseconds(0),
                                   std::chrono::duration_cast<std::chrono::milliseconds>(
                                       deadline - std::chrono::steady_clock::now()));
        if (sv->batcher && !sv->batcher->shutdown(left)) finished = false;
        if (sv->generator && !sv->generator->drain(left)) finished = false;
    }
    std::vector<Retiring> threads;
    {
        std::lock_guard lock(retire_mutex_);
        threads.swap(retiring_);
    }
    for (auto& r : threads)
        if (r.thread.joinable()) r.thread.join();
    return finished;
}

}  // namespace dsinfer::server
