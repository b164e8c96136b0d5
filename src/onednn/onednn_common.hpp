// Shared pieces of the oneDNN backend (src/onednn/): the engine, per-thread streams, error
// conversion, memory descriptors for dsinfer tensors, the blocked activation layout, post-op
// epilogues, and the per-kernel primitive cache. Internal (dsinfer::detail::onednn).
//
// Threading: oneDNN is built with OpenMP (Debian), so a primitive runs on the calling thread's
// OpenMP team sized by omp_get_max_threads() — the engine's ThreadBudget. Primitives and
// packed weights are immutable after creation and shared by concurrent runs; each run makes
// its own dnnl::memory objects over its own buffers and passes a user-provided scratchpad
// (the kernel workspace), so no state is shared between concurrent executions.
#pragma once

#include <dnnl.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <unordered_map>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ops/activation.hpp"
#include "ops/fallback_kernel.hpp"
#include "ops/kernel_utils.hpp"
#include "runtime/parallel.hpp"
#include "dsinfer/kernel.hpp"
#include "dsinfer/kernel_registry.hpp"
#include "dsinfer/ops.hpp"

namespace dsinfer::detail::onednn {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

/// The process-wide CPU engine.
dnnl::engine& cpu_engine();
/// A stream for the calling thread (oneDNN CPU streams are cheap but not free to create).
dnnl::stream& thread_stream();

/// Layout id of the backend's blocked activation layout (kernel.hpp LayoutSupport).
inline constexpr int kBlockedLayout = 1;
/// Channel block of the blocked layout on this CPU: 16 with AVX-512, else 8 (nChw16c/nChw8c).
int channel_block();
/// The 4-D blocked format tag for channel_block().
tag blocked_tag4();
/// True when a rank-4 f32 tensor with `channels` (static) can use the blocked layout without
/// padding (so its byte size equals the row-major one).
bool blockable_channels(std::int64_t channels);

/// How InferenceEngine::describe() names what a primitive runs (Kernel::algorithm): "onednn:"
/// + the implementation oneDNN picked (primitive_desc::impl_info_str, e.g. "jit:avx512_core",
/// "brg:avx512_core", "gemm:jit", "ref:any") + the primitive kind ("convolution", "matmul").
std::string primitive_name(const dnnl::primitive_desc_base& pd);

/// Converts a oneDNN exception into a Status (unsupported for unimplemented, else internal).
Status from_error(const dnnl::error& e, const char* what);

/// Runs f() and turns oneDNN/std exceptions into a Status. For prepare/create paths.
template <class F>
Status guarded(const char* what, F&& f) noexcept {
    try {
        return f();
    } catch (const dnnl::error& e) {
        return from_error(e, what);
    } catch (const std::bad_alloc&) {
        return Status::error(ErrorCode::resource_exhausted, "out of memory in ", what);
    } catch (const std::exception& e) {
        return Status::error(ErrorCode::internal, what, ": ", e.what());
    }
}

inline dims to_dims(const Shape& s) {
    dims d;
    for (int i = 0; i < s.rank(); ++i) d.push_back(s[i]);
    return d;
}

/// Row-major (plain) descriptor of a shape; rank 0 becomes {1}.
dnnl::memory::desc plain_md(const Shape& s, dt type = dt::f32);
/// Row-major descriptor of dims; with `transposed_last2` the memory holds the last two dims
/// swapped ([..., cols, rows]), as Gemm's transA/transB operands do.
dnnl::memory::desc rowmajor_md(const dims& d, bool transposed_last2 = false, dt type = dt::f32);
/// A flat 1-D descriptor of n elements (layout-agnostic elementwise work).
inline dnnl::memory::desc flat_md(std::int64_t n, dt type = dt::f32) {
    return dnnl::memory::desc({n}, type, tag::a);
}
/// Row-major or blocked descriptor of a rank-4 activation.
dnnl::memory::desc act_md(const Shape& s, bool blocked);

/// Wraps a pointer as a dnnl::memory (no copy).
inline dnnl::memory wrap(const dnnl::memory::desc& md, const void* p) {
    return dnnl::memory(md, cpu_engine(), const_cast<void*>(p));
}

/// An activation applied after the main computation (oneDNN eltwise post-op), and an optional
/// in-place sum with the destination's previous contents. Step 3's fusions build these.
struct Epilogue {
    ActivationSpec act;  ///< the fused activation as dsinfer names it (paths without oneDNN)
    dnnl::algorithm activation = dnnl::algorithm::undef;
    float alpha = 0.f;
    float beta = 0.f;
    bool sum = false;       ///< dst = op(...) + sum_scale * dst_previous (before activation)
    float sum_scale = 1.f;
    float output_scale = 1.f;  ///< multiplies the result before sum/activation (Gemm alpha)

    /// The activation runs after the primitive, in dsinfer's loop, instead of as a post-op:
    /// oneDNN's post-op maps NaN to a number where the reference kernels keep it (Relu and
    /// LeakyRelu with alpha 0: NaN -> 0 or -Inf -> NaN, depending on the primitive; Clip gives
    /// its lower bound; Sigmoid in the convolution gives 0). attr() then leaves it out, and the
    /// kernel calls finish() on its output after the primitive
    /// (tests/unit/test_nonfinite_backends.cpp).
    bool activation_after = false;

    bool empty() const noexcept {
        return activation == dnnl::algorithm::undef && !activation_after && !sum &&
               output_scale == 1.f;
    }
    /// Primitive attributes: post-ops, output scale, user scratchpad.
    dnnl::primitive_attr attr() const;
    /// After the primitive wrote `y` (f32, either layout): the activation attr() left out, if
    /// any (activation_after), with the reference kernels' NaN/Inf semantics.
    void finish(const TensorView& y) const noexcept;
};

/// Reads the optional fused-activation attributes of dsinfer's fused ops (ops/activation.hpp;
/// invalid_model for unknown names).
StatusOr<Epilogue> epilogue_from_attributes(const KernelCreateContext& ctx);

/// True when one of x[0, n) is NaN or an infinity (vectorized at dsinfer's CPU ISA, split across
/// the thread budget when long). Kernels whose oneDNN primitive drops a NaN or mishandles an
/// infinity (MaxPool, Softmax/LogSoftmax, BatchNormalization's statistics, Resize onto input
/// samples) check their inputs with it and run their fallback when one holds such a value.
/// Defined in onednn_eltwise.cpp.
bool any_nonfinite(const float* x, std::int64_t n) noexcept;
/// True when one of x[0, n) is NaN.
bool any_nan(const float* x, std::int64_t n) noexcept;

/// A small thread-safe LRU cache of compiled primitives, keyed by a vector of integers (shapes
/// and flags) and the thread count the calling thread's budget allows now (max_threads()): a
/// oneDNN primitive sizes its OpenMP team when it is created (jcp.nthr, the brgemm split) and
/// runs `omp parallel num_threads(that)` whatever the budget is later, so a primitive made for
/// 2 threads must not serve a node the executor runs on 1 (a small node, a run whose lease got
/// fewer helpers). Values are shared_ptr, so a run keeps its entry alive even if evicted.
template <class V>
class PrimitiveCache {
public:
    using Key = std::vector<std::int64_t>;
    explicit PrimitiveCache(std::size_t capacity = 16) : capacity_(capacity) {}

    /// The entry for key (at this thread's budget) when one is cached (made most recent), else
    /// null. Builds nothing.
    std::shared_ptr<const V> find(const Key& key) const {
        const int threads = max_threads();
        std::lock_guard<std::mutex> lock(mu_);
        return find_locked(threads, key);
    }
    /// Entries cached now.
    std::size_t size() const {
        std::lock_guard<std::mutex> lock(mu_);
        return items_.size();
    }

    /// Returns the entry for key (at this thread's budget), building it with make() (returning
    /// StatusOr<V>) on a miss.
    template <class Make>
    StatusOr<std::shared_ptr<const V>> get(const Key& key, Make&& make) const {
        const int threads = max_threads();
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (auto hit = find_locked(threads, key)) return hit;
        }
        StatusOr<V> v = make();
        if (!v.is_ok()) return v.status();
        auto sp = std::make_shared<const V>(std::move(v).value());
        std::lock_guard<std::mutex> lock(mu_);
        items_.push_front(Item{threads, key, sp});
        if (items_.size() > capacity_) items_.pop_back();
        return sp;
    }

private:
    struct Item {
        int threads;
        Key key;
        std::shared_ptr<const V> value;
    };
    std::shared_ptr<const V> find_locked(int threads, const Key& key) const {
        for (auto it = items_.begin(); it != items_.end(); ++it) {
            if (it->threads == threads && it->key == key) {
                items_.splice(items_.begin(), items_, it);
                return items_.front().value;
            }
        }
        return nullptr;
    }

    std::size_t capacity_;
    mutable std::mutex mu_;
    mutable std::list<Item> items_;
};

/// Appends a shape to a cache key.
inline void key_append(std::vector<std::int64_t>& k, const Shape& s) {
    k.push_back(s.rank());
    for (int i = 0; i < s.rank(); ++i) k.push_back(s[i]);
}

/// One argument of a primitive's execution: oneDNN's name for it (DNNL_ARG_*), its descriptor
/// (owned by the cached primitive, so it outlives the call) and the data.
struct ExecArg {
    int arg;
    const dnnl::memory::desc* md;
    const void* data;
};
inline constexpr int kMaxExecArgs = 8;

/// Executes a primitive on this thread's stream, converting failures to Status. Allocates
/// nothing of dsinfer's after the first execution of a descriptor on a thread: the memory
/// objects are kept per thread and descriptor and pointed at the data (oneDNN's execute still
/// builds its own argument map inside libdnnl).
Status execute(const dnnl::primitive& p, const ExecArg* args, int n, const char* what) noexcept;

class WeightPacker;

/// Largest row piece of a transient shape (row_pieces).
inline constexpr std::int64_t kMaxPieceRows = 512;

/// The row pieces a transient shape of `m` rows runs, as (first row, rows), every row count a
/// power of two <= kMaxPieceRows: tiles of kMaxPieceRows, then greedy powers of two. With
/// `overlap`, at most `tail_pieces` (>= 2) tail pieces: the last rounds its rest up to a power
/// of two and ends at row m, overlapping the piece before (those rows are computed twice, the
/// second result kept: only for kernels whose output never aliases an input and that sum
/// nothing into it). So at most log2(kMaxPieceRows) + 1 = 10 primitives serve every m, with at
/// most m / kMaxPieceRows + tail_pieces executions (overlap; under 1/3 of the rows computed
/// twice with 2 tail pieces, 1/7 with 3) or + 9 (without). Defined in onednn_backend.cpp.
void row_pieces(std::int64_t m, bool overlap, std::vector<std::pair<std::int64_t, std::int64_t>>& out,
                int tail_pieces = 3);

/// Primitives created since the process started (tests: transient shapes build a bounded
/// number).
/// `exact`: for one exact shape class (every kernel's cache); `pieces`: for a row count of
/// transient shapes' row pieces (row_pieces; MatMul/Gemm and SimplePrimitiveKernel).
struct PrimitiveBuilds {
    std::uint64_t exact = 0;
    std::uint64_t pieces = 0;
};
PrimitiveBuilds primitive_builds() noexcept;
/// Counts one primitive creation (called by the builders).
void count_primitive_build(bool piece) noexcept;

/// The cache's entry for key, built on a miss by build(V&) under guarded(): unsupported gives
/// a default V (not usable: the shapes run on the fallback), another error fails; a build is
/// counted (primitive_builds(), `piece` or exact).
template <class V, class Build>
StatusOr<std::shared_ptr<const V>> cached_build(const PrimitiveCache<V>& cache,
                                                const std::vector<std::int64_t>& key,
                                                const char* what, bool piece, Build&& build) {
    return cache.get(key, [&]() -> StatusOr<V> {
        V v;
        Status st = guarded(what, [&] { return build(v); });
        if (st.code() == ErrorCode::unsupported) return V{};
        if (!st.is_ok()) return st;
        count_primitive_build(piece);
        return v;
    });
}

/// Base for oneDNN kernels, which own the kernel the next backend would use for the node
/// (FallbackKernelBase, src/ops/fallback_kernel.hpp): prepare() of the fallback validates inputs
/// and defines outputs (one set of semantics), and run-time shapes oneDNN cannot take are
/// delegated to it. What is oneDNN's own: running the fallback on row-major copies of the slots
/// negotiation made blocked (run_fallback), or with weights the kernel released
/// (run_fallback_with_weights), and whether the fallback is dsinfer's "cpu" kernel.
///
/// Transient shapes (PrepareContext::transient_shape: shapes inside their bucket, seen about
/// once): a kernel builds no primitive for the exact shapes, whatever is cached (the path is a
/// function of the shapes alone). Kernels whose op works row by row (MatMul/Gemm with packed
/// weights, unary eltwise, LayerNorm, Softmax over the trailing block) run the rows as pieces
/// of power-of-two row counts (row_pieces) on a few primitives cached per kernel, which give
/// the exact primitive's bits (same code per row; tested), so transient shapes do not change
/// the numbers. Binary ops run the fallback (one IEEE operation per element: the same bits)
/// when it builds nothing per shape and runs fast enough: dsinfer's multithreaded "cpu" kernel
/// (fast_fallback()), or the reference kernel on an output of at most kReferenceTransient
/// elements. Everything else builds as before. Prepare's choice is its state
/// (PrepareContext::set_state), which run() follows.
class FallbackKernel : public FallbackKernelBase {
public:
    using FallbackKernelBase::FallbackKernelBase;

    /// Set by the factory (make_onednn_kernel): the fallback is dsinfer's "cpu" kernel (the
    /// "cpu" backend implements the op below this one), else the reference kernel.
    void set_fast_fallback(bool fast) noexcept { fast_fallback_ = fast; }
    bool fast_fallback() const noexcept { return fast_fallback_; }
    /// The fallback's algorithm for a shape class this kernel hands it (Kernel::algorithm).
    /// The "cpu" backend's kernels always name theirs (at least "cpu"), so a fallback that
    /// names none is a reference kernel.
    std::string fallback_algorithm(const PrepareContext& ctx) const {
        return FallbackKernelBase::fallback_algorithm(ctx, "reference");
    }
    /// Output elements up to which a transient shape runs a binary op's reference kernel (at ~1-5
    /// ns an element, up to ~0.3 ms: a primitive's JIT compile costs 0.2-1.2 ms).
    static constexpr std::int64_t kReferenceTransient = std::int64_t{1} << 16;

protected:
    /// Runs the fallback, without this kernel's prepared state (unlike fallback_run). Inputs and
    /// outputs that negotiation made blocked (bits of the masks) are converted to row-major
    /// copies at the end of the workspace first (and outputs back after), since the fallback only
    /// knows row-major tensors; prepare reserved the space with relayout_bytes().
    Status run_fallback(RunContext& ctx, std::uint64_t blocked_in = 0,
                        std::uint64_t blocked_out = 0) const noexcept;
    /// run_fallback with constant input 1 read from the weights `packer` holds in the stored
    /// layout `stored` (the executor's initializer has no data once the kernel released it).
    /// `what` names the op in errors.
    Status run_fallback_with_weights(RunContext& ctx, const WeightPacker& packer,
                                     const dnnl::memory::desc& stored, const char* what,
                                     std::uint64_t blocked_in = 0,
                                     std::uint64_t blocked_out = 0) const noexcept;
    /// Workspace the row-major copies of run_fallback need for these shapes.
    static std::size_t relayout_bytes(const std::vector<Shape>& in, const std::vector<Shape>& out,
                                      std::uint64_t blocked_in, std::uint64_t blocked_out);

private:
    bool fast_fallback_ = false;
};

/// make_kernel for FallbackKernel subclasses, over the fallback the factory created first
/// (ctx.create_fallback(), before it reads the attributes the fallback validates, so a bad node
/// fails with the fallback's error; make_with_fallback where nothing is read): also records
/// whether the fallback is dsinfer's "cpu" kernel (that backend implements the node's op below
/// this one).
template <class K, class... Args>
StatusOr<std::unique_ptr<Kernel>> make_onednn_kernel(const KernelCreateContext& ctx,
                                                     Args&&... args) {
    auto k = std::make_unique<K>(std::forward<Args>(args)...);
    k->set_fast_fallback(ctx.lower_provider("cpu"));
    return std::unique_ptr<Kernel>(std::move(k));
}

/// A constant weight tensor reordered into the layouts primitives ask for: once per distinct
/// layout, in the engine's weight store (layout "onednn:<view of the stored tensor>->onednn:
/// <primitive's layout>", target "onednn": the view says which matrix the bytes are, e.g. B or
/// B^T of one stored tensor), so every shape class, concurrent run and node reading the same
/// weights the same way shares one copy.
///
/// With `drop_original`, the packer lets go of the stored weights (the store's stored form) as
/// soon as a first packed copy exists (a distinct buffer; not when a primitive reads the stored
/// layout in place): a kernel that declared them released (Kernel::released_constant_inputs)
/// then holds its weights once, packed. Later layouts are reordered from that copy, and plain()
/// rebuilds the stored layout on demand for a fallback kernel (a stored form the store reports
/// while it is held).
class WeightPacker {
public:
    WeightPacker(std::shared_ptr<WeightStore> store, const Tensor& weights,
                 bool drop_original = false);
    /// The weights (read through `have`, a view of the stored tensor) in layout `want`.
    std::shared_ptr<const dnnl::memory> get(const dnnl::memory::desc& have,
                                            const dnnl::memory::desc& want) const;
    /// The weights in the stored layout `have`: the stored tensor while it is resident, else a
    /// copy reordered back from the first packed one, or rebuilt by drop_original's `restore`
    /// when there is none (made once and kept; a rebuilt one only until the next get()).
    StatusOr<std::shared_ptr<const Tensor>> plain(const dnnl::memory::desc& have) const;
    /// For a caller that now holds the weights in a form of its own (dsinfer's packed GEMM):
    /// lets go of the stored tensor (when this packer may, and no packed entry reads it in
    /// place); `restore` rebuilds it, in the stored layout, when plain() or get() needs it.
    void drop_original(std::function<StatusOr<Tensor>()> restore) const;
    /// The layout of the first form get() made (the one to ask for again rather than add a
    /// copy), or nullopt before any.
    std::optional<dnnl::memory::desc> first_layout() const;
    WeightStore& store() const noexcept { return *store_; }
    WeightStore::Source source() const noexcept { return source_; }

private:
    std::shared_ptr<WeightStore> store_;
    WeightStore::Source source_;
    bool drop_original_;
    mutable std::shared_ptr<const Tensor> w_;  ///< the store's stored form, until dropped
    mutable bool aliased_ = false;  ///< a packed entry reads w_ in place: w_ must stay
    mutable std::shared_ptr<const Tensor> plain_;  ///< plain() after the original was dropped
    mutable std::function<StatusOr<Tensor>()> restore_;  ///< see drop_original
    mutable std::mutex mu_;
    mutable std::vector<std::pair<dnnl::memory::desc, std::shared_ptr<const dnnl::memory>>> packed_;
};

/// The weight store's layout name of a oneDNN memory descriptor: every field that decides
/// where each element lives (dims, data type, padding, blocking), so equal names mean equal
/// bytes for the same weights.
std::string store_layout(const dnnl::memory::desc& md);

/// A compiled primitive and how to bind its arguments to a node's tensors.
struct BoundPrimitive {
    bool usable = false;  ///< false: this shape class runs on the fallback kernel
    dnnl::primitive prim;
    struct Arg {
        int dnnl_arg;
        bool output;  ///< node output (else node input)
        int index;
        dnnl::memory::desc md;
    };
    std::vector<Arg> args;
    dnnl::memory::desc scratch_md;
    std::size_t scratch_bytes = 0;
    /// primitive_name of prim's descriptor (Kernel::algorithm; set() fills it).
    std::string impl;
    /// A transient shape's plan instead of prim (SimplePrimitiveKernel::row_split): each piece's
    /// primitive on rows [row0, row0 + its rows) of the split operands, in order.
    struct Piece {
        std::int64_t row0 = 0;
        std::shared_ptr<const BoundPrimitive> prim;
    };
    std::vector<Piece> pieces;
    /// Bytes of one row of each input and output (0: not split; every piece reads it whole).
    std::vector<std::int64_t> in_row_bytes, out_row_bytes;

    void bind(int dnnl_arg, bool output, int index, const dnnl::memory::desc& md) {
        args.push_back({dnnl_arg, output, index, md});
    }
    template <class PD>
    void set(const PD& pd, dnnl::primitive primitive) {
        prim = std::move(primitive);
        scratch_md = pd.scratchpad_desc();
        scratch_bytes = scratch_md.get_size();
        impl = primitive_name(pd);
        usable = true;
    }
};

/// Run-time facts a primitive depends on besides shapes (e.g. Clip's bounds).
using Scalars = std::vector<float>;

/// Transient shapes (FallbackKernel): how a kernel's shapes split into `rows` independent rows,
/// with the elements of one row per input and output (0: not split, read whole by every row).
struct RowSplit {
    std::int64_t rows = 0;
    std::vector<std::int64_t> in_width, out_width;
};

/// Base of the single-primitive kernels (eltwise, binary, pooling, normalization, softmax,
/// resampling): caches one BoundPrimitive per (input shapes, output shapes, scalars) and
/// delegates shape classes it cannot build to the fallback.
class SimplePrimitiveKernel : public FallbackKernel {
public:
    using FallbackKernel::FallbackKernel;

    Status prepare(PrepareContext& ctx) const override;
    Status run(RunContext& ctx) const noexcept override;
    /// The primitive prepare chose (its state), its row pieces', or the fallback's algorithm.
    std::string algorithm(const PrepareContext& ctx) const override;

    /// Records the slots negotiation made blocked (run_fallback converts them).
    Status use_layouts(std::uint64_t in, std::uint64_t out) override {
        blocked_in_mask_ = in;
        blocked_out_mask_ = out;
        return Status::ok();
    }

protected:
    /// The offer of kernels that work per channel on a rank-4 input 0: the blocked layout when
    /// its channel count is static and fits the block, for input 0 and (with `output`) output 0
    /// together.
    static LayoutSupport channel_layout(const Graph& g, const Node& n, bool output);
    bool blocked_input0() const noexcept { return (blocked_in_mask_ & 1u) != 0; }
    /// prepare() of kernels that may hand any shape class to the fallback at run time (an
    /// input holding a NaN, see any_nonfinite): also reserves what run_fallback then needs for
    /// the row-major copies of blocked input 0 and output 0, after the fallback's workspace.
    Status prepare_allowing_fallback(PrepareContext& ctx) const {
        if (ctx.probing() || (blocked_in_mask_ == 0 && blocked_out_mask_ == 0))
            return SimplePrimitiveKernel::prepare(ctx);
        DSINFER_RETURN_IF_ERROR(prepare_fallback(ctx));
        const std::size_t fallback_bytes = (ctx.workspace_bytes() + 63) / 64 * 64;
        DSINFER_RETURN_IF_ERROR(SimplePrimitiveKernel::prepare(ctx));
        if (!ctx.has_input(0) || !ctx.has_output(0) || !ctx.output_spec(0).set)
            return Status::ok();
        const std::size_t copies = relayout_bytes({ctx.input(0).shape()}, {ctx.output_spec(0).shape},
                                                  blocked_in_mask_ & 1u, blocked_out_mask_ & 1u);
        ctx.set_workspace(std::max(ctx.workspace_bytes(), fallback_bytes + copies));
        return Status::ok();
    }

    /// Slots negotiation made blocked.
    std::uint64_t blocked_in_mask_ = 0, blocked_out_mask_ = 0;
    /// Builds the primitive for these shapes; return unsupported to use the fallback.
    virtual Status build(const std::vector<Shape>& in, const std::vector<Shape>& out,
                         const Scalars& scalars, BoundPrimitive& p) const = 0;
    /// Reads the scalars from inputs (only called when every input has data). Default none.
    virtual StatusOr<Scalars> scalars(const std::vector<const void*>& /*in_data*/,
                                      const std::vector<Shape>& /*in_shapes*/,
                                      const std::vector<DType>& /*in_types*/) const {
        return Scalars{};
    }
    /// True when build() needs scalars (so prepare at load without data skips the build).
    virtual bool needs_scalars() const { return false; }

    /// True (and `s` filled) when these shapes run as row pieces. Default: never.
    virtual bool row_split(const std::vector<Shape>& /*in*/, const std::vector<Shape>& /*out*/,
                           RowSplit& /*s*/) const {
        return false;
    }
    /// The shapes build() gets for a piece of `rows` rows. Default: the split operands as
    /// [rows, width], the others as they are.
    virtual void piece_shapes(const std::vector<Shape>& in, const std::vector<Shape>& out,
                              const RowSplit& s, std::int64_t rows, std::vector<Shape>& piece_in,
                              std::vector<Shape>& piece_out) const;
    /// True when no output can alias an input (the op is not one the executor runs in place):
    /// the pieces may overlap (row_pieces).
    virtual bool pieces_may_overlap() const { return false; }
    /// True when the fallback gives the primitive's bits (one IEEE operation per element).
    virtual bool fallback_bitwise() const { return false; }
    /// `x` with the dims before `axis` (>= 1) replaced by [1, ..., 1, rows]: a piece's input of
    /// a kernel that works on the trailing block from `axis`.
    static Shape rows_before(const Shape& x, int axis, std::int64_t rows);

private:
    /// A transient shape's row pieces for these shapes, or null (no split, or a piece refused).
    StatusOr<std::shared_ptr<const BoundPrimitive>> pieces(const std::vector<Shape>& in,
                                                           const std::vector<Shape>& out,
                                                           const Scalars& sc) const;
    Status run_pieces(RunContext& ctx, const BoundPrimitive& p) const noexcept;
    /// The cached primitive for these shapes, built on a miss.
    StatusOr<std::shared_ptr<const BoundPrimitive>> lookup(const std::vector<Shape>& in,
                                                           const std::vector<Shape>& out,
                                                           const Scalars& sc) const;
    PrimitiveCache<BoundPrimitive> cache_;
    /// Transient shapes' piece primitives, by row count (and the shapes of what is not split).
    PrimitiveCache<BoundPrimitive> piece_cache_{16};
};


/// Registration of each kernel family (one file each).
void register_matmul(KernelRegistry& r);    // onednn_matmul.cpp: MatMul, Gemm, FusedMatMul
void register_conv(KernelRegistry& r);      // onednn_conv.cpp: Conv, ConvTranspose, FusedConv
void register_pool(KernelRegistry& r);      // onednn_pool.cpp: Max/Average/Global pooling
void register_norm(KernelRegistry& r);      // onednn_norm.cpp: BatchNorm, LayerNorm, Softmax
void register_eltwise(KernelRegistry& r);   // onednn_eltwise.cpp: unary and binary ops
void register_resize(KernelRegistry& r);    // onednn_resize.cpp: Resize
void register_concat(KernelRegistry& r);    // onednn_concat.cpp: Concat (blocked channels)

}  // namespace dsinfer::detail::onednn
