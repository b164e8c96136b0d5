// cuda/kernels/attention.cu — com.dsinfer MultiHeadAttention on CUDA, flash-attention style.
//
// Semantics: docs/OPTIMIZER.md and the reference src/cpu/reference/fused_attention.cpp (whose
// prepare() this kernel uses, and whose shape helper mha_dims() computes the dims and the
// mask's broadcast strides). Q [B, Sq, H*Dh], K [B, Sk, H*Dh], V [B, Sk, H*Dv], optional
// additive Mask (same dtype) broadcastable to [B, H, Sq, Sk], Y [B, Sq, H*Dv]. Rows whose
// scores are all -inf (or no keys) give zeros; a NaN score makes its row NaN.
//
// Both kernels run one block per (batch, head, query tile), stream K/V tiles through shared
// memory and keep an online softmax (running max m, running sum l, rescaled accumulator) in
// float, so the Sq x Sk scores are never materialized:
//   * mha_wmma_kernel: float16/bfloat16 with Dh = Dv = 64 and 16-byte aligned tensors. 4 warps,
//     64 queries x 64 keys per tile; S = Q K^T and O += P V on tensor cores (WMMA 16x16x16,
//     fp32 accumulate); the scores, the fp32 output accumulator and P (in the storage type)
//     live in shared memory (70 KiB, dynamic).
//   * mha_fma_kernel: every other case (float32, any Dh, Dv <= 128): 4 warps, 16 queries x 32
//     keys per tile, operands converted to float in shared memory, FMA dot products (lane = key
//     for the scores, lane = output column for P V).
// Heads sizes above 128 are declined at creation (unsupported: the reference runs them).
//
// Causal masking (attribute `causal`, 1 masks key j > i + Sk - Sq) is implemented in both
// kernels but declined at creation until the reference kernel supports it (so that the CUDA
// and CPU paths agree).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/attention.hpp"
#include "cuda_common.hpp"
#include "io_types.cuh"  // this directory (not src/kernels/)
#include "dsinfer/ops.hpp"

namespace dsinfer::cuda {
namespace {

using std::int64_t;


template <class T> struct Tag { using type = T; };

struct MhaArgs {
    const void* q = nullptr;
    const void* k = nullptr;
    const void* v = nullptr;
    const void* mask = nullptr;  // null: no mask
    void* y = nullptr;
    int64_t batch = 0, q_len = 0, kv_len = 0, heads = 0, head = 0, v_head = 0;
    int64_t ms[4] = {};  // mask element strides over [B, H, Sq, Sk] (0 = broadcast)
    float scale = 1.f;
    int causal = 0;
};

/// max that propagates NaN (the reference's running maximum keeps a NaN once seen).
__device__ __forceinline__ float nan_max(float a, float b) {
    return (a != a || b != b) ? NAN : fmaxf(a, b);
}

/// The scaled, masked score of (query i, key j), or -inf outside the problem / causally masked.
template <class S>
__device__ __forceinline__ float masked_score(const MhaArgs& a, float dot, int64_t b, int64_t h,
                                              int64_t i, int64_t j) {
    if (i >= a.q_len || j >= a.kv_len) return -INFINITY;
    if (a.causal != 0 && j > i + (a.kv_len - a.q_len)) return -INFINITY;
    float s = dot * a.scale;
    if (a.mask != nullptr) {
        using R = typename Io<S>::raw;
        s += Io<S>::ld(static_cast<const R*>(a.mask)[b * a.ms[0] + h * a.ms[1] + i * a.ms[2] +
                                                     j * a.ms[3]]);
    }
    return s;
}

// ---- generic FMA kernel ------------------------------------------------------------------------

constexpr int kFmaWarps = 4;
constexpr int kFmaRows = 4;                      // query rows per warp
constexpr int kFmaBQ = kFmaWarps * kFmaRows;     // 16 queries per block
constexpr int kFmaBK = 32;                       // keys per tile (= lanes)
constexpr int kMaxHead = 128;

template <class S>
__global__ void __launch_bounds__(kFmaWarps * 32) mha_fma_kernel(const MhaArgs a) {
    using R = typename Io<S>::raw;
    __shared__ float qs[kFmaBQ][kMaxHead];
    __shared__ float ks[kFmaBK][kMaxHead + 1];  // +1: lane-per-key reads are conflict-free
    __shared__ float vs[kFmaBK][kMaxHead];

    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid & 31, warp = tid >> 5;
    const int64_t dh = a.head, dv = a.v_head;
    const int64_t wqk = a.heads * dh, wv = a.heads * dv;
    const int nt = static_cast<int>((dv + 31) / 32);  // output columns per lane (<= 4)
    const int64_t q_tiles = (a.q_len + kFmaBQ - 1) / kFmaBQ;
    const int64_t total = q_tiles * a.heads * a.batch;
    const R* q = static_cast<const R*>(a.q);
    const R* kp = static_cast<const R*>(a.k);
    const R* vp = static_cast<const R*>(a.v);
    R* y = static_cast<R*>(a.y);

    for (int64_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const int64_t qt = blk % q_tiles;
        const int64_t bh = blk / q_tiles;
        const int64_t h = bh % a.heads, b = bh / a.heads;
        const int64_t i0 = qt * kFmaBQ;

        __syncthreads();  // the previous block iteration is done with qs/ks/vs
        for (int64_t idx = tid; idx < kFmaBQ * dh; idx += blockDim.x) {
            const int64_t r = idx / dh, d = idx % dh, i = i0 + r;
            qs[r][d] = i < a.q_len ? Io<S>::ld(q[(b * a.q_len + i) * wqk + h * dh + d]) : 0.f;
        }

        float m[kFmaRows], l[kFmaRows], acc[kFmaRows][4];
#pragma unroll
        for (int rr = 0; rr < kFmaRows; ++rr) {
            m[rr] = -INFINITY;
            l[rr] = 0.f;
#pragma unroll
            for (int t = 0; t < 4; ++t) acc[rr][t] = 0.f;
        }

        for (int64_t kt = 0; kt < a.kv_len; kt += kFmaBK) {
            __syncthreads();  // everyone is done with the previous K/V tile
            for (int64_t idx = tid; idx < kFmaBK * dh; idx += blockDim.x) {
                const int64_t r = idx / dh, d = idx % dh, j = kt + r;
                ks[r][d] = j < a.kv_len ? Io<S>::ld(kp[(b * a.kv_len + j) * wqk + h * dh + d]) : 0.f;
            }
            for (int64_t idx = tid; idx < kFmaBK * dv; idx += blockDim.x) {
                const int64_t r = idx / dv, d = idx % dv, j = kt + r;
                vs[r][d] = j < a.kv_len ? Io<S>::ld(vp[(b * a.kv_len + j) * wv + h * dv + d]) : 0.f;
            }
            __syncthreads();

            // Scores: lane = key.
            float s[kFmaRows];
#pragma unroll
            for (int rr = 0; rr < kFmaRows; ++rr) s[rr] = 0.f;
            for (int d = 0; d < static_cast<int>(dh); ++d) {
                const float kd = ks[lane][d];
#pragma unroll
                for (int rr = 0; rr < kFmaRows; ++rr) s[rr] += qs[warp * kFmaRows + rr][d] * kd;
            }
            const int64_t j = kt + lane;
            float p[kFmaRows];
#pragma unroll
            for (int rr = 0; rr < kFmaRows; ++rr) {
                const int64_t i = i0 + warp * kFmaRows + rr;
                const float sc = masked_score<S>(a, s[rr], b, h, i, j);
                float tmax = sc;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    tmax = nan_max(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
                const float m_new = nan_max(m[rr], tmax);
                const float m_use = m_new == -INFINITY ? 0.f : m_new;
                p[rr] = expf(sc - m_use);
                const float alpha = expf(m[rr] - m_use);
                float psum = p[rr];
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
                l[rr] = l[rr] * alpha + psum;
                m[rr] = m_new;
#pragma unroll
                for (int t = 0; t < 4; ++t) acc[rr][t] *= alpha;
            }

            // O += P V: lane = output column (lane + 32 t).
            const int nk = a.kv_len - kt < kFmaBK ? static_cast<int>(a.kv_len - kt) : kFmaBK;
            for (int jj = 0; jj < nk; ++jj) {
                float pj[kFmaRows];
#pragma unroll
                for (int rr = 0; rr < kFmaRows; ++rr) pj[rr] = __shfl_sync(0xffffffffu, p[rr], jj);
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    if (t < nt) {
                        const float vv = vs[jj][lane + 32 * t];
#pragma unroll
                        for (int rr = 0; rr < kFmaRows; ++rr) acc[rr][t] += pj[rr] * vv;
                    }
                }
            }
        }

#pragma unroll
        for (int rr = 0; rr < kFmaRows; ++rr) {
            const int64_t i = i0 + warp * kFmaRows + rr;
            if (i >= a.q_len) continue;
            R* yr = y + (b * a.q_len + i) * wv + h * dv;
            const bool empty = m[rr] == -INFINITY;
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                const int64_t e = lane + 32 * t;
                if (t < nt && e < dv) yr[e] = Io<S>::st(empty ? 0.f : acc[rr][t] / l[rr]);
            }
        }
    }
}

// ---- tensor-core (WMMA) kernel: f16/bf16, Dh = Dv = 64 -------------------------------------------

constexpr int kTcWarps = 4;
constexpr int kTcBQ = 64;                 // queries per block (16 per warp)
constexpr int kTcBK = 64;                 // keys per tile
constexpr int kTcD = 64;                  // Dh = Dv
constexpr int kTcLdh = kTcD + 8;          // half row stride (elements): 144 bytes
constexpr int kTcLdf = kTcBK + 4;         // float row stride (elements): 272 bytes
constexpr std::size_t kTcTileBytes = static_cast<std::size_t>(kTcBQ) * kTcLdh * 2;   // 9216
constexpr std::size_t kTcWarpF = static_cast<std::size_t>(16) * kTcLdf * 4;          // 4352
constexpr std::size_t kTcWarpH = static_cast<std::size_t>(16) * kTcLdh * 2;          // 2304
constexpr std::size_t kTcOffQ = 0;
constexpr std::size_t kTcOffK = kTcOffQ + kTcTileBytes;
constexpr std::size_t kTcOffV = kTcOffK + kTcTileBytes;
constexpr std::size_t kTcOffS = kTcOffV + kTcTileBytes;
constexpr std::size_t kTcOffO = kTcOffS + kTcWarps * kTcWarpF;
constexpr std::size_t kTcOffP = kTcOffO + kTcWarps * kTcWarpF;
constexpr std::size_t kTcSmem = kTcOffP + kTcWarps * kTcWarpH;  // 71680 bytes
static_assert(kTcOffK % 32 == 0 && kTcOffV % 32 == 0 && kTcOffS % 32 == 0 &&
                  kTcOffO % 32 == 0 && kTcOffP % 32 == 0 && kTcWarpF % 32 == 0 &&
                  kTcWarpH % 32 == 0,
              "WMMA pointers must be 32-byte aligned");

/// Copies a 64-row x 64-column tile (rows r of a [*, ld] matrix starting at `src`, rows >= n
/// zero) into shared memory with row stride kTcLdh, 16 bytes at a time.
__device__ __forceinline__ void tc_load_tile(unsigned short* dst, const unsigned short* src,
                                             int64_t ld, int64_t n) {
    for (int idx = static_cast<int>(threadIdx.x); idx < kTcBQ * (kTcD / 8); idx += blockDim.x) {
        const int r = idx >> 3, c = (idx & 7) * 8;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (r < n) val = *reinterpret_cast<const uint4*>(src + static_cast<int64_t>(r) * ld + c);
        *reinterpret_cast<uint4*>(dst + r * kTcLdh + c) = val;
    }
}

template <class S>
__global__ void __launch_bounds__(kTcWarps * 32) mha_wmma_kernel(const MhaArgs a) {
    namespace wm = nvcuda::wmma;
    using R = unsigned short;
    extern __shared__ __align__(128) unsigned char smem[];
    R* qs = reinterpret_cast<R*>(smem + kTcOffQ);
    R* ks = reinterpret_cast<R*>(smem + kTcOffK);
    R* vs = reinterpret_cast<R*>(smem + kTcOffV);
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid & 31, warp = tid >> 5;
    float* sw = reinterpret_cast<float*>(smem + kTcOffS + warp * kTcWarpF);  // 16 x kTcLdf
    float* ow = reinterpret_cast<float*>(smem + kTcOffO + warp * kTcWarpF);  // 16 x kTcLdf
    R* pw = reinterpret_cast<R*>(smem + kTcOffP + warp * kTcWarpH);          // 16 x kTcLdh
    const S* qs_t = reinterpret_cast<const S*>(qs);
    const S* ks_t = reinterpret_cast<const S*>(ks);
    const S* vs_t = reinterpret_cast<const S*>(vs);
    const S* pw_t = reinterpret_cast<const S*>(pw);

    const int64_t wqk = a.heads * kTcD;  // = wv
    const int64_t q_tiles = (a.q_len + kTcBQ - 1) / kTcBQ;
    const int64_t total = q_tiles * a.heads * a.batch;
    const R* q = static_cast<const R*>(a.q);
    const R* kp = static_cast<const R*>(a.k);
    const R* vp = static_cast<const R*>(a.v);
    R* y = static_cast<R*>(a.y);
    // This lane's row of the warp's 16 and its half of the 64 columns.
    const int r = lane >> 1;
    const int c0 = (lane & 1) * 32;

    for (int64_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const int64_t qt = blk % q_tiles;
        const int64_t bh = blk / q_tiles;
        const int64_t h = bh % a.heads, b = bh / a.heads;
        const int64_t i0 = qt * kTcBQ;
        const int64_t i = i0 + warp * 16 + r;  // this lane's query

        __syncthreads();  // the previous block iteration is done with qs
        tc_load_tile(qs, q + (b * a.q_len + i0) * wqk + h * kTcD, wqk, a.q_len - i0);
        for (int c = 0; c < 32; ++c) ow[r * kTcLdf + c0 + c] = 0.f;
        float m = -INFINITY, l = 0.f;
        __syncthreads();
        wm::fragment<wm::matrix_a, 16, 16, 16, S, wm::row_major> qa[kTcD / 16];
#pragma unroll
        for (int kk = 0; kk < kTcD / 16; ++kk)
            wm::load_matrix_sync(qa[kk], qs_t + (warp * 16) * kTcLdh + kk * 16, kTcLdh);

        for (int64_t kt = 0; kt < a.kv_len; kt += kTcBK) {
            __syncthreads();  // everyone is done with the previous K/V tile
            tc_load_tile(ks, kp + (b * a.kv_len + kt) * wqk + h * kTcD, wqk, a.kv_len - kt);
            tc_load_tile(vs, vp + (b * a.kv_len + kt) * wqk + h * kTcD, wqk, a.kv_len - kt);
            __syncthreads();

            // S = Q K^T (16 queries x 64 keys per warp). K^T is K read column-major.
#pragma unroll
            for (int n = 0; n < kTcBK / 16; ++n) {
                wm::fragment<wm::accumulator, 16, 16, 16, float> sc;
                wm::fill_fragment(sc, 0.f);
#pragma unroll
                for (int kk = 0; kk < kTcD / 16; ++kk) {
                    wm::fragment<wm::matrix_b, 16, 16, 16, S, wm::col_major> kb;
                    wm::load_matrix_sync(kb, ks_t + (n * 16) * kTcLdh + kk * 16, kTcLdh);
                    wm::mma_sync(sc, qa[kk], kb, sc);
                }
                wm::store_matrix_sync(sw + n * 16, sc, kTcLdf, wm::mem_row_major);
            }
            __syncwarp();

            // Online softmax on this lane's half row (columns rotated by lane: fewer bank
            // conflicts); lanes 2r and 2r+1 combine through a shuffle.
            float tmax = -INFINITY;
            for (int c = 0; c < 32; ++c) {
                const int col = c0 + ((c + lane) & 31);
                const float s = masked_score<S>(a, sw[r * kTcLdf + col], b, h, i, kt + col);
                sw[r * kTcLdf + col] = s;
                tmax = nan_max(tmax, s);
            }
            tmax = nan_max(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
            const float m_new = nan_max(m, tmax);
            const float m_use = m_new == -INFINITY ? 0.f : m_new;
            float psum = 0.f;
            for (int c = 0; c < 32; ++c) {
                const int col = c0 + ((c + lane) & 31);
                const float p = expf(sw[r * kTcLdf + col] - m_use);
                const R pr = Io<S>::st(p);
                pw[r * kTcLdh + col] = pr;
                psum += Io<S>::ld(pr);  // the sum of the rounded weights the MMA uses
            }
            psum += __shfl_xor_sync(0xffffffffu, psum, 1);
            const float alpha = expf(m - m_use);
            l = l * alpha + psum;
            m = m_new;
            for (int c = 0; c < 32; ++c) ow[r * kTcLdf + c0 + ((c + lane) & 31)] *= alpha;
            __syncwarp();

            // O += P V (16 queries x 64 output columns per warp).
            wm::fragment<wm::matrix_a, 16, 16, 16, S, wm::row_major> pa[kTcBK / 16];
#pragma unroll
            for (int kk = 0; kk < kTcBK / 16; ++kk)
                wm::load_matrix_sync(pa[kk], pw_t + kk * 16, kTcLdh);
#pragma unroll
            for (int d = 0; d < kTcD / 16; ++d) {
                wm::fragment<wm::accumulator, 16, 16, 16, float> oc;
                wm::load_matrix_sync(oc, ow + d * 16, kTcLdf, wm::mem_row_major);
#pragma unroll
                for (int kk = 0; kk < kTcBK / 16; ++kk) {
                    wm::fragment<wm::matrix_b, 16, 16, 16, S, wm::row_major> vb;
                    wm::load_matrix_sync(vb, vs_t + (kk * 16) * kTcLdh + d * 16, kTcLdh);
                    wm::mma_sync(oc, pa[kk], vb, oc);
                }
                wm::store_matrix_sync(ow + d * 16, oc, kTcLdf, wm::mem_row_major);
            }
            __syncwarp();
        }

        // Y row i, this lane's 32 columns: 4 x 16-byte stores.
        if (i < a.q_len) {
            const bool empty = m == -INFINITY;
            R* yr = y + (b * a.q_len + i) * wqk + h * kTcD + c0;
#pragma unroll
            for (int c = 0; c < 32; c += 8) {
                R tmp[8];
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    tmp[e] = Io<S>::st(empty ? 0.f : ow[r * kTcLdf + c0 + c + e] / l);
                uint4 val;
                val.x = static_cast<unsigned>(tmp[0]) | (static_cast<unsigned>(tmp[1]) << 16);
                val.y = static_cast<unsigned>(tmp[2]) | (static_cast<unsigned>(tmp[3]) << 16);
                val.z = static_cast<unsigned>(tmp[4]) | (static_cast<unsigned>(tmp[5]) << 16);
                val.w = static_cast<unsigned>(tmp[6]) | (static_cast<unsigned>(tmp[7]) << 16);
                *reinterpret_cast<uint4*>(yr + c) = val;
            }
        }
    }
}

// ---- kernel object -------------------------------------------------------------------------------

bool aligned16(const void* p) noexcept {
    return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

unsigned blocks_for(int64_t total) noexcept {
    return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(total, int64_t{1} << 20)));
}

class MultiHeadAttentionCuda final : public CudaKernel {
public:
    MultiHeadAttentionCuda(std::unique_ptr<Kernel> ref, int64_t heads, bool has_scale,
                           float scale, bool causal)
        : CudaKernel(std::move(ref)), heads_(heads), has_scale_(has_scale), scale_(scale),
          causal_(causal) {}

    Status run(RunContext& ctx) const noexcept override {
        const StatusOr<detail::MhaDims> dims = detail::mha_dims(ctx, heads_);
        if (!dims.is_ok()) return dims.status();
        const detail::MhaDims& d = *dims;
        if (d.head > kMaxHead || d.v_head > kMaxHead)
            return Status(ErrorCode::unsupported,
                          "CUDA MultiHeadAttention: head sizes above 128 are not supported");
        MhaArgs a;
        a.q = ctx.input(0).raw;
        a.k = ctx.input(1).raw;
        a.v = ctx.input(2).raw;
        a.mask = d.has_mask ? ctx.input(3).raw : nullptr;
        a.y = ctx.output(0).raw;
        a.batch = d.batch;
        a.q_len = d.q_len;
        a.kv_len = d.kv_len;
        a.heads = d.heads;
        a.head = d.head;
        a.v_head = d.v_head;
        for (int k = 0; k < 4; ++k) a.ms[k] = d.mask_strides[static_cast<std::size_t>(k)];
        a.scale = detail::mha_scale(has_scale_, scale_, d.head);
        a.causal = causal_ ? 1 : 0;
        if (a.batch == 0 || a.q_len == 0 || a.heads == 0 || a.v_head == 0) return Status::ok();
        const DType dt = ctx.input(0).dtype;
        cudaStream_t stream = stream_of(ctx);
        const bool tc = (dt == DType::f16 || dt == DType::bf16) && a.head == kTcD &&
                        a.v_head == kTcD && aligned16(a.q) && aligned16(a.k) &&
                        aligned16(a.v) && aligned16(a.y);
        if (tc) {
            return dt == DType::f16 ? launch_tc<__half>(a, stream)
                                    : launch_tc<__nv_bfloat16>(a, stream);
        }
        switch (dt) {
            case DType::f32: return launch_fma<float>(a, stream);
            case DType::f16: return launch_fma<__half>(a, stream);
            case DType::bf16: return launch_fma<__nv_bfloat16>(a, stream);
            default:
                return Status(ErrorCode::unsupported, "CUDA MultiHeadAttention: element type");
        }
    }

private:
    template <class S>
    static Status launch_fma(const MhaArgs& a, cudaStream_t stream) {
        const int64_t total = (a.q_len + kFmaBQ - 1) / kFmaBQ * a.heads * a.batch;
        mha_fma_kernel<S><<<blocks_for(total), kFmaWarps * 32, 0, stream>>>(a);
        return launch_status("MultiHeadAttention (fma)");
    }
    template <class S>
    static Status launch_tc(const MhaArgs& a, cudaStream_t stream) {
        DS_CUDA_TRY(cudaFuncSetAttribute(mha_wmma_kernel<S>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kTcSmem)),
                    "MultiHeadAttention: shared memory attribute");
        const int64_t total = (a.q_len + kTcBQ - 1) / kTcBQ * a.heads * a.batch;
        mha_wmma_kernel<S><<<blocks_for(total), kTcWarps * 32, kTcSmem, stream>>>(a);
        return launch_status("MultiHeadAttention (tensor cores)");
    }

    int64_t heads_;
    bool has_scale_;
    float scale_;
    bool causal_;
};

/// Product of dims 2.. of input i's declared shape, or -1 when not static.
int64_t declared_width(const KernelCreateContext& ctx, int i) {
    const Value* v = ctx.input_value(i);
    if (v == nullptr || !v->shape.known || v->shape.rank() < 3) return -1;
    int64_t w = 1;
    for (int k = 2; k < v->shape.rank(); ++k) {
        const Dim& dim = v->shape.dims[static_cast<std::size_t>(k)];
        if (!dim.is_static()) return -1;
        w *= dim.value;
    }
    return w;
}

StatusOr<std::unique_ptr<Kernel>> make_mha(const KernelCreateContext& ctx) {
    const Node& n = ctx.node();
    if (ctx.num_inputs() < 3 || ctx.num_inputs() > 4 || ctx.num_outputs() != 1)
        return Status::error(ErrorCode::unsupported,  // the reference reports the error
                             "CUDA MultiHeadAttention: unexpected input/output count");
    DSINFER_ASSIGN_OR_RETURN(const int64_t heads, n.attr<int64_t>("num_heads"));
    if (heads <= 0)
        return Status::error(ErrorCode::unsupported, "CUDA MultiHeadAttention: num_heads");
    DSINFER_ASSIGN_OR_RETURN(const float scale, n.attr_or<float>("scale", 0.f));
    DSINFER_ASSIGN_OR_RETURN(const int64_t causal, n.attr_or<int64_t>("causal", 0));
    if (causal != 0)
        return Status::error(ErrorCode::unsupported,
                             "CUDA MultiHeadAttention: causal is not supported yet (the reference ",
                             "kernel has no causal attribute)");
    // Head sizes must be known (static trailing dims) and <= 128.
    const int64_t wq = declared_width(ctx, 0), wv = declared_width(ctx, 2);
    if (wq < 0 || wv < 0)
        return Status::error(ErrorCode::unsupported,
                             "CUDA MultiHeadAttention: head sizes unknown at load");
    if (wq % heads != 0 || wv % heads != 0 || wq / heads > kMaxHead || wv / heads > kMaxHead)
        return Status::error(ErrorCode::unsupported, "CUDA MultiHeadAttention: head sizes ",
                             wq / heads, "/", wv / heads, " (Q/V) above ", kMaxHead,
                             " are not supported");
    return make_with_fallback<MultiHeadAttentionCuda>(ctx, heads, n.has_attr("scale"), scale,
                                                      causal != 0);
}

}  // namespace

void register_attention_kernels(KernelRegistry& r) {
    r.add({"MultiHeadAttention", kDsinferDomain, 1, kMaxOpset, DeviceKind::cuda,
           DTypeSet{DType::f32, DType::f16, DType::bf16}},
          &make_mha, kPriorityCuda, kProvider);
}

}  // namespace dsinfer::cuda
