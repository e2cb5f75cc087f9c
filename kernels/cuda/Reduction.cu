// CUDA reductions (as kernels/cpu/Reduction.cpp): reduce_sum, reduce_mean,
// reduce_max over a set of dims, and softmax / log_softmax along one dim.
//
// Float sums accumulate in double like the CPU's, in a fixed order: one
// thread walking the reduced elements in order (then bitwise equal to the
// CPU) or, for long reductions, a fixed tree of per-thread partial sums.
// Softmax computes in f32 (bf16/f16 widened on load, rounded on store) with
// a fixed reduction order. nn.sum_squares_multi: the gradient norm's sums.

#include "kernels/cuda/DeviceSupport.cuh"
#include "kernels/cpu/OperandChecks.h"
#include "runtime/abi/SumSquares.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

namespace loom::cuda {
namespace {

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

using cpu::detail::ReduceOp;
using cpu::detail::ReducePlan;

/// The running value of a reduction: Acc, its identity, folding in element
/// `index` (fold) and merging two partial results (merge; `a` holds the
/// lower positions for the max's tie-break, which keeps the first maximum,
/// or the first NaN, exactly as the CPU's in-order walk does).
template <ReduceOp Op, bool IsInt> struct Reducer;

template <ReduceOp Op> struct Reducer<Op, false> { // Sum, Mean over floats: f64
  struct Acc {
    double value;
  };
  __device__ static Acc identity() { return {0.0}; }
  __device__ static void fold(Acc &acc, double v, int64_t) { acc.value = dev::add(acc.value, v); }
  __device__ static Acc merge(Acc a, Acc b) { return {dev::add(a.value, b.value)}; }
  __device__ static Acc shuffleDown(Acc a, int offset) {
    return {__shfl_down_sync(0xFFFFFFFFu, a.value, offset)};
  }
};

template <> struct Reducer<ReduceOp::Max, false> {
  struct Acc {
    double value;
    int64_t index; // of the element that gave `value`
  };
  __device__ static Acc identity() { return {-INFINITY, INT64_MAX}; }
  __device__ static bool better(double v, int64_t i, const Acc &acc) {
    const bool vNaN = v != v, accNaN = acc.value != acc.value;
    if (vNaN)
      return !accNaN || i < acc.index;
    return !accNaN && (v > acc.value || (v == acc.value && i < acc.index));
  }
  __device__ static void fold(Acc &acc, double v, int64_t i) {
    if (better(v, i, acc))
      acc = {v, i};
  }
  __device__ static Acc merge(Acc a, Acc b) { return better(b.value, b.index, a) ? b : a; }
  __device__ static Acc shuffleDown(Acc a, int offset) {
    return {__shfl_down_sync(0xFFFFFFFFu, a.value, offset),
            static_cast<int64_t>(__shfl_down_sync(
                0xFFFFFFFFu, static_cast<long long>(a.index), offset))};
  }
};

template <> struct Reducer<ReduceOp::Sum, true> { // wrapping int64
  struct Acc {
    int64_t value;
  };
  __device__ static Acc identity() { return {0}; }
  __device__ static void fold(Acc &acc, int64_t v, int64_t) {
    acc.value = static_cast<int64_t>(static_cast<uint64_t>(acc.value) + static_cast<uint64_t>(v));
  }
  __device__ static Acc merge(Acc a, Acc b) {
    return {static_cast<int64_t>(static_cast<uint64_t>(a.value) + static_cast<uint64_t>(b.value))};
  }
  __device__ static Acc shuffleDown(Acc a, int offset) {
    return {static_cast<int64_t>(
        __shfl_down_sync(0xFFFFFFFFu, static_cast<long long>(a.value), offset))};
  }
};

template <> struct Reducer<ReduceOp::Max, true> {
  struct Acc {
    int64_t value;
  };
  __device__ static Acc identity() { return {INT64_MIN}; }
  __device__ static void fold(Acc &acc, int64_t v, int64_t) {
    acc.value = v > acc.value ? v : acc.value;
  }
  __device__ static Acc merge(Acc a, Acc b) { return {b.value > a.value ? b.value : a.value}; }
  __device__ static Acc shuffleDown(Acc a, int offset) {
    return {static_cast<int64_t>(
        __shfl_down_sync(0xFFFFFFFFu, static_cast<long long>(a.value), offset))};
  }
};

template <ReduceOp Op, DType D> struct ReduceTraits {
  static constexpr bool kInt = dev::isIntDType(D);
  using R = Reducer<Op, kInt>;
  using Acc = typename R::Acc;
  __device__ static auto loadValue(StorageOf<D> s) {
    if constexpr (kInt)
      return dev::Elem<D>::load(s);
    else
      return dev::Elem<D>::loadDouble(s);
  }
  __device__ static StorageOf<D> finish(Acc acc, int64_t count) {
    if constexpr (kInt)
      return dev::Elem<D>::store(acc.value);
    else if constexpr (Op == ReduceOp::Mean)
      return dev::Elem<D>::storeDouble(acc.value / static_cast<double>(count));
    else
      return dev::Elem<D>::storeDouble(acc.value);
  }
};

/// One group of Group threads per output element (Group = 32: a warp, or 256:
/// the whole block); the group's threads take reduced positions r = lane,
/// lane + Group, ... and their partial results merge in a fixed tree. For
/// reductions whose innermost input dim is reduced (contiguous reads).
template <ReduceOp Op, DType D, int Group>
__global__ void __launch_bounds__(kBlockSize)
reduceGroupKernel(int64_t outCount, int64_t reduceCount,
                  const __grid_constant__ StridedMap<1> kept,
                  const __grid_constant__ StridedMap<1> reduced, const StorageOf<D> *in,
                  StorageOf<D> *out) {
  using Traits = ReduceTraits<Op, D>;
  using R = typename Traits::R;
  using Acc = typename Traits::Acc;
  constexpr int kGroupsPerBlock = kBlockSize / Group;
  constexpr int kWarps = kBlockSize / 32;
  __shared__ Acc warpResults[kWarps];
  const int group = threadIdx.x / Group, lane = threadIdx.x % Group;
  const int warp = threadIdx.x / 32, warpLane = threadIdx.x % 32;
  // The loop bound is uniform over the block (Group = 256 has one group).
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kGroupsPerBlock; first < outCount;
       first += static_cast<int64_t>(gridDim.x) * kGroupsPerBlock) {
    const int64_t o = first + group;
    Acc acc = R::identity();
    if (o < outCount) {
      int64_t base[1];
      stridedOffsets(kept, o, base);
      for (int64_t r = lane; r < reduceCount; r += Group) {
        int64_t offset[1];
        stridedOffsets(reduced, r, offset);
        R::fold(acc, Traits::loadValue(in[base[0] + offset[0]]), r);
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      acc = R::merge(acc, R::shuffleDown(acc, offset));
    if constexpr (Group == 32) {
      if (lane == 0 && o < outCount)
        out[o] = Traits::finish(acc, reduceCount);
    } else {
      if (warpLane == 0)
        warpResults[warp] = acc;
      __syncthreads();
      if (warp == 0) {
        acc = warpLane < kWarps ? warpResults[warpLane] : R::identity();
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2)
          acc = R::merge(acc, R::shuffleDown(acc, offset));
        if (warpLane == 0 && o < outCount)
          out[o] = Traits::finish(acc, reduceCount);
      }
      __syncthreads();
    }
  }
}

/// Columns x Rows threads per block: threadIdx.x picks the output element
/// (neighbouring outputs are neighbouring inputs when the innermost dim is
/// kept), threadIdx.y the reduced positions r = y, y + Rows, ...; the Rows
/// partial results merge in a fixed tree. With Rows = 1 each thread walks its
/// reduction in order, as the CPU does.
template <ReduceOp Op, DType D, int Rows>
__global__ void __launch_bounds__(kBlockSize)
reduceColumnsKernel(int64_t outCount, int64_t reduceCount,
                    const __grid_constant__ StridedMap<1> kept,
                    const __grid_constant__ StridedMap<1> reduced, const StorageOf<D> *in,
                    StorageOf<D> *out) {
  using Traits = ReduceTraits<Op, D>;
  using R = typename Traits::R;
  using Acc = typename Traits::Acc;
  constexpr int kColumns = kBlockSize / Rows;
  __shared__ Acc partial[Rows > 1 ? Rows : 1][kColumns];
  const int x = threadIdx.x, y = threadIdx.y;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kColumns; first < outCount;
       first += static_cast<int64_t>(gridDim.x) * kColumns) {
    const int64_t o = first + x;
    Acc acc = R::identity();
    if (o < outCount) {
      int64_t base[1];
      stridedOffsets(kept, o, base);
      for (int64_t r = y; r < reduceCount; r += Rows) {
        int64_t offset[1];
        stridedOffsets(reduced, r, offset);
        R::fold(acc, Traits::loadValue(in[base[0] + offset[0]]), r);
      }
    }
    if constexpr (Rows > 1) {
      partial[y][x] = acc;
      __syncthreads();
#pragma unroll
      for (int half = Rows / 2; half > 0; half /= 2) {
        if (y < half)
          partial[y][x] = R::merge(partial[y][x], partial[y + half][x]);
        __syncthreads();
      }
      acc = partial[0][x];
      __syncthreads(); // partial is rewritten by the next iteration
    }
    if (y == 0 && o < outCount)
      out[o] = Traits::finish(acc, reduceCount);
  }
}

/// Reduction over the leading dims of a row-major [reduceCount, outCount]
/// input (the kept dims innermost and contiguous): a block owns Cols * V
/// neighbouring outputs, each thread V of them loaded as one 16-byte vector
/// per row, for the rows r = y, y + Rows, ... (in order); the Rows partial
/// results of each output merge in a fixed tree.
template <ReduceOp Op, DType D, int V, int Cols>
__global__ void __launch_bounds__(kBlockSize)
reduceLeadingKernel(int64_t outCount, int64_t reduceCount, const StorageOf<D> *in,
                    StorageOf<D> *out) {
  using Traits = ReduceTraits<Op, D>;
  using R = typename Traits::R;
  using Acc = typename Traits::Acc;
  using S = StorageOf<D>;
  using Vec = dev::Vec<S, V>;
  constexpr int Rows = kBlockSize / Cols;
  constexpr int kTile = Cols * V;
  constexpr int kUnroll = 8;
  __shared__ Acc partial[Rows][kTile];
  const int x = threadIdx.x % Cols, y = threadIdx.x / Cols;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kTile; first < outCount;
       first += static_cast<int64_t>(gridDim.x) * kTile) {
    const S *column = in + first + x * V;
    Acc acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k)
      acc[k] = R::identity();
    int64_t r = y;
    for (; r + (kUnroll - 1) * Rows < reduceCount; r += kUnroll * Rows) {
      Vec loaded[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        loaded[u] = *reinterpret_cast<const Vec *>(column + (r + u * Rows) * outCount);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int k = 0; k < V; ++k)
          R::fold(acc[k], Traits::loadValue(loaded[u].v[k]), r + u * Rows);
    }
    for (; r < reduceCount; r += Rows) {
      const Vec loaded = *reinterpret_cast<const Vec *>(column + r * outCount);
#pragma unroll
      for (int k = 0; k < V; ++k)
        R::fold(acc[k], Traits::loadValue(loaded.v[k]), r);
    }
#pragma unroll
    for (int k = 0; k < V; ++k)
      partial[y][x * V + k] = acc[k];
    __syncthreads();
#pragma unroll
    for (int half = Rows / 2; half > 0; half /= 2) {
      for (int i = threadIdx.x; i < half * kTile; i += kBlockSize) {
        const int row = i / kTile, c = i % kTile;
        partial[row][c] = R::merge(partial[row][c], partial[row + half][c]);
      }
      __syncthreads();
    }
    if (threadIdx.x < kTile)
      out[first + threadIdx.x] = Traits::finish(partial[0][threadIdx.x], reduceCount);
    __syncthreads(); // partial is rewritten by the next iteration
  }
}

/// Reduction over a middle dim of [outer, reduceCount, inner] (strided, the
/// inner dim contiguous: the sum of a token's k routed rows): each thread
/// owns V neighbouring outputs of one outer row, loaded as one 16-byte
/// vector per reduced position, folded in order as reduceColumnsKernel with
/// one row does (so its results are that kernel's, bit for bit).
template <ReduceOp Op, DType D, int V>
__global__ void __launch_bounds__(kBlockSize)
reduceMiddleKernel(int64_t vectors, int64_t innerVectors, int64_t outerStride,
                   int64_t reduceStride, int64_t reduceCount, const StorageOf<D> *in,
                   StorageOf<D> *out) {
  using Traits = ReduceTraits<Op, D>;
  using R = typename Traits::R;
  using Acc = typename Traits::Acc;
  using S = StorageOf<D>;
  using Vec = dev::Vec<S, V>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < vectors;
       t += stride) {
    const int64_t outer = t / innerVectors, column = t - outer * innerVectors;
    const S *first = in + outer * outerStride + column * V;
    Acc acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k)
      acc[k] = R::identity();
    for (int64_t r = 0; r < reduceCount; ++r) {
      const Vec loaded = *reinterpret_cast<const Vec *>(first + r * reduceStride);
#pragma unroll
      for (int k = 0; k < V; ++k)
        R::fold(acc[k], Traits::loadValue(loaded.v[k]), r);
    }
    Vec result;
#pragma unroll
    for (int k = 0; k < V; ++k)
      result.v[k] = Traits::finish(acc[k], reduceCount);
    *reinterpret_cast<Vec *>(out + t * V) = result;
  }
}

template <ReduceOp Op, DType D>
llvm::Error launchReduceAs(const KernelCall &call, const ReducePlan &plan) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  const int64_t outCount = out.numElements();
  if (outCount == 0)
    return llvm::Error::success();
  LOOM_ASSIGN_OR_RETURN(StridedMap<1> kept,
                        makeStridedMap<1>(plan.keptShape, {plan.keptStrides}));
  LOOM_ASSIGN_OR_RETURN(StridedMap<1> reduced,
                        makeStridedMap<1>(plan.reducedShape, {plan.reducedStrides}));
  const int64_t reduceCount = plan.reduceCount;
  const auto *src = static_cast<const StorageOf<D> *>(in.data);
  auto *dst = static_cast<StorageOf<D> *>(out.data);
  cudaStream_t stream = call.ctx.stream;
  const bool innermostReduced =
      reduced.rank > 0 && reduced.strides[0][reduced.rank - 1] == 1;
  if (innermostReduced && reduceCount > 16) {
    if (reduceCount > 1024)
      reduceGroupKernel<Op, D, 256><<<gridFor(outCount * 256, call.ctx), kBlockSize, 0,
                                      stream>>>(outCount, reduceCount, kept, reduced, src,
                                                dst);
    else
      reduceGroupKernel<Op, D, 32><<<gridFor(outCount * 32, call.ctx), kBlockSize, 0,
                                     stream>>>(outCount, reduceCount, kept, reduced, src,
                                               dst);
    return llvm::Error::success();
  }
  // Leading dims reduced, the kept ones contiguous: 16-byte rows of a tile.
  constexpr int V = std::min(static_cast<int>(16 / sizeof(StorageOf<D>)), 8);
  constexpr int kCols = 2;
  if (V > 1 && kept.rank == 1 && kept.strides[0][0] == 1 && reduced.rank == 1 &&
      reduced.strides[0][0] == outCount && outCount % (kCols * V) == 0 &&
      reduceCount >= 64 && isAligned(src, 16)) {
    const int64_t tiles = outCount / (kCols * V);
    const int64_t cap = static_cast<int64_t>(call.ctx.multiprocessors > 0
                                                 ? call.ctx.multiprocessors
                                                 : 132) * 8;
    reduceLeadingKernel<Op, D, V, kCols>
        <<<static_cast<unsigned>(std::min(tiles, cap)), kBlockSize, 0, stream>>>(
            outCount, reduceCount, src, dst);
    return llvm::Error::success();
  }
  // Split each reduction over more threads only when the outputs alone leave
  // the GPU idle (a fixed rule, so results never depend on the device).
  int rows = 1;
  while (rows < 32 && outCount * rows < 256 * 1024 && reduceCount >= 64 * rows)
    rows *= 2;
  // A middle dim reduced, the innermost kept and contiguous: 16-byte vectors
  // along it, each reduction in order (what one row below computes).
  if (V > 1 && rows == 1 && kept.rank == 2 && kept.strides[0][1] == 1 && reduced.rank == 1) {
    // The maps' dims (size-1 dims dropped, contiguous ones merged), not the plan's.
    const int64_t inner = kept.shape[1], outerStride = kept.strides[0][0],
                  reduceStride = reduced.strides[0][0];
    if (inner % V == 0 && outerStride % V == 0 && reduceStride % V == 0 &&
        isAligned(src, 16) && isAligned(dst, 16)) {
      const int64_t vectors = outCount / V;
      reduceMiddleKernel<Op, D, V><<<gridFor(vectors, call.ctx), kBlockSize, 0, stream>>>(
          vectors, inner / V, outerStride, reduceStride, reduceCount, src, dst);
      return llvm::Error::success();
    }
  }
  const unsigned blocks = gridFor(outCount * rows, call.ctx);
  switch (rows) {
  case 1:
    reduceColumnsKernel<Op, D, 1><<<blocks, dim3(kBlockSize, 1), 0, stream>>>(
        outCount, reduceCount, kept, reduced, src, dst);
    break;
  case 2:
    reduceColumnsKernel<Op, D, 2><<<blocks, dim3(kBlockSize / 2, 2), 0, stream>>>(
        outCount, reduceCount, kept, reduced, src, dst);
    break;
  case 4:
    reduceColumnsKernel<Op, D, 4><<<blocks, dim3(kBlockSize / 4, 4), 0, stream>>>(
        outCount, reduceCount, kept, reduced, src, dst);
    break;
  case 8:
    reduceColumnsKernel<Op, D, 8><<<blocks, dim3(kBlockSize / 8, 8), 0, stream>>>(
        outCount, reduceCount, kept, reduced, src, dst);
    break;
  case 16:
    reduceColumnsKernel<Op, D, 16><<<blocks, dim3(kBlockSize / 16, 16), 0, stream>>>(
        outCount, reduceCount, kept, reduced, src, dst);
    break;
  default:
    reduceColumnsKernel<Op, D, 32><<<blocks, dim3(kBlockSize / 32, 32), 0, stream>>>(
        outCount, reduceCount, kept, reduced, src, dst);
    break;
  }
  return llvm::Error::success();
}

template <ReduceOp Op> llvm::Error reduceDispatch(const KernelCall &call, const ReducePlan &plan) {
  const DType type = call.inputs[0].dtype;
  if (type == DType::I64 || type == DType::I32) {
    if constexpr (Op == ReduceOp::Mean)
      return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(type) +
                         " (a float type is required)");
    else if (type == DType::I64)
      return launchReduceAs<Op, DType::I64>(call, plan);
    else
      return launchReduceAs<Op, DType::I32>(call, plan);
  }
  return dispatchFloatDType(type, "input", [&](auto tag) {
    return launchReduceAs<Op, decltype(tag)::value>(call, plan);
  });
}

llvm::Error launchReduce(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 1, 1));
  LOOM_ASSIGN_OR_RETURN(ReducePlan plan, cpu::detail::checkReduce(call.id, call.inputs[0],
                                                                  call.outputs[0], call.attrs));
  if (plan.op == ReduceOp::Sum)
    return reduceDispatch<ReduceOp::Sum>(call, plan);
  if (plan.op == ReduceOp::Mean)
    return reduceDispatch<ReduceOp::Mean>(call, plan);
  return reduceDispatch<ReduceOp::Max>(call, plan);
}

//===----------------------------------------------------------------------===//
// Softmax over one dim: G threads own a row (the last dim) or one thread a
// strided line
//===----------------------------------------------------------------------===//

template <typename T, int G, int K, bool LOG>
__global__ void __launch_bounds__(1024)
    softmaxRowsKernel(const T *__restrict__ x, T *out, int64_t rows, int n) {
  __shared__ MaxSum red[32];
  const int lane = threadIdx.x % G;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
  const bool active = row < rows;
  const int64_t base = (active ? row : 0) * int64_t(n);
  const int count = active ? n : 0;
  const T *in = x + base;
  float cache[cacheSlots(K)];
  loadRowCache<G, K>(in, count, lane, cache);
  MaxSum ms{-INFINITY, 0.f};
  forRow<G, K>(in, count, lane, cache, [&](int, float v) { addToMaxSum(ms, v); });
  ms = groupReduce<G>(ms, red, MaxSumOp{});
  const float logSum = logf(ms.s);
  const float invSum = 1.f / ms.s;
  // Each element is read and then written by the same thread: out may be x.
  forRow<G, K>(in, count, lane, cache, [&](int j, float v) {
    const float shifted = v - ms.m;
    out[base + j] = fromF<T>(LOG ? shifted - logSum : expf(shifted) * invSum);
  });
}

/// Softmax along a dim that is not the last: one thread per line (the lines
/// of consecutive threads are adjacent in memory, so loads coalesce).
template <typename T, bool LOG>
__global__ void __launch_bounds__(256)
    softmaxStridedKernel(const T *x, T *out, int64_t lines, int64_t inner, int64_t n) {
  for (int64_t line = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; line < lines;
       line += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (line / inner) * n * inner + line % inner;
    MaxSum ms{-INFINITY, 0.f};
    for (int64_t j = 0; j < n; ++j)
      addToMaxSum(ms, toF(x[base + j * inner]));
    const float logSum = logf(ms.s);
    const float invSum = 1.f / ms.s;
    for (int64_t j = 0; j < n; ++j) {
      const float shifted = toF(x[base + j * inner]) - ms.m;
      out[base + j * inner] = fromF<T>(LOG ? shifted - logSum : expf(shifted) * invSum);
    }
  }
}

llvm::Error launchSoftmax(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 1, 1));
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::SoftmaxPlan plan,
                        cpu::detail::checkSoftmax(call.id, in, out, call.attrs));
  const bool logSoftmax = plan.log;
  const int64_t length = plan.length, inner = plan.inner, lines = plan.lines;
  return dispatchType(in.dtype, "input", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    if (lines == 0)
      return llvm::Error::success();
    const T *x = static_cast<const T *>(in.data);
    T *y = static_cast<T *>(out.data);
    cudaStream_t stream = call.ctx.stream;
    if (inner == 1) {
      LOOM_RETURN_IF_ERROR(checkFitsInt(length, "softmax length"));
      LOOM_RETURN_IF_ERROR(checkRowCount(lines));
      withRowConfig(length, [&](auto cfg) {
        using Cfg = decltype(cfg);
        if (logSoftmax)
          softmaxRowsKernel<T, Cfg::G, Cfg::K, true>
              <<<rowBlocks<Cfg>(lines), Cfg::threads, 0, stream>>>(x, y, lines, int(length));
        else
          softmaxRowsKernel<T, Cfg::G, Cfg::K, false>
              <<<rowBlocks<Cfg>(lines), Cfg::threads, 0, stream>>>(x, y, lines, int(length));
      });
    } else {
      const unsigned blocks = gridFor(lines, call.ctx);
      if (logSoftmax)
        softmaxStridedKernel<T, true><<<blocks, 256, 0, stream>>>(x, y, lines, inner, length);
      else
        softmaxStridedKernel<T, false><<<blocks, 256, 0, stream>>>(x, y, lines, inner, length);
    }
    return llvm::Error::success();
  });
}

//===----------------------------------------------------------------------===//
// nn.sum_squares_multi: the gradient norm's sums of squares, many tensors a
// launch. Phase one: a block per kSumSquaresChunk-element chunk writes its
// f64 partial to the scratch; phase two: a block per tensor sums its
// partials. Both in a fixed order, so results never depend on timing.
//===----------------------------------------------------------------------===//

constexpr int kSumSquaresTensors = 80; // per launch: the arguments stay under 4 KB

struct SumSquaresArgs {
  int count;
  const void *x[kSumSquaresTensors];
  int64_t n[kSumSquaresTensors];
  int64_t firstBlock[kSumSquaresTensors + 1]; // chunk blocks of this launch
  int64_t firstPartial[kSumSquaresTensors];   // the tensor's first scratch slot
  int index[kSumSquaresTensors];              // its position in the call
  float *out[kSumSquaresTensors];             // null when the call makes a total
};

/// Sums `v` over the block in a fixed tree; the total in thread 0.
__device__ double blockSumDouble(double v) {
  __shared__ double warpSums[kBlockSize / 32];
  for (int o = 16; o > 0; o /= 2)
    v += __shfl_xor_sync(kFullMask, v, o);
  if (threadIdx.x % 32 == 0)
    warpSums[threadIdx.x / 32] = v;
  __syncthreads();
  double total = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kBlockSize / 32; ++w)
      total += warpSums[w];
  return total;
}

template <DType D>
__global__ void __launch_bounds__(kBlockSize)
sumSquaresChunkKernel(const __grid_constant__ SumSquaresArgs a, double *partials) {
  using S = StorageOf<D>;
  using E = dev::Elem<D>;
  int t = 0;
  while (t + 1 < a.count && a.firstBlock[t + 1] <= blockIdx.x)
    ++t;
  const int64_t chunk = blockIdx.x - a.firstBlock[t];
  const int64_t begin = chunk * kSumSquaresChunk;
  const int64_t end = begin + kSumSquaresChunk < a.n[t] ? begin + kSumSquaresChunk : a.n[t];
  const S *x = static_cast<const S *>(a.x[t]);
  constexpr int V = 16 / sizeof(S);
  double acc = 0;
  // Chunks start at multiples of kSumSquaresChunk (a multiple of V), so an
  // aligned tensor's chunks are aligned too.
  const bool aligned = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  const int64_t vecEnd = aligned ? begin + (end - begin) / V * V : begin;
  for (int64_t i = begin + int64_t(threadIdx.x) * V; i < vecEnd; i += int64_t(kBlockSize) * V) {
    const uint4 raw = *reinterpret_cast<const uint4 *>(x + i);
    const S *v = reinterpret_cast<const S *>(&raw);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const double e = E::loadDouble(v[k]);
      acc = fma(e, e, acc);
    }
  }
  for (int64_t j = vecEnd + threadIdx.x; j < end; j += kBlockSize) {
    const double e = E::loadDouble(x[j]);
    acc = fma(e, e, acc);
  }
  const double total = blockSumDouble(acc);
  if (threadIdx.x == 0)
    partials[a.firstPartial[t] + chunk] = total;
}

/// Each tensor's partials in order -> its f64 sum in the scratch (and its
/// f32 result unless the call makes a total).
__global__ void __launch_bounds__(kBlockSize)
sumSquaresFinishKernel(const __grid_constant__ SumSquaresArgs a, const double *partials,
                       double *sums) {
  const int t = blockIdx.x;
  const int64_t chunks = (a.n[t] + kSumSquaresChunk - 1) / kSumSquaresChunk;
  double acc = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += kBlockSize)
    acc += partials[a.firstPartial[t] + c];
  const double total = blockSumDouble(acc);
  if (threadIdx.x == 0) {
    sums[a.index[t]] = total;
    if (a.out[t])
      *a.out[t] = static_cast<float>(total);
  }
}

/// The total: the tensors' sums in order, by one thread.
__global__ void sumSquaresTotalKernel(const double *sums, int64_t n, float *out) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i)
    acc += sums[i];
  *out = static_cast<float>(acc);
}

llvm::Error launchSumSquaresMulti(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(bool total, call.attrs.getBool("total", false));
  LOOM_RETURN_IF_ERROR(cpu::detail::checkSumSquaresMulti(call.inputs, call.outputs, total));
  double *partials = static_cast<double *>(call.outputs.back().data);
  const size_t n = call.inputs.size();
  std::vector<int64_t> firstPartial{0};
  for (const Tensor &t : call.inputs)
    firstPartial.push_back(firstPartial.back() + sumSquaresChunks(t.numElements()));
  double *sums = partials + firstPartial.back();
  // Batches of one dtype, up to kSumSquaresTensors each, in input order.
  for (size_t start = 0; start < n;) {
    const DType type = call.inputs[start].dtype;
    SumSquaresArgs a{};
    int64_t blocks = 0;
    size_t i = start;
    for (; i < n && a.count < kSumSquaresTensors && call.inputs[i].dtype == type; ++i) {
      a.x[a.count] = call.inputs[i].data;
      a.n[a.count] = call.inputs[i].numElements();
      a.firstBlock[a.count] = blocks;
      a.firstPartial[a.count] = firstPartial[i];
      a.index[a.count] = int(i);
      a.out[a.count] = total ? nullptr : static_cast<float *>(call.outputs[i].data);
      blocks += sumSquaresChunks(a.n[a.count]);
      ++a.count;
    }
    a.firstBlock[a.count] = blocks;
    start = i;
    if (blocks > 0)
      LOOM_RETURN_IF_ERROR(dispatchFloatDType(type, "input", [&](auto tag) -> llvm::Error {
        constexpr DType D = decltype(tag)::value;
        if constexpr (D == DType::F32 || D == DType::BF16 || D == DType::F16)
          sumSquaresChunkKernel<D><<<unsigned(blocks), kBlockSize, 0, call.ctx.stream>>>(a,
                                                                                   partials);
        return llvm::Error::success();
      }));
    sumSquaresFinishKernel<<<unsigned(a.count), kBlockSize, 0, call.ctx.stream>>>(a, partials,
                                                                                 sums);
  }
  if (total)
    sumSquaresTotalKernel<<<1, 1, 0, call.ctx.stream>>>(
        sums, int64_t(n), static_cast<float *>(call.outputs[0].data));
  return llvm::Error::success();
}

} // namespace

void registerReductionKernels(KernelRegistry &registry) {
  for (KernelId id : {KernelId::ReduceSum, KernelId::ReduceMean, KernelId::ReduceMax})
    registry.add(id, launchReduce);
  registry.add(KernelId::Softmax, launchSoftmax);
  registry.add(KernelId::LogSoftmax, launchSoftmax);
  registry.add(KernelId::SumSquaresMulti, launchSumSquaresMulti);
}

} // namespace loom::cuda
