// Tensor-core flash attention for bf16/f16 (head dims 64 and 128): the fast
// path of nn.attention and nn.attention_grad.
//
// mma.sync m16n8k16 (bf16/f16 operands, f32 accumulators) fed by ldmatrix from
// shared memory; tiles are staged with cp.async, double-buffered. Shared
// memory rows are padded by 16 bytes (stride D + 8 elements), so the 8 row
// addresses of each ldmatrix 8x8 matrix fall in distinct banks.
//
// Every block has 4 warps; each warp owns 16 rows of the block's 64-row tile
// (queries in the forward and dq kernels, keys in the dk/dv kernel), so row
// reductions stay inside a quad of lanes and no warp waits for another except
// at the tile barriers.
//
// Forward: a block owns (batch, head, 64 queries) and streams 64-key tiles;
// online softmax in f32 (log2 domain), P rounded to the operand type for the
// P V product, O accumulated in f32 registers; with lseOut it also writes
// each row's natural logsumexp (nn.attention_with_stats). In "statistics"
// mode (the backward's first step, unless the forward's saved statistics
// were turned into lse and delta already) it writes, per query row, lse (log2
// domain) and delta = dO . O instead of O.
//
// Backward, deterministic (no atomics): dq per query tile (keys streamed:
// S = Q K^T, dP = dO V^T, dS = P (dP - delta), dq += dS K), then dk and dv per
// 64-key tile (streaming, in a fixed order, the query tiles of every query
// head that shares the KV head: S^T = K Q^T, dv += P^T dO, dP^T = V dO^T,
// dk += dS^T Q). P and dS are rounded to the operand type before their
// products, as in FlashAttention-2.
//
// Each operand is head-major [B, H, S, D] or sequence-major [B, S, H, D]
// (nn.attention's `seq_major`): only where its rows are in global memory
// differs (AttnRowLayout; cp.async and the stores address each row on its
// own), so the tiles in shared memory and everything after them are the same
// in both layouts.

#include "kernels/cuda/FlashAttention.cuh"

#include "kernels/cpu/KernelSupport.h"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/TensorCore.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cmath>
#include <type_traits>

namespace loom::cuda {
namespace {

constexpr int kFaThreads = 128; // 4 warps
constexpr int kFaRows = 64;     // rows of a block's own tile (16 per warp)
constexpr int kFaCols = 64;     // rows of a streamed tile

struct FaParams {
  const void *q, *k, *v, *dout;
  void *out, *dq, *dk, *dv;
  float *lse, *delta;
  float *lseOut; // the forward's natural-log statistics output, or null
  // Where each operand's rows are (FlashAttnArgs); lse, delta and lseOut
  // are contiguous [B, Hq, S] and indexed by the head-major row number.
  AttnRowLayout lq, lk, lv, lo, lg, ldq, ldk, ldv;
  int qHeads, kvHeads, group, seq, kvSeq, causal;
  int window; // a sliding window (with causal): 0 for none
  float scale, scaleLog2;
};

/// Copies rows [0, ROWS) of a [*, D] matrix at `src` whose rows are
/// `rowStride` elements apart (D head-major, H * D sequence-major) into
/// shared memory (row stride D + 8); rows >= rowsAvail are zero-filled.
template <int ROWS, int D, typename T>
__device__ __forceinline__ void loadTileAsync(T *dst, const T *src, int64_t rowStride,
                                              int rowsAvail, const void *safe) {
  constexpr int kChunks = D / 8; // 16-byte chunks per row
  static_assert(ROWS * kChunks % kFaThreads == 0, "whole passes");
#pragma unroll
  for (int pass = 0; pass < ROWS * kChunks / kFaThreads; ++pass) {
    const int idx = threadIdx.x + pass * kFaThreads;
    const int r = idx / kChunks, c = idx % kChunks;
    const bool ok = r < rowsAvail;
    const void *from = ok ? static_cast<const void *>(src + r * rowStride + c * 8) : safe;
    cpAsync16(smemAddr(dst + r * (D + 8) + c * 8), from, ok);
  }
}

/// A fragments (16 rows x 16 columns at column kk*16) of the warp's 16 rows
/// starting at `rows` (row stride S).
template <int S, typename T>
__device__ __forceinline__ void loadA(uint32_t (&a)[4], const T *rows, int kk, int lane) {
  ldsm4(a, smemAddr(rows + (lane & 15) * S + kk * 16 + ((lane >> 4) << 3)));
}
/// B fragments of two n-tiles (rows n0..n0+15 of a row-major [n][k] matrix,
/// k columns kk*16..kk*16+15): {b[0], b[1]} for rows n0..n0+7, {b[2], b[3]}
/// for n0+8..n0+15.
template <int S, typename T>
__device__ __forceinline__ void loadBRows(uint32_t (&b)[4], const T *m, int n0, int kk,
                                          int lane) {
  ldsm4(b, smemAddr(m + (n0 + (lane & 7) + ((lane >> 4) << 3)) * S + kk * 16 +
                    (((lane >> 3) & 1) << 3)));
}
/// B fragments of two n-tiles from a row-major [k][n] matrix (rows
/// kk*16..kk*16+15, columns n0..n0+15), transposed by ldmatrix.
template <int S, typename T>
__device__ __forceinline__ void loadBCols(uint32_t (&b)[4], const T *m, int n0, int kk,
                                          int lane) {
  ldsm4t(b, smemAddr(m + (kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3)) * S + n0 +
                     ((lane >> 4) << 3)));
}

/// Whether query `row` sees `key`: causal keys j <= row + off, and under a
/// sliding window also j > row + off - window.
__device__ __forceinline__ bool faVisible(int key, int row, int kvSeq, int off, int causal,
                                          int window) {
  return key < kvSeq &&
         (!causal || (key <= row + off && (window <= 0 || key > row + off - window)));
}

/// Whether a tile of queries [q0, q0 + rows) and keys from k0 holds keys
/// that a sliding window hides from some of its queries.
__device__ __forceinline__ bool windowCuts(const FaParams &p, int q0, int rows, int k0, int off) {
  return p.causal && p.window > 0 && k0 <= q0 + rows - 1 + off - p.window;
}

/// The first key (a multiple of `bk`) that queries from `q0` on can see.
__device__ __forceinline__ int firstVisibleKey(const FaParams &p, int q0, int off, int bk) {
  if (!p.causal || p.window <= 0)
    return 0;
  return max(0, q0 + off - p.window + 1) / bk * bk;
}

__device__ __forceinline__ float quadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <int D> constexpr int faForwardSmemBytes() {
  return (kFaRows + 4 * kFaCols) * (D + 8) * 2;
}
template <int D> constexpr int faGradQSmemBytes() {
  return (2 * kFaRows + 4 * kFaCols) * (D + 8) * 2;
}
template <int D> constexpr int faGradKVSmemBytes() {
  return (2 * kFaRows + 4 * kFaCols) * (D + 8) * 2 + 4 * kFaCols * int(sizeof(float));
}

/// STATS = false: out = softmax(scale q k^T) v. STATS = true: lse (log2
/// domain) and delta = dO . O per query row instead.
template <typename T, int D, bool STATS>
__global__ void __launch_bounds__(kFaThreads, 2) faForwardKernel(FaParams p) {
  constexpr int BQ = kFaRows, BK = kFaCols, S = D + 8;
  constexpr int NT = BK / 8, DT = D / 8, DK = D / 16;
  extern __shared__ __align__(16) unsigned char faSmem[];
  T *Qs = reinterpret_cast<T *>(faSmem);
  T *Ks = Qs + BQ * S; // 2 buffers
  T *Vs = Ks + 2 * BK * S;

  const int qTiles = (p.seq + BQ - 1) / BQ;
  int64_t blk = blockIdx.x;
  const int tile = qTiles - 1 - int(blk % qTiles); // late tiles (more keys) first
  blk /= qTiles;
  const int head = int(blk % p.qHeads);
  const int b = int(blk / p.qHeads);
  const int kvHead = head / p.group;
  const int q0 = tile * BQ;
  const int off = p.kvSeq - p.seq;
  const int64_t qRowBase = (int64_t(b) * p.qHeads + head) * p.seq; // lse, delta
  const T *qg = static_cast<const T *>(p.q) + p.lq.at(b, head, q0);
  const T *kg = static_cast<const T *>(p.k) + p.lk.at(b, kvHead, 0);
  const T *vg = static_cast<const T *>(p.v) + p.lv.at(b, kvHead, 0);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = q0 + warp * 16 + g; // the thread's rows: row0, row0 + 8

  int kvEnd = p.kvSeq;
  if (p.causal)
    kvEnd = max(0, min(p.kvSeq, q0 + BQ + off));
  const int kBase = firstVisibleKey(p, q0, off, BK);
  const int nTiles = kvEnd > kBase ? (kvEnd - kBase + BK - 1) / BK : 0;

  loadTileAsync<BQ, D>(Qs, qg, p.lq.row, p.seq - q0, p.q);
  if (nTiles > 0) {
    loadTileAsync<BK, D>(Ks, kg + kBase * p.lk.row, p.lk.row, p.kvSeq - kBase, p.k);
    loadTileAsync<BK, D>(Vs, vg + kBase * p.lv.row, p.lv.row, p.kvSeq - kBase, p.v);
  }
  cpAsyncCommit();

  float o[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      o[i][e] = 0.f;
  float mRow[2] = {-INFINITY, -INFINITY}, lRow[2] = {0.f, 0.f};
  uint32_t qf[DK][4];

  for (int j = 0; j < nTiles; ++j) {
    const int k0 = kBase + j * BK;
    if (j + 1 < nTiles) {
      const int n0 = k0 + BK, nb = (j + 1) & 1;
      loadTileAsync<BK, D>(Ks + nb * BK * S, kg + n0 * p.lk.row, p.lk.row, p.kvSeq - n0, p.k);
      loadTileAsync<BK, D>(Vs + nb * BK * S, vg + n0 * p.lv.row, p.lv.row, p.kvSeq - n0, p.v);
      cpAsyncCommit();
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < DK; ++kk)
        loadA<S>(qf[kk], Qs + warp * 16 * S, kk, lane);
    }
    const T *Kb = Ks + (j & 1) * BK * S;
    const T *Vb = Vs + (j & 1) * BK * S;

    float s[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[i][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < DK; ++kk)
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bf[4];
        loadBRows<S>(bf, Kb, np * 16, kk, lane);
        mma16816<T>(s[2 * np], qf[kk], bf[0], bf[1]);
        mma16816<T>(s[2 * np + 1], qf[kk], bf[2], bf[3]);
      }

    const bool needMask = k0 + BK > p.kvSeq || (p.causal && k0 + BK - 1 > q0 + off) ||
                          windowCuts(p, q0, BQ, k0, off);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * p.scaleLog2;
        if (needMask) {
          const int key = k0 + nt * 8 + 2 * t + (e & 1);
          if (!faVisible(key, row0 + (e >> 1) * 8, p.kvSeq, off, p.causal, p.window))
            x = -INFINITY;
        }
        s[nt][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    float mUse[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float mNew = fmaxf(mRow[i], quadMax(mx[i]));
      mUse[i] = mNew == -INFINITY ? 0.f : mNew;
      const float alpha = exp2f(mRow[i] - mUse[i]);
      mRow[i] = mNew;
      lRow[i] *= alpha;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        o[dt][2 * i] *= alpha;
        o[dt][2 * i + 1] *= alpha;
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pv = exp2f(s[nt][e] - mUse[e >> 1]);
        s[nt][e] = pv;
        lRow[e >> 1] += pv;
      }

#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]),
                             pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                             pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t bf[4];
        loadBCols<S>(bf, Vb, dp * 16, kk, lane);
        mma16816<T>(o[2 * dp], a, bf[0], bf[1]);
        mma16816<T>(o[2 * dp + 1], a, bf[2], bf[3]);
      }
    }
    __syncthreads(); // readers of this buffer are done before it is refilled
  }
  cpAsyncWait<0>();

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row0 + 8 * i;
    const float l = quadSum(lRow[i]);
    // A query that sees no key (causal, kvSeq < seq) outputs zeros.
    const float inv = l > 0.f ? 1.f / l : 0.f;
    if constexpr (!STATS) {
      if (row < p.seq) {
        T *out = static_cast<T *>(p.out) + p.lo.at(b, head, row) + 2 * t;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt)
          *reinterpret_cast<uint32_t *>(out + dt * 8) =
              pack2<T>(o[dt][2 * i] * inv, o[dt][2 * i + 1] * inv);
        // The row's natural logsumexp (m and l are the quad's): one lane writes.
        if (p.lseOut && t == 0)
          p.lseOut[qRowBase + row] =
              l > 0.f ? (mRow[i] + log2f(l)) * 0.6931471805599453f : -INFINITY;
      }
    } else {
      float dot = 0.f;
      if (row < p.seq) {
        const T *dO = static_cast<const T *>(p.dout) + p.lg.at(b, head, row) + 2 * t;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
          const float2 d = unpack2<T>(*reinterpret_cast<const uint32_t *>(dO + dt * 8));
          dot += d.x * (o[dt][2 * i] * inv) + d.y * (o[dt][2 * i + 1] * inv);
        }
      }
      dot = quadSum(dot);
      if (row < p.seq && t == 0) {
        p.lse[qRowBase + row] = l > 0.f ? mRow[i] + log2f(l) : 0.f;
        p.delta[qRowBase + row] = dot;
      }
    }
  }
}

/// dq = scale sum_j dS_ij k_j, per query tile, keys streamed.
template <typename T, int D>
__global__ void __launch_bounds__(kFaThreads, 2) faGradQKernel(FaParams p) {
  constexpr int BQ = kFaRows, BK = kFaCols, S = D + 8;
  constexpr int NT = BK / 8, DT = D / 8, DK = D / 16;
  extern __shared__ __align__(16) unsigned char faSmem[];
  T *Qs = reinterpret_cast<T *>(faSmem);
  T *dOs = Qs + BQ * S;
  T *Ks = dOs + BQ * S; // 2 buffers
  T *Vs = Ks + 2 * BK * S;

  const int qTiles = (p.seq + BQ - 1) / BQ;
  int64_t blk = blockIdx.x;
  const int tile = qTiles - 1 - int(blk % qTiles);
  blk /= qTiles;
  const int head = int(blk % p.qHeads);
  const int b = int(blk / p.qHeads);
  const int kvHead = head / p.group;
  const int q0 = tile * BQ;
  const int off = p.kvSeq - p.seq;
  const int64_t qRowBase = (int64_t(b) * p.qHeads + head) * p.seq; // lse, delta
  const T *kg = static_cast<const T *>(p.k) + p.lk.at(b, kvHead, 0);
  const T *vg = static_cast<const T *>(p.v) + p.lv.at(b, kvHead, 0);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = q0 + warp * 16 + g;

  int kvEnd = p.kvSeq;
  if (p.causal)
    kvEnd = max(0, min(p.kvSeq, q0 + BQ + off));
  const int kBase = firstVisibleKey(p, q0, off, BK);
  const int nTiles = kvEnd > kBase ? (kvEnd - kBase + BK - 1) / BK : 0;

  loadTileAsync<BQ, D>(Qs, static_cast<const T *>(p.q) + p.lq.at(b, head, q0), p.lq.row,
                       p.seq - q0, p.q);
  loadTileAsync<BQ, D>(dOs, static_cast<const T *>(p.dout) + p.lg.at(b, head, q0), p.lg.row,
                       p.seq - q0, p.dout);
  if (nTiles > 0) {
    loadTileAsync<BK, D>(Ks, kg + kBase * p.lk.row, p.lk.row, p.kvSeq - kBase, p.k);
    loadTileAsync<BK, D>(Vs, vg + kBase * p.lv.row, p.lv.row, p.kvSeq - kBase, p.v);
  }
  cpAsyncCommit();

  float lse[2], delta[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row0 + 8 * i;
    lse[i] = row < p.seq ? p.lse[qRowBase + row] : 0.f;
    delta[i] = row < p.seq ? p.delta[qRowBase + row] : 0.f;
  }
  float acc[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[i][e] = 0.f;

  const T *Qw = Qs + warp * 16 * S;
  const T *dOw = dOs + warp * 16 * S;
  for (int j = 0; j < nTiles; ++j) {
    const int k0 = kBase + j * BK;
    if (j + 1 < nTiles) {
      const int n0 = k0 + BK, nb = (j + 1) & 1;
      loadTileAsync<BK, D>(Ks + nb * BK * S, kg + n0 * p.lk.row, p.lk.row, p.kvSeq - n0, p.k);
      loadTileAsync<BK, D>(Vs + nb * BK * S, vg + n0 * p.lv.row, p.lv.row, p.kvSeq - n0, p.v);
      cpAsyncCommit();
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    __syncthreads();
    const T *Kb = Ks + (j & 1) * BK * S;
    const T *Vb = Vs + (j & 1) * BK * S;

    float s[NT][4], dp[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[i][e] = 0.f;
        dp[i][e] = 0.f;
      }
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) {
      uint32_t a[4];
      loadA<S>(a, Qw, kk, lane);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bf[4];
        loadBRows<S>(bf, Kb, np * 16, kk, lane);
        mma16816<T>(s[2 * np], a, bf[0], bf[1]);
        mma16816<T>(s[2 * np + 1], a, bf[2], bf[3]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) {
      uint32_t a[4];
      loadA<S>(a, dOw, kk, lane);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bf[4];
        loadBRows<S>(bf, Vb, np * 16, kk, lane);
        mma16816<T>(dp[2 * np], a, bf[0], bf[1]);
        mma16816<T>(dp[2 * np + 1], a, bf[2], bf[3]);
      }
    }

    const bool needMask = k0 + BK > p.kvSeq || (p.causal && k0 + BK - 1 > q0 + off) ||
                          windowCuts(p, q0, BQ, k0, off);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1;
        float pr = exp2f(s[nt][e] * p.scaleLog2 - lse[i]);
        if (needMask) {
          const int key = k0 + nt * 8 + 2 * t + (e & 1);
          if (!faVisible(key, row0 + 8 * i, p.kvSeq, off, p.causal, p.window))
            pr = 0.f;
        }
        s[nt][e] = pr * (dp[nt][e] - delta[i]);
      }

#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]),
                             pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                             pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t bf[4];
        loadBCols<S>(bf, Kb, dn * 16, kk, lane);
        mma16816<T>(acc[2 * dn], a, bf[0], bf[1]);
        mma16816<T>(acc[2 * dn + 1], a, bf[2], bf[3]);
      }
    }
    __syncthreads();
  }
  cpAsyncWait<0>();

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row0 + 8 * i;
    if (row >= p.seq)
      continue;
    T *dq = static_cast<T *>(p.dq) + p.ldq.at(b, head, row) + 2 * t;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
      *reinterpret_cast<uint32_t *>(dq + dt * 8) =
          pack2<T>(acc[dt][2 * i] * p.scale, acc[dt][2 * i + 1] * p.scale);
  }
}

/// dk_j = scale sum_i dS_ij q_i and dv_j = sum_i P_ij dO_i per 64-key tile,
/// summed over the query heads sharing the KV head (in head order) and their
/// query tiles (in row order).
template <typename T, int D>
__global__ void __launch_bounds__(kFaThreads, 2) faGradKVKernel(FaParams p) {
  constexpr int BKEY = kFaRows, BQ = kFaCols, S = D + 8;
  constexpr int NT = BQ / 8, DT = D / 8, DK = D / 16;
  extern __shared__ __align__(16) unsigned char faSmem[];
  T *Ks = reinterpret_cast<T *>(faSmem);
  T *Vs = Ks + BKEY * S;
  T *Qs = Vs + BKEY * S;   // 2 buffers
  T *dOs = Qs + 2 * BQ * S; // 2 buffers
  float *lseS = reinterpret_cast<float *>(dOs + 2 * BQ * S); // 2 buffers
  float *deltaS = lseS + 2 * BQ;                              // 2 buffers

  const int kTiles = (p.kvSeq + BKEY - 1) / BKEY;
  int64_t blk = blockIdx.x;
  const int tile = int(blk % kTiles); // early key tiles (more queries) first
  blk /= kTiles;
  const int kvHead = int(blk % p.kvHeads);
  const int b = int(blk / p.kvHeads);
  const int k0 = tile * BKEY;
  const int off = p.kvSeq - p.seq;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int key0 = k0 + warp * 16 + g; // the thread's keys: key0, key0 + 8

  // Causal: key j is seen by queries i >= j - off; skip the tiles before.
  int qStart = 0;
  if (p.causal)
    qStart = (max(0, k0 - off) / BQ) * BQ;
  // A sliding window: key j is seen by queries i < j - off + window.
  const int qEnd = p.causal && p.window > 0 ? min(p.seq, k0 + BKEY - 1 - off + p.window) : p.seq;
  const int nQ = qStart < qEnd ? (qEnd - qStart + BQ - 1) / BQ : 0;
  const int iters = nQ * p.group;

  const T *qAll = static_cast<const T *>(p.q);
  const T *dOAll = static_cast<const T *>(p.dout);
  auto issue = [&](int it) {
    const int gi = it / nQ;
    const int q0 = qStart + (it - gi * nQ) * BQ;
    const int head = kvHead * p.group + gi;
    const int64_t qRowBase = (int64_t(b) * p.qHeads + head) * p.seq; // lse, delta
    const int nb = it & 1;
    loadTileAsync<BQ, D>(Qs + nb * BQ * S, qAll + p.lq.at(b, head, q0), p.lq.row, p.seq - q0,
                         p.q);
    loadTileAsync<BQ, D>(dOs + nb * BQ * S, dOAll + p.lg.at(b, head, q0), p.lg.row, p.seq - q0,
                         p.dout);
    if (threadIdx.x < BQ) {
      const int r = q0 + threadIdx.x;
      lseS[nb * BQ + threadIdx.x] = r < p.seq ? p.lse[qRowBase + r] : 0.f;
    } else {
      const int r = q0 + threadIdx.x - BQ;
      deltaS[nb * BQ + threadIdx.x - BQ] = r < p.seq ? p.delta[qRowBase + r] : 0.f;
    }
  };

  loadTileAsync<BKEY, D>(Ks, static_cast<const T *>(p.k) + p.lk.at(b, kvHead, k0), p.lk.row,
                         p.kvSeq - k0, p.k);
  loadTileAsync<BKEY, D>(Vs, static_cast<const T *>(p.v) + p.lv.at(b, kvHead, k0), p.lv.row,
                         p.kvSeq - k0, p.v);
  if (iters > 0)
    issue(0);
  cpAsyncCommit();

  float dK[DT][4], dV[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      dK[i][e] = 0.f;
      dV[i][e] = 0.f;
    }

  const T *Kw = Ks + warp * 16 * S;
  const T *Vw = Vs + warp * 16 * S;
  for (int it = 0; it < iters; ++it) {
    const int q0 = qStart + (it % nQ) * BQ;
    if (it + 1 < iters) {
      issue(it + 1);
      cpAsyncCommit();
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    __syncthreads();
    const int cb = it & 1;
    const T *Qb = Qs + cb * BQ * S;
    const T *dOb = dOs + cb * BQ * S;
    const float *lseB = lseS + cb * BQ;
    const float *deltaB = deltaS + cb * BQ;

    // S^T = K Q^T (rows: the warp's 16 keys; columns: 64 queries).
    float st[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        st[i][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) {
      uint32_t a[4];
      loadA<S>(a, Kw, kk, lane);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bf[4];
        loadBRows<S>(bf, Qb, np * 16, kk, lane);
        mma16816<T>(st[2 * np], a, bf[0], bf[1]);
        mma16816<T>(st[2 * np + 1], a, bf[2], bf[3]);
      }
    }
    const bool needMask = k0 + BKEY > p.kvSeq || q0 + BQ > p.seq ||
                          (p.causal && k0 + BKEY - 1 > q0 + off) || windowCuts(p, q0, BQ, k0, off);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nt * 8 + 2 * t + (e & 1);
        float pr = exp2f(st[nt][e] * p.scaleLog2 - lseB[qi]);
        if (needMask) {
          const int row = q0 + qi;
          if (row >= p.seq || !faVisible(key0 + 8 * (e >> 1), row, p.kvSeq, off, p.causal, p.window))
            pr = 0.f;
        }
        st[nt][e] = pr;
      }
    // dV += P^T dO.
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(st[2 * kk][0], st[2 * kk][1]),
                             pack2<T>(st[2 * kk][2], st[2 * kk][3]),
                             pack2<T>(st[2 * kk + 1][0], st[2 * kk + 1][1]),
                             pack2<T>(st[2 * kk + 1][2], st[2 * kk + 1][3])};
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t bf[4];
        loadBCols<S>(bf, dOb, dn * 16, kk, lane);
        mma16816<T>(dV[2 * dn], a, bf[0], bf[1]);
        mma16816<T>(dV[2 * dn + 1], a, bf[2], bf[3]);
      }
    }
    // dP^T = V dO^T, then dS^T = P^T (dP^T - delta).
    float dpt[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        dpt[i][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) {
      uint32_t a[4];
      loadA<S>(a, Vw, kk, lane);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bf[4];
        loadBRows<S>(bf, dOb, np * 16, kk, lane);
        mma16816<T>(dpt[2 * np], a, bf[0], bf[1]);
        mma16816<T>(dpt[2 * np + 1], a, bf[2], bf[3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nt * 8 + 2 * t + (e & 1);
        dpt[nt][e] = st[nt][e] * (dpt[nt][e] - deltaB[qi]);
      }
    // dK += dS^T Q.
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(dpt[2 * kk][0], dpt[2 * kk][1]),
                             pack2<T>(dpt[2 * kk][2], dpt[2 * kk][3]),
                             pack2<T>(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                             pack2<T>(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t bf[4];
        loadBCols<S>(bf, Qb, dn * 16, kk, lane);
        mma16816<T>(dK[2 * dn], a, bf[0], bf[1]);
        mma16816<T>(dK[2 * dn + 1], a, bf[2], bf[3]);
      }
    }
    __syncthreads();
  }
  cpAsyncWait<0>();

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int key = key0 + 8 * i;
    if (key >= p.kvSeq)
      continue;
    T *dk = static_cast<T *>(p.dk) + p.ldk.at(b, kvHead, key) + 2 * t;
    T *dv = static_cast<T *>(p.dv) + p.ldv.at(b, kvHead, key) + 2 * t;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      *reinterpret_cast<uint32_t *>(dk + dt * 8) =
          pack2<T>(dK[dt][2 * i] * p.scale, dK[dt][2 * i + 1] * p.scale);
      *reinterpret_cast<uint32_t *>(dv + dt * 8) = pack2<T>(dV[dt][2 * i], dV[dt][2 * i + 1]);
    }
  }
}

//===----------------------------------------------------------------------===//
// Host side
//===----------------------------------------------------------------------===//

FaParams makeParams(const FlashAttnArgs &a) {
  FaParams p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.dout = a.dout;
  p.out = a.out;
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv;
  p.lse = a.lse;
  p.delta = a.delta;
  p.lseOut = a.lseOut;
  p.lq = a.qLayout;
  p.lk = a.kLayout;
  p.lv = a.vLayout;
  p.lo = a.outLayout;
  p.lg = a.doutLayout;
  p.ldq = a.dqLayout;
  p.ldk = a.dkLayout;
  p.ldv = a.dvLayout;
  p.qHeads = a.qHeads;
  p.kvHeads = a.kvHeads;
  p.group = a.qHeads / a.kvHeads;
  p.seq = a.seq;
  p.kvSeq = a.kvSeq;
  p.causal = a.causal ? 1 : 0;
  p.window = a.causal ? a.window : 0;
  p.scale = a.scale;
  p.scaleLog2 = static_cast<float>(double(a.scale) * 1.4426950408889634);
  return p;
}

template <typename Kernel>
llvm::Error launchFa(Kernel kernel, int64_t blocks, int smemBytes, const FaParams &p,
                     cudaStream_t stream, const char *what) {
  if (blocks <= 0)
    return llvm::Error::success();
  if (blocks > INT_MAX)
    return llvm::createStringError(std::errc::invalid_argument, "%s: too many tiles", what);
  LOOM_RETURN_IF_ERROR(cudaError(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smemBytes),
      "cudaFuncSetAttribute"));
  kernel<<<unsigned(blocks), kFaThreads, smemBytes, stream>>>(p);
  return cudaError(cudaGetLastError(), what);
}

template <typename T, int D, bool STATS>
llvm::Error runForward(const FaParams &p, int batch, cudaStream_t stream) {
  const int64_t blocks = int64_t((p.seq + kFaRows - 1) / kFaRows) * p.qHeads * batch;
  return launchFa(faForwardKernel<T, D, STATS>, blocks, faForwardSmemBytes<D>(), p, stream,
                  STATS ? "attention statistics launch" : "attention forward launch");
}

template <typename T, int D>
llvm::Error runBackward(const FaParams &p, int batch, bool statsReady, cudaStream_t stream) {
  if (!statsReady) {
    LOOM_RETURN_IF_ERROR((runForward<T, D, true>(p, batch, stream)));
  }
  const int64_t qBlocks = int64_t((p.seq + kFaRows - 1) / kFaRows) * p.qHeads * batch;
  LOOM_RETURN_IF_ERROR(launchFa(faGradQKernel<T, D>, qBlocks, faGradQSmemBytes<D>(), p, stream,
                                "attention dq launch"));
  const int64_t kvBlocks = int64_t((p.kvSeq + kFaRows - 1) / kFaRows) * p.kvHeads * batch;
  return launchFa(faGradKVKernel<T, D>, kvBlocks, faGradKVSmemBytes<D>(), p, stream,
                  "attention dk/dv launch");
}

template <typename Fn> llvm::Error dispatch(DType dtype, int headDim, Fn &&fn) {
  auto withDim = [&](auto tag) -> llvm::Error {
    if (headDim == 64)
      return fn(tag, std::integral_constant<int, 64>{});
    return fn(tag, std::integral_constant<int, 128>{});
  };
  if (dtype == DType::BF16)
    return withDim(std::common_type<__nv_bfloat16>{});
  return withDim(std::common_type<__half>{});
}

} // namespace

bool flashAttentionApplies(DType dtype, int64_t headDim, int64_t valueDim, int64_t seq,
                           int64_t kvSeq, std::initializer_list<const void *> pointers) {
  if (dtype != DType::BF16 && dtype != DType::F16)
    return false;
  if (headDim != valueDim || (headDim != 64 && headDim != 128))
    return false;
  if (seq <= 0 || kvSeq <= 0)
    return false;
  for (const void *ptr : pointers)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      return false;
  return true;
}

llvm::Error flashAttentionForward(DType dtype, const FlashAttnArgs &args, cudaStream_t stream) {
  const FaParams p = makeParams(args);
  return dispatch(dtype, args.headDim, [&](auto tag, auto dim) -> llvm::Error {
    using T = typename decltype(tag)::type;
    return runForward<T, decltype(dim)::value, false>(p, args.batch, stream);
  });
}

llvm::Error flashAttentionBackward(DType dtype, const FlashAttnArgs &args,
                                   cudaStream_t stream) {
  const FaParams p = makeParams(args);
  return dispatch(dtype, args.headDim, [&](auto tag, auto dim) -> llvm::Error {
    using T = typename decltype(tag)::type;
    return runBackward<T, decltype(dim)::value>(p, args.batch, args.statsReady, stream);
  });
}

} // namespace loom::cuda
