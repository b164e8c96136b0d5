// dsinfer-digits — classifies the held-out 8x8 handwritten digits with the bundled MLP.
//
// Usage: dsinfer-digits [MODEL_DIR]
//   MODEL_DIR holds digits.onnx and digits_test.csv (written by tools/train_digits.py); it
//   defaults to the models/digits folder of the source tree.
//
// Each CSV line is a label followed by 64 raw pixel values (0..16). Pixels are divided by 16,
// exactly as in training, and fed to the model's "pixels" input. The program classifies every
// sample once per call (batch 1, timing each call) and then all samples in one batched call,
// checks that both agree, and prints accuracy, a few predictions, latency and throughput.
//
// Exit status: 0 on success; 1 if accuracy is below 0.95 or the two passes disagree; 2 if the
// model or the data cannot be loaded or run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsinfer/dsinfer.hpp"
#include "digits_data.hpp"

#ifndef DSINFER_DIGITS_DEFAULT_DIR
#define DSINFER_DIGITS_DEFAULT_DIR "models/digits"
#endif

namespace {

using digits::kClasses;
using digits::kPixels;
using digits::read_csv;
constexpr double kMinAccuracy = 0.95;

using Clock = std::chrono::steady_clock;

// Returns the output called `name`, checking that it is f32 [rows, kClasses].
const dsinfer::Tensor& find_output(const std::vector<dsinfer::NamedTensor>& outputs,
                                   const std::string& name, std::int64_t rows) {
    for (const auto& o : outputs) {
        if (o.name != name) continue;
        const auto& t = o.tensor;
        if (t.dtype() != dsinfer::DType::f32 || t.num_dims() != 2 || t.shape()[0] != rows ||
            t.shape()[1] != kClasses)
            throw std::runtime_error("output '" + name + "' has shape " + t.shape().to_string() +
                                     ", expected f32 [" + std::to_string(rows) + ",10]");
        return t;
    }
    throw std::runtime_error("model has no output '" + name + "'");
}

int argmax(const float* row) {
    return static_cast<int>(std::max_element(row, row + kClasses) - row);
}

// Nearest-rank percentile of an ascending-sorted sample.
double percentile(const std::vector<double>& sorted, double p) {
    const auto n = sorted.size();
    auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
    rank = std::clamp<std::size_t>(rank, 1, n);
    return sorted[rank - 1];
}

double ms_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 2 ||
        (argc == 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help"))) {
        std::printf(
            "usage: %s [MODEL_DIR]\n  MODEL_DIR contains digits.onnx and "
            "digits_test.csv (default: %s)\n",
            argv[0], DSINFER_DIGITS_DEFAULT_DIR);
        return argc > 2 ? 2 : 0;
    }
    const std::filesystem::path dir = argc == 2 ? argv[1] : DSINFER_DIGITS_DEFAULT_DIR;
    const auto model_path = dir / "digits.onnx";
    const auto csv_path = dir / "digits_test.csv";

    std::optional<dsinfer::InferenceEngine> engine;
    digits::Dataset data;
    try {
        engine.emplace(dsinfer::InferenceEngine::load(model_path));
        data = read_csv(csv_path);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dsinfer-digits: %s\n", e.what());
        return 2;
    }
    const auto n = static_cast<std::int64_t>(data.size());
    std::printf("model:   %s (loaded in %.2f ms, %zu nodes)\n", model_path.string().c_str(),
                engine->load_ms(), engine->graph().nodes.size());
    std::printf("samples: %lld from %s\n", static_cast<long long>(n), csv_path.string().c_str());

    std::vector<int> pred_single(data.size());
    std::vector<float> prob_single(data.size() * kClasses);
    std::vector<int> pred_batch(data.size());
    std::vector<double> latency_ms(data.size());
    double batch_ms = 0.0;
    constexpr int kBatchRepeats = 5;
    try {
        // Batch 1: one sample per call. The input wraps the dataset's memory (no copy); a few
        // warm-up calls keep first-call effects out of the percentiles.
        auto sample_input = [&](std::size_t i) {
            return std::vector<dsinfer::NamedTensor>{
                {"pixels", dsinfer::Tensor::wrap(data.pixels.data() + i * kPixels,
                                                 dsinfer::DType::f32, {1, kPixels})}};
        };
        for (int w = 0; w < 3; ++w) (void)engine->run(sample_input(0));
        for (std::size_t i = 0; i < data.size(); ++i) {
            const auto inputs = sample_input(i);
            const auto start = Clock::now();
            const auto outputs = engine->run(inputs);
            latency_ms[i] = ms_since(start);
            const float* probs = find_output(outputs, "probabilities", 1).data<float>();
            std::copy(probs, probs + kClasses,
                      prob_single.begin() + static_cast<long>(i) * kClasses);
            pred_single[i] = argmax(find_output(outputs, "logits", 1).data<float>());
        }

        // One batched call over every sample; timed as the median of a few repetitions.
        const std::vector<dsinfer::NamedTensor> batch_inputs{
            {"pixels",
             dsinfer::Tensor::wrap(data.pixels.data(), dsinfer::DType::f32, {n, kPixels})}};
        std::vector<double> batch_times;
        std::vector<dsinfer::NamedTensor> batch_outputs;
        for (int r = 0; r <= kBatchRepeats; ++r) {
            const auto start = Clock::now();
            batch_outputs = engine->run(batch_inputs);
            if (r > 0) batch_times.push_back(ms_since(start));  // r == 0 is a warm-up
        }
        std::sort(batch_times.begin(), batch_times.end());
        batch_ms = batch_times[batch_times.size() / 2];
        const float* logits = find_output(batch_outputs, "logits", n).data<float>();
        for (std::size_t i = 0; i < data.size(); ++i) pred_batch[i] = argmax(logits + i * kClasses);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dsinfer-digits: inference failed: %s\n", e.what());
        return 2;
    }

    std::size_t correct_single = 0;
    std::size_t correct_batch = 0;
    std::size_t disagreements = 0;
    for (std::size_t i = 0; i < data.size(); ++i) {
        correct_single += pred_single[i] == data.labels[i] ? 1 : 0;
        correct_batch += pred_batch[i] == data.labels[i] ? 1 : 0;
        disagreements += pred_single[i] != pred_batch[i] ? 1 : 0;
    }
    const double acc_single = static_cast<double>(correct_single) / static_cast<double>(n);
    const double acc_batch = static_cast<double>(correct_batch) / static_cast<double>(n);

    std::printf("\nsample predictions (batch 1):\n");
    const std::size_t shown = std::min<std::size_t>(5, data.size());
    for (std::size_t k = 0; k < shown; ++k) {
        const std::size_t i = k * (data.size() / shown);
        const float* p = prob_single.data() + i * kClasses;
        // Top two classes, to show how confident the model is.
        std::vector<int> order(kClasses);
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                          [p](int a, int b) { return p[a] > p[b]; });
        std::printf("  #%-4zu label %d -> predicted %d (p=%.4f; next %d p=%.4f)%s\n", i,
                    data.labels[i], pred_single[i], static_cast<double>(p[order[0]]), order[1],
                    static_cast<double>(p[order[1]]),
                    pred_single[i] == data.labels[i] ? "" : "  WRONG");
    }

    std::printf("\naccuracy: batch 1 %.4f (%zu/%lld), batched %.4f (%zu/%lld)\n", acc_single,
                correct_single, static_cast<long long>(n), acc_batch, correct_batch,
                static_cast<long long>(n));

    std::vector<double> sorted = latency_ms;
    std::sort(sorted.begin(), sorted.end());
    const double mean =
        std::accumulate(sorted.begin(), sorted.end(), 0.0) / static_cast<double>(sorted.size());
    std::printf(
        "latency (batch 1, %lld calls): p50 %.4f ms, p90 %.4f ms, p99 %.4f ms, "
        "mean %.4f ms\n",
        static_cast<long long>(n), percentile(sorted, 50), percentile(sorted, 90),
        percentile(sorted, 99), mean);
    std::printf("throughput (batch %lld, median of %d calls): %.3f ms/call, %.0f samples/s\n",
                static_cast<long long>(n), kBatchRepeats, batch_ms,
                batch_ms > 0 ? static_cast<double>(n) / (batch_ms / 1000.0) : 0.0);

    int rc = 0;
    if (disagreements != 0) {
        std::fprintf(stderr,
                     "dsinfer-digits: FAIL: batched and batch-1 predictions differ on "
                     "%zu samples\n",
                     disagreements);
        rc = 1;
    }
    if (acc_single < kMinAccuracy || acc_batch < kMinAccuracy) {
        std::fprintf(stderr, "dsinfer-digits: FAIL: accuracy below %.2f\n", kMinAccuracy);
        rc = 1;
    }
    if (rc == 0) std::printf("OK\n");
    return rc;
}
