// The "cpu" backend's Conv and FusedConv on plain NCHW float32 (see fast_conv.hpp).
//
// Weights: the kernel keeps the stored OIHW weights (the weight store's stored form, shared
// with the graph's initializer, not copied): the im2col GEMM reads them as its A, the fallback
// and Winograd's non-finite tiles read them too, so nothing is released. A shape class that
// picks Winograd asks the store for the transform (winograd_form: made once per weights and
// ISA, on the first such prepare), a derived form in the store's report. As another kernel's fallback
// (oneDNN's, which packs the weights its own way) the factory declines, so the reference
// kernel is that fallback and no weights are held twice.
//
// Attributes: the ops room's ConvAttrs (src/ops/conv.hpp, parse_conv_attrs): parsed and checked
// once per node, by the reference fallback created first, and shared down the chain.
#include "cpu/fast/fast_conv.hpp"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <algorithm>
#include <cstddef>
#include <vector>

#include "kernels/conv_dispatch.hpp"
#include "kernels/conv_winograd.hpp"
#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"
#include "kernels/simd.hpp"
#include "dsinfer/ops.hpp"
#include "kernels/weight_forms.hpp"
#include "ops/activation.hpp"
#include "ops/conv.hpp"
#include "ops/window.hpp"

namespace dsinfer::detail {

namespace {

using std::int64_t;

std::array<std::atomic<std::uint64_t>, kNumConvAlgos> g_path_runs{};

}  // namespace

std::int64_t fast_conv_block() noexcept {
    return fast::active_isa() == fast::Isa::avx512 ? 16 : 8;
}

std::uint64_t fast_conv_path_runs(ConvAlgo algo) noexcept {
    return g_path_runs[static_cast<std::size_t>(algo)].load(std::memory_order_relaxed);
}

namespace {

struct ConvConfig {
    ConvAttrs attrs;  ///< parsed once, by the ops room (src/ops/conv.hpp)
    ActivationSpec act;
    bool fused = false;  ///< FusedConv: input 3 is the residual Z
};

class FastConvKernel final : public fast::FastKernel {
public:
    FastConvKernel(std::unique_ptr<Kernel> fallback, ConvConfig cfg,
                   std::shared_ptr<WeightStore> store, WeightStore::Source source,
                   std::shared_ptr<const Tensor> w, bool measure)
        : FastKernel(std::move(fallback)), cfg_(std::move(cfg)), store_(std::move(store)),
          source_(source), w_(std::move(w)), measure_(measure) {}

    /// The fallback's checks and output shape; then, for a shape class one of dsinfer's paths
    /// takes, only that path's workspace. With EngineOptions::algo_search = measure, the path
    /// is the one timed fastest on this geometry (measure_conv_algo), kept as prepared state.
    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(FastKernel::prepare(ctx));
        if (!ctx.output_spec(0).set || ctx.probing() || ctx.input(0).dtype() != DType::f32)
            return Status::ok();
        ConvGemmShape s;
        if (!geometry(ctx.input(0).shape(), ctx.output_spec(0).shape, s)) return Status::ok();
        const int64_t threads = max_threads();
        ConvAlgo path = choose_conv_algo(s, ConvLayout::nchw, kConvAlgosDsinfer);
        if (measure_) {
            path = measure(s, threads);
            ctx.set_state(std::make_shared<const ConvAlgo>(path));
        }
        if (path == ConvAlgo::winograd_f4x3) {
            DSINFER_RETURN_IF_ERROR(winograd_weights(s));
            ctx.set_workspace(conv_winograd_nchw_workspace_bytes(s, threads));
        } else if (path == ConvAlgo::im2col_gemm) {
            ctx.set_workspace(conv_gemm_nchw_workspace_bytes(s, threads));
        }
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& xv = ctx.input(0);
        const TensorView& yv = ctx.output(0);
        ConvGemmShape s;
        if (xv.dtype != DType::f32 || !geometry(xv.shape, yv.shape, s)) return fallback_run(ctx);
        ConvAlgo path = measure_ && ctx.prepared_state() != nullptr
                            ? *static_cast<const ConvAlgo*>(ctx.prepared_state())
                            : choose_conv_algo(s, ConvLayout::nchw, kConvAlgosDsinfer);
        std::shared_ptr<const WinogradWeights> wino;
        if (path == ConvAlgo::winograd_f4x3) {
            std::lock_guard<std::mutex> lock(mu_);
            wino = wino_;
            if (!wino) path = ConvAlgo::im2col_gemm;  // prepare transforms them; never expected
        }
        if (path == ConvAlgo::reference) return fallback_run(ctx);
        const float* bias = nullptr;
        if (ctx.num_inputs() > 2 && ctx.has_input(2)) {
            const TensorView& b = ctx.input(2);
            if (b.dtype != DType::f32 || b.num_elements() != s.oc) return fallback_run(ctx);
            bias = b.data_unchecked<float>();
        }
        const float* z = nullptr;
        if (cfg_.fused && ctx.num_inputs() > 3 && ctx.has_input(3)) {
            const TensorView& zv = ctx.input(3);
            if (zv.dtype != DType::f32 || zv.shape != yv.shape) return fallback_run(ctx);
            z = zv.data_unchecked<float>();
        }
        g_path_runs[static_cast<std::size_t>(path)].fetch_add(1, std::memory_order_relaxed);
        const float* x = xv.data_unchecked<float>();
        float* y = yv.data_unchecked<float>();
        const bool ok = path == ConvAlgo::winograd_f4x3
                            ? conv_winograd_nchw(s, x, *wino, bias, z, y, cfg_.act,
                                                 ctx.workspace(), ctx.workspace_bytes())
                            : conv_gemm_nchw(s, x, w_->data_unchecked<float>(), bias, z, y, cfg_.act,
                                             ctx.workspace(), ctx.workspace_bytes());
        if (!ok)
            return Status(ErrorCode::resource_exhausted, "out of memory for the convolution's buffers");
        return Status::ok();
    }

    /// run()'s path for these shapes: Winograd F(4x4, 3x3), the im2col GEMM (X's rows as they
    /// are for a 1x1 stride-1 window), or the fallback; with the ISA of the packed operands.
    std::string algorithm(const PrepareContext& ctx) const override {
        ConvGemmShape s;
        if (!ctx.output_spec(0).set || ctx.input(0).dtype() != DType::f32 ||
            !geometry(ctx.input(0).shape(), ctx.output_spec(0).shape, s))
            return fallback_algorithm(ctx);
        ConvAlgo path = measure_ && ctx.state() != nullptr
                            ? *static_cast<const ConvAlgo*>(ctx.state())
                            : choose_conv_algo(s, ConvLayout::nchw, kConvAlgosDsinfer);
        fast::Isa isa = sgemm_isa();
        if (path == ConvAlgo::winograd_f4x3) {
            std::lock_guard<std::mutex> lock(mu_);
            if (!wino_ || wino_->u.empty()) path = ConvAlgo::im2col_gemm;  // as run() does
            else isa = wino_->u.front().isa;
        }
        if (path == ConvAlgo::reference) return fallback_algorithm(ctx);
        if (path == ConvAlgo::winograd_f4x3)
            return std::string("dsinfer:winograd-f4x4-") + fast::isa_name(isa);
        const bool pointwise = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 &&
                               s.pw == 0 && s.dh == 1 && s.dw == 1;
        return std::string(pointwise ? "dsinfer:1x1-sgemm-" : "dsinfer:im2col+sgemm-") +
               fast::isa_name(isa);
    }

private:
    /// The geometry of X -> Y (both validated by the fallback's prepare), or false for what
    /// dsinfer's paths do not take (not 2-D, channels not W's).
    bool geometry(const Shape& x, const Shape& y, ConvGemmShape& s) const noexcept {
        const Shape& w = w_->shape();
        if (x.rank() != 4 || y.rank() != 4 || x[1] != w[1] || y[1] != w[0] || y[0] != x[0])
            return false;
        s = ConvGemmShape{.n = x[0], .c = x[1], .h = x[2], .w = x[3], .oc = y[1], .oh = y[2],
                          .ow = y[3], .kh = w[2], .kw = w[3],
                          .sh = attr_at(cfg_.attrs.strides, 0, 1), .sw = attr_at(cfg_.attrs.strides, 1, 1),
                          .block = fast_conv_block(), .dh = attr_at(cfg_.attrs.dilations, 0, 1),
                          .dw = attr_at(cfg_.attrs.dilations, 1, 1)};
        for (int i = 0; i < 2; ++i) {
            const int64_t k = w[2 + i];
            const StatusOr<WindowDim> d =
                window_dim(i, 2, x[2 + i], k, i == 0 ? s.sh : s.sw, i == 0 ? s.dh : s.dw,
                           cfg_.attrs.auto_pad, cfg_.attrs.pads, /*ceil_mode=*/false);
            if (!d.is_ok() || d.value().out != y[2 + i]) return false;
            (i == 0 ? s.ph : s.pw) = d.value().pb;
        }
        return true;
    }

    /// The fastest of dsinfer's NCHW paths for `s`, timed on zeros with this kernel's
    /// activation (measure_conv_algo; cached per process by geometry and threads).
    ConvAlgo measure(const ConvGemmShape& s, int64_t threads) const {
        const auto floats = [](int64_t a, int64_t b, int64_t c, int64_t d) {
            return static_cast<std::size_t>(a * b * c * d);
        };
        std::vector<float> x(floats(s.n, s.c, s.h, s.w), 0.f);
        std::vector<float> y(floats(s.n, s.oc, s.oh, s.ow));
        const std::size_t ws_bytes = std::max(conv_gemm_nchw_workspace_bytes(s, threads),
                                              conv_winograd_nchw_workspace_bytes(s, threads));
        std::vector<unsigned char> ws_buf(ws_bytes + 64);
        void* ws = ws_buf.data();
        std::size_t space = ws_buf.size();
        std::align(64, ws_bytes, ws, space);  // the executor's workspaces are 64-byte aligned
        // Winograd's transform for the timing only: the store's form is made if it wins.
        std::optional<WinogradWeights> wino;
        return measure_conv_algo(
            s, ConvLayout::nchw, kConvAlgosDsinfer, static_cast<int>(threads), [&](ConvAlgo a) {
                if (a == ConvAlgo::winograd_f4x3) {
                    if (!wino)
                        wino = pack_winograd_weights(
                            std::shared_ptr<const float>(w_, w_->data_unchecked<float>()), s);
                    return conv_winograd_nchw(s, x.data(), *wino, nullptr, nullptr, y.data(),
                                              cfg_.act, ws, ws_bytes);
                }
                return conv_gemm_nchw(s, x.data(), w_->data_unchecked<float>(), nullptr, nullptr, y.data(),
                                      cfg_.act, ws, ws_bytes);
            });
    }

    /// The Winograd transform of the weights: the weight store's (made once per weights and
    /// ISA; a oneDNN Conv on the same weights shares it), kept here from the first prepare.
    Status winograd_weights(const ConvGemmShape& s) const {
        std::lock_guard<std::mutex> lock(mu_);
        if (wino_) return Status::ok();
        const std::shared_ptr<const Tensor> w = w_;
        DSINFER_ASSIGN_OR_RETURN(wino_, winograd_form(*store_, source_, w, s));
        return Status::ok();
    }

    ConvConfig cfg_;
    std::shared_ptr<WeightStore> store_;
    WeightStore::Source source_;
    std::shared_ptr<const Tensor> w_;  ///< the store's stored form (the graph's OIHW weights)
    bool measure_ = false;             ///< EngineOptions::algo_search == measure
    mutable std::mutex mu_;
    mutable std::shared_ptr<const WinogradWeights> wino_;
};

bool declared_f32(const KernelCreateContext& ctx, int i) {
    const Value* v = ctx.input_value(i);
    return v != nullptr && v->dtype && *v->dtype == DType::f32;
}

/// Conv (any opset) and FusedConv (com.dsinfer: bias B, residual Z, activation).
fast::Factory make_fast_conv(const KernelCreateContext& ctx) {
    if (ctx.creating_fallback())
        return Status::error(ErrorCode::unsupported, "fast Conv: not as another kernel's fallback");
    const Tensor* w = ctx.constant_input(1);
    if (!declared_f32(ctx, 0) || w == nullptr || w->dtype() != DType::f32 || w->num_dims() != 4 ||
        w->num_elements() == 0)
        return Status::error(ErrorCode::unsupported, "f32 2-D Conv with constant weights only");
    const Node& n = ctx.node();
    // The reference kernel validates the node first, so a bad one fails with its error.
    DSINFER_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> fallback, ctx.create_fallback());
    ConvConfig cfg;
    DSINFER_ASSIGN_OR_RETURN(cfg.attrs, parse_conv_attrs(ctx, /*transpose=*/false));
    if (cfg.attrs.group != 1) return Status::error(ErrorCode::unsupported, "group 1 only");
    cfg.fused = n.domain == kDsinferDomain;
    if (cfg.fused) {
        DSINFER_ASSIGN_OR_RETURN(cfg.act, activation_from_attributes(ctx));
    }
    std::shared_ptr<WeightStore> store = ctx.weight_store();
    const WeightStore::Source source = store->source(*w);
    std::shared_ptr<const Tensor> stored = store->constant(source);
    if (!stored) return Status::error(ErrorCode::internal, "fast Conv: weights not in the store");
    return make_kernel<FastConvKernel>(std::move(fallback), std::move(cfg), std::move(store),
                                       source, std::move(stored), ctx.measure_algorithms());
}

}  // namespace

void register_fast_conv(KernelRegistry& r) {
    const DTypeSet f32{DType::f32};
    r.add({"Conv", "", 1, kMaxOpset, DeviceKind::cpu, f32}, &make_fast_conv, kPriorityCpu, "cpu");
    r.add({"FusedConv", kDsinferDomain, 1, 1, DeviceKind::cpu, f32}, &make_fast_conv,
          kPriorityCpu, "cpu");
}

}  // namespace dsinfer::detail
