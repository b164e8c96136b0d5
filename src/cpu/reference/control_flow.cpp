// Control flow: If, Loop, Scan. Bodies are compiled subgraphs run by the executor; outer-scope
// names reach them through the running frame (RunContext::frame()). Outputs are dynamic: their
// shapes are known only after the body ran, so these kernels allocate in run (the documented
// exception to "run never allocates").
#include <cstring>
#include <optional>

#include "ops/kernel_utils.hpp"
#include "cpu/reference/groups.hpp"

namespace dsinfer::detail {
namespace {

Status copy_elements(const Tensor& src, std::int64_t src_off, Tensor& dst, std::int64_t dst_off,
                     std::int64_t count) {
    if (count == 0) return Status::ok();
    if (src.dtype() == DType::string) {
        const auto* s = src.data_unchecked<std::string>() + src_off;
        auto* d = dst.data_unchecked<std::string>() + dst_off;
        for (std::int64_t i = 0; i < count; ++i) d[i] = s[i];
    } else {
        const std::size_t es = dtype_size(src.dtype());
        std::memcpy(static_cast<char*>(dst.raw_data()) + static_cast<std::size_t>(dst_off) * es,
                    static_cast<const char*>(src.raw_data()) + static_cast<std::size_t>(src_off) * es,
                    static_cast<std::size_t>(count) * es);
    }
    return Status::ok();
}

/// Stacks equally shaped tensors along a new axis `axis` (0 <= axis <= rank).
StatusOr<Tensor> stack(const std::vector<Tensor>& parts, int axis, bool reverse, const char* what) {
    const Tensor& first = parts.front();
    for (const auto& p : parts)
        DSINFER_CHECK(p.dtype() == first.dtype() && p.shape() == first.shape(),
                      ErrorCode::invalid_argument, what, ": iteration outputs differ in shape or "
                      "type (", first.shape().to_string(), " vs ", p.shape().to_string(), ")");
    DSINFER_CHECK(first.num_dims() < kMaxRank, ErrorCode::unsupported, what,
                  ": stacked rank exceeds ", kMaxRank);
    Shape out;
    for (int d = 0; d < axis; ++d) out.push_back(first.shape()[d]);
    out.push_back(static_cast<std::int64_t>(parts.size()));
    for (int d = axis; d < first.num_dims(); ++d) out.push_back(first.shape()[d]);
    DSINFER_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(first.dtype(), out));
    const std::int64_t outer = first.shape().size_between(0, axis);
    const std::int64_t inner = first.shape().size_between(axis, first.num_dims());
    const auto n = static_cast<std::int64_t>(parts.size());
    for (std::int64_t k = 0; k < n; ++k) {
        const Tensor& p = parts[static_cast<std::size_t>(reverse ? n - 1 - k : k)];
        for (std::int64_t o = 0; o < outer; ++o)
            DSINFER_RETURN_IF_ERROR(copy_elements(p, o * inner, t, (o * n + k) * inner, inner));
    }
    return t;
}

/// Slice `index` along `axis`, removing that axis.
StatusOr<Tensor> take_slice(const Tensor& src, int axis, std::int64_t index) {
    Shape out;
    for (int d = 0; d < src.num_dims(); ++d)
        if (d != axis) out.push_back(src.shape()[d]);
    DSINFER_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(src.dtype(), out));
    const std::int64_t outer = src.shape().size_between(0, axis);
    const std::int64_t n = src.shape()[axis];
    const std::int64_t inner = src.shape().size_between(axis + 1, src.num_dims());
    for (std::int64_t o = 0; o < outer; ++o)
        DSINFER_RETURN_IF_ERROR(copy_elements(src, (o * n + index) * inner, t, o * inner, inner));
    return t;
}

Tensor as_tensor(const TensorView& v) {
    return Tensor::wrap(v.raw, v.dtype, v.shape, v.device);
}

/// Node inputs are passed to bodies as non-owning wraps; a body may hand one straight back.
/// Such an output must not alias the input buffer (the executor may free it), so copy it.
Tensor owned(Tensor t, const RunContext& ctx) {
    if (t.raw_data() == nullptr) return t;
    for (int i = 0; i < ctx.num_inputs(); ++i)
        if (ctx.has_input(i) && ctx.input(i).raw == t.raw_data()) return t.clone();
    return t;
}

/// What a scan output of a body looks like when no iteration ran: the body's declared element
/// type (float32 when undeclared) and per-iteration shape (nullopt unless fully static).
struct DeclaredOutput {
    DType dtype = DType::f32;
    std::optional<Shape> shape;
};

std::vector<DeclaredOutput> declared_outputs(const Graph& body, int first) {
    std::vector<DeclaredOutput> out;
    for (std::size_t j = static_cast<std::size_t>(first); j < body.outputs.size(); ++j) {
        const Value& v = body.value(body.outputs[j]);
        DeclaredOutput d;
        if (v.dtype) d.dtype = *v.dtype;
        if (v.shape.is_static() && v.shape.rank() < kMaxRank) {
            Shape s;
            for (const auto& dim : v.shape.dims) s.push_back(dim.value);
            d.shape = s;
        }
        out.push_back(d);
    }
    return out;
}

/// The empty stacked output for `d`: `lead` dims (the zero-length axis among them) and then the
/// declared per-iteration shape inserted at `axis` of the stacked result.
StatusOr<Tensor> empty_stack(const DeclaredOutput& d, Shape lead, int axis) {
    if (d.shape) {
        Shape s;
        const Shape& e = *d.shape;
        for (int i = 0; i < axis && i < e.rank(); ++i) s.push_back(e[i]);
        for (int i = 0; i < lead.rank(); ++i) s.push_back(lead[i]);
        for (int i = axis; i < e.rank(); ++i) s.push_back(e[i]);
        lead = s;
    }
    return Tensor::allocate(d.dtype, lead);
}

// ---- If -------------------------------------------------------------------------------------

class IfKernel final : public Kernel {
public:
    IfKernel(std::shared_ptr<SubgraphRunner> then_b, std::shared_ptr<SubgraphRunner> else_b)
        : then_(std::move(then_b)), else_(std::move(else_b)) {}

    Status prepare(PrepareContext& ctx) const override {
        const Tensor& c = ctx.input(0);
        DSINFER_CHECK(c.dtype() == DType::boolean, ErrorCode::invalid_argument,
                      "cond must be bool, got ", dtype_name(c.dtype()));
        if (ctx.has_data(0))
            DSINFER_CHECK(c.num_elements() == 1, ErrorCode::invalid_argument,
                          "cond must have one element, got ", c.num_elements());
        for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output_dynamic(i);
        return Status::ok();
    }
    Status run(RunContext& ctx) const noexcept override {
        try {
            const bool cond = *ctx.input(0).data_unchecked<std::uint8_t>() != 0;
            std::vector<Tensor> outs;
            DSINFER_RETURN_IF_ERROR(
                (cond ? then_ : else_)->run({}, ctx.frame(), ctx.control(), outs));
            if (static_cast<int>(outs.size()) != ctx.num_outputs())
                return Status::error(ErrorCode::invalid_model, "branch produced ", outs.size(),
                                     " outputs, node has ", ctx.num_outputs());
            for (int i = 0; i < ctx.num_outputs(); ++i)
                if (ctx.has_output(i))
                    DSINFER_RETURN_IF_ERROR(
                        ctx.set_output_tensor(i, owned(outs[static_cast<std::size_t>(i)], ctx)));
            return Status::ok();
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory in If");
        }
    }

private:
    std::shared_ptr<SubgraphRunner> then_, else_;
};

StatusOr<std::unique_ptr<Kernel>> make_if(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(auto tg, ctx.node().attr<std::shared_ptr<Graph>>("then_branch"));
    DSINFER_ASSIGN_OR_RETURN(auto eg, ctx.node().attr<std::shared_ptr<Graph>>("else_branch"));
    DSINFER_CHECK(ctx.num_inputs() == 1, ErrorCode::invalid_model, "If takes 1 input, got ",
                  ctx.num_inputs());
    for (const auto* g : {tg.get(), eg.get()}) {
        DSINFER_CHECK(g->inputs.empty(), ErrorCode::invalid_model, "If branch '", g->name,
                      "' must take no inputs, takes ", g->inputs.size());
        DSINFER_CHECK(static_cast<int>(g->outputs.size()) == ctx.num_outputs(),
                      ErrorCode::invalid_model, "If branch '", g->name, "' has ",
                      g->outputs.size(), " outputs, the node has ", ctx.num_outputs());
    }
    DSINFER_ASSIGN_OR_RETURN(auto t, ctx.compile_subgraph(tg));
    DSINFER_ASSIGN_OR_RETURN(auto e, ctx.compile_subgraph(eg));
    // Both branches define the node's outputs: their element types must agree where known.
    for (std::size_t i = 0; i < tg->outputs.size(); ++i) {
        const auto& td = tg->value(tg->outputs[i]).dtype;
        const auto& ed = eg->value(eg->outputs[i]).dtype;
        DSINFER_CHECK(!td || !ed || *td == *ed, ErrorCode::invalid_model, "If output ", i,
                      " is ", dtype_name(*td), " in branch '", tg->name, "' but ",
                      dtype_name(*ed), " in branch '", eg->name, "'");
    }
    return make_kernel<IfKernel>(std::move(t), std::move(e));
}

// ---- Loop -----------------------------------------------------------------------------------

class LoopKernel final : public Kernel {
public:
    LoopKernel(std::shared_ptr<SubgraphRunner> body, int num_carried, int num_scan,
               std::vector<DeclaredOutput> scan_decl)
        : body_(std::move(body)), n_(num_carried), k_(num_scan), scan_decl_(std::move(scan_decl)) {}

    Status prepare(PrepareContext& ctx) const override {
        if (ctx.has_input(0)) {
            DSINFER_CHECK(ctx.input(0).dtype() == DType::i64, ErrorCode::invalid_argument,
                          "M (trip count) must be int64, got ", dtype_name(ctx.input(0).dtype()));
            if (ctx.has_data(0))
                DSINFER_CHECK(ctx.input(0).num_elements() == 1, ErrorCode::invalid_argument,
                              "M must have one element");
        }
        if (ctx.has_input(1)) {
            DSINFER_CHECK(ctx.input(1).dtype() == DType::boolean, ErrorCode::invalid_argument,
                          "cond must be bool, got ", dtype_name(ctx.input(1).dtype()));
            if (ctx.has_data(1))
                DSINFER_CHECK(ctx.input(1).num_elements() == 1, ErrorCode::invalid_argument,
                              "cond must have one element");
        }
        for (int i = 0; i < ctx.num_outputs(); ++i) {
            if (i < n_ && ctx.has_input(2 + i)) ctx.set_output_dynamic(i, ctx.input(2 + i).dtype());
            else ctx.set_output_dynamic(i);
        }
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        try {
            std::int64_t trip = std::numeric_limits<std::int64_t>::max();
            if (ctx.has_input(0)) trip = *ctx.input(0).data_unchecked<std::int64_t>();
            bool cond = ctx.has_input(1) ? *ctx.input(1).data_unchecked<std::uint8_t>() != 0 : true;
            std::vector<Tensor> carried;
            for (int i = 0; i < n_; ++i) carried.push_back(as_tensor(ctx.input(2 + i)));
            std::vector<std::vector<Tensor>> scans(static_cast<std::size_t>(k_));
            std::vector<Tensor> args, outs;
            std::int64_t it = 0;
            for (; it < trip && cond; ++it) {
                DSINFER_RETURN_IF_ERROR(ctx.control().check());
                if (it >= ctx.control().max_loop_iterations)
                    return Status::error(ErrorCode::resource_exhausted, "Loop exceeded ",
                                         ctx.control().max_loop_iterations,
                                         " iterations (ModelLimits::max_loop_iterations)");
                args.clear();
                args.push_back(Tensor::scalar<std::int64_t>(it));
                args.push_back(Tensor::scalar<bool>(cond));
                for (auto& c : carried) args.push_back(c);
                DSINFER_RETURN_IF_ERROR(body_->run(args, ctx.frame(), ctx.control(), outs));
                if (static_cast<int>(outs.size()) != 1 + n_ + k_)
                    return Status::error(ErrorCode::invalid_model, "Loop body produced ",
                                         outs.size(), " outputs, expected ", 1 + n_ + k_);
                const Tensor& c = outs[0];
                if (c.dtype() != DType::boolean || c.num_elements() != 1)
                    return Status::error(ErrorCode::invalid_model,
                                         "Loop body's first output (cond) must be a bool scalar");
                cond = *c.data_unchecked<std::uint8_t>() != 0;
                for (int i = 0; i < n_; ++i)
                    carried[static_cast<std::size_t>(i)] = outs[static_cast<std::size_t>(1 + i)];
                for (int i = 0; i < k_; ++i)
                    scans[static_cast<std::size_t>(i)].push_back(
                        outs[static_cast<std::size_t>(1 + n_ + i)]);
            }
            for (int i = 0; i < n_; ++i)
                if (ctx.has_output(i)) {
                    DSINFER_RETURN_IF_ERROR(
                        ctx.set_output_tensor(i, owned(carried[static_cast<std::size_t>(i)], ctx)));
                }
            for (int i = 0; i < k_; ++i) {
                if (!ctx.has_output(n_ + i)) continue;
                const auto& parts = scans[static_cast<std::size_t>(i)];
                if (parts.empty()) {
                    DSINFER_ASSIGN_OR_RETURN(
                        Tensor t,
                        empty_stack(scan_decl_[static_cast<std::size_t>(i)], Shape{0}, 0));
                    DSINFER_RETURN_IF_ERROR(ctx.set_output_tensor(n_ + i, std::move(t)));
                    continue;
                }
                DSINFER_ASSIGN_OR_RETURN(Tensor t, stack(parts, 0, false, "Loop scan output"));
                DSINFER_RETURN_IF_ERROR(ctx.set_output_tensor(n_ + i, std::move(t)));
            }
            return Status::ok();
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory in Loop");
        }
    }

private:
    std::shared_ptr<SubgraphRunner> body_;
    int n_, k_;
    std::vector<DeclaredOutput> scan_decl_;
};

StatusOr<std::unique_ptr<Kernel>> make_loop(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(auto body, ctx.node().attr<std::shared_ptr<Graph>>("body"));
    DSINFER_CHECK(ctx.num_inputs() >= 2, ErrorCode::invalid_model,
                  "Loop takes at least 2 inputs (M, cond), got ", ctx.num_inputs());
    const int n = ctx.num_inputs() - 2;
    DSINFER_CHECK(static_cast<int>(body->inputs.size()) == 2 + n, ErrorCode::invalid_model,
                  "Loop body takes ", body->inputs.size(), " inputs, expected ", 2 + n,
                  " (iteration, cond, ", n, " carried)");
    DSINFER_CHECK(static_cast<int>(body->outputs.size()) >= 1 + n, ErrorCode::invalid_model,
                  "Loop body has ", body->outputs.size(), " outputs, expected at least ", 1 + n);
    const int k = static_cast<int>(body->outputs.size()) - 1 - n;
    DSINFER_CHECK(ctx.num_outputs() == n + k, ErrorCode::invalid_model, "Loop node has ",
                  ctx.num_outputs(), " outputs, body implies ", n + k);
    for (int i = 0; i < n; ++i)
        DSINFER_CHECK(ctx.has_input(2 + i), ErrorCode::invalid_model, "Loop carried input ", i,
                      " is missing");
    DSINFER_ASSIGN_OR_RETURN(auto runner, ctx.compile_subgraph(body));
    return make_kernel<LoopKernel>(std::move(runner), n, k, declared_outputs(*body, 1 + n));
}

// ---- Scan ----------------------------------------------------------------------------------
// Opset 9+: scan inputs are sliced along scan_input_axes. Opset 8 (batched): input 0 is the
// optional sequence_lens [batch], states and scan inputs carry a leading batch axis (scan inputs
// are [batch, sequence, ...]), each batch entry runs its own sequence_lens[b] iterations, and
// scan outputs are [batch, max sequence, ...] with the steps past sequence_lens[b] zero-filled.

class ScanKernel final : public Kernel {
public:
    struct Config {
        int n = 0, m = 0, k = 0;
        bool batched = false;  // opset 8
        std::vector<std::int64_t> in_axes, in_dirs, out_axes, out_dirs;
        std::vector<DeclaredOutput> scan_decl;  // for scans without iterations
    };
    ScanKernel(std::shared_ptr<SubgraphRunner> body, Config c) : body_(std::move(body)), c_(std::move(c)) {}

    Status prepare(PrepareContext& ctx) const override {
        if (c_.batched) return prepare_batched(ctx);
        std::int64_t len = -1;
        for (int j = 0; j < c_.m; ++j) {
            const Tensor& x = ctx.input(c_.n + j);
            DSINFER_ASSIGN_OR_RETURN(int axis, normalize_axis(c_.in_axes[static_cast<std::size_t>(j)],
                                                              x.num_dims(), "scan_input_axes"));
            const std::int64_t l = x.shape()[axis];
            DSINFER_CHECK(len < 0 || l == len, ErrorCode::invalid_argument,
                          "scan inputs have different sequence lengths (", len, " vs ", l, ")");
            len = l;
        }
        for (int i = 0; i < ctx.num_outputs(); ++i) {
            if (i < c_.n) ctx.set_output_dynamic(i, ctx.input(i).dtype());
            else ctx.set_output_dynamic(i);
        }
        return Status::ok();
    }

    Status run(RunContext& ctx) const noexcept override {
        try {
            if (c_.batched) return run_batched(ctx);
            std::vector<Tensor> state;
            for (int i = 0; i < c_.n; ++i) state.push_back(as_tensor(ctx.input(i)));
            std::vector<Tensor> scan_in;
            std::vector<int> axes;
            std::int64_t len = 0;
            for (int j = 0; j < c_.m; ++j) {
                scan_in.push_back(as_tensor(ctx.input(c_.n + j)));
                const int rank = scan_in.back().num_dims();
                std::int64_t a = c_.in_axes[static_cast<std::size_t>(j)];
                axes.push_back(static_cast<int>(a < 0 ? a + rank : a));
                len = scan_in.back().shape()[axes.back()];
            }
            if (len > ctx.control().max_loop_iterations)
                return Status::error(ErrorCode::resource_exhausted, "Scan length ", len,
                                     " exceeds ModelLimits::max_loop_iterations");
            std::vector<std::vector<Tensor>> scans(static_cast<std::size_t>(c_.k));
            std::vector<Tensor> args, outs;
            for (std::int64_t t = 0; t < len; ++t) {
                DSINFER_RETURN_IF_ERROR(step(ctx, scan_in, axes, len, t, state, args, outs));
                for (int i = 0; i < c_.k; ++i)
                    scans[static_cast<std::size_t>(i)].push_back(
                        outs[static_cast<std::size_t>(c_.n + i)]);
            }
            for (int i = 0; i < c_.n; ++i)
                if (ctx.has_output(i))
                    DSINFER_RETURN_IF_ERROR(
                        ctx.set_output_tensor(i, owned(state[static_cast<std::size_t>(i)], ctx)));
            for (int i = 0; i < c_.k; ++i) {
                if (!ctx.has_output(c_.n + i)) continue;
                const auto& parts = scans[static_cast<std::size_t>(i)];
                const DeclaredOutput& decl = c_.scan_decl[static_cast<std::size_t>(i)];
                const int rank = (parts.empty() ? (decl.shape ? decl.shape->rank() : 0)
                                                : parts.front().num_dims()) +
                                 1;
                std::int64_t a = c_.out_axes[static_cast<std::size_t>(i)];
                if (a < -rank || a >= rank)
                    return Status::error(ErrorCode::invalid_model, "scan_output_axes value ", a,
                                         " outside [", -rank, ", ", rank, ")");
                const int axis = static_cast<int>(a < 0 ? a + rank : a);
                DSINFER_ASSIGN_OR_RETURN(
                    Tensor t, parts.empty() ? empty_stack(decl, Shape{0}, axis)
                                            : stack(parts, axis,
                                                    c_.out_dirs[static_cast<std::size_t>(i)] != 0,
                                                    "Scan output"));
                DSINFER_RETURN_IF_ERROR(ctx.set_output_tensor(c_.n + i, std::move(t)));
            }
            return Status::ok();
        } catch (const std::bad_alloc&) {
            return Status(ErrorCode::resource_exhausted, "out of memory in Scan");
        }
    }

private:
    // One iteration: the body on (state, slice t of each scan input along its axis; reversed
    // inputs take slice len - 1 - t). Updates `state`; `outs` holds all body outputs.
    Status step(const RunContext& ctx, const std::vector<Tensor>& scan_in,
                const std::vector<int>& axes, std::int64_t len, std::int64_t t,
                std::vector<Tensor>& state, std::vector<Tensor>& args,
                std::vector<Tensor>& outs) const {
        DSINFER_RETURN_IF_ERROR(ctx.control().check());
        args.assign(state.begin(), state.end());
        for (int j = 0; j < c_.m; ++j) {
            const auto ju = static_cast<std::size_t>(j);
            const std::int64_t idx = c_.in_dirs[ju] ? len - 1 - t : t;
            DSINFER_ASSIGN_OR_RETURN(Tensor s, take_slice(scan_in[ju], axes[ju], idx));
            args.push_back(std::move(s));
        }
        DSINFER_RETURN_IF_ERROR(body_->run(args, ctx.frame(), ctx.control(), outs));
        if (static_cast<int>(outs.size()) != c_.n + c_.k)
            return Status::error(ErrorCode::invalid_model, "Scan body produced ", outs.size(),
                                 " outputs, expected ", c_.n + c_.k);
        for (int i = 0; i < c_.n; ++i)
            state[static_cast<std::size_t>(i)] = outs[static_cast<std::size_t>(i)];
        return Status::ok();
    }

    // Batched form (opset 8): see the section comment. Inputs are shifted by one
    // (sequence_lens first).
    Status prepare_batched(PrepareContext& ctx) const {
        std::int64_t batch = -1, len = -1;
        for (int j = 0; j < c_.m; ++j) {
            const Tensor& x = ctx.input(1 + c_.n + j);
            DSINFER_CHECK(x.num_dims() >= 2, ErrorCode::invalid_argument, "scan input ", j,
                          " must be [batch, sequence, ...], got ", x.shape().to_string());
            DSINFER_CHECK((batch < 0 || x.shape()[0] == batch) && (len < 0 || x.shape()[1] == len),
                          ErrorCode::invalid_argument,
                          "scan inputs differ in batch size or sequence length");
            batch = x.shape()[0];
            len = x.shape()[1];
        }
        for (int i = 0; i < c_.n; ++i) {
            const Tensor& s = ctx.input(1 + i);
            DSINFER_CHECK(s.num_dims() >= 1 && s.shape()[0] == batch, ErrorCode::invalid_argument,
                          "initial state ", i, " must have batch size ", batch, ", got shape ",
                          s.shape().to_string());
        }
        if (ctx.has_input(0)) {
            const Tensor& sl = ctx.input(0);
            DSINFER_CHECK(sl.num_elements() == batch, ErrorCode::invalid_argument,
                          "sequence_lens must have ", batch, " elements, got ", sl.num_elements());
            if (ctx.has_data(0)) {
                DSINFER_ASSIGN_OR_RETURN(auto lens, read_ints(sl, "sequence_lens"));
                for (auto l : lens)
                    DSINFER_CHECK(l >= 0 && l <= len, ErrorCode::invalid_argument,
                                  "sequence_lens value ", l, " is outside [0, ", len, "]");
            }
        }
        for (int i = 0; i < ctx.num_outputs(); ++i) {
            if (i < c_.n)
                ctx.set_output(i, ctx.input(1 + i).dtype(), ctx.input(1 + i).shape());
            else
                ctx.set_output_dynamic(i);
        }
        return Status::ok();
    }

    Status run_batched(RunContext& ctx) const {
        const int first_scan = 1 + c_.n;
        const TensorView& x0 = ctx.input(first_scan);
        const std::int64_t batch = x0.shape[0], max_len = x0.shape[1];
        std::vector<std::int64_t> lens(static_cast<std::size_t>(batch), max_len);
        if (ctx.has_input(0)) {
            DSINFER_ASSIGN_OR_RETURN(lens, read_ints(as_tensor(ctx.input(0)), "sequence_lens"));
            for (auto l : lens)
                DSINFER_CHECK(l >= 0 && l <= max_len, ErrorCode::invalid_argument,
                              "sequence_lens value ", l, " is outside [0, ", max_len, "]");
        }
        std::int64_t total = 0;
        for (auto l : lens) total += l;
        if (total > ctx.control().max_loop_iterations)
            return Status::error(ErrorCode::resource_exhausted, "Scan length ", total,
                                 " exceeds ModelLimits::max_loop_iterations");
        std::vector<Tensor> final_state;  // outputs 0..n-1: [batch, ...] each (null if omitted)
        for (int i = 0; i < c_.n; ++i)
            final_state.push_back(ctx.has_output(i) ? as_tensor(ctx.output(i)) : Tensor());
        std::vector<Tensor> scan_out(static_cast<std::size_t>(c_.k));  // allocated on first use
        std::vector<Tensor> state, args, outs;
        const std::vector<int> seq_axes(static_cast<std::size_t>(c_.m), 0);
        for (std::int64_t b = 0; b < batch; ++b) {
            const std::int64_t len = lens[static_cast<std::size_t>(b)];
            state.clear();
            for (int i = 0; i < c_.n; ++i) {
                DSINFER_ASSIGN_OR_RETURN(Tensor s, take_slice(as_tensor(ctx.input(1 + i)), 0, b));
                state.push_back(std::move(s));
            }
            std::vector<Tensor> seqs;
            for (int j = 0; j < c_.m; ++j) {
                DSINFER_ASSIGN_OR_RETURN(Tensor s,
                                         take_slice(as_tensor(ctx.input(first_scan + j)), 0, b));
                seqs.push_back(std::move(s));
            }
            for (std::int64_t t = 0; t < len; ++t) {
                DSINFER_RETURN_IF_ERROR(step(ctx, seqs, seq_axes, len, t, state, args, outs));
                for (int i = 0; i < c_.k; ++i) {
                    const Tensor& part = outs[static_cast<std::size_t>(c_.n + i)];
                    Tensor& dst = scan_out[static_cast<std::size_t>(i)];
                    if (dst.is_null()) {
                        DSINFER_CHECK(part.num_dims() + 2 <= kMaxRank, ErrorCode::unsupported,
                                      "Scan output rank exceeds ", kMaxRank);
                        Shape shape{batch, max_len};
                        for (int d = 0; d < part.num_dims(); ++d) shape.push_back(part.shape()[d]);
                        DSINFER_ASSIGN_OR_RETURN(dst, Tensor::allocate(part.dtype(), shape));
                        if (part.dtype() != DType::string && dst.num_bytes() > 0)
                            std::memset(dst.raw_data(), 0, dst.num_bytes());
                    }
                    const std::int64_t inner = dst.shape().size_between(2, dst.num_dims());
                    DSINFER_CHECK(part.dtype() == dst.dtype() && part.num_elements() == inner,
                                  ErrorCode::invalid_argument, "Scan output ", i,
                                  ": iterations differ in shape or type");
                    DSINFER_RETURN_IF_ERROR(
                        copy_elements(part, 0, dst, (b * max_len + t) * inner, inner));
                }
            }
            for (int i = 0; i < c_.n; ++i) {
                const Tensor& s = state[static_cast<std::size_t>(i)];
                Tensor& dst = final_state[static_cast<std::size_t>(i)];
                if (dst.is_null()) continue;
                const std::int64_t inner = dst.shape().size_between(1, dst.num_dims());
                DSINFER_CHECK(s.dtype() == dst.dtype() && s.num_elements() == inner,
                              ErrorCode::invalid_argument, "Scan state ", i,
                              " changed shape or type in the body");
                DSINFER_RETURN_IF_ERROR(copy_elements(s, 0, dst, b * inner, inner));
            }
        }
        for (int i = 0; i < c_.k; ++i) {
            if (!ctx.has_output(c_.n + i)) continue;
            Tensor& t = scan_out[static_cast<std::size_t>(i)];
            if (t.is_null()) {
                // No iteration ran: the declared per-step shape, zero-filled.
                DSINFER_ASSIGN_OR_RETURN(t, empty_stack(c_.scan_decl[static_cast<std::size_t>(i)],
                                                        Shape{batch, max_len}, 0));
                if (t.dtype() != DType::string && t.num_bytes() > 0)
                    std::memset(t.raw_data(), 0, t.num_bytes());
            }
            DSINFER_RETURN_IF_ERROR(ctx.set_output_tensor(c_.n + i, std::move(t)));
        }
        return Status::ok();
    }

    std::shared_ptr<SubgraphRunner> body_;
    Config c_;
};

StatusOr<std::unique_ptr<Kernel>> make_scan(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(auto body, ctx.node().attr<std::shared_ptr<Graph>>("body"));
    DSINFER_ASSIGN_OR_RETURN(std::int64_t m, ctx.node().attr<std::int64_t>("num_scan_inputs"));
    ScanKernel::Config c;
    c.batched = ctx.opset() < 9;
    const int first = c.batched ? 1 : 0;  // opset 8: input 0 is sequence_lens
    DSINFER_CHECK(m >= 1 && m <= ctx.num_inputs() - first, ErrorCode::invalid_model,
                  "num_scan_inputs ", m, " must be in [1, ", ctx.num_inputs() - first, "]");
    for (int i = first; i < ctx.num_inputs(); ++i)  // states and scan inputs are required
        DSINFER_CHECK(ctx.has_input(i), ErrorCode::invalid_model, "Scan input ", i,
                      " is omitted; only opset 8's sequence_lens (input 0) is optional");
    c.m = static_cast<int>(m);
    c.n = ctx.num_inputs() - first - c.m;
    DSINFER_CHECK(static_cast<int>(body->inputs.size()) == c.n + c.m, ErrorCode::invalid_model,
                  "Scan body takes ", body->inputs.size(), " inputs, expected ", c.n + c.m);
    DSINFER_CHECK(static_cast<int>(body->outputs.size()) >= c.n, ErrorCode::invalid_model,
                  "Scan body has too few outputs");
    c.k = static_cast<int>(body->outputs.size()) - c.n;
    DSINFER_CHECK(ctx.num_outputs() == c.n + c.k, ErrorCode::invalid_model, "Scan node has ",
                  ctx.num_outputs(), " outputs, body implies ", c.n + c.k);
    auto list = [&](const char* name, int count, std::vector<std::int64_t>& out) -> Status {
        DSINFER_ASSIGN_OR_RETURN(out, ctx.node().attr_or<std::vector<std::int64_t>>(name, {}));
        if (out.empty()) out.assign(static_cast<std::size_t>(count), 0);
        DSINFER_CHECK(static_cast<int>(out.size()) == count, ErrorCode::invalid_model, name,
                      " has ", out.size(), " entries, expected ", count);
        return Status::ok();
    };
    DSINFER_RETURN_IF_ERROR(
        list(c.batched ? "directions" : "scan_input_directions", c.m, c.in_dirs));
    if (!c.batched) DSINFER_RETURN_IF_ERROR(list("scan_input_axes", c.m, c.in_axes));
    DSINFER_RETURN_IF_ERROR(list("scan_output_axes", c.k, c.out_axes));
    DSINFER_RETURN_IF_ERROR(list("scan_output_directions", c.k, c.out_dirs));
    c.scan_decl = declared_outputs(*body, c.n);
    DSINFER_ASSIGN_OR_RETURN(auto runner, ctx.compile_subgraph(body));
    return make_kernel<ScanKernel>(std::move(runner), std::move(c));
}

}  // namespace

void register_control_flow_kernels(KernelRegistry& r) {
    r.add({"If", "", 1, kMaxOpset, DeviceKind::cpu}, &make_if);
    r.add({"Loop", "", 1, kMaxOpset, DeviceKind::cpu}, &make_loop);
    r.add({"Scan", "", 1, kMaxOpset, DeviceKind::cpu}, &make_scan);
}

}  // namespace dsinfer::detail
