// CUDA kernels of layer_norm and rms_norm and their gradients (as
// kernels/cpu/Normalization.cpp and the norm part of Backward.cpp): G threads
// own a row; statistics in f32 with a fixed reduction order, so results are
// deterministic run to run. f32, bf16 and f16 (widened on load, rounded to
// nearest even on store).

#include "kernels/cuda/DeviceSupport.cuh"
#include "kernels/cpu/OperandChecks.h"
#include "runtime/abi/NormWeightGrad.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace loom::cuda {
namespace {

//===----------------------------------------------------------------------===//
// Row kernels: layer_norm, rms_norm and their gradients. G threads own one
// row; blockDim.x / G rows per block.
//===----------------------------------------------------------------------===//

/// Mean (LAYER) and 1/std (or 1/rms) of a row, two passes in f32.
template <int G, int K, bool LAYER, typename T>
__device__ __forceinline__ void rowStatistics(const T *in, int count, int n, int lane,
                                              const float (&cache)[cacheSlots(K)], float eps,
                                              float *red, float &mean, float &invStd) {
  mean = 0.f;
  if constexpr (LAYER) {
    float sum = 0.f;
    forRow<G, K>(in, count, lane, cache, [&](int, float v) { sum += v; });
    sum = groupReduce<G>(sum, red, SumOp{});
    mean = sum / float(n);
  }
  float squares = 0.f;
  const float mu = mean;
  forRow<G, K>(in, count, lane, cache, [&](int, float v) {
    const float c = v - mu;
    squares += c * c;
  });
  squares = groupReduce<G>(squares, red, SumOp{});
  invStd = 1.f / sqrtf(squares / float(n) + eps);
}

template <typename T, int G, int K, bool LAYER>
__global__ void __launch_bounds__(1024)
    normKernel(const T *__restrict__ x, const T *__restrict__ weight,
               const T *__restrict__ bias, T *out, int64_t rows, int n, float eps) {
  __shared__ float red[32];
  const int lane = threadIdx.x % G;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
  const bool active = row < rows;
  const int64_t base = (active ? row : 0) * int64_t(n);
  const int count = active ? n : 0;
  const T *in = x + base;
  float cache[cacheSlots(K)];
  loadRowCache<G, K>(in, count, lane, cache);
  float mean, invStd;
  rowStatistics<G, K, LAYER>(in, count, n, lane, cache, eps, red, mean, invStd);
  forRow<G, K>(in, count, lane, cache, [&](int j, float v) {
    float y = (v - mean) * invStd;
    if (weight)
      y *= toF(weight[j]);
    if (bias)
      y += toF(bias[j]);
    out[base + j] = fromF<T>(y);
  });
}

/// dx = invStd (g - mean(g) - xhat mean(g xhat)), g = dy * weight; without
/// the mean(g) term for rms_norm (xhat = x * invRms there).
template <typename T, int G, int K, bool LAYER>
__global__ void __launch_bounds__(1024)
    normGradKernel(const T *__restrict__ x, const T *__restrict__ dy,
                   const T *__restrict__ weight, T *dx, int64_t rows, int n, float eps,
                   const T *__restrict__ addend) {
  __shared__ float red[32];
  const int lane = threadIdx.x % G;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
  const bool active = row < rows;
  const int64_t base = (active ? row : 0) * int64_t(n);
  const int count = active ? n : 0;
  const T *in = x + base;
  const T *grad = dy + base;
  float xs[cacheSlots(K)], gs[cacheSlots(K)];
  loadRowCache<G, K>(in, count, lane, xs);
  loadRowCache<G, K>(grad, count, lane, gs);
  float mean, invStd;
  rowStatistics<G, K, LAYER>(in, count, n, lane, xs, eps, red, mean, invStd);
  // Each thread's share of sum(g) and sum(g xhat), g = dy * weight.
  float sumG = 0.f, sumGXhat = 0.f;
  if constexpr (K > 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = lane + k * G;
      if (j < count) {
        float g = gs[k];
        if (weight)
          g *= toF(weight[j]);
        sumG += g;
        sumGXhat += g * ((xs[k] - mean) * invStd);
      }
    }
  } else {
    for (int j = lane; j < count; j += G) {
      float g = toF(grad[j]);
      if (weight)
        g *= toF(weight[j]);
      sumG += g;
      sumGXhat += g * ((toF(in[j]) - mean) * invStd);
    }
  }
  float meanG = 0.f;
  if constexpr (LAYER)
    meanG = groupReduce<G>(sumG, red, SumOp{}) / float(n);
  const float meanGXhat = groupReduce<G>(sumGXhat, red, SumOp{}) / float(n);
  // Each element is read and then written by the same thread: dx may be x or dy.
  if constexpr (K > 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = lane + k * G;
      if (j < count) {
        float g = gs[k];
        if (weight)
          g *= toF(weight[j]);
        const float xhat = (xs[k] - mean) * invStd;
        float v = invStd * (g - meanG - xhat * meanGXhat);
        if (addend)
          v += toF(addend[base + j]);
        dx[base + j] = fromF<T>(v);
      }
    }
  } else {
    for (int j = lane; j < count; j += G) {
      float g = toF(grad[j]);
      if (weight)
        g *= toF(weight[j]);
      const float xhat = (toF(in[j]) - mean) * invStd;
      float v = invStd * (g - meanG - xhat * meanGXhat);
      if (addend)
        v += toF(addend[base + j]);
      dx[base + j] = fromF<T>(v);
    }
  }
}


/// normKernel with 16-byte accesses: thread `lane` of a row's G owns the
/// vectors q = lane + k * G (k < KV), kept in registers; n is a multiple of
/// the vector width and every pointer is 16-byte aligned.
template <typename T, int G, int KV, bool LAYER>
__global__ void __launch_bounds__(G < 256 ? 256 : G)
    normVecKernel(const T *__restrict__ x, const T *__restrict__ weight,
                  const T *__restrict__ bias, T *out, int64_t rows, int n, float eps) {
  using P = Pack16<T>;
  constexpr int VN = P::kWidth;
  __shared__ float red[32];
  const int lane = threadIdx.x % G;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
  const bool active = row < rows;
  const int64_t base = (active ? row : 0) * int64_t(n);
  const int nv = active ? n / VN : 0;
  const P *in = reinterpret_cast<const P *>(x + base);
  P cache[KV];
#pragma unroll
  for (int k = 0; k < KV; ++k)
    if (lane + k * G < nv)
      cache[k] = in[lane + k * G];
  float mean = 0.f;
  if constexpr (LAYER) {
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < KV; ++k)
      if (lane + k * G < nv)
#pragma unroll
        for (int e = 0; e < VN; ++e)
          sum += toF(cache[k].v[e]);
    sum = groupReduce<G>(sum, red, SumOp{});
    mean = sum / float(n);
  }
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < KV; ++k)
    if (lane + k * G < nv)
#pragma unroll
      for (int e = 0; e < VN; ++e) {
        const float c = toF(cache[k].v[e]) - mean;
        squares += c * c;
      }
  squares = groupReduce<G>(squares, red, SumOp{});
  const float invStd = 1.f / sqrtf(squares / float(n) + eps);
  const P *ws = reinterpret_cast<const P *>(weight);
  const P *bs = reinterpret_cast<const P *>(bias);
  P *dst = reinterpret_cast<P *>(out + base);
  // Each element is read and then written by the same thread: out may be x.
#pragma unroll
  for (int k = 0; k < KV; ++k) {
    const int q = lane + k * G;
    if (q < nv) {
      P wv, bv, o;
      if (weight)
        wv = ws[q];
      if (bias)
        bv = bs[q];
#pragma unroll
      for (int e = 0; e < VN; ++e) {
        float y = (toF(cache[k].v[e]) - mean) * invStd;
        if (weight)
          y *= toF(wv.v[e]);
        if (bias)
          y += toF(bv.v[e]);
        o.v[e] = fromF<T>(y);
      }
      dst[q] = o;
    }
  }
}

/// normGradKernel with 16-byte accesses (the layout of normVecKernel).
template <typename T, int G, int KV, bool LAYER, bool ADD>
__global__ void __launch_bounds__(G < 256 ? 256 : G)
    normGradVecKernel(const T *__restrict__ x, const T *__restrict__ dy,
                      const T *__restrict__ weight, T *dx, int64_t rows, int n, float eps,
                      const T *__restrict__ addend) {
  using P = Pack16<T>;
  constexpr int VN = P::kWidth;
  __shared__ float red[32];
  const int lane = threadIdx.x % G;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
  const bool active = row < rows;
  const int64_t base = (active ? row : 0) * int64_t(n);
  const int nv = active ? n / VN : 0;
  const P *in = reinterpret_cast<const P *>(x + base);
  const P *grad = reinterpret_cast<const P *>(dy + base);
  P xs[KV], gs[KV], as[ADD ? KV : 1];
  // The addend is loaded with x and dy, so its latency hides behind the
  // reductions instead of following them.
  const P *add = ADD ? reinterpret_cast<const P *>(addend + base) : nullptr;
#pragma unroll
  for (int k = 0; k < KV; ++k)
    if (lane + k * G < nv) {
      xs[k] = in[lane + k * G];
      gs[k] = grad[lane + k * G];
      if constexpr (ADD)
        as[k] = add[lane + k * G];
    }
  float mean = 0.f;
  if constexpr (LAYER) {
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < KV; ++k)
      if (lane + k * G < nv)
#pragma unroll
        for (int e = 0; e < VN; ++e)
          sum += toF(xs[k].v[e]);
    sum = groupReduce<G>(sum, red, SumOp{});
    mean = sum / float(n);
  }
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < KV; ++k)
    if (lane + k * G < nv)
#pragma unroll
      for (int e = 0; e < VN; ++e) {
        const float c = toF(xs[k].v[e]) - mean;
        squares += c * c;
      }
  squares = groupReduce<G>(squares, red, SumOp{});
  const float invStd = 1.f / sqrtf(squares / float(n) + eps);
  const P *ws = reinterpret_cast<const P *>(weight);
  // Each thread's share of sum(g) and sum(g xhat), g = dy * weight.
  float sumG = 0.f, sumGXhat = 0.f;
#pragma unroll
  for (int k = 0; k < KV; ++k) {
    const int q = lane + k * G;
    if (q < nv) {
      P wv;
      if (weight)
        wv = ws[q];
#pragma unroll
      for (int e = 0; e < VN; ++e) {
        float g = toF(gs[k].v[e]);
        if (weight)
          g *= toF(wv.v[e]);
        sumG += g;
        sumGXhat += g * ((toF(xs[k].v[e]) - mean) * invStd);
      }
    }
  }
  float meanG = 0.f;
  if constexpr (LAYER)
    meanG = groupReduce<G>(sumG, red, SumOp{}) / float(n);
  const float meanGXhat = groupReduce<G>(sumGXhat, red, SumOp{}) / float(n);
  P *dst = reinterpret_cast<P *>(dx + base);
  // Each element is read and then written by the same thread: dx may be x or dy.
#pragma unroll
  for (int k = 0; k < KV; ++k) {
    const int q = lane + k * G;
    if (q < nv) {
      P wv, o;
      if (weight)
        wv = ws[q];
#pragma unroll
      for (int e = 0; e < VN; ++e) {
        float g = toF(gs[k].v[e]);
        if (weight)
          g *= toF(wv.v[e]);
        const float xhat = (toF(xs[k].v[e]) - mean) * invStd;
        float v = invStd * (g - meanG - xhat * meanGXhat);
        if constexpr (ADD)
          v += toF(as[k].v[e]);
        o.v[e] = fromF<T>(v);
      }
      dst[q] = o;
    }
  }
}

llvm::Error launchNorm(const KernelCall &call) {
  const bool layerNorm = call.id == KernelId::LayerNorm;
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, layerNorm ? 3 : 2, 1, 1));
  const Tensor &x = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::NormPlan plan,
                        cpu::detail::checkNorm(call.id, call.inputs, out, call.attrs));
  const int64_t features = plan.features, rows = plan.rows;
  const double epsilon = plan.epsilon;
  const Tensor *weight = plan.weight, *bias = plan.bias;
  LOOM_RETURN_IF_ERROR(checkFitsInt(features, "normalized dim"));
  LOOM_RETURN_IF_ERROR(checkRowCount(rows));
  return dispatchType(x.dtype, "input", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    if (rows == 0)
      return llvm::Error::success();
    const T *xs = static_cast<const T *>(x.data);
    const T *ws = weight ? static_cast<const T *>(weight->data) : nullptr;
    const T *bs = bias ? static_cast<const T *>(bias->data) : nullptr;
    T *ys = static_cast<T *>(out.data);
    const float eps = static_cast<float>(epsilon);
    cudaStream_t stream = call.ctx.stream;
    const bool aligned = isAligned(xs, 16) && isAligned(ws, 16) && isAligned(bs, 16) &&
                         isAligned(ys, 16);
    auto launchVec = [&](auto cfg) {
      using Cfg = decltype(cfg);
      if (layerNorm)
        normVecKernel<T, Cfg::G, Cfg::K, true>
            <<<rowBlocks<Cfg>(rows), Cfg::threads, 0, stream>>>(xs, ws, bs, ys, rows,
                                                                 int(features), eps);
      else
        normVecKernel<T, Cfg::G, Cfg::K, false>
            <<<rowBlocks<Cfg>(rows), Cfg::threads, 0, stream>>>(xs, ws, nullptr, ys, rows,
                                                                 int(features), eps);
    };
    // Four vectors a thread (twice the threads of eight): more rows in
    // flight per SM, measured faster at 2048 and 4096 features.
    if (withVecRowConfig<T, 4>(features, aligned, launchVec))
      return llvm::Error::success();
    withRowConfig(features, [&](auto cfg) {
      using Cfg = decltype(cfg);
      if (layerNorm)
        normKernel<T, Cfg::G, Cfg::K, true><<<rowBlocks<Cfg>(rows), Cfg::threads, 0, stream>>>(
            xs, ws, bs, ys, rows, int(features), eps);
      else
        normKernel<T, Cfg::G, Cfg::K, false><<<rowBlocks<Cfg>(rows), Cfg::threads, 0, stream>>>(
            xs, ws, nullptr, ys, rows, int(features), eps);
    });
    return llvm::Error::success();
  });
}

llvm::Error launchNormGrad(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 4, 1, 1));
  const Tensor &x = call.inputs[0], &dy = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::NormPlan plan,
                        cpu::detail::checkNormGrad(call.id, call.inputs, out, call.attrs));
  const void *addendData = plan.addend ? plan.addend->data : nullptr;
  const bool layerNorm = plan.layerNorm;
  const int64_t features = plan.features, rows = plan.rows;
  const double epsilon = plan.epsilon;
  const Tensor *weight = plan.weight;
  LOOM_RETURN_IF_ERROR(checkFitsInt(features, "normalized dim"));
  LOOM_RETURN_IF_ERROR(checkRowCount(rows));
  return dispatchType(x.dtype, "input", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    if (rows == 0)
      return llvm::Error::success();
    const T *xs = static_cast<const T *>(x.data);
    const T *dys = static_cast<const T *>(dy.data);
    const T *ws = weight ? static_cast<const T *>(weight->data) : nullptr;
    T *dxs = static_cast<T *>(out.data);
    const T *adds = static_cast<const T *>(addendData);
    const float eps = static_cast<float>(epsilon);
    cudaStream_t stream = call.ctx.stream;
    const bool aligned = isAligned(xs, 16) && isAligned(dys, 16) && isAligned(ws, 16) &&
                         isAligned(dxs, 16) && isAligned(adds, 16);
    auto launchVec = [&](auto cfg) {
      using Cfg = decltype(cfg);
      const unsigned grid = rowBlocks<Cfg>(rows);
      const int n = int(features);
      if (layerNorm && adds)
        normGradVecKernel<T, Cfg::G, Cfg::K, true, true>
            <<<grid, Cfg::threads, 0, stream>>>(xs, dys, ws, dxs, rows, n, eps, adds);
      else if (layerNorm)
        normGradVecKernel<T, Cfg::G, Cfg::K, true, false>
            <<<grid, Cfg::threads, 0, stream>>>(xs, dys, ws, dxs, rows, n, eps, adds);
      else if (adds)
        normGradVecKernel<T, Cfg::G, Cfg::K, false, true>
            <<<grid, Cfg::threads, 0, stream>>>(xs, dys, ws, dxs, rows, n, eps, adds);
      else
        normGradVecKernel<T, Cfg::G, Cfg::K, false, false>
            <<<grid, Cfg::threads, 0, stream>>>(xs, dys, ws, dxs, rows, n, eps, adds);
    };
    // Four vectors a thread (twice the threads of eight): more rows in
    // flight per SM, measured faster at 2048 and 4096 features.
    if (withVecRowConfig<T, 4>(features, aligned, launchVec))
      return llvm::Error::success();
    withRowConfig(features, [&](auto cfg) {
      using Cfg = decltype(cfg);
      if (layerNorm)
        normGradKernel<T, Cfg::G, Cfg::K, true>
            <<<rowBlocks<Cfg>(rows), Cfg::threads, 0, stream>>>(xs, dys, ws, dxs, rows,
                                                                 int(features), eps, adds);
      else
        normGradKernel<T, Cfg::G, Cfg::K, false>
            <<<rowBlocks<Cfg>(rows), Cfg::threads, 0, stream>>>(xs, dys, ws, dxs, rows,
                                                                 int(features), eps, adds);
    });
    return llvm::Error::success();
  });
}

//===----------------------------------------------------------------------===//
// nn.norm_weight_grad: dw = sum over rows of dy * xhat. Where a block's
// threads can cover a row (16-byte vectors, up to 8192 bf16 features), one
// kernel computes each row's statistics and the column sums of its block of
// rows (x read once); otherwise two -- each row's mean and inverse deviation
// (a warp a row, two passes), then the column sums of a block of rows (a
// thread a vector of columns, rows in order). Then each column's blocks are
// summed in f64 in a fixed order.
//===----------------------------------------------------------------------===//

/// A warp a row; V elements a load (V > 1: 16-byte loads, cols % V == 0 and
/// the rows aligned).
template <DType D, int V>
__global__ void __launch_bounds__(kBlockSize)
normRowStatsKernel(const StorageOf<D> *x, int64_t rows, int64_t cols, float eps, bool centered,
                   float *rstd, float *means) {
  using E = dev::Elem<D>;
  using S = StorageOf<D>;
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * (kBlockSize / 32) + threadIdx.x / 32;
  if (row >= rows)
    return;
  const S *in = x + row * cols;
  auto forRow = [&](auto &&fn) {
    for (int64_t c = int64_t(lane) * V; c < cols; c += 32 * V) {
      S v[V];
      if constexpr (V > 1)
        *reinterpret_cast<Pack16<S> *>(v) = *reinterpret_cast<const Pack16<S> *>(in + c);
      else
        v[0] = in[c];
#pragma unroll
      for (int k = 0; k < V; ++k)
        fn(E::load(v[k]));
    }
  };
  float mean = 0.f;
  if (centered) {
    float sum = 0.f;
    forRow([&](float v) { sum += v; });
    for (int o = 16; o > 0; o /= 2)
      sum += __shfl_xor_sync(kFullMask, sum, o);
    mean = sum / float(cols);
  }
  float squares = 0.f;
  forRow([&](float v) {
    const float d = v - mean;
    squares += d * d;
  });
  for (int o = 16; o > 0; o /= 2)
    squares += __shfl_xor_sync(kFullMask, squares, o);
  if (lane == 0) {
    rstd[row] = rsqrtf(squares / float(cols) + eps);
    means[row] = mean;
  }
}

template <DType D, int V>
__global__ void __launch_bounds__(kBlockSize)
normWeightPartialsKernel(const StorageOf<D> *x, const StorageOf<D> *dy, int64_t rows,
                         int64_t cols, const float *rstd, const float *means, float *partials) {
  using E = dev::Elem<D>;
  using S = StorageOf<D>;
  const int64_t c = (int64_t(blockIdx.y) * kBlockSize + threadIdx.x) * V;
  if (c >= cols)
    return;
  const int64_t first = int64_t(blockIdx.x) * kNormWeightGradRows;
  const int64_t last = first + kNormWeightGradRows < rows ? first + kNormWeightGradRows : rows;
  float acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k)
    acc[k] = 0.f;
#pragma unroll 4
  for (int64_t r = first; r < last; ++r) {
    const float inv = rstd[r], mean = means[r];
    S xs[V], ds[V];
    if constexpr (V > 1) {
      *reinterpret_cast<Pack16<S> *>(xs) = *reinterpret_cast<const Pack16<S> *>(x + r * cols + c);
      *reinterpret_cast<Pack16<S> *>(ds) = *reinterpret_cast<const Pack16<S> *>(dy + r * cols + c);
    } else {
      xs[0] = x[r * cols + c];
      ds[0] = dy[r * cols + c];
    }
#pragma unroll
    for (int k = 0; k < V; ++k)
      acc[k] += E::load(ds[k]) * ((E::load(xs[k]) - mean) * inv);
  }
#pragma unroll
  for (int k = 0; k < V; ++k)
    partials[blockIdx.x * cols + c + k] = acc[k];
}

/// One pass instead of the first two when a block's threads cover a row
/// (cols <= T * V, V-wide vectors): a block takes kNormWeightGradRows rows,
/// thread t columns [t V, t V + V); R rows at a time it loads x and dy, sums
/// each row's squares (and first its values, for layer_norm) across the
/// block, and adds dy * xhat to its columns' sums. x is read once, not
/// twice. Each row's mean and inverse deviation still go to the scratch.
template <DType D, int V, int T, int R>
__global__ void __launch_bounds__(T)
normWeightOnePassKernel(const StorageOf<D> *x, const StorageOf<D> *dy, int64_t rows, int64_t cols,
                        float eps, bool centered, float *rstd, float *means, float *partials) {
  using E = dev::Elem<D>;
  using S = StorageOf<D>;
  constexpr int kWarps = T / 32;
  // Two buffers per statistic, alternating by batch: one barrier a batch.
  __shared__ float sums[2][kWarps][R], squares[2][kWarps][R];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t c = int64_t(threadIdx.x) * V;
  const bool active = c < cols;
  const int64_t first = int64_t(blockIdx.x) * kNormWeightGradRows;
  const int64_t last = first + kNormWeightGradRows < rows ? first + kNormWeightGradRows : rows;
  const float n = float(cols);
  float acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k)
    acc[k] = 0.f;
  // Sums each of the R values over the block (warp shuffles, then the warps'
  // partials from shared memory, in warp order).
  auto blockSum = [&](float (&v)[R], float (&buf)[kWarps][R]) {
#pragma unroll
    for (int i = 0; i < R; ++i)
      for (int o = 16; o > 0; o /= 2)
        v[i] += __shfl_xor_sync(kFullMask, v[i], o);
    if (lane == 0)
#pragma unroll
      for (int i = 0; i < R; ++i)
        buf[warp][i] = v[i];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < R; ++i) {
      float t = 0.f;
      for (int w = 0; w < kWarps; ++w)
        t += buf[w][i];
      v[i] = t;
    }
  };
  int batch = 0;
  for (int64_t r0 = first; r0 < last; r0 += R, ++batch) {
    S xs[R][V], ds[R][V];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (active && r0 + i < last) {
        *reinterpret_cast<Pack16<S> *>(xs[i]) =
            *reinterpret_cast<const Pack16<S> *>(x + (r0 + i) * cols + c);
        *reinterpret_cast<Pack16<S> *>(ds[i]) =
            *reinterpret_cast<const Pack16<S> *>(dy + (r0 + i) * cols + c);
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k)
          xs[i][k] = ds[i][k] = E::store(0.f);
      }
    }
    float mean[R], sq[R];
#pragma unroll
    for (int i = 0; i < R; ++i)
      mean[i] = 0.f;
    if (centered) {
#pragma unroll
      for (int i = 0; i < R; ++i)
#pragma unroll
        for (int k = 0; k < V; ++k)
          mean[i] += E::load(xs[i][k]);
      blockSum(mean, sums[batch & 1]);
#pragma unroll
      for (int i = 0; i < R; ++i)
        mean[i] /= n;
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      sq[i] = 0.f;
      if (active)
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float d = E::load(xs[i][k]) - mean[i];
          sq[i] += d * d;
        }
    }
    blockSum(sq, squares[batch & 1]);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const float inv = rsqrtf(sq[i] / n + eps);
      if (threadIdx.x == 0 && r0 + i < last) {
        rstd[r0 + i] = inv;
        means[r0 + i] = mean[i];
      }
#pragma unroll
      for (int k = 0; k < V; ++k)
        acc[k] += E::load(ds[i][k]) * ((E::load(xs[i][k]) - mean[i]) * inv);
    }
  }
  if (active)
#pragma unroll
    for (int k = 0; k < V; ++k)
      partials[blockIdx.x * cols + c + k] = acc[k];
}

/// Each column's partial sums in f64, a block per 32 columns: 8 groups of
/// threads sum consecutive runs of the row blocks in order, then the 8 runs
/// are added in order (a fixed order: deterministic run to run).
constexpr int kFinishColumns = 32, kFinishGroups = 8;

template <DType O>
__global__ void __launch_bounds__(kFinishColumns *kFinishGroups)
normWeightFinishKernel(const float *partials, int64_t blocks, int64_t cols, StorageOf<O> *dw) {
  __shared__ double runs[kFinishGroups][kFinishColumns];
  const int tx = threadIdx.x % kFinishColumns, group = threadIdx.x / kFinishColumns;
  const int64_t c = int64_t(blockIdx.x) * kFinishColumns + tx;
  const int64_t per = (blocks + kFinishGroups - 1) / kFinishGroups;
  const int64_t from = group * per, to = from + per < blocks ? from + per : blocks;
  double sum = 0;
  if (c < cols)
    for (int64_t b = from; b < to; ++b)
      sum += partials[b * cols + c];
  runs[group][tx] = sum;
  __syncthreads();
  if (group == 0 && c < cols) {
    double total = 0;
    for (int g = 0; g < kFinishGroups; ++g)
      total += runs[g][tx];
    dw[c] = dev::Elem<O>::storeDouble(total);
  }
}

llvm::Error launchNormWeightGrad(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(cpu::detail::NormPlan plan,
                        cpu::detail::checkNormWeightGrad(call.inputs, call.outputs, call.attrs));
  const Tensor &x = call.inputs[0], &dy = call.inputs[1], &dw = call.outputs[0];
  const int64_t rows = plan.rows, cols = plan.features, blocks = normWeightGradBlocks(rows);
  if (cols == 0)
    return llvm::Error::success();
  float *rstd = static_cast<float *>(call.outputs[1].data);
  float *means = rstd + rows, *partials = means + rows;
  cudaStream_t stream = call.ctx.stream;
  LOOM_RETURN_IF_ERROR(dispatchFloatDType(x.dtype, "x", [&](auto tag) -> llvm::Error {
    constexpr DType D = decltype(tag)::value;
    if constexpr (D == DType::F32 || D == DType::BF16 || D == DType::F16) {
      using S = StorageOf<D>;
      const S *px = static_cast<const S *>(x.data), *pdy = static_cast<const S *>(dy.data);
      if (rows > 0) {
        const int64_t rowBlocks = (rows + kBlockSize / 32 - 1) / (kBlockSize / 32);
        constexpr int V = 16 / sizeof(S);
        const bool vectors = cols % V == 0 && isAligned(px, 16) && isAligned(pdy, 16);
        // One pass where a block's threads cover a row.
        const float eps = float(plan.epsilon);
        const bool centered = plan.layerNorm;
        const unsigned grid = unsigned(blocks);
        if (vectors && cols <= 256 * V) {
          normWeightOnePassKernel<D, V, 256, 4><<<grid, 256, 0, stream>>>(
              px, pdy, rows, cols, eps, centered, rstd, means, partials);
          return llvm::Error::success();
        }
        if (vectors && cols <= 512 * V) {
          normWeightOnePassKernel<D, V, 512, 4><<<grid, 512, 0, stream>>>(
              px, pdy, rows, cols, eps, centered, rstd, means, partials);
          return llvm::Error::success();
        }
        if (vectors && cols <= 1024 * V) {
          normWeightOnePassKernel<D, V, 1024, 2><<<grid, 1024, 0, stream>>>(
              px, pdy, rows, cols, eps, centered, rstd, means, partials);
          return llvm::Error::success();
        }
        if (vectors)
          normRowStatsKernel<D, V><<<unsigned(rowBlocks), kBlockSize, 0, stream>>>(
              px, rows, cols, float(plan.epsilon), plan.layerNorm, rstd, means);
        else
          normRowStatsKernel<D, 1><<<unsigned(rowBlocks), kBlockSize, 0, stream>>>(
              px, rows, cols, float(plan.epsilon), plan.layerNorm, rstd, means);
        if (vectors) {
          const dim3 grid(unsigned(blocks), unsigned((cols / V + kBlockSize - 1) / kBlockSize));
          normWeightPartialsKernel<D, V><<<grid, kBlockSize, 0, stream>>>(px, pdy, rows, cols,
                                                                          rstd, means, partials);
        } else {
          const dim3 grid(unsigned(blocks), unsigned((cols + kBlockSize - 1) / kBlockSize));
          normWeightPartialsKernel<D, 1><<<grid, kBlockSize, 0, stream>>>(px, pdy, rows, cols,
                                                                          rstd, means, partials);
        }
      }
    }
    return llvm::Error::success();
  }));
  return dispatchFloatDType(dw.dtype, "dw", [&](auto tag) -> llvm::Error {
    constexpr DType O = decltype(tag)::value;
    normWeightFinishKernel<O><<<unsigned((cols + kFinishColumns - 1) / kFinishColumns),
                                kFinishColumns * kFinishGroups, 0, stream>>>(
        partials, blocks, cols, static_cast<StorageOf<O> *>(dw.data));
    return llvm::Error::success();
  });
}

} // namespace

void registerNormalizationKernels(KernelRegistry &registry) {
  registry.add(KernelId::LayerNorm, launchNorm);
  registry.add(KernelId::RmsNorm, launchNorm);
  registry.add(KernelId::LayerNormGrad, launchNormGrad);
  registry.add(KernelId::RmsNormGrad, launchNormGrad);
  registry.add(KernelId::NormWeightGrad, launchNormWeightGrad);
}

} // namespace loom::cuda
