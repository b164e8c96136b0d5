// dsinfer's convolution dispatcher (src/kernels/conv_dispatch.hpp) against the choices of the
// three rules it replaced, which the expected columns below were computed from (at commit
// 2eb4e0e): conv_winograd_preferred, then conv_gemm_preferred, else oneDNN's direct primitive,
// inside the oneDNN Conv kernel on the blocked layout (src/onednn/onednn_conv.cpp, whose build()
// sends empty inputs and outputs to its fallback, the reference kernel, and dilated windows to
// the primitive), and fast_conv_choose in the "cpu" backend's NCHW Conv (src/cpu/fast/
// fast_conv.cpp). A refactor, not a retune: every choice must stay what it was.
//
// The ISA enters through the channel block the callers put in the geometry: 16 on AVX-512, 8
// below (fast_conv_block(); the oneDNN backend's nChw16c / nChw8c follows the same cap). The
// test runs once per ISA level ([isa]; tests/unit/main.cpp forces DSINFER_TEST_ISA through
// DSINFER_MAX_CPU_ISA) and checks the forced level before it asserts anything.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/fast/fast_conv.hpp"
#include "kernels/conv_dispatch.hpp"
#include "kernels/simd.hpp"

using namespace dsinfer::detail;
using std::int64_t;

namespace Catch {
template <>
struct StringMaker<ConvAlgo> {
    static std::string convert(ConvAlgo a) {
        switch (a) {
            case ConvAlgo::reference: return "reference";
            case ConvAlgo::im2col_gemm: return "im2col_gemm";
            case ConvAlgo::winograd_f4x3: return "winograd_f4x3";
            case ConvAlgo::onednn_direct: return "onednn_direct";
        }
        return "?";
    }
};
}  // namespace Catch

namespace {

constexpr ConvAlgo R = ConvAlgo::reference;
constexpr ConvAlgo G = ConvAlgo::im2col_gemm;
constexpr ConvAlgo W = ConvAlgo::winograd_f4x3;
constexpr ConvAlgo D = ConvAlgo::onednn_direct;

/// Square strides and dilations; output dims from the window (0 when nothing fits).
ConvGemmShape conv(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh, int64_t kw,
                   int64_t stride, int64_t ph, int64_t pw, int64_t dilation = 1) {
    const auto out = [&](int64_t in, int64_t k, int64_t pad) {
        return std::max<int64_t>(0, (in + 2 * pad - dilation * (k - 1) - 1) / stride + 1);
    };
    return ConvGemmShape{.n = n, .c = c, .h = h, .w = w, .oc = oc, .oh = out(h, kh, ph),
                         .ow = out(w, kw, pw), .kh = kh, .kw = kw, .sh = stride, .sw = stride,
                         .ph = ph, .pw = pw, .block = 8, .dh = dilation, .dw = dilation};
}

struct Case {
    std::string name;
    ConvGemmShape s;
    // The "cpu" NCHW Conv at channel blocks of 8 and 16, the oneDNN Conv (blocked) at 8 and 16.
    ConvAlgo nchw8, nchw16, blocked8, blocked16;
};

// ResNet-50's convolutions (torchvision's v1.5: the stride on the 3x3; every distinct layer) at
// batch 1 and 8, then edge cases.
const std::vector<Case>& sweep() {
    static const std::vector<Case> cases = {
        {"b1 conv1 7x7/2 3->64 224", conv(1, 3, 224, 224, 64, 7, 7, 2, 3, 3), G, G, D, D},
        {"b1 l1 1x1 64->64 56", conv(1, 64, 56, 56, 64, 1, 1, 1, 0, 0), G, G, D, D},
        {"b1 l1 3x3 64 56", conv(1, 64, 56, 56, 64, 3, 3, 1, 1, 1), W, W, W, W},
        {"b1 l1 1x1 64->256 56", conv(1, 64, 56, 56, 256, 1, 1, 1, 0, 0), G, G, D, D},
        {"b1 l1 1x1 256->64 56", conv(1, 256, 56, 56, 64, 1, 1, 1, 0, 0), G, G, D, D},
        {"b1 l2 1x1 256->128 56", conv(1, 256, 56, 56, 128, 1, 1, 1, 0, 0), G, G, D, D},
        {"b1 l2 3x3/2 128 56->28", conv(1, 128, 56, 56, 128, 3, 3, 2, 1, 1), G, G, D, D},
        {"b1 l2 1x1 128->512 28", conv(1, 128, 28, 28, 512, 1, 1, 1, 0, 0), G, G, D, D},
        {"b1 l2 down 1x1/2 256->512 56->28", conv(1, 256, 56, 56, 512, 1, 1, 2, 0, 0), G, G, D, D},
        {"b1 l2 1x1 512->128 28", conv(1, 512, 28, 28, 128, 1, 1, 1, 0, 0), G, G, D, D},
        {"b1 l2 3x3 128 28", conv(1, 128, 28, 28, 128, 3, 3, 1, 1, 1), W, W, W, W},
        {"b1 l3 1x1 512->256 28", conv(1, 512, 28, 28, 256, 1, 1, 1, 0, 0), G, G, D, D},
        {"b1 l3 3x3/2 256 28->14", conv(1, 256, 28, 28, 256, 3, 3, 2, 1, 1), G, G, G, G},
        {"b1 l3 1x1 256->1024 14", conv(1, 256, 14, 14, 1024, 1, 1, 1, 0, 0), G, G, D, D},
        {"b1 l3 down 1x1/2 512->1024 28", conv(1, 512, 28, 28, 1024, 1, 1, 2, 0, 0), G, G, D, D},
        {"b1 l3 1x1 1024->256 14", conv(1, 1024, 14, 14, 256, 1, 1, 1, 0, 0), G, G, D, D},
        {"b1 l3 3x3 256 14", conv(1, 256, 14, 14, 256, 3, 3, 1, 1, 1), W, W, W, W},
        {"b1 l4 1x1 1024->512 14", conv(1, 1024, 14, 14, 512, 1, 1, 1, 0, 0), G, G, D, D},
        {"b1 l4 3x3/2 512 14->7", conv(1, 512, 14, 14, 512, 3, 3, 2, 1, 1), G, G, G, G},
        {"b1 l4 1x1 512->2048 7", conv(1, 512, 7, 7, 2048, 1, 1, 1, 0, 0), G, G, D, D},
        {"b1 l4 down 1x1/2 1024->2048 14", conv(1, 1024, 14, 14, 2048, 1, 1, 2, 0, 0), G, G, D, D},
        {"b1 l4 1x1 2048->512 7", conv(1, 2048, 7, 7, 512, 1, 1, 1, 0, 0), G, G, D, D},
        {"b1 l4 3x3 512 7", conv(1, 512, 7, 7, 512, 3, 3, 1, 1, 1), W, W, G, D},
        {"b8 conv1 7x7/2 3->64 224", conv(8, 3, 224, 224, 64, 7, 7, 2, 3, 3), G, G, D, D},
        {"b8 l1 1x1 64->64 56", conv(8, 64, 56, 56, 64, 1, 1, 1, 0, 0), G, G, D, D},
        {"b8 l1 3x3 64 56", conv(8, 64, 56, 56, 64, 3, 3, 1, 1, 1), W, W, W, W},
        {"b8 l1 1x1 64->256 56", conv(8, 64, 56, 56, 256, 1, 1, 1, 0, 0), G, G, D, D},
        {"b8 l1 1x1 256->64 56", conv(8, 256, 56, 56, 64, 1, 1, 1, 0, 0), G, G, D, D},
        {"b8 l2 1x1 256->128 56", conv(8, 256, 56, 56, 128, 1, 1, 1, 0, 0), G, G, D, D},
        {"b8 l2 3x3/2 128 56->28", conv(8, 128, 56, 56, 128, 3, 3, 2, 1, 1), G, G, D, D},
        {"b8 l2 1x1 128->512 28", conv(8, 128, 28, 28, 512, 1, 1, 1, 0, 0), G, G, D, D},
        {"b8 l2 down 1x1/2 256->512 56->28", conv(8, 256, 56, 56, 512, 1, 1, 2, 0, 0), G, G, D, D},
        {"b8 l2 1x1 512->128 28", conv(8, 512, 28, 28, 128, 1, 1, 1, 0, 0), G, G, D, D},
        {"b8 l2 3x3 128 28", conv(8, 128, 28, 28, 128, 3, 3, 1, 1, 1), W, W, W, W},
        {"b8 l3 1x1 512->256 28", conv(8, 512, 28, 28, 256, 1, 1, 1, 0, 0), G, G, D, D},
        {"b8 l3 3x3/2 256 28->14", conv(8, 256, 28, 28, 256, 3, 3, 2, 1, 1), G, G, G, G},
        {"b8 l3 1x1 256->1024 14", conv(8, 256, 14, 14, 1024, 1, 1, 1, 0, 0), G, G, D, D},
        {"b8 l3 down 1x1/2 512->1024 28", conv(8, 512, 28, 28, 1024, 1, 1, 2, 0, 0), G, G, D, D},
        {"b8 l3 1x1 1024->256 14", conv(8, 1024, 14, 14, 256, 1, 1, 1, 0, 0), G, G, D, D},
        {"b8 l3 3x3 256 14", conv(8, 256, 14, 14, 256, 3, 3, 1, 1, 1), W, W, W, W},
        {"b8 l4 1x1 1024->512 14", conv(8, 1024, 14, 14, 512, 1, 1, 1, 0, 0), G, G, D, D},
        {"b8 l4 3x3/2 512 14->7", conv(8, 512, 14, 14, 512, 3, 3, 2, 1, 1), G, G, G, G},
        {"b8 l4 1x1 512->2048 7", conv(8, 512, 7, 7, 2048, 1, 1, 1, 0, 0), G, G, D, D},
        {"b8 l4 down 1x1/2 1024->2048 14", conv(8, 1024, 14, 14, 2048, 1, 1, 2, 0, 0), G, G, D, D},
        {"b8 l4 1x1 2048->512 7", conv(8, 2048, 7, 7, 512, 1, 1, 1, 0, 0), G, G, D, D},
        {"b8 l4 3x3 512 7", conv(8, 512, 7, 7, 512, 3, 3, 1, 1, 1), W, W, W, W},
        {"3x3 on a 1x1 map", conv(1, 64, 1, 1, 64, 3, 3, 1, 1, 1), G, G, G, D},
        {"3x3 on a 2x2 map", conv(1, 64, 2, 2, 64, 3, 3, 1, 1, 1), G, G, G, D},
        {"3x3 on 4x4: 1 tile", conv(1, 64, 4, 4, 64, 3, 3, 1, 1, 1), G, G, G, D},
        {"3x3 on 5x5: 4 tiles", conv(1, 64, 5, 5, 64, 3, 3, 1, 1, 1), W, W, G, D},
        {"3x3 on 12x12: 9 tiles", conv(1, 64, 12, 12, 64, 3, 3, 1, 1, 1), W, W, D, D},
        {"3x3 on 16x16: 16 tiles", conv(1, 64, 16, 16, 64, 3, 3, 1, 1, 1), W, W, W, W},
        {"3x3 on 8x8, batch 4: 16 tiles", conv(4, 64, 8, 8, 64, 3, 3, 1, 1, 1), W, W, W, W},
        {"3x3 unpadded 3x3 -> 1x1", conv(1, 64, 3, 3, 64, 3, 3, 1, 0, 0), G, G, G, D},
        {"3x3/2 on 16x16 -> 8x8", conv(1, 64, 16, 16, 64, 3, 3, 2, 1, 1), G, G, G, G},
        {"3x3/2 on 30x30 -> 15x15", conv(1, 64, 30, 30, 64, 3, 3, 2, 1, 1), G, G, D, D},
        {"1x1/2 on 8x8", conv(1, 64, 8, 8, 64, 1, 1, 2, 0, 0), G, G, D, D},
        {"5x5 on 14x14", conv(1, 64, 14, 14, 64, 5, 5, 1, 2, 2), G, G, D, D},
        {"5x5 on 8x8", conv(1, 64, 8, 8, 64, 5, 5, 1, 2, 2), G, G, G, D},
        {"1x7 on 17x17 192ch", conv(1, 192, 17, 17, 192, 1, 7, 1, 0, 3), G, G, D, D},
        {"7x1 on 8x8 192ch", conv(1, 192, 8, 8, 192, 7, 1, 1, 3, 0), G, G, G, D},
        {"3x3 112x112 32ch", conv(1, 32, 112, 112, 32, 3, 3, 1, 1, 1), W, W, W, W},
        {"dilated 3x3 d2 56x56", conv(1, 64, 56, 56, 64, 3, 3, 1, 2, 2, 2), G, G, D, D},
        {"dilated 3x3 d2 8x8", conv(1, 64, 8, 8, 64, 3, 3, 1, 2, 2, 2), G, G, D, D},
        {"24 ch: blocks of 8 only, 3x3 28", conv(1, 24, 28, 28, 24, 3, 3, 1, 1, 1), W, G, W, D},
        {"24 -> 40 ch 3x3 7x7", conv(1, 24, 7, 7, 40, 3, 3, 1, 1, 1), W, G, G, D},
        {"24 -> 40 ch 3x3/2 14x14", conv(8, 24, 14, 14, 40, 3, 3, 2, 1, 1), G, G, G, D},
        {"12 -> 20 ch 3x3 14x14", conv(1, 12, 14, 14, 20, 3, 3, 1, 1, 1), G, G, D, D},
        {"12 -> 20 ch 3x3 7x7", conv(1, 12, 7, 7, 20, 3, 3, 1, 1, 1), G, G, D, D},
        {"empty batch", conv(0, 64, 14, 14, 64, 3, 3, 1, 1, 1), R, R, R, R},
        {"no output channels", conv(1, 64, 14, 14, 0, 3, 3, 1, 1, 1), R, R, R, R},
        {"no input channels", conv(1, 0, 14, 14, 64, 3, 3, 1, 1, 1), R, R, R, R},
        {"empty map", conv(1, 64, 0, 0, 64, 3, 3, 1, 1, 1), R, R, R, R},
        {"empty input map padded to 2x2", conv(1, 64, 0, 0, 64, 1, 1, 1, 1, 1), G, G, R, R},
    };
    return cases;
}

/// The channel block of the ISA this process runs at, after checking it is the forced one.
int64_t forced_block() {
    namespace fast = dsinfer::detail::fast;
    if (const char* want = std::getenv("DSINFER_TEST_ISA"); want != nullptr && *want != '\0') {
        fast::Isa isa{};
        REQUIRE(fast::parse_isa(want, isa));
        REQUIRE(fast::active_isa() == isa);
    }
    const int64_t block = dsinfer::detail::fast_conv_block();
    REQUIRE(block == (fast::active_isa() == fast::Isa::avx512 ? 16 : 8));
    return block;
}

}  // namespace

TEST_CASE("conv dispatcher makes the choices of the rules it replaced, on both layouts",
          "[conv_dispatch][isa]") {
    const int64_t block = forced_block();
    for (const Case& c : sweep()) {
        INFO(c.name << " at channel blocks of " << block);
        ConvGemmShape s = c.s;
        s.block = block;
        CHECK(choose_conv_algo(s, ConvLayout::nchw, kConvAlgosDsinfer) ==
              (block == 16 ? c.nchw16 : c.nchw8));
        CHECK(choose_conv_algo(s, ConvLayout::blocked, kConvAlgosAll) ==
              (block == 16 ? c.blocked16 : c.blocked8));
    }
}

TEST_CASE("conv dispatcher picks only among the caller's candidates", "[conv_dispatch][isa]") {
    const int64_t block = forced_block();
    const ConvAlgoSet direct_only = conv_algo_bit(ConvAlgo::onednn_direct);
    const ConvAlgoSet no_winograd = kConvAlgosAll & ~conv_algo_bit(ConvAlgo::winograd_f4x3);
    for (const Case& c : sweep()) {
        INFO(c.name << " at channel blocks of " << block);
        ConvGemmShape s = c.s;
        s.block = block;
        const ConvAlgo nchw = choose_conv_algo(s, ConvLayout::nchw, kConvAlgosDsinfer);
        const ConvAlgo blocked = choose_conv_algo(s, ConvLayout::blocked, kConvAlgosAll);
        // oneDNN's direct kernel on plain NCHW was never measured: offered, it is not taken.
        CHECK(choose_conv_algo(s, ConvLayout::nchw, kConvAlgosAll) == nchw);
        // Only the reference kernel (nothing of dsinfer's fast paths).
        CHECK(choose_conv_algo(s, ConvLayout::nchw, conv_algo_bit(R)) == R);
        CHECK(choose_conv_algo(s, ConvLayout::blocked, conv_algo_bit(R)) == R);
        // The oneDNN kernel with weights dsinfer's blocked kernels do not take: the primitive
        // (or, with nothing to compute, the reference: oneDNN's kernel declines empty shapes).
        CHECK(choose_conv_algo(s, ConvLayout::blocked, direct_only | conv_algo_bit(R)) ==
              (blocked == R ? R : D));
        // Without Winograd the next pick of the same rule: the GEMM where its rule takes the
        // geometry, else oneDNN (blocked); the GEMM (NCHW).
        const ConvAlgo blocked_next = choose_conv_algo(s, ConvLayout::blocked, no_winograd);
        if (blocked != W) CHECK(blocked_next == blocked);
        else CHECK((blocked_next == G || blocked_next == D));
        const ConvAlgo nchw_next = choose_conv_algo(
            s, ConvLayout::nchw, kConvAlgosDsinfer & ~conv_algo_bit(ConvAlgo::winograd_f4x3));
        CHECK(nchw_next == (nchw == W ? G : nchw));
    }
}

TEST_CASE("conv dispatcher's measured choice times every applicable candidate and keeps the "
          "fastest, once per geometry",
          "[conv_dispatch]") {
    // A fake convolution whose algorithms take known times: the choice follows the times, not
    // the rule, and a second ask for the geometry times nothing.
    ConvGemmShape s{.n = 3, .c = 48, .h = 23, .w = 21, .oc = 32, .oh = 23, .ow = 21, .kh = 3,
                    .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1, .block = 16};
    REQUIRE(conv_algos_applicable(s, ConvLayout::blocked, kConvAlgosAll) ==
            (conv_algo_bit(ConvAlgo::winograd_f4x3) | conv_algo_bit(ConvAlgo::im2col_gemm) |
             conv_algo_bit(ConvAlgo::onednn_direct)));
    REQUIRE(conv_algos_applicable(s, ConvLayout::nchw, kConvAlgosAll) ==
            (conv_algo_bit(ConvAlgo::winograd_f4x3) | conv_algo_bit(ConvAlgo::im2col_gemm)));
    std::vector<int> calls(kNumConvAlgos, 0);
    auto spin = [](double seconds) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        while (std::chrono::steady_clock::now() < until) {
        }
    };
    auto fake = [&](ConvAlgo fastest) {
        return [&, fastest](ConvAlgo a) {
            ++calls[static_cast<std::size_t>(a)];
            spin(a == fastest ? 0.0005 : 0.004);
            return true;
        };
    };
    SECTION("the fastest wins, once per geometry and thread count") {
        const std::uint64_t before = conv_algo_measurements();
        // The rule picks Winograd here (blocked, >= 16 tiles); the timing says the GEMM.
        REQUIRE(choose_conv_algo(s, ConvLayout::blocked, kConvAlgosAll) == ConvAlgo::winograd_f4x3);
        CHECK(measure_conv_algo(s, ConvLayout::blocked, kConvAlgosAll, 2,
                                fake(ConvAlgo::im2col_gemm)) == ConvAlgo::im2col_gemm);
        CHECK(conv_algo_measurements() == before + 1);
        for (ConvAlgo a : {ConvAlgo::winograd_f4x3, ConvAlgo::im2col_gemm, ConvAlgo::onednn_direct})
            CHECK(calls[static_cast<std::size_t>(a)] == 1 + kConvMeasureRounds);
        CHECK(calls[static_cast<std::size_t>(ConvAlgo::reference)] == 0);
        // Cached: the same geometry is not timed again (the fake would now favour direct).
        std::fill(calls.begin(), calls.end(), 0);
        CHECK(measure_conv_algo(s, ConvLayout::blocked, kConvAlgosAll, 2,
                                fake(ConvAlgo::onednn_direct)) == ConvAlgo::im2col_gemm);
        CHECK(calls == std::vector<int>(kNumConvAlgos, 0));
        // Another thread count is another key.
        CHECK(measure_conv_algo(s, ConvLayout::blocked, kConvAlgosAll, 1,
                                fake(ConvAlgo::onednn_direct)) == ConvAlgo::onednn_direct);
        CHECK(conv_algo_measurements() == before + 2);
    }
    SECTION("an algorithm that fails is never chosen") {
        ConvGemmShape t = s;
        t.h = t.oh = 19;
        CHECK(measure_conv_algo(t, ConvLayout::nchw, kConvAlgosDsinfer, 2, [&](ConvAlgo a) {
                  spin(a == ConvAlgo::winograd_f4x3 ? 0.0002 : 0.002);
                  return a != ConvAlgo::winograd_f4x3;  // the fast one fails
              }) == ConvAlgo::im2col_gemm);
    }
    SECTION("one applicable candidate: the rule's answer, nothing timed") {
        ConvGemmShape t = s;
        t.kh = t.kw = 1;  // not Winograd's
        t.ph = t.pw = 0;
        int ran = 0;
        CHECK(measure_conv_algo(t, ConvLayout::nchw, kConvAlgosDsinfer, 2, [&](ConvAlgo) {
                  ++ran;
                  return true;
              }) == ConvAlgo::im2col_gemm);
        CHECK(ran == 0);
        ConvGemmShape empty = s;
        empty.n = 0;
        CHECK(conv_algos_applicable(empty, ConvLayout::nchw, kConvAlgosAll) == 0);
        CHECK(measure_conv_algo(empty, ConvLayout::nchw, kConvAlgosAll, 2, [&](ConvAlgo) {
                  ++ran;
                  return true;
              }) == ConvAlgo::reference);
        CHECK(ran == 0);
    }
    SECTION("the blocked GEMM needs whole channel blocks and dilation 1") {
        ConvGemmShape t = s;
        t.c = 40;  // not a multiple of 16: neither Winograd nor the blocked GEMM
        CHECK(conv_algos_applicable(t, ConvLayout::blocked, kConvAlgosAll) ==
              conv_algo_bit(ConvAlgo::onednn_direct));
        CHECK(conv_algos_applicable(t, ConvLayout::nchw, kConvAlgosDsinfer) ==
              conv_algo_bit(ConvAlgo::im2col_gemm));
    }
}
