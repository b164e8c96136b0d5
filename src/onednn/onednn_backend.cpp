// The oneDNN backend: engine, streams, shared helpers and registration of every oneDNN kernel.
#include <dnnl.hpp>
#include <oneapi/dnnl/dnnl_debug.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "kernels/activation_f32.hpp"
#include "kernels/simd.hpp"
#include "runtime/parallel.hpp"
#include "dsinfer/backends/onednn.hpp"
#include "onednn/onednn_common.hpp"

namespace dsinfer {
namespace detail::onednn {

namespace {

/// DSINFER_MAX_CPU_ISA caps oneDNN's JIT kernels as it caps dsinfer's own (kernels/simd.hpp):
/// avx2 -> oneDNN's avx2 (no AVX2-VNNI, no AVX-512), baseline -> SSE4.1, oneDNN's lowest JIT
/// level. oneDNN fixes its ISA the first time it reads it, so this runs before anything else
/// of oneDNN (cpu_engine, channel_block). A cap oneDNN refuses (ONEDNN_MAX_CPU_ISA already
/// set, or the ISA already read by the host application) leaves oneDNN's own choice, which
/// channel_block() then reports.
bool apply_isa_cap() noexcept {
    static const bool applied = [] {
        const char* cap = std::getenv("DSINFER_MAX_CPU_ISA");
        if (cap == nullptr) return false;
        const std::string_view c(cap);
        try {
            if (c == "avx2") return dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) == dnnl::status::success;
            if (c == "baseline")
                return dnnl::set_max_cpu_isa(dnnl::cpu_isa::sse41) == dnnl::status::success;
        } catch (const dnnl::error&) {
        }
        return false;
    }();
    return applied;
}

}  // namespace

dnnl::engine& cpu_engine() {
    static dnnl::engine eng = [] {
        (void)apply_isa_cap();
        return dnnl::engine(dnnl::engine::kind::cpu, 0);
    }();
    return eng;
}

dnnl::stream& thread_stream() {
    thread_local dnnl::stream s(cpu_engine());
    return s;
}

int channel_block() {
    static const int block = [] {
        (void)apply_isa_cap();
        // oneDNN's ISA values are nested bit sets: every AVX-512 core level (VNNI, BF16, AMX,
        // and later ones) contains avx512_core's bits, AVX2-VNNI does not.
        const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
        const auto core = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
        return (isa & core) == core ? 16 : 8;
    }();
    return block;
}

tag blocked_tag4() { return channel_block() == 16 ? tag::nChw16c : tag::nChw8c; }

bool blockable_channels(std::int64_t channels) {
    return channels > 0 && channels % channel_block() == 0;
}

std::string primitive_name(const dnnl::primitive_desc_base& pd) {
    const char* impl = pd.impl_info_str();
    const char* kind = dnnl_prim_kind2str(static_cast<dnnl_primitive_kind_t>(pd.get_kind()));
    std::string name = "onednn:";
    name += impl != nullptr ? impl : "?";
    name += ' ';
    name += kind != nullptr ? kind : "primitive";
    return name;
}

Status from_error(const dnnl::error& e, const char* what) {
    const ErrorCode code = e.status == dnnl_unimplemented ? ErrorCode::unsupported
                           : e.status == dnnl_out_of_memory ? ErrorCode::resource_exhausted
                                                            : ErrorCode::internal;
    return Status::error(code, "oneDNN ", what, ": ", e.what());
}

dnnl::memory::desc rowmajor_md(const dims& d, bool transposed_last2, dt type) {
    dims strides(d.size());
    std::int64_t acc = 1;
    for (int i = static_cast<int>(d.size()) - 1; i >= 0; --i) {
        strides[static_cast<std::size_t>(i)] = acc;
        acc *= std::max<std::int64_t>(d[static_cast<std::size_t>(i)], 1);
    }
    if (transposed_last2 && d.size() >= 2) {
        const std::size_t r = d.size();
        strides[r - 1] = std::max<std::int64_t>(d[r - 2], 1);
        strides[r - 2] = 1;
    }
    return dnnl::memory::desc(d, type, strides);
}

dnnl::memory::desc plain_md(const Shape& s, dt type) {
    if (s.rank() == 0) return dnnl::memory::desc({1}, type, tag::a);
    return rowmajor_md(to_dims(s), false, type);
}

namespace {
std::atomic<std::uint64_t> exact_builds{0}, piece_builds{0};
}  // namespace

namespace {
std::int64_t floor_pow2(std::int64_t v) {
    std::int64_t p = 1;
    while (p * 2 <= v) p *= 2;
    return p;
}
std::int64_t ceil_pow2(std::int64_t v) {
    std::int64_t p = 1;
    while (p < v) p *= 2;
    return p;
}
}  // namespace

void row_pieces(std::int64_t m, bool overlap,
                std::vector<std::pair<std::int64_t, std::int64_t>>& out, int tail_pieces) {
    const int kTailPieces = std::max(tail_pieces, 2);
    out.clear();
    std::int64_t row = 0;
    for (; m - row >= kMaxPieceRows; row += kMaxPieceRows) out.emplace_back(row, kMaxPieceRows);
    for (int i = 0; row < m; ++i) {
        const std::int64_t rest = m - row;
        std::int64_t rows = floor_pow2(rest);
        if (overlap && rows != rest && i == kTailPieces - 1) {
            // <= the piece before (or m, after full tiles): starts at m - rows >= 0.
            rows = ceil_pow2(rest);
            out.emplace_back(m - rows, rows);
            break;
        }
        out.emplace_back(row, rows);
        row += rows;
    }
}

PrimitiveBuilds primitive_builds() noexcept {
    return {exact_builds.load(std::memory_order_relaxed), piece_builds.load(std::memory_order_relaxed)};
}

void count_primitive_build(bool piece) noexcept {
    (piece ? piece_builds : exact_builds).fetch_add(1, std::memory_order_relaxed);
}

std::string store_layout(const dnnl::memory::desc& md) {
    const dnnl_memory_desc_t& d = md.data;
    std::string k = "onednn:";
    auto put = [&k](std::int64_t v) {
        k += std::to_string(v);
        k += ',';
    };
    put(d.ndims);
    put(static_cast<std::int64_t>(d.data_type));
    put(static_cast<std::int64_t>(d.format_kind));
    put(d.offset0);
    for (int i = 0; i < d.ndims; ++i) {
        put(d.dims[i]);
        put(d.padded_dims[i]);
        put(d.padded_offsets[i]);
    }
    if (d.format_kind == dnnl_blocked) {
        const auto& b = d.format_desc.blocking;
        for (int i = 0; i < d.ndims; ++i) put(b.strides[i]);
        put(b.inner_nblks);
        for (int i = 0; i < b.inner_nblks; ++i) {
            put(b.inner_blks[i]);
            put(b.inner_idxs[i]);
        }
    }
    put(static_cast<std::int64_t>(d.extra.flags));
    put(d.extra.compensation_mask);
    k += std::to_string(d.extra.scale_adjust);
    return k;
}

WeightPacker::WeightPacker(std::shared_ptr<WeightStore> store, const Tensor& weights,
                           bool drop_original)
    : store_(std::move(store)), drop_original_(drop_original) {
    source_ = store_->source(weights);
    w_ = store_->constant(source_);
}

std::optional<dnnl::memory::desc> WeightPacker::first_layout() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (packed_.empty()) return std::nullopt;
    return packed_.front().first;
}

std::shared_ptr<const dnnl::memory> WeightPacker::get(const dnnl::memory::desc& have,
                                                      const dnnl::memory::desc& want) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [md, mem] : packed_)
        if (md == want) return mem;
    const bool held = w_ != nullptr && w_->raw_data() != nullptr;
    if (held && want == have) {
        // The primitive reads the stored layout (e.g. oneDNN's sgemm-based f32 matmul without
        // AVX-512): use the weights in place instead of holding a second copy. The memory
        // object aliases w_, which this packer keeps alive.
        auto same = std::make_shared<dnnl::memory>(have, cpu_engine(), const_cast<void*>(w_->raw_data()));
        packed_.emplace_back(want, same);
        aliased_ = true;
        return same;
    }
    StatusOr<std::shared_ptr<const dnnl::memory>> form = store_->get<dnnl::memory>(
        source_, WeightKind::packed, store_layout(have) + "->" + store_layout(want), "onednn",
        [&]() -> StatusOr<WeightBuild<dnnl::memory>> {
            auto out = std::make_shared<dnnl::memory>(want, cpu_engine());
            // From the stored weights, or (once they are gone) from the first packed copy, or
            // from the owner's own copy (drop_original).
            if (!held && packed_.empty() && plain_ == nullptr) {
                if (!restore_) throw std::runtime_error("weights dropped before they were packed");
                StatusOr<Tensor> t = restore_();
                if (!t.is_ok()) throw std::runtime_error(t.status().message());
                plain_ = std::make_shared<const Tensor>(std::move(t).value());
            }
            dnnl::memory src = held               ? wrap(have, w_->raw_data())
                               : packed_.empty() ? wrap(have, plain_->raw_data())
                                                 : *packed_.front().second;
            auto& s = thread_stream();
            dnnl::reorder(src, *out).execute(s, src, *out);
            s.wait();
            return WeightBuild<dnnl::memory>{out, want.get_size()};
        });
    if (!form.is_ok()) {
        // Out of memory stays out of memory (the callers' guards make it resource_exhausted;
        // any other exception would read as "primitive unavailable" and hide the failure).
        if (form.status().code() == ErrorCode::resource_exhausted) throw std::bad_alloc();
        throw std::runtime_error(std::string(form.status().message()));
    }
    packed_.emplace_back(want, form.value());
    if (held && drop_original_ && !aliased_) w_ = nullptr;
    if (restore_) plain_ = nullptr;  // rebuilt on demand
    return form.value();
}

void WeightPacker::drop_original(std::function<StatusOr<Tensor>()> restore) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!drop_original_ || aliased_) return;
    w_ = nullptr;
    plain_ = nullptr;
    restore_ = std::move(restore);
}

StatusOr<std::shared_ptr<const Tensor>> WeightPacker::plain(const dnnl::memory::desc& have) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (w_ != nullptr && w_->raw_data() != nullptr) return w_;
    if (plain_ != nullptr) return plain_;
    // Still resident elsewhere (another kernel holds the stored form)?
    if (auto stored = store_->constant(source_); stored && stored->raw_data() != nullptr) {
        plain_ = std::move(stored);
        return plain_;
    }
    if (packed_.empty() && !restore_)
        return Status(ErrorCode::internal, "weights dropped before they were packed");
    // Rebuilt in the stored layout: a stored form the store reports while this packer holds it.
    DSINFER_ASSIGN_OR_RETURN(
        plain_, store_->get<Tensor>(
                    source_, WeightKind::stored, "onnx", "",
                    [&]() -> StatusOr<WeightBuild<Tensor>> {
                        Tensor t;
                        if (packed_.empty()) {
                            DSINFER_ASSIGN_OR_RETURN(t, restore_());
                        } else {
                            DSINFER_ASSIGN_OR_RETURN(
                                t, Tensor::allocate(DType::f32,
                                                    Shape{static_cast<std::int64_t>(
                                                        have.get_size() / sizeof(float))}));
                            dnnl::memory src = *packed_.front().second;
                            dnnl::memory dst = wrap(have, t.raw_data());
                            auto& s = thread_stream();
                            dnnl::reorder(src, dst).execute(s, src, dst);
                            s.wait();
                        }
                        const std::uint64_t bytes = t.num_bytes();
                        return WeightBuild<Tensor>{std::make_shared<const Tensor>(std::move(t)),
                                                   bytes};
                    },
                    /*own=*/false));
    return plain_;
}

dnnl::memory::desc act_md(const Shape& s, bool blocked) {
    if (blocked && s.rank() == 4) return dnnl::memory::desc(to_dims(s), dt::f32, blocked_tag4());
    return plain_md(s);
}

dnnl::primitive_attr Epilogue::attr() const {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (output_scale != 1.f) a.set_output_scales(0, {output_scale});
    dnnl::post_ops po;
    if (sum) po.append_sum(sum_scale);
    if (activation != dnnl::algorithm::undef) po.append_eltwise(1.f, activation, alpha, beta);
    if (po.len() > 0) a.set_post_ops(po);
    return a;
}

StatusOr<Epilogue> epilogue_from_attributes(const KernelCreateContext& ctx) {
    Epilogue e;
    DSINFER_ASSIGN_OR_RETURN(e.act, activation_from_attributes(ctx));
    using A = dnnl::algorithm;
    e.alpha = 0.f;
    e.beta = 0.f;
    switch (e.act.kind) {
        case Activation::none: break;
        case Activation::relu: e.activation = A::eltwise_relu; break;
        case Activation::leaky_relu: e.activation = A::eltwise_relu, e.alpha = e.act.alpha; break;
        case Activation::gelu: e.activation = A::eltwise_gelu_erf; break;
        case Activation::gelu_tanh: e.activation = A::eltwise_gelu_tanh; break;
        case Activation::tanh: e.activation = A::eltwise_tanh; break;
        case Activation::sigmoid: e.activation = A::eltwise_logistic; break;
        case Activation::clip:
            e.activation = A::eltwise_clip, e.alpha = e.act.alpha, e.beta = e.act.beta;
            break;
        case Activation::hard_swish: e.activation = A::eltwise_hardswish; break;
    }
    // See Epilogue::activation_after: these post-ops turn NaN into a number.
    if (e.activation == A::eltwise_clip || e.activation == A::eltwise_logistic ||
        (e.activation == A::eltwise_relu && e.alpha == 0.f)) {
        e.activation = A::undef;
        e.activation_after = true;
    }
    return e;
}

void Epilogue::finish(const TensorView& y) const noexcept {
    if (!activation_after) return;
    float* p = static_cast<float*>(y.raw);
    const std::int64_t n = y.num_elements();
    // Relu, LeakyRelu and Clip cost a compare per value: chunks of 64 Ki values, so that the
    // small maps of a CNN's late layers do not start a parallel region for a few microseconds
    // of work. Sigmoid takes apply_activation_f32's vector loop and grain.
    constexpr std::int64_t kGrain = std::int64_t{1} << 16;
    switch (act.kind) {
        case Activation::relu: {
            const auto relu = fast::simd().unary[static_cast<int>(fast::Unary::relu)];
            parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) { relu(p + b, p + b, e - b); });
            return;
        }
        case Activation::leaky_relu:
        case Activation::clip: {
            const ActivationSpec a = act;
            parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
                for (std::int64_t i = b; i < e; ++i) p[i] = apply_activation(p[i], a);
            });
            return;
        }
        default: apply_activation_f32(p, n, act); return;
    }
}

namespace {

/// This thread's memory objects, one per descriptor and use within one execution (a binary
/// op's two sources may share a descriptor), created without data and pointed at each run's.
struct MemorySlots {
    static constexpr std::size_t kMax = 64;
    struct Slot {
        dnnl::memory::desc md;
        dnnl::memory mem;
        std::uint64_t used = 0;  ///< the execution that last took it
    };
    std::vector<Slot> slots;
    std::uint64_t execution = 0;

    /// A memory object for md not yet taken by this execution.
    dnnl_memory_t take(const dnnl::memory::desc& md) {
        for (Slot& s : slots)
            if (s.used != execution && s.md == md) {
                s.used = execution;
                return s.mem.get();
            }
        dnnl::memory mem(md, cpu_engine(), DNNL_MEMORY_NONE);
        if (slots.size() >= kMax) {
            // Reuse a slot this execution has not taken (the taken ones are in use).
            for (Slot& s : slots)
                if (s.used != execution) {
                    s = {md, std::move(mem), execution};
                    return s.mem.get();
                }
        }
        slots.push_back({md, std::move(mem), execution});
        return slots.back().mem.get();
    }
};

Status status_of(dnnl_status_t st, const char* what) noexcept {
    if (st == dnnl_success) return Status::ok();
    const ErrorCode code = st == dnnl_unimplemented   ? ErrorCode::unsupported
                           : st == dnnl_out_of_memory ? ErrorCode::resource_exhausted
                                                      : ErrorCode::internal;
    return Status::error(code, "oneDNN ", what, ": status ", static_cast<int>(st));
}

}  // namespace

Status execute(const dnnl::primitive& p, const ExecArg* args, int n, const char* what) noexcept {
    if (n < 0 || n > kMaxExecArgs)
        return Status::error(ErrorCode::internal, what, ": ", n, " primitive arguments");
    try {
        thread_local MemorySlots memory;
        ++memory.execution;
        dnnl_exec_arg_t c_args[kMaxExecArgs];
        for (int i = 0; i < n; ++i) {
            dnnl_memory_t m = memory.take(*args[i].md);
            const Status st =
                status_of(dnnl_memory_set_data_handle(m, const_cast<void*>(args[i].data)), what);
            if (!st.is_ok()) return st;
            c_args[i] = {args[i].arg, m};
        }
        auto& s = thread_stream();
        DSINFER_RETURN_IF_ERROR(status_of(dnnl_primitive_execute(p.get(), s.get(), n, c_args), what));
        return status_of(dnnl_stream_wait(s.get()), what);
    } catch (const dnnl::error& e) {
        return from_error(e, what);
    } catch (const std::bad_alloc&) {
        return Status::error(ErrorCode::resource_exhausted, "out of memory in ", what);
    } catch (const std::exception& e) {
        return Status::error(ErrorCode::internal, what, ": ", e.what());
    }
}

namespace {
constexpr std::size_t kAlign = 64;
std::size_t aligned(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
bool blocked_slot(std::uint64_t mask, int i, const Shape& s) {
    return i < 64 && (mask >> i & 1u) != 0 && s.rank() == 4;
}
}  // namespace

Status FallbackKernel::run_fallback_with_weights(RunContext& ctx, const WeightPacker& packer,
                                                 const dnnl::memory::desc& stored,
                                                 const char* what, std::uint64_t blocked_in,
                                                 std::uint64_t blocked_out) const noexcept {
    try {
        StatusOr<std::shared_ptr<const Tensor>> w = packer.plain(stored);
        if (!w.is_ok()) return w.status();
        std::vector<TensorView> ins, outs;
        for (int i = 0; i < ctx.num_inputs(); ++i)
            ins.push_back(ctx.has_input(i) ? ctx.input(i) : TensorView{});
        for (int i = 0; i < ctx.num_outputs(); ++i)
            outs.push_back(ctx.has_output(i) ? ctx.output(i) : TensorView{});
        ins[1].raw = const_cast<void*>(w.value()->raw_data());
        RunContext with_weights(ctx.node(), std::move(ins), std::move(outs), ctx.workspace(),
                                ctx.workspace_bytes(), cpu_allocator(), ctx.control());
        ContextAccess::set_frame(with_weights, ctx.frame());
        return run_fallback(with_weights, blocked_in, blocked_out);
    } catch (const dnnl::error& e) {
        return from_error(e, what);
    } catch (const std::bad_alloc&) {
        return Status::error(ErrorCode::resource_exhausted, "out of memory restoring ", what,
                             " weights");
    } catch (const std::exception& e) {
        return Status::error(ErrorCode::internal, what, " weights: ", e.what());
    }
}

std::size_t FallbackKernel::relayout_bytes(const std::vector<Shape>& in,
                                           const std::vector<Shape>& out,
                                           std::uint64_t blocked_in, std::uint64_t blocked_out) {
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < in.size(); ++i)
        if (blocked_slot(blocked_in, static_cast<int>(i), in[i]))
            bytes += aligned(static_cast<std::size_t>(in[i].num_elements()) * sizeof(float));
    for (std::size_t i = 0; i < out.size(); ++i)
        if (blocked_slot(blocked_out, static_cast<int>(i), out[i]))
            bytes += aligned(static_cast<std::size_t>(out[i].num_elements()) * sizeof(float));
    return bytes;
}

Status FallbackKernel::run_fallback(RunContext& ctx, std::uint64_t blocked_in,
                                    std::uint64_t blocked_out) const noexcept {
    if (blocked_in == 0 && blocked_out == 0) {
        // The state prepare set is this kernel's, not the fallback's.
        const void* state = ctx.prepared_state();
        ContextAccess::set_prepared_state(ctx, nullptr);
        const Status st = fallback().run(ctx);
        ContextAccess::set_prepared_state(ctx, state);
        return st;
    }
    try {
        std::vector<Shape> in_shapes, out_shapes;
        std::vector<TensorView> ins, outs;
        for (int i = 0; i < ctx.num_inputs(); ++i) {
            ins.push_back(ctx.has_input(i) ? ctx.input(i) : TensorView{});
            in_shapes.push_back(ins.back().shape);
        }
        for (int i = 0; i < ctx.num_outputs(); ++i) {
            outs.push_back(ctx.has_output(i) ? ctx.output(i) : TensorView{});
            out_shapes.push_back(outs.back().shape);
        }
        const std::size_t copies = relayout_bytes(in_shapes, out_shapes, blocked_in, blocked_out);
        if (copies > ctx.workspace_bytes())
            return Status(ErrorCode::internal, "workspace too small for the layout conversion");
        const std::size_t base = (ctx.workspace_bytes() - copies) / kAlign * kAlign;
        auto* cursor = static_cast<unsigned char*>(ctx.workspace()) + base;
        auto& strm = thread_stream();
        auto convert = [&](const Shape& s, void* from, void* to, bool to_plain) {
            dnnl::memory a = wrap(act_md(s, to_plain), from);
            dnnl::memory b = wrap(act_md(s, !to_plain), to);
            dnnl::reorder(a, b).execute(strm, a, b);
            strm.wait();
        };
        std::vector<void*> out_blocked(outs.size(), nullptr);
        for (std::size_t i = 0; i < ins.size(); ++i) {
            if (!blocked_slot(blocked_in, static_cast<int>(i), in_shapes[i])) continue;
            convert(in_shapes[i], ins[i].raw, cursor, true);
            ins[i].raw = cursor;
            cursor += aligned(static_cast<std::size_t>(in_shapes[i].num_elements()) * sizeof(float));
        }
        for (std::size_t i = 0; i < outs.size(); ++i) {
            if (!blocked_slot(blocked_out, static_cast<int>(i), out_shapes[i])) continue;
            out_blocked[i] = outs[i].raw;
            outs[i].raw = cursor;
            cursor += aligned(static_cast<std::size_t>(out_shapes[i].num_elements()) * sizeof(float));
        }
        RunContext plain(ctx.node(), ins, outs, ctx.workspace(), base, cpu_allocator(),
                         ctx.control());
        ContextAccess::set_frame(plain, ctx.frame());
        DSINFER_RETURN_IF_ERROR(fallback().run(plain));
        for (std::size_t i = 0; i < outs.size(); ++i)
            if (out_blocked[i] != nullptr) convert(out_shapes[i], outs[i].raw, out_blocked[i], false);
        return Status::ok();
    } catch (const dnnl::error& e) {
        return from_error(e, "layout conversion");
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "out of memory in layout conversion");
    } catch (const std::exception& e) {
        return Status::error(ErrorCode::internal, "layout conversion: ", e.what());
    }
}

LayoutSupport SimplePrimitiveKernel::channel_layout(const Graph& g, const Node& n, bool output) {
    const Value& x = g.value(n.inputs[0]);
    if (!x.shape.known || x.shape.rank() != 4 || !x.shape.dims[1].is_static() ||
        !blockable_channels(x.shape.dims[1].value))
        return {};
    return output ? LayoutSupport{kBlockedLayout, 1, 1, true} : LayoutSupport{kBlockedLayout, 1, 0, false};
}

StatusOr<std::shared_ptr<const BoundPrimitive>> SimplePrimitiveKernel::lookup(
    const std::vector<Shape>& in, const std::vector<Shape>& out, const Scalars& sc) const {
    thread_local std::vector<std::int64_t> key;  // kept: a hit allocates nothing
    key.clear();
    for (const Shape& s : in) key_append(key, s);
    key.push_back(-1);
    for (const Shape& s : out) key_append(key, s);
    for (float f : sc) {
        std::uint32_t bits;
        std::memcpy(&bits, &f, sizeof bits);
        key.push_back(bits);
    }
    return cached_build(cache_, key, "primitive", false, [&](BoundPrimitive& p) {
        for (const Shape& s : in)
            if (s.num_elements() == 0) return Status(ErrorCode::unsupported, "empty");
        return build(in, out, sc, p);
    });
}

Status SimplePrimitiveKernel::prepare(PrepareContext& ctx) const {
    DSINFER_RETURN_IF_ERROR(prepare_fallback(ctx));
    if (ctx.probing()) return Status::ok();
    std::vector<Shape> in, out;
    std::vector<const void*> data;
    std::vector<DType> types;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
        const bool present = ctx.has_input(i);
        in.push_back(present ? ctx.input(i).shape() : Shape{});
        types.push_back(present ? ctx.input(i).dtype() : DType::f32);
        data.push_back(present ? ctx.input(i).raw_data() : nullptr);
        if (present && needs_scalars() && !ctx.has_data(i)) return Status::ok();
    }
    for (int i = 0; i < ctx.num_outputs(); ++i) {
        if (!ctx.has_output(i)) {
            out.emplace_back();
            continue;
        }
        if (!ctx.output_spec(i).set) return Status::ok();  // unknown at load
        out.push_back(ctx.output_spec(i).shape);
    }
    DSINFER_ASSIGN_OR_RETURN(Scalars sc, scalars(data, in, types));
    // A transient shape (FallbackKernel): row pieces or a bitwise-equal fallback, decided from
    // the shapes alone (not from what is cached), else the primitive. Not with blocked slots.
    std::shared_ptr<const BoundPrimitive> p;
    if (ctx.transient_shape() && blocked_in_mask_ == 0 && blocked_out_mask_ == 0) {
        DSINFER_ASSIGN_OR_RETURN(p, pieces(in, out, sc));
        if (p == nullptr && fallback_bitwise() &&
            (fast_fallback() || (!out.empty() && out[0].num_elements() <= kReferenceTransient))) {
            static const auto fallback = std::make_shared<const BoundPrimitive>();  // usable = false
            p = fallback;
        }
    }
    if (p == nullptr) {
        DSINFER_ASSIGN_OR_RETURN(p, lookup(in, out, sc));
    }
    if (p->usable)
        ctx.set_workspace(std::max(ctx.workspace_bytes(), p->scratch_bytes));
    else
        ctx.set_workspace(aligned(ctx.workspace_bytes()) +
                          relayout_bytes(in, out, blocked_in_mask_, blocked_out_mask_));
    // run() takes this choice (a planned run keeps it with the shape's prepare results).
    ctx.set_state(std::move(p));
    return Status::ok();
}

std::string SimplePrimitiveKernel::algorithm(const PrepareContext& ctx) const {
    const auto* p = static_cast<const BoundPrimitive*>(ctx.state());
    if (p == nullptr) return {};  // prepare chose nothing (unknown shapes): the provider
    if (!p->usable) return fallback_algorithm(ctx);
    if (!p->pieces.empty() && p->pieces.front().prim != nullptr)
        return p->pieces.front().prim->impl + " (row pieces)";
    return p->impl;
}

Status SimplePrimitiveKernel::run(RunContext& ctx) const noexcept {
    try {
        // What prepare chose for these shapes; without it (a caller that did not keep the
        // state), the cached primitive, built on a miss.
        const auto* prepared = static_cast<const BoundPrimitive*>(ctx.prepared_state());
        std::shared_ptr<const BoundPrimitive> looked_up;
        if (prepared == nullptr) {
            // Kept per thread: after a thread's first run nothing here allocates.
            thread_local std::vector<Shape> in, out;
            thread_local std::vector<const void*> data;
            thread_local std::vector<DType> types;
            in.clear();
            out.clear();
            data.clear();
            types.clear();
            for (int i = 0; i < ctx.num_inputs(); ++i) {
                const bool present = ctx.has_input(i);
                in.push_back(present ? ctx.input(i).shape : Shape{});
                types.push_back(present ? ctx.input(i).dtype : DType::f32);
                data.push_back(present ? ctx.input(i).raw : nullptr);
            }
            for (int i = 0; i < ctx.num_outputs(); ++i)
                out.push_back(ctx.has_output(i) ? ctx.output(i).shape : Shape{});
            DSINFER_ASSIGN_OR_RETURN(Scalars sc, scalars(data, in, types));
            DSINFER_ASSIGN_OR_RETURN(looked_up, lookup(in, out, sc));
            prepared = looked_up.get();
        }
        const BoundPrimitive& p = *prepared;
        if (!p.usable) return run_fallback(ctx, blocked_in_mask_, blocked_out_mask_);
        if (!p.pieces.empty()) return run_pieces(ctx, p);
        ExecArg args[kMaxExecArgs];
        int n = 0;
        for (const auto& a : p.args) {
            if (n == kMaxExecArgs - 1) return Status(ErrorCode::internal, "too many primitive arguments");
            const void* ptr = a.output ? ctx.output(a.index).raw : ctx.input(a.index).raw;
            args[n++] = {a.dnnl_arg, &a.md, ptr};
        }
        if (p.scratch_bytes > 0) args[n++] = {DNNL_ARG_SCRATCHPAD, &p.scratch_md, ctx.workspace()};
        return execute(p.prim, args, n, ctx.node().op_type.c_str());
    } catch (const dnnl::error& e) {
        return from_error(e, ctx.node().op_type.c_str());
    } catch (const std::bad_alloc&) {
        return Status(ErrorCode::resource_exhausted, "out of memory");
    } catch (const std::exception& e) {
        return Status(ErrorCode::internal, e.what());
    }
}

void SimplePrimitiveKernel::piece_shapes(const std::vector<Shape>& in, const std::vector<Shape>& out,
                                         const RowSplit& s, std::int64_t rows,
                                         std::vector<Shape>& piece_in,
                                         std::vector<Shape>& piece_out) const {
    piece_in = in;
    piece_out = out;
    for (std::size_t i = 0; i < in.size(); ++i)
        if (s.in_width[i] > 0) piece_in[i] = Shape{rows, s.in_width[i]};
    for (std::size_t i = 0; i < out.size(); ++i)
        if (s.out_width[i] > 0) piece_out[i] = Shape{rows, s.out_width[i]};
}

Shape SimplePrimitiveKernel::rows_before(const Shape& x, int axis, std::int64_t rows) {
    Shape p;
    for (int i = 0; i + 1 < axis; ++i) p.push_back(1);
    p.push_back(rows);
    for (int i = axis; i < x.rank(); ++i) p.push_back(x[i]);
    return p;
}

StatusOr<std::shared_ptr<const BoundPrimitive>> SimplePrimitiveKernel::pieces(
    const std::vector<Shape>& in, const std::vector<Shape>& out, const Scalars& sc) const {
    RowSplit s;
    if (!row_split(in, out, s) || s.rows <= 1 || s.in_width.size() != in.size() ||
        s.out_width.size() != out.size())
        return std::shared_ptr<const BoundPrimitive>{};
    auto plan = std::make_shared<BoundPrimitive>();
    plan->usable = true;
    // Every kernel here is f32: a row of width w is 4 w bytes.
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (s.in_width[i] > 0 && in[i].num_elements() != s.rows * s.in_width[i])
            return std::shared_ptr<const BoundPrimitive>{};
        plan->in_row_bytes.push_back(s.in_width[i] * 4);
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (s.out_width[i] > 0 && out[i].num_elements() != s.rows * s.out_width[i])
            return std::shared_ptr<const BoundPrimitive>{};
        plan->out_row_bytes.push_back(s.out_width[i] * 4);
    }
    thread_local std::vector<std::pair<std::int64_t, std::int64_t>> rows;
    // Two tail pieces: these ops cost far less a row than an execution (~4 us).
    row_pieces(s.rows, pieces_may_overlap(), rows, 2);
    std::vector<Shape> piece_in, piece_out;
    std::vector<std::int64_t> key;
    for (const auto& [row0, count] : rows) {
        // The row count, the widths, the shapes not split and the scalars.
        key.assign({count, -1});
        for (std::size_t i = 0; i < in.size(); ++i) {
            key.push_back(s.in_width[i]);
            if (s.in_width[i] == 0) key_append(key, in[i]);
        }
        key.push_back(-1);
        for (std::size_t i = 0; i < out.size(); ++i) {
            key.push_back(s.out_width[i]);
            if (s.out_width[i] == 0) key_append(key, out[i]);
        }
        for (float f : sc) {
            std::uint32_t bits;
            std::memcpy(&bits, &f, sizeof bits);
            key.push_back(bits);
        }
        piece_shapes(in, out, s, count, piece_in, piece_out);
        auto q = cached_build(piece_cache_, key, "piece primitive", true, [&](BoundPrimitive& b) {
            return build(piece_in, piece_out, sc, b);
        });
        if (!q.is_ok()) return q.status();
        if (!q.value()->usable) return std::shared_ptr<const BoundPrimitive>{};  // refused
        plan->scratch_bytes = std::max(plan->scratch_bytes, q.value()->scratch_bytes);
        plan->pieces.push_back({row0, std::move(q).value()});
    }
    return std::shared_ptr<const BoundPrimitive>(std::move(plan));
}

Status SimplePrimitiveKernel::run_pieces(RunContext& ctx, const BoundPrimitive& p) const noexcept {
    for (const BoundPrimitive::Piece& piece : p.pieces) {
        const BoundPrimitive& q = *piece.prim;
        ExecArg args[kMaxExecArgs];
        int n = 0;
        for (const auto& a : q.args) {
            if (n == kMaxExecArgs - 1) return Status(ErrorCode::internal, "too many primitive arguments");
            const auto i = static_cast<std::size_t>(a.index);
            const auto* base = static_cast<const unsigned char*>(a.output ? ctx.output(a.index).raw
                                                                          : ctx.input(a.index).raw);
            const std::int64_t row_bytes = a.output ? p.out_row_bytes[i] : p.in_row_bytes[i];
            args[n++] = {a.dnnl_arg, &a.md, base + piece.row0 * row_bytes};
        }
        if (q.scratch_bytes > 0) args[n++] = {DNNL_ARG_SCRATCHPAD, &q.scratch_md, ctx.workspace()};
        DSINFER_RETURN_IF_ERROR(execute(q.prim, args, n, ctx.node().op_type.c_str()));
    }
    return Status::ok();
}

}  // namespace detail::onednn

bool onednn_available() noexcept { return true; }

std::string onednn_version() {
    const dnnl_version_t* v = dnnl_version();
    (void)detail::onednn::channel_block();  // applies DSINFER_MAX_CPU_ISA first
    const char* isa = "other";
    switch (dnnl::get_effective_cpu_isa()) {
        case dnnl::cpu_isa::sse41: isa = "sse41"; break;
        case dnnl::cpu_isa::avx: isa = "avx"; break;
        case dnnl::cpu_isa::avx2: isa = "avx2"; break;
        case dnnl::cpu_isa::avx2_vnni: isa = "avx2_vnni"; break;
        case dnnl::cpu_isa::avx512_core: isa = "avx512_core"; break;
        case dnnl::cpu_isa::avx512_core_vnni: isa = "avx512_core_vnni"; break;
        case dnnl::cpu_isa::avx512_core_bf16: isa = "avx512_core_bf16"; break;
        case dnnl::cpu_isa::avx512_core_amx: isa = "avx512_core_amx"; break;
        default: break;
    }
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch) + " (cpu runtime: OpenMP, isa: " + isa + ")";
}

void register_onednn_kernels(KernelRegistry& registry) {
    namespace o = detail::onednn;
    o::register_matmul(registry);
    o::register_conv(registry);
    o::register_pool(registry);
    o::register_norm(registry);
    o::register_eltwise(registry);
    o::register_resize(registry);
    o::register_concat(registry);
}

}  // namespace dsinfer
