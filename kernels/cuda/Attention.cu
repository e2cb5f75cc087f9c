// CUDA kernels of rope and of attention and its gradient (as
// kernels/cpu/Attention.cpp and AttentionBackward.cpp).
//
// nn.attention and nn.attention_grad (and their _with_stats forms, which
// write and read the forward's logsumexp so the backward does not run the
// forward again) run on cuDNN's fused attention where it loads
// (CudnnAttention.cpp), else on the tensor cores
// (FlashAttention.cu) whenever flashAttentionApplies(): bf16/f16 operands,
// head dims 64 or 128, 16-byte aligned pointers. The SIMT kernels below are
// the documented fallback for everything the fast attention cannot run (f32,
// other head dims up to 256, unaligned tensors): same semantics (grouped
// heads, causal mask aligned to the end, scale), f32 arithmetic without
// tensor cores, and deterministic (no atomics, fixed order). They are not a
// second implementation to choose between: launchAttention and
// launchAttentionGrad take them only when the fast path does not apply.
//
// All three paths take each operand head-major [B, H, S, D] or
// sequence-major [B, S, H, D], as the kernels' `seq_major` attribute says
// (the shared checks resolve it into AttentionShape::layout per role): the
// layouts travel as per-operand strides and nothing is transposed. The
// statistics (lse, and the backward's workspaces) are always [B, H, S].

#include "kernels/cuda/DeviceSupport.cuh"
#include "kernels/cpu/OperandChecks.h"
#include "kernels/cuda/CudnnAttention.h"
#include "kernels/cuda/FlashAttention.cuh"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace loom::cuda {
namespace {

//===----------------------------------------------------------------------===//
// Rope
//===----------------------------------------------------------------------===//

/// One thread per rotated pair, which it reads whole before writing: out may
/// be x.
/// TRANSPOSE: 0 none; 1 x is [.., S, H, D] and out [.., H, S, D]; 2 the
/// reverse. Rows are counted in the [.., H, S, D] view.
template <typename T, bool INTERLEAVED, int TRANSPOSE>
__global__ void __launch_bounds__(256)
    ropeKernel(const T *x, const T *__restrict__ cosT, const T *__restrict__ sinT, T *out,
               int64_t pairs, int64_t seq, int64_t dim, int64_t heads) {
  const int64_t half = dim / 2;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = p / half, i = p % half;
    const int64_t tableBase = (row % seq) * dim;
    int64_t inBase = row * dim, outBase = row * dim;
    if (TRANSPOSE != 0) {
      const int64_t s = row % seq, h = (row / seq) % heads, outer = row / (seq * heads);
      const int64_t swapped = ((outer * seq + s) * heads + h) * dim;
      (TRANSPOSE == 1 ? inBase : outBase) = swapped;
    }
    if (INTERLEAVED) {
      const float a = toF(x[inBase + 2 * i]), b = toF(x[inBase + 2 * i + 1]);
      const float c = toF(cosT[tableBase + 2 * i]), s = toF(sinT[tableBase + 2 * i]);
      out[outBase + 2 * i] = fromF<T>(a * c - b * s);
      out[outBase + 2 * i + 1] = fromF<T>(b * c + a * s);
    } else {
      const float a = toF(x[inBase + i]), b = toF(x[inBase + i + half]);
      const float c0 = toF(cosT[tableBase + i]), s0 = toF(sinT[tableBase + i]);
      const float c1 = toF(cosT[tableBase + i + half]), s1 = toF(sinT[tableBase + i + half]);
      out[outBase + i] = fromF<T>(a * c0 - b * s0);
      out[outBase + i + half] = fromF<T>(b * c1 + a * s1);
    }
  }
}

/// The rotate-half layout with 16-byte vectors: a thread rotates V pairs
/// (i .. i+V-1 with i+half ..) of one row, loading each half and the tables
/// as one vector each. Needs half % V == 0 and 16-byte aligned tensors.
template <typename T, int TRANSPOSE>
__global__ void __launch_bounds__(256)
    ropeVecKernel(const T *x, const T *__restrict__ cosT, const T *__restrict__ sinT, T *out,
                  int64_t vectors, int64_t seq, int64_t dim, int64_t heads) {
  constexpr int V = 16 / sizeof(T);
  const int64_t half = dim / 2, perRow = half / V;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < vectors;
       q += int64_t(gridDim.x) * blockDim.x) {
    // Rows in the order of the result, so that a warp's stores are
    // contiguous (scattered loads cost far less than scattered stores).
    const int64_t row = q / perRow, i = (q - row * perRow) * V;
    int64_t s = row % seq;
    int64_t inBase = row * dim, outBase = row * dim;
    if (TRANSPOSE == 1) { // row counts [.., H, S, D]; x is [.., S, H, D]
      const int64_t h = (row / seq) % heads, outer = row / (seq * heads);
      inBase = ((outer * seq + s) * heads + h) * dim;
    } else if (TRANSPOSE == 2) { // row counts [.., S, H, D]; x is [.., H, S, D]
      const int64_t h = row % heads, outer = row / (seq * heads);
      s = (row / heads) % seq;
      inBase = ((outer * heads + h) * seq + s) * dim;
    }
    const int64_t tableBase = s * dim;
    using P = Pack16<T>;
    auto load = [](const T *p) { return *reinterpret_cast<const P *>(p); };
    const P a = load(x + inBase + i), b = load(x + inBase + i + half);
    const P c0 = load(cosT + tableBase + i), s0 = load(sinT + tableBase + i);
    const P c1 = load(cosT + tableBase + i + half), s1 = load(sinT + tableBase + i + half);
    P lo, hi;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float av = toF(a.v[k]), bv = toF(b.v[k]);
      lo.v[k] = fromF<T>(av * toF(c0.v[k]) - bv * toF(s0.v[k]));
      hi.v[k] = fromF<T>(bv * toF(c1.v[k]) + av * toF(s1.v[k]));
    }
    *reinterpret_cast<P *>(out + outBase + i) = lo;
    *reinterpret_cast<P *>(out + outBase + i + half) = hi;
  }
}

//===----------------------------------------------------------------------===//
// Attention
//
// bf16/f16 with head dims 64 or 128 (query/key and value alike) take the
// tensor-core kernels of FlashAttention.cu; the kernels here handle f32 and
// every other head dim.
//
// Flash-style, SIMT f32 (no tensor cores). 256 threads per block as a 16 x 16
// grid: thread (tr, tc) = (tid / 16, tid % 16). A score tile's rows are
// tr + 16 i, its columns tc + 16 j, so the 16 threads that share rows are one
// half warp and row reductions are half-warp shuffles.
//
// Tiles are staged in shared memory as f32, rows padded: a matrix with `cols`
// columns is stored with colsPad = roundup(cols, 64) columns (zero-filled past
// cols) and a row stride of colsPad + 4 floats (stride / 4 odd: the float4
// reads of 8 consecutive rows hit distinct banks).
//
// Forward: a block owns (batch, head, 64 queries); keys and values stream
// through shared memory 32 at a time; running max and sum per row in f32
// (log2 domain); the output accumulates in registers (each thread: 4 rows x
// 4 * NC columns, NC = roundup(max(D, Dv), 64) / 64).
//
// Backward: the forward kernel in "statistics" mode stores, per query row,
// the logsumexp (log2 domain) and delta = dO . O into a workspace. Then one
// kernel computes dq per query tile (streaming keys), another dk and dv per
// key tile (streaming the query tiles of every query head that shares the KV
// head, in a fixed order): no atomics, deterministic.
//===----------------------------------------------------------------------===//

constexpr int kAttnThreads = 256;
constexpr int kAttnQueries = 64; // query rows per tile (forward, dq, and dk/dv's inner loop)
constexpr int kAttnKeys = 32;    // key rows per tile (forward, dq)
constexpr int kAttnMaxDim = 256;

struct AttnParams {
  const void *q, *k, *v, *dout;
  void *out, *dq, *dk, *dv;
  float *lse;   // [B * Hq * S], log2 domain
  float *delta; // [B * Hq * S]
  float *lseOut; // [B * Hq * S], natural log: the forward's statistics output, or null
  // Where each operand's rows are: head-major or sequence-major per operand
  // (`seq_major`); lse, delta and lseOut are indexed by the head-major row
  // number whatever the operands' layouts.
  AttnRowLayout lq, lk, lv, lo, lg, ldq, ldk, ldv;
  int batch, qHeads, kvHeads, group, seq, kvSeq, headDim, valueDim;
  int qkStride, vStride;   // shared-memory row strides (floats)
  int qkPad, vPad;         // columns padded to 64
  int qkDepth, vDepth;     // columns rounded up to 4 (the dot-product depths)
  int causal;
  int window; // a sliding window (with causal): 0 for none
  float scale, scaleLog2;
};

/// Copies rows [0, rows) of a [*, cols] matrix (T, rows `srcStride`
/// elements apart, each row contiguous) into shared memory as f32 with row
/// stride `stride`; rows >= rowsAvail and columns in [cols, colsPad) are
/// zeros.
template <typename T>
__device__ __forceinline__ void loadTile(float *dst, int stride, const T *src,
                                         int64_t srcStride, int rowsAvail, int rows, int cols,
                                         int colsPad) {
  const int total = rows * colsPad;
  for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
    const int r = idx / colsPad, c = idx - r * colsPad;
    float v = 0.f;
    if (r < rowsAvail && c < cols)
      v = toF(src[r * srcStride + c]);
    dst[r * stride + c] = v;
  }
}

/// acc[i][j] = A[tr + 16 i, :depth] . B[tc + 16 j, :depth] (depth % 4 == 0).
template <int RA, int CB>
__device__ __forceinline__ void dotTile(const float *A, int strideA, const float *B,
                                        int strideB, int depth, int tr, int tc,
                                        float (&acc)[RA][CB]) {
#pragma unroll
  for (int i = 0; i < RA; ++i)
#pragma unroll
    for (int j = 0; j < CB; ++j)
      acc[i][j] = 0.f;
#pragma unroll 2
  for (int d = 0; d < depth; d += 4) {
    float4 a[RA], b[CB];
#pragma unroll
    for (int i = 0; i < RA; ++i)
      a[i] = *reinterpret_cast<const float4 *>(A + (tr + 16 * i) * strideA + d);
#pragma unroll
    for (int j = 0; j < CB; ++j)
      b[j] = *reinterpret_cast<const float4 *>(B + (tc + 16 * j) * strideB + d);
#pragma unroll
    for (int i = 0; i < RA; ++i)
#pragma unroll
      for (int j = 0; j < CB; ++j) {
        float s = acc[i][j];
        s = fmaf(a[i].x, b[j].x, s);
        s = fmaf(a[i].y, b[j].y, s);
        s = fmaf(a[i].z, b[j].z, s);
        s = fmaf(a[i].w, b[j].w, s);
        acc[i][j] = s;
      }
  }
}

/// acc[i][m][e] += sum_{j < JT} P[tr + 16 i, j] * Bm[j, 64 m + 4 tc + e], for
/// the column blocks m with 64 m < cols.
template <int R, int NC, int JT>
__device__ __forceinline__ void accumTile(const float *P, int strideP, const float *Bm,
                                          int strideB, int cols, int tr, int tc,
                                          float (&acc)[R][NC][4]) {
#pragma unroll 2
  for (int j = 0; j < JT; j += 4) {
    float4 p[R];
#pragma unroll
    for (int i = 0; i < R; ++i)
      p[i] = *reinterpret_cast<const float4 *>(P + (tr + 16 * i) * strideP + j);
#pragma unroll
    for (int m = 0; m < NC; ++m) {
      if (m * 64 >= cols)
        continue;
      const float *col = Bm + j * strideB + m * 64 + tc * 4;
      const float4 b0 = *reinterpret_cast<const float4 *>(col);
      const float4 b1 = *reinterpret_cast<const float4 *>(col + strideB);
      const float4 b2 = *reinterpret_cast<const float4 *>(col + 2 * strideB);
      const float4 b3 = *reinterpret_cast<const float4 *>(col + 3 * strideB);
#pragma unroll
      for (int i = 0; i < R; ++i) {
        acc[i][m][0] = fmaf(p[i].w, b3.x, fmaf(p[i].z, b2.x, fmaf(p[i].y, b1.x, fmaf(p[i].x, b0.x, acc[i][m][0]))));
        acc[i][m][1] = fmaf(p[i].w, b3.y, fmaf(p[i].z, b2.y, fmaf(p[i].y, b1.y, fmaf(p[i].x, b0.y, acc[i][m][1]))));
        acc[i][m][2] = fmaf(p[i].w, b3.z, fmaf(p[i].z, b2.z, fmaf(p[i].y, b1.z, fmaf(p[i].x, b0.z, acc[i][m][2]))));
        acc[i][m][3] = fmaf(p[i].w, b3.w, fmaf(p[i].z, b2.w, fmaf(p[i].y, b1.w, fmaf(p[i].x, b0.w, acc[i][m][3]))));
      }
    }
  }
}

/// Shared-memory floats of each attention kernel (the host sizes the launch
/// with these).
inline int64_t attnForwardSmem(int qkStride, int vStride) {
  return int64_t(kAttnQueries) * qkStride + int64_t(kAttnKeys) * qkStride +
         int64_t(kAttnKeys) * vStride + int64_t(kAttnQueries) * (kAttnKeys + 16);
}
inline int64_t attnGradQSmem(int qkStride, int vStride) {
  return int64_t(kAttnQueries) * (qkStride + vStride) + int64_t(kAttnKeys) * (qkStride + vStride) +
         int64_t(kAttnQueries) * (kAttnKeys + 16);
}
inline int64_t attnGradKVSmem(int keys, int qkStride, int vStride) {
  return int64_t(keys) * (qkStride + vStride) + int64_t(kAttnQueries) * (qkStride + vStride) +
         2 * int64_t(keys) * (kAttnQueries + 16) + 2 * int64_t(kAttnQueries);
}

/// The natural logsumexp of a row from its running max `m` (log2 domain,
/// scores times scale * log2(e)) and sum `l` of exp2(s - m): (m + log2 l) ln 2,
/// -inf for a row that sees no key. What nn.attention_with_stats returns.
__device__ __forceinline__ float lseFromLog2(float m, float l) {
  return l > 0.f ? (m + log2f(l)) * 0.6931471805599453f : -INFINITY;
}

/// The backward's row statistics from a forward's saved ones, one warp a row:
/// lse2 = lse log2(e) (the kernels' log2 domain; 0 for a row with no key, as
/// the statistics pass writes) and delta = dO . O. Rows are counted
/// head-major ((b * heads + h) * seq + s, as lse); out and dout are read
/// through their layouts.
template <typename T>
__global__ void __launch_bounds__(256)
    attentionSavedStatsKernel(const T *__restrict__ out, AttnRowLayout outLayout,
                              const T *__restrict__ dout, AttnRowLayout doutLayout,
                              const float *__restrict__ lse, float *__restrict__ lse2,
                              float *__restrict__ delta, int64_t rows, int heads, int seq,
                              int dv) {
  const int lane = threadIdx.x & 31;
  const int64_t warpsPerGrid = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < rows;
       row += warpsPerGrid) {
    const int64_t s = row % seq, bh = row / seq, h = bh % heads, b = bh / heads;
    const T *o = out + outLayout.at(b, h, s), *d = dout + doutLayout.at(b, h, s);
    float dot = 0.f;
    for (int c = lane; c < dv; c += 32)
      dot = fmaf(toF(d[c]), toF(o[c]), dot);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      dot += __shfl_xor_sync(0xffffffffu, dot, off);
    if (lane == 0) {
      const float l = lse[row];
      lse2[row] = l == -INFINITY ? 0.f : l * 1.4426950408889634f;
      delta[row] = dot;
    }
  }
}

/// Whether query `row` sees `key`: causal masks are aligned to the end
/// (query i sees keys j <= i + kvSeq - seq), and a sliding window also
/// hides keys j <= i + kvSeq - seq - window, as in the CPU reference.
__device__ __forceinline__ bool keyVisible(int key, int row, int kvSeq, int seq, int causal,
                                           int window) {
  const int last = row + (kvSeq - seq);
  return key < kvSeq && (!causal || (key <= last && (window <= 0 || key > last - window)));
}

/// The first key tile (of `bk` keys) that query rows from `q0` on can
/// see: 0 without a sliding window.
__device__ __forceinline__ int firstKeyTile(const AttnParams &p, int q0, int bk) {
  if (!p.causal || p.window <= 0)
    return 0;
  return max(0, q0 + (p.kvSeq - p.seq) - p.window + 1) / bk * bk;
}

/// STATS = false: out = softmax(scale q k^T) v. STATS = true: nothing is
/// written to out; lse (log2 domain) and delta = dO . O go to the workspace.
template <typename T, int NC, bool STATS>
__global__ void __launch_bounds__(kAttnThreads, 1) attentionForwardKernel(AttnParams p) {
  constexpr int BQ = kAttnQueries, BK = kAttnKeys, R = BQ / 16, CB = BK / 16;
  constexpr int pStride = BK + 16;
  extern __shared__ float4 smemRaw[];
  float *Qs = reinterpret_cast<float *>(smemRaw);
  float *Ks = Qs + BQ * p.qkStride;
  float *Vs = Ks + BK * p.qkStride;
  float *Ps = Vs + BK * p.vStride;

  const int qTiles = (p.seq + BQ - 1) / BQ;
  int64_t blk = blockIdx.x;
  // Late query tiles (the most keys under a causal mask) start first.
  const int tile = qTiles - 1 - int(blk % qTiles);
  blk /= qTiles;
  const int head = int(blk % p.qHeads);
  const int b = int(blk / p.qHeads);
  const int kvHead = head / p.group;
  const int q0 = tile * BQ;
  const int64_t qRowBase = (int64_t(b) * p.qHeads + head) * p.seq; // lse, delta
  const int D = p.headDim, Dv = p.valueDim;
  const T *qg = static_cast<const T *>(p.q) + p.lq.at(b, head, q0);
  const T *kg = static_cast<const T *>(p.k) + p.lk.at(b, kvHead, 0);
  const T *vg = static_cast<const T *>(p.v) + p.lv.at(b, kvHead, 0);

  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  loadTile(Qs, p.qkStride, qg, p.lq.row, p.seq - q0, BQ, D, p.qkPad);

  int kvEnd = p.kvSeq;
  if (p.causal)
    kvEnd = max(0, min(p.kvSeq, q0 + BQ + (p.kvSeq - p.seq)));
  const int kvStart = firstKeyTile(p, q0, BK);

  float m[R], l[R], acc[R][NC][4];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[i][c][e] = 0.f;
  }

  for (int k0 = kvStart; k0 < kvEnd; k0 += BK) {
    __syncthreads(); // the previous tile's readers are done
    loadTile(Ks, p.qkStride, kg + k0 * p.lk.row, p.lk.row, p.kvSeq - k0, BK, D, p.qkPad);
    loadTile(Vs, p.vStride, vg + k0 * p.lv.row, p.lv.row, p.kvSeq - k0, BK, Dv, p.vPad);
    __syncthreads();
    float s[R][CB];
    dotTile<R, CB>(Qs, p.qkStride, Ks, p.qkStride, p.qkDepth, tr, tc, s);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int row = q0 + tr + 16 * i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < CB; ++j) {
        const int key = k0 + tc + 16 * j;
        s[i][j] = keyVisible(key, row, p.kvSeq, p.seq, p.causal, p.window) ? s[i][j] * p.scaleLog2
                                                                 : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      mx = halfWarpReduce(mx, MaxOp{});
      const float mNew = fmaxf(m[i], mx);
      const float mUse = mNew == -INFINITY ? 0.f : mNew;
      const float alpha = exp2f(m[i] - mUse);
      m[i] = mNew;
      float rowSum = 0.f;
#pragma unroll
      for (int j = 0; j < CB; ++j) {
        const float pv = exp2f(s[i][j] - mUse);
        rowSum += pv;
        Ps[(tr + 16 * i) * pStride + tc + 16 * j] = pv;
      }
      rowSum = halfWarpReduce(rowSum, SumOp{});
      l[i] = l[i] * alpha + rowSum;
#pragma unroll
      for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc[i][c][e] *= alpha;
    }
    __syncthreads();
    accumTile<R, NC, BK>(Ps, pStride, Vs, p.vStride, Dv, tr, tc, acc);
  }

#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int row = q0 + tr + 16 * i;
    const bool inRange = row < p.seq;
    // A query that sees no key (causal, kvSeq < seq) outputs zeros.
    const float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
    if constexpr (!STATS) {
      if (inRange) {
        T *o = static_cast<T *>(p.out) + p.lo.at(b, head, row);
#pragma unroll
        for (int c = 0; c < NC; ++c)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = c * 64 + tc * 4 + e;
            if (col < Dv)
              o[col] = fromF<T>(acc[i][c][e] * inv);
          }
        // m and l are the half warp's (reduced): one lane writes.
        if (p.lseOut && tc == 0)
          p.lseOut[qRowBase + row] = lseFromLog2(m[i], l[i]);
      }
    } else {
      float dot = 0.f;
      if (inRange) {
        const T *d = static_cast<const T *>(p.dout) + p.lg.at(b, head, row);
#pragma unroll
        for (int c = 0; c < NC; ++c)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = c * 64 + tc * 4 + e;
            if (col < Dv)
              dot += toF(d[col]) * (acc[i][c][e] * inv);
          }
      }
      dot = halfWarpReduce(dot, SumOp{});
      if (inRange && tc == 0) {
        p.lse[qRowBase + row] = l[i] > 0.f ? m[i] + log2f(l[i]) : 0.f;
        p.delta[qRowBase + row] = dot;
      }
    }
  }
}

/// dq = scale sum_j dS_ij k_j with dS_ij = P_ij (dO_i . v_j - delta_i), per
/// query tile, keys streamed.
template <typename T, int NC>
__global__ void __launch_bounds__(kAttnThreads, 1) attentionGradQKernel(AttnParams p) {
  constexpr int BQ = kAttnQueries, BK = kAttnKeys, R = BQ / 16, CB = BK / 16;
  constexpr int pStride = BK + 16;
  extern __shared__ float4 smemRaw[];
  float *Qs = reinterpret_cast<float *>(smemRaw);
  float *dOs = Qs + BQ * p.qkStride;
  float *Ks = dOs + BQ * p.vStride;
  float *Vs = Ks + BK * p.qkStride;
  float *dSs = Vs + BK * p.vStride;

  const int qTiles = (p.seq + BQ - 1) / BQ;
  int64_t blk = blockIdx.x;
  const int tile = qTiles - 1 - int(blk % qTiles);
  blk /= qTiles;
  const int head = int(blk % p.qHeads);
  const int b = int(blk / p.qHeads);
  const int kvHead = head / p.group;
  const int q0 = tile * BQ;
  const int64_t qRowBase = (int64_t(b) * p.qHeads + head) * p.seq; // lse, delta
  const int D = p.headDim, Dv = p.valueDim;
  const T *kg = static_cast<const T *>(p.k) + p.lk.at(b, kvHead, 0);
  const T *vg = static_cast<const T *>(p.v) + p.lv.at(b, kvHead, 0);

  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  loadTile(Qs, p.qkStride, static_cast<const T *>(p.q) + p.lq.at(b, head, q0), p.lq.row,
           p.seq - q0, BQ, D, p.qkPad);
  loadTile(dOs, p.vStride, static_cast<const T *>(p.dout) + p.lg.at(b, head, q0), p.lg.row,
           p.seq - q0, BQ, Dv, p.vPad);

  float lse[R], delta[R], acc[R][NC][4];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int row = q0 + tr + 16 * i;
    lse[i] = row < p.seq ? p.lse[qRowBase + row] : 0.f;
    delta[i] = row < p.seq ? p.delta[qRowBase + row] : 0.f;
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[i][c][e] = 0.f;
  }

  int kvEnd = p.kvSeq;
  if (p.causal)
    kvEnd = max(0, min(p.kvSeq, q0 + BQ + (p.kvSeq - p.seq)));

  for (int k0 = firstKeyTile(p, q0, BK); k0 < kvEnd; k0 += BK) {
    __syncthreads();
    loadTile(Ks, p.qkStride, kg + k0 * p.lk.row, p.lk.row, p.kvSeq - k0, BK, D, p.qkPad);
    loadTile(Vs, p.vStride, vg + k0 * p.lv.row, p.lv.row, p.kvSeq - k0, BK, Dv, p.vPad);
    __syncthreads();
    float s[R][CB], dp[R][CB];
    dotTile<R, CB>(Qs, p.qkStride, Ks, p.qkStride, p.qkDepth, tr, tc, s);
    dotTile<R, CB>(dOs, p.vStride, Vs, p.vStride, p.vDepth, tr, tc, dp);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int row = q0 + tr + 16 * i;
#pragma unroll
      for (int j = 0; j < CB; ++j) {
        const int key = k0 + tc + 16 * j;
        float ds = 0.f;
        if (row < p.seq && keyVisible(key, row, p.kvSeq, p.seq, p.causal, p.window)) {
          const float prob = exp2f(s[i][j] * p.scaleLog2 - lse[i]);
          ds = prob * (dp[i][j] - delta[i]);
        }
        dSs[(tr + 16 * i) * pStride + tc + 16 * j] = ds;
      }
    }
    __syncthreads();
    accumTile<R, NC, BK>(dSs, pStride, Ks, p.qkStride, D, tr, tc, acc);
  }

#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int row = q0 + tr + 16 * i;
    if (row >= p.seq)
      continue;
    T *o = static_cast<T *>(p.dq) + p.ldq.at(b, head, row);
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = c * 64 + tc * 4 + e;
        if (col < D)
          o[col] = fromF<T>(acc[i][c][e] * p.scale);
      }
  }
}

/// dk_j = scale sum_i dS_ij q_i and dv_j = sum_i P_ij dO_i per key tile of
/// BKEY keys, summed over the query heads sharing the KV head (in head
/// order) and their query tiles (in row order).
template <typename T, int NC, int BKEY>
__global__ void __launch_bounds__(kAttnThreads, 1) attentionGradKVKernel(AttnParams p) {
  constexpr int BQ = kAttnQueries, R = BKEY / 16, CQ = BQ / 16;
  constexpr int pStride = BQ + 16;
  extern __shared__ float4 smemRaw[];
  float *Ks = reinterpret_cast<float *>(smemRaw);
  float *Vs = Ks + BKEY * p.qkStride;
  float *Qs = Vs + BKEY * p.vStride;
  float *dOs = Qs + BQ * p.qkStride;
  float *PTs = dOs + BQ * p.vStride;
  float *dSTs = PTs + BKEY * pStride;
  float *lseS = dSTs + BKEY * pStride;
  float *deltaS = lseS + BQ;

  const int kTiles = (p.kvSeq + BKEY - 1) / BKEY;
  int64_t blk = blockIdx.x;
  const int tile = int(blk % kTiles);
  blk /= kTiles;
  const int kvHead = int(blk % p.kvHeads);
  const int b = int(blk / p.kvHeads);
  const int k0 = tile * BKEY;
  const int D = p.headDim, Dv = p.valueDim;
  const int off = p.kvSeq - p.seq;

  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  loadTile(Ks, p.qkStride, static_cast<const T *>(p.k) + p.lk.at(b, kvHead, k0), p.lk.row,
           p.kvSeq - k0, BKEY, D, p.qkPad);
  loadTile(Vs, p.vStride, static_cast<const T *>(p.v) + p.lv.at(b, kvHead, k0), p.lv.row,
           p.kvSeq - k0, BKEY, Dv, p.vPad);

  float dK[R][NC][4], dV[R][NC][4];
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        dK[i][c][e] = 0.f;
        dV[i][c][e] = 0.f;
      }

  // Causal: key j is seen by queries i >= j - off; skip the tiles before.
  int qStart = 0;
  if (p.causal)
    qStart = (max(0, k0 - off) / BQ) * BQ;
  // A sliding window: key j is seen by queries i < j - off + window.
  const int qEnd = p.causal && p.window > 0 ? min(p.seq, k0 + BKEY - 1 - off + p.window) : p.seq;

  for (int g = 0; g < p.group; ++g) {
    const int head = kvHead * p.group + g;
    const int64_t qRowBase = (int64_t(b) * p.qHeads + head) * p.seq; // lse, delta
    for (int q0 = qStart; q0 < qEnd; q0 += BQ) {
      __syncthreads(); // the previous tile's readers are done
      loadTile(Qs, p.qkStride, static_cast<const T *>(p.q) + p.lq.at(b, head, q0), p.lq.row,
               p.seq - q0, BQ, D, p.qkPad);
      loadTile(dOs, p.vStride, static_cast<const T *>(p.dout) + p.lg.at(b, head, q0), p.lg.row,
               p.seq - q0, BQ, Dv, p.vPad);
      if (tid < BQ) {
        const bool inRange = q0 + tid < p.seq;
        lseS[tid] = inRange ? p.lse[qRowBase + q0 + tid] : 0.f;
        deltaS[tid] = inRange ? p.delta[qRowBase + q0 + tid] : 0.f;
      }
      __syncthreads();
      float st[R][CQ], dpt[R][CQ];
      dotTile<R, CQ>(Ks, p.qkStride, Qs, p.qkStride, p.qkDepth, tr, tc, st);
      dotTile<R, CQ>(Vs, p.vStride, dOs, p.vStride, p.vDepth, tr, tc, dpt);
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const int key = k0 + tr + 16 * i;
#pragma unroll
        for (int j = 0; j < CQ; ++j) {
          const int qi = tc + 16 * j;
          const int row = q0 + qi;
          float prob = 0.f, ds = 0.f;
          if (row < p.seq && keyVisible(key, row, p.kvSeq, p.seq, p.causal, p.window)) {
            prob = exp2f(st[i][j] * p.scaleLog2 - lseS[qi]);
            ds = prob * (dpt[i][j] - deltaS[qi]);
          }
          PTs[(tr + 16 * i) * pStride + qi] = prob;
          dSTs[(tr + 16 * i) * pStride + qi] = ds;
        }
      }
      __syncthreads();
      accumTile<R, NC, BQ>(PTs, pStride, dOs, p.vStride, Dv, tr, tc, dV);
      accumTile<R, NC, BQ>(dSTs, pStride, Qs, p.qkStride, D, tr, tc, dK);
    }
  }

#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int key = k0 + tr + 16 * i;
    if (key >= p.kvSeq)
      continue;
    T *dk = static_cast<T *>(p.dk) + p.ldk.at(b, kvHead, key);
    T *dv = static_cast<T *>(p.dv) + p.ldv.at(b, kvHead, key);
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = c * 64 + tc * 4 + e;
        if (col < D)
          dk[col] = fromF<T>(dK[i][c][e] * p.scale);
        if (col < Dv)
          dv[col] = fromF<T>(dV[i][c][e]);
      }
  }
}

llvm::Error launchRope(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 3, 3, 1, 1));
  const Tensor &x = call.inputs[0], &cosT = call.inputs[1], &sinT = call.inputs[2];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::RopePlan plan,
                        cpu::detail::checkRope(x, cosT, sinT, out, call.attrs));
  const bool interleaved = plan.interleaved;
  const int64_t seq = plan.seq, dim = plan.dim;
  return dispatchType(x.dtype, "input", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const int64_t pairs = seq * dim == 0 ? 0 : x.numElements() / 2;
    if (pairs == 0)
      return llvm::Error::success();
    const unsigned blocks = gridFor(pairs, call.ctx);
    const T *xs = static_cast<const T *>(x.data);
    const T *cs = static_cast<const T *>(cosT.data);
    const T *ss = static_cast<const T *>(sinT.data);
    T *ys = static_cast<T *>(out.data);
    const int64_t heads = plan.heads;
    constexpr int V = 16 / sizeof(T);
    if (!interleaved && (dim / 2) % V == 0 && isAligned(xs, 16) && isAligned(cs, 16) &&
        isAligned(ss, 16) && isAligned(ys, 16)) {
      const int64_t vectors = pairs / V;
      const unsigned vecBlocks = gridFor(vectors, call.ctx);
      if (plan.transpose == 1)
        ropeVecKernel<T, 1><<<vecBlocks, 256, 0, call.ctx.stream>>>(xs, cs, ss, ys, vectors, seq,
                                                                    dim, heads);
      else if (plan.transpose == 2)
        ropeVecKernel<T, 2><<<vecBlocks, 256, 0, call.ctx.stream>>>(xs, cs, ss, ys, vectors, seq,
                                                                    dim, heads);
      else
        ropeVecKernel<T, 0><<<vecBlocks, 256, 0, call.ctx.stream>>>(xs, cs, ss, ys, vectors, seq,
                                                                    dim, heads);
      return llvm::Error::success();
    }
    auto launch = [&](auto interleavedTag, auto transposeTag) {
      ropeKernel<T, decltype(interleavedTag)::value, decltype(transposeTag)::value>
          <<<blocks, 256, 0, call.ctx.stream>>>(xs, cs, ss, ys, pairs, seq, dim, heads);
    };
    auto withTranspose = [&](auto interleavedTag) {
      if (plan.transpose == 1)
        launch(interleavedTag, std::integral_constant<int, 1>());
      else if (plan.transpose == 2)
        launch(interleavedTag, std::integral_constant<int, 2>());
      else
        launch(interleavedTag, std::integral_constant<int, 0>());
    };
    if (interleaved)
      withTranspose(std::true_type());
    else
      withTranspose(std::false_type());
    return llvm::Error::success();
  });
}

// --- attention -----------------------------------------------------------------

using AttnShape = cpu::detail::AttentionShape;
using AttnRole = cpu::detail::AttentionRole;

/// Where the rows of the operand of role `r` are (the shared checks' layout,
/// which `seq_major` chose), for the kernels.
AttnRowLayout rowLayout(const AttnShape &s, AttnRole r) {
  const cpu::detail::AttentionLayout l = s.layout(r);
  return {l.batchStride, l.headStride, l.rowStride};
}
CudnnAttnLayout cudnnLayout(const AttnShape &s, AttnRole r) {
  const cpu::detail::AttentionLayout l = s.layout(r);
  return {l.batchStride, l.headStride, l.rowStride};
}

/// What the SIMT fallback kernels can take, beyond the shared checks.
llvm::Error checkSimtLimits(const AttnShape &s) {
  if (s.headDim > kAttnMaxDim || s.valueDim > kAttnMaxDim)
    return kernelError("head dims " + llvm::Twine(s.headDim) + " (query/key) and " +
                       llvm::Twine(s.valueDim) + " (value) must be at most " +
                       llvm::Twine(kAttnMaxDim) + " for the CUDA kernel");
  LOOM_RETURN_IF_ERROR(checkFitsInt(s.batch, "batch"));
  LOOM_RETURN_IF_ERROR(checkFitsInt(s.qHeads, "query heads"));
  LOOM_RETURN_IF_ERROR(checkFitsInt(s.seq + kAttnQueries, "query length"));
  LOOM_RETURN_IF_ERROR(checkFitsInt(s.kvSeq + kAttnQueries, "key length"));
  return llvm::Error::success();
}

AttnParams makeAttnParams(const AttnShape &s) {
  AttnParams p{};
  p.batch = int(s.batch);
  p.qHeads = int(s.qHeads);
  p.kvHeads = int(s.kvHeads);
  p.group = int(s.qHeads / s.kvHeads);
  p.seq = int(s.seq);
  p.kvSeq = int(s.kvSeq);
  p.headDim = int(s.headDim);
  p.valueDim = int(s.valueDim);
  p.qkPad = (p.headDim + 63) / 64 * 64;
  p.vPad = (p.valueDim + 63) / 64 * 64;
  p.qkStride = p.qkPad + 4; // qkPad / 4 is even: + 4 makes stride / 4 odd
  p.vStride = p.vPad + 4;
  p.qkDepth = (p.headDim + 3) / 4 * 4;
  p.vDepth = (p.valueDim + 3) / 4 * 4;
  p.causal = s.causal ? 1 : 0;
  p.window = int(s.window);
  p.scale = static_cast<float>(s.scale);
  p.scaleLog2 = static_cast<float>(s.scale * 1.4426950408889634);
  p.lq = rowLayout(s, AttnRole::Q);
  p.lk = rowLayout(s, AttnRole::K);
  p.lv = rowLayout(s, AttnRole::V);
  p.lo = rowLayout(s, AttnRole::Out);
  p.lg = rowLayout(s, AttnRole::Grad);
  p.ldq = rowLayout(s, AttnRole::DQ);
  p.ldk = rowLayout(s, AttnRole::DK);
  p.ldv = rowLayout(s, AttnRole::DV);
  return p;
}

/// Sets a kernel's dynamic shared memory (floats) and checks it fits.
template <typename Kernel>
llvm::Error prepareSmem(Kernel kernel, int64_t floats, size_t &bytes) {
  bytes = static_cast<size_t>(floats) * sizeof(float);
  int device = 0, limit = 0;
  LOOM_RETURN_IF_ERROR(cudaError(cudaGetDevice(&device), "cudaGetDevice"));
  LOOM_RETURN_IF_ERROR(cudaError(
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
      "cudaDeviceGetAttribute"));
  if (bytes > static_cast<size_t>(limit))
    return kernelError("needs " + llvm::Twine(bytes) + " bytes of shared memory, the device has " +
                       llvm::Twine(limit));
  return cudaError(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)),
                   "cudaFuncSetAttribute");
}

/// NC (64-column blocks of the register accumulators) for head dims up to 256.
template <typename Fn> llvm::Error withAttnColumns(int64_t maxDim, Fn &&fn) {
  if (maxDim <= 64)
    return fn(std::integral_constant<int, 1>{});
  if (maxDim <= 128)
    return fn(std::integral_constant<int, 2>{});
  return fn(std::integral_constant<int, 4>{});
}

template <typename T, int NC, bool STATS>
llvm::Error launchAttentionForward(const AttnParams &p, cudaStream_t stream) {
  const int64_t blocks = int64_t((p.seq + kAttnQueries - 1) / kAttnQueries) * p.qHeads * p.batch;
  if (blocks == 0)
    return llvm::Error::success();
  if (blocks > INT_MAX)
    return kernelError("too many query tiles for one launch");
  auto kernel = attentionForwardKernel<T, NC, STATS>;
  size_t bytes;
  LOOM_RETURN_IF_ERROR(prepareSmem(kernel, attnForwardSmem(p.qkStride, p.vStride), bytes));
  kernel<<<unsigned(blocks), kAttnThreads, bytes, stream>>>(p);
  return cudaError(cudaGetLastError(), "attention forward launch");
}

FlashAttnArgs makeFlashArgs(const AttnShape &s, const Tensor &q, const Tensor &k,
                            const Tensor &v) {
  FlashAttnArgs a;
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  a.batch = int(s.batch);
  a.qHeads = int(s.qHeads);
  a.kvHeads = int(s.kvHeads);
  a.seq = int(s.seq);
  a.kvSeq = int(s.kvSeq);
  a.headDim = int(s.headDim);
  a.causal = s.causal;
  a.window = int(s.window);
  a.scale = static_cast<float>(s.scale);
  a.qLayout = rowLayout(s, AttnRole::Q);
  a.kLayout = rowLayout(s, AttnRole::K);
  a.vLayout = rowLayout(s, AttnRole::V);
  a.outLayout = rowLayout(s, AttnRole::Out);
  a.doutLayout = rowLayout(s, AttnRole::Grad);
  a.dqLayout = rowLayout(s, AttnRole::DQ);
  a.dkLayout = rowLayout(s, AttnRole::DK);
  a.dvLayout = rowLayout(s, AttnRole::DV);
  return a;
}

/// cuDNN's fused attention (CudnnAttention.cpp) for bf16/f16; it declines
/// (false) when it cannot or should not run, and Loom's kernels run.
CudnnAttnArgs makeCudnnArgs(const AttnShape &s, const Tensor &q, const Tensor &k,
                            const Tensor &v) {
  CudnnAttnArgs a;
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  a.batch = s.batch;
  a.qHeads = s.qHeads;
  a.kvHeads = s.kvHeads;
  a.seq = s.seq;
  a.kvSeq = s.kvSeq;
  a.headDim = s.headDim;
  a.valueDim = s.valueDim;
  a.causal = s.causal;
  a.window = s.window;
  a.scale = s.scale;
  a.qLayout = cudnnLayout(s, AttnRole::Q);
  a.kLayout = cudnnLayout(s, AttnRole::K);
  a.vLayout = cudnnLayout(s, AttnRole::V);
  a.outLayout = cudnnLayout(s, AttnRole::Out);
  a.doutLayout = cudnnLayout(s, AttnRole::Grad);
  a.dqLayout = cudnnLayout(s, AttnRole::DQ);
  a.dkLayout = cudnnLayout(s, AttnRole::DK);
  a.dvLayout = cudnnLayout(s, AttnRole::DV);
  return a;
}

/// out = softmax(scale q k^T) v, and each query row's natural logsumexp into
/// `lse` where given (nn.attention_with_stats): cuDNN where it runs the
/// problem, else the tensor-core kernel, else the SIMT one; all three write
/// the same statistics.
llvm::Error attentionForward(const AttnShape &s, const Tensor &q, const Tensor &k,
                             const Tensor &v, const Tensor &out, float *lse,
                             cudaStream_t stream) {
  {
    CudnnAttnArgs c = makeCudnnArgs(s, q, k, v);
    c.out = out.data;
    c.lse = lse;
    LOOM_ASSIGN_OR_RETURN(bool ranOnCudnn, cudnnAttentionForward(q.dtype, c, stream));
    if (ranOnCudnn)
      return llvm::Error::success();
  }
  LOOM_RETURN_IF_ERROR(checkSimtLimits(s));
  if (flashAttentionApplies(q.dtype, s.headDim, s.valueDim, s.seq, s.kvSeq,
                            {q.data, k.data, v.data, out.data}) &&
      s.batch * s.qHeads > 0) {
    FlashAttnArgs a = makeFlashArgs(s, q, k, v);
    a.out = out.data;
    a.lseOut = lse;
    return flashAttentionForward(q.dtype, a, stream);
  }
  AttnParams p = makeAttnParams(s);
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.out = out.data;
  p.lseOut = lse;
  return dispatchType(q.dtype, "query", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    return withAttnColumns(std::max(s.headDim, s.valueDim), [&](auto nc) -> llvm::Error {
      return launchAttentionForward<T, decltype(nc)::value, false>(p, stream);
    });
  });
}

llvm::Error launchAttention(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 3, 3, 1, 1));
  const Tensor &q = call.inputs[0], &k = call.inputs[1], &v = call.inputs[2];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(AttnShape s, cpu::detail::checkAttention(q, k, v, out, call.attrs));
  return attentionForward(s, q, k, v, out, nullptr, call.ctx.stream);
}

llvm::Error launchAttentionWithStats(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 3, 3, 2, 2));
  LOOM_ASSIGN_OR_RETURN(AttnShape s, cpu::detail::checkAttentionWithStats(
                                         call.inputs, call.outputs, call.attrs));
  return attentionForward(s, call.inputs[0], call.inputs[1], call.inputs[2], call.outputs[0],
                          static_cast<float *>(call.outputs[1].data), call.ctx.stream);
}

template <typename T, int NC>
llvm::Error launchAttentionBackward(const AttnParams &p, cudaStream_t stream) {
  const int64_t qBlocks = int64_t((p.seq + kAttnQueries - 1) / kAttnQueries) * p.qHeads * p.batch;
  if (qBlocks > INT_MAX)
    return kernelError("too many query tiles for one launch");
  if (qBlocks > 0) {
    auto kernel = attentionGradQKernel<T, NC>;
    size_t bytes;
    LOOM_RETURN_IF_ERROR(prepareSmem(kernel, attnGradQSmem(p.qkStride, p.vStride), bytes));
    kernel<<<unsigned(qBlocks), kAttnThreads, bytes, stream>>>(p);
    LOOM_RETURN_IF_ERROR(cudaError(cudaGetLastError(), "attention dq launch"));
  }
  constexpr int kKeys = NC == 4 ? 32 : 64;
  const int64_t kvBlocks = int64_t((p.kvSeq + kKeys - 1) / kKeys) * p.kvHeads * p.batch;
  if (kvBlocks > INT_MAX)
    return kernelError("too many key tiles for one launch");
  if (kvBlocks > 0) {
    auto kernel = attentionGradKVKernel<T, NC, kKeys>;
    size_t bytes;
    LOOM_RETURN_IF_ERROR(
        prepareSmem(kernel, attnGradKVSmem(kKeys, p.qkStride, p.vStride), bytes));
    kernel<<<unsigned(kvBlocks), kAttnThreads, bytes, stream>>>(p);
    LOOM_RETURN_IF_ERROR(cudaError(cudaGetLastError(), "attention dk/dv launch"));
  }
  return llvm::Error::success();
}

/// dq, dk, dv. With `saved` (the forward's out and natural-log lse,
/// nn.attention_grad_with_stats) no forward runs again: cuDNN's backward
/// graph reads them as they are, and Loom's kernels read lse in their log2
/// domain and delta = dO . out, made from them by one row kernel. Without,
/// the forward is recomputed (cuDNN's forward graph, or the kernels'
/// statistics pass).
struct SavedForward {
  const Tensor *out = nullptr, *lse = nullptr;
};
llvm::Error attentionBackward(const AttnShape &s, const Tensor &q, const Tensor &k,
                              const Tensor &v, const Tensor &dOut, const Tensor &dq,
                              const Tensor &dk, const Tensor &dv, SavedForward saved,
                              cudaStream_t stream) {
  {
    CudnnAttnArgs c = makeCudnnArgs(s, q, k, v);
    c.dout = dOut.data;
    c.dq = dq.data;
    c.dk = dk.data;
    c.dv = dv.data;
    if (saved.out) {
      c.out = saved.out->data;
      c.lse = static_cast<float *>(saved.lse->data);
    }
    LOOM_ASSIGN_OR_RETURN(bool ranOnCudnn, cudnnAttentionBackward(q.dtype, c, stream));
    if (ranOnCudnn)
      return llvm::Error::success();
  }
  LOOM_RETURN_IF_ERROR(checkSimtLimits(s));
  AttnParams p = makeAttnParams(s);
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.dout = dOut.data;
  p.dq = dq.data;
  p.dk = dk.data;
  p.dv = dv.data;
  return dispatchType(q.dtype, "query", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const int64_t rows = s.batch * s.qHeads * s.seq;
    void *workspace = nullptr;
    if (rows > 0) {
      LOOM_RETURN_IF_ERROR(cudaError(
          cudaMallocAsync(&workspace, 2 * size_t(rows) * sizeof(float), stream),
          "cudaMallocAsync (attention statistics)"));
      p.lse = static_cast<float *>(workspace);
      p.delta = p.lse + rows;
    }
    llvm::Error result = [&]() -> llvm::Error {
      if (rows > 0 && saved.out) {
        const int warpsPerBlock = 256 / 32;
        const int64_t blocks =
            std::min<int64_t>((rows + warpsPerBlock - 1) / warpsPerBlock, 65535);
        attentionSavedStatsKernel<T><<<unsigned(blocks), 256, 0, stream>>>(
            static_cast<const T *>(saved.out->data), p.lo, static_cast<const T *>(dOut.data),
            p.lg, static_cast<const float *>(saved.lse->data), p.lse, p.delta, rows,
            int(s.qHeads), int(s.seq), int(s.valueDim));
        LOOM_RETURN_IF_ERROR(cudaError(cudaGetLastError(), "attention saved statistics launch"));
      }
      if (rows > 0 && flashAttentionApplies(q.dtype, s.headDim, s.valueDim, s.seq, s.kvSeq,
                                            {q.data, k.data, v.data, dOut.data, dq.data,
                                             dk.data, dv.data})) {
        FlashAttnArgs a = makeFlashArgs(s, q, k, v);
        a.dout = dOut.data;
        a.dq = dq.data;
        a.dk = dk.data;
        a.dv = dv.data;
        a.lse = p.lse;
        a.delta = p.delta;
        a.statsReady = saved.out != nullptr;
        return flashAttentionBackward(q.dtype, a, stream);
      }
      return withAttnColumns(std::max(s.headDim, s.valueDim), [&](auto nc) -> llvm::Error {
        constexpr int NC = decltype(nc)::value;
        if (!saved.out) {
          LOOM_RETURN_IF_ERROR((launchAttentionForward<T, NC, true>(p, stream)));
        }
        return launchAttentionBackward<T, NC>(p, stream);
      });
    }();
    if (workspace) {
      llvm::Error freed = cudaError(cudaFreeAsync(workspace, stream), "cudaFreeAsync");
      if (result) {
        llvm::consumeError(std::move(freed));
        return result;
      }
      return freed;
    }
    return result;
  });
}

llvm::Error launchAttentionGrad(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 4, 4, 3, 3));
  LOOM_ASSIGN_OR_RETURN(AttnShape s,
                        cpu::detail::checkAttentionGrad(call.inputs, call.outputs, call.attrs));
  return attentionBackward(s, call.inputs[0], call.inputs[1], call.inputs[2], call.inputs[3],
                           call.outputs[0], call.outputs[1], call.outputs[2], SavedForward{},
                           call.ctx.stream);
}

llvm::Error launchAttentionGradWithStats(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 6, 6, 3, 3));
  LOOM_ASSIGN_OR_RETURN(AttnShape s, cpu::detail::checkAttentionGradWithStats(
                                         call.inputs, call.outputs, call.attrs));
  return attentionBackward(s, call.inputs[0], call.inputs[1], call.inputs[2], call.inputs[5],
                           call.outputs[0], call.outputs[1], call.outputs[2],
                           SavedForward{&call.inputs[3], &call.inputs[4]}, call.ctx.stream);
}

} // namespace

void registerAttentionKernels(KernelRegistry &registry) {
  registry.add(KernelId::Rope, launchRope);
  registry.add(KernelId::Attention, launchAttention);
  registry.add(KernelId::AttentionGrad, launchAttentionGrad);
  registry.add(KernelId::AttentionWithStats, launchAttentionWithStats);
  registry.add(KernelId::AttentionGradWithStats, launchAttentionGradWithStats);
}

} // namespace loom::cuda
