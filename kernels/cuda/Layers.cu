// CUDA kernels of the layer family: softmax / log_softmax, layer_norm /
// rms_norm and their gradients, rope, attention (flash-style, never
// materializing the score matrix) and its gradient, cross_entropy and its
// gradient.
//
// Element types f32, bf16 and f16; everything computes in f32 (bf16/f16 are
// widened on load and rounded to nearest even on store), except bf16/f16
// attention with head dim 64 or 128, whose products run on the tensor cores
// (FlashAttention.cu: bf16/f16 operands, f32 accumulation). Every reduction has
// a fixed order (no atomics), so results are deterministic run to run.
//
// Host-side checks mirror the CPU reference (kernels/cpu); the one check the
// CPU does that is not repeated here is the range of cross_entropy labels,
// which live in device memory: a label outside [0, C) that is not
// ignore_index makes that row's loss (and gradient) NaN instead of an error.

#include "kernels/cpu/KernelSupport.h"
#include "kernels/cuda/CudaKernels.h"
#include "kernels/cuda/CudnnAttention.h"
#include "kernels/cuda/FlashAttention.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

namespace loom::cuda {
namespace {

using cpu::Tensor;
using cpu::detail::checkRank;
using cpu::detail::checkSameDType;
using cpu::detail::checkSameShape;
using cpu::detail::kernelError;
using cpu::detail::shapeToString;

//===----------------------------------------------------------------------===//
// Device helpers
//===----------------------------------------------------------------------===//

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float toF(float v) { return v; }
__device__ __forceinline__ float toF(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float toF(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T fromF(float v);
template <> __device__ __forceinline__ float fromF<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 fromF<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half fromF<__half>(float v) {
  return __float2half_rn(v);
}

/// A running (max, sum of exp(x - max)) pair: online softmax statistics.
struct MaxSum {
  float m;
  float s;
};

__device__ __forceinline__ MaxSum mergeMaxSum(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) // both empty
    return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ void addToMaxSum(MaxSum &a, float x) {
  if (x > a.m) {
    a.s = a.s * expf(a.m - x) + 1.f;
    a.m = x;
  } else if (x != -INFINITY) { // -inf adds nothing (and -inf - -inf is NaN)
    a.s += expf(x - a.m);
  }
}

__device__ __forceinline__ float shflXor(float v, int o) {
  return __shfl_xor_sync(kFullMask, v, o);
}
__device__ __forceinline__ double shflXor(double v, int o) {
  return __shfl_xor_sync(kFullMask, v, o);
}
__device__ __forceinline__ long long shflXor(long long v, int o) {
  return __shfl_xor_sync(kFullMask, v, o);
}
__device__ __forceinline__ MaxSum shflXor(MaxSum v, int o) {
  return {shflXor(v.m, o), shflXor(v.s, o)};
}

struct SumOp {
  template <typename V> __device__ V operator()(V a, V b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MaxSumOp {
  __device__ MaxSum operator()(MaxSum a, MaxSum b) const { return mergeMaxSum(a, b); }
};

/// Reduces v over the G consecutive threads that own one row (G a multiple
/// of 32 dividing blockDim.x, or G = 32). Every thread of the block must call
/// it (it synchronizes the block when G > 32); every thread of the group gets
/// the same, bitwise identical result (the butterfly combines the same pairs
/// in both partners, and the cross-warp step runs in a fixed order).
template <int G, typename V, typename Op>
__device__ __forceinline__ V groupReduce(V v, V *smem, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, shflXor(v, o));
  if constexpr (G > 32) {
    const int warp = threadIdx.x >> 5;
    __syncthreads(); // the previous call's readers are done with smem
    if ((threadIdx.x & 31) == 0)
      smem[warp] = v;
    __syncthreads();
    const int first = (threadIdx.x / G) * (G / 32);
    v = smem[first];
#pragma unroll
    for (int w = 1; w < G / 32; ++w)
      v = op(v, smem[first + w]);
  }
  return v;
}

/// Reduces v over the 16 lanes of a half warp (lanes 0-15 or 16-31).
template <typename V, typename Op> __device__ __forceinline__ V halfWarpReduce(V v, Op op) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1)
    v = op(v, shflXor(v, o));
  return v;
}

constexpr int cacheSlots(int k) { return k > 0 ? k : 1; }

/// Loads the row elements a thread owns (j = lane + k*G) into registers; K = 0
/// caches nothing (the row is read from global memory on every pass).
template <int G, int K, typename T>
__device__ __forceinline__ void loadRowCache(const T *row, int n, int lane,
                                             float (&cache)[cacheSlots(K)]) {
  if constexpr (K > 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = lane + k * G;
      cache[k] = j < n ? toF(row[j]) : 0.f;
    }
  }
}

/// Calls f(j, row[j]) for the elements j < n a thread owns, from the cache
/// when K > 0.
template <int G, int K, typename T, typename F>
__device__ __forceinline__ void forRow(const T *row, int n, int lane,
                                       const float (&cache)[cacheSlots(K)], F &&f) {
  if constexpr (K > 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = lane + k * G;
      if (j < n)
        f(j, cache[k]);
    }
  } else {
    for (int j = lane; j < n; j += G)
      f(j, toF(row[j]));
  }
}

//===----------------------------------------------------------------------===//
// Row kernels: softmax over the last dim, layer_norm, rms_norm, their
// gradients. G threads own one row; blockDim.x / G rows per block.
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
                   const T *__restrict__ weight, T *dx, int64_t rows, int n, float eps) {
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
        dx[base + j] = fromF<T>(invStd * (g - meanG - xhat * meanGXhat));
      }
    }
  } else {
    for (int j = lane; j < count; j += G) {
      float g = toF(grad[j]);
      if (weight)
        g *= toF(weight[j]);
      const float xhat = (toF(in[j]) - mean) * invStd;
      dx[base + j] = fromF<T>(invStd * (g - meanG - xhat * meanGXhat));
    }
  }
}

/// 16 bytes of T, the unit of the vectorized row kernels.
template <typename T> struct alignas(16) Pack16 {
  static constexpr int kWidth = 16 / sizeof(T);
  T v[kWidth];
};

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
template <typename T, int G, int KV, bool LAYER>
__global__ void __launch_bounds__(G < 256 ? 256 : G)
    normGradVecKernel(const T *__restrict__ x, const T *__restrict__ dy,
                      const T *__restrict__ weight, T *dx, int64_t rows, int n, float eps) {
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
  P xs[KV], gs[KV];
#pragma unroll
  for (int k = 0; k < KV; ++k)
    if (lane + k * G < nv) {
      xs[k] = in[lane + k * G];
      gs[k] = grad[lane + k * G];
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
        o.v[e] = fromF<T>(invStd * (g - meanG - xhat * meanGXhat));
      }
      dst[q] = o;
    }
  }
}

//===----------------------------------------------------------------------===//
// Rope
//===----------------------------------------------------------------------===//

/// One thread per rotated pair, which it reads whole before writing: out may
/// be x.
template <typename T, bool INTERLEAVED>
__global__ void __launch_bounds__(256)
    ropeKernel(const T *x, const T *__restrict__ cosT, const T *__restrict__ sinT, T *out,
               int64_t pairs, int64_t seq, int64_t dim) {
  const int64_t half = dim / 2;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = p / half, i = p % half;
    const int64_t base = row * dim, tableBase = (row % seq) * dim;
    if (INTERLEAVED) {
      const float a = toF(x[base + 2 * i]), b = toF(x[base + 2 * i + 1]);
      const float c = toF(cosT[tableBase + 2 * i]), s = toF(sinT[tableBase + 2 * i]);
      out[base + 2 * i] = fromF<T>(a * c - b * s);
      out[base + 2 * i + 1] = fromF<T>(b * c + a * s);
    } else {
      const float a = toF(x[base + i]), b = toF(x[base + i + half]);
      const float c0 = toF(cosT[tableBase + i]), s0 = toF(sinT[tableBase + i]);
      const float c1 = toF(cosT[tableBase + i + half]), s1 = toF(sinT[tableBase + i + half]);
      out[base + i] = fromF<T>(a * c0 - b * s0);
      out[base + i + half] = fromF<T>(b * c1 + a * s1);
    }
  }
}

//===----------------------------------------------------------------------===//
// Cross entropy
//===----------------------------------------------------------------------===//

/// Per-row loss logsumexp(x) - x[label] (0 for ignored rows, NaN for a label
/// out of range); one online pass over the row.
template <typename T, typename L, int G>
__global__ void __launch_bounds__(1024)
    crossEntropyRowsKernel(const T *__restrict__ logits, const L *__restrict__ labels,
                           float *losses, int64_t rows, int classes, int64_t ignoreIndex) {
  __shared__ MaxSum red[32];
  const int lane = threadIdx.x % G;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
  const bool active = row < rows;
  const int64_t label = active ? static_cast<int64_t>(labels[row]) : ignoreIndex;
  const bool ignored = label == ignoreIndex;
  const bool valid = !ignored && label >= 0 && label < classes;
  const int count = valid ? classes : 0;
  const T *in = logits + (active ? row : 0) * int64_t(classes);
  MaxSum ms{-INFINITY, 0.f};
  for (int j = lane; j < count; j += G)
    addToMaxSum(ms, toF(in[j]));
  ms = groupReduce<G>(ms, red, MaxSumOp{});
  if (active && lane == 0) {
    float loss = 0.f;
    if (valid)
      loss = ms.m + logf(ms.s) - toF(in[label]);
    else if (!ignored)
      loss = NAN;
    losses[row] = loss;
  }
}

/// crossEntropyRowsKernel for long rows of 16-byte vectors (classes a
/// multiple of the vector width, logits 16-byte aligned): one block of G
/// threads per row, thread t reading vectors t, t + G, ... (U loads in flight)
/// and keeping a running (max, sum of exp(x - max)) that it rescales once per
/// vector, never per element (no divergent branch). With STATS, the row is a
/// block of classes starting at `start` (the vocabulary-parallel loss), and
/// `out` gets its statistics (max, sum, the label's logit or 0), 3 a row.
template <typename T, typename L, int G, bool STATS = false>
__global__ void __launch_bounds__(G)
    crossEntropyRowsVecKernel(const T *__restrict__ logits, const L *__restrict__ labels,
                              float *out, int64_t rows, int classes, int64_t ignoreIndex,
                              int64_t start = 0) {
  using P = Pack16<T>;
  constexpr int VN = P::kWidth;
  constexpr int U = 4;
  __shared__ MaxSum red[32];
  const int lane = threadIdx.x;
  const int64_t row = blockIdx.x;
  const int64_t label = static_cast<int64_t>(labels[row]);
  const bool ignored = label == ignoreIndex;
  const int64_t local = label - start;
  const bool valid = !ignored && local >= 0 && local < classes;
  const int nv = STATS || valid ? classes / VN : 0;
  const T *in = logits + row * int64_t(classes);
  const P *vin = reinterpret_cast<const P *>(in);
  MaxSum ms{-INFINITY, 0.f};
  auto addVector = [&](const P &p) {
    float m = ms.m;
#pragma unroll
    for (int e = 0; e < VN; ++e)
      m = fmaxf(m, toF(p.v[e]));
    // -inf - -inf is NaN: an empty running sum stays 0.
    float s = ms.m == -INFINITY ? 0.f : ms.s * expf(ms.m - m);
#pragma unroll
    for (int e = 0; e < VN; ++e)
      s += expf(toF(p.v[e]) - m);
    ms = {m, s};
  };
  int q = lane;
  for (; q + (U - 1) * G < nv; q += U * G) {
    P loaded[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      loaded[u] = vin[q + u * G];
#pragma unroll
    for (int u = 0; u < U; ++u)
      addVector(loaded[u]);
  }
  for (; q < nv; q += G)
    addVector(vin[q]);
  ms = groupReduce<G>(ms, red, MaxSumOp{});
  if (lane != 0)
    return;
  if constexpr (STATS) {
    out[3 * row] = ms.m;
    out[3 * row + 1] = ms.s;
    out[3 * row + 2] = valid ? toF(in[local]) : 0.f;
  } else {
    float loss = 0.f;
    if (valid)
      loss = ms.m + logf(ms.s) - toF(in[label]);
    else if (!ignored)
      loss = NAN;
    out[row] = loss;
  }
}

/// out[0] = sum (or mean over the rows not ignored) of the per-row losses, in
/// double, in a fixed order. One block of 1024 threads.
template <typename L>
__global__ void __launch_bounds__(1024)
    crossEntropyReduceKernel(const float *__restrict__ losses, const L *__restrict__ labels,
                             int64_t rows, int64_t ignoreIndex, bool mean, float *out) {
  __shared__ double sums[32];
  __shared__ long long counts[32];
  double sum = 0.0;
  long long counted = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    if (static_cast<int64_t>(labels[r]) == ignoreIndex)
      continue;
    sum += losses[r];
    ++counted;
  }
  sum = groupReduce<1024>(sum, sums, SumOp{});
  counted = groupReduce<1024>(counted, counts, SumOp{});
  if (threadIdx.x == 0) {
    if (mean)
      sum = counted == 0 ? 0.0 : sum / static_cast<double>(counted);
    out[0] = static_cast<float>(sum);
  }
}

/// The number of rows whose label is not ignore_index. One block of 1024.
template <typename L>
__global__ void __launch_bounds__(1024)
    countLabelsKernel(const L *__restrict__ labels, int64_t rows, int64_t ignoreIndex,
                      long long *out) {
  __shared__ long long counts[32];
  long long counted = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    counted += static_cast<int64_t>(labels[r]) != ignoreIndex;
  counted = groupReduce<1024>(counted, counts, SumOp{});
  if (threadIdx.x == 0)
    out[0] = counted;
}

enum class Reduction : int { None = 0, Sum = 1, Mean = 2 };

/// The weight of row `row` in a cross-entropy's gradient: the loss
/// gradient over the counted rows (mean), the loss gradient (sum), or the
/// row's own (none).
__device__ __forceinline__ float lossRowWeight(const float *upstream, const long long *counted,
                                               int reduction, int64_t row) {
  if (reduction == int(Reduction::None))
    return upstream[row];
  if (reduction == int(Reduction::Sum))
    return upstream[0];
  return counted[0] == 0 ? 0.f
                         : static_cast<float>(static_cast<double>(upstream[0]) /
                                              static_cast<double>(counted[0]));
}

/// dLogits = weight * (softmax(x) - onehot(label)); zero rows for ignored
/// labels, NaN rows for labels out of range.
template <typename T, typename L, int G, int K>
__global__ void __launch_bounds__(1024)
    crossEntropyGradKernel(const T *__restrict__ logits, const L *__restrict__ labels,
                           const float *__restrict__ upstream,
                           const long long *__restrict__ counted, int reduction, int64_t rows,
                           int classes, int64_t ignoreIndex, T *__restrict__ out) {
  __shared__ MaxSum red[32];
  const int lane = threadIdx.x % G;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
  const bool active = row < rows;
  const int64_t label = active ? static_cast<int64_t>(labels[row]) : ignoreIndex;
  const bool ignored = label == ignoreIndex;
  const bool valid = !ignored && label >= 0 && label < classes;
  const int count = valid ? classes : 0;
  const int64_t base = (active ? row : 0) * int64_t(classes);
  const T *in = logits + base;
  float cache[cacheSlots(K)];
  loadRowCache<G, K>(in, count, lane, cache);
  MaxSum ms{-INFINITY, 0.f};
  forRow<G, K>(in, count, lane, cache, [&](int, float v) { addToMaxSum(ms, v); });
  ms = groupReduce<G>(ms, red, MaxSumOp{});
  if (!active)
    return;
  if (!valid) {
    const T fill = fromF<T>(ignored ? 0.f : NAN);
    for (int j = lane; j < classes; j += G)
      out[base + j] = fill;
    return;
  }
  const float weight = lossRowWeight(upstream, counted, reduction, row);
  const float invSum = 1.f / ms.s;
  forRow<G, K>(in, count, lane, cache, [&](int j, float v) {
    const float p = expf(v - ms.m) * invSum;
    out[base + j] = fromF<T>(weight * (p - (j == label ? 1.f : 0.f)));
  });
}

/// Vocabulary-parallel cross-entropy, step 1: per row of a block of classes
/// starting at `start`, (max, sum of exp(x - max), the label's logit or 0).
template <typename T, typename L, int G>
__global__ void __launch_bounds__(1024)
    crossEntropyStatsKernel(const T *__restrict__ logits, const L *__restrict__ labels,
                            float *__restrict__ stats, int64_t rows, int classes, int64_t start,
                            int64_t ignoreIndex) {
  __shared__ MaxSum red[32];
  const int lane = threadIdx.x % G;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
  const bool active = row < rows;
  const T *in = logits + (active ? row : 0) * int64_t(classes);
  MaxSum ms{-INFINITY, 0.f};
  for (int j = lane; active && j < classes; j += G)
    addToMaxSum(ms, toF(in[j]));
  ms = groupReduce<G>(ms, red, MaxSumOp{});
  if (active && lane == 0) {
    const int64_t label = static_cast<int64_t>(labels[row]);
    const int64_t local = label - start;
    const bool here = label != ignoreIndex && local >= 0 && local < classes;
    stats[3 * row] = ms.m;
    stats[3 * row + 1] = ms.s;
    stats[3 * row + 2] = here ? toF(in[local]) : 0.f;
  }
}

/// A row's whole softmax (max M, normalizer S) and its label's logit from
/// the statistics of its `blocks` blocks, in double.
struct BlockSoftmax {
  double max, sum, target;
};

__device__ __forceinline__ BlockSoftmax combineBlocks(const float *row, int blocks) {
  double m = -INFINITY;
  for (int b = 0; b < blocks; ++b)
    m = fmax(m, double(row[3 * b]));
  BlockSoftmax out{m, 0.0, 0.0};
  for (int b = 0; b < blocks; ++b) {
    out.sum += double(row[3 * b + 1]) * exp(double(row[3 * b]) - m);
    out.target += row[3 * b + 2];
  }
  return out;
}

/// Step 2: per-row losses from the gathered statistics (0 for ignored rows).
template <typename L>
__global__ void __launch_bounds__(256)
    crossEntropyCombineKernel(const float *__restrict__ stats, const L *__restrict__ labels,
                              float *__restrict__ losses, int64_t rows, int blocks,
                              int64_t ignoreIndex, int64_t classes) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t label = static_cast<int64_t>(labels[r]);
    if (label == ignoreIndex) {
      losses[r] = 0.f;
      continue;
    }
    if (label < 0 || label >= classes) { // as crossEntropyRowsKernel: NaN
      losses[r] = NAN;
      continue;
    }
    BlockSoftmax row = combineBlocks(stats + r * 3 * blocks, blocks);
    losses[r] = static_cast<float>(row.max + log(row.sum) - row.target);
  }
}

/// Step 3: a block's logits gradient, weight * (exp(x - M) / S -
/// onehot(label - start)); zero rows for ignored labels.
template <typename T, typename L, int G, bool VEC>
__global__ void __launch_bounds__(1024)
    crossEntropyBlockGradKernel(const T *__restrict__ logits, const L *__restrict__ labels,
                                const float *__restrict__ upstream,
                                const long long *__restrict__ counted,
                                const float *__restrict__ stats, int reduction, int64_t rows,
                                int classes, int blocks, int64_t start, int64_t ignoreIndex,
                                T *__restrict__ out) {
  const int lane = threadIdx.x % G;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / G) + threadIdx.x / G;
  if (row >= rows)
    return;
  const int64_t base = row * int64_t(classes);
  const int64_t label = static_cast<int64_t>(labels[row]);
  if (label == ignoreIndex) {
    for (int j = lane; j < classes; j += G)
      out[base + j] = fromF<T>(0.f);
    return;
  }
  const float weight = lossRowWeight(upstream, counted, reduction, row);
  const BlockSoftmax softmax = combineBlocks(stats + row * 3 * blocks, blocks);
  const float m = static_cast<float>(softmax.max);
  const float invSum = static_cast<float>(1.0 / softmax.sum);
  const int64_t local = label - start;
  using P = Pack16<T>;
  constexpr int VN = P::kWidth;
  if (VEC) { // 16-byte vectors: whole rows of aligned vectors
    const P *vin = reinterpret_cast<const P *>(logits + base);
    P *vout = reinterpret_cast<P *>(out + base);
    for (int q = lane; q < classes / VN; q += G) {
      const P x = vin[q];
      P y;
#pragma unroll
      for (int e = 0; e < VN; ++e) {
        const float p = expf(toF(x.v[e]) - m) * invSum;
        y.v[e] = fromF<T>(weight * (p - (q * VN + e == local ? 1.f : 0.f)));
      }
      vout[q] = y;
    }
    return;
  }
  for (int j = lane; j < classes; j += G) {
    const float p = expf(toF(logits[base + j]) - m) * invSum;
    out[base + j] = fromF<T>(weight * (p - (j == local ? 1.f : 0.f)));
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
  int batch, qHeads, kvHeads, group, seq, kvSeq, headDim, valueDim;
  int qkStride, vStride;   // shared-memory row strides (floats)
  int qkPad, vPad;         // columns padded to 64
  int qkDepth, vDepth;     // columns rounded up to 4 (the dot-product depths)
  int causal;
  float scale, scaleLog2;
};

/// Copies rows [0, rows) of a [*, cols] matrix (row-major, T) into shared
/// memory as f32 with row stride `stride`; rows >= rowsAvail and columns in
/// [cols, colsPad) are zeros.
template <typename T>
__device__ __forceinline__ void loadTile(float *dst, int stride, const T *src, int rowsAvail,
                                         int rows, int cols, int colsPad) {
  const int total = rows * colsPad;
  for (int idx = threadIdx.x; idx < total; idx += blockDim.x) {
    const int r = idx / colsPad, c = idx - r * colsPad;
    float v = 0.f;
    if (r < rowsAvail && c < cols)
      v = toF(src[int64_t(r) * cols + c]);
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

/// Whether query `row` sees `key`: causal masks are aligned to the end
/// (query i sees keys j <= i + kvSeq - seq), as in the CPU reference.
__device__ __forceinline__ bool keyVisible(int key, int row, int kvSeq, int seq, int causal) {
  return key < kvSeq && (!causal || key <= row + (kvSeq - seq));
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
  const int64_t qRowBase = (int64_t(b) * p.qHeads + head) * p.seq;
  const int64_t kvRowBase = (int64_t(b) * p.kvHeads + kvHead) * p.kvSeq;
  const int D = p.headDim, Dv = p.valueDim;
  const T *qg = static_cast<const T *>(p.q) + (qRowBase + q0) * D;
  const T *kg = static_cast<const T *>(p.k) + kvRowBase * D;
  const T *vg = static_cast<const T *>(p.v) + kvRowBase * Dv;

  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  loadTile(Qs, p.qkStride, qg, p.seq - q0, BQ, D, p.qkPad);

  int kvEnd = p.kvSeq;
  if (p.causal)
    kvEnd = max(0, min(p.kvSeq, q0 + BQ + (p.kvSeq - p.seq)));

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

  for (int k0 = 0; k0 < kvEnd; k0 += BK) {
    __syncthreads(); // the previous tile's readers are done
    loadTile(Ks, p.qkStride, kg + int64_t(k0) * D, p.kvSeq - k0, BK, D, p.qkPad);
    loadTile(Vs, p.vStride, vg + int64_t(k0) * Dv, p.kvSeq - k0, BK, Dv, p.vPad);
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
        s[i][j] = keyVisible(key, row, p.kvSeq, p.seq, p.causal) ? s[i][j] * p.scaleLog2
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
        T *o = static_cast<T *>(p.out) + (qRowBase + row) * Dv;
#pragma unroll
        for (int c = 0; c < NC; ++c)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = c * 64 + tc * 4 + e;
            if (col < Dv)
              o[col] = fromF<T>(acc[i][c][e] * inv);
          }
      }
    } else {
      float dot = 0.f;
      if (inRange) {
        const T *d = static_cast<const T *>(p.dout) + (qRowBase + row) * Dv;
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
  const int64_t qRowBase = (int64_t(b) * p.qHeads + head) * p.seq;
  const int64_t kvRowBase = (int64_t(b) * p.kvHeads + kvHead) * p.kvSeq;
  const int D = p.headDim, Dv = p.valueDim;
  const T *kg = static_cast<const T *>(p.k) + kvRowBase * D;
  const T *vg = static_cast<const T *>(p.v) + kvRowBase * Dv;

  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  loadTile(Qs, p.qkStride, static_cast<const T *>(p.q) + (qRowBase + q0) * D, p.seq - q0, BQ,
           D, p.qkPad);
  loadTile(dOs, p.vStride, static_cast<const T *>(p.dout) + (qRowBase + q0) * Dv, p.seq - q0,
           BQ, Dv, p.vPad);

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

  for (int k0 = 0; k0 < kvEnd; k0 += BK) {
    __syncthreads();
    loadTile(Ks, p.qkStride, kg + int64_t(k0) * D, p.kvSeq - k0, BK, D, p.qkPad);
    loadTile(Vs, p.vStride, vg + int64_t(k0) * Dv, p.kvSeq - k0, BK, Dv, p.vPad);
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
        if (row < p.seq && keyVisible(key, row, p.kvSeq, p.seq, p.causal)) {
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
    T *o = static_cast<T *>(p.dq) + (qRowBase + row) * D;
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
  const int64_t kvRowBase = (int64_t(b) * p.kvHeads + kvHead) * p.kvSeq;
  const int D = p.headDim, Dv = p.valueDim;
  const int off = p.kvSeq - p.seq;

  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  loadTile(Ks, p.qkStride, static_cast<const T *>(p.k) + (kvRowBase + k0) * D, p.kvSeq - k0,
           BKEY, D, p.qkPad);
  loadTile(Vs, p.vStride, static_cast<const T *>(p.v) + (kvRowBase + k0) * Dv, p.kvSeq - k0,
           BKEY, Dv, p.vPad);

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

  for (int g = 0; g < p.group; ++g) {
    const int head = kvHead * p.group + g;
    const int64_t qRowBase = (int64_t(b) * p.qHeads + head) * p.seq;
    for (int q0 = qStart; q0 < p.seq; q0 += BQ) {
      __syncthreads(); // the previous tile's readers are done
      loadTile(Qs, p.qkStride, static_cast<const T *>(p.q) + (qRowBase + q0) * D, p.seq - q0,
               BQ, D, p.qkPad);
      loadTile(dOs, p.vStride, static_cast<const T *>(p.dout) + (qRowBase + q0) * Dv,
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
          if (row < p.seq && keyVisible(key, row, p.kvSeq, p.seq, p.causal)) {
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
    T *dk = static_cast<T *>(p.dk) + (kvRowBase + key) * D;
    T *dv = static_cast<T *>(p.dv) + (kvRowBase + key) * Dv;
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

//===----------------------------------------------------------------------===//
// Host side
//===----------------------------------------------------------------------===//

template <typename T> struct TypeTag {
  using type = T;
};

/// Calls fn(TypeTag<T>{}) with T the device type of an f32, bf16 or f16
/// tensor; an error for other dtypes.
template <typename Fn> llvm::Error dispatchType(DType type, const char *role, Fn &&fn) {
  switch (type) {
  case DType::F32:
    return fn(TypeTag<float>{});
  case DType::BF16:
    return fn(TypeTag<__nv_bfloat16>{});
  case DType::F16:
    return fn(TypeTag<__half>{});
  default:
    return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(type) + " for " + role +
                       " (the CUDA kernels take f32, bf16 or f16)");
  }
}

template <typename Fn> llvm::Error dispatchLabels(DType type, Fn &&fn) {
  switch (type) {
  case DType::I32:
    return fn(TypeTag<int32_t>{});
  case DType::I64:
    return fn(TypeTag<int64_t>{});
  default:
    return kernelError(llvm::Twine("labels dtype is ") + dtypeName(type) +
                       ", expected i32 or i64");
  }
}

/// Operand counts (launchKernel does not check them) and each tensor.
llvm::Error checkOperands(const KernelCall &call, size_t minInputs, size_t maxInputs,
                          size_t outputs) {
  if (call.inputs.size() < minInputs || call.inputs.size() > maxInputs)
    return kernelError("takes " + llvm::Twine(minInputs) +
                       (minInputs == maxInputs ? llvm::Twine("")
                                               : llvm::Twine(" to ") + llvm::Twine(maxInputs)) +
                       " inputs, got " + llvm::Twine(call.inputs.size()));
  if (call.outputs.size() != outputs)
    return kernelError("produces " + llvm::Twine(outputs) + " outputs, got " +
                       llvm::Twine(call.outputs.size()));
  for (size_t i = 0; i < call.inputs.size(); ++i)
    if (llvm::Error err = cpu::detail::checkTensor(call.inputs[i], "input"))
      return err;
  for (size_t i = 0; i < call.outputs.size(); ++i)
    if (llvm::Error err = cpu::detail::checkTensor(call.outputs[i], "output"))
      return err;
  return llvm::Error::success();
}

llvm::Error checkFitsInt(int64_t value, const char *what) {
  if (value > INT_MAX)
    return kernelError(llvm::Twine(what) + " " + llvm::Twine(value) +
                       " is too large for the CUDA kernel");
  return llvm::Error::success();
}

/// Threads per row (G) and elements cached in registers per thread (K) of the
/// row kernels, by row length.
template <int G_, int K_> struct RowConfig {
  static constexpr int G = G_;
  static constexpr int K = K_;
  static constexpr int threads = G_ < 256 ? 256 : G_;
  static constexpr int rowsPerBlock = threads / G_;
};

template <typename Fn> void withRowConfig(int64_t n, Fn &&fn) {
  if (n <= 256)
    fn(RowConfig<32, 8>{});
  else if (n <= 1024)
    fn(RowConfig<128, 8>{});
  else if (n <= 4096)
    fn(RowConfig<512, 8>{});
  else if (n <= 8192)
    fn(RowConfig<1024, 8>{});
  else
    fn(RowConfig<1024, 0>{});
}

/// The vectorized row kernels' config (G threads per row, K 16-byte vectors
/// each) for rows of n elements of T: false (nothing launched) when the rows
/// are not whole aligned vectors or too long to sit in registers.
template <typename T, typename Fn> bool withVecRowConfig(int64_t n, bool aligned, Fn &&fn) {
  constexpr int VN = 16 / sizeof(T);
  if (!aligned || n % VN != 0)
    return false;
  const int64_t nv = n / VN;
  if (nv <= 32 * 8)
    fn(RowConfig<32, 8>{});
  else if (nv <= 64 * 8)
    fn(RowConfig<64, 8>{});
  else if (nv <= 128 * 8)
    fn(RowConfig<128, 8>{});
  else if (nv <= 256 * 8)
    fn(RowConfig<256, 8>{});
  else if (nv <= 512 * 8)
    fn(RowConfig<512, 8>{});
  else
    return false;
  return true;
}

inline bool isAligned16(const void *ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

template <typename Cfg> unsigned rowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + Cfg::rowsPerBlock - 1) / Cfg::rowsPerBlock);
}

llvm::Error checkRowCount(int64_t rows) {
  if (rows >= INT_MAX)
    return kernelError("too many rows (" + llvm::Twine(rows) + ") for one launch");
  return llvm::Error::success();
}

unsigned gridStrideBlocks(int64_t work, const LaunchContext &ctx) {
  const int64_t needed = (work + 255) / 256;
  const int64_t cap = int64_t(ctx.multiprocessors > 0 ? ctx.multiprocessors : 132) * 32;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(needed, cap)));
}

// --- softmax / log_softmax ---------------------------------------------------

llvm::Error launchSoftmax(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 1));
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameShape(in, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  const bool logSoftmax = call.name == "nn.log_softmax";
  LOOM_ASSIGN_OR_RETURN(int64_t rawDim, call.attrs.getInt("dim"));
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  if (rank == 0)
    return kernelError("input must have rank >= 1");
  LOOM_ASSIGN_OR_RETURN(int64_t dim,
                        cpu::detail::normalizeDim(rawDim, rank, "attribute 'dim'"));
  const int64_t length = in.shape[dim];
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < rank; ++d)
    inner *= in.shape[d];
  const int64_t lines = length == 0 ? 0 : in.numElements() / length;
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
      const unsigned blocks = gridStrideBlocks(lines, call.ctx);
      if (logSoftmax)
        softmaxStridedKernel<T, true><<<blocks, 256, 0, stream>>>(x, y, lines, inner, length);
      else
        softmaxStridedKernel<T, false><<<blocks, 256, 0, stream>>>(x, y, lines, inner, length);
    }
    return llvm::Error::success();
  });
}

// --- layer_norm / rms_norm ---------------------------------------------------

llvm::Error checkFeatureParam(const Tensor &param, const char *role, const Tensor &x,
                              int64_t features) {
  LOOM_RETURN_IF_ERROR(checkSameDType(param, role, x, "input"));
  if (param.shape != std::vector<int64_t>{features})
    return kernelError(llvm::Twine(role) + " shape " + shapeToString(param.shape) +
                       " should be [" + llvm::Twine(features) + "]");
  return llvm::Error::success();
}

llvm::Error launchNorm(const KernelCall &call) {
  const bool layerNorm = call.name == "nn.layer_norm";
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, layerNorm ? 3 : 2, 1));
  const Tensor &x = call.inputs[0], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", out, "output"));
  if (x.shape.empty())
    return kernelError("input must have rank >= 1");
  const int64_t features = x.shape.back();
  const size_t numInputs = call.inputs.size();
  bool hasWeight, hasBias = false;
  double epsilon;
  if (layerNorm) {
    LOOM_ASSIGN_OR_RETURN(hasWeight, call.attrs.getBool("has_weight", numInputs >= 2));
    LOOM_ASSIGN_OR_RETURN(hasBias, call.attrs.getBool("has_bias", numInputs == 3));
    LOOM_ASSIGN_OR_RETURN(epsilon, call.attrs.getF64("epsilon", 1e-5));
    if (size_t(1) + hasWeight + hasBias != numInputs)
      return kernelError("has_weight=" + llvm::Twine(hasWeight) + " and has_bias=" +
                         llvm::Twine(hasBias) + " disagree with " + llvm::Twine(numInputs) +
                         " inputs");
  } else {
    LOOM_ASSIGN_OR_RETURN(hasWeight, call.attrs.getBool("has_weight", numInputs == 2));
    LOOM_ASSIGN_OR_RETURN(epsilon, call.attrs.getF64("epsilon", 1e-6));
    if (size_t(1) + hasWeight != numInputs)
      return kernelError("has_weight=" + llvm::Twine(hasWeight) + " disagrees with " +
                         llvm::Twine(numInputs) + " inputs");
  }
  const Tensor *weight = hasWeight ? &call.inputs[1] : nullptr;
  const Tensor *bias = hasBias ? &call.inputs[hasWeight ? 2 : 1] : nullptr;
  if (weight)
    LOOM_RETURN_IF_ERROR(checkFeatureParam(*weight, "weight", x, features));
  if (bias)
    LOOM_RETURN_IF_ERROR(checkFeatureParam(*bias, "bias", x, features));
  const int64_t rows = features == 0 ? 0 : x.numElements() / features;
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
    const bool aligned = isAligned16(xs) && isAligned16(ws) && isAligned16(bs) &&
                         isAligned16(ys);
    if (withVecRowConfig<T>(features, aligned, [&](auto cfg) {
          using Cfg = decltype(cfg);
          if (layerNorm)
            normVecKernel<T, Cfg::G, Cfg::K, true>
                <<<rowBlocks<Cfg>(rows), Cfg::threads, 0, stream>>>(xs, ws, bs, ys, rows,
                                                                     int(features), eps);
          else
            normVecKernel<T, Cfg::G, Cfg::K, false>
                <<<rowBlocks<Cfg>(rows), Cfg::threads, 0, stream>>>(xs, ws, nullptr, ys, rows,
                                                                     int(features), eps);
        }))
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
  const bool layerNorm = call.name == "nn.layer_norm_grad";
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 3, 1));
  const Tensor &x = call.inputs[0], &dy = call.inputs[1], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", dy, "grad"));
  LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", dy, "grad"));
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", out, "output"));
  if (x.shape.empty())
    return kernelError("input must have rank >= 1");
  const int64_t features = x.shape.back();
  const size_t numInputs = call.inputs.size();
  LOOM_ASSIGN_OR_RETURN(bool hasWeight, call.attrs.getBool("has_weight", numInputs == 3));
  LOOM_ASSIGN_OR_RETURN(double epsilon, call.attrs.getF64("epsilon", layerNorm ? 1e-5 : 1e-6));
  if (size_t(2) + hasWeight != numInputs)
    return kernelError("has_weight=" + llvm::Twine(hasWeight) + " disagrees with " +
                       llvm::Twine(numInputs) + " inputs");
  const Tensor *weight = hasWeight ? &call.inputs[2] : nullptr;
  if (weight)
    LOOM_RETURN_IF_ERROR(checkFeatureParam(*weight, "weight", x, features));
  const int64_t rows = features == 0 ? 0 : x.numElements() / features;
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
    const float eps = static_cast<float>(epsilon);
    cudaStream_t stream = call.ctx.stream;
    const bool aligned = isAligned16(xs) && isAligned16(dys) && isAligned16(ws) &&
                         isAligned16(dxs);
    if (withVecRowConfig<T>(features, aligned, [&](auto cfg) {
          using Cfg = decltype(cfg);
          if (layerNorm)
            normGradVecKernel<T, Cfg::G, Cfg::K, true>
                <<<rowBlocks<Cfg>(rows), Cfg::threads, 0, stream>>>(xs, dys, ws, dxs, rows,
                                                                     int(features), eps);
          else
            normGradVecKernel<T, Cfg::G, Cfg::K, false>
                <<<rowBlocks<Cfg>(rows), Cfg::threads, 0, stream>>>(xs, dys, ws, dxs, rows,
                                                                     int(features), eps);
        }))
      return llvm::Error::success();
    withRowConfig(features, [&](auto cfg) {
      using Cfg = decltype(cfg);
      if (layerNorm)
        normGradKernel<T, Cfg::G, Cfg::K, true>
            <<<rowBlocks<Cfg>(rows), Cfg::threads, 0, stream>>>(xs, dys, ws, dxs, rows,
                                                                 int(features), eps);
      else
        normGradKernel<T, Cfg::G, Cfg::K, false>
            <<<rowBlocks<Cfg>(rows), Cfg::threads, 0, stream>>>(xs, dys, ws, dxs, rows,
                                                                 int(features), eps);
    });
    return llvm::Error::success();
  });
}

// --- rope --------------------------------------------------------------------

llvm::Error launchRope(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 3, 3, 1));
  const Tensor &x = call.inputs[0], &cosT = call.inputs[1], &sinT = call.inputs[2];
  const Tensor &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(cosT, "cos", x, "input"));
  LOOM_RETURN_IF_ERROR(checkSameDType(sinT, "sin", x, "input"));
  LOOM_ASSIGN_OR_RETURN(bool interleaved, call.attrs.getBool("interleaved", false));
  const size_t rank = x.shape.size();
  if (rank < 2)
    return kernelError("input must be [..., S, D], got " + shapeToString(x.shape));
  const int64_t seq = x.shape[rank - 2], dim = x.shape[rank - 1];
  if (dim % 2 != 0)
    return kernelError("head dim " + llvm::Twine(dim) + " must be even");
  const std::vector<int64_t> tableShape = {seq, dim};
  if (cosT.shape != tableShape || sinT.shape != tableShape)
    return kernelError("cos " + shapeToString(cosT.shape) + " and sin " +
                       shapeToString(sinT.shape) + " must both be " + shapeToString(tableShape));
  return dispatchType(x.dtype, "input", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    const int64_t pairs = seq * dim == 0 ? 0 : x.numElements() / 2;
    if (pairs == 0)
      return llvm::Error::success();
    const unsigned blocks = gridStrideBlocks(pairs, call.ctx);
    const T *xs = static_cast<const T *>(x.data);
    const T *cs = static_cast<const T *>(cosT.data);
    const T *ss = static_cast<const T *>(sinT.data);
    T *ys = static_cast<T *>(out.data);
    if (interleaved)
      ropeKernel<T, true><<<blocks, 256, 0, call.ctx.stream>>>(xs, cs, ss, ys, pairs, seq, dim);
    else
      ropeKernel<T, false><<<blocks, 256, 0, call.ctx.stream>>>(xs, cs, ss, ys, pairs, seq, dim);
    return llvm::Error::success();
  });
}

// --- attention -----------------------------------------------------------------

struct AttnShape {
  int64_t batch, qHeads, seq, headDim, kvHeads, kvSeq, valueDim;
  bool causal;
  double scale;
};

llvm::Expected<AttnShape> checkAttention(const KernelCall &call, const Tensor &q,
                                         const Tensor &k, const Tensor &v) {
  LOOM_RETURN_IF_ERROR(checkRank(q, "query", 4));
  LOOM_RETURN_IF_ERROR(checkRank(k, "key", 4));
  LOOM_RETURN_IF_ERROR(checkRank(v, "value", 4));
  AttnShape s;
  s.batch = q.shape[0];
  s.qHeads = q.shape[1];
  s.seq = q.shape[2];
  s.headDim = q.shape[3];
  s.kvHeads = k.shape[1];
  s.kvSeq = k.shape[2];
  s.valueDim = v.shape[3];
  if (k.shape[0] != s.batch || k.shape[3] != s.headDim)
    return kernelError("key shape " + shapeToString(k.shape) + " does not match query shape " +
                       shapeToString(q.shape));
  if (v.shape[0] != s.batch || v.shape[1] != s.kvHeads || v.shape[2] != s.kvSeq)
    return kernelError("value shape " + shapeToString(v.shape) + " does not match key shape " +
                       shapeToString(k.shape));
  if (s.kvHeads == 0 || s.qHeads % s.kvHeads != 0)
    return kernelError("query heads (" + llvm::Twine(s.qHeads) +
                       ") must be a multiple of key/value heads (" + llvm::Twine(s.kvHeads) +
                       ")");
  LOOM_ASSIGN_OR_RETURN(s.causal, call.attrs.getBool("causal", false));
  const double defaultScale = s.headDim > 0 ? 1.0 / std::sqrt(double(s.headDim)) : 1.0;
  LOOM_ASSIGN_OR_RETURN(s.scale, call.attrs.getF64("scale", defaultScale));
  if (s.headDim > kAttnMaxDim || s.valueDim > kAttnMaxDim)
    return kernelError("head dims " + llvm::Twine(s.headDim) + " (query/key) and " +
                       llvm::Twine(s.valueDim) + " (value) must be at most " +
                       llvm::Twine(kAttnMaxDim) + " for the CUDA kernel");
  LOOM_RETURN_IF_ERROR(checkFitsInt(s.batch, "batch"));
  LOOM_RETURN_IF_ERROR(checkFitsInt(s.qHeads, "query heads"));
  LOOM_RETURN_IF_ERROR(checkFitsInt(s.seq + kAttnQueries, "query length"));
  LOOM_RETURN_IF_ERROR(checkFitsInt(s.kvSeq + kAttnQueries, "key length"));
  return s;
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
  p.scale = static_cast<float>(s.scale);
  p.scaleLog2 = static_cast<float>(s.scale * 1.4426950408889634);
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
  a.scale = static_cast<float>(s.scale);
  return a;
}

/// cuDNN's fused attention (CudnnAttention.cpp) for bf16/f16; it declines
/// (false) when it cannot or should not run, and the kernels below run.
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
  a.scale = s.scale;
  return a;
}

llvm::Error launchAttention(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 3, 3, 1));
  const Tensor &q = call.inputs[0], &k = call.inputs[1], &v = call.inputs[2];
  const Tensor &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameDType(q, "query", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(k, "key", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(v, "value", out, "output"));
  LOOM_ASSIGN_OR_RETURN(AttnShape s, checkAttention(call, q, k, v));
  const std::vector<int64_t> expected = {s.batch, s.qHeads, s.seq, s.valueDim};
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected));
  {
    CudnnAttnArgs c = makeCudnnArgs(s, q, k, v);
    c.out = out.data;
    LOOM_ASSIGN_OR_RETURN(bool ranOnCudnn, cudnnAttentionForward(q.dtype, c, call.ctx.stream));
    if (ranOnCudnn)
      return llvm::Error::success();
  }
  if (flashAttentionApplies(q.dtype, s.headDim, s.valueDim, s.seq, s.kvSeq,
                            {q.data, k.data, v.data, out.data}) &&
      s.batch * s.qHeads > 0) {
    FlashAttnArgs a = makeFlashArgs(s, q, k, v);
    a.out = out.data;
    return flashAttentionForward(q.dtype, a, call.ctx.stream);
  }
  AttnParams p = makeAttnParams(s);
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.out = out.data;
  return dispatchType(q.dtype, "query", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    return withAttnColumns(std::max(s.headDim, s.valueDim), [&](auto nc) -> llvm::Error {
      return launchAttentionForward<T, decltype(nc)::value, false>(p, call.ctx.stream);
    });
  });
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

llvm::Error launchAttentionGrad(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 4, 4, 3));
  const Tensor &q = call.inputs[0], &k = call.inputs[1], &v = call.inputs[2];
  const Tensor &dOut = call.inputs[3];
  const Tensor &dq = call.outputs[0], &dk = call.outputs[1], &dv = call.outputs[2];
  LOOM_ASSIGN_OR_RETURN(AttnShape s, checkAttention(call, q, k, v));
  for (const auto &[tensor, role] :
       {std::pair<const Tensor *, const char *>{&k, "key"}, {&v, "value"}, {&dOut, "grad"},
        {&dq, "query grad"}, {&dk, "key grad"}, {&dv, "value grad"}})
    LOOM_RETURN_IF_ERROR(checkSameDType(*tensor, role, q, "query"));
  const std::vector<int64_t> outShape = {s.batch, s.qHeads, s.seq, s.valueDim};
  if (dOut.shape != outShape)
    return kernelError("grad shape " + shapeToString(dOut.shape) + " should be " +
                       shapeToString(outShape) + ", the attention output's");
  LOOM_RETURN_IF_ERROR(checkSameShape(dq, "query grad", q, "query"));
  LOOM_RETURN_IF_ERROR(checkSameShape(dk, "key grad", k, "key"));
  LOOM_RETURN_IF_ERROR(checkSameShape(dv, "value grad", v, "value"));
  {
    CudnnAttnArgs c = makeCudnnArgs(s, q, k, v);
    c.dout = dOut.data;
    c.dq = dq.data;
    c.dk = dk.data;
    c.dv = dv.data;
    LOOM_ASSIGN_OR_RETURN(bool ranOnCudnn, cudnnAttentionBackward(q.dtype, c, call.ctx.stream));
    if (ranOnCudnn)
      return llvm::Error::success();
  }
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
    cudaStream_t stream = call.ctx.stream;
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
        return flashAttentionBackward(q.dtype, a, stream);
      }
      return withAttnColumns(std::max(s.headDim, s.valueDim), [&](auto nc) -> llvm::Error {
        constexpr int NC = decltype(nc)::value;
        LOOM_RETURN_IF_ERROR((launchAttentionForward<T, NC, true>(p, stream)));
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

// --- cross entropy -------------------------------------------------------------

struct CrossEntropyShape {
  int64_t rows, classes, ignoreIndex;
  Reduction reduction;
};

llvm::Expected<CrossEntropyShape> checkCrossEntropy(const KernelCall &call,
                                                    const Tensor &logits,
                                                    const Tensor &labels) {
  LOOM_RETURN_IF_ERROR(checkRank(logits, "logits", 2));
  LOOM_RETURN_IF_ERROR(checkRank(labels, "labels", 1));
  if (labels.dtype != DType::I32 && labels.dtype != DType::I64)
    return kernelError(llvm::Twine("labels dtype is ") + dtypeName(labels.dtype) +
                       ", expected i32 or i64");
  CrossEntropyShape s;
  s.rows = logits.shape[0];
  s.classes = logits.shape[1];
  if (labels.shape[0] != s.rows)
    return kernelError("labels shape " + shapeToString(labels.shape) +
                       " does not match logits shape " + shapeToString(logits.shape));
  LOOM_ASSIGN_OR_RETURN(s.ignoreIndex, call.attrs.getInt("ignore_index", -100));
  LOOM_ASSIGN_OR_RETURN(std::string reduction,
                        call.attrs.getStr("reduction", std::string("mean")));
  if (reduction == "mean")
    s.reduction = Reduction::Mean;
  else if (reduction == "sum")
    s.reduction = Reduction::Sum;
  else if (reduction == "none")
    s.reduction = Reduction::None;
  else
    return kernelError("attribute 'reduction' is '" + reduction +
                       "', expected mean, sum or none");
  LOOM_RETURN_IF_ERROR(checkFitsInt(s.classes, "class count"));
  LOOM_RETURN_IF_ERROR(checkRowCount(s.rows));
  return s;
}

std::vector<int64_t> lossShape(const CrossEntropyShape &s) {
  return s.reduction == Reduction::None ? std::vector<int64_t>{s.rows} : std::vector<int64_t>{};
}

const char *reductionName(Reduction r) {
  return r == Reduction::None ? "none" : r == Reduction::Sum ? "sum" : "mean";
}

/// The loss gradient a cross-entropy's backward reads: f32, the loss's shape.
llvm::Error checkLossGrad(const Tensor &lossGrad, const CrossEntropyShape &s) {
  if (lossGrad.dtype != DType::F32)
    return kernelError(llvm::Twine("loss gradient dtype is ") + dtypeName(lossGrad.dtype) +
                       ", expected f32");
  if (lossGrad.shape != lossShape(s))
    return kernelError("loss gradient shape " + shapeToString(lossGrad.shape) + " should be " +
                       shapeToString(lossShape(s)) + " for reduction '" +
                       reductionName(s.reduction) + "'");
  return llvm::Error::success();
}

/// The loss output of a cross-entropy: f32, the reduction's shape.
llvm::Error checkLossOutput(const Tensor &out, const CrossEntropyShape &s) {
  if (out.dtype != DType::F32)
    return kernelError(llvm::Twine("output dtype is ") + dtypeName(out.dtype) +
                       ", expected f32");
  if (out.shape != lossShape(s))
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(lossShape(s)) + " for reduction '" +
                       reductionName(s.reduction) + "'");
  return llvm::Error::success();
}

/// Runs `perRow(losses)` to write each row's loss, into `out` itself
/// (reduction none) or into scratch that is then summed or averaged over
/// the rows not ignored, in a fixed order, into `out`.
template <typename L, typename Fn>
llvm::Error reduceRowLosses(const CrossEntropyShape &s, const L *labels, const Tensor &out,
                            cudaStream_t stream, Fn &&perRow) {
  float *result = static_cast<float *>(out.data);
  float *losses = result;
  if (s.reduction != Reduction::None && s.rows > 0)
    LOOM_RETURN_IF_ERROR(cudaError(
        cudaMallocAsync(reinterpret_cast<void **>(&losses), size_t(s.rows) * sizeof(float),
                        stream),
        "cudaMallocAsync (cross-entropy losses)"));
  if (s.rows > 0)
    perRow(losses);
  if (s.reduction != Reduction::None) {
    crossEntropyReduceKernel<L><<<1, 1024, 0, stream>>>(
        losses, labels, s.rows, s.ignoreIndex, s.reduction == Reduction::Mean, result);
    if (s.rows > 0)
      LOOM_RETURN_IF_ERROR(cudaError(cudaFreeAsync(losses, stream), "cudaFreeAsync"));
  }
  return llvm::Error::success();
}

llvm::Error launchCrossEntropy(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1));
  const Tensor &logits = call.inputs[0], &labels = call.inputs[1];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(CrossEntropyShape s, checkCrossEntropy(call, logits, labels));
  LOOM_RETURN_IF_ERROR(checkLossOutput(out, s));
  return dispatchType(logits.dtype, "logits", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    return dispatchLabels(labels.dtype, [&](auto labelTag) -> llvm::Error {
      using L = typename decltype(labelTag)::type;
      cudaStream_t stream = call.ctx.stream;
      const T *xs = static_cast<const T *>(logits.data);
      const L *ls = static_cast<const L *>(labels.data);
      return reduceRowLosses(s, ls, out, stream, [&](float *losses) {
        constexpr int VN = Pack16<T>::kWidth;
        const bool vectorized = s.classes > 1024 && s.classes % VN == 0 &&
                                reinterpret_cast<uintptr_t>(xs) % 16 == 0;
        if (vectorized)
          crossEntropyRowsVecKernel<T, L, 256><<<unsigned(s.rows), 256, 0, stream>>>(
              xs, ls, losses, s.rows, int(s.classes), s.ignoreIndex);
        else if (s.classes <= 1024)
          crossEntropyRowsKernel<T, L, 32><<<unsigned((s.rows + 7) / 8), 256, 0, stream>>>(
              xs, ls, losses, s.rows, int(s.classes), s.ignoreIndex);
        else
          crossEntropyRowsKernel<T, L, 512><<<unsigned(s.rows), 512, 0, stream>>>(
              xs, ls, losses, s.rows, int(s.classes), s.ignoreIndex);
      });
    });
  });
}

llvm::Error launchCrossEntropyGrad(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 3, 3, 1));
  const Tensor &logits = call.inputs[0], &labels = call.inputs[1];
  const Tensor &lossGrad = call.inputs[2], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(CrossEntropyShape s, checkCrossEntropy(call, logits, labels));
  LOOM_RETURN_IF_ERROR(checkSameShape(logits, "logits", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(logits, "logits", out, "output"));
  LOOM_RETURN_IF_ERROR(checkLossGrad(lossGrad, s));
  return dispatchType(logits.dtype, "logits", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    return dispatchLabels(labels.dtype, [&](auto labelTag) -> llvm::Error {
      using L = typename decltype(labelTag)::type;
      if (s.rows == 0 || s.classes == 0)
        return llvm::Error::success();
      cudaStream_t stream = call.ctx.stream;
      const T *xs = static_cast<const T *>(logits.data);
      const L *ls = static_cast<const L *>(labels.data);
      const float *up = static_cast<const float *>(lossGrad.data);
      T *dxs = static_cast<T *>(out.data);
      long long *counted = nullptr;
      if (s.reduction == Reduction::Mean) {
        LOOM_RETURN_IF_ERROR(cudaError(
            cudaMallocAsync(reinterpret_cast<void **>(&counted), sizeof(long long), stream),
            "cudaMallocAsync (cross-entropy count)"));
        countLabelsKernel<L><<<1, 1024, 0, stream>>>(ls, s.rows, s.ignoreIndex, counted);
      }
      withRowConfig(s.classes, [&](auto cfg) {
        using Cfg = decltype(cfg);
        crossEntropyGradKernel<T, L, Cfg::G, Cfg::K>
            <<<rowBlocks<Cfg>(s.rows), Cfg::threads, 0, stream>>>(
                xs, ls, up, counted, int(s.reduction), s.rows, int(s.classes), s.ignoreIndex,
                dxs);
      });
      if (counted)
        LOOM_RETURN_IF_ERROR(cudaError(cudaFreeAsync(counted, stream), "cudaFreeAsync"));
      return llvm::Error::success();
    });
  });
}

/// The statistics [N, 3B] of a vocabulary-parallel loss: f32, N rows.
llvm::Expected<int64_t> checkBlockStats(const Tensor &stats, int64_t rows) {
  LOOM_RETURN_IF_ERROR(checkRank(stats, "stats", 2));
  if (stats.dtype != DType::F32)
    return kernelError(llvm::Twine("stats dtype is ") + dtypeName(stats.dtype) +
                       ", expected f32");
  if (stats.shape[0] != rows || stats.shape[1] == 0 || stats.shape[1] % 3 != 0)
    return kernelError("stats shape " + shapeToString(stats.shape) + " should be [" +
                       llvm::Twine(rows) + ", 3 * blocks]");
  return stats.shape[1] / 3;
}

/// Rows of a block loss kernel: G threads a row (as the forward's).
template <typename Fn> void withLossRows(int64_t rows, int64_t classes, Fn &&fn) {
  if (classes <= 1024)
    fn(std::integral_constant<int, 32>{}, unsigned((rows + 7) / 8), 256u);
  else
    fn(std::integral_constant<int, 512>{}, unsigned(rows), 512u);
}

llvm::Error launchCrossEntropyStats(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1));
  const Tensor &logits = call.inputs[0], &labels = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(CrossEntropyShape s, checkCrossEntropy(call, logits, labels));
  if (out.dtype != DType::F32 || out.shape != std::vector<int64_t>{s.rows, 3})
    return kernelError("output should be f32 [" + llvm::Twine(s.rows) + ", 3], got " +
                       dtypeName(out.dtype) + " " + shapeToString(out.shape));
  LOOM_ASSIGN_OR_RETURN(int64_t start, call.attrs.getInt("vocab_start", 0));
  if (s.rows == 0)
    return llvm::Error::success();
  return dispatchType(logits.dtype, "logits", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    return dispatchLabels(labels.dtype, [&](auto labelTag) -> llvm::Error {
      using L = typename decltype(labelTag)::type;
      const T *xs = static_cast<const T *>(logits.data);
      constexpr int VN = Pack16<T>::kWidth;
      if (s.classes > 1024 && s.classes % VN == 0 && reinterpret_cast<uintptr_t>(xs) % 16 == 0) {
        crossEntropyRowsVecKernel<T, L, 256, true><<<unsigned(s.rows), 256, 0, call.ctx.stream>>>(
            xs, static_cast<const L *>(labels.data), static_cast<float *>(out.data), s.rows,
            int(s.classes), s.ignoreIndex, start);
        return llvm::Error::success();
      }
      withLossRows(s.rows, s.classes, [&](auto g, unsigned blocks, unsigned threads) {
        crossEntropyStatsKernel<T, L, decltype(g)::value><<<blocks, threads, 0, call.ctx.stream>>>(
            xs, static_cast<const L *>(labels.data), static_cast<float *>(out.data), s.rows,
            int(s.classes), start, s.ignoreIndex);
      });
      return llvm::Error::success();
    });
  });
}

llvm::Error launchCrossEntropyCombine(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1));
  const Tensor &stats = call.inputs[0], &labels = call.inputs[1], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkRank(stats, "stats", 2));
  // The statistics stand in for the logits: their rows, and a class count
  // that checkCrossEntropy only bounds.
  LOOM_ASSIGN_OR_RETURN(CrossEntropyShape s, checkCrossEntropy(call, stats, labels));
  LOOM_ASSIGN_OR_RETURN(int64_t blocks, checkBlockStats(stats, s.rows));
  LOOM_RETURN_IF_ERROR(checkLossOutput(out, s));
  LOOM_ASSIGN_OR_RETURN(int64_t classes, call.attrs.getInt("num_classes", INT64_MAX));
  return dispatchLabels(labels.dtype, [&](auto labelTag) -> llvm::Error {
    using L = typename decltype(labelTag)::type;
    cudaStream_t stream = call.ctx.stream;
    const L *ls = static_cast<const L *>(labels.data);
    return reduceRowLosses(s, ls, out, stream, [&](float *losses) {
      crossEntropyCombineKernel<L><<<unsigned((s.rows + 255) / 256), 256, 0, stream>>>(
          static_cast<const float *>(stats.data), ls, losses, s.rows, int(blocks),
          s.ignoreIndex, classes);
    });
  });
}

llvm::Error launchCrossEntropyBlockGrad(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 4, 4, 1));
  const Tensor &logits = call.inputs[0], &labels = call.inputs[1];
  const Tensor &lossGrad = call.inputs[2], &stats = call.inputs[3], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(CrossEntropyShape s, checkCrossEntropy(call, logits, labels));
  LOOM_RETURN_IF_ERROR(checkSameShape(logits, "logits", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(logits, "logits", out, "output"));
  LOOM_ASSIGN_OR_RETURN(int64_t blocks, checkBlockStats(stats, s.rows));
  LOOM_ASSIGN_OR_RETURN(int64_t start, call.attrs.getInt("vocab_start", 0));
  LOOM_RETURN_IF_ERROR(checkLossGrad(lossGrad, s));
  if (s.rows == 0 || s.classes == 0)
    return llvm::Error::success();
  return dispatchType(logits.dtype, "logits", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    return dispatchLabels(labels.dtype, [&](auto labelTag) -> llvm::Error {
      using L = typename decltype(labelTag)::type;
      cudaStream_t stream = call.ctx.stream;
      const L *ls = static_cast<const L *>(labels.data);
      long long *counted = nullptr;
      if (s.reduction == Reduction::Mean) {
        LOOM_RETURN_IF_ERROR(cudaError(
            cudaMallocAsync(reinterpret_cast<void **>(&counted), sizeof(long long), stream),
            "cudaMallocAsync (cross-entropy count)"));
        countLabelsKernel<L><<<1, 1024, 0, stream>>>(ls, s.rows, s.ignoreIndex, counted);
      }
      constexpr int VN = Pack16<T>::kWidth;
      const bool vectorized = s.classes % VN == 0 && isAligned16(logits.data) &&
                              isAligned16(out.data);
      withLossRows(s.rows, s.classes, [&](auto g, unsigned grid, unsigned threads) {
        auto launch = [&](auto vec) {
          crossEntropyBlockGradKernel<T, L, decltype(g)::value, decltype(vec)::value>
              <<<grid, threads, 0, stream>>>(
                  static_cast<const T *>(logits.data), ls,
                  static_cast<const float *>(lossGrad.data), counted,
                  static_cast<const float *>(stats.data), int(s.reduction), s.rows,
                  int(s.classes), int(blocks), start, s.ignoreIndex, static_cast<T *>(out.data));
        };
        if (vectorized)
          launch(std::true_type{});
        else
          launch(std::false_type{});
      });
      if (counted)
        LOOM_RETURN_IF_ERROR(cudaError(cudaFreeAsync(counted, stream), "cudaFreeAsync"));
      return llvm::Error::success();
    });
  });
}

} // namespace

void registerLayerKernels(llvm::StringMap<Launcher> &registry) {
  registry["nn.cross_entropy_stats"] = launchCrossEntropyStats;
  registry["nn.cross_entropy_combine"] = launchCrossEntropyCombine;
  registry["nn.cross_entropy_block_grad"] = launchCrossEntropyBlockGrad;
  registry["nn.softmax"] = launchSoftmax;
  registry["nn.log_softmax"] = launchSoftmax;
  registry["nn.layer_norm"] = launchNorm;
  registry["nn.rms_norm"] = launchNorm;
  registry["nn.layer_norm_grad"] = launchNormGrad;
  registry["nn.rms_norm_grad"] = launchNormGrad;
  registry["nn.rope"] = launchRope;
  registry["nn.attention"] = launchAttention;
  registry["nn.attention_grad"] = launchAttentionGrad;
  registry["nn.cross_entropy"] = launchCrossEntropy;
  registry["nn.cross_entropy_grad"] = launchCrossEntropyGrad;
}

} // namespace loom::cuda
