// Replay driver for a fuzz target in builds without libFuzzer (the normal test build): runs
// LLVMFuzzerTestOneInput over
//   1. every file of fuzz/corpus/<target>/ (the committed regression corpus),
//   2. for fuzz_onnx_model, a deterministic sample of the ONNX backend-test node models,
//   3. deterministic pseudo-random mutations of those (bit flips, byte sets, inserts, erases,
//      truncations, chunk copies) until --mutations or --seconds runs out.
// A crash or a broken invariant (fuzz_common.hpp traps) saves the input being run to
// ./<target>-replay-crash.bin and names it on stderr.
//
// Usage: fuzz_<name>_replay [--seconds S] [--mutations N] [--seed K] [FILE|DIR...]
//   With FILE/DIR arguments only those are replayed (no corpus, seeds or mutations) — to
//   reproduce a libFuzzer artifact in a build without libFuzzer.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

#ifndef DSINFER_FUZZ_TARGET
#define DSINFER_FUZZ_TARGET "fuzz_target"
#endif

namespace {

namespace fs = std::filesystem;

struct Input {
    std::string label;
    std::vector<std::uint8_t> bytes;
};

// What is running now, for the crash handler (async-signal-safe use only).
const std::uint8_t* g_data = nullptr;
std::size_t g_size = 0;
char g_label[512] = "";
char g_crash_file[256] = DSINFER_FUZZ_TARGET "-replay-crash.bin";

void write_str(const char* s) {
    ssize_t r = ::write(2, s, std::strlen(s));
    (void)r;
}

extern "C" void on_crash(int sig) {
    write_str("\n*** ");
    write_str(DSINFER_FUZZ_TARGET);
    write_str(": crashed on ");
    write_str(g_label);
    const int fd = ::open(g_crash_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        std::size_t off = 0;
        while (off < g_size) {
            const ssize_t w = ::write(fd, g_data + off, g_size - off);
            if (w <= 0) break;
            off += static_cast<std::size_t>(w);
        }
        ::close(fd);
        write_str("\n*** input saved to ");
        write_str(g_crash_file);
        write_str(" (minimize it with the libFuzzer build: fuzz/README.md)\n");
    }
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

void run_one(const std::string& label, const std::vector<std::uint8_t>& bytes) {
    std::snprintf(g_label, sizeof g_label, "%s", label.c_str());
    g_data = bytes.data();
    g_size = bytes.size();
    // libFuzzer never passes a null pointer for an empty input; neither do we.
    static const std::uint8_t empty = 0;
    LLVMFuzzerTestOneInput(bytes.empty() ? &empty : bytes.data(), bytes.size());
    g_data = nullptr;
    g_size = 0;
}

bool read_file(const fs::path& p, std::vector<std::uint8_t>& out) {
    std::ifstream f(p, std::ios::binary);
    if (!f) return false;
    out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    return true;
}

/// Regular files under `dir`, sorted by path (deterministic order).
std::vector<fs::path> files_under(const fs::path& dir, bool recursive) {
    std::vector<fs::path> out;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return out;
    if (recursive) {
        for (auto it = fs::recursive_directory_iterator(dir, ec);
             !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
            if (it->is_regular_file(ec)) out.push_back(it->path());
    } else {
        for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
             it.increment(ec))
            if (it->is_regular_file(ec)) out.push_back(it->path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

/// splitmix64: a fixed, platform-independent sequence.
struct Rng {
    std::uint64_t s;
    std::uint64_t next() {
        std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }
};

void mutate(std::vector<std::uint8_t>& b, Rng& rng, std::size_t max_size) {
    static const std::uint8_t interesting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, 0x08, 0x10,
                                               0x12, 0x1a, 0x22, 0x3a, 0x40, 0x0a};
    const std::size_t count = 1 + rng.below(4);
    for (std::size_t m = 0; m < count; ++m) {
        switch (rng.below(7)) {
            case 0:  // bit flip
                if (!b.empty()) b[rng.below(b.size())] ^= static_cast<std::uint8_t>(1u << rng.below(8));
                break;
            case 1:  // interesting byte (protobuf tags, varint edges)
                if (!b.empty())
                    b[rng.below(b.size())] = interesting[rng.below(sizeof interesting)];
                break;
            case 2:  // random byte
                if (!b.empty()) b[rng.below(b.size())] = static_cast<std::uint8_t>(rng.next());
                break;
            case 3: {  // insert bytes
                if (b.size() >= max_size) break;
                const std::size_t at = rng.below(b.size() + 1);
                const std::size_t n = 1 + rng.below(8);
                std::vector<std::uint8_t> ins(n);
                for (auto& x : ins) x = static_cast<std::uint8_t>(rng.next());
                b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
                break;
            }
            case 4: {  // erase a range
                if (b.empty()) break;
                const std::size_t at = rng.below(b.size());
                const std::size_t n = 1 + rng.below(std::min<std::size_t>(16, b.size() - at));
                b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                        b.begin() + static_cast<std::ptrdiff_t>(at + n));
                break;
            }
            case 5:  // truncate
                b.resize(rng.below(b.size() + 1));
                break;
            case 6: {  // copy a chunk over another place
                if (b.size() < 2) break;
                const std::size_t from = rng.below(b.size());
                const std::size_t to = rng.below(b.size());
                const std::size_t n = 1 + rng.below(std::min<std::size_t>(32, b.size() - std::max(from, to)));
                std::memmove(b.data() + to, b.data() + from, n);
                break;
            }
        }
    }
}

int usage() {
    std::fprintf(stderr,
                 "usage: %s_replay [--seconds S] [--mutations N] [--seed K] [FILE|DIR...]\n",
                 DSINFER_FUZZ_TARGET);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    double seconds = 15.0;
    std::uint64_t max_mutations = 1'000'000;
    std::uint64_t seed = 1;
    std::vector<std::string> explicit_inputs;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
        if (a == "--seconds") {
            const char* v = value();
            if (!v) return usage();
            seconds = std::atof(v);
        } else if (a == "--mutations") {
            const char* v = value();
            if (!v) return usage();
            max_mutations = std::strtoull(v, nullptr, 10);
        } else if (a == "--seed") {
            const char* v = value();
            if (!v) return usage();
            seed = std::strtoull(v, nullptr, 10);
        } else if (a.rfind("--", 0) == 0) {
            return usage();
        } else {
            explicit_inputs.push_back(a);
        }
    }
    for (int sig : {SIGSEGV, SIGILL, SIGABRT, SIGFPE, SIGBUS, SIGTRAP}) std::signal(sig, on_crash);

    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };

    if (!explicit_inputs.empty()) {
        std::size_t n = 0;
        for (const auto& a : explicit_inputs) {
            std::vector<fs::path> files = fs::is_directory(a) ? files_under(a, false)
                                                              : std::vector<fs::path>{a};
            for (const auto& f : files) {
                std::vector<std::uint8_t> bytes;
                if (!read_file(f, bytes)) {
                    std::fprintf(stderr, "%s: cannot read %s\n", DSINFER_FUZZ_TARGET, f.c_str());
                    return 1;
                }
                run_one(f.string(), bytes);
                ++n;
            }
        }
        std::printf("%s: %zu inputs ran without a finding (%.1f s)\n", DSINFER_FUZZ_TARGET, n,
                    elapsed());
        return 0;
    }

    std::vector<Input> pool;
    const fs::path corpus = fs::path(DSINFER_FUZZ_CORPUS_DIR) / DSINFER_FUZZ_TARGET;
    std::size_t corpus_files = 0, seed_files = 0;
    for (const auto& f : files_under(corpus, false)) {
        Input in{f.string(), {}};
        if (!read_file(f, in.bytes)) continue;
        pool.push_back(std::move(in));
        ++corpus_files;
    }
#if defined(DSINFER_FUZZ_ONNX_SEEDS)
    // Every 8th node model (by sorted path): ~225 of the ~1,800, deterministic.
    {
        const fs::path node = fs::path(DSINFER_ONNX_TESTS_DIR) / "node";
        std::vector<fs::path> models;
        std::error_code ec;
        if (fs::is_directory(node, ec))
            for (const auto& dir : fs::directory_iterator(node, ec))
                if (fs::is_regular_file(dir.path() / "model.onnx", ec))
                    models.push_back(dir.path() / "model.onnx");
        std::sort(models.begin(), models.end());
        for (std::size_t i = 0; i < models.size(); i += 8) {
            Input in{models[i].string(), {}};
            if (!read_file(models[i], in.bytes)) continue;
            pool.push_back(std::move(in));
            ++seed_files;
        }
    }
#endif
    pool.push_back(Input{"(empty input)", {}});
    for (const auto& in : pool) run_one(in.label, in.bytes);
    const double replay_s = elapsed();

    // Mutations: the same sequence every time (for a given seed); only how far it gets depends
    // on the time budget.
    std::uint64_t mutations = 0;
    {
        Rng rng{seed};
        std::size_t max_size = 0;
        for (const auto& in : pool) max_size = std::max(max_size, in.bytes.size());
        max_size = std::max<std::size_t>(max_size + 64, 256);
        std::vector<std::uint8_t> buf;
        while (mutations < max_mutations && elapsed() < seconds) {
            const std::size_t base = rng.below(pool.size());
            buf = pool[base].bytes;
            mutate(buf, rng, max_size);
            const std::string label = "mutation " + std::to_string(mutations) + " (seed " +
                                      std::to_string(seed) + ") of " + pool[base].label;
            run_one(label, buf);
            ++mutations;
        }
    }
    std::printf("%s: %zu corpus files, %zu seed models replayed (%.1f s); %llu mutations "
                "(%.1f s total): no finding\n",
                DSINFER_FUZZ_TARGET, corpus_files, seed_files, replay_s,
                static_cast<unsigned long long>(mutations), elapsed());
    return 0;
}
