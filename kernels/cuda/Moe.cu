// Mixture-of-experts kernels on CUDA: nn.router and nn.topk (a thread per
// row, k at most kMaxTopk; the router's groups at most kMaxRouterGroups), nn.sort (CUB's stable radix sort of an order-preserving 64-bit
// key, row by row), nn.grouped_matmul and its weight gradient (output
// tiles of one group each, in shared memory, the groups' tiles counted on
// the device from the offsets, so no count leaves the GPU and the step
// stays one graph). They compute what the CPU kernels (kernels/cpu/Moe.cpp)
// do. bf16 and f16 GEMMs run on tensor cores (wgmma, f32 accumulators,
// 128 x 128 tiles); f32 and f64 ones on CUDA cores (64 x 64 tiles), in
// their compute type and in increasing k.
//
// On the device the offsets are not checked: a group's bounds are clamped
// into [0, rows] and made non-decreasing, where the CPU kernel reports
// offsets out of order as an error.

#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/DeviceSupport.cuh"
#include "kernels/cuda/TensorCore.cuh"
#include "kernels/cuda/Wgmma.cuh"
#include "kernels/cpu/KernelSupport.h"
#include "kernels/cpu/OperandChecks.h"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>


namespace loom::cuda {
namespace {

constexpr int kMaxTopk = 32;
constexpr int kMaxRouterGroups = 64;

/// A 64-bit key whose unsigned order is the order of doubles in the
/// contract: NaN above every number, -0 equal to +0.
__device__ __forceinline__ uint64_t doubleKey(double v) {
  if (isnan(v))
    return ~uint64_t(0);
  if (v == 0.0)
    v = 0.0;
  const uint64_t bits = static_cast<uint64_t>(__double_as_longlong(v));
  return (bits >> 63) ? ~bits : (bits | (uint64_t(1) << 63));
}

/// A 64-bit key whose unsigned order is the value order of the contract:
/// NaN above every number, -0 equal to +0.
template <DType D> __device__ __forceinline__ uint64_t orderKey(StorageOf<D> s) {
  if constexpr (dev::isIntDType(D)) {
    const int64_t v = dev::Elem<D>::load(s);
    return static_cast<uint64_t>(v) ^ (uint64_t(1) << 63);
  } else {
    return doubleKey(dev::Elem<D>::loadDouble(s));
  }
}

__device__ __forceinline__ void storeIndex(void *out, bool wide, int64_t i, int64_t v) {
  if (wide)
    static_cast<int64_t *>(out)[i] = v;
  else
    static_cast<int32_t *>(out)[i] = static_cast<int32_t>(v);
}

/// Inserts (key, position) into the k best kept so far, best first (equal
/// keys keep the earlier).
__device__ __forceinline__ void keepBest(uint64_t *keys, int64_t *pos, int &count, int k,
                                         uint64_t key, int64_t j) {
  if (count == k && key <= keys[k - 1])
    return;
  int at = count < k ? count : k - 1;
  while (at > 0 && keys[at - 1] < key) {
    keys[at] = keys[at - 1];
    pos[at] = pos[at - 1];
    --at;
  }
  keys[at] = key;
  pos[at] = j;
  if (count < k)
    ++count;
}

/// One thread per row: the k best of the row, best first, ties by position.
template <DType D>
__global__ void __launch_bounds__(kBlockSize)
topkKernel(int64_t rows, int64_t n, int k, bool smallest, const StorageOf<D> *in,
           StorageOf<D> *values, void *indices, bool wideIndices) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += stride) {
    uint64_t keys[kMaxTopk];
    int64_t pos[kMaxTopk];
    int count = 0;
    const StorageOf<D> *row = in + r * n;
    for (int64_t j = 0; j < n; ++j) {
      uint64_t key = orderKey<D>(row[j]);
      if (smallest)
        key = ~key; // the smallest value ranks best, NaN last
      keepBest(keys, pos, count, k, key, j);
    }
    for (int j = 0; j < k; ++j) {
      values[r * k + j] = row[pos[j]];
      storeIndex(indices, wideIndices, r * k + j, pos[j]);
    }
  }
}

struct RouterArgs {
  int64_t rows, experts;
  int k, groups, groupK, groupTop;
  bool sigmoid, normalize;
  double groupFill, epsilon, scale;
};

/// One thread per row, as the CPU kernel computes it: the affinities in
/// f64, rounded as stored; the choice scores from the rounded ones.
template <DType D>
__global__ void __launch_bounds__(kBlockSize)
routerKernel(RouterArgs a, const StorageOf<D> *logits, const StorageOf<D> *bias,
             StorageOf<D> *weights, void *ids, bool wideIds, StorageOf<D> *scores) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t n = a.experts, size = n / a.groups;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < a.rows;
       r += stride) {
    const StorageOf<D> *x = logits + r * n;
    StorageOf<D> *s = scores + r * n;
    double top = -INFINITY, sum = 0;
    if (!a.sigmoid) {
      for (int64_t e = 0; e < n; ++e)
        top = fmax(top, dev::Elem<D>::loadDouble(x[e]));
      for (int64_t e = 0; e < n; ++e)
        sum += exp(dev::Elem<D>::loadDouble(x[e]) - top);
    }
    for (int64_t e = 0; e < n; ++e) {
      const double v = dev::Elem<D>::loadDouble(x[e]);
      s[e] = dev::Elem<D>::storeDouble(a.sigmoid ? 1.0 / (1.0 + exp(-v)) : exp(v - top) / sum);
    }
    auto choice = [&](int64_t e) {
      const double c = dev::Elem<D>::loadDouble(s[e]);
      return bias ? c + dev::Elem<D>::loadDouble(bias[e]) : c;
    };
    uint64_t kept = ~uint64_t(0);
    if (a.groups > 1) {
      uint64_t groupKeys[kMaxRouterGroups];
      for (int g = 0; g < a.groups; ++g) {
        uint64_t keys[kMaxTopk];
        int64_t pos[kMaxTopk];
        int count = 0;
        for (int64_t e = g * size; e < (g + 1) * size; ++e)
          keepBest(keys, pos, count, a.groupTop, doubleKey(choice(e)), e);
        double total = 0;
        for (int j = 0; j < a.groupTop; ++j)
          total += choice(pos[j]);
        groupKeys[g] = doubleKey(total);
      }
      uint64_t keys[kMaxTopk];
      int64_t pos[kMaxTopk];
      int count = 0;
      for (int g = 0; g < a.groups; ++g)
        keepBest(keys, pos, count, a.groupK, groupKeys[g], g);
      kept = 0;
      for (int j = 0; j < a.groupK; ++j)
        kept |= uint64_t(1) << pos[j];
    }
    uint64_t keys[kMaxTopk];
    int64_t pos[kMaxTopk];
    int count = 0;
    for (int64_t e = 0; e < n; ++e) {
      const bool eligible = (kept >> (e / size)) & 1;
      keepBest(keys, pos, count, a.k, doubleKey(eligible ? choice(e) : a.groupFill), e);
    }
    double total = 0;
    for (int j = 0; j < a.k; ++j)
      total += dev::Elem<D>::loadDouble(s[pos[j]]);
    const double divisor = a.normalize ? total + a.epsilon : 1.0;
    for (int j = 0; j < a.k; ++j) {
      weights[r * a.k + j] =
          dev::Elem<D>::storeDouble(dev::Elem<D>::loadDouble(s[pos[j]]) / divisor * a.scale);
      storeIndex(ids, wideIds, r * a.k + j, pos[j]);
    }
  }
}

template <DType D>
__global__ void __launch_bounds__(kBlockSize)
sortKeysKernel(int64_t n, bool descending, const StorageOf<D> *row, uint64_t *keys,
               uint32_t *positions) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += stride) {
    const uint64_t key = orderKey<D>(row[j]);
    keys[j] = descending ? ~key : key;
    positions[j] = static_cast<uint32_t>(j);
  }
}

template <DType D>
__global__ void __launch_bounds__(kBlockSize)
sortGatherKernel(int64_t n, const uint32_t *order, const StorageOf<D> *row, StorageOf<D> *values,
                 void *indices, bool wideIndices, int64_t base) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += stride) {
    values[j] = row[order[j]];
    storeIndex(indices, wideIndices, base + j, order[j]);
  }
}

/// The bounds of group e: [offsets[e-1], offsets[e]) clamped into [0, rows].
/// `offsets` points at the first group of a block (group_start); `prior`:
/// whether a group precedes it (offsets[-1] is then the block's first row).
template <typename OffT>
__device__ __forceinline__ int64_t groupEnd(const OffT *offsets, int64_t e, int64_t rows,
                                            bool prior) {
  if (e < 0 && !prior)
    return 0;
  const int64_t v = static_cast<int64_t>(offsets[e]);
  return v < 0 ? 0 : (v > rows ? rows : v);
}

// Tiled grouped GEMMs: 64 x 64 output tiles of one group each, a thread
// computing 4 x 4 of them from 16-deep slices of the operands in shared
// memory, accumulated in increasing k as the CPU kernel does (no FMA).
constexpr int kTile = 64, kDepth = 16, kTileThreads = 256;

/// tileStart[e] = the first output row tile of group e (a tile holds rows of
/// one group); tileStart[E] = the tiles of all groups.
template <typename OffT>
__global__ void groupTilesKernel(int64_t S, int64_t E, const OffT *offsets, bool prior,
                                 int64_t tileRows, int64_t *tileStart) {
  if (blockIdx.x != 0 || threadIdx.x != 0)
    return;
  int64_t total = 0;
  for (int64_t e = 0; e < E; ++e) {
    tileStart[e] = total;
    int64_t rows = groupEnd(offsets, e, S, prior) - groupEnd(offsets, e - 1, S, prior);
    total += rows > 0 ? (rows + tileRows - 1) / tileRows : 0;
  }
  tileStart[E] = total;
  // The rows the groups cover: [tileStart[E + 1], tileStart[E + 2]).
  tileStart[E + 1] = groupEnd(offsets, -1, S, prior);
  tileStart[E + 2] = groupEnd(offsets, E - 1, S, prior);
}

/// Zeroes the rows of y [S, N] outside [bounds[0], bounds[1]) (rows of
/// other groups, or past the last offset): the tiles write every other row.
template <typename T>
__global__ void __launch_bounds__(kBlockSize)
zeroUncoveredRows(int64_t S, int64_t N, const int64_t *bounds, T *y) {
  const int64_t begin = bounds[0], end = bounds[1];
  for (int64_t r = blockIdx.x; r < S; r += gridDim.x) {
    if (r >= begin && r < end)
      continue;
    for (int64_t j = threadIdx.x; j < N; j += blockDim.x)
      y[r * N + j] = T{};
  }
}

/// The group of output row tile `tile`: the last e with tileStart[e] <= tile.
__device__ __forceinline__ int64_t groupOfTile(const int64_t *tileStart, int64_t E,
                                               int64_t tile) {
  int64_t lo = 0, hi = E - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (tileStart[mid] <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Tensor-core grouped GEMMs for bf16 and f16 operands, on Hopper's
// warpgroup MMA: 128 x 128 output tiles of one group each, two warpgroups
// of 64 x 128, operands staged 64 deep by cp.async into the 128-byte
// swizzle (Wgmma.cuh), 3 stages (two blocks an SM). The forward's
// activations are K-major; the weights, and the weight gradient's
// activations, are read as they lie (N- and M-major) and wgmma transposes
// them. f32 accumulators, as the contract says, in the tensor cores' order
// within each 16-deep step. Operand rows must be 16-byte aligned (K and N
// multiples of 8); other shapes take the CUDA-core kernels.
namespace wg {

constexpr int kM = 128, kN = 128, kK = 64, kThreads = 256, kStages = 3;
constexpr int kAElems = kM * kK, kBElems = kK * kN;
/// The ring, and 1024 bytes to align it to the swizzle's period.
constexpr size_t kSmemBytes = size_t(kStages) * (kAElems + kBElems) * sizeof(uint16_t) + 1024;

template <DType D> struct Operand;
template <> struct Operand<DType::BF16> { using T = __nv_bfloat16; };
template <> struct Operand<DType::F16> { using T = __half; };

/// Byte offset of the 16-byte chunk `chunk` (8 elements) of row `row` in a
/// 128-byte-swizzled stage. K-major tile [128 rows][64 k]: row m, chunk
/// k / 8; rows 128 bytes apart, so 8 rows make one 1024-byte swizzle atom.
/// MN-major tile [64 k][128 mn]: row k, chunk mn / 8; atom (k / 8, mn / 64)
/// at ((k / 8) * 2 + mn / 64) * 1024, its rows the 8 k. Within an atom the
/// chunk index is XORed with the row's index (the hardware's 128-byte
/// swizzle: address bits 4-6 ^= bits 7-9).
__device__ __forceinline__ uint32_t kMajorOffset(int row, int chunk) {
  return row * 128 + ((chunk ^ (row % 8)) * 16);
}
__device__ __forceinline__ uint32_t mnMajorOffset(int k, int chunk) {
  return ((k / 8) * 2 + chunk / 8) * 1024 + (k % 8) * 128 + (((chunk % 8) ^ (k % 8)) * 16);
}

/// C[m, n] = sum over k of A(m, k) B(k, n) for one 128 x 128 tile, k in
/// [kBegin, kEnd), on two warpgroups of 64 rows. B(k, n) = b[k * ldb + n]
/// (n < nEnd) or, with BKMajor, b[n * ldb + k]. A(m, k) = a[m * lda + k]
/// (m < mEnd) or, with AMMajor, a[k * lda + m]: rows and columns past
/// their ends read as zero. The tile's rows and columns start at a and b
/// (the caller offsets them).
template <DType D, bool AMMajor, bool BKMajor = false> struct TileGemm {
  using T = typename Operand<D>::T;
  float acc[64];

  __device__ void run(uint16_t *smemBase, const uint16_t *a, int64_t lda, int64_t mEnd,
                      const uint16_t *b, int64_t ldb, int64_t nEnd, int64_t kBegin,
                      int64_t kEnd) {
#pragma unroll
    for (int i = 0; i < 64; ++i)
      acc[i] = 0.f;
    const int64_t steps = (kEnd - kBegin + kK - 1) / kK;
    if (steps <= 0)
      return;
    const uint32_t base = (smemAddr(smemBase) + 1023) & ~1023u;
    const uint32_t as = base, bs = base + kStages * kAElems * 2;
    auto load = [&](int64_t t) {
      if (t < steps)
        stage(as + (t % kStages) * kAElems * 2, bs + (t % kStages) * kBElems * 2, a, lda, mEnd,
              b, ldb, nEnd, kBegin + t * kK, kEnd);
      cpAsyncCommit();
    };
    for (int64_t t = 0; t < kStages - 1; ++t)
      load(t);
    for (int64_t t = 0; t < steps; ++t) {
      cpAsyncWait<kStages - 2>();
      // cp.async wrote through the generic proxy; wgmma reads through the
      // async one.
      fenceProxyAsyncShared();
      __syncthreads();
      // The buffer refilled here was last read by the previous step's
      // wgmma, which every thread waited for before the barrier.
      load(t + kStages - 1);
      compute(as + (t % kStages) * kAElems * 2, bs + (t % kStages) * kBElems * 2);
    }
    cpAsyncWait<0>();
  }

  /// 1024 chunks of 8 elements in each operand, 4 per thread, consecutive
  /// threads along a row of global memory.
  __device__ void stage(uint32_t as, uint32_t bs, const uint16_t *a, int64_t lda, int64_t mEnd,
                        const uint16_t *b, int64_t ldb, int64_t nEnd, int64_t k0, int64_t kEnd) {
#pragma unroll
    for (int i = 0; i < kM * kK / 8 / kThreads; ++i) {
      const int c = threadIdx.x + i * kThreads;
      if constexpr (AMMajor) {
        const int k = c / 16, chunk = c % 16, m = chunk * 8;
        const bool ok = k0 + k < kEnd && m < mEnd;
        cpAsync16(as + mnMajorOffset(k, chunk), ok ? a + (k0 + k) * lda + m : a, ok);
      } else {
        const int m = c / 8, chunk = c % 8, k = chunk * 8;
        const bool ok = m < mEnd && k0 + k < kEnd;
        cpAsync16(as + kMajorOffset(m, chunk), ok ? a + m * lda + k0 + k : a, ok);
      }
      if constexpr (BKMajor) {
        const int n = c / 8, chunk = c % 8, k = chunk * 8;
        const bool ok = n < nEnd && k0 + k < kEnd;
        cpAsync16(bs + kMajorOffset(n, chunk), ok ? b + n * ldb + k0 + k : b, ok);
      } else {
        const int k = c / 16, chunk = c % 16, n = chunk * 8;
        const bool ok = k0 + k < kEnd && n < nEnd;
        cpAsync16(bs + mnMajorOffset(k, chunk), ok ? b + (k0 + k) * ldb + n : b, ok);
      }
    }
  }

  __device__ void compute(uint32_t as, uint32_t bs) {
    const int group = threadIdx.x / 128; // rows 64 * group ..
    fenceAccumulators();
    wgmmaFence();
#pragma unroll
    for (int s = 0; s < kK / 16; ++s) {
      // 16 deep. K-major A: the warpgroup's 64 rows (8 atoms of 1024
      // bytes), 32 bytes further along each row per step. MN-major: two
      // atoms along K a step, the warpgroup's 64 columns one atom along MN.
      const uint64_t da = AMMajor ? wgmmaDescSw128(as + s * 4096 + group * 1024, 1024, 2048)
                                  : wgmmaDescSw128(as + group * 8192 + s * 32, 16, 1024);
      // B likewise, all 128 of its columns: K-major, 16 atoms of 8 rows.
      const uint64_t db = BKMajor ? wgmmaDescSw128(bs + s * 32, 16, 1024)
                                  : wgmmaDescSw128(bs + s * 4096, 1024, 2048);
      wgmma64x128x16<T, AMMajor ? 1 : 0, BKMajor ? 0 : 1>(acc, da, db);
    }
    wgmmaCommit();
    wgmmaWait<0>();
    fenceAccumulators();
  }

  __device__ void fenceAccumulators() {
#pragma unroll
    for (int i = 0; i < 64; ++i)
      wgmmaFenceOperand(acc[i]);
  }

  /// Writes the tile to out[m * ldo + n] for m < mEnd, n < nEnd.
  /// In D, or in f32 (O = F32: a widened result).
  template <DType O = D>
  __device__ void store(StorageOf<O> *out, int64_t ldo, int64_t mEnd, int64_t nEnd) const {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32; // 8 warps of 16 rows
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t m = warp * 16 + lane / 4 + 8 * h, n = j * 8 + 2 * (lane % 4);
        if (m >= mEnd)
          continue;
        if (n + 1 < nEnd) {
          if constexpr (O == DType::F32)
            *reinterpret_cast<float2 *>(out + m * ldo + n) =
                make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
          else
            *reinterpret_cast<uint32_t *>(out + m * ldo + n) =
                pack2<T>(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        } else if (n < nEnd) {
          out[m * ldo + n] = dev::Elem<O>::store(acc[4 * j + 2 * h]);
        }
      }
  }
};

/// y[rows of group e] = x[rows of e] w[e]: x [S, K], w [E, K, N] (or
/// [E, N, K], read transposed, with WeightKMajor), y [S, N].
template <DType D, typename OffT, bool WeightKMajor>
__global__ void __launch_bounds__(kThreads, 2)
groupedMatmul(int64_t S, int64_t K, int64_t N, int64_t E, const uint16_t *x, const uint16_t *w,
              const OffT *offsets, bool prior, const int64_t *tileStart, uint16_t *y) {
  extern __shared__ __align__(128) uint16_t smem[];
  const int64_t tile = blockIdx.y;
  if (tile >= tileStart[E])
    return;
  const int64_t e = groupOfTile(tileStart, E, tile);
  const int64_t rowBegin = groupEnd(offsets, e - 1, S, prior) + (tile - tileStart[e]) * kM;
  const int64_t rows = groupEnd(offsets, e, S, prior) - rowBegin;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kN;
  TileGemm<D, false, WeightKMajor> g;
  g.run(smem, x + rowBegin * K, K, rows, w + e * K * N + (WeightKMajor ? col0 * K : col0),
        WeightKMajor ? K : N, N - col0, 0, K);
  g.store(y + rowBegin * N + col0, N, rows, N - col0);
}

/// out[e] = x[rows of e]^T g[rows of e]: x [S, K], g [S, N], out [E, K, N]
/// in D or, widened, in f32 (O).
template <DType D, DType O, typename OffT>
__global__ void __launch_bounds__(kThreads, 2)
groupedWeightGrad(int64_t S, int64_t K, int64_t N, const uint16_t *x, const uint16_t *g,
                  const OffT *offsets, bool prior, StorageOf<O> *out) {
  extern __shared__ __align__(128) uint16_t smem[];
  const int64_t e = blockIdx.z;
  const int64_t k0 = static_cast<int64_t>(blockIdx.y) * kM,
                n0 = static_cast<int64_t>(blockIdx.x) * kN;
  const int64_t begin = groupEnd(offsets, e - 1, S, prior), end = groupEnd(offsets, e, S, prior);
  // A(m, s) = x[s, k0 + m], staged [s][m]; the contraction runs over rows.
  TileGemm<D, true> t;
  t.run(smem, x + k0, K, K - k0, g + n0, N, N - n0, begin, end);
  t.template store<O>(out + (e * K + k0) * N + n0, N, K - k0, N - n0);
}

} // namespace wg

/// A thread's 4 x 4 block of a CUDA-core tile: rows ty*4.., columns
/// tx*4.. of the tile, summed over each 16-deep step in increasing order.
template <DType D> struct CoreTile {
  using C = ComputeOf<D>;
  C acc[4][4];
  int tx, ty;

  __device__ CoreTile() : tx(threadIdx.x % 16), ty(threadIdx.x / 16) {
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j)
        acc[i][j] = 0;
  }
  /// acc += as[d][rows] x bs[d][columns] over the step's depth d.
  __device__ void step(const C (&as)[kDepth][kTile + 1], const C (&bs)[kDepth][kTile]) {
    for (int d = 0; d < kDepth; ++d) {
      C a[4], b[4];
      for (int i = 0; i < 4; ++i)
        a[i] = as[d][ty * 4 + i];
      for (int j = 0; j < 4; ++j)
        b[j] = bs[d][tx * 4 + j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
          acc[i][j] = dev::add(acc[i][j], dev::mul(a[i], b[j]));
    }
  }
  /// out[r * ld + c] for the tile's row r0 + .. < rowEnd, column c0 + .. < colEnd.
  template <DType O = D>
  __device__ void store(StorageOf<O> *out, int64_t ld, int64_t r0, int64_t rowEnd, int64_t c0,
                        int64_t colEnd) const {
    for (int i = 0; i < 4; ++i) {
      const int64_t r = r0 + ty * 4 + i;
      if (r >= rowEnd)
        continue;
      for (int j = 0; j < 4; ++j) {
        const int64_t c = c0 + tx * 4 + j;
        if (c < colEnd)
          out[r * ld + c] = dev::Elem<O>::store(acc[i][j]);
      }
    }
  }
};

template <DType D, typename OffT>
__global__ void __launch_bounds__(kTileThreads)
groupedMatmulTiled(int64_t S, int64_t K, int64_t N, int64_t E, const StorageOf<D> *x,
                   const StorageOf<D> *w, const OffT *offsets, bool prior,
                   const int64_t *tileStart, int64_t kStride, int64_t nStride,
                   StorageOf<D> *y) {
  using C = ComputeOf<D>;
  __shared__ C as[kDepth][kTile + 1];
  __shared__ C bs[kDepth][kTile];
  const int64_t tile = blockIdx.y;
  if (tile >= tileStart[E])
    return;
  const int64_t e = groupOfTile(tileStart, E, tile);
  const int64_t rowBegin = groupEnd(offsets, e - 1, S, prior) + (tile - tileStart[e]) * kTile;
  const int64_t rowEnd = groupEnd(offsets, e, S, prior);
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  CoreTile<D> tileAcc;
  const StorageOf<D> *we = w + e * K * N;
  for (int64_t k0 = 0; k0 < K; k0 += kDepth) {
    for (int t = threadIdx.x; t < kDepth * kTile; t += kTileThreads) {
      const int r = t / kDepth, kk = t % kDepth; // a: 64 rows x 16 k
      const int64_t row = rowBegin + r, k = k0 + kk;
      as[kk][r] = row < rowEnd && k < K ? dev::Elem<D>::load(x[row * K + k]) : C(0);
      const int bk = t / kTile, bn = t % kTile; // b: 16 k x 64 columns
      const int64_t kb = k0 + bk, n = col0 + bn;
      bs[bk][bn] = kb < K && n < N ? dev::Elem<D>::load(we[kb * kStride + n * nStride]) : C(0);
    }
    __syncthreads();
    tileAcc.step(as, bs);
    __syncthreads();
  }
  tileAcc.store(y, N, rowBegin, rowEnd, col0, N);
}

/// out[e] = x[rows of e]^T g[rows of e], [K, N] tiles of one group each,
/// the rows in increasing order.
template <DType D, DType O, typename OffT>
__global__ void __launch_bounds__(kTileThreads)
groupedWeightGradTiled(int64_t S, int64_t K, int64_t N, int64_t E, const StorageOf<D> *x,
                       const StorageOf<D> *g, const OffT *offsets, bool prior,
                       StorageOf<O> *w) {
  using C = ComputeOf<D>;
  __shared__ C as[kDepth][kTile + 1];
  __shared__ C bs[kDepth][kTile];
  const int64_t e = blockIdx.z;
  const int64_t k0 = static_cast<int64_t>(blockIdx.y) * kTile,
                n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t begin = groupEnd(offsets, e - 1, S, prior), end = groupEnd(offsets, e, S, prior);
  CoreTile<D> tileAcc;
  for (int64_t s0 = begin; s0 < end; s0 += kDepth) {
    for (int t = threadIdx.x; t < kDepth * kTile; t += kTileThreads) {
      const int r = t / kTile, c = t % kTile; // 16 rows x 64 columns of each
      const int64_t s = s0 + r;
      const int64_t k = k0 + c, n = n0 + c;
      as[r][c] = s < end && k < K ? dev::Elem<D>::load(x[s * K + k]) : C(0);
      bs[r][c] = s < end && n < N ? dev::Elem<D>::load(g[s * N + n]) : C(0);
    }
    __syncthreads();
    tileAcc.step(as, bs);
    __syncthreads();
  }
  tileAcc.template store<O>(w + e * K * N, N, k0, K, n0, N);
}

llvm::Error checkRows(const Tensor &input, const Tensor &values, const Tensor &indices,
                      int64_t last, const char *kernel) {
  if (input.shape.empty())
    return kernelError(llvm::Twine(kernel) + ": takes a tensor of rank 1 or more, got a scalar");
  std::vector<int64_t> shape = input.shape;
  shape.back() = last;
  if (values.shape != shape || indices.shape != shape || values.dtype != input.dtype ||
      (indices.dtype != DType::I64 && indices.dtype != DType::I32))
    return kernelError(llvm::Twine(kernel) + ": outputs must be " +
                       cpu::detail::shapeToString(shape) + " (the input's dtype, i64 indices)");
  return llvm::Error::success();
}

llvm::Error launchTopk(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 2, 2));
  const Tensor &input = call.inputs[0], &values = call.outputs[0], &indices = call.outputs[1];
  LOOM_ASSIGN_OR_RETURN(int64_t k, call.attrs.getInt("k"));
  LOOM_ASSIGN_OR_RETURN(bool smallest, call.attrs.getBool("smallest", false));
  const int64_t n = input.shape.empty() ? 0 : input.shape.back();
  if (k < 1 || k > n)
    return kernelError("nn.topk: k must be in [1, " + llvm::Twine(n) + "], got " + llvm::Twine(k));
  if (k > kMaxTopk)
    return kernelError("nn.topk: k = " + llvm::Twine(k) + " is more than the CUDA kernel's " +
                       llvm::Twine(kMaxTopk));
  LOOM_RETURN_IF_ERROR(checkRows(input, values, indices, k, "nn.topk"));
  const int64_t rows = input.numElements() / n;
  if (rows == 0)
    return llvm::Error::success();
  return dispatchFloatDType(input.dtype, "nn.topk's input", [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    topkKernel<D><<<gridFor(rows, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
        rows, n, static_cast<int>(k), smallest, static_cast<const StorageOf<D> *>(input.data),
        static_cast<StorageOf<D> *>(values.data), indices.data, indices.dtype == DType::I64);
    return cudaError(cudaGetLastError(), "nn.topk");
  });
}

llvm::Error launchRouter(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 2, 3, 3));
  const Tensor &logits = call.inputs[0], &weights = call.outputs[0], &ids = call.outputs[1],
               &scores = call.outputs[2];
  const Tensor *bias = call.inputs.size() > 1 ? &call.inputs[1] : nullptr;
  RouterArgs a{};
  a.experts = logits.shape.empty() ? 0 : logits.shape.back();
  LOOM_ASSIGN_OR_RETURN(int64_t k, call.attrs.getInt("k"));
  LOOM_ASSIGN_OR_RETURN(int64_t groups, call.attrs.getInt("groups", 1));
  LOOM_ASSIGN_OR_RETURN(int64_t groupK, call.attrs.getInt("group_k", 1));
  LOOM_ASSIGN_OR_RETURN(int64_t groupTop, call.attrs.getInt("group_top", 2));
  LOOM_ASSIGN_OR_RETURN(a.sigmoid, call.attrs.getBool("sigmoid", false));
  LOOM_ASSIGN_OR_RETURN(a.normalize, call.attrs.getBool("normalize", false));
  LOOM_ASSIGN_OR_RETURN(a.groupFill, call.attrs.getF64("group_fill", 0.0));
  LOOM_ASSIGN_OR_RETURN(a.epsilon, call.attrs.getF64("epsilon", 0.0));
  LOOM_ASSIGN_OR_RETURN(a.scale, call.attrs.getF64("scale", 1.0));
  if (k < 1 || k > a.experts || k > kMaxTopk)
    return kernelError("nn.router: k must be in [1, " +
                       llvm::Twine(std::min<int64_t>(a.experts, kMaxTopk)) + "], got " +
                       llvm::Twine(k));
  if (groups < 1 || a.experts % groups || groups > kMaxRouterGroups ||
      (groups > 1 && (groupK < 1 || groupK > groups || groupTop < 1 ||
                      groupTop > std::min<int64_t>(a.experts / groups, kMaxTopk))))
    return kernelError("nn.router: groups must divide the " + llvm::Twine(a.experts) +
                       " experts and be at most " + llvm::Twine(kMaxRouterGroups) +
                       ", group_k at most groups and group_top at most a group's experts, got " +
                       llvm::Twine(groups) + ", " + llvm::Twine(groupK) + " and " +
                       llvm::Twine(groupTop));
  LOOM_RETURN_IF_ERROR(checkRows(logits, weights, ids, k, "nn.router"));
  if (scores.shape != logits.shape || scores.dtype != logits.dtype ||
      (bias && (bias->shape != std::vector<int64_t>{a.experts} || bias->dtype != logits.dtype)))
    return kernelError("nn.router: scores must be the logits' shape and dtype, the bias [" +
                       llvm::Twine(a.experts) + "] of their dtype");
  a.k = int(k);
  a.groups = int(groups);
  a.groupK = int(groupK);
  a.groupTop = int(groupTop);
  a.rows = a.experts == 0 ? 0 : logits.numElements() / a.experts;
  if (a.rows == 0)
    return llvm::Error::success();
  return dispatchFloatDType(logits.dtype, "nn.router's logits", [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    // Blocks of 64 threads: a step's few thousand tokens then spread over
    // the SMs.
    constexpr int kRouterBlock = 64;
    routerKernel<D><<<gridFor(a.rows, call.ctx, kRouterBlock), kRouterBlock, 0,
                      call.ctx.stream>>>(
        a, static_cast<const StorageOf<D> *>(logits.data),
        bias ? static_cast<const StorageOf<D> *>(bias->data) : nullptr,
        static_cast<StorageOf<D> *>(weights.data), ids.data, ids.dtype == DType::I64,
        static_cast<StorageOf<D> *>(scores.data));
    return cudaError(cudaGetLastError(), "nn.router");
  });
}

llvm::Error launchSort(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 2, 2));
  const Tensor &input = call.inputs[0], &values = call.outputs[0], &indices = call.outputs[1];
  LOOM_ASSIGN_OR_RETURN(bool descending, call.attrs.getBool("descending", false));
  if (input.shape.empty())
    return kernelError("nn.sort: takes a tensor of rank 1 or more, got a scalar");
  const int64_t n = input.shape.back();
  LOOM_RETURN_IF_ERROR(checkRows(input, values, indices, n, "nn.sort"));
  if (n == 0)
    return llvm::Error::success();
  if (n >= (int64_t(1) << 31))
    return kernelError("nn.sort: rows of " + llvm::Twine(n) + " elements are too long (2^31)");
  const int64_t rows = input.numElements() / n;
  const LaunchContext &ctx = call.ctx;
  return dispatchAnyDType(input.dtype, [&](auto tag) -> llvm::Error {
    constexpr DType D = decltype(tag)::value;
    const int items = static_cast<int>(n);
    size_t sortBytes = 0;
    LOOM_RETURN_IF_ERROR(cudaError(
        cub::DeviceRadixSort::SortPairs(nullptr, sortBytes, static_cast<const uint64_t *>(nullptr),
                                        static_cast<uint64_t *>(nullptr),
                                        static_cast<const uint32_t *>(nullptr),
                                        static_cast<uint32_t *>(nullptr), items, 0, 64,
                                        ctx.stream),
        "cub::DeviceRadixSort (size)"));
    auto roundUp = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
    const size_t keyBytes = roundUp(n * sizeof(uint64_t)), posBytes = roundUp(n * sizeof(uint32_t));
    void *scratch = nullptr;
    LOOM_RETURN_IF_ERROR(cudaError(
        cudaMallocAsync(&scratch, 2 * keyBytes + 2 * posBytes + roundUp(sortBytes), ctx.stream),
        "cudaMallocAsync"));
    char *bytes = static_cast<char *>(scratch);
    auto *keysIn = reinterpret_cast<uint64_t *>(bytes);
    auto *keysOut = reinterpret_cast<uint64_t *>(bytes + keyBytes);
    auto *posIn = reinterpret_cast<uint32_t *>(bytes + 2 * keyBytes);
    auto *posOut = reinterpret_cast<uint32_t *>(bytes + 2 * keyBytes + posBytes);
    void *sortScratch = bytes + 2 * keyBytes + 2 * posBytes;
    const auto *in = static_cast<const StorageOf<D> *>(input.data);
    auto *out = static_cast<StorageOf<D> *>(values.data);
    llvm::Error err = llvm::Error::success();
    for (int64_t r = 0; r < rows && !err; ++r) {
      sortKeysKernel<D><<<gridFor(n, ctx), kBlockSize, 0, ctx.stream>>>(n, descending, in + r * n,
                                                                        keysIn, posIn);
      (void)(err = cudaError(cub::DeviceRadixSort::SortPairs(sortScratch, sortBytes, keysIn, keysOut,
                                                      posIn, posOut, items, 0, 64, ctx.stream),
                      "cub::DeviceRadixSort"));
      if (!err)
        sortGatherKernel<D><<<gridFor(n, ctx), kBlockSize, 0, ctx.stream>>>(
            n, posOut, in + r * n, out + r * n, indices.data, indices.dtype == DType::I64, r * n);
    }
    llvm::Error freed = cudaError(cudaFreeAsync(scratch, ctx.stream), "cudaFreeAsync");
    if (err) {
      llvm::consumeError(std::move(freed));
      return err;
    }
    return freed;
  });
}

template <typename Fn> llvm::Error dispatchOffsets(const Tensor &offsets, Fn &&fn) {
  if (offsets.dtype == DType::I64)
    return fn(static_cast<const int64_t *>(offsets.data));
  if (offsets.dtype == DType::I32)
    return fn(static_cast<const int32_t *>(offsets.data));
  return kernelError("offsets must be i32 or i64");
}

/// The first group of a block of E (attr group_start): offsets [G] bound
/// all groups, G >= group_start + E (= E without group_start).
llvm::Expected<int64_t> groupStart(const KernelCall &call, const Tensor &offsets, int64_t E,
                                   const char *kernel) {
  LOOM_ASSIGN_OR_RETURN(int64_t start, call.attrs.getInt("group_start", 0));
  if (offsets.shape.size() != 1 || start < 0 || offsets.shape[0] < start + E ||
      (!call.attrs.has("group_start") && offsets.shape[0] != E))
    return kernelError(llvm::Twine(kernel) + ": offsets must be [G] with G = " + llvm::Twine(E) +
                       " groups + group_start " + llvm::Twine(start) + " or more, got " +
                       cpu::detail::shapeToString(offsets.shape));
  return start;
}

/// Whether every tensor starts 16-byte aligned and the row lengths are
/// multiples of 8 elements (the tensor-core kernels copy 16 bytes at a time).
bool rowsAligned(std::initializer_list<const Tensor *> tensors,
                 std::initializer_list<int64_t> rowLengths) {
  for (const Tensor *t : tensors)
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0)
      return false;
  for (int64_t n : rowLengths)
    if (n % 8 != 0)
      return false;
  return true;
}

llvm::Error launchGroupedMatmul(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 3, 3, 1, 1));
  const Tensor &input = call.inputs[0], &weight = call.inputs[1], &offsets = call.inputs[2];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::GroupedMatmulPlan plan,
                        cpu::detail::checkGroupedMatmul(input, weight, out, call.attrs));
  const int64_t S = plan.rows, K = plan.k, E = plan.groups, N = plan.n;
  const bool transposed = plan.transposed;
  LOOM_ASSIGN_OR_RETURN(int64_t start, groupStart(call, offsets, E, "nn.grouped_matmul"));
  if (S * N == 0)
    return llvm::Error::success();
  const LaunchContext &ctx = call.ctx;
  // bf16 and f16 with 16-byte rows run on tensor cores (128-row tiles),
  // others on CUDA cores.
  const bool tensorCores = (input.dtype == DType::BF16 || input.dtype == DType::F16) &&
                           rowsAligned({&input, &weight, &out}, {K, N});
  const int64_t tileRows = tensorCores ? wg::kM : kTile, tileCols = tensorCores ? wg::kN : kTile;
  const int64_t maxTiles = (S + tileRows - 1) / tileRows + E;
  if (maxTiles > 65535)
    return kernelError("nn.grouped_matmul: " + llvm::Twine(S) + " rows over " + llvm::Twine(E) +
                       " groups are too many tiles for one launch (65535)");
  void *scratch = nullptr;
  LOOM_RETURN_IF_ERROR(cudaError(
      cudaMallocAsync(&scratch, (E + 3) * sizeof(int64_t), ctx.stream), "cudaMallocAsync"));
  auto *tileStart = static_cast<int64_t *>(scratch);
  llvm::Error launched = dispatchFloatDType(input.dtype, "nn.grouped_matmul's input", [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    return dispatchOffsets(offsets, [&](auto *offs) {
      using OffT = std::remove_const_t<std::remove_pointer_t<decltype(offs)>>;
      groupTilesKernel<OffT><<<1, 1, 0, ctx.stream>>>(S, E, offs + start, start > 0, tileRows,
                                                      tileStart);
      zeroUncoveredRows<<<static_cast<unsigned>(std::min<int64_t>(S, 1024)), kBlockSize, 0,
                          ctx.stream>>>(S, N, tileStart + E + 1,
                                        static_cast<StorageOf<D> *>(out.data));
      const dim3 grid(static_cast<unsigned>((N + tileCols - 1) / tileCols),
                      static_cast<unsigned>(maxTiles));
      if constexpr (D == DType::BF16 || D == DType::F16) {
        if (tensorCores) {
          auto launch = [&](auto kernel) {
            LOOM_RETURN_IF_ERROR(cudaError(
                cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     int(wg::kSmemBytes)),
                "cudaFuncSetAttribute"));
            kernel<<<grid, wg::kThreads, wg::kSmemBytes, ctx.stream>>>(
                S, K, N, E, static_cast<const uint16_t *>(input.data),
                static_cast<const uint16_t *>(weight.data), offs + start, start > 0,
                static_cast<const int64_t *>(tileStart), static_cast<uint16_t *>(out.data));
            return cudaError(cudaGetLastError(), "nn.grouped_matmul");
          };
          return transposed ? launch(wg::groupedMatmul<D, OffT, true>)
                            : launch(wg::groupedMatmul<D, OffT, false>);
        }
      }
      groupedMatmulTiled<D, OffT><<<grid, kTileThreads, 0, ctx.stream>>>(
          S, K, N, E, static_cast<const StorageOf<D> *>(input.data),
          static_cast<const StorageOf<D> *>(weight.data), offs + start, start > 0, tileStart,
          transposed ? 1 : N, transposed ? K : 1, static_cast<StorageOf<D> *>(out.data));
      return cudaError(cudaGetLastError(), "nn.grouped_matmul");
    });
  });
  llvm::Error freed = cudaError(cudaFreeAsync(scratch, ctx.stream), "cudaFreeAsync");
  if (launched) {
    llvm::consumeError(std::move(freed));
    return launched;
  }
  return freed;
}

llvm::Error launchGroupedMatmulWeightGrad(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 3, 3, 1, 1));
  const Tensor &input = call.inputs[0], &grad = call.inputs[1], &offsets = call.inputs[2];
  const Tensor &out = call.outputs[0];
  if (input.shape.size() != 2 || grad.shape.size() != 2 || out.shape.size() != 3 ||
      grad.shape[0] != input.shape[0] || input.dtype != grad.dtype ||
      !cpu::detail::weightGradDTypeOk(input.dtype, out.dtype) ||
      out.shape[1] != input.shape[1] || out.shape[2] != grad.shape[1])
    return kernelError("nn.grouped_matmul_weight_grad: takes input [S, K], grad [S, N], offsets "
                       "[G] and gives [E, K, N], one float dtype (or f32 from bf16 or f16)");
  const bool widened = out.dtype != input.dtype;
  const int64_t S = input.shape[0], K = input.shape[1], E = out.shape[0], N = out.shape[2];
  LOOM_ASSIGN_OR_RETURN(int64_t start,
                        groupStart(call, offsets, E, "nn.grouped_matmul_weight_grad"));
  if (E * K * N == 0)
    return llvm::Error::success();
  if ((K + kTile - 1) / kTile > 65535 || E > 65535)
    return kernelError("nn.grouped_matmul_weight_grad: too many tiles for one launch");
  return dispatchFloatDType(input.dtype, "nn.grouped_matmul_weight_grad's input", [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    return dispatchOffsets(offsets, [&](auto *offs) {
      using OffT = std::remove_const_t<std::remove_pointer_t<decltype(offs)>>;
      // The result in D, or widened to f32.
      auto run = [&](auto outTag) -> llvm::Error {
        constexpr DType O = decltype(outTag)::value;
        if constexpr (D == DType::BF16 || D == DType::F16) {
          if (rowsAligned({&input, &grad, &out}, {K, N})) {
            const dim3 grid(static_cast<unsigned>((N + wg::kN - 1) / wg::kN),
                            static_cast<unsigned>((K + wg::kM - 1) / wg::kM),
                            static_cast<unsigned>(E));
            LOOM_RETURN_IF_ERROR(cudaError(
                cudaFuncSetAttribute(wg::groupedWeightGrad<D, O, OffT>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     int(wg::kSmemBytes)),
                "cudaFuncSetAttribute"));
            wg::groupedWeightGrad<D, O, OffT><<<grid, wg::kThreads, wg::kSmemBytes,
                                                call.ctx.stream>>>(
                S, K, N, static_cast<const uint16_t *>(input.data),
                static_cast<const uint16_t *>(grad.data), offs + start, start > 0,
                static_cast<StorageOf<O> *>(out.data));
            return cudaError(cudaGetLastError(), "nn.grouped_matmul_weight_grad");
          }
        }
        const dim3 grid(static_cast<unsigned>((N + kTile - 1) / kTile),
                        static_cast<unsigned>((K + kTile - 1) / kTile), static_cast<unsigned>(E));
        groupedWeightGradTiled<D, O, OffT><<<grid, kTileThreads, 0, call.ctx.stream>>>(
            S, K, N, E, static_cast<const StorageOf<D> *>(input.data),
            static_cast<const StorageOf<D> *>(grad.data), offs + start, start > 0,
            static_cast<StorageOf<O> *>(out.data));
        return cudaError(cudaGetLastError(), "nn.grouped_matmul_weight_grad");
      };
      if constexpr (D == DType::BF16 || D == DType::F16)
        if (widened)
          return run(DTypeTag<DType::F32>{});
      return run(DTypeTag<D>{});
    });
  });
}

} // namespace

void registerMoeKernels(KernelRegistry &registry) {
  registry.add(KernelId::Router, launchRouter);
  registry.add(KernelId::Topk, launchTopk);
  registry.add(KernelId::Sort, launchSort);
  registry.add(KernelId::GroupedMatmul, launchGroupedMatmul);
  registry.add(KernelId::GroupedMatmulWeightGrad, launchGroupedMatmulWeightGrad);
}

} // namespace loom::cuda
