// examples/digits/digits_data.hpp — the held-out digits of tools/train_digits.py, as the
// examples read them (examples/digits, examples/cascade): one "label,p0,...,p63" line per
// sample, pixels 0..16, divided by 16 exactly as in training.
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace digits {

constexpr int kPixels = 64;
constexpr int kClasses = 10;
constexpr float kPixelScale = 16.0f;

struct Dataset {
    std::vector<int> labels;
    std::vector<float> pixels;  // labels.size() x kPixels, already divided by kPixelScale
    std::size_t size() const { return labels.size(); }
};

/// Parses "label,p0,...,p63" lines; throws std::runtime_error naming the line at fault.
inline Dataset read_csv(const std::filesystem::path& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path.string());
    Dataset data;
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
        if (line.empty() || line[0] == '#') continue;
        std::vector<long> fields;
        std::stringstream ss(line);
        std::string field;
        while (std::getline(ss, field, ',')) {
            std::size_t used = 0;
            long v = 0;
            try {
                v = std::stol(field, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used == 0 || used != field.size())
                throw std::runtime_error(path.string() + ":" + std::to_string(line_no) +
                                         ": not an integer: '" + field + "'");
            fields.push_back(v);
        }
        if (fields.size() != kPixels + 1)
            throw std::runtime_error(path.string() + ":" + std::to_string(line_no) +
                                     ": expected 65 values (label + 64 pixels), got " +
                                     std::to_string(fields.size()));
        if (fields[0] < 0 || fields[0] >= kClasses)
            throw std::runtime_error(path.string() + ":" + std::to_string(line_no) +
                                     ": label out of range 0..9");
        data.labels.push_back(static_cast<int>(fields[0]));
        for (int i = 1; i <= kPixels; ++i) {
            if (fields[static_cast<std::size_t>(i)] < 0 || fields[static_cast<std::size_t>(i)] > 16)
                throw std::runtime_error(path.string() + ":" + std::to_string(line_no) +
                                         ": pixel value out of range 0..16");
            data.pixels.push_back(static_cast<float>(fields[static_cast<std::size_t>(i)]) /
                                  kPixelScale);
        }
    }
    if (data.size() == 0) throw std::runtime_error(path.string() + ": no samples");
    return data;
}

}  // namespace digits
