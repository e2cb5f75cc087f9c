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
#include "kernels/cpu/OperandChecks.h"
#include "runtime/abi/Fp8Tiling.h"

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

/// One amax for the whole tensor, four elements a load.
template <DType In>
__global__ void amaxWholeWideKernel(const StorageOf<In> *x, unsigned *amaxBits, int64_t n4) {
  using Vec = typename Vec4Of<In>::type;
  const Vec *xv = reinterpret_cast<const Vec *>(x);
  unsigned m = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += int64_t(gridDim.x) * blockDim.x) {
    const Vec v = xv[i];
    const StorageOf<In> *e = reinterpret_cast<const StorageOf<In> *>(&v);
    for (int j = 0; j < 4; ++j)
      m = max(m, __float_as_uint(fabsf(dev::Elem<In>::load(e[j]))));
  }
  for (int offset = 16; offset > 0; offset /= 2)
    m = max(m, __shfl_down_sync(0xffffffffu, m, offset));
  if ((threadIdx.x & 31) == 0 && m != 0)
    atomicMax(amaxBits, m);
}

/// One amax for the whole tensor: each thread's maximum of |x| bits, then
/// the warp's, then one atomicMax per warp.
template <DType In>
__global__ void amaxWholeKernel(const StorageOf<In> *x, unsigned *amaxBits, int64_t n) {
  unsigned m = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    m = max(m, __float_as_uint(fabsf(dev::Elem<In>::load(x[i]))));
  for (int offset = 16; offset > 0; offset /= 2)
    m = max(m, __shfl_down_sync(0xffffffffu, m, offset));
  if ((threadIdx.x & 31) == 0 && m != 0)
    atomicMax(amaxBits, m);
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
/// (rank-2 tilings whose tiles are row segments): a warp per (row, tile);
/// tiles spanning several rows take the max over their rows' warps.
template <DType In>
__global__ void amaxRowSegmentsKernel(const StorageOf<In> *x, unsigned *amaxBits, int64_t rows,
                                      int64_t cols, int64_t tileRows, int64_t tileCols,
                                      int64_t colTiles) {
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (int64_t w = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; w < rows * colTiles;
       w += warps) {
    const int64_t r = w / colTiles, t = w % colTiles;
    const int64_t c0 = t * tileCols, c1 = min(cols, c0 + tileCols);
    unsigned m = 0;
    for (int64_t c = c0 + lane; c < c1; c += 32)
      m = max(m, __float_as_uint(fabsf(dev::Elem<In>::load(x[r * cols + c]))));
    for (int off = 16; off > 0; off /= 2)
      m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) {
      unsigned *slot = &amaxBits[(r / tileRows) * colTiles + t];
      if (tileRows == 1)
        *slot = m;
      else if (m != 0)
        atomicMax(slot, m);
    }
  }
}

/// amax over tiles one column wide and `tileRows` rows tall of x [rows,
/// cols]: a thread per column and run of up to kColumnRun rows of a tile,
/// neighbouring threads reading neighbouring columns; a tile of several
/// runs takes their max by atomicMax (the result zeroed first).
constexpr int64_t kColumnRun = 64;
template <DType In>
__global__ void amaxColumnTilesKernel(const StorageOf<In> *x, unsigned *amaxBits, int64_t rows,
                                      int64_t cols, int64_t tileRows) {
  const int64_t runsPerTile = (tileRows + kColumnRun - 1) / kColumnRun;
  const int64_t rowTiles = (rows + tileRows - 1) / tileRows;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rowTiles * runsPerTile * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % cols, run = i / cols, t = run / runsPerTile;
    const int64_t r0 = t * tileRows + (run % runsPerTile) * kColumnRun;
    const int64_t r1 = min(min(rows, (t + 1) * tileRows), r0 + kColumnRun);
    unsigned m = 0;
    for (int64_t r = r0; r < r1; ++r)
      m = max(m, __float_as_uint(fabsf(dev::Elem<In>::load(x[r * cols + c]))));
    if (runsPerTile == 1)
      amaxBits[t * cols + c] = m;
    else if (m != 0)
      atomicMax(&amaxBits[t * cols + c], m);
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

llvm::Error launchQuantize(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(
      cpu::detail::checkFp8(cpu::detail::Fp8Kernel::Quantize, call.inputs, call.outputs, call.attrs));
  const Tensor &x = call.inputs[0], &scale = call.inputs[1], &q = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(TileMap map, tileMap(x, scale));
  const int64_t n = x.numElements();
  if (n == 0)
    return llvm::Error::success();
  if (call.outputs.size() == 2 && !scale.shape.empty()) {
    const Tensor &qT = call.outputs[1], &scaleT = call.inputs[2];
    LOOM_ASSIGN_OR_RETURN(TileMap mapT, tileMap(qT, scaleT));
    const int64_t cols = x.shape.back(), rows = x.shape[x.shape.size() - 2];
    const int64_t matrices = n / (rows * cols);
    const dim3 grid(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile),
                    unsigned(matrices));
    if (matrices > 65535 || grid.y > 65535)
      return kernelError("a transposed copy of " + llvm::Twine(matrices) + " matrices of " +
                         llvm::Twine(rows) + " rows is not supported");
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

llvm::Error launchAmax(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(
      cpu::detail::checkFp8(cpu::detail::Fp8Kernel::Amax, call.inputs, call.outputs, call.attrs));
  const Tensor &x = call.inputs[0], &amax = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(TileMap map, tileMap(x, amax));
  const int64_t n = x.numElements(), tiles = amax.numElements();
  LOOM_RETURN_IF_ERROR(cudaError(cudaMemsetAsync(amax.data, 0, size_t(tiles) * sizeof(float),
                                                 call.ctx.stream),
                                 "cudaMemsetAsync"));
  if (n == 0)
    return llvm::Error::success();
  LOOM_RETURN_IF_ERROR(dispatchWide(x.dtype, [&](auto in) {
    constexpr DType I = decltype(in)::value;
    if (tiles == 1 && n % 4 == 0 && isAligned(x.data, 16)) {
      amaxWholeWideKernel<I><<<gridFor(n / 4, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
          static_cast<const StorageOf<I> *>(x.data), static_cast<unsigned *>(amax.data), n / 4);
      return llvm::Error::success();
    }
    if (tiles == 1) { // one tile: a reduction, not an atomic per element
      amaxWholeKernel<I><<<gridFor(n, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
          static_cast<const StorageOf<I> *>(x.data), static_cast<unsigned *>(amax.data), n);
      return llvm::Error::success();
    }
    if (x.shape.size() == 2 && amax.shape.size() == 2) {
      const int64_t rows = x.shape[0], cols = x.shape[1];
      const int64_t tileRows = map.tileSize[0], tileCols = map.tileSize[1];
      if (tileCols == 1) { // columns: a thread per column and row tile
        const int64_t runs = amax.shape[0] * ((tileRows + kColumnRun - 1) / kColumnRun);
        amaxColumnTilesKernel<I><<<gridFor(runs * cols, call.ctx), kBlockSize, 0,
                                   call.ctx.stream>>>(static_cast<const StorageOf<I> *>(x.data),
                                                      static_cast<unsigned *>(amax.data), rows,
                                                      cols, tileRows);
        return llvm::Error::success();
      }
      // Row segments: a warp each.
      amaxRowSegmentsKernel<I><<<gridFor(rows * amax.shape[1] * 32, call.ctx), kBlockSize, 0,
                                 call.ctx.stream>>>(static_cast<const StorageOf<I> *>(x.data),
                                                    static_cast<unsigned *>(amax.data), rows, cols,
                                                    tileRows, tileCols, amax.shape[1]);
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

void registerFp8Kernels(KernelRegistry &registry) {
  registry.add(KernelId::Quantize, launchQuantize);
  registry.add(KernelId::Dequantize, launchDequantize);
  registry.add(KernelId::Amax, launchAmax);
  registry.add(KernelId::Fp8Scale, launchFp8Scale);
}

} // namespace loom::cuda
