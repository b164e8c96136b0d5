// oneDNN MatMul and Gemm (f32) on the matmul primitive.
//
// A constant right-hand side (the weights of Linear/Gemm layers) is reordered once into the
// layout the primitive chooses for this CPU ("any") and shared by every later run and shape
// class that picks the same layout; nothing is repacked per run. Batched MatMul with two run-time
// operands (attention's Q·Kᵀ and P·V) uses plain strided descriptors with batch broadcasting.
// Primitives are cached per shape class. Shapes the primitive cannot take (rank-1 operands,
// Gemm's alpha with a bias, a C that is not a row vector, ...) run on the fallback kernel.
//
// Transient shapes (PrepareContext::transient_shape: lengths a decode loop sees about once):
// with packed weights and AVX-512, no primitive is built for the exact shape; the rows of the
// folded [M, K] x [K, N] product run as a few pieces of power-of-two row counts (row_pieces)
// on row-offset views of A and Y, one primitive per piece size, built once per kernel in a
// small cache of their own, all reading the packed weights in the one layout already held
// (requested explicitly: no second copy per piece size). They give the exact primitive's bits.
//
// Without AVX-512, oneDNN 2.6's f32 matmul is a plain sgemm that repacks B on every call: at
// 2 threads it ran 1024x768x3072 at 113-136 GFLOP/s and 128x768x3072 at 33-38, where dsinfer's
// packed GEMM runs 131 and 77-94 (benchmarks/ops/bench_sgemm). There the factories decline a
// constant 2-D B in the forms dsinfer's packed GEMM takes (src/cpu/fast/fast_matmul.cpp), so
// that kernel runs those nodes, every shape class, and holds the weights once, packed.
#include <algorithm>
#include <numeric>

#include "onednn/onednn_common.hpp"
#include "ops/gemm.hpp"

namespace dsinfer::detail::onednn {
namespace {

using std::int64_t;

struct MatMulPrim {
    bool usable = false;  // false: run the fallback for this shape class
    dnnl::matmul prim;
    dnnl::memory::desc a_md, b_md, bias_md, y_md, scratch_md;
    std::shared_ptr<const dnnl::memory> packed_b;  // constant B in the primitive's layout
    std::size_t scratch_bytes = 0;
    /// A transient shape's plan instead of prim: rows [row0, row0 + rows of piece) of the folded
    /// A and Y on each piece's primitive, in order (the last may overlap the one before).
    struct Piece {
        int64_t row0 = 0;
        std::shared_ptr<const MatMulPrim> prim;
    };
    std::vector<Piece> pieces;
    int64_t k = 0, n = 0;  // row lengths of A and Y (pieces)
    std::string impl;      // primitive_name of prim's descriptor (Kernel::algorithm)
};

class OnednnMatMulKernel final : public FallbackKernel {
public:
    struct Config {
        bool gemm = false;
        bool trans_a = false, trans_b = false;
        float alpha = 1.f, beta = 1.f;
        std::optional<Tensor> b_const;     // constant B as given (plain); moved to the packer
        std::shared_ptr<WeightStore> store;  // the engine's (KernelCreateContext::weight_store)
        bool own_weights = false;          // the node's own kernel: holds B once (packed)
        std::optional<Tensor> bias_const;  // constant C as [N], prescaled by beta
        bool runtime_bias = false;         // C is a run-time [N]/[1,N] with beta == 1
        Epilogue epilogue;
    };

    OnednnMatMulKernel(std::unique_ptr<Kernel> fallback, Config cfg)
        : FallbackKernel(std::move(fallback)), cfg_(std::move(cfg)) {
        if (cfg_.b_const) {
            b_shape_ = cfg_.b_const->shape();
            packer_ = std::make_unique<WeightPacker>(std::move(cfg_.store), *cfg_.b_const,
                                                     cfg_.own_weights);
            cfg_.b_const.reset();  // the packer holds B (and lets it go once packed)
        }
    }

    /// As the node's own kernel with a constant B: B is held once, in the primitive's layout
    /// (WeightPacker lets the stored copy go after the first reorder, unless the primitive
    /// reads the stored layout in place); the fallback gets it back in the stored layout only
    /// for shape classes oneDNN cannot take.
    std::uint64_t released_constant_inputs() const noexcept override {
        return packer_ && cfg_.own_weights ? std::uint64_t{1} << 1 : 0;
    }

    Status prepare(PrepareContext& ctx) const override {
        DSINFER_RETURN_IF_ERROR(prepare_fallback(ctx));
        if (!ctx.output_spec(0).set || ctx.probing()) return Status::ok();
        const Shape& a = ctx.input(0).shape();
        const Shape& b = ctx.input(1).shape();
        const Shape c = ctx.has_input(2) ? ctx.input(2).shape() : Shape{};
        std::shared_ptr<const MatMulPrim> p;
        if (ctx.transient_shape()) {  // decided from the shapes alone
            DSINFER_ASSIGN_OR_RETURN(p, transient(a, b, c));
        }
        if (p == nullptr) {
            DSINFER_ASSIGN_OR_RETURN(p, primitive(a, b, c));
        }
        // A shape class the primitive takes never runs the fallback: only its scratchpad.
        if (p->usable) ctx.set_workspace(p->scratch_bytes);
        // run() takes the primitive from here instead of the cache (a planned run keeps it).
        ctx.set_state(std::move(p));
        return Status::ok();
    }

    /// The primitive prepare chose (its state), its row pieces', or the fallback's algorithm.
    std::string algorithm(const PrepareContext& ctx) const override {
        const auto* m = static_cast<const MatMulPrim*>(ctx.state());
        if (m == nullptr) return {};
        if (!m->usable) return fallback_algorithm(ctx);
        if (!m->pieces.empty() && m->pieces.front().prim != nullptr)
            return m->pieces.front().prim->impl + " (row pieces)";
        return m->impl;
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& a = ctx.input(0);
        const TensorView& b = ctx.input(1);
        StatusOr<std::shared_ptr<const MatMulPrim>> p = std::shared_ptr<const MatMulPrim>{};
        const auto* prepared = static_cast<const MatMulPrim*>(ctx.prepared_state());
        if (prepared == nullptr) {
            try {
                p = primitive(a.shape, b.shape, ctx.has_input(2) ? ctx.input(2).shape : Shape{});
            } catch (const std::bad_alloc&) {
                return Status(ErrorCode::resource_exhausted, "out of memory in MatMul primitive");
            } catch (const std::exception& e) {
                return Status::error(ErrorCode::internal, "MatMul primitive: ", e.what());
            }
            if (!p.is_ok()) return p.status();
            prepared = p.value().get();
        }
        const MatMulPrim& m = *prepared;
        if (!m.usable) return run_plain_fallback(ctx);
        try {
            if (m.pieces.empty()) {
                DSINFER_RETURN_IF_ERROR(execute_on(ctx, m, a.raw, ctx.output(0).raw));
            } else {
                // A transient shape's rows, piece by piece (row_pieces).
                const auto* a_rows = static_cast<const float*>(a.raw);
                auto* y_rows = static_cast<float*>(ctx.output(0).raw);
                for (const MatMulPrim::Piece& piece : m.pieces)
                    DSINFER_RETURN_IF_ERROR(execute_on(ctx, *piece.prim, a_rows + piece.row0 * m.k,
                                                       y_rows + piece.row0 * m.n));
            }
            cfg_.epilogue.finish(ctx.output(0));  // an activation left out of attr()
            return Status::ok();
        } catch (const dnnl::error& e) {
            return from_error(e, "matmul");
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory in matmul");
        } catch (const std::exception& e) {
            return Status::error(ErrorCode::internal, "matmul: ", e.what());
        }
    }

private:
    /// Runs primitive m on A at `a` into Y at `y` (the node's, or rows of them).
    Status execute_on(RunContext& ctx, const MatMulPrim& m, const void* a, void* y) const {
        ExecArg args[kMaxExecArgs];
        int na = 0;
        args[na++] = {DNNL_ARG_SRC, &m.a_md, a};
        args[na++] = {DNNL_ARG_WEIGHTS, &m.b_md,
                      m.packed_b ? m.packed_b->get_data_handle() : ctx.input(1).raw};
        if (cfg_.bias_const) args[na++] = {DNNL_ARG_BIAS, &m.bias_md, cfg_.bias_const->raw_data()};
        else if (cfg_.runtime_bias && ctx.has_input(2))
            args[na++] = {DNNL_ARG_BIAS, &m.bias_md, ctx.input(2).raw};
        args[na++] = {DNNL_ARG_DST, &m.y_md, y};
        if (m.scratch_bytes > 0) args[na++] = {DNNL_ARG_SCRATCHPAD, &m.scratch_md, ctx.workspace()};
        return execute(m.prim, args, na, "matmul");
    }

    /// A transient shape: row pieces with packed weights, else null
    /// (build the exact primitive). Pieces only on oneDNN's brgemm matmul (AVX-512), whose
    /// rows come out bitwise as in the exact primitive (its blocking of K and N does not depend
    /// on M); the sgemm-based one below AVX-512 blocks by M (different bits), and compiles
    /// nothing per shape anyway (~0.05 ms a primitive). Without packed weights (attention's
    /// products) the fallback would not give the primitive's bits: built too.
    StatusOr<std::shared_ptr<const MatMulPrim>> transient(const Shape& a, const Shape& b,
                                                            const Shape& c) const {
        // Gemm's transposed A has no row views; empty and rank-1 operands take the exact path.
        if (packer_ == nullptr || channel_block() < 16 || (cfg_.gemm && cfg_.trans_a) ||
            cfg_.epilogue.sum || a.rank() < 2 || b.rank() != 2 || a.num_elements() == 0 ||
            b.num_elements() == 0)
            return std::shared_ptr<const MatMulPrim>{};
        const int64_t k = a[a.rank() - 1];
        const int64_t n = cfg_.gemm && cfg_.trans_b ? b[0] : b[1];
        if (k != (cfg_.gemm && cfg_.trans_b ? b[1] : b[0]) || (cfg_.gemm && a.rank() != 2))
            return std::shared_ptr<const MatMulPrim>{};
        if (cfg_.runtime_bias && c.num_elements() != n) return std::shared_ptr<const MatMulPrim>{};
        auto plan = std::make_shared<MatMulPrim>();
        plan->k = k;
        plan->n = n;
        plan->usable = true;
        thread_local std::vector<std::pair<int64_t, int64_t>> rows, other;
        // Two tail pieces (fewer executions) or three (fewer rows computed twice), whichever
        // costs less: an execution's overhead (~5 us, measured) is worth ~1 MFLOP at the
        // ~200 GFLOP/s of two AVX-512 cores, i.e. 1e6 / (2 K N) rows (~120 at K = N = 64, 1 at
        // K = N = 768).
        const int64_t m_rows = a.num_elements() / k;
        const double per_execution = 1e6 / (2.0 * static_cast<double>(k) * static_cast<double>(n));
        auto cost = [&](const std::vector<std::pair<int64_t, int64_t>>& p) {
            double c = per_execution * static_cast<double>(p.size());
            for (const auto& piece : p) c += static_cast<double>(piece.second);
            return c;
        };
        row_pieces(m_rows, /*overlap=*/true, rows, 2);
        row_pieces(m_rows, /*overlap=*/true, other, 3);
        if (cost(other) < cost(rows)) rows.swap(other);
        for (const auto& [row0, count] : rows) {
            DSINFER_ASSIGN_OR_RETURN(auto q, piece(count, k, n));
            if (q == nullptr) return std::shared_ptr<const MatMulPrim>{};  // refused: exact
            plan->scratch_bytes = std::max(plan->scratch_bytes, q->scratch_bytes);
            plan->pieces.push_back({row0, std::move(q)});
        }
        return std::shared_ptr<const MatMulPrim>(std::move(plan));
    }

    /// The primitive for a piece of `rows` rows (cached; null when oneDNN refuses the packed
    /// layout held for it).
    StatusOr<std::shared_ptr<const MatMulPrim>> piece(int64_t rows, int64_t k, int64_t n) const {
        auto q = cached_build(piece_cache_, {rows}, "matmul piece primitive", true,
                              [&](MatMulPrim& m) { return build_piece(rows, k, n, m); });
        if (!q.is_ok()) return q.status();
        if (!q.value()->usable) return std::shared_ptr<const MatMulPrim>{};
        return q;
    }

    Status build_piece(int64_t rows, int64_t k, int64_t n, MatMulPrim& m) const {
        m.a_md = rowmajor_md({rows, k});
        m.y_md = rowmajor_md({rows, n});
        const bool has_bias = cfg_.bias_const.has_value() || cfg_.runtime_bias;
        if (has_bias) m.bias_md = rowmajor_md({1, n});
        // The layout the weights are held in; before any, the one a kMaxPieceRows-row primitive
        // picks (what the exact primitives of long shapes will pick too), so that every piece
        // size and, usually, every exact shape share one packed copy.
        std::optional<dnnl::memory::desc> layout = packer_->first_layout();
        auto attr = cfg_.epilogue.attr();
        auto make_pd = [&](int64_t r, const dnnl::memory::desc& b_md) {
            const auto a_md = rowmajor_md({r, k}), y_md = rowmajor_md({r, n});
            auto d = has_bias ? dnnl::matmul::desc(a_md, b_md, m.bias_md, y_md)
                              : dnnl::matmul::desc(a_md, b_md, y_md);
            return dnnl::matmul::primitive_desc(d, attr, cpu_engine());
        };
        if (!layout)
            layout = make_pd(kMaxPieceRows, dnnl::memory::desc({k, n}, dt::f32, tag::any)).weights_desc();
        dnnl::matmul::primitive_desc pd;
        try {
            pd = make_pd(rows, *layout);
        } catch (const dnnl::error& e) {
            if (e.status == dnnl_unimplemented)
                return Status(ErrorCode::unsupported, "packed layout refused for a piece");
            throw;
        }
        if (pd.weights_desc() != *layout)
            return Status(ErrorCode::unsupported, "packed layout changed for a piece");
        m.prim = dnnl::matmul(pd);
        m.impl = primitive_name(pd);
        m.scratch_md = pd.scratchpad_desc();
        m.scratch_bytes = m.scratch_md.get_size();
        m.b_md = *layout;
        m.packed_b = packer_->get(stored_b_md(), m.b_md);
        m.usable = true;
        return Status::ok();
    }

    /// The fallback kernel on this node's tensors, B pointing at the weights in their stored
    /// layout (the executor's initializer has no data once this kernel released it).
    Status run_plain_fallback(RunContext& ctx) const noexcept {
        if (!packer_ || !cfg_.own_weights) return run_fallback(ctx);
        return run_fallback_with_weights(ctx, *packer_, stored_b_md(), "matmul");
    }

    /// The cached primitive for these shapes, built on a miss.
    StatusOr<std::shared_ptr<const MatMulPrim>> primitive(const Shape& a, const Shape& b,
                                                          const Shape& c) const {
        thread_local std::vector<int64_t> key;  // kept: a cache hit allocates nothing
        key.clear();
        key_append(key, a);
        key_append(key, b);
        key_append(key, c);
        // Shapes the primitive does not take: a MatMulPrim that is not usable (the fallback).
        return cached_build(cache_, key, "matmul primitive", false,
                            [&](MatMulPrim& m) { return build(a, b, c, m); });
    }

    Status build(const Shape& a, const Shape& b, const Shape& c, MatMulPrim& m) const {
        if (a.rank() < 2 || b.rank() < 2 || a.num_elements() == 0 || b.num_elements() == 0)
            return Status(ErrorCode::unsupported, "shape");
        dims ad, bd, yd;
        bool b_packed = packer_ != nullptr && b.rank() == 2;
        if (cfg_.gemm) {
            const int64_t mm = cfg_.trans_a ? a[1] : a[0], k = cfg_.trans_a ? a[0] : a[1];
            const int64_t n = cfg_.trans_b ? b[0] : b[1];
            ad = {mm, k};
            bd = {k, n};
            yd = {mm, n};
            m.a_md = rowmajor_md(ad, cfg_.trans_a);
            m.b_md = rowmajor_md(bd, cfg_.trans_b);
        } else if (b_packed) {
            // Fold A's batch dims into M: one tall GEMM against the packed weights.
            const int64_t k = a[a.rank() - 1];
            const int64_t mm = a.num_elements() / k;
            ad = {mm, k};
            bd = {b[0], b[1]};
            yd = {mm, b[1]};
            m.a_md = rowmajor_md(ad, false);
            m.b_md = rowmajor_md(bd, false);
        } else {
            const int r = std::max(a.rank(), b.rank());
            for (int i = 0; i < r; ++i) {
                const int ia = i - (r - a.rank()), ib = i - (r - b.rank());
                ad.push_back(ia >= 0 ? a[ia] : 1);
                bd.push_back(ib >= 0 ? b[ib] : 1);
            }
            yd = ad;
            for (int i = 0; i < r - 2; ++i)
                yd[static_cast<std::size_t>(i)] =
                    std::max(ad[static_cast<std::size_t>(i)], bd[static_cast<std::size_t>(i)]);
            yd[static_cast<std::size_t>(r - 1)] = bd[static_cast<std::size_t>(r - 1)];
            m.a_md = rowmajor_md(ad, false);
            m.b_md = rowmajor_md(bd, false);
        }
        m.y_md = rowmajor_md(yd, false);
        const int64_t n = yd.back();
        const bool has_bias = cfg_.bias_const.has_value() || cfg_.runtime_bias;
        if (cfg_.runtime_bias) {
            if (c.num_elements() != n) return Status(ErrorCode::unsupported, "C shape");
        }
        if (has_bias) {
            dims bias_d(yd.size(), 1);
            bias_d.back() = n;
            m.bias_md = rowmajor_md(bias_d, false);
        }
        const dnnl::memory::desc b_any = b_packed
                                             ? dnnl::memory::desc(bd, dt::f32, tag::any)
                                             : m.b_md;
        auto attr = cfg_.epilogue.attr();
        auto desc = has_bias ? dnnl::matmul::desc(m.a_md, b_any, m.bias_md, m.y_md)
                             : dnnl::matmul::desc(m.a_md, b_any, m.y_md);
        dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
        m.prim = dnnl::matmul(pd);
        m.impl = primitive_name(pd);
        m.scratch_md = pd.scratchpad_desc();
        m.scratch_bytes = m.scratch_md.get_size();
        if (b_packed) {
            m.b_md = pd.weights_desc();
            m.packed_b = packer_->get(stored_b_md(), m.b_md);
        }
        m.usable = true;
        return Status::ok();
    }

    /// Constant B as stored, described as the primitive's logical K x N.
    dnnl::memory::desc stored_b_md() const {
        if (cfg_.gemm && cfg_.trans_b) return rowmajor_md({b_shape_[1], b_shape_[0]}, true);
        return rowmajor_md({b_shape_[0], b_shape_[1]}, false);
    }

    Config cfg_;
    Shape b_shape_;
    std::unique_ptr<WeightPacker> packer_;
    PrimitiveCache<MatMulPrim> cache_;
    /// Transient shapes' piece primitives, by row count: at most log2(kMaxPieceRows) + 1 of them.
    PrimitiveCache<MatMulPrim> piece_cache_{16};
};

bool is_f32_input(const KernelCreateContext& ctx, int i) {
    const Value* v = ctx.input_value(i);
    return v != nullptr && v->dtype && *v->dtype == DType::f32;
}

/// True on CPUs where oneDNN 2.6 has no packed-weight f32 matmul (no AVX-512: no brgemm).
bool without_brgemm() { return channel_block() < 16; }

/// A constant 2-D B is left to dsinfer's packed GEMM (the "cpu" backend's MatMul/Gemm) when
/// that backend is enabled below this one and runs it faster here, or holds it at half width
/// (CPU precision fp16 / bf16: KernelCreateContext::weight_precision).
bool leave_to_packed_gemm(const KernelCreateContext& ctx) {
    return ctx.lower_provider("cpu") &&
           (without_brgemm() || ctx.weight_precision() != DType::f32);
}

StatusOr<std::unique_ptr<Kernel>> make_matmul(const KernelCreateContext& ctx) {
    if (!is_f32_input(ctx, 0)) return Status::error(ErrorCode::unsupported, "f32 only");
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    OnednnMatMulKernel::Config cfg;
    if (ctx.node().domain == kDsinferDomain) {  // FusedMatMul: constant bias [N], activation
        DSINFER_ASSIGN_OR_RETURN(cfg.epilogue, epilogue_from_attributes(ctx));
        if (ctx.has_input(2)) {
            const Tensor* bias = ctx.constant_input(2);
            const Tensor* b = ctx.constant_input(1);
            if (bias == nullptr || b == nullptr || bias->dtype() != DType::f32 ||
                bias->num_dims() != 1 || b->num_dims() != 2 || bias->shape()[0] != b->shape()[1])
                return Status::error(ErrorCode::unsupported, "constant bias of a constant B only");
            cfg.bias_const = *bias;
        }
    }
    if (const Tensor* b = ctx.constant_input(1); b != nullptr && b->dtype() == DType::f32 &&
                                                 b->num_dims() == 2 && b->num_elements() > 0) {
        if (leave_to_packed_gemm(ctx))
            return Status::error(ErrorCode::unsupported, "constant B: dsinfer's packed GEMM");
        cfg.b_const = *b;
        cfg.store = ctx.weight_store();
        cfg.own_weights = !ctx.creating_fallback();
    }
    return make_onednn_kernel<OnednnMatMulKernel>(ctx, std::move(fallback), std::move(cfg));
}

/// The Gemm forms dsinfer's packed GEMM takes (src/cpu/fast/fast_matmul.cpp): transA = 0 and C
/// absent, scaled away, or a constant row vector.
bool packed_gemm_form(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    const auto ga = parse_gemm_attrs(ctx);
    // FusedGemm (com.dsinfer) has Gemm-13 semantics.
    if (!ga.is_ok() || ga.value().trans_a || (n.domain.empty() && ctx.opset() < 7)) return false;
    if (!ctx.has_input(2) || ga.value().beta == 0.f) return true;
    const Tensor* b = ctx.constant_input(1);
    const Tensor* c = ctx.constant_input(2);
    const int64_t n_cols = ga.value().trans_b ? b->shape()[0] : b->shape()[1];
    return c != nullptr && c->dtype() == DType::f32 && c->num_elements() == n_cols &&
           (c->num_dims() == 1 || (c->num_dims() == 2 && c->shape()[0] == 1));
}

StatusOr<std::unique_ptr<Kernel>> make_gemm(const KernelCreateContext& ctx) {
    if (!is_f32_input(ctx, 0)) return Status::error(ErrorCode::unsupported, "f32 only");
    const Node& n = ctx.node();
    OnednnMatMulKernel::Config cfg;
    cfg.gemm = true;
    DSINFER_ASSIGN_OR_RETURN(const GemmAttrs ga, parse_gemm_attrs(ctx));
    cfg.alpha = ga.alpha;
    cfg.beta = ga.beta;
    cfg.trans_a = ga.trans_a;
    cfg.trans_b = ga.trans_b;
    if (const Tensor* b = ctx.constant_input(1);
        b != nullptr && b->dtype() == DType::f32 && b->num_dims() == 2 && b->num_elements() > 0) {
        cfg.b_const = *b;
        cfg.store = ctx.weight_store();
        cfg.own_weights = !ctx.creating_fallback();
    }
    if (ctx.has_input(2) && cfg.beta != 0.f) {
        const Tensor* c = ctx.constant_input(2);
        const Value* cv = ctx.input_value(2);
        auto row_vector = [](const Shape& s) {
            return s.rank() == 1 || (s.rank() == 2 && s[0] == 1);
        };
        if (c != nullptr && c->dtype() == DType::f32 && row_vector(c->shape()) &&
            c->shape()[c->num_dims() - 1] > 1) {
            if (cfg.beta == 1.f) {
                cfg.bias_const = *c;  // shares the graph's buffer: held once
            } else {
                Tensor scaled = c->clone();
                float* p = scaled.data_unchecked<float>();
                for (int64_t i = 0; i < scaled.num_elements(); ++i) p[i] *= cfg.beta;
                cfg.bias_const = std::move(scaled);
            }
        } else if (c == nullptr && cfg.beta == 1.f && cv != nullptr && cv->shape.known &&
                   (cv->shape.rank() == 1 ||
                    (cv->shape.rank() == 2 && cv->shape.dims[0].is_static() &&
                     cv->shape.dims[0].value == 1))) {
            cfg.runtime_bias = true;
        } else {
            return Status::error(ErrorCode::unsupported, "Gemm C form");
        }
        // oneDNN scales before or after the bias depending on the primitive: keep alpha only
        // without a bias.
        if (cfg.alpha != 1.f) return Status::error(ErrorCode::unsupported, "alpha with bias");
    }
    if (n.domain == kDsinferDomain) {  // FusedGemm: the activation after Gemm
        DSINFER_ASSIGN_OR_RETURN(cfg.epilogue, epilogue_from_attributes(ctx));
    }
    cfg.epilogue.output_scale = cfg.alpha;
    if (cfg.b_const && leave_to_packed_gemm(ctx) && packed_gemm_form(ctx))
        return Status::error(ErrorCode::unsupported, "constant B: dsinfer's packed GEMM");
    DSINFER_ASSIGN_OR_RETURN(auto fallback, ctx.create_fallback());
    return make_onednn_kernel<OnednnMatMulKernel>(ctx, std::move(fallback), std::move(cfg));
}

}  // namespace

void register_matmul(KernelRegistry& r) {
    const DTypeSet f32{DType::f32};
    r.add({"MatMul", "", 1, kMaxOpset, DeviceKind::cpu, f32}, &make_matmul, kPriorityOnednn,
          "onednn");
    r.add({"Gemm", "", 1, kMaxOpset, DeviceKind::cpu, f32}, &make_gemm, kPriorityOnednn, "onednn");
    r.add({"FusedMatMul", kDsinferDomain, 1, 1, DeviceKind::cpu, f32}, &make_matmul,
          kPriorityOnednn, "onednn");
    r.add({"FusedGemm", kDsinferDomain, 1, 1, DeviceKind::cpu, f32}, &make_gemm, kPriorityOnednn,
          "onednn");
}

}  // namespace dsinfer::detail::onednn
