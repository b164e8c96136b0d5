// dsinfer-cascade-digits — a model cascade (dsinfer/cascade.hpp) on the held-out 8x8 digits:
// the small model (digits_small.onnx, logistic regression) answers every row, and the rows
// whose top softmax probability is below a threshold are answered by a large model.
//
// Usage: dsinfer-cascade-digits [MODEL_DIR] [--thresholds T,T,...] [--batch N] [--repeats N]
//                               [--threads N] [--min-pass-ms MS]
//   MODEL_DIR holds digits_small.onnx, digits.onnx, digits_test.csv and, when present,
//   digits_large.onnx (tools/train_digits.py --small --large); it defaults to the models/digits
//   folder of the source tree. Each large model found (digits.onnx, the 64-64-10 MLP, and
//   digits_large.onnx, a 64-256-256-10 MLP) is evaluated in turn.
//
// For each large model and threshold it prints the fraction of rows escalated, the accuracy of
// the cascade against the large model alone, and the throughput: the held-out rows are sent as
// requests of --batch rows through Cascade::run() (both stages on this thread), one timed pass
// per configuration, the configurations alternating over --repeats rounds after a warm-up; a
// pass goes over the rows as many times as the large model alone needs to take --min-pass-ms.
// rows/s is the median pass, also given as a ratio to the large model alone
// (BatchingEngine::run()); the small model alone is timed too, the cascade's floor.
// It also checks that submit() (the two batchers) answers every request like run().
//
// Exit status: 0 on success; 1 if a check fails (submit() and run() disagree, or the escalated
// fraction falls as the threshold rises); 2 if a model or the data cannot be loaded or run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsinfer/cascade.hpp"
#include "dsinfer/dsinfer.hpp"
#include "../digits/digits_data.hpp"

#ifndef DSINFER_DIGITS_DEFAULT_DIR
#define DSINFER_DIGITS_DEFAULT_DIR "models/digits"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using dsinfer::NamedTensor;
using dsinfer::Tensor;
using dsinfer::serving::BatchingEngine;
using dsinfer::serving::Cascade;
using dsinfer::serving::CascadeOptions;

using digits::Dataset;
using digits::kClasses;
using digits::kPixels;
using digits::read_csv;

struct Args {
    std::filesystem::path dir = DSINFER_DIGITS_DEFAULT_DIR;
    std::vector<double> thresholds{0.5, 0.7, 0.9, 0.99};
    std::int64_t batch = 32;
    int repeats = 7;
    int threads = 0;
    double min_pass_ms = 50.0;
};

[[noreturn]] void usage(const char* argv0, int code) {
    std::printf(
        "usage: %s [MODEL_DIR] [--thresholds T,T,...] [--batch N] [--repeats N] [--threads N]\n"
        "          [--min-pass-ms MS]\n"
        "  MODEL_DIR: digits_small.onnx, digits.onnx, digits_test.csv [, digits_large.onnx]\n"
        "             (default: %s)\n"
        "  --thresholds  top-probability thresholds below which a row escalates "
        "(default 0.5,0.7,0.9,0.99)\n"
        "  --batch       rows per request (default 32)\n"
        "  --repeats     timed passes per configuration, alternating (default 7)\n"
        "  --threads     EngineOptions::num_threads of each engine (default 0: the processors,\n"
        "                nodes too small to gain from threads on one)\n"
        "  --min-pass-ms a timed pass repeats the rows until the large model alone takes this "
        "long (default 50)\n",
        argv0, DSINFER_DIGITS_DEFAULT_DIR);
    std::exit(code);
}

Args parse_args(int argc, char** argv) {
    Args a;
    bool dir_given = false;
    auto number = [&](int& i) -> double {
        if (i + 1 >= argc) usage(argv[0], 2);
        char* end = nullptr;
        const double v = std::strtod(argv[++i], &end);
        if (end == argv[i] || *end != '\0') usage(argv[0], 2);
        return v;
    };
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") usage(argv[0], 0);
        if (arg == "--batch") {
            a.batch = static_cast<std::int64_t>(number(i));
        } else if (arg == "--repeats") {
            a.repeats = static_cast<int>(number(i));
        } else if (arg == "--threads") {
            a.threads = static_cast<int>(number(i));
        } else if (arg == "--min-pass-ms") {
            a.min_pass_ms = number(i);
        } else if (arg == "--thresholds") {
            if (i + 1 >= argc) usage(argv[0], 2);
            a.thresholds.clear();
            std::stringstream ss(argv[++i]);
            std::string item;
            while (std::getline(ss, item, ',')) {
                char* end = nullptr;
                a.thresholds.push_back(std::strtod(item.c_str(), &end));
                if (item.empty() || *end != '\0') usage(argv[0], 2);
            }
        } else if (!dir_given && !arg.empty() && arg[0] != '-') {
            a.dir = arg;
            dir_given = true;
        } else {
            usage(argv[0], 2);
        }
    }
    if (a.batch < 1 || a.repeats < 1 || a.threads < 0 || !(a.min_pass_ms >= 0) ||
        a.thresholds.empty())
        usage(argv[0], 2);
    std::sort(a.thresholds.begin(), a.thresholds.end());
    return a;
}

std::shared_ptr<BatchingEngine> load(const std::filesystem::path& file, int threads) {
    dsinfer::EngineOptions o;
    o.num_threads = threads;
    auto engine =
        std::make_shared<const dsinfer::InferenceEngine>(dsinfer::InferenceEngine::load(file, o));
    return std::make_shared<BatchingEngine>(std::move(engine));
}

/// The argmax of each row of `logits` (float32 [rows, 10]) appended to `pred`.
void append_predictions(const std::vector<NamedTensor>& out, std::vector<int>& pred) {
    const Tensor logits = dsinfer::NamedTensors(out).get("logits");  // a copy (shared buffer)
    const float* p = logits.data<float>();
    for (std::int64_t r = 0; r < logits.shape()[0]; ++r, p += kClasses)
        pred.push_back(static_cast<int>(std::max_element(p, p + kClasses) - p));
}

double accuracy(const std::vector<int>& pred, const std::vector<int>& labels) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < labels.size(); ++i) ok += pred[i] == labels[i] ? 1 : 0;
    return static_cast<double>(ok) / static_cast<double>(labels.size());
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// One configuration: a model alone, or a cascade at one threshold.
struct Config {
    std::string name;
    const BatchingEngine* alone = nullptr;  // a model alone, or
    std::unique_ptr<Cascade> cascade;       // a cascade
    std::vector<int> pred;
    std::vector<double> rows_per_s;
    double escalated = 0.0;           // of the rows
    double escalated_requests = 0.0;  // of the requests: those that ran the large model too
};

}  // namespace

int main(int argc, char** argv) {
    const Args args = parse_args(argc, argv);
    std::shared_ptr<BatchingEngine> small;
    std::vector<std::pair<std::string, std::shared_ptr<BatchingEngine>>> larges;
    Dataset data;
    try {
        small = load(args.dir / "digits_small.onnx", args.threads);
        for (const char* name : {"digits.onnx", "digits_large.onnx"})
            if (std::filesystem::exists(args.dir / name))
                larges.emplace_back(name, load(args.dir / name, args.threads));
        if (larges.empty())
            throw std::runtime_error("no large model (digits.onnx) in " + args.dir.string());
        data = read_csv(args.dir / "digits_test.csv");
    } catch (const std::exception& e) {
        std::fprintf(stderr,
                     "dsinfer-cascade-digits: %s\n(digits_small.onnx and "
                     "digits_large.onnx: tools/train_digits.py --small --large)\n",
                     e.what());
        return 2;
    }
    const auto n = static_cast<std::int64_t>(data.labels.size());
    // Requests of args.batch rows over the dataset's memory (no copies).
    std::vector<std::vector<NamedTensor>> requests;
    for (std::int64_t r0 = 0; r0 < n; r0 += args.batch) {
        const std::int64_t rows = std::min(args.batch, n - r0);
        requests.push_back({{"pixels", Tensor::wrap(data.pixels.data() + r0 * kPixels,
                                                    dsinfer::DType::f32, {rows, kPixels})}});
    }
    std::printf("data:    %lld held-out rows from %s, requests of %lld rows\n",
                static_cast<long long>(n), (args.dir / "digits_test.csv").string().c_str(),
                static_cast<long long>(args.batch));
    std::printf("threads: num_threads %d per engine; throughput: median of %d alternating passes\n",
                args.threads, args.repeats);

    int rc = 0;
    try {
        std::printf("small:   digits_small.onnx (%zu nodes)\n",
                    small->engine()->graph().nodes.size());

        for (const auto& [large_name, large] : larges) {
            std::vector<Config> configs;
            // [0] the large model alone (the reference), [1] the small one, then the cascades.
            configs.push_back(Config{"large alone", large.get(), nullptr, {}, {}, 0.0});
            configs.push_back(Config{"small alone", small.get(), nullptr, {}, {}, 0.0});
            for (const double t : args.thresholds) {
                char name[32];
                std::snprintf(name, sizeof name, "cascade %.2f", t);
                configs.push_back(
                    Config{name,
                           nullptr,
                           std::make_unique<Cascade>(
                               small, large, CascadeOptions::max_softmax_below("logits", t)),
                           {},
                           {},
                           0.0});
            }
            // `loops` times over every request, in seconds; the predictions of the first pass
            // kept.
            int loops = 1;
            auto pass = [&](Config& c) {
                std::vector<int> pred;
                pred.reserve(static_cast<std::size_t>(n));
                const auto start = Clock::now();
                for (int l = 0; l < loops; ++l) {
                    for (const auto& req : requests)
                        append_predictions(c.cascade ? c.cascade->run(req) : c.alone->run(req),
                                           pred);
                    if (c.pred.empty()) c.pred = pred;
                    pred.clear();
                }
                return std::chrono::duration<double>(Clock::now() - start).count();
            };
            for (Config& c : configs) {  // warm-up
                (void)pass(c);
                if (!c.cascade) continue;
                const dsinfer::serving::CascadeStats st = c.cascade->stats();
                c.escalated = st.escalated_fraction();
                c.escalated_requests = static_cast<double>(st.escalated_requests) /
                                       static_cast<double>(std::max<std::uint64_t>(st.requests, 1));
            }
            // A timed pass of the large model alone lasts at least --min-pass-ms.
            for (double s = pass(configs[0]); s * 1e3 < args.min_pass_ms && loops < (1 << 20);
                 s = pass(configs[0]))
                loops = std::max(2 * loops, static_cast<int>(std::ceil(loops * args.min_pass_ms /
                                                                       std::max(s * 1e3, 1e-3))));
            for (int r = 0; r < args.repeats; ++r) {
                for (std::size_t k = 0; k < configs.size(); ++k) {
                    Config& c = configs[r % 2 == 0 ? k : configs.size() - 1 - k];
                    c.rows_per_s.push_back(static_cast<double>(n) * loops / pass(c));
                }
            }

            std::printf("\nlarge:   %s (%zu nodes); a timed pass: %d x %lld rows\n",
                        large_name.c_str(), large->engine()->graph().nodes.size(), loops,
                        static_cast<long long>(n));
            std::printf("  %-14s %10s %9s %9s %13s %12s %9s\n", "", "escalated", "(requests)",
                        "accuracy", "(large alone)", "rows/s", "vs large");
            const double large_acc = accuracy(configs[0].pred, data.labels);
            const double large_rate = median(configs[0].rows_per_s);
            for (const Config& c : configs) {
                const double rate = median(c.rows_per_s);
                char rows[16] = "-", reqs[16] = "-";
                if (c.cascade) {
                    std::snprintf(rows, sizeof rows, "%.1f%%", 100.0 * c.escalated);
                    std::snprintf(reqs, sizeof reqs, "%.0f%%", 100.0 * c.escalated_requests);
                }
                std::printf("  %-14s %10s %10s %9.4f %13.4f %12.0f %8.2fx\n", c.name.c_str(), rows,
                            reqs, accuracy(c.pred, data.labels), large_acc, rate,
                            rate / large_rate);
            }
            for (std::size_t k = 3; k < configs.size(); ++k)
                if (configs[k].escalated < configs[k - 1].escalated) {
                    std::fprintf(stderr,
                                 "dsinfer-cascade-digits: FAIL: %s escalates fewer rows "
                                 "than %s\n",
                                 configs[k].name.c_str(), configs[k - 1].name.c_str());
                    rc = 1;
                }

            // submit() through both batchers answers like run() (the middle threshold).
            Config& mid = configs[2 + (configs.size() - 3) / 2];
            std::vector<std::future<Cascade::Outputs>> futures;
            for (const auto& req : requests) futures.push_back(mid.cascade->submit(req));
            std::vector<int> async_pred;
            for (auto& f : futures) append_predictions(f.get(), async_pred);
            if (async_pred != mid.pred) {
                std::fprintf(stderr,
                             "dsinfer-cascade-digits: FAIL: submit() and run() disagree "
                             "(%s, %s)\n",
                             large_name.c_str(), mid.name.c_str());
                rc = 1;
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dsinfer-cascade-digits: inference failed: %s\n", e.what());
        return 2;
    }
    if (rc == 0) std::printf("\nOK\n");
    return rc;
}
