// FP8 quantization on CUDA (dialects/nn/NNFp8Ops.td): nn.quantize,
// nn.dequantize, nn.amax and nn.fp8_scale, bit for bit the CPU reference
// (kernels/cpu/Fp8.cpp): the same f32 division, clamp and rounding. A
// thread maps its element to its tile from the tensor's shape and the
// tiling's (one scale, or a divisor per dim).
//
// amax takes each tile's maximum with integer atomicMax on the bits of |x|
// (non-negative floats order as their bits; a NaN's bits exceed infinity's,
// so a NaN wins), which is exact and independent of order; a last pass
// writes the canonical quiet NaN the CPU writes.

#include "kernels/cuda/DeviceSupport.cuh"
#include "kernels/cuda/Fp8Epilogue.cuh"
#include "kernels/cpu/OperandChecks.h"
#include "runtime/abi/Fp8Tiling.h"

#include <algorithm>
#include <cstdint>

namespace loom::cuda {
namespace {

constexpr int kMaxFp8Rank = 8;

/// A tensor's shape and its tiling (rank 0: one tile).
struct TileMap {
  int rank = 0;
  int64_t shape[kMaxFp8Rank] = {};
  int64_t tileSize[kMaxFp8Rank] = {}; // elements a tile spans in each dim
  int64_t tiles[kMaxFp8Rank] = {};    // tiles in each dim

  __device__ int64_t tileOf(int64_t e) const {
    if (rank == 0)
      return 0;
    int64_t tile = 0, stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t c = e % shape[d];
      e /= shape[d];
      tile += (c / tileSize[d]) * stride;
      stride *= tiles[d];
    }
    return tile;
  }
};

llvm::Expected<TileMap> tileMap(const Tensor &tensor, const Tensor &tiling) {
  TileMap m;
  if (tiling.shape.empty())
    return m;
  if (tensor.shape.size() > size_t(kMaxFp8Rank))
    return kernelError("FP8 tilings of rank above " + llvm::Twine(kMaxFp8Rank) +
                       " are not supported on CUDA, got rank " +
                       llvm::Twine(tensor.shape.size()));
  m.rank = int(tensor.shape.size());
  for (int d = 0; d < m.rank; ++d) {
    m.shape[d] = tensor.shape[d];
    m.tiles[d] = tiling.shape[d];
    m.tileSize[d] = fp8TileSize(tensor.shape[d], tiling.shape[d]);
  }
  return m;
}

template <DType In, DType Out>
__global__ void quantizeKernel(const StorageOf<In> *x, const float *scale, StorageOf<Out> *q,
                               int64_t n, TileMap map, float limit) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = dev::Elem<In>::load(x[i]) / scale[map.tileOf(i)];
    if (!isnan(v))
      v = fminf(fmaxf(v, -limit), limit);
    q[i] = dev::Elem<Out>::store(v);
  }
}

/// One scale for the tensor, and the transposed copy beside q: 32 x 32
/// tiles through shared memory, so both writes are coalesced. Per matrix
/// (blockIdx.z) x is [rows, cols]; qT is [cols, rows].
constexpr int kTile = 32, kTileRows = 8;
template <DType In, DType Out>
__global__ void quantizeTransposeKernel(const StorageOf<In> *x, const float *scale,
                                        StorageOf<Out> *q, StorageOf<Out> *qT, int64_t rows,
                                        int64_t cols, float limit) {
  __shared__ StorageOf<Out> tile[kTile][kTile + 1];
  const int64_t matrix = blockIdx.z, base = matrix * rows * cols;
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const float s = *scale;
  for (int dy = threadIdx.y; dy < kTile; dy += kTileRows) {
    const int64_t r = r0 + dy, c = c0 + threadIdx.x;
    if (r < rows && c < cols) {
      float v = dev::Elem<In>::load(x[base + r * cols + c]) / s;
      if (!isnan(v))
        v = fminf(fmaxf(v, -limit), limit);
      const StorageOf<Out> stored = dev::Elem<Out>::store(v);
      q[base + r * cols + c] = stored;
      tile[dy][threadIdx.x] = stored;
    }
  }
  __syncthreads();
  for (int dy = threadIdx.y; dy < kTile; dy += kTileRows) {
    const int64_t c = c0 + dy, r = r0 + threadIdx.x;
    if (r < rows && c < cols)
      qT[base + c * rows + r] = tile[threadIdx.x][dy];
  }
}

/// A tiled quantization with its transposed copy: q's scale from `map` (a
/// tiling of x), qT's from `mapT` (a tiling of the copy), through 32 x 32
/// tiles of x in shared memory so both writes are coalesced.
template <DType In, DType Out>
__global__ void quantizeTransposeTiledKernel(const StorageOf<In> *x, const float *scale,
                                             const float *scaleT, StorageOf<Out> *q,
                                             StorageOf<Out> *qT, int64_t rows, int64_t cols,
                                             TileMap map, TileMap mapT, float limit) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t matrix = blockIdx.z, base = matrix * rows * cols;
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  for (int dy = threadIdx.y; dy < kTile; dy += kTileRows) {
    const int64_t r = r0 + dy, c = c0 + threadIdx.x;
    if (r < rows && c < cols) {
      const int64_t e = base + r * cols + c;
      const float x0 = dev::Elem<In>::load(x[e]);
      float v = x0 / scale[map.tileOf(e)];
      if (!isnan(v))
        v = fminf(fmaxf(v, -limit), limit);
      q[e] = dev::Elem<Out>::store(v);
      tile[dy][threadIdx.x] = x0;
    }
  }
  __syncthreads();
  for (int dy = threadIdx.y; dy < kTile; dy += kTileRows) {
    const int64_t c = c0 + dy, r = r0 + threadIdx.x;
    if (r < rows && c < cols) {
      const int64_t e = base + c * rows + r;
      float v = tile[threadIdx.x][dy] / scaleT[mapT.tileOf(e)];
      if (!isnan(v))
        v = fminf(fmaxf(v, -limit), limit);
      qT[e] = dev::Elem<Out>::store(v);
    }
  }
}

/// The same, 64 x 64 tiles, four consecutive elements a thread: one 8- or
/// 16-byte load, one 4-byte store of q, one 4-byte store of qT (rows and
/// cols multiples of 4, pointers aligned).
constexpr int kWideTile = 64;
template <DType In> struct Vec4Of;
template <> struct Vec4Of<DType::F32> { using type = float4; };
template <> struct Vec4Of<DType::BF16> { using type = uint2; };
template <> struct Vec4Of<DType::F16> { using type = uint2; };

template <DType In, DType Out>
__global__ void __launch_bounds__(256)
    quantizeTransposeWideKernel(const StorageOf<In> *x, const float *scale, StorageOf<Out> *q,
                                StorageOf<Out> *qT, int64_t rows, int64_t cols, float limit) {
  using Vec = typename Vec4Of<In>::type;
  __shared__ uint8_t tile[kWideTile][kWideTile + 4];
  const int64_t base = int64_t(blockIdx.z) * rows * cols;
  const int64_t r0 = int64_t(blockIdx.y) * kWideTile, c0 = int64_t(blockIdx.x) * kWideTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16; // 16 x 16 threads
  const float s = *scale;
  for (int dy = ty; dy < kWideTile; dy += 16) {
    const int64_t r = r0 + dy, c = c0 + 4 * tx;
    if (r < rows && c < cols) {
      const Vec v = *reinterpret_cast<const Vec *>(x + base + r * cols + c);
      const StorageOf<In> *e = reinterpret_cast<const StorageOf<In> *>(&v);
      uint32_t packed = 0;
      for (int j = 0; j < 4; ++j) {
        float f = dev::Elem<In>::load(e[j]) / s;
        if (!isnan(f))
          f = fminf(fmaxf(f, -limit), limit);
        const uint8_t b = dev::Elem<Out>::store(f);
        tile[dy][4 * tx + j] = b;
        packed |= uint32_t(b) << (8 * j);
      }
      *reinterpret_cast<uint32_t *>(q + base + r * cols + c) = packed;
    }
  }
  __syncthreads();
  for (int dy = ty; dy < kWideTile; dy += 16) {
    const int64_t c = c0 + dy, r = r0 + 4 * tx;
    if (r < rows && c < cols) {
      uint32_t packed = 0;
      for (int j = 0; j < 4; ++j)
        packed |= uint32_t(tile[4 * tx + j][dy]) << (8 * j);
      *reinterpret_cast<uint32_t *>(qT + base + c * rows + r) = packed;
    }
  }
}

/// A rank-2 tiling's tiles as shifts (tile sizes are powers of two): the
/// scale of element (r, c) is scale[(r >> rowShift) * cols + (c >> colShift)].
struct TileShifts {
  int rowShift = 0, colShift = 0;
  int64_t cols = 1;
};

TileShifts tileShifts(const TileMap &map) {
  TileShifts t;
  if (map.rank == 0) { // one scale: every element's index is 0
    t.rowShift = t.colShift = 62;
    return t;
  }
  while ((int64_t(1) << t.rowShift) < map.tileSize[map.rank - 2])
    ++t.rowShift;
  while ((int64_t(1) << t.colShift) < map.tileSize[map.rank - 1])
    ++t.colShift;
  t.cols = map.tiles[map.rank - 1];
  return t;
}

/// x / s rounded to nearest, from r = 1 / s (rounded): q0 = x·r, then one
/// correction with the exact remainder x − q0·s (Markstein). This is the
/// IEEE quotient for every normal x and s within [2^-100, 2^90] whose
/// quotient is at least 2^-100 in magnitude (checked exhaustively over
/// bf16 x against thousands of scales); below that both are far under
/// FP8's smallest subnormal (2^-16) and convert to the same signed zero.
/// Overflow, NaN and infinity take the division itself; a zero keeps its
/// sign.
__device__ inline float divideByScale(float x, float s, float r) {
  const float q0 = __fmul_rn(x, r);
  if (!isfinite(q0))
    return __fdiv_rn(x, s);
  // The sign of q0, which is the quotient's: for x = -0 the correction
  // would add +0 to -0.
  return copysignf(__fmaf_rn(__fmaf_rn(-q0, s, x), r, q0), q0);
}

/// Whether divideByScale may divide by s.
__device__ inline bool reciprocalExact(float s) {
  const float a = fabsf(s);
  return a >= 0x1p-100f && a <= 0x1p90f;
}

/// The quantization with its transposed copy, any tiling (kOne: one scale
/// for x and the copy), 64 x 64 tiles of x through shared memory, 16
/// elements a thread each way: the loads of x and the stores of q and qT
/// are 16 bytes (rows and cols multiples of 16, pointers aligned to 16
/// bytes). Under one scale the copy is the transpose of q's bytes; a tiled
/// copy divides x's values (kept in shared memory as loaded) by its own
/// scales. A run of 16 elements inside one tile of its scale (tiles at
/// least 16 wide) divides by one scale through its reciprocal
/// (divideByScale). blockIdx.z is the matrix of a batch.
template <DType In, DType Out, bool kOne>
__global__ void __launch_bounds__(256)
    quantizeTranspose16Kernel(const StorageOf<In> *x, const float *scale, const float *scaleT,
                              StorageOf<Out> *q, StorageOf<Out> *qT, int64_t rows, int64_t cols,
                              TileShifts d, TileShifts t, float limit) {
  using S = StorageOf<In>;
  constexpr int kPer = 16 / int(sizeof(S)); // elements a 16-byte load
  // A row of the tile: 64 bytes of q, or 64 elements of x and 16 bytes of
  // padding (so a quarter warp's 16-byte stores of two rows miss each
  // other's banks).
  constexpr int kStride = kOne ? kWideTile : kWideTile * int(sizeof(S)) + 16;
  __shared__ alignas(16) uint8_t tile[kWideTile * kStride];
  const int64_t base = int64_t(blockIdx.z) * rows * cols;
  const int64_t r0 = int64_t(blockIdx.y) * kWideTile, c0 = int64_t(blockIdx.x) * kWideTile;
  // The 16 elements v of a run, divided by the scales of `srow` at
  // positions p0.., each clamped and converted into w.
  // Two quotients a conversion: saturating to the format's largest value
  // is the clamp the CPU applies before rounding (infinities included), so
  // only a NaN takes the conversion one value at a time.
  auto quantizeRun = [limit](const float *v, const float *srow, int64_t p0, int shift,
                             uint32_t *w) {
    constexpr __nv_fp8_interpretation_t kind = Out == DType::F8E5M2 ? __NV_E5M2 : __NV_E4M3;
    const float s0 = srow[p0 >> shift];
    const bool one = shift >= 4 && reciprocalExact(s0);
    const float r = 1.0f / s0;
    if (one) {
      // The run's 16 products first, then one test that all are finite (no
      // overflow, no NaN or infinity in x): then every quotient is
      // divideByScale's correction without its per-element branch, written
      // q0 - (q0 s - x) r so that x = -0 keeps its sign without a copysign,
      // and no pair needs the NaN path. Else the general path below.
      float q0[16];
      bool finite = true;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        q0[j] = __fmul_rn(v[j], r);
        finite = finite & (fabsf(q0[j]) <= 0x1.fffffep127f);
      }
      if (finite) {
#pragma unroll
        for (int j = 0; j < 16; j += 2) {
          const float2 f =
              make_float2(__fmaf_rn(-__fmaf_rn(q0[j], s0, -v[j]), r, q0[j]),
                          __fmaf_rn(-__fmaf_rn(q0[j + 1], s0, -v[j + 1]), r, q0[j + 1]));
          w[j / 4] |= uint32_t(__nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, kind)) << (8 * (j % 4));
        }
        return;
      }
    }
    auto quotient = [&](int j) {
      return one ? divideByScale(v[j], s0, r) : __fdiv_rn(v[j], srow[(p0 + j) >> shift]);
    };
    auto single = [limit](float f) {
      if (!isnan(f))
        f = fminf(fmaxf(f, -limit), limit);
      return uint32_t(dev::Elem<Out>::store(f));
    };
#pragma unroll
    for (int j = 0; j < 16; j += 2) {
      const float2 f = make_float2(quotient(j), quotient(j + 1));
      const uint32_t pair = !isnan(f.x) && !isnan(f.y)
                                ? uint32_t(__nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, kind))
                                : single(f.x) | single(f.y) << 8;
      w[j / 4] |= pair << (8 * (j % 4));
    }
  };
  {
    const int dy = threadIdx.x / 4, tx = threadIdx.x % 4; // 64 rows x 4 runs
    const int64_t r = r0 + dy, c = c0 + 16 * tx;
    if (r < rows && c < cols) {
      uint4 raw[16 / kPer];
      const uint4 *src = reinterpret_cast<const uint4 *>(x + base + r * cols + c);
      float v[16];
#pragma unroll
      for (int k = 0; k < 16 / kPer; ++k) {
        raw[k] = src[k];
        const S *e = reinterpret_cast<const S *>(&raw[k]);
#pragma unroll
        for (int j = 0; j < kPer; ++j)
          v[k * kPer + j] = dev::Elem<In>::load(e[j]);
      }
      uint32_t w[4] = {0, 0, 0, 0};
      quantizeRun(v, scale + (r >> d.rowShift) * d.cols, c, d.colShift, w);
      const uint4 packed = make_uint4(w[0], w[1], w[2], w[3]);
      *reinterpret_cast<uint4 *>(q + base + r * cols + c) = packed;
      if constexpr (kOne) {
        *reinterpret_cast<uint4 *>(&tile[dy * kStride + 16 * tx]) = packed;
      } else {
#pragma unroll
        for (int k = 0; k < 16 / kPer; ++k)
          *reinterpret_cast<uint4 *>(&tile[dy * kStride + (16 * tx + k * kPer) * sizeof(S)]) =
              raw[k];
      }
    }
  }
  __syncthreads();
  {
    const int cc = threadIdx.x % kWideTile, tx = threadIdx.x / kWideTile; // 64 columns x 4 runs
    const int64_t c = c0 + cc, r = r0 + 16 * tx;
    if (c < cols && r < rows) {
      uint32_t w[4] = {0, 0, 0, 0};
      if constexpr (kOne) {
#pragma unroll
        for (int j = 0; j < 16; ++j)
          w[j / 4] |= uint32_t(tile[(16 * tx + j) * kStride + cc]) << (8 * (j % 4));
      } else {
        float v[16];
#pragma unroll
        for (int j = 0; j < 16; ++j)
          v[j] = dev::Elem<In>::load(
              *reinterpret_cast<const S *>(&tile[(16 * tx + j) * kStride + cc * sizeof(S)]));
        quantizeRun(v, scaleT + (c >> t.rowShift) * t.cols, r, t.colShift, w);
      }
      *reinterpret_cast<uint4 *>(qT + base + c * rows + r) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

template <DType In> __device__ inline unsigned absMaxBits(const StorageOf<In> *e, int count);


/// nn.quantize_tiles where every tile of x and of its copy lies in one
/// 128 x 128 block of x (QuantizeTilesShape): a thread block per 128 x 128
/// block of x [rows, cols] (rows and cols multiples of 16), read once into
/// shared memory; each row's and column's amax, the block's, the scales,
/// then q (16 elements a thread along rows) and qT (16 along columns), as
/// quantizeTranspose16Kernel divides. Row tiles (rowTile == 1) take their
/// row's amax, else the block's; the copy's row tiles (copyRowTile == 1) a
/// column's, else the block's.
constexpr int kQBlock = int(kFp8Block);
template <DType In, DType Out>
__global__ void __launch_bounds__(256, 2)
    quantizeTilesKernel(const StorageOf<In> *x, StorageOf<Out> *q, StorageOf<Out> *qT,
                        float *scale, float *scaleT, int64_t rows, int64_t cols, int64_t rowTile,
                        int64_t colTile, int64_t scaleCols, int64_t copyRowTile,
                        int64_t copyColTile, int64_t scaleTCols, float headroom, float limit) {
  using S = StorageOf<In>;
  constexpr int kPer = 16 / int(sizeof(S));
  constexpr int kVecs = kQBlock / kPer;                        // 16-byte vectors a row
  constexpr int kStride = kQBlock * int(sizeof(S)) + 16;       // bytes a row, padded
  extern __shared__ __align__(16) uint8_t tile[];              // kQBlock rows
  __shared__ unsigned rowMax[kQBlock], colMax[kQBlock];
  __shared__ float rowScale[kQBlock], colScale[kQBlock];
  __shared__ unsigned blockMax;
  const int64_t r0 = int64_t(blockIdx.y) * kQBlock, c0 = int64_t(blockIdx.x) * kQBlock;
  const int tid = threadIdx.x;
  if (tid < kQBlock)
    rowMax[tid] = colMax[tid] = 0;
  if (tid == 0)
    blockMax = 0;
  __syncthreads();
  // x's block into shared memory (zeros past the edges), rows' amax: a
  // row's kVecs vectors are consecutive lanes (16 or 32), reduced by
  // shuffles.
  static_assert(kVecs == 16 || kVecs == 32, "a row is half a warp or a warp");
  constexpr int kLoads = kQBlock * kVecs / 256; // 16-byte loads a thread, all issued first
  uint4 w[kLoads];
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int i = tid + 256 * j, r = i / kVecs, v = i % kVecs;
    const int64_t gr = r0 + r, gc = c0 + int64_t(v) * kPer;
    w[j] = gr < rows && gc < cols ? *reinterpret_cast<const uint4 *>(x + gr * cols + gc)
                                  : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int i = tid + 256 * j, r = i / kVecs, v = i % kVecs;
    *reinterpret_cast<uint4 *>(&tile[r * kStride + v * 16]) = w[j];
    unsigned m = absMaxBits<In>(reinterpret_cast<const S *>(&w[j]), kPer);
    for (int off = kVecs / 2; off > 0; off /= 2)
      m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (v == 0)
      rowMax[r] = m;
  }
  __syncthreads();
  // Columns' amax: a thread per column and half the rows.
  {
    const int c = tid % kQBlock, h = tid / kQBlock;
    unsigned m = 0;
#pragma unroll 16
    for (int r = h * (kQBlock / 2); r < (h + 1) * (kQBlock / 2); ++r)
      m = max(m, __float_as_uint(fabsf(dev::Elem<In>::load(
                     *reinterpret_cast<const S *>(&tile[r * kStride + c * sizeof(S)])))));
    if (m != 0)
      atomicMax(&colMax[c], m);
    if (tid < kQBlock && rowMax[tid] != 0)
      atomicMax(&blockMax, rowMax[tid]);
  }
  __syncthreads();
  // The scales: threads 0..127 the rows', 128..255 the columns'.
  if (tid < kQBlock) {
    const int r = tid;
    const float sc = scaleOfAmax(rowTile == 1 ? rowMax[r] : blockMax, headroom, limit);
    rowScale[r] = sc;
    const int64_t gr = r0 + r;
    if (gr < rows && (rowTile == 1 || gr % rowTile == 0))
      scale[(gr / rowTile) * scaleCols + c0 / colTile] = sc;
  } else {
    const int c = tid - kQBlock;
    const float sc = scaleOfAmax(copyRowTile == 1 ? colMax[c] : blockMax, headroom, limit);
    colScale[c] = sc;
    const int64_t gc = c0 + c;
    if (gc < cols && (copyRowTile == 1 || gc % copyRowTile == 0))
      scaleT[(gc / copyRowTile) * scaleTCols + r0 / copyColTile] = sc;
  }
  __syncthreads();
  // A scale from this block's data bounds every |x| / s by the format's
  // largest value (or it is NaN: an amax that is not finite), so a finite,
  // exactly invertible scale needs no overflow or NaN path: the quotient
  // (divideByScale without its check) goes straight to the saturating
  // conversion, two values an instruction (a clamp then rounding, as the
  // CPU computes, gives the same bits).
  auto quantizeRun = [limit](const float *v, float s0, uint32_t *w) {
    if (reciprocalExact(s0)) {
      const float r = 1.0f / s0;
      constexpr __nv_fp8_interpretation_t kind = Out == DType::F8E5M2 ? __NV_E5M2 : __NV_E4M3;
#pragma unroll
      for (int j = 0; j < 16; j += 2) {
        float2 f;
        const float q0 = __fmul_rn(v[j], r), q1 = __fmul_rn(v[j + 1], r);
        // q0 - (q0 s - x) r: x = -0 keeps its sign without a copysign.
        f.x = __fmaf_rn(-__fmaf_rn(q0, s0, -v[j]), r, q0);
        f.y = __fmaf_rn(-__fmaf_rn(q1, s0, -v[j + 1]), r, q1);
        w[j / 4] |= uint32_t(__nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, kind)) << (8 * (j % 4));
      }
      return;
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      float f = __fdiv_rn(v[j], s0);
      if (!isnan(f))
        f = fminf(fmaxf(f, -limit), limit);
      w[j / 4] |= uint32_t(dev::Elem<Out>::store(f)) << (8 * (j % 4));
    }
  };
  // q: runs of 16 along a row, 8 threads a row.
  for (int i = tid; i < kQBlock * (kQBlock / 16); i += blockDim.x) {
    const int r = i / (kQBlock / 16), k = i % (kQBlock / 16);
    const int64_t gr = r0 + r, gc = c0 + 16 * k;
    if (gr >= rows || gc >= cols)
      continue;
    float v[16];
#pragma unroll
    for (int u = 0; u < 16 / kPer; ++u) {
      const uint4 raw = *reinterpret_cast<const uint4 *>(
          &tile[r * kStride + (16 * k + u * kPer) * sizeof(S)]);
      const S *e = reinterpret_cast<const S *>(&raw);
#pragma unroll
      for (int j = 0; j < kPer; ++j)
        v[u * kPer + j] = dev::Elem<In>::load(e[j]);
    }
    uint32_t w[4] = {0, 0, 0, 0};
    quantizeRun(v, rowScale[r], w);
    *reinterpret_cast<uint4 *>(q + gr * cols + gc) = make_uint4(w[0], w[1], w[2], w[3]);
  }
  // qT: runs of 16 along a column of x, a thread a column.
  for (int i = tid; i < kQBlock * (kQBlock / 16); i += blockDim.x) {
    const int c = i % kQBlock, k = i / kQBlock;
    const int64_t gc = c0 + c, gr = r0 + 16 * k;
    if (gr >= rows || gc >= cols)
      continue;
    float v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j)
      v[j] = dev::Elem<In>::load(
          *reinterpret_cast<const S *>(&tile[(16 * k + j) * kStride + c * sizeof(S)]));
    uint32_t w[4] = {0, 0, 0, 0};
    quantizeRun(v, colScale[c], w);
    *reinterpret_cast<uint4 *>(qT + gc * rows + gr) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

/// amax of x [rows, cols] in the tiles of its transpose: qT [cols, rows]
/// tiled by `tiles` (rank 2) -- an atomic per element, for the shapes
/// quantizeTilesKernel does not take.
template <DType In>
__global__ void amaxTransposedKernel(const StorageOf<In> *x, unsigned *amaxBits, int64_t rows,
                                     int64_t cols, int64_t tileRowsT, int64_t tileColsT,
                                     int64_t tilesColsT) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols; // x(r, c) is qT(c, r)
    const unsigned m = __float_as_uint(fabsf(dev::Elem<In>::load(x[i])));
    if (m != 0)
      atomicMax(&amaxBits[(c / tileRowsT) * tilesColsT + r / tileColsT], m);
  }
}

/// The tiled quantization with its transposed copy, 64 x 64 tiles of x
/// through shared memory (as f32, so the copy divides the value itself by
/// its own scale), four consecutive elements a thread: rank 2, rows and
/// cols multiples of 4.
template <DType In, DType Out>
__global__ void __launch_bounds__(256)
    quantizeTransposeTiledWideKernel(const StorageOf<In> *x, const float *scale,
                                     const float *scaleT, StorageOf<Out> *q, StorageOf<Out> *qT,
                                     int64_t rows, int64_t cols, TileShifts d, TileShifts t,
                                     float limit) {
  using Vec = typename Vec4Of<In>::type;
  __shared__ float tile[kWideTile][kWideTile + 1];
  const int64_t r0 = int64_t(blockIdx.y) * kWideTile, c0 = int64_t(blockIdx.x) * kWideTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16; // 16 x 16 threads
  for (int dy = ty; dy < kWideTile; dy += 16) {
    const int64_t r = r0 + dy, c = c0 + 4 * tx;
    if (r < rows && c < cols) {
      const Vec v = *reinterpret_cast<const Vec *>(x + r * cols + c);
      const StorageOf<In> *e = reinterpret_cast<const StorageOf<In> *>(&v);
      const float *srow = scale + (r >> d.rowShift) * d.cols;
      uint32_t packed = 0;
      for (int j = 0; j < 4; ++j) {
        const float x0 = dev::Elem<In>::load(e[j]);
        tile[dy][4 * tx + j] = x0;
        float f = x0 / srow[(c + j) >> d.colShift];
        if (!isnan(f))
          f = fminf(fmaxf(f, -limit), limit);
        packed |= uint32_t(dev::Elem<Out>::store(f)) << (8 * j);
      }
      *reinterpret_cast<uint32_t *>(q + r * cols + c) = packed;
    }
  }
  __syncthreads();
  for (int dy = ty; dy < kWideTile; dy += 16) {
    const int64_t c = c0 + dy, r = r0 + 4 * tx;
    if (r < rows && c < cols) {
      const float *srow = scaleT + (c >> t.rowShift) * t.cols;
      uint32_t packed = 0;
      for (int j = 0; j < 4; ++j) {
        float f = tile[4 * tx + j][dy] / srow[(r + j) >> t.colShift];
        if (!isnan(f))
          f = fminf(fmaxf(f, -limit), limit);
        packed |= uint32_t(dev::Elem<Out>::store(f)) << (8 * j);
      }
      *reinterpret_cast<uint32_t *>(qT + c * rows + r) = packed;
    }
  }
}

/// The largest |x| bits of one storage word of 2-byte or 4-byte elements.
template <DType In> __device__ inline unsigned absMaxBits(const StorageOf<In> *e, int count) {
  unsigned m = 0;
  for (int j = 0; j < count; ++j)
    m = max(m, __float_as_uint(fabsf(dev::Elem<In>::load(e[j]))));
  return m;
}


/// The block's maximum of each thread's `m`, then one atomicMax: every
/// block's atomic goes to the same word, so there are few blocks
/// (amaxWholeBlocks) and one atomic each, not one a warp (same-address
/// atomics serialize: tens of thousands of them cost more than the read).
__device__ inline void blockMaxToSlot(unsigned m, unsigned *slot) {
  m = blockMaximum(m);
  if (threadIdx.x == 0 && m != 0)
    atomicMax(slot, m);
}

/// Where a whole-tensor amax goes when one launch finishes it: the
/// stream's counters (LaunchContext::counters; [0] the maximum so far, [1]
/// the blocks done), the amax (or null) and the scale nn.fp8_scale takes of
/// it (or null).
struct AmaxFinish {
  unsigned *counters = nullptr;
  float *amax = nullptr;
  float *scale = nullptr;
  float headroom = 1.0f, limit = 448.0f;
};

/// The block's maximum into the counters; the last block to arrive writes
/// the amax (a NaN as the canonical quiet NaN) and its scale, and leaves
/// the counters zero (atomicInc wraps the count to 0 at the last block).
__device__ inline void blockMaxFinish(unsigned m, const AmaxFinish &f) {
  m = blockMaximum(m);
  if (threadIdx.x != 0)
    return;
  if (m != 0)
    atomicMax(&f.counters[0], m);
  __threadfence();
  if (atomicInc(&f.counters[1], gridDim.x - 1) != gridDim.x - 1)
    return;
  unsigned bits = atomicExch(&f.counters[0], 0u);
  if (bits > 0x7f800000u)
    bits = 0x7fc00000u;
  if (f.amax)
    *f.amax = __uint_as_float(bits);
  if (f.scale)
    *f.scale = scaleOfAmax(bits, f.headroom, f.limit);
}

/// One amax for the whole tensor, 16 bytes a load (n16 such vectors; the
/// tail of n past them is read one element at a time by block 0).
template <DType In, bool Finish>
__global__ void amaxWholeWideKernel(const StorageOf<In> *x, unsigned *amaxBits, int64_t n16,
                                    int64_t n, AmaxFinish finish) {
  constexpr int kPer = 16 / int(sizeof(StorageOf<In>));
  const uint4 *xv = reinterpret_cast<const uint4 *>(x);
  unsigned m = 0;
  // Four loads in flight a thread before their maxima (the grid holds a
  // few blocks an SM: one load at a time leaves the memory system idle).
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      v[u] = xv[i + u * stride];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      m = max(m, absMaxBits<In>(reinterpret_cast<const StorageOf<In> *>(&v[u]), kPer));
  }
  for (; i < n16; i += stride) {
    const uint4 v = xv[i];
    m = max(m, absMaxBits<In>(reinterpret_cast<const StorageOf<In> *>(&v), kPer));
  }
  if (blockIdx.x == 0)
    for (int64_t i = n16 * kPer + threadIdx.x; i < n; i += blockDim.x)
      m = max(m, __float_as_uint(fabsf(dev::Elem<In>::load(x[i]))));
  if constexpr (Finish)
    blockMaxFinish(m, finish);
  else
    blockMaxToSlot(m, amaxBits);
}

/// Blocks for a whole-tensor amax: a few per multiprocessor, enough to keep
/// the loads in flight, few enough that their atomics cost nothing.
inline unsigned amaxWholeBlocks(int64_t vectors, const LaunchContext &ctx) {
  const int64_t needed = (vectors + kBlockSize - 1) / kBlockSize;
  const int64_t cap = int64_t(ctx.multiprocessors > 0 ? ctx.multiprocessors : 132) * 4;
  return unsigned(std::max<int64_t>(1, std::min(needed, cap)));
}

/// One amax for the whole tensor: each thread's maximum of |x| bits, then
/// the block's, then one atomicMax per block.
template <DType In>
__global__ void amaxWholeKernel(const StorageOf<In> *x, unsigned *amaxBits, int64_t n) {
  unsigned m = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    m = max(m, __float_as_uint(fabsf(dev::Elem<In>::load(x[i]))));
  blockMaxToSlot(m, amaxBits);
}

template <DType In, DType Out>
__global__ void dequantizeKernel(const StorageOf<In> *q, const float *scale, StorageOf<Out> *x,
                                 int64_t n, TileMap map) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = __fmul_rn(dev::Elem<In>::load(q[i]), scale[map.tileOf(i)]);
    x[i] = dev::Elem<Out>::store(v);
  }
}

template <DType In>
__global__ void amaxKernel(const StorageOf<In> *x, unsigned *amaxBits, int64_t n, TileMap map) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = fabsf(dev::Elem<In>::load(x[i]));
    atomicMax(&amaxBits[map.tileOf(i)], __float_as_uint(v));
  }
}

/// amax over tiles of one row and `tileCols` columns of x [rows, cols]
/// (rank-2 tilings whose tiles are row segments); tiles spanning several
/// rows take the max over their rows' segments. kLanes lanes take a
/// segment: with kVec16 (tileCols and cols multiples of a 16-byte vector,
/// x aligned), 8 lanes reading 16 bytes a load (a 1 x 128 bf16 tile is one
/// load a lane); else a warp reading an element a lane.
template <DType In, bool kVec16>
__global__ void amaxRowSegmentsKernel(const StorageOf<In> *x, unsigned *amaxBits, int64_t rows,
                                      int64_t cols, int64_t tileRows, int64_t tileCols,
                                      int64_t colTiles) {
  constexpr int kLanes = kVec16 ? 8 : 32;
  constexpr int kPer = kVec16 ? 16 / int(sizeof(StorageOf<In>)) : 1;
  const int64_t groups = int64_t(gridDim.x) * (blockDim.x / kLanes);
  const int lane = threadIdx.x % kLanes;
  // Every lane of a warp runs the same number of iterations (the shuffles
  // below need the whole warp): the loop bound is rounded up to the warp.
  const int64_t items = rows * colTiles;
  const int64_t perWarp = 32 / kLanes;
  const int64_t bound = (items + perWarp - 1) / perWarp * perWarp;
  for (int64_t g = int64_t(blockIdx.x) * (blockDim.x / kLanes) + threadIdx.x / kLanes; g < bound;
       g += groups) {
    unsigned m = 0;
    const bool live = g < items;
    const int64_t r = live ? g / colTiles : 0, tt = live ? g % colTiles : 0;
    if (live) {
      const int64_t c0 = tt * tileCols, c1 = min(cols, c0 + tileCols);
      for (int64_t c = c0 + kPer * lane; c < c1; c += kPer * kLanes) {
        if constexpr (kVec16) {
          const uint4 v = *reinterpret_cast<const uint4 *>(x + r * cols + c);
          m = max(m, absMaxBits<In>(reinterpret_cast<const StorageOf<In> *>(&v), kPer));
        } else {
          m = max(m, __float_as_uint(fabsf(dev::Elem<In>::load(x[r * cols + c]))));
        }
      }
    }
    for (int off = kLanes / 2; off > 0; off /= 2)
      m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (live && lane == 0) {
      unsigned *slot = &amaxBits[(r / tileRows) * colTiles + tt];
      if (tileRows == 1)
        *slot = m;
      else if (m != 0)
        atomicMax(slot, m);
    }
  }
}

/// amax over tiles one column wide and `tileRows` rows tall of x [rows,
/// cols]: a thread per kCols columns (1, or 4 when cols is a multiple of 4
/// and x is aligned) and run of up to kColumnRun rows of a tile,
/// neighbouring threads reading neighbouring columns; a tile of several
/// runs takes their max by atomicMax (the result zeroed first).
constexpr int64_t kColumnRun = 64;
template <DType In, int kCols>
__global__ void amaxColumnTilesKernel(const StorageOf<In> *x, unsigned *amaxBits, int64_t rows,
                                      int64_t cols, int64_t tileRows) {
  using Vec = typename Vec4Of<In>::type;
  const int64_t runsPerTile = (tileRows + kColumnRun - 1) / kColumnRun;
  const int64_t rowTiles = (rows + tileRows - 1) / tileRows;
  const int64_t groups = cols / kCols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       i < rowTiles * runsPerTile * groups; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (i % groups) * kCols, run = i / groups, t = run / runsPerTile;
    const int64_t r0 = t * tileRows + (run % runsPerTile) * kColumnRun;
    const int64_t r1 = min(min(rows, (t + 1) * tileRows), r0 + kColumnRun);
    unsigned m[kCols] = {};
    for (int64_t r = r0; r < r1; ++r) {
      if constexpr (kCols == 4) {
        const Vec v = *reinterpret_cast<const Vec *>(x + r * cols + c);
        const StorageOf<In> *e = reinterpret_cast<const StorageOf<In> *>(&v);
        for (int j = 0; j < 4; ++j)
          m[j] = max(m[j], __float_as_uint(fabsf(dev::Elem<In>::load(e[j]))));
      } else {
        m[0] = max(m[0], __float_as_uint(fabsf(dev::Elem<In>::load(x[r * cols + c]))));
      }
    }
    for (int j = 0; j < kCols; ++j) {
      if (runsPerTile == 1)
        amaxBits[t * cols + c + j] = m[j];
      else if (m[j] != 0)
        atomicMax(&amaxBits[t * cols + c + j], m[j]);
    }
  }
}

/// cuBLASLt's scale layouts (writeFp8Scales).
__global__ void writeScalesKernel(const float *scale, int64_t scaleCols, int64_t rowTile,
                                  int64_t rows, int64_t kTiles, int layout, float *dst,
                                  int64_t ld) {
  // OuterVec: dst[r]; Vec128: dst[kt * ld + r]; Blk128: dst[rb * ld + kt].
  const int64_t outer = layout == 0 ? 1 : layout == 1 ? kTiles : (rows + 127) / 128;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < outer * ld;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / ld, j = i % ld;
    int64_t row, kt;
    if (layout == 2) {
      row = o * 128;
      kt = j;
      if (kt >= kTiles) {
        dst[i] = 1.0f;
        continue;
      }
    } else {
      row = j;
      kt = o;
      if (row >= rows) {
        dst[i] = 1.0f;
        continue;
      }
    }
    dst[i] = scale[(row / rowTile) * scaleCols + (scaleCols == 1 ? 0 : kt)];
  }
}

__global__ void canonicalNanKernel(float *values, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    if (isnan(values[i]))
      values[i] = __uint_as_float(0x7fc00000u);
}

__global__ void fp8ScaleKernel(const float *amax, float *scale, int64_t n, float headroom,
                               float limit) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float a = amax[i];
    scale[i] = !isfinite(a)  ? __uint_as_float(0x7fc00000u)
               : a == 0.0f   ? 1.0f
                             : __fdiv_rn(__fmul_rn(a, headroom), limit);
  }
}

/// Calls fn(DTypeTag<D>{}) for f32, bf16 or f16.
template <typename Fn> llvm::Error dispatchWide(DType t, Fn &&fn) {
  switch (t) {
  case DType::F32:
    return fn(DTypeTag<DType::F32>{});
  case DType::BF16:
    return fn(DTypeTag<DType::BF16>{});
  case DType::F16:
    return fn(DTypeTag<DType::F16>{});
  default:
    return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(t));
  }
}
template <typename Fn> llvm::Error dispatchFp8(DType t, Fn &&fn) {
  if (t == DType::F8E4M3FN)
    return fn(DTypeTag<DType::F8E4M3FN>{});
  if (t == DType::F8E5M2)
    return fn(DTypeTag<DType::F8E5M2>{});
  return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(t));
}

/// Whether quantizeTranspose16Kernel takes x [..., rows, cols]: 16-element
/// runs that stay in their row and column, 16-byte aligned buffers.
bool sixteenWide(const Tensor &x, const Tensor &q, const Tensor &qT, int64_t rows, int64_t cols) {
  return rows % 16 == 0 && cols % 16 == 0 && isAligned(x.data, 16) && isAligned(q.data, 16) &&
         isAligned(qT.data, 16) && (rows + kWideTile - 1) / kWideTile <= 65535;
}

llvm::Error launchQuantizeTranspose16(const KernelCall &call, const Tensor &x,
                                      const Tensor &scale, const Tensor &scaleT, const Tensor &q,
                                      const Tensor &qT, int64_t rows, int64_t cols,
                                      int64_t matrices, TileShifts d, TileShifts t) {
  // One scale for x and its copy: the copy is q's bytes transposed.
  const bool one = scale.shape.empty() && scaleT.data == scale.data;
  const dim3 grid(unsigned((cols + kWideTile - 1) / kWideTile),
                  unsigned((rows + kWideTile - 1) / kWideTile), unsigned(matrices));
  return dispatchWide(x.dtype, [&](auto in) {
    return dispatchFp8(q.dtype, [&](auto out) {
      constexpr DType I = decltype(in)::value, O = decltype(out)::value;
      auto kernel = one ? quantizeTranspose16Kernel<I, O, true>
                        : quantizeTranspose16Kernel<I, O, false>;
      kernel<<<grid, 256, 0, call.ctx.stream>>>(
          static_cast<const StorageOf<I> *>(x.data), static_cast<const float *>(scale.data),
          static_cast<const float *>(scaleT.data), static_cast<StorageOf<O> *>(q.data),
          static_cast<StorageOf<O> *>(qT.data), rows, cols, d, t, fp8MaxFinite(O));
      return llvm::Error::success();
    });
  });
}

llvm::Error launchQuantize(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(
      cpu::detail::checkFp8(cpu::detail::Fp8Kernel::Quantize, call.inputs, call.outputs, call.attrs));
  const Tensor &x = call.inputs[0], &scale = call.inputs[1], &q = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(TileMap map, tileMap(x, scale));
  const int64_t n = x.numElements();
  if (n == 0)
    return llvm::Error::success();
  // The transposed copy under its own scales (has_transposed_scale: a third
  // input), tiled or one scale each, unless that input is the same scale:
  // every path below it quantizes the copy with x's scale.
  const bool ownScaleT = call.inputs.size() > 2 && (call.inputs[2].data != scale.data ||
                                                     call.inputs[2].shape != scale.shape);
  if (call.outputs.size() == 2 && (!scale.shape.empty() || ownScaleT)) {
    const Tensor &qT = call.outputs[1], &scaleT = call.inputs[2];
    LOOM_ASSIGN_OR_RETURN(TileMap mapT, tileMap(qT, scaleT));
    const int64_t cols = x.shape.back(), rows = x.shape[x.shape.size() - 2];
    const int64_t matrices = n / (rows * cols);
    const dim3 grid(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile),
                    unsigned(matrices));
    if (matrices > 65535 || grid.y > 65535)
      return kernelError("a transposed copy of " + llvm::Twine(matrices) + " matrices of " +
                         llvm::Twine(rows) + " rows is not supported");
    if (x.shape.size() == 2 && sixteenWide(x, q, qT, rows, cols))
      return launchQuantizeTranspose16(call, x, scale, scaleT, q, qT, rows, cols, 1,
                                       tileShifts(map), tileShifts(mapT));
    const bool wide = x.shape.size() == 2 && rows % 4 == 0 && cols % 4 == 0 &&
                      isAligned(x.data, 16) && isAligned(q.data, 4) && isAligned(qT.data, 4) &&
                      (rows + kWideTile - 1) / kWideTile <= 65535;
    if (wide) {
      const dim3 wideGrid(unsigned((cols + kWideTile - 1) / kWideTile),
                          unsigned((rows + kWideTile - 1) / kWideTile));
      return dispatchWide(x.dtype, [&](auto in) {
        return dispatchFp8(q.dtype, [&](auto out) {
          constexpr DType I = decltype(in)::value, O = decltype(out)::value;
          quantizeTransposeTiledWideKernel<I, O><<<wideGrid, 256, 0, call.ctx.stream>>>(
              static_cast<const StorageOf<I> *>(x.data), static_cast<const float *>(scale.data),
              static_cast<const float *>(scaleT.data), static_cast<StorageOf<O> *>(q.data),
              static_cast<StorageOf<O> *>(qT.data), rows, cols, tileShifts(map),
              tileShifts(mapT), fp8MaxFinite(O));
          return llvm::Error::success();
        });
      });
    }
    return dispatchWide(x.dtype, [&](auto in) {
      return dispatchFp8(q.dtype, [&](auto out) {
        constexpr DType I = decltype(in)::value, O = decltype(out)::value;
        quantizeTransposeTiledKernel<I, O><<<grid, dim3(kTile, kTileRows), 0, call.ctx.stream>>>(
            static_cast<const StorageOf<I> *>(x.data), static_cast<const float *>(scale.data),
            static_cast<const float *>(scaleT.data), static_cast<StorageOf<O> *>(q.data),
            static_cast<StorageOf<O> *>(qT.data), rows, cols, map, mapT, fp8MaxFinite(O));
        return llvm::Error::success();
      });
    });
  }
  if (call.outputs.size() == 2) {
    const int64_t cols = x.shape.back(), rows = x.shape[x.shape.size() - 2];
    const int64_t matrices = n / (rows * cols);
    if (matrices > 65535)
      return kernelError("a transposed copy of more than 65535 matrices is not supported, got " +
                         llvm::Twine(matrices));
    const dim3 grid(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile),
                    unsigned(matrices));
    if (grid.y > 65535)
      return kernelError("a transposed copy of more than " + llvm::Twine(65535 * kTile) +
                         " rows is not supported, got " + llvm::Twine(rows));
    if (sixteenWide(x, q, call.outputs[1], rows, cols))
      return launchQuantizeTranspose16(call, x, scale, scale, q, call.outputs[1], rows, cols,
                                       matrices, tileShifts(map), tileShifts(map));
    const bool wide = rows % 4 == 0 && cols % 4 == 0 && isAligned(x.data, 16) &&
                      isAligned(q.data, 4) && isAligned(call.outputs[1].data, 4) &&
                      (rows + kWideTile - 1) / kWideTile <= 65535;
    const dim3 wideGrid(unsigned((cols + kWideTile - 1) / kWideTile),
                        unsigned((rows + kWideTile - 1) / kWideTile), unsigned(matrices));
    return dispatchWide(x.dtype, [&](auto in) {
      return dispatchFp8(q.dtype, [&](auto out) {
        constexpr DType I = decltype(in)::value, O = decltype(out)::value;
        auto kernel = wide ? quantizeTransposeWideKernel<I, O> : quantizeTransposeKernel<I, O>;
        kernel<<<wide ? wideGrid : grid, wide ? dim3(256) : dim3(kTile, kTileRows), 0,
                 call.ctx.stream>>>(
            static_cast<const StorageOf<I> *>(x.data), static_cast<const float *>(scale.data),
            static_cast<StorageOf<O> *>(q.data),
            static_cast<StorageOf<O> *>(call.outputs[1].data), rows, cols, fp8MaxFinite(O));
        return llvm::Error::success();
      });
    });
  }
  return dispatchWide(x.dtype, [&](auto in) {
    return dispatchFp8(q.dtype, [&](auto out) {
      constexpr DType I = decltype(in)::value, O = decltype(out)::value;
      quantizeKernel<I, O><<<gridFor(n, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
          static_cast<const StorageOf<I> *>(x.data), static_cast<const float *>(scale.data),
          static_cast<StorageOf<O> *>(q.data), n, map, fp8MaxFinite(O));
      return llvm::Error::success();
    });
  });
}

llvm::Error launchDequantize(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(cpu::detail::checkFp8(cpu::detail::Fp8Kernel::Dequantize, call.inputs,
                                             call.outputs, call.attrs));
  const Tensor &q = call.inputs[0], &scale = call.inputs[1], &x = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(TileMap map, tileMap(q, scale));
  const int64_t n = q.numElements();
  if (n == 0)
    return llvm::Error::success();
  return dispatchFp8(q.dtype, [&](auto in) {
    return dispatchWide(x.dtype, [&](auto out) {
      constexpr DType I = decltype(in)::value, O = decltype(out)::value;
      dequantizeKernel<I, O><<<gridFor(n, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
          static_cast<const StorageOf<I> *>(q.data), static_cast<const float *>(scale.data),
          static_cast<StorageOf<O> *>(x.data), n, map);
      return llvm::Error::success();
    });
  });
}

/// The amax of all of x (16-byte aligned, not empty) in one launch, its
/// last block writing what `finish` asks.
llvm::Error launchAmaxWholeFinish(const Tensor &x, const AmaxFinish &finish,
                                  const LaunchContext &ctx) {
  const int64_t n = x.numElements();
  return dispatchWide(x.dtype, [&](auto in) {
    constexpr DType I = decltype(in)::value;
    const int64_t n16 = n / (16 / int64_t(sizeof(StorageOf<I>)));
    amaxWholeWideKernel<I, true><<<amaxWholeBlocks(n16, ctx), kBlockSize, 0, ctx.stream>>>(
        static_cast<const StorageOf<I> *>(x.data), nullptr, n16, n, finish);
    return cudaError(cudaGetLastError(), "amaxWholeWideKernel");
  });
}

llvm::Error launchAmax(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(
      cpu::detail::checkFp8(cpu::detail::Fp8Kernel::Amax, call.inputs, call.outputs, call.attrs));
  const Tensor &x = call.inputs[0], &amax = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(TileMap map, tileMap(x, amax));
  const int64_t n = x.numElements(), tiles = amax.numElements();
  // One tile, 16-byte aligned, with the stream's counters: one launch,
  // whose last block writes the amax.
  if (tiles == 1 && n > 0 && isAligned(x.data, 16) && call.ctx.counters) {
    AmaxFinish finish;
    finish.counters = call.ctx.counters;
    finish.amax = static_cast<float *>(amax.data);
    return launchAmaxWholeFinish(x, finish, call.ctx);
  }
  LOOM_RETURN_IF_ERROR(cudaError(cudaMemsetAsync(amax.data, 0, size_t(tiles) * sizeof(float),
                                                 call.ctx.stream),
                                 "cudaMemsetAsync"));
  if (n == 0)
    return llvm::Error::success();
  LOOM_RETURN_IF_ERROR(dispatchWide(x.dtype, [&](auto in) {
    constexpr DType I = decltype(in)::value;
    if (tiles == 1 && isAligned(x.data, 16)) {
      const int64_t n16 = n / (16 / int64_t(sizeof(StorageOf<I>)));
      amaxWholeWideKernel<I, false>
          <<<amaxWholeBlocks(n16, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
              static_cast<const StorageOf<I> *>(x.data), static_cast<unsigned *>(amax.data), n16,
              n, AmaxFinish());
      return llvm::Error::success();
    }
    if (tiles == 1) { // one tile: a reduction, not an atomic per element
      amaxWholeKernel<I><<<amaxWholeBlocks(n, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
          static_cast<const StorageOf<I> *>(x.data), static_cast<unsigned *>(amax.data), n);
      return llvm::Error::success();
    }
    if (x.shape.size() == 2 && amax.shape.size() == 2) {
      const int64_t rows = x.shape[0], cols = x.shape[1];
      const int64_t tileRows = map.tileSize[0], tileCols = map.tileSize[1];
      if (tileCols == 1) { // columns: a thread per column (or 4) and row tile
        const int64_t runs = amax.shape[0] * ((tileRows + kColumnRun - 1) / kColumnRun);
        const bool vec = cols % 4 == 0 && isAligned(x.data, 4 * sizeof(StorageOf<I>));
        auto *xs = static_cast<const StorageOf<I> *>(x.data);
        auto *bits = static_cast<unsigned *>(amax.data);
        if (vec)
          amaxColumnTilesKernel<I, 4><<<gridFor(runs * cols / 4, call.ctx), kBlockSize, 0,
                                        call.ctx.stream>>>(xs, bits, rows, cols, tileRows);
        else
          amaxColumnTilesKernel<I, 1><<<gridFor(runs * cols, call.ctx), kBlockSize, 0,
                                        call.ctx.stream>>>(xs, bits, rows, cols, tileRows);
        return llvm::Error::success();
      }
      // Row segments: 8 lanes each (16-byte loads), else a warp.
      constexpr int64_t kPer = 16 / int64_t(sizeof(StorageOf<I>));
      const bool vec = tileCols % kPer == 0 && cols % kPer == 0 && isAligned(x.data, 16);
      const unsigned blocks = gridFor(rows * amax.shape[1] * (vec ? 8 : 32), call.ctx);
      auto *xs = static_cast<const StorageOf<I> *>(x.data);
      auto *bits = static_cast<unsigned *>(amax.data);
      if (vec)
        amaxRowSegmentsKernel<I, true><<<blocks, kBlockSize, 0, call.ctx.stream>>>(
            xs, bits, rows, cols, tileRows, tileCols, amax.shape[1]);
      else
        amaxRowSegmentsKernel<I, false><<<blocks, kBlockSize, 0, call.ctx.stream>>>(
            xs, bits, rows, cols, tileRows, tileCols, amax.shape[1]);
      return llvm::Error::success();
    }
    amaxKernel<I><<<gridFor(n, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
        static_cast<const StorageOf<I> *>(x.data), static_cast<unsigned *>(amax.data), n, map);
    return llvm::Error::success();
  }));
  canonicalNanKernel<<<gridFor(tiles, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
      static_cast<float *>(amax.data), tiles);
  return llvm::Error::success();
}

llvm::Error launchFp8Scale(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(
      cpu::detail::checkFp8(cpu::detail::Fp8Kernel::Scale, call.inputs, call.outputs, call.attrs));
  const Tensor &amax = call.inputs[0], &scale = call.outputs[0];
  const std::string format = cantFail(call.attrs.getStr("format"));
  const int64_t margin = cantFail(call.attrs.getInt("margin", 0));
  const int64_t n = amax.numElements();
  if (n == 0)
    return llvm::Error::success();
  fp8ScaleKernel<<<gridFor(n, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
      static_cast<const float *>(amax.data), static_cast<float *>(scale.data), n,
      std::ldexp(1.0f, int(margin)), fp8MaxFinite(format == "e4m3" ? DType::F8E4M3FN : DType::F8E5M2));
  return llvm::Error::success();
}

} // namespace

llvm::Error writeFp8Scales(const LaunchContext &ctx, const float *scale, int64_t scaleCols,
                           int64_t rowTile, int64_t rows, int64_t k,
                           Fp8ScaleLayout layout, float *dst, int64_t ld) {
  const int64_t kTiles = fp8Tiles(k, kFp8Block);
  const int code = layout == Fp8ScaleLayout::OuterVec ? 0 : layout == Fp8ScaleLayout::Vec128 ? 1 : 2;
  const int64_t outer = code == 0 ? 1 : code == 1 ? kTiles : fp8Tiles(rows, kFp8Block);
  writeScalesKernel<<<gridFor(outer * ld, ctx), kBlockSize, 0, ctx.stream>>>(
      scale, scaleCols, rowTile, rows, kTiles, code, dst, ld);
  return cudaError(cudaGetLastError(), "writeScalesKernel");
}

/// The FP8 scale epilogue's pass (KernelList.h), and nn.quantize_tensor's
/// first: nn.fp8_scale of nn.amax of all of x into `scale`, in one launch
/// where the stream keeps counters.
llvm::Error launchFp8ScaleOf(const Tensor &x, const Tensor &scale, const std::string &format,
                             int64_t margin, const LaunchContext &ctx) {
  if (x.numElements() > 0 && isAligned(x.data, 16) && ctx.counters &&
      (x.dtype == DType::F32 || x.dtype == DType::BF16 || x.dtype == DType::F16)) {
    AmaxFinish finish;
    finish.counters = ctx.counters;
    finish.scale = static_cast<float *>(scale.data);
    finish.headroom = std::ldexp(1.0f, int(margin));
    finish.limit = fp8MaxFinite(format == "e4m3" ? DType::F8E4M3FN : DType::F8E5M2);
    return launchAmaxWholeFinish(x, finish, ctx);
  }
  // The amax into the scale's buffer, then the scale in place.
  cpu::KernelAttrs attrs;
  attrs.set("format", format).set("margin", margin);
  LOOM_RETURN_IF_ERROR(
      launchAmax(KernelCall{"nn.amax", KernelId::Amax, {x}, {scale}, cpu::KernelAttrs(), ctx}));
  return launchFp8Scale(KernelCall{"nn.fp8_scale", KernelId::Fp8Scale, {scale}, {scale}, attrs, ctx});
}

namespace {

llvm::Error launchQuantizeTiles(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(
      cpu::detail::checkQuantizeTiles(call.inputs, call.outputs, call.attrs));
  const Tensor &x = call.inputs[0];
  const Tensor &q = call.outputs[0], &qT = call.outputs[1];
  const Tensor &scale = call.outputs[2], &scaleT = call.outputs[3];
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows == 0 || cols == 0)
    return llvm::Error::success();
  const std::string format = cantFail(call.attrs.getStr("format"));
  const int64_t margin = cantFail(call.attrs.getInt("margin", 0));
  const float headroom = std::ldexp(1.0f, int(margin));
  const float scaleLimit =
      fp8MaxFinite(format == "e4m3" ? DType::F8E4M3FN : DType::F8E5M2);
  const int64_t tr = fp8TileSize(rows, scale.shape[0]), tc = fp8TileSize(cols, scale.shape[1]);
  const int64_t trT = fp8TileSize(cols, scaleT.shape[0]);
  const int64_t tcT = fp8TileSize(rows, scaleT.shape[1]);
  const bool fast = rows % 16 == 0 && cols % 16 == 0 && isAligned(x.data, 16) &&
                    isAligned(q.data, 16) && isAligned(qT.data, 16) &&
                    fp8TilesInBlocks(rows, cols, tr, tc) && fp8TilesInBlocks(cols, rows, trT, tcT) &&
                    (rows + kQBlock - 1) / kQBlock <= 65535;
  if (fast)
    return dispatchWide(x.dtype, [&](auto in) {
      return dispatchFp8(q.dtype, [&](auto out) -> llvm::Error {
        constexpr DType I = decltype(in)::value, O = decltype(out)::value;
        constexpr int smem = kQBlock * (kQBlock * int(sizeof(StorageOf<I>)) + 16);
        // Per device, so on every call: with a GPU per rank thread, a
        // once-per-process setting left the other devices at 48 KiB
        // (cudaErrorInvalidValue on f32 inputs, whose tile takes 66 KiB).
        LOOM_RETURN_IF_ERROR(cudaError(
            cudaFuncSetAttribute(quantizeTilesKernel<I, O>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
            "cudaFuncSetAttribute (quantize_tiles)"));
        const dim3 grid(unsigned((cols + kQBlock - 1) / kQBlock),
                        unsigned((rows + kQBlock - 1) / kQBlock));
        quantizeTilesKernel<I, O><<<grid, 256, smem, call.ctx.stream>>>(
            static_cast<const StorageOf<I> *>(x.data), static_cast<StorageOf<O> *>(q.data),
            static_cast<StorageOf<O> *>(qT.data), static_cast<float *>(scale.data),
            static_cast<float *>(scaleT.data), rows, cols, tr, tc, scale.shape[1], trT, tcT,
            scaleT.shape[1], headroom, fp8MaxFinite(O));
        return llvm::Error::success();
      });
    });
  // Any other tiling: the amaxes into the scale buffers, the scales in
  // place, then nn.quantize.
  LOOM_RETURN_IF_ERROR(launchAmax(KernelCall{call.name, KernelId::Amax, {x}, {scale},
                                             cpu::KernelAttrs(), call.ctx}));
  const int64_t tilesT = scaleT.numElements();
  LOOM_RETURN_IF_ERROR(cudaError(
      cudaMemsetAsync(scaleT.data, 0, size_t(tilesT) * sizeof(float), call.ctx.stream),
      "cudaMemsetAsync"));
  LOOM_RETURN_IF_ERROR(dispatchWide(x.dtype, [&](auto in) {
    constexpr DType I = decltype(in)::value;
    amaxTransposedKernel<I><<<gridFor(rows * cols, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
        static_cast<const StorageOf<I> *>(x.data), static_cast<unsigned *>(scaleT.data), rows,
        cols, trT, tcT, scaleT.shape[1]);
    return llvm::Error::success();
  }));
  canonicalNanKernel<<<gridFor(tilesT, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
      static_cast<float *>(scaleT.data), tilesT);
  for (const Tensor *s : {&scale, &scaleT})
    fp8ScaleKernel<<<gridFor(s->numElements(), call.ctx), kBlockSize, 0, call.ctx.stream>>>(
        static_cast<const float *>(s->data), static_cast<float *>(s->data), s->numElements(),
        headroom, scaleLimit);
  cpu::KernelAttrs transposed;
  transposed.set("has_transposed_scale", int64_t(1));
  const Tensor ins[] = {x, scale, scaleT};
  const Tensor outs[] = {q, qT};
  return launchQuantize(KernelCall{call.name, KernelId::Quantize, ins, outs, transposed, call.ctx});
}

llvm::Error launchQuantizeTensor(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(
      cpu::detail::checkQuantizeTensor(call.inputs, call.outputs, call.attrs));
  const Tensor &x = call.inputs[0];
  const Tensor &q = call.outputs[0], &qT = call.outputs[1], &scale = call.outputs[2];
  LOOM_RETURN_IF_ERROR(launchFp8ScaleOf(x, scale, cantFail(call.attrs.getStr("format")),
                                        cantFail(call.attrs.getInt("margin", 0)), call.ctx));
  cpu::KernelAttrs one;
  one.set("has_transposed_scale", int64_t(0));
  const Tensor ins[] = {x, scale};
  const Tensor outs[] = {q, qT};
  return launchQuantize(KernelCall{call.name, KernelId::Quantize, ins, outs, one, call.ctx});
}

} // namespace

void registerFp8Kernels(KernelRegistry &registry) {
  registry.add(KernelId::QuantizeTensor, launchQuantizeTensor);
  registry.add(KernelId::Quantize, launchQuantize);
  registry.add(KernelId::Dequantize, launchDequantize);
  registry.add(KernelId::Amax, launchAmax);
  registry.add(KernelId::Fp8Scale, launchFp8Scale);
  registry.add(KernelId::QuantizeTiles, launchQuantizeTiles);
}

} // namespace loom::cuda
