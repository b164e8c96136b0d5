// oneDNN Conv and ConvTranspose (f32, 1-D/2-D/3-D, groups incl. depthwise, dilations, pads,
// auto_pad). Constant weights are reordered once into the layout the primitive picks ("any")
// and shared by every shape class that picks the same one; as the node's own kernel it declares
// them released, so the original goes once the packed copy exists (ResNet-50: 98 MiB held once,
// not twice) and the fallback kernel gets them back in ONNX layout, reordered from the packed
// copy, only if a shape class ever needs it. 2-D activations may stay in the
// backend's blocked layout between oneDNN kernels (layout negotiation, kernel.hpp): Conv offers
// a blocked input when its channels fit the block and a blocked output when its output channels
// do. Output shapes and validation come from the fallback kernel's prepare.
// Both sides blocked, the algorithm is choose_conv_algo's on the blocked layout
// (src/kernels/conv_dispatch.hpp: the cost rule and its measurements). Where oneDNN's direct
// convolution is slow (small output maps, strided windows), the kernel runs dsinfer's im2col +
// packed GEMM instead (src/kernels/conv_gemm.hpp), on weights it packs once for that GEMM; the
// stored weights then go too (rebuilt from the GEMM's copy if a fallback or another shape class
// asks). 3x3 stride-1 windows with enough output tiles run dsinfer's Winograd F(4x4, 3x3)
// (src/kernels/conv_winograd.hpp) on weights transformed once; the stored weights stay for the
// other paths.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/conv_dispatch.hpp"
#include "kernels/conv_gemm.hpp"
#include "kernels/conv_winograd.hpp"
#include "kernels/weight_forms.hpp"
#include "runtime/parallel.hpp"
#include "ops/conv.hpp"
#include "onednn/onednn_common.hpp"

namespace dsinfer::detail::onednn {
namespace {

using std::int64_t;

struct ConvPrim {
    bool usable = false;
    bool gemm = false;   ///< dsinfer's im2col + packed GEMM instead of a primitive
    bool winograd = false;  ///< dsinfer's Winograd F(4x4, 3x3) instead of a primitive
    ConvGemmShape geometry;
    std::shared_ptr<const PackedB> gemm_weights;
    std::shared_ptr<const WinogradWeights> winograd_weights;
    dnnl::primitive prim;
    dnnl::memory::desc src_md, dst_md, bias_md, scratch_md, weights_md;
    std::shared_ptr<const dnnl::memory> weights;
    std::size_t scratch_bytes = 0;
    /// A blocked input with a row-major output of fewer channels than a block (a segmentation
    /// head): the primitive writes Y blocked (its channels padded to the block) into the
    /// workspace at `padded_dst_offset` and a reorder makes it row-major: oneDNN 2.6 has no
    /// JIT convolution from a blocked source to a row-major destination (it ran its reference
    /// one, 2.4 s on a 1024x1024 16 -> 2 head).
    bool padded_dst = false;
    std::size_t padded_dst_offset = 0;
    dnnl::memory::desc plain_dst_md;
    std::string impl;  ///< the direct primitive's primitive_name (Kernel::algorithm)
};

/// dsinfer's name for its convolution path `c` runs (Winograd or the im2col GEMM), with the
/// ISA its weights were packed for.
std::string dsinfer_conv_name(const ConvPrim& c) {
    if (c.winograd) {
        const fast::Isa isa = c.winograd_weights && !c.winograd_weights->u.empty()
                                  ? c.winograd_weights->u.front().isa
                                  : fast::active_isa();
        return std::string("dsinfer:winograd-f4x4-") + fast::isa_name(isa);
    }
    const ConvGemmShape& g = c.geometry;
    const bool pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
    const fast::Isa isa = c.gemm_weights ? c.gemm_weights->isa : fast::active_isa();
    return std::string(pointwise ? "dsinfer:1x1-sgemm-" : "dsinfer:im2col+sgemm-") +
           fast::isa_name(isa);
}

class OnednnConvKernel final : public FallbackKernel {
public:
    OnednnConvKernel(std::unique_ptr<Kernel> fallback, bool transpose, ConvAttrs attrs,
                     std::shared_ptr<WeightStore> store, const Tensor& w,
                     std::optional<Tensor> bias, Epilogue epilogue, bool own_weights,
                     bool measure)
        : FallbackKernel(std::move(fallback)), transpose_(transpose), a_(std::move(attrs)),
          w_shape_(w.shape()), bias_(std::move(bias)), epilogue_(epilogue),
          own_weights_(own_weights), measure_(measure),
          packer_(std::move(store), w, own_weights) {}

    /// The node's own kernel holds its weights once: packed, the original let go after the
    /// first pack (WeightPacker). As another kernel's fallback it keeps them as they are.
    std::uint64_t released_constant_inputs() const noexcept override {
        return own_weights_ ? std::uint64_t{1} << 1 : 0;
    }

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(prepare_fallback(ctx));
        if (!ctx.output_spec(0).set || ctx.probing()) return Status::ok();
        DSINFER_ASSIGN_OR_RETURN(auto p, primitive(ctx.input(0).shape(), ctx.output_spec(0).shape));
        if (p->usable) {
            // Its shape class never runs the fallback: only the primitive's (or dsinfer's
            // Winograd / im2col GEMM's) buffers.
            ctx.set_workspace(p->scratch_bytes);
        } else if (in_mask_ != 0 || out_mask_ != 0) {
            std::vector<Shape> in, out{ctx.output_spec(0).shape};
            for (int i = 0; i < ctx.num_inputs(); ++i)
                in.push_back(ctx.has_input(i) ? ctx.input(i).shape() : Shape{});
            ctx.set_workspace((ctx.workspace_bytes() + 63) / 64 * 64 +
                              relayout_bytes(in, out, in_mask_, out_mask_));
        }
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        StatusOr<std::shared_ptr<const ConvPrim>> p = std::shared_ptr<const ConvPrim>{};
        try {
            p = primitive(ctx.input(0).shape, ctx.output(0).shape);
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory in conv primitive");
        } catch (const std::exception& e) {
            return Status::error(ErrorCode::internal, "conv primitive: ", e.what());
        }
        if (!p.is_ok()) return p.status();
        const ConvPrim& c = *p.value();
        if (!c.usable) return run_reference(ctx);
        if (residual_ && ctx.input(3).num_bytes() != ctx.output(0).num_bytes())
            return Status(ErrorCode::internal, "FusedConv residual size mismatch");
        return compute(c, ctx.input(0).raw, residual_ ? ctx.input(3).raw : nullptr,
                       ctx.output(0), ctx.workspace(), ctx.workspace_bytes());
    }

    /// One convolution of shape class `c`: X at `x`, FusedConv's residual at `z` (null: none),
    /// Y at `y`, scratch `ws`.
    Status compute(const ConvPrim& c, const void* x_raw, const void* z_raw, const TensorView& yv,
                   void* ws, std::size_t ws_bytes) const noexcept {
        if (c.winograd || c.gemm) {  // dsinfer's own convolutions on the blocked layouts
            const auto* x = static_cast<const float*>(x_raw);
            const auto* z = static_cast<const float*>(z_raw);
            const float* b = bias_ ? bias_->data_unchecked<float>() : nullptr;
            auto* y = static_cast<float*>(yv.raw);
            const bool done =
                c.winograd ? conv_winograd_blocked(c.geometry, x, *c.winograd_weights, b, z, y,
                                                   epilogue_.act, ws, ws_bytes)
                           : conv_gemm_blocked(c.geometry, x, *c.gemm_weights, b, z, y,
                                               epilogue_.act, ws, ws_bytes);
            if (!done)
                return Status(ErrorCode::resource_exhausted,
                              c.winograd ? "out of memory for the convolution's Winograd buffers"
                                         : "out of memory for the convolution's im2col buffers");
            return Status::ok();
        }
        if (z_raw != nullptr && z_raw != yv.raw) {
            // FusedConv's Z (same shape and layout as Y) enters through the sum post-op.
            std::memcpy(yv.raw, z_raw, yv.num_bytes());
        }
        try {
            ExecArg args[kMaxExecArgs];
            int na = 0;
            args[na++] = {DNNL_ARG_SRC, &c.src_md, x_raw};
            args[na++] = {DNNL_ARG_WEIGHTS, &c.weights_md, c.weights->get_data_handle()};
            if (bias_) args[na++] = {DNNL_ARG_BIAS, &c.bias_md, bias_->raw_data()};
            void* dst = c.padded_dst ? static_cast<char*>(ws) + c.padded_dst_offset : yv.raw;
            args[na++] = {DNNL_ARG_DST, &c.dst_md, dst};
            if (c.scratch_md.get_size() > 0) args[na++] = {DNNL_ARG_SCRATCHPAD, &c.scratch_md, ws};
            const Status st = execute(c.prim, args, na, transpose_ ? "deconvolution" : "convolution");
            if (!st.is_ok()) return st;
            if (c.padded_dst) {
                dnnl::memory from = wrap(c.dst_md, dst), to = wrap(c.plain_dst_md, yv.raw);
                dnnl::reorder(from, to).execute(thread_stream(), from, to);
                thread_stream().wait();
            }
            epilogue_.finish(yv);  // an activation left out of attr()
            return st;
        } catch (const dnnl::error& e) {
            return from_error(e, "convolution");
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory in convolution");
        } catch (const std::exception& e) {
            return Status::error(ErrorCode::internal, "convolution: ", e.what());
        }
    }

    /// What prepare's primitive() chose for these shapes: dsinfer's Winograd or im2col GEMM, a
    /// oneDNN primitive, or the fallback.
    std::string algorithm(const PrepareContext& ctx) const override {
        if (!ctx.output_spec(0).set || !ctx.has_input(0)) return {};
        std::vector<int64_t> key;
        key_append(key, ctx.input(0).shape());
        key_append(key, ctx.output_spec(0).shape);
        const std::shared_ptr<const ConvPrim> p = cache_.find(key);
        if (p == nullptr) return {};  // evicted since prepare: the provider
        if (!p->usable) return fallback_algorithm(ctx);
        if (p->winograd || p->gemm) return dsinfer_conv_name(*p);
        return p->padded_dst ? p->impl + " (+reorder)" : p->impl;
    }

    LayoutSupport layout_support(const Graph& g, const Node& n) const override {
        LayoutSupport s;
        const Value& x = g.value(n.inputs[0]);
        if (!x.shape.known || x.shape.rank() != 4 || w_shape_.rank() != 4) return s;
        const Dim& c = x.shape.dims[1];
        const int64_t out_c = transpose_ ? w_shape_[1] * a_.group : w_shape_[0];
        if (!blockable_channels(out_c)) {
            // A head with few output channels (a segmentation model's last 1x1 Conv to its
            // classes) reads a blocked input and writes row-major: otherwise its row-major
            // input would make every uniform kernel before it row-major too.
            if (!transpose_ && !residual_ && a_.group == 1 && c.is_static() &&
                blockable_channels(c.value)) {
                s.layout = kBlockedLayout;
                s.inputs = 1;
            }
            return s;
        }
        s.layout = kBlockedLayout;
        s.outputs = 1;
        // FusedConv's residual Z is summed into Y in place: it must share Y's layout.
        if (residual_) {
            s.inputs |= std::uint64_t{1} << 3;
            s.uniform = true;
        }
        // Mixed layouts (blocked on one side only) have no fast implementation except for a
        // row-major input with few channels (the first layer), so otherwise both or neither.
        if (c.is_static() && blockable_channels(c.value)) {
            s.inputs |= 1;
            s.uniform = true;
        }
        return s;
    }
    Status use_layouts(std::uint64_t in, std::uint64_t out) override {
        blocked_in_ = (in & 1u) != 0;
        blocked_out_ = (out & 1u) != 0;
        in_mask_ = in;
        out_mask_ = out;
        return Status::ok();
    }

private:
    /// The fallback kernel on this node's tensors, its weight input pointing at the weights in
    /// their stored layout (the executor's initializer has no data once this kernel released it).
    Status run_reference(RunContext& ctx) const noexcept {
        if (!own_weights_) return run_fallback(ctx, in_mask_, out_mask_);
        return run_fallback_with_weights(ctx, packer_, user_md(), "convolution", in_mask_,
                                         out_mask_);
    }

    /// The weights as ONNX stores them, as a oneDNN descriptor: Conv [OC, IC/G, k...] (a group
    /// dim first when G > 1), ConvTranspose [IC, OC/G, k...] read as (G,) OC/G, IC/G, k... with
    /// strides into that storage.
    dnnl::memory::desc user_md() const {
        const int nsp = w_shape_.rank() - 2;
        dims wd = to_dims(w_shape_);
        const int64_t g = a_.group;
        if (!transpose_) {
            if (g > 1) {
                wd.insert(wd.begin(), g);
                wd[1] /= g;
            }
            return rowmajor_md(wd);
        }
        const int64_t ic = wd[0], ocg = wd[1];
        int64_t ksize = 1;
        for (int i = 0; i < nsp; ++i) ksize *= wd[static_cast<std::size_t>(2 + i)];
        dims d, st;
        if (g > 1) {
            d.push_back(g);
            st.push_back((ic / g) * ocg * ksize);
        }
        d.push_back(ocg);
        st.push_back(ksize);
        d.push_back(ic / g);
        st.push_back(ocg * ksize);
        int64_t acc = 1;
        dims kst(static_cast<std::size_t>(nsp));
        for (int i = nsp - 1; i >= 0; --i) {
            kst[static_cast<std::size_t>(i)] = acc;
            acc *= wd[static_cast<std::size_t>(2 + i)];
        }
        for (int i = 0; i < nsp; ++i) {
            d.push_back(wd[static_cast<std::size_t>(2 + i)]);
            st.push_back(kst[static_cast<std::size_t>(i)]);
        }
        return dnnl::memory::desc(d, dt::f32, st);
    }

    StatusOr<std::shared_ptr<const ConvPrim>> primitive(const Shape& x, const Shape& y) const {
        thread_local std::vector<int64_t> key;  // kept: a cache hit allocates nothing
        key.clear();
        key_append(key, x);
        key_append(key, y);
        return cache_.get(key, [&]() -> StatusOr<ConvPrim> {
            ConvPrim c;
            Status st = guarded("convolution primitive", [&] { return build(x, y, c); });
            if (st.code() == ErrorCode::unsupported) return ConvPrim{};
            if (!st.is_ok()) return st;
            return c;
        });
    }

    Status build(const Shape& x, const Shape& y, ConvPrim& c) const {
        const int nsp = x.rank() - 2;
        if (nsp < 1 || nsp > 3 || x.num_elements() == 0 || y.num_elements() == 0)
            return Status(ErrorCode::unsupported, "shape");
        dims strides, dil, pl, pr;
        for (int i = 0; i < nsp; ++i) {
            const int64_t k = w_shape_[2 + i];
            const int64_t s = attr_at(a_.strides, i, 1);
            const int64_t d = attr_at(a_.dilations, i, 1);
            strides.push_back(s);
            dil.push_back(d - 1);
            if (!transpose_) {
                DSINFER_ASSIGN_OR_RETURN(WindowDim wd, window_dim(i, nsp, x[2 + i], k, s, d,
                                                                  a_.auto_pad, a_.pads, false));
                if (wd.out != y[2 + i]) return Status(ErrorCode::unsupported, "geometry");
                pl.push_back(wd.pb);
                pr.push_back(wd.pe);
            } else {
                if (a_.auto_pad != AutoPad::notset || !a_.output_shape.empty())
                    return Status(ErrorCode::unsupported, "ConvTranspose auto_pad/output_shape");
                const int64_t b = attr_at(a_.pads, i, 0);
                // dst = (src - 1) * s + (k - 1) * d + 1 - pl - pr; the fallback's output shape
                // includes output_padding, which oneDNN sees as less end padding.
                const int64_t e = (x[2 + i] - 1) * s + (k - 1) * d + 1 - b - y[2 + i];
                if (b < 0 || e < 0) return Status(ErrorCode::unsupported, "negative padding");
                pl.push_back(b);
                pr.push_back(e);
            }
        }
        const bool blocked = nsp == 2;
        if (!transpose_ && blocked && blocked_in_ && blocked_out_ && a_.group == 1 &&
            dil[0] == 0 && dil[1] == 0 && epilogue_.output_scale == 1.f &&
            (channel_block() == 8 || channel_block() == 16)) {
            ConvGemmShape g;
            g.n = x[0];
            g.c = x[1];
            g.h = x[2];
            g.w = x[3];
            g.oc = y[1];
            g.oh = y[2];
            g.ow = y[3];
            g.kh = w_shape_[2];
            g.kw = w_shape_[3];
            g.sh = strides[0];
            g.sw = strides[1];
            g.ph = pl[0];
            g.pw = pl[1];
            g.block = channel_block();
            // dsinfer's blocked kernels take dense (group 1) weights; whole channel blocks on
            // both sides are the dispatcher's condition.
            const bool dense = g.c == w_shape_[1] && g.oc == w_shape_[0];
            const ConvAlgoSet candidates =
                dense ? kConvAlgosAll : conv_algo_bit(ConvAlgo::onednn_direct);
            ConvAlgo algo = choose_conv_algo(g, ConvLayout::blocked, candidates);
            if (measure_) {
                DSINFER_ASSIGN_OR_RETURN(algo, measure(g, candidates, x, y,
                                                       DirectArgs{strides, dil, pl, pr}));
            }
            if (algo == ConvAlgo::winograd_f4x3) {
                DSINFER_ASSIGN_OR_RETURN(c.winograd_weights, winograd_weights(g));
                c.geometry = g;
                c.winograd = true;
                c.scratch_bytes = conv_winograd_workspace_bytes(g, max_threads());
                c.usable = true;
                return Status::ok();
            }
            if (algo == ConvAlgo::im2col_gemm) {
                DSINFER_ASSIGN_OR_RETURN(c.gemm_weights, gemm_weights(g));
                c.geometry = g;
                c.gemm = true;
                c.scratch_bytes = conv_gemm_workspace_bytes(g, max_threads());
                c.usable = true;
                return Status::ok();
            }
        }
        const dnnl::memory::desc chosen =
            direct(x, y, blocked && blocked_in_, blocked && blocked_out_,
                   DirectArgs{strides, dil, pl, pr}, c);
        // oneDNN's reference implementation (no optimized one takes these layouts, e.g. a
        // plain input of 615 channels into a blocked output) is 100-1000x slower than the next
        // backend's kernel: ResNet-50's 1x1 convolutions after 40% channel pruning took
        // 0.8-1.9 s each. That kernel (dsinfer's im2col + packed GEMM) runs these shapes.
        if (c.impl.rfind("onednn:ref", 0) == 0)
            return Status::error(ErrorCode::unsupported, "oneDNN has only its reference ",
                                 "implementation for this convolution (", c.impl, ")");
        c.weights = packer_.get(user_md(), chosen);
        c.weights_md = chosen;
        c.usable = true;
        return Status::ok();
    }

    struct DirectArgs {
        const dims& strides;
        const dims& dil;
        const dims& pl;
        const dims& pr;
    };

    /// oneDNN's direct (de)convolution primitive for X -> Y into `c` (all but its weights);
    /// returns the weights' layout it asks for.
    dnnl::memory::desc direct(const Shape& x, const Shape& y, bool blocked_in, bool blocked_out,
                              const DirectArgs& geo, ConvPrim& c) const {
        c.src_md = act_md(x, blocked_in);
        c.dst_md = act_md(y, blocked_out);
        c.padded_dst = blocked_in && !blocked_out && !transpose_ && x.rank() == 4 &&
                       !blockable_channels(y[1]);
        if (c.padded_dst) {
            c.plain_dst_md = c.dst_md;
            c.dst_md = act_md(y, true);  // channels padded to the block
        }
        const auto src_any = c.src_md, dst_any = c.dst_md;
        const dnnl::memory::desc w_any(user_md().dims(), dt::f32, tag::any);
        if (bias_) c.bias_md = dnnl::memory::desc({bias_->num_elements()}, dt::f32, tag::a);
        const auto attr = epilogue_.attr();
        dnnl::memory::desc chosen;
        auto make = [&]<class Prim>(dnnl::algorithm alg) {
            auto d = bias_ ? typename Prim::desc(dnnl::prop_kind::forward_inference, alg, src_any,
                                                 w_any, c.bias_md, dst_any, geo.strides, geo.dil,
                                                 geo.pl, geo.pr)
                           : typename Prim::desc(dnnl::prop_kind::forward_inference, alg, src_any,
                                                 w_any, dst_any, geo.strides, geo.dil, geo.pl,
                                                 geo.pr);
            typename Prim::primitive_desc pd(d, attr, cpu_engine());
            c.prim = Prim(pd);
            c.impl = primitive_name(pd);
            chosen = pd.weights_desc();
            c.scratch_md = pd.scratchpad_desc();
        };
        if (!transpose_)
            make.template operator()<dnnl::convolution_forward>(dnnl::algorithm::convolution_direct);
        else
            make.template operator()<dnnl::deconvolution_forward>(
                dnnl::algorithm::deconvolution_direct);
        c.scratch_bytes = c.scratch_md.get_size();
        if (c.padded_dst) {
            c.padded_dst_offset = (c.scratch_bytes + 63) / 64 * 64;
            c.scratch_bytes = c.padded_dst_offset + c.dst_md.get_size();
        }
        return chosen;
    }

    /// The fastest blocked-layout candidate for geometry `g` (measure_conv_algo), each timed
    /// on zeros with weights of its own made for the timing only (the store's forms are made
    /// for the winner alone, by build). The direct primitive is JIT-compiled for the timing
    /// and again by build if it wins.
    StatusOr<ConvAlgo> measure(const ConvGemmShape& g, ConvAlgoSet candidates, const Shape& x,
                               const Shape& y, const DirectArgs& geo) const {
        const ConvAlgoSet todo = conv_algos_applicable(g, ConvLayout::blocked, candidates);
        if (todo == 0 || (todo & (todo - 1)) == 0)
            return choose_conv_algo(g, ConvLayout::blocked, candidates);
        DSINFER_ASSIGN_OR_RETURN(std::shared_ptr<const Tensor> w, packer_.plain(user_md()));
        const int64_t threads = max_threads();
        ConvPrim d;  // oneDNN's, with its weights reordered here
        std::optional<dnnl::memory> d_weights;
        if ((todo & conv_algo_bit(ConvAlgo::onednn_direct)) != 0) {
            d.weights_md = direct(x, y, true, true, geo, d);
            d_weights.emplace(d.weights_md, cpu_engine());
            dnnl::memory user(user_md(), cpu_engine(), const_cast<float*>(w->data_unchecked<float>()));
            dnnl::reorder(user, *d_weights).execute(thread_stream(), user, *d_weights);
            thread_stream().wait();
            d.weights = std::shared_ptr<const dnnl::memory>(&*d_weights, [](const dnnl::memory*) {});
            d.usable = true;
        }
        ConvPrim own;  // dsinfer's: geometry and weights set per candidate below
        own.geometry = g;
        const std::size_t ws_bytes = std::max(
            {d.scratch_bytes, conv_gemm_workspace_bytes(g, threads),
             conv_winograd_workspace_bytes(g, threads)});
        const std::size_t x_bytes = act_md(x, true).get_size(), y_bytes = act_md(y, true).get_size();
        std::vector<unsigned char> buf(x_bytes + y_bytes + ws_bytes + 3 * 64, 0);
        auto at = [&](std::size_t off) {
            return buf.data() + (off + 63) / 64 * 64;
        };
        void* xp = at(0);
        TensorView yv;
        yv.raw = at(x_bytes + 64);
        yv.shape = y;
        void* ws = at(x_bytes + y_bytes + 128);
        const float* wp = w->data_unchecked<float>();
        return measure_conv_algo(
            g, ConvLayout::blocked, candidates, static_cast<int>(threads), [&](ConvAlgo a) {
                ConvPrim* c = &own;
                own.gemm = a == ConvAlgo::im2col_gemm;
                own.winograd = a == ConvAlgo::winograd_f4x3;
                if (a == ConvAlgo::onednn_direct) {
                    c = &d;
                } else if (own.gemm && !own.gemm_weights) {
                    own.gemm_weights =
                        std::make_shared<const PackedB>(pack_conv_gemm_weights(wp, g));
                } else if (own.winograd && !own.winograd_weights) {
                    own.winograd_weights = std::make_shared<const WinogradWeights>(
                        pack_winograd_weights(std::shared_ptr<const float>(w, wp), g));
                }
                // The activation epilogue is part of the timing; the residual is not.
                return compute(*c, xp, nullptr, yv, ws, ws_bytes).is_ok();
            });
    }

    /// The weights packed for conv_gemm (the weight store's form: once per weights and ISA,
    /// the same for every shape class). The stored ones are let go then (the node's own
    /// kernel), rebuilt from this copy on demand.
    StatusOr<std::shared_ptr<const PackedB>> gemm_weights(const ConvGemmShape& g) const {
        std::lock_guard<std::mutex> lock(gemm_mu_);
        if (gemm_w_) return gemm_w_;
        DSINFER_ASSIGN_OR_RETURN(std::shared_ptr<const Tensor> w, packer_.plain(user_md()));
        DSINFER_ASSIGN_OR_RETURN(auto packed, conv_gemm_form(packer_.store(), packer_.source(),
                                                             w->data_unchecked<float>(), g));
        gemm_w_ = packed;
        const Shape shape = w_shape_;
        packer_.drop_original([packed, g, shape]() -> StatusOr<Tensor> {
            DSINFER_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(DType::f32, shape));
            unpack_conv_gemm_weights(*packed, g, t.data_unchecked<float>());
            return t;
        });
        return gemm_w_;
    }

    /// The weights transformed for Winograd (the weight store's form: once per weights and
    /// ISA, shared with the "cpu" Conv on the same weights). The stored ones stay: the
    /// transform has no exact inverse, and the im2col GEMM (a shape class with few tiles), a
    /// oneDNN shape class or the fallback needs them bitwise.
    StatusOr<std::shared_ptr<const WinogradWeights>> winograd_weights(const ConvGemmShape& g) const {
        std::lock_guard<std::mutex> lock(gemm_mu_);
        if (wino_) return wino_;
        DSINFER_ASSIGN_OR_RETURN(std::shared_ptr<const Tensor> w, packer_.plain(user_md()));
        DSINFER_ASSIGN_OR_RETURN(wino_, winograd_form(packer_.store(), packer_.source(), w, g));
        return wino_;
    }

    bool transpose_;
    ConvAttrs a_;
    Shape w_shape_;
    std::optional<Tensor> bias_;
    Epilogue epilogue_;
    bool residual_ = epilogue_.sum;
    bool own_weights_;
    bool measure_;  ///< EngineOptions::algo_search == measure: time the blocked candidates
    bool blocked_in_ = false, blocked_out_ = false;
    std::uint64_t in_mask_ = 0, out_mask_ = 0;
    WeightPacker packer_;
    PrimitiveCache<ConvPrim> cache_;
    mutable std::mutex gemm_mu_;
    mutable std::shared_ptr<const PackedB> gemm_w_;
    mutable std::shared_ptr<const WinogradWeights> wino_;
};

template <bool Transpose>
StatusOr<std::unique_ptr<Kernel>> make_conv(const KernelCreateContext& ctx) {
    const Value* x = ctx.input_value(0);
    const Tensor* w = ctx.constant_input(1);
    if (x == nullptr || !x->dtype || *x->dtype != DType::f32 || w == nullptr ||
        w->dtype() != DType::f32 || w->num_dims() < 3 || w->num_dims() > 5 ||
        w->num_elements() == 0)
        return Status::error(ErrorCode::unsupported, "f32 with constant weights only");
    std::optional<Tensor> bias;
    if (ctx.has_input(2)) {
        const Tensor* b = ctx.constant_input(2);
        if (b == nullptr || b->dtype() != DType::f32)
            return Status::error(ErrorCode::unsupported, "constant f32 bias only");
        bias = *b;
    }
    // The fallback validates the attributes (invalid_model) before we read them.
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(ConvAttrs a, parse_conv_attrs(ctx, Transpose));
    if (a.group < 1) return Status::error(ErrorCode::unsupported, "group");
    DSINFER_ASSIGN_OR_RETURN(Epilogue e, epilogue_from_attributes(ctx));
    if (ctx.has_input(3)) {  // FusedConv's residual: Y = act(conv + B + Z)
        const Value* z = ctx.input_value(3);
        if (Transpose || z == nullptr || !z->dtype || *z->dtype != DType::f32)
            return Status::error(ErrorCode::unsupported, "f32 residual only");
        e.sum = true;
    }
    return make_kernel<OnednnConvKernel>(std::move(fallback), Transpose, std::move(a),
                                         ctx.weight_store(), *w, std::move(bias), e,
                                         !ctx.creating_fallback(), ctx.measure_algorithms());
}

}  // namespace

void register_conv(KernelRegistry& r) {
    const DTypeSet f32{DType::f32};
    r.add({"Conv", "", 1, kMaxOpset, DeviceKind::cpu, f32}, &make_conv<false>, kPriorityOnednn,
          "onednn");
    r.add({"ConvTranspose", "", 1, kMaxOpset, DeviceKind::cpu, f32}, &make_conv<true>,
          kPriorityOnednn, "onednn");
    r.add({"FusedConv", kDsinferDomain, 1, 1, DeviceKind::cpu, f32}, &make_conv<false>,
          kPriorityOnednn, "onednn");
}

}  // namespace dsinfer::detail::onednn
