// Serving metrics (include/dsinfer/metrics.hpp): the latency histogram's bucket layout and its
// quantile error bound against exact sorted quantiles (uniform, lognormal, constant, values
// outside the range), exact counts under 8 concurrent threads, outcome classification, batch
// sizes, the throughput window (injected clock), reset, and the two export formats checked by
// small validators written here (JSON structure and numbers; Prometheus HELP/TYPE, names,
// cumulative buckets, +Inf == _count).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "dsinfer/metrics.hpp"

namespace {

using namespace dsinfer;
using namespace std::chrono_literals;
using Clock = ServingMetrics::Clock;
constexpr std::uint64_t kTop = std::uint64_t{1} << 42;  // first value of the overflow bucket

// ---- exact reference ---------------------------------------------------------------------

/// The nearest-rank quantile as metrics.hpp defines it: the value of rank ceil(q * n).
std::uint64_t exact_quantile(const std::vector<std::uint64_t>& sorted, double q) {
    const auto n = static_cast<std::uint64_t>(sorted.size());
    auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(n)));
    rank = std::clamp<std::uint64_t>(rank, 1, n);
    return sorted[rank - 1];
}

/// Records `values`, then checks count/sum/min/max exactly and every quantile in `qs` against
/// the stated bound: |estimate - exact| <= max(exact / 64, 16 ns) in range, [2^42, max] above.
void check_quantiles(std::vector<std::uint64_t> values, const std::string& what) {
    INFO(what);
    LatencyHistogram h;
    for (const std::uint64_t v : values) h.record(v);
    const HistogramSnapshot s = h.snapshot();
    std::sort(values.begin(), values.end());
    std::uint64_t sum = 0;
    for (const std::uint64_t v : values) sum += v;
    REQUIRE(s.count == values.size());
    REQUIRE(s.sum_ns == sum);
    REQUIRE(s.min_ns == values.front());
    REQUIRE(s.max_ns == values.back());
    REQUIRE(s.mean_ns() == Approx(static_cast<double>(sum) / static_cast<double>(values.size())));

    std::vector<double> qs = {0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0};
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> uq(0.0, 1.0);
    for (int i = 0; i < 200; ++i) qs.push_back(uq(rng));
    for (const double q : qs) {
        const std::uint64_t exact = exact_quantile(values, q);
        const double est = s.quantile_ns(q);
        INFO("q = " << q << ", exact " << exact << " ns, estimate " << est << " ns");
        if (exact >= kTop) {
            CHECK(est >= static_cast<double>(kTop));
            CHECK(est <= static_cast<double>(values.back()));
        } else {
            const double bound = std::max(static_cast<double>(exact) / 64.0, 16.0);
            CHECK(std::abs(est - static_cast<double>(exact)) <= bound);
        }
    }
    CHECK(s.quantile_ns(0.0) == static_cast<double>(values.front()));
    CHECK(s.quantile_ns(1.0) == static_cast<double>(values.back()));
}

// ---- a small JSON validator ----------------------------------------------------------------

struct Json {
    enum Kind { null, boolean, number, string, array, object } kind = null;
    double num = 0.0;
    std::string str;
    std::vector<Json> items;
    std::map<std::string, Json> fields;

    const Json& at(const std::string& key) const {
        const auto it = fields.find(key);
        if (kind != object || it == fields.end()) throw std::runtime_error("missing key " + key);
        return it->second;
    }
    double number_at(const std::string& key) const {
        const Json& j = at(key);
        if (j.kind != number) throw std::runtime_error(key + " is not a number");
        return j.num;
    }
};

/// Strict RFC 8259 parser (no leading zeros, no trailing commas, no NaN); throws on any error.
class JsonParser {
public:
    explicit JsonParser(std::string_view s) : s_(s) {}
    Json parse_document() {
        Json j = value();
        ws();
        if (i_ != s_.size()) fail("trailing characters");
        return j;
    }

private:
    [[noreturn]] void fail(const std::string& why) const {
        throw std::runtime_error("JSON: " + why + " at offset " + std::to_string(i_));
    }
    void ws() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
    }
    bool eat(char c) {
        ws();
        if (i_ < s_.size() && s_[i_] == c) {
            ++i_;
            return true;
        }
        return false;
    }
    void expect(char c) {
        if (!eat(c)) fail(std::string("expected '") + c + "'");
    }
    bool digit() const { return i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; }
    Json value() {
        ws();
        if (i_ >= s_.size()) fail("unexpected end");
        const char c = s_[i_];
        if (c == '{') return object();
        if (c == '[') return array();
        if (c == '"') {
            Json j;
            j.kind = Json::string;
            j.str = string();
            return j;
        }
        for (const std::string_view lit : {"true", "false", "null"}) {
            if (s_.substr(i_, lit.size()) == lit) {
                i_ += lit.size();
                Json j;
                j.kind = lit == "null" ? Json::null : Json::boolean;
                return j;
            }
        }
        return number();
    }
    Json number() {
        const std::size_t start = i_;
        if (i_ < s_.size() && s_[i_] == '-') ++i_;
        if (!digit()) fail("bad number");
        if (s_[i_] == '0') {
            ++i_;
        } else {
            while (digit()) ++i_;
        }
        if (i_ < s_.size() && s_[i_] == '.') {
            ++i_;
            if (!digit()) fail("bad fraction");
            while (digit()) ++i_;
        }
        if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
            ++i_;
            if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
            if (!digit()) fail("bad exponent");
            while (digit()) ++i_;
        }
        Json j;
        j.kind = Json::number;
        const auto r = std::from_chars(s_.data() + start, s_.data() + i_, j.num);
        if (r.ec != std::errc() || r.ptr != s_.data() + i_) fail("number does not parse");
        return j;
    }
    std::string string() {
        expect('"');
        std::string out;
        while (i_ < s_.size() && s_[i_] != '"') {
            const char c = s_[i_++];
            if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
            if (c == '\\') {
                if (i_ >= s_.size()) fail("bad escape");
                const char e = s_[i_++];
                if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) fail("bad escape");
            }
            out += c;
        }
        if (i_ >= s_.size()) fail("unterminated string");
        ++i_;
        return out;
    }
    Json array() {
        expect('[');
        Json j;
        j.kind = Json::array;
        if (eat(']')) return j;
        do j.items.push_back(value());
        while (eat(','));
        expect(']');
        return j;
    }
    Json object() {
        expect('{');
        Json j;
        j.kind = Json::object;
        if (eat('}')) return j;
        do {
            ws();
            std::string key = string();
            expect(':');
            if (!j.fields.emplace(key, value()).second) fail("duplicate key " + key);
        } while (eat(','));
        expect('}');
        return j;
    }

    std::string_view s_;
    std::size_t i_ = 0;
};

// ---- a small Prometheus text-format validator ------------------------------------------------

bool valid_metric_name(std::string_view n) {
    if (n.empty()) return false;
    for (std::size_t i = 0; i < n.size(); ++i) {
        const char c = n[i];
        const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
    }
    return true;
}

double parse_prom_value(std::string_view v) {
    if (v == "+Inf") return HUGE_VAL;
    if (v == "-Inf") return -HUGE_VAL;
    double d = 0.0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), d);
    if (r.ec != std::errc() || r.ptr != v.data() + v.size())
        throw std::runtime_error("bad sample value '" + std::string(v) + "'");
    return d;
}

/// Validates text exposition format 0.0.4 as this exporter promises it and returns the samples
/// ("name{labels}" -> value). Throws with the offending line on any violation.
std::map<std::string, double> validate_prometheus(const std::string& text) {
    struct Family {
        std::string type;
        bool help = false;
        std::size_t samples = 0;
    };
    // A histogram's state per series (its family and labels other than le).
    struct Series {
        double last_le = -HUGE_VAL, last_bucket = 0.0, inf_bucket = -1.0, count = -1.0;
        bool sum = false;
    };
    std::map<std::string, Family> families;
    std::map<std::string, Series> histograms;
    std::map<std::string, double> samples;
    std::string current;  // the family of the last TYPE line: samples must follow it
    if (text.empty() || text.back() != '\n') throw std::runtime_error("text must end with \\n");
    std::size_t pos = 0;
    while (pos < text.size()) {
        const std::size_t eol = text.find('\n', pos);
        const std::string line = text.substr(pos, eol - pos);
        pos = eol + 1;
        auto fail = [&](const std::string& why) { throw std::runtime_error(why + ": '" + line + "'"); };
        if (line.empty()) fail("empty line");
        if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
            const std::string rest = line.substr(7);
            const std::size_t sp = rest.find(' ');
            if (sp == std::string::npos || sp + 1 >= rest.size()) fail("HELP/TYPE without text");
            const std::string name = rest.substr(0, sp);
            if (!valid_metric_name(name)) fail("bad metric name");
            Family& f = families[name];
            if (line[2] == 'H') {
                if (f.help) fail("second HELP");
                f.help = true;
            } else {
                const std::string type = rest.substr(sp + 1);
                if (!f.type.empty()) fail("second TYPE");
                if (type != "counter" && type != "gauge" && type != "histogram") fail("bad type");
                if (type == "counter" && name.size() < 6) fail("counter without _total");
                if (type == "counter" && name.compare(name.size() - 6, 6, "_total") != 0)
                    fail("counter without _total");
                if (!f.help) fail("TYPE before HELP");
                f.type = type;
                current = name;
            }
            continue;
        }
        if (line[0] == '#') fail("unexpected comment");
        // name{labels} value
        std::size_t n = 0;
        while (n < line.size() && line[n] != '{' && line[n] != ' ') ++n;
        const std::string name = line.substr(0, n);
        if (!valid_metric_name(name)) fail("bad metric name");
        std::map<std::string, std::string> labels;
        std::string label_text;
        if (n < line.size() && line[n] == '{') {
            const std::size_t close = line.find('}', n);
            if (close == std::string::npos) fail("unclosed labels");
            label_text = line.substr(n + 1, close - n - 1);
            std::size_t k = 0;
            while (k < label_text.size()) {
                const std::size_t eq = label_text.find("=\"", k);
                if (eq == std::string::npos) fail("bad label");
                const std::string key = label_text.substr(k, eq - k);
                if (!valid_metric_name(key) || key.find(':') != std::string::npos) fail("bad label name");
                std::size_t q = eq + 2;  // the closing quote; \\, \" and \n are escapes
                while (q < label_text.size() && label_text[q] != '"') {
                    if (label_text[q] == '\\') {
                        if (q + 1 >= label_text.size() ||
                            std::string_view("\\\"n").find(label_text[q + 1]) == std::string_view::npos)
                            fail("bad escape in a label value");
                        ++q;
                    }
                    ++q;
                }
                if (q >= label_text.size()) fail("unterminated label value");
                labels[key] = label_text.substr(eq + 2, q - eq - 2);
                k = q + 1;
                if (k < label_text.size()) {
                    if (label_text[k] != ',') fail("labels not comma-separated");
                    ++k;
                }
            }
            n = close + 1;
        }
        if (n >= line.size() || line[n] != ' ') fail("no value");
        const double value = parse_prom_value(std::string_view(line).substr(n + 1));
        if (!samples.emplace(name + "{" + label_text + "}", value).second) fail("duplicate sample");

        std::string family = name;
        std::string suffix;
        if (families.count(family) == 0 || families[family].type.empty()) {
            for (const std::string_view s : {"_bucket", "_sum", "_count"}) {
                if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
                    family = name.substr(0, name.size() - s.size());
                    suffix = s;
                    break;
                }
            }
            if (suffix.empty() || families.count(family) == 0 || families[family].type != "histogram")
                fail("sample without TYPE");
        }
        if (family != current) fail("sample outside its family's block");
        Family& f = families[family];
        ++f.samples;
        if (f.type == "counter" && value < 0) fail("negative counter");
        if (f.type == "histogram") {
            std::string key = family + "{";
            for (const auto& [k, v] : labels)
                if (k != "le") key += k + "=" + v + ",";
            Series& h = histograms[key + "}"];
            if (suffix == "_bucket") {
                if (labels.count("le") == 0) fail("bucket without le");
                const double le = parse_prom_value(labels["le"]);
                if (!(le > h.last_le)) fail("le not increasing");
                if (value < h.last_bucket) fail("bucket counts not cumulative");
                h.last_le = le;
                h.last_bucket = value;
                if (std::isinf(le)) h.inf_bucket = value;
            } else if (suffix == "_count") {
                h.count = value;
            } else if (suffix == "_sum") {
                h.sum = true;
            }
        }
    }
    for (const auto& [name, f] : families) {  // no Catch macros here: also runs off the main thread
        if (!f.help || f.type.empty()) throw std::runtime_error(name + ": HELP or TYPE missing");
        if (f.samples == 0) throw std::runtime_error(name + ": no samples");
    }
    for (const auto& [series, h] : histograms) {
        if (h.inf_bucket < 0 || h.count < 0 || !h.sum)
            throw std::runtime_error(series + ": +Inf bucket, _sum or _count missing");
        if (h.inf_bucket != h.count) throw std::runtime_error(series + ": +Inf bucket != _count");
    }
    return samples;
}

std::vector<std::uint64_t> lognormal_ns(std::size_t n, double median_ns, double sigma, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::lognormal_distribution<double> d(std::log(median_ns), sigma);
    std::vector<std::uint64_t> v(n);
    for (auto& x : v) x = static_cast<std::uint64_t>(std::min(d(rng), 1e18));
    return v;
}

}  // namespace

TEST_CASE("latency histogram layout: contiguous buckets, width within 1/32, exported bounds "
          "are bucket edges",
          "[metrics]") {
    const std::size_t n = HistogramSnapshot::bucket_count();
    REQUIRE(sizeof(LatencyHistogram) <= 9 * 1024);
    REQUIRE(HistogramSnapshot::bucket_lower_ns(0) == 0);
    for (std::size_t i = 0; i + 1 < n; ++i) {
        INFO("bucket " << i);
        const std::uint64_t lo = HistogramSnapshot::bucket_lower_ns(i);
        const std::uint64_t hi = HistogramSnapshot::bucket_upper_ns(i);
        REQUIRE(lo <= hi);
        REQUIRE(HistogramSnapshot::bucket_lower_ns(i + 1) == hi + 1);
        if (hi < kTop) REQUIRE(hi - lo + 1 <= std::max<std::uint64_t>(32, lo / 32));
    }
    REQUIRE(HistogramSnapshot::bucket_lower_ns(n - 1) == kTop);
    REQUIRE(HistogramSnapshot::bucket_upper_ns(n - 1) == UINT64_MAX);
    for (const std::uint64_t le : kLatencyExportBoundsNs) {
        INFO("le " << le);
        const std::size_t i = detail::metrics::bucket_index(le);
        CHECK(HistogramSnapshot::bucket_upper_ns(i) == le);
    }
    for (std::size_t k = 0; k < kLatencyExportBoundsNs.size(); ++k) {
        const double label = parse_prom_value(kLatencyExportBoundLabels[k]);
        CHECK(label * 1e9 == Approx(static_cast<double>(kLatencyExportBoundsNs[k])).epsilon(1e-12));
    }
    // Every value lands in the bucket whose bounds hold it.
    std::vector<std::uint64_t> probes = {0, 1, 31, 32, 1023, 1024, 1025, 2047, 2048, kTop - 1, kTop,
                                         kTop + 1, UINT64_MAX};
    for (const std::uint64_t le : kLatencyExportBoundsNs) probes.insert(probes.end(), {le - 1, le, le + 1});
    std::mt19937_64 rng(1);
    for (int i = 0; i < 100000; ++i) probes.push_back(rng() >> (rng() % 64));
    for (const std::uint64_t v : probes) {
        INFO("value " << v);
        const std::size_t i = detail::metrics::bucket_index(v);
        REQUIRE(i < n);
        REQUIRE(HistogramSnapshot::bucket_lower_ns(i) <= v);
        REQUIRE(v <= HistogramSnapshot::bucket_upper_ns(i));
    }
}

TEST_CASE("latency histogram quantiles are within 1/64 of the exact sorted quantiles", "[metrics]") {
    constexpr std::size_t n = 100000;
    std::mt19937_64 rng(42);
    SECTION("uniform 1 us .. 1 s") {
        std::uniform_int_distribution<std::uint64_t> d(1'000, 1'000'000'000);
        std::vector<std::uint64_t> v(n);
        for (auto& x : v) x = d(rng);
        check_quantiles(v, "uniform");
    }
    SECTION("lognormal, median 2 ms, sigma 1.5") {
        check_quantiles(lognormal_ns(n, 2e6, 1.5, 3), "lognormal");
    }
    SECTION("lognormal, median 30 us, sigma 0.3 (narrow)") {
        check_quantiles(lognormal_ns(n, 3e4, 0.3, 4), "narrow lognormal");
    }
    SECTION("constant") {
        check_quantiles(std::vector<std::uint64_t>(1000, 123'457), "constant");
        LatencyHistogram h;
        for (int i = 0; i < 1000; ++i) h.record(123'457ns);
        CHECK(h.snapshot().quantile_ns(0.5) == 123'457.0);  // narrowed to [min, max]
    }
    SECTION("below 1 us: within 16 ns") {
        std::uniform_int_distribution<std::uint64_t> d(0, 1023);
        std::vector<std::uint64_t> v(n);
        for (auto& x : v) x = d(rng);
        check_quantiles(v, "sub-microsecond");
    }
    SECTION("above 2^42 ns (73 min): counted in the overflow bucket, never lost") {
        std::vector<std::uint64_t> v = lognormal_ns(n / 2, 1e6, 1.0, 5);
        std::uniform_int_distribution<std::uint64_t> d(kTop, 4 * kTop);
        for (std::size_t i = 0; i < n / 10; ++i) v.push_back(d(rng));
        v.push_back(UINT64_MAX / 2);
        check_quantiles(v, "with overflow");
        LatencyHistogram h;
        h.record(std::chrono::hours(100));
        h.record(std::chrono::nanoseconds(-5));  // negative: recorded as 0
        const HistogramSnapshot s = h.snapshot();
        CHECK(s.count == 2);
        CHECK(s.min_ns == 0);
        CHECK(s.max_ns == 360'000'000'000'000u);
        CHECK(s.buckets.back() == 1);
        CHECK(s.buckets.front() == 1);
    }
    SECTION("empty histogram") {
        const HistogramSnapshot s = LatencyHistogram().snapshot();
        CHECK(s.count == 0);
        CHECK(s.quantile_ns(0.5) == 0.0);
        CHECK(s.mean_ns() == 0.0);
        CHECK(s.min_ns == 0);
        CHECK(HistogramSnapshot().quantile_ns(0.99) == 0.0);
    }
}

TEST_CASE("latency histogram export buckets count exactly the values <= le", "[metrics]") {
    std::vector<std::uint64_t> v = lognormal_ns(50000, 1e6, 2.5, 11);
    for (const std::uint64_t le : kLatencyExportBoundsNs) v.insert(v.end(), {le - 1, le, le, le + 1});
    LatencyHistogram h;
    for (const std::uint64_t x : v) h.record(x);
    const HistogramSnapshot s = h.snapshot();
    const std::vector<CumulativeBucket> b = s.export_buckets();
    REQUIRE(b.size() == kLatencyExportBoundsNs.size());
    for (const CumulativeBucket& c : b) {
        const auto expected = static_cast<std::uint64_t>(
            std::count_if(v.begin(), v.end(), [&](std::uint64_t x) { return x <= c.le; }));
        INFO("le " << c.le);
        CHECK(c.count == expected);
        CHECK(s.count_at_or_below(c.le) == expected);
    }
}

TEST_CASE("metrics counts are exact under 8 threads recording at once", "[metrics]") {
    constexpr int kThreads = 8;
    constexpr int kPerThread = 40000;
    const ErrorCode outcomes[] = {ErrorCode::ok, ErrorCode::ok, ErrorCode::ok, ErrorCode::unavailable,
                                  ErrorCode::deadline_exceeded, ErrorCode::cancelled,
                                  ErrorCode::invalid_argument, ErrorCode::internal};
    auto value_of = [](int t, int i) {  // spread over the whole range, overflow included
        return ((static_cast<std::uint64_t>(t) * 7919u + static_cast<std::uint64_t>(i) * 104729u) %
                (kTop * 2)) >>
               (static_cast<unsigned>(i) % 40);
    };

    LatencyHistogram shared;
    ServingMetrics metrics;
    std::atomic<bool> done{false};
    std::atomic<int> snapshots{0};
    std::string snapshot_error;
    // A reader scraping while the writers run: every scrape must be a valid exposition.
    std::thread reader([&] {
        std::uint64_t last = 0;
        while (!done.load()) {
            const MetricsSnapshot s = metrics.snapshot();
            try {
                validate_prometheus(to_prometheus(s));
                JsonParser(to_json(s)).parse_document();
            } catch (const std::exception& e) {
                snapshot_error = e.what();
                return;
            }
            if (s.requests.submitted < last) {
                snapshot_error = "submitted went backwards";
                return;
            }
            last = s.requests.submitted;
            ++snapshots;
        }
    });
    std::vector<std::thread> writers;
    for (int t = 0; t < kThreads; ++t) {
        writers.emplace_back([&, t] {
            for (int i = 0; i < kPerThread; ++i) {
                const std::uint64_t v = value_of(t, i);
                shared.record(v);
                const ErrorCode c = outcomes[static_cast<std::size_t>(i) % std::size(outcomes)];
                const auto d = std::chrono::nanoseconds(static_cast<std::int64_t>(v % 1'000'000'000));
                metrics.record_request(c, d, d, d);
                if (i % 4 == 0) metrics.record_batch(static_cast<std::size_t>(i % 300), 3, d);
            }
        });
    }
    for (auto& w : writers) w.join();
    done = true;
    reader.join();
    REQUIRE(snapshot_error.empty());
    CHECK(snapshots.load() > 0);

    // The shared histogram equals one recording the same values on one thread, bucket by bucket.
    LatencyHistogram serial;
    for (int t = 0; t < kThreads; ++t)
        for (int i = 0; i < kPerThread; ++i) serial.record(value_of(t, i));
    const HistogramSnapshot a = shared.snapshot(), b = serial.snapshot();
    CHECK(a.count == std::uint64_t{kThreads} * kPerThread);
    CHECK(a.count == b.count);
    CHECK(a.sum_ns == b.sum_ns);
    CHECK(a.min_ns == b.min_ns);
    CHECK(a.max_ns == b.max_ns);
    CHECK(a.buckets == b.buckets);

    const MetricsSnapshot s = metrics.snapshot();
    const std::uint64_t per_slot = std::uint64_t{kThreads} * kPerThread / std::size(outcomes);
    CHECK(s.requests.submitted == std::uint64_t{kThreads} * kPerThread);
    CHECK(s.requests.ok == 3 * per_slot);
    CHECK(s.requests.rejected == per_slot);
    CHECK(s.requests.timed_out == per_slot);
    CHECK(s.requests.cancelled == per_slot);
    CHECK(s.requests.failed == 2 * per_slot);
    CHECK(s.latency.count == 3 * per_slot);
    CHECK(s.queue.count == 7 * per_slot);
    CHECK(s.batches() == std::uint64_t{kThreads} * kPerThread / 4);
    CHECK(s.batch_items.sum == 3 * s.batches());
}

TEST_CASE("metrics classify outcomes and route times to their histograms", "[metrics]") {
    const auto t0 = Clock::now();
    ServingMetrics m({}, t0);
    const auto at = t0 + 500ms;
    m.record_request(ErrorCode::ok, 10us, 2ms, 3ms, at);
    m.record_request(ErrorCode::ok, 20us, 4ms, 5ms, at);
    m.record_request(ErrorCode::unavailable, 0ns, 0ns, 1us, at);      // rejected: no queue time
    m.record_request(ErrorCode::deadline_exceeded, 50ms, 0ns, 50ms, at);  // timed out in the queue
    m.record_request(ErrorCode::cancelled, 5us, 1ms, 2ms, at);
    m.record_request(ErrorCode::invalid_argument, 1us, 0ns, 2us, at);
    m.record_request(ErrorCode::internal, 1us, 7ms, 9ms, at);
    m.record_request(ErrorCode::device_lost, 1us, 3ms, 9ms, at);
    m.record_request(static_cast<ErrorCode>(200), 1us, 0ns, 1us, at);  // unknown code: internal
    const MetricsSnapshot s = m.snapshot(t0 + 1s);
    const RequestCounts& r = s.requests;
    CHECK(r.submitted == 9);
    CHECK(r.ok == 2);
    CHECK(r.rejected == 1);
    CHECK(r.timed_out == 1);
    CHECK(r.cancelled == 1);
    CHECK(r.failed == 4);
    CHECK(r.by_code[static_cast<std::size_t>(ErrorCode::internal)] == 2);
    CHECK(r.by_code[static_cast<std::size_t>(ErrorCode::device_lost)] == 1);
    // latency: OK requests only
    CHECK(s.latency.count == 2);
    CHECK(s.latency.sum_ns == 8'000'000);
    CHECK(s.latency.max_ns == 5'000'000);
    // queue: all but the rejected one
    CHECK(s.queue.count == 8);
    CHECK(s.queue.max_ns == 50'000'000);
    // compute: only requests that ran (compute > 0)
    CHECK(s.compute.count == 5);
    CHECK(s.compute.sum_ns == 17'000'000);
    CHECK(s.compute.min_ns == 1'000'000);
}

TEST_CASE("metrics batch sizes: exact histogram, overflow, mean", "[metrics]") {
    ServingMetrics m({.max_batch_requests = 16, .max_batch_items = 64});
    const std::size_t sizes[] = {1, 1, 2, 4, 4, 4, 8, 16, 17, 40};
    std::uint64_t sum = 0;
    for (const std::size_t n : sizes) {
        m.record_batch(n, n * 3, 2ms);
        sum += n;
    }
    const MetricsSnapshot s = m.snapshot();
    CHECK(s.batches() == std::size(sizes));
    CHECK(s.mean_batch_size() == Approx(static_cast<double>(sum) / std::size(sizes)));
    CHECK(s.batch_requests.counts.size() == 17);
    CHECK(s.batch_requests.counts[1] == 2);
    CHECK(s.batch_requests.counts[4] == 3);
    CHECK(s.batch_requests.counts[16] == 1);
    CHECK(s.batch_requests.overflow == 2);
    CHECK(s.batch_requests.max == 40);
    CHECK(s.batch_requests.count_at_or_below(4) == 6);
    CHECK(s.batch_requests.count_at_or_below(16) == 8);
    CHECK(s.batch_requests.count_at_or_below(40) == 10);
    CHECK(s.batch_items.sum == 3 * sum);
    CHECK(s.batch_items.overflow == 1);  // 120 > 64
    CHECK(s.batch_compute_ns == 20'000'000);
}

TEST_CASE("metrics throughput: since start and over the last 10 s, decaying without requests",
          "[metrics]") {
    const auto t0 = Clock::now();
    ServingMetrics m({}, t0);
    for (int i = 0; i < 5; ++i) m.record_request(ErrorCode::ok, 0ns, 1ms, 1ms, t0 + 100ms);
    m.record_request(ErrorCode::internal, 0ns, 1ms, 1ms, t0 + 100ms);  // not throughput
    MetricsSnapshot s = m.snapshot(t0 + 500ms);  // first partial second: over the uptime
    CHECK(s.recent_window_s == Approx(0.5));
    CHECK(s.recent_throughput_rps == Approx(10.0));
    CHECK(s.throughput_rps == Approx(10.0));

    for (int i = 0; i < 45; ++i) m.record_request(ErrorCode::ok, 0ns, 1ms, 1ms, t0 + 900ms);
    for (int i = 0; i < 100; ++i) m.record_request(ErrorCode::ok, 0ns, 1ms, 1ms, t0 + 3500ms);
    s = m.snapshot(t0 + 5200ms);  // whole seconds 0..4
    CHECK(s.uptime_s == Approx(5.2));
    CHECK(s.recent_window_s == 5.0);
    CHECK(s.recent_throughput_rps == Approx(150.0 / 5));
    CHECK(s.throughput_rps == Approx(150.0 / 5.2));

    s = m.snapshot(t0 + 12500ms);  // seconds 2..11: second 0 has left the window
    CHECK(s.recent_window_s == 10.0);
    CHECK(s.recent_throughput_rps == Approx(100.0 / 10));
    s = m.snapshot(t0 + 14500ms);  // seconds 4..13: nothing
    CHECK(s.recent_throughput_rps == 0.0);
    CHECK(s.throughput_rps == Approx(150.0 / 14.5));

    // Slots are reused 16 s apart: the old count must not leak into the new second.
    m.record_request(ErrorCode::ok, 0ns, 1ms, 1ms, t0 + 16500ms);  // slot of second 0
    m.record_request(ErrorCode::ok, 0ns, 1ms, 1ms, t0 + 19500ms);  // slot of second 3
    s = m.snapshot(t0 + 20100ms);                                  // seconds 10..19
    CHECK(s.recent_throughput_rps == Approx(2.0 / 10));
    s = m.snapshot(t0 + 35s);
    CHECK(s.recent_throughput_rps == 0.0);
}

TEST_CASE("metrics reset zeroes counters and histograms and restarts the clock", "[metrics]") {
    const auto t0 = Clock::now();
    ServingMetrics m({}, t0);
    m.record_request(ErrorCode::ok, 1us, 1ms, 2ms, t0 + 1s);
    m.record_request(ErrorCode::unavailable, 0ns, 0ns, 1us, t0 + 1s);
    m.record_batch(4, 4, 1ms);
    m.set_memory(1000, 5000);
    m.reset(t0 + 2s);
    const MetricsSnapshot s = m.snapshot(t0 + 3s);
    CHECK(s.uptime_s == Approx(1.0));
    CHECK(s.requests.submitted == 0);
    CHECK(s.requests.ok == 0);
    CHECK(s.requests.rejected == 0);
    CHECK(s.latency.count == 0);
    CHECK(s.latency.sum_ns == 0);
    CHECK(s.latency.max_ns == 0);
    CHECK(s.queue.count == 0);
    CHECK(s.compute.count == 0);
    CHECK(s.batches() == 0);
    CHECK(s.batch_compute_ns == 0);
    CHECK(s.recent_throughput_rps == 0.0);
    CHECK(s.throughput_rps == 0.0);
    CHECK(s.memory_in_use_bytes == 1000);  // gauges are state, not accumulations
    CHECK(s.memory_peak_bytes == 5000);
    // and it records again from zero
    m.record_request(ErrorCode::ok, 1us, 1ms, 7ms, t0 + 2500ms);
    const MetricsSnapshot s2 = m.snapshot(t0 + 3s);
    CHECK(s2.requests.ok == 1);
    CHECK(s2.latency.min_ns == 7'000'000);
    CHECK(s2.recent_throughput_rps == Approx(1.0));
}

TEST_CASE("metrics JSON is well-formed with the documented fields", "[metrics]") {
    const auto t0 = Clock::now();
    ServingMetrics m({}, t0);
    std::vector<std::uint64_t> lat = lognormal_ns(2000, 4e6, 0.8, 21);
    for (const std::uint64_t v : lat)
        m.record_request(ErrorCode::ok, std::chrono::nanoseconds(v / 10), std::chrono::nanoseconds(v / 2),
                         std::chrono::nanoseconds(v), t0 + 1500ms);
    m.record_request(ErrorCode::unavailable, 0ns, 0ns, 1us, t0 + 1500ms);
    m.record_request(ErrorCode::deadline_exceeded, 20ms, 0ns, 20ms, t0 + 1500ms);
    m.record_batch(8, 32, 3ms);
    m.record_batch(2, 2, 1ms);
    m.set_memory(123456789, 987654321);
    const MetricsSnapshot s = m.snapshot(t0 + 2s);

    const std::string text = to_json(s);
    Json j;
    REQUIRE_NOTHROW(j = JsonParser(text).parse_document());
    REQUIRE(j.kind == Json::object);
    CHECK(j.number_at("uptime_s") == s.uptime_s);
    const Json& r = j.at("requests");
    CHECK(r.number_at("submitted") == 2002);
    CHECK(r.number_at("ok") == 2000);
    CHECK(r.number_at("failed") == 0);
    CHECK(r.number_at("rejected") == 1);
    CHECK(r.number_at("timed_out") == 1);
    CHECK(r.number_at("cancelled") == 0);
    CHECK(r.at("by_code").fields.size() == kErrorCodeCount);
    CHECK(r.at("by_code").number_at("deadline_exceeded") == 1);
    const Json& t = j.at("throughput_rps");
    CHECK(t.number_at("since_start") == Approx(1000.0));
    CHECK(t.number_at("recent") == Approx(1000.0));  // seconds 0 and 1
    CHECK(t.number_at("window_s") == 2.0);
    for (const auto& [key, h] : {std::pair{"latency_ms", &s.latency}, std::pair{"queue_ms", &s.queue},
                                 std::pair{"compute_ms", &s.compute}}) {
        INFO(key);
        const Json& o = j.at(key);
        CHECK(o.number_at("count") == static_cast<double>(h->count));
        // Shortest round-trip formatting: the parsed numbers are the computed ones, bit for bit.
        CHECK(o.number_at("p50") == h->quantile_ns(0.5) / 1e6);
        CHECK(o.number_at("p90") == h->quantile_ns(0.9) / 1e6);
        CHECK(o.number_at("p99") == h->quantile_ns(0.99) / 1e6);
        CHECK(o.number_at("p999") == h->quantile_ns(0.999) / 1e6);
        CHECK(o.number_at("mean") == h->mean_ns() / 1e6);
        CHECK(o.number_at("min") == static_cast<double>(h->min_ns) / 1e6);
        CHECK(o.number_at("max") == static_cast<double>(h->max_ns) / 1e6);
    }
    std::sort(lat.begin(), lat.end());
    CHECK(j.at("latency_ms").number_at("p99") ==
          Approx(static_cast<double>(exact_quantile(lat, 0.99)) / 1e6).epsilon(1.0 / 64));
    const Json& b = j.at("batch_size");
    CHECK(b.number_at("batches") == 2);
    CHECK(b.number_at("mean") == 5.0);
    CHECK(b.number_at("max") == 8);
    CHECK(b.at("histogram").number_at("8") == 1);
    CHECK(b.at("histogram").number_at("2") == 1);
    CHECK(b.at("histogram").fields.size() == 2);
    CHECK(b.number_at("overflow") == 0);
    CHECK(j.at("batch_items").number_at("mean") == 17.0);
    CHECK(j.number_at("batch_compute_s") == Approx(0.004));
    CHECK(j.at("memory").number_at("in_use_bytes") == 123456789);
    CHECK(j.at("memory").number_at("peak_bytes") == 987654321);

    // The validator itself rejects what it must.
    for (const char* bad : {"{\"a\":1,}", "{\"a\":01}", "{\"a\":1 \"b\":2}", "{\"a\":nan}", "{\"a\":1,\"a\":2}",
                            "[1,2", "{\"a\":.5}", "{} x"}) {
        INFO(bad);
        CHECK_THROWS(JsonParser(bad).parse_document());
    }
    // An empty snapshot is valid too (no NaN from 0/0).
    REQUIRE_NOTHROW(JsonParser(to_json(MetricsSnapshot{})).parse_document());
}

TEST_CASE("metrics Prometheus text follows the exposition format", "[metrics]") {
    const auto t0 = Clock::now();
    ServingMetrics m({.max_batch_requests = 24, .max_batch_items = 64}, t0);
    std::vector<std::uint64_t> lat = lognormal_ns(5000, 2e6, 2.0, 31);
    lat.insert(lat.end(), {1'000'000, 1'000'001, 999'999, 100'000'000'000, kTop + 5});
    for (const std::uint64_t v : lat)
        m.record_request(ErrorCode::ok, 3us, std::chrono::nanoseconds(v / 2), std::chrono::nanoseconds(v),
                         t0 + 2s);
    m.record_request(ErrorCode::cancelled, 3us, 0ns, 1ms, t0 + 2s);
    m.record_request(ErrorCode::io_error, 3us, 1ms, 1ms, t0 + 2s);
    for (std::size_t n : {1, 3, 3, 24, 30}) m.record_batch(n, 2 * n, 1ms);
    m.set_memory(4096, 8192);
    const MetricsSnapshot s = m.snapshot(t0 + 3s);

    const std::string text = to_prometheus(s);
    std::map<std::string, double> samples;
    REQUIRE_NOTHROW(samples = validate_prometheus(text));
    CHECK(samples.at("dsinfer_requests_total{outcome=\"ok\"}") == static_cast<double>(lat.size()));
    CHECK(samples.at("dsinfer_requests_total{outcome=\"cancelled\"}") == 1);
    CHECK(samples.at("dsinfer_requests_total{outcome=\"failed\"}") == 1);
    CHECK(samples.at("dsinfer_request_errors_total{code=\"io_error\"}") == 1);
    CHECK(samples.count("dsinfer_request_errors_total{code=\"ok\"}") == 0);
    CHECK(samples.at("dsinfer_request_duration_seconds_count{}") == static_cast<double>(lat.size()));
    CHECK(samples.at("dsinfer_request_queue_duration_seconds_count{}") == static_cast<double>(lat.size() + 2));
    for (std::size_t k = 0; k < kLatencyExportBoundsNs.size(); ++k) {
        const std::uint64_t le = kLatencyExportBoundsNs[k];
        const auto expected =
            std::count_if(lat.begin(), lat.end(), [&](std::uint64_t x) { return x <= le; });
        INFO("le " << kLatencyExportBoundLabels[k]);
        CHECK(samples.at("dsinfer_request_duration_seconds_bucket{le=\"" +
                         std::string(kLatencyExportBoundLabels[k]) + "\"}") == static_cast<double>(expected));
    }
    double sum_s = 0;
    for (const std::uint64_t v : lat) sum_s += static_cast<double>(v) / 1e9;
    CHECK(samples.at("dsinfer_request_duration_seconds_sum{}") == Approx(sum_s));
    CHECK(samples.count("dsinfer_batch_size_requests_bucket{le=\"3\"}") == 0);  // 1, 2, 4, ... 16, 24
    CHECK(samples.at("dsinfer_batch_size_requests_bucket{le=\"4\"}") == 3);
    CHECK(samples.at("dsinfer_batch_size_requests_bucket{le=\"24\"}") == 4);
    CHECK(samples.at("dsinfer_batch_size_requests_bucket{le=\"+Inf\"}") == 5);
    CHECK(samples.at("dsinfer_batch_size_requests_sum{}") == 61);
    CHECK(samples.at("dsinfer_memory_in_use_bytes{}") == 4096);
    CHECK(samples.at("dsinfer_memory_peak_bytes{}") == 8192);
    CHECK(samples.at("dsinfer_uptime_seconds{}") == Approx(3.0));

    SECTION("prefixes are sanitized into valid names") {
        for (const auto& [prefix, name] :
             {std::pair<std::string, std::string>{"", "requests_total"}, {"my-app.v2", "my_app_v2_requests_total"},
              {"9lives", "_9lives_requests_total"}, {"ns:sub", "ns:sub_requests_total"}}) {
            INFO("prefix '" << prefix << "'");
            std::map<std::string, double> p;
            REQUIRE_NOTHROW(p = validate_prometheus(to_prometheus(s, prefix)));
            CHECK(p.count(name + "{outcome=\"ok\"}") == 1);
        }
    }
    SECTION("the validator rejects what it must") {
        const std::string bad[] = {
            "# HELP x_total h\n# TYPE x_total counter\nx_total 1",                             // no final \n
            "x_total 1\n",                                                                    // no TYPE
            "# HELP x h\n# TYPE x counter\nx 1\n",                                            // no _total
            "# HELP 1x h\n# TYPE 1x gauge\n1x 1\n",                                           // bad name
            "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 1\n"    // not
            "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n",                                  // cumulative
            "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n" // +Inf !=
            "h_sum 1\nh_count 3\n",                                                           // _count
            "# TYPE g gauge\ng 1\n",                                                          // no HELP
        };
        for (const std::string& b : bad) {
            INFO(b);
            CHECK_THROWS(validate_prometheus(b));
        }
    }
}

TEST_CASE("to_prometheus writes several labelled series under one header per family",
          "[metrics]") {
    using namespace std::chrono_literals;
    const auto t0 = ServingMetrics::Clock::now();
    ServingMetrics a({}, t0), b({}, t0);
    for (int i = 0; i < 3; ++i) a.record_request(ErrorCode::ok, 1us, 2ms, 3ms, t0 + 1s);
    b.record_request(ErrorCode::ok, 0ns, 40us, 40us, t0 + 1s);
    b.record_request(ErrorCode::deadline_exceeded, 5ms, 0ns, 5ms, t0 + 1s);
    a.record_batch(3, 3, 2ms);
    const MetricsSnapshot sa = a.snapshot(t0 + 2s), sb = b.snapshot(t0 + 2s);
    const std::string text = to_prometheus(
        {{&sa, {{"model", "resnet"}, {"path", "submit"}}},
         {&sb, {{"model", "we\"ird\\na\nme"}, {"path", "run"}}}});
    std::map<std::string, double> samples;
    REQUIRE_NOTHROW(samples = validate_prometheus(text));
    CHECK(samples.at("dsinfer_requests_total{model=\"resnet\",path=\"submit\",outcome=\"ok\"}") == 3);
    const std::string weird = "model=\"we\\\"ird\\\\na\\nme\",path=\"run\"";
    CHECK(samples.at("dsinfer_requests_total{" + weird + ",outcome=\"timed_out\"}") == 1);
    CHECK(samples.at("dsinfer_request_duration_seconds_count{" + weird + "}") == 1);
    CHECK(samples.at("dsinfer_request_duration_seconds_bucket{model=\"resnet\",path=\"submit\","
                     "le=\"+Inf\"}") == 3);
    CHECK(samples.at("dsinfer_batch_size_requests_count{model=\"resnet\",path=\"submit\"}") == 1);
    std::size_t headers = 0;
    for (std::size_t at = 0; (at = text.find("# TYPE dsinfer_requests_total ", at)) != std::string::npos; ++at)
        ++headers;
    CHECK(headers == 1);
    // One snapshot without labels is what it always was.
    CHECK(to_prometheus(sa) == to_prometheus({{&sa, {}}}));
    // What the format cannot carry is refused, naming it.
    for (const std::string bad : {"le", "__name", "9x", "a-b", ""}) {
        INFO("label '" << bad << "'");
        try {
            (void)to_prometheus({{&sa, {{bad, "v"}}}});
            FAIL("accepted");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::invalid_argument);
        }
    }
    CHECK_THROWS_AS(to_prometheus({{&sa, {{"m", "x"}}}, {&sb, {{"m", "x"}}}}), Error);
    CHECK_THROWS_AS(to_prometheus({{nullptr, {}}}), Error);
}
