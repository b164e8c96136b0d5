// Fast float32 kernels of the decoder-block operators (docs/OPTIMIZER.md): RMSNormalization
// (ai.onnx-23 and com.dsinfer), com.dsinfer RotaryEmbedding and GatedActivation, on the vector
// loops of the fast kernels' ISA (simd(): AVX-512, AVX2+FMA or the baseline, capped by
// DSINFER_MAX_CPU_ISA). Rows are split across threads; a row's arithmetic does not depend on
// the split, so results are identical for any thread count. Other dtypes and forms run the
// reference kernel (the fallback), whose prepare validates every input.
//
// Numerics vs the reference kernels (tests/unit/test_decoder_fusions.cpp):
//   - RotaryEmbedding: x·cos, rotate(x)·sin and their sum, each rounded (the exact vector
//     loops, no FMA): bitwise the reference and the unfused Mul/Mul/Add graph;
//   - GatedActivation: the fast sigmoid/gelu loops (within 2 ulp; erf 2e-7 absolute), then the
//     exact products: bitwise the unfused graph on the cpu backend (Sigmoid, Mul, Mul or Gelu,
//     Mul), within those bounds of the reference;
//   - RMSNormalization: the sum of squares in double (fixed lanes), 1/sqrt in double, then
//     x·inv and ·scale rounded in float32 (the reference rounds once from double): a few ulp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/fast/fast_common.hpp"
#include "cpu/fast/groups.hpp"
#include "dsinfer/ops.hpp"
#include "ops/gated_activation.hpp"

namespace dsinfer::detail {

namespace fast {
namespace {

using std::int64_t;

/// Row offsets of an operand broadcast to the output's leading dims (the last dim walked
/// apart): next() moves to the output's following row.
class RowWalker {
public:
    RowWalker(const Shape& out, const Shape& operand, int64_t first_row) noexcept {
        const Strides s = broadcast_strides(operand, out);
        rank_ = out.rank() - 1;
        for (int d = 0; d < rank_; ++d) {
            dims_[static_cast<std::size_t>(d)] = out[d];
            strides_[static_cast<std::size_t>(d)] = s[static_cast<std::size_t>(d)];
        }
        int64_t rem = first_row;
        for (int d = rank_ - 1; d >= 0; --d) {
            const auto du = static_cast<std::size_t>(d);
            idx_[du] = rem % dims_[du];
            rem /= dims_[du];
            offset_ += idx_[du] * strides_[du];
        }
    }
    int64_t offset() const noexcept { return offset_; }
    void next() noexcept {
        for (int d = rank_ - 1; d >= 0; --d) {
            const auto du = static_cast<std::size_t>(d);
            offset_ += strides_[du];
            if (++idx_[du] < dims_[du]) return;
            offset_ -= strides_[du] * dims_[du];
            idx_[du] = 0;
        }
    }

private:
    int rank_ = 0;
    std::array<int64_t, kMaxRank> dims_{}, strides_{}, idx_{};
    int64_t offset_ = 0;
};

/// A float32 operand whose last dim is the output's (step 1 along rows), broadcast to it.
bool row_operand(const TensorView& p, const Shape& out) noexcept {
    return p.dtype == DType::f32 && p.shape.rank() >= 1 && p.shape.rank() <= out.rank() &&
           p.shape[p.shape.rank() - 1] == out[out.rank() - 1];
}

// ---- RMSNormalization ------------------------------------------------------------------------

class RmsNormFast final : public FastKernel {
public:
    RmsNormFast(std::unique_ptr<Kernel> fb, int64_t axis, float eps)
        : FastKernel(std::move(fb)), axis_(axis), eps_(eps) {}

    std::string algorithm(const PrepareContext& ctx) const override {
        return takes(ctx.input(0).dtype(), ctx.input(0).shape(), ctx.input(1).shape())
                   ? simd_algorithm("rmsnorm")
                   : fallback_algorithm(ctx);
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& sc = ctx.input(1);
        if (!takes(x.dtype, x.shape, sc.shape) || sc.dtype != DType::f32) return fallback_run(ctx);
        const int64_t h = x.shape[x.shape.rank() - 1];
        if (h == 0 || x.num_elements() == 0) return Status::ok();
        const int64_t rows = x.num_elements() / h;
        const float* px = x.data_unchecked<float>();
        const float* gamma = sc.data_unchecked<float>();
        const bool one = sc.num_elements() == 1;
        float* py = ctx.output(0).data_unchecked<float>();
        const SimdOps& s = simd();
        const auto mul = s.vv[static_cast<int>(Arith::mul)];
        const auto mul_s = s.vs[static_cast<int>(Arith::mul)];
        const double eps = eps_;
        const double inv_h = 1.0 / static_cast<double>(h);
        parallel_for(rows, std::max<int64_t>(1, kGrain / h), [&](int64_t b, int64_t e) {
            for (int64_t r = b; r < e; ++r) {
                const float* xr = px + r * h;
                float* y = py + r * h;
                const double inv = 1.0 / std::sqrt(s.sum_sq(xr, h) * inv_h + eps);
                mul_s(xr, static_cast<float>(inv), y, h);
                if (one) mul_s(y, gamma[0], y, h);
                else mul(y, gamma, y, h);
            }
        });
        return Status::ok();
    }

private:
    /// f32, normalized over the last axis only, Scale of 1 element or [1, ..., 1, D].
    bool takes(DType dt, const Shape& x, const Shape& scale) const noexcept {
        const int rank = x.rank();
        if (dt != DType::f32 || rank == 0 || !(axis_ == -1 || axis_ == rank - 1)) return false;
        if (scale.num_elements() == 1) return true;
        if (scale.rank() == 0 || scale.rank() > rank || scale[scale.rank() - 1] != x[rank - 1])
            return false;
        return scale.num_elements() == x[rank - 1];
    }

    int64_t axis_;
    float eps_;
};

Factory make_rms_norm(const KernelCreateContext& ctx) {
    // The reference factory validates the node (axis, epsilon, stash_type, one output).
    DSINFER_ASSIGN_OR_RETURN(auto fb, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(int64_t axis, ctx.node().attr_or<int64_t>("axis", -1));
    DSINFER_ASSIGN_OR_RETURN(float eps, ctx.node().attr_or<float>("epsilon", 1e-5f));
    DSINFER_ASSIGN_OR_RETURN(int64_t stash, ctx.node().attr_or<int64_t>("stash_type", 1));
    if (stash != 1) return fb;  // a wider stash type: the reference computes it as asked
    return std::unique_ptr<Kernel>(std::make_unique<RmsNormFast>(std::move(fb), axis, eps));
}

// ---- RotaryEmbedding -------------------------------------------------------------------------

/// Columns per block of a row (the stack buffer of rotate(x)); even, so that pairs stay whole.
constexpr int64_t kRotaryBlock = 256;

class RotaryFast final : public FastKernel {
public:
    RotaryFast(std::unique_ptr<Kernel> fb, bool interleaved)
        : FastKernel(std::move(fb)), interleaved_(interleaved) {}

    std::string algorithm(const PrepareContext& ctx) const override {
        return ctx.input(0).dtype() == DType::f32 ? simd_algorithm("rotary")
                                                  : fallback_algorithm(ctx);
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        const TensorView& cv = ctx.input(1);
        const TensorView& sv = ctx.input(2);
        const Shape& ys = ctx.output(0).shape;
        // Cos/Sin constant along rows (last dim 1) or scalars: the reference's general loop.
        if (x.dtype != DType::f32 || !row_operand(cv, ys) || !row_operand(sv, ys))
            return fallback_run(ctx);
        const int64_t d = ys[ys.rank() - 1];
        const int64_t total = ys.num_elements();
        if (d == 0 || total == 0) return Status::ok();
        const int64_t rows = total / d;
        const float* px = x.data_unchecked<float>();
        const float* pc = cv.data_unchecked<float>();
        const float* ps = sv.data_unchecked<float>();
        float* py = ctx.output(0).data_unchecked<float>();
        const SimdOps& s = simd();
        const auto add = s.vv[static_cast<int>(Arith::add)];
        const auto mul = s.vv[static_cast<int>(Arith::mul)];
        const auto neg = s.unary[static_cast<int>(Unary::neg)];
        const bool inter = interleaved_;
        parallel_for(rows, std::max<int64_t>(1, kGrain / d), [&](int64_t b, int64_t e) {
            RowWalker xw(ys, x.shape, b), cw(ys, cv.shape, b), sw(ys, sv.shape, b);
            alignas(64) float t[kRotaryBlock];
            // y = x·cos + t·sin over n columns from column j (t = rotate(x) there).
            auto finish = [&](const float* xr, const float* c, const float* sn, float* y,
                              int64_t j, int64_t n) {
                mul(xr + j, c + j, y + j, n);
                mul(t, sn + j, t, n);
                add(y + j, t, y + j, n);
            };
            for (int64_t r = b; r < e; ++r, xw.next(), cw.next(), sw.next()) {
                const float* xr = px + xw.offset();
                const float* c = pc + cw.offset();
                const float* sn = ps + sw.offset();
                float* y = py + r * d;
                if (inter) {
                    for (int64_t j = 0; j < d; j += kRotaryBlock) {
                        const int64_t n = std::min(kRotaryBlock, d - j);
                        for (int64_t k = 0; k < n; k += 2) {
                            t[k] = -xr[j + k + 1];
                            t[k + 1] = xr[j + k];
                        }
                        finish(xr, c, sn, y, j, n);
                    }
                } else {
                    const int64_t h = d / 2;
                    for (int64_t j = 0; j < h; j += kRotaryBlock) {
                        const int64_t n = std::min(kRotaryBlock, h - j);
                        neg(xr + h + j, t, n);  // first half: -x[h + i]
                        finish(xr, c, sn, y, j, n);
                        std::memcpy(t, xr + j, static_cast<std::size_t>(n) * sizeof(float));
                        finish(xr, c, sn, y, h + j, n);  // second half: x[i]
                    }
                }
            }
        });
        return Status::ok();
    }

private:
    bool interleaved_;
};

Factory make_rotary(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(auto fb, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(int64_t inter, ctx.node().attr_or<int64_t>("interleaved", 0));
    return std::unique_ptr<Kernel>(std::make_unique<RotaryFast>(std::move(fb), inter == 1));
}

// ---- GatedActivation -------------------------------------------------------------------------

class GatedActivationFast final : public FastKernel {
public:
    GatedActivationFast(std::unique_ptr<Kernel> fb, GatedAct act)
        : FastKernel(std::move(fb)), act_(act) {}

    std::string algorithm(const PrepareContext& ctx) const override {
        return ctx.input(0).dtype() == DType::f32 ? simd_algorithm("gated-activation")
                                                  : fallback_algorithm(ctx);
    }

    Status run(RunContext& ctx) const noexcept override {
        const TensorView& x = ctx.input(0);
        if (x.dtype != DType::f32) return fallback_run(ctx);
        const int64_t w = x.shape[x.shape.rank() - 1];
        const int64_t f = w / 2;
        if (f == 0 || x.num_elements() == 0) return Status::ok();
        const float* px = x.data_unchecked<float>();
        float* py = ctx.output(0).data_unchecked<float>();
        const SimdOps& s = simd();
        const auto mul = s.vv[static_cast<int>(Arith::mul)];
        const Unary u = act_ == GatedAct::silu   ? Unary::sigmoid
                        : act_ == GatedAct::gelu ? Unary::gelu
                                                 : Unary::gelu_tanh;
        const auto act = s.unary[static_cast<int>(u)];
        const bool silu = act_ == GatedAct::silu;
        // Output elements in chunks across threads; a chunk's pieces lie within rows.
        parallel_for(x.num_elements() / 2, kGrainHeavy, [&](int64_t b, int64_t e) {
            while (b < e) {
                const int64_t r = b / f, j = b % f;
                const int64_t n = std::min(f - j, e - b);
                const float* a = px + r * w + j;
                float* y = py + b;
                act(a, y, n);
                if (silu) mul(y, a, y, n);  // Mul(g, Sigmoid(g))
                mul(y, a + f, y, n);
                b += n;
            }
        });
        return Status::ok();
    }

private:
    GatedAct act_;
};

Factory make_gated_activation(const KernelCreateContext& ctx) {
    DSINFER_ASSIGN_OR_RETURN(auto fb, ctx.create_fallback());
    DSINFER_ASSIGN_OR_RETURN(GatedAct act, gated_activation_from_attributes(ctx.node()));
    return std::unique_ptr<Kernel>(std::make_unique<GatedActivationFast>(std::move(fb), act));
}

}  // namespace
}  // namespace fast

void register_fast_decoder_kernels(KernelRegistry& r) {
    const auto cpu = DeviceKind::cpu;
    const DTypeSet f32{DType::f32};
    r.add({"RMSNormalization", "", 23, kMaxOpset, cpu, f32}, &fast::make_rms_norm, kPriorityCpu,
          "cpu");
    r.add({"RMSNormalization", kDsinferDomain, 1, 1, cpu, f32}, &fast::make_rms_norm,
          kPriorityCpu, "cpu");
    r.add({"RotaryEmbedding", kDsinferDomain, 1, 1, cpu, f32}, &fast::make_rotary, kPriorityCpu,
          "cpu");
    r.add({"GatedActivation", kDsinferDomain, 1, 1, cpu, f32}, &fast::make_gated_activation,
          kPriorityCpu, "cpu");
}

}  // namespace dsinfer::detail
