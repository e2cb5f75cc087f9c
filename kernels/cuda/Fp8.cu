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
    m.tileSize[d] = tensor.shape[d] / tiling.shape[d];
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

void registerFp8Kernels(KernelRegistry &registry) {
  registry.add(KernelId::Quantize, launchQuantize);
  registry.add(KernelId::Dequantize, launchDequantize);
  registry.add(KernelId::Amax, launchAmax);
  registry.add(KernelId::Fp8Scale, launchFp8Scale);
}

} // namespace loom::cuda
