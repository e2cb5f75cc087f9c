// CUDA kernels of the cross-entropy loss and its gradient, and of the
// vocabulary-parallel loss (cross_entropy_stats, _combine, _block_grad), as
// kernels/cpu/Loss.cpp, BlockLoss.cpp and the loss part of Backward.cpp.
// f32, bf16 and f16 logits computed in f32; every reduction has a fixed order
// (no atomics), so results are deterministic run to run.
//
// The one check the CPU does that is not repeated here is the range of the
// labels, which live in device memory: a label outside [0, C) that is not
// ignore_index makes that row's loss (and gradient) NaN instead of an error.

#include "kernels/cuda/DeviceSupport.cuh"
#include "kernels/cpu/OperandChecks.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

namespace loom::cuda {
namespace {

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

using Reduction = cpu::detail::LossReduction;

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
/// labels, NaN rows for labels out of range. With ROW_LOSSES, each row's
/// loss too (as crossEntropyRowsKernel's), from the same pass over the row.
template <typename T, typename O, typename L, int G, int K, bool ROW_LOSSES = false>
__global__ void __launch_bounds__(1024)
    crossEntropyGradKernel(const T *__restrict__ logits, const L *__restrict__ labels,
                           const float *__restrict__ upstream,
                           const long long *__restrict__ counted, int reduction, int64_t rows,
                           int classes, int64_t ignoreIndex, O *__restrict__ out,
                           float *__restrict__ rowLosses = nullptr) {
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
  if constexpr (ROW_LOSSES)
    if (lane == 0)
      rowLosses[row] = valid ? ms.m + logf(ms.s) - toF(in[label]) : ignored ? 0.f : NAN;
  if (!valid) {
    const O fill = fromF<O>(ignored ? 0.f : NAN);
    for (int j = lane; j < classes; j += G)
      out[base + j] = fill;
    return;
  }
  const float weight = lossRowWeight(upstream, counted, reduction, row);
  const float invSum = 1.f / ms.s;
  forRow<G, K>(in, count, lane, cache, [&](int j, float v) {
    const float p = expf(v - ms.m) * invSum;
    out[base + j] = fromF<O>(weight * (p - (j == label ? 1.f : 0.f)));
  });
}

/// crossEntropyGradKernel for rows too long to cache (more than 8192
/// classes) that are whole 16-byte vectors: a block a row, 16-byte loads and
/// stores, the row read twice (the second time mostly from L2). Each vector
/// updates the running (max, sum) once: its own max first, then one exp per
/// element against the new max.
template <typename T, typename O, typename L, int G>
__global__ void __launch_bounds__(G)
    crossEntropyGradVecKernel(const T *__restrict__ logits, const L *__restrict__ labels,
                              const float *__restrict__ upstream,
                              const long long *__restrict__ counted, int reduction, int64_t rows,
                              int classes, int64_t ignoreIndex, O *__restrict__ out) {
  using P = Pack16<T>;
  constexpr int VN = P::kWidth;
  __shared__ MaxSum red[32];
  const int64_t row = blockIdx.x;
  const int64_t label = static_cast<int64_t>(labels[row]);
  const bool ignored = label == ignoreIndex;
  const bool valid = !ignored && label >= 0 && label < classes;
  const int64_t base = row * int64_t(classes);
  const int nv = classes / VN;
  const P *in = reinterpret_cast<const P *>(logits + base);
  // Writes VN results of O at out + base + q * VN (16, 8 or 32 bytes).
  auto store = [&](int q, const O (&v)[VN]) {
    O *dst = out + base + int64_t(q) * VN;
    constexpr int bytes = int(sizeof(O)) * VN;
    if constexpr (bytes % 16 == 0) {
#pragma unroll
      for (int b = 0; b < bytes / 16; ++b)
        reinterpret_cast<uint4 *>(dst)[b] = reinterpret_cast<const uint4 *>(v)[b];
    } else {
      static_assert(bytes == 8, "a vector of O is 8, 16 or 32 bytes");
      *reinterpret_cast<uint2 *>(dst) = *reinterpret_cast<const uint2 *>(v);
    }
  };
  if (!valid) {
    O fill[VN];
#pragma unroll
    for (int e = 0; e < VN; ++e)
      fill[e] = fromF<O>(ignored ? 0.f : NAN);
    for (int q = threadIdx.x; q < nv; q += G)
      store(q, fill);
    return;
  }
  MaxSum ms{-INFINITY, 0.f};
  bool nan = false;
  for (int q = threadIdx.x; q < nv; q += G) {
    const P v = in[q];
    float m = -INFINITY;
#pragma unroll
    for (int e = 0; e < VN; ++e) {
      const float x = toF(v.v[e]);
      m = fmaxf(m, x);
      nan |= x != x;
    }
    if (m == -INFINITY)
      continue; // adds nothing
    const float nm = fmaxf(ms.m, m);
    float sum = ms.m == -INFINITY ? 0.f : ms.s * expf(ms.m - nm);
#pragma unroll
    for (int e = 0; e < VN; ++e)
      sum += expf(toF(v.v[e]) - nm);
    ms = {nm, sum};
  }
  if (nan)
    ms.s = NAN;
  ms = groupReduce<G>(ms, red, MaxSumOp{});
  const float weight = lossRowWeight(upstream, counted, reduction, row);
  const float invSum = 1.f / ms.s;
  for (int q = threadIdx.x; q < nv; q += G) {
    const P v = in[q];
    O r[VN];
#pragma unroll
    for (int e = 0; e < VN; ++e) {
      const float p = expf(toF(v.v[e]) - ms.m) * invSum;
      r[e] = fromF<O>(weight * (p - (int64_t(q) * VN + e == label ? 1.f : 0.f)));
    }
    store(q, r);
  }
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

// --- cross entropy -------------------------------------------------------------

using cpu::detail::BlockLossShape;
using cpu::detail::CrossEntropyShape;

/// What the CUDA loss kernels can take, beyond the shared checks.
llvm::Error checkLossLimits(const CrossEntropyShape &s) {
  LOOM_RETURN_IF_ERROR(checkFitsInt(s.classes, "class count"));
  return checkRowCount(s.rows);
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
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1, 1));
  const Tensor &logits = call.inputs[0], &labels = call.inputs[1];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(CrossEntropyShape s,
                        cpu::detail::checkCrossEntropy(logits, labels, out, call.attrs));
  LOOM_RETURN_IF_ERROR(checkLossLimits(s));
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
  LOOM_RETURN_IF_ERROR(checkOperands(call, 3, 3, 1, 1));
  const Tensor &logits = call.inputs[0], &labels = call.inputs[1];
  const Tensor &lossGrad = call.inputs[2], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(CrossEntropyShape s, cpu::detail::checkCrossEntropyGrad(
                                                 logits, labels, lossGrad, out, call.attrs));
  LOOM_RETURN_IF_ERROR(checkLossLimits(s));
  return dispatchType(logits.dtype, "logits", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    return dispatchType(out.dtype, "output", [&](auto outTag) -> llvm::Error {
    using O = typename decltype(outTag)::type;
    return dispatchLabels(labels.dtype, [&](auto labelTag) -> llvm::Error {
      using L = typename decltype(labelTag)::type;
      if (s.rows == 0 || s.classes == 0)
        return llvm::Error::success();
      cudaStream_t stream = call.ctx.stream;
      const T *xs = static_cast<const T *>(logits.data);
      const L *ls = static_cast<const L *>(labels.data);
      const float *up = static_cast<const float *>(lossGrad.data);
      O *dxs = static_cast<O *>(out.data);
      long long *counted = nullptr;
      if (s.reduction == Reduction::Mean) {
        LOOM_RETURN_IF_ERROR(cudaError(
            cudaMallocAsync(reinterpret_cast<void **>(&counted), sizeof(long long), stream),
            "cudaMallocAsync (cross-entropy count)"));
        countLabelsKernel<L><<<1, 1024, 0, stream>>>(ls, s.rows, s.ignoreIndex, counted);
      }
      constexpr int VN = Pack16<T>::kWidth;
      if (s.classes > 8192 && s.classes % VN == 0 && isAligned(xs, 16) && isAligned(dxs, 16) &&
          s.rows <= INT_MAX) {
        crossEntropyGradVecKernel<T, O, L, 1024><<<unsigned(s.rows), 1024, 0, stream>>>(
            xs, ls, up, counted, int(s.reduction), s.rows, int(s.classes), s.ignoreIndex, dxs);
      } else {
        withRowConfig(s.classes, [&](auto cfg) {
          using Cfg = decltype(cfg);
          crossEntropyGradKernel<T, O, L, Cfg::G, Cfg::K>
              <<<rowBlocks<Cfg>(s.rows), Cfg::threads, 0, stream>>>(
                  xs, ls, up, counted, int(s.reduction), s.rows, int(s.classes), s.ignoreIndex,
                  dxs);
        });
      }
      if (counted)
        LOOM_RETURN_IF_ERROR(cudaError(cudaFreeAsync(counted, stream), "cudaFreeAsync"));
      return llvm::Error::success();
    });
    });
  });
}

/// Rows of a block loss kernel: G threads a row (as the forward's).
template <typename Fn> void withLossRows(int64_t rows, int64_t classes, Fn &&fn) {
  if (classes <= 1024)
    fn(std::integral_constant<int, 32>{}, unsigned((rows + 7) / 8), 256u);
  else
    fn(std::integral_constant<int, 512>{}, unsigned(rows), 512u);
}

llvm::Error launchCrossEntropyStats(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1, 1));
  const Tensor &logits = call.inputs[0], &labels = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(BlockLossShape b,
                        cpu::detail::checkCrossEntropyStats(logits, labels, out, call.attrs));
  const CrossEntropyShape &s = b.ce;
  LOOM_RETURN_IF_ERROR(checkLossLimits(s));
  const int64_t start = b.vocabStart;
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
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1, 1));
  const Tensor &stats = call.inputs[0], &labels = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(BlockLossShape b,
                        cpu::detail::checkCrossEntropyCombine(stats, labels, out, call.attrs));
  const CrossEntropyShape &s = b.ce;
  LOOM_RETURN_IF_ERROR(checkLossLimits(s));
  const int64_t blocks = b.blocks, classes = b.numClasses;
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
  LOOM_RETURN_IF_ERROR(checkOperands(call, 4, 4, 1, 1));
  const Tensor &logits = call.inputs[0], &labels = call.inputs[1];
  const Tensor &lossGrad = call.inputs[2], &stats = call.inputs[3], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(BlockLossShape b, cpu::detail::checkCrossEntropyBlockGrad(
                                              logits, labels, lossGrad, stats, out, call.attrs));
  const CrossEntropyShape &s = b.ce;
  LOOM_RETURN_IF_ERROR(checkLossLimits(s));
  const int64_t blocks = b.blocks, start = b.vocabStart;
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
      const bool vectorized = s.classes % VN == 0 && isAligned(logits.data, 16) &&
                              isAligned(out.data, 16);
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

// --- the LM head and the loss, fused (nn.linear_cross_entropy) ---------------

/// Per chunk of rows: the logits GEMM (f32), one pass over them writing each
/// row's loss and the gradient in x's type, then dx's rows (g w) and dw's
/// running f32 sums (g^T x, beta = 1 after the first chunk); last, the
/// rows' losses reduced in a fixed order. Only a chunk's logits and
/// gradient exist, in the scratch the compiler planned.
llvm::Error launchLinearCrossEntropy(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(cpu::detail::LinearCrossEntropyShape s,
                        cpu::detail::checkLinearCrossEntropy(call.inputs, call.outputs,
                                                             call.attrs));
  LOOM_RETURN_IF_ERROR(checkLossLimits(s.ce));
  const Tensor &x = call.inputs[0], &w = call.inputs[1], &labels = call.inputs[2];
  const Tensor &lossGrad = call.inputs[3];
  const Tensor &loss = call.outputs[0], &dx = call.outputs[1], &dw = call.outputs[2];
  float *scratch = static_cast<float *>(call.outputs[3].data);
  const int64_t rows = s.ce.rows, classes = s.ce.classes, features = s.features;
  const LaunchContext &ctx = call.ctx;
  cudaStream_t stream = ctx.stream;
  return dispatchType(x.dtype, "x", [&](auto tag) -> llvm::Error {
    using T = typename decltype(tag)::type;
    return dispatchLabels(labels.dtype, [&](auto labelTag) -> llvm::Error {
      using L = typename decltype(labelTag)::type;
      const L *ls = static_cast<const L *>(labels.data);
      const float *up = static_cast<const float *>(lossGrad.data);
      float *logits = scratch + s.scratch.logits;
      T *grad = reinterpret_cast<T *>(scratch + s.scratch.grad);
      float *losses = scratch + s.scratch.losses;
      auto *counted = reinterpret_cast<long long *>(scratch + s.scratch.count);
      const bool f32Sums = dw.dtype == DType::F32;
      float *sums = f32Sums ? static_cast<float *>(dw.data) : scratch + s.scratch.sums;
      if (rows == 0) {
        if (classes * features > 0)
          LOOM_RETURN_IF_ERROR(cudaError(
              cudaMemsetAsync(dw.data, 0, dw.sizeInBytes(), stream), "cudaMemsetAsync"));
      } else {
        countLabelsKernel<L><<<1, 1024, 0, stream>>>(ls, rows, s.ce.ignoreIndex, counted);
      }
      const size_t elem = sizeof(T);
      for (int64_t first = 0; first < rows; first += s.chunk) {
        const int64_t count = std::min(s.chunk, rows - first);
        const char *xc = static_cast<const char *>(x.data) + first * features * elem;
        LOOM_RETURN_IF_ERROR(gemmRowMajor(ctx, x.dtype, DType::F32, xc, false, w.data, true,
                                          logits, count, classes, features, false));
        withRowConfig(classes, [&](auto cfg) {
          using Cfg = decltype(cfg);
          crossEntropyGradKernel<float, T, L, Cfg::G, Cfg::K, true>
              <<<rowBlocks<Cfg>(count), Cfg::threads, 0, stream>>>(
                  logits, ls + first, up, counted, int(s.ce.reduction), count, int(classes),
                  s.ce.ignoreIndex, grad, losses + first);
        });
        char *dxc = static_cast<char *>(dx.data) + first * features * elem;
        LOOM_RETURN_IF_ERROR(gemmRowMajor(ctx, x.dtype, x.dtype, grad, false, w.data, false, dxc,
                                          count, features, classes, false));
        LOOM_RETURN_IF_ERROR(gemmRowMajor(ctx, x.dtype, DType::F32, grad, true, xc, false, sums,
                                          classes, features, count, first > 0));
      }
      if (!f32Sums && rows > 0) {
        Tensor from{sums, DType::F32, dw.shape};
        LOOM_RETURN_IF_ERROR(launchKernel(KernelId::Cast, {from}, {dw}, cpu::KernelAttrs(), ctx));
      }
      crossEntropyReduceKernel<L><<<1, 1024, 0, stream>>>(
          losses, ls, rows, s.ce.ignoreIndex, s.ce.reduction == Reduction::Mean,
          static_cast<float *>(loss.data));
      return cudaError(cudaGetLastError(), "nn.linear_cross_entropy");
    });
  });
}

} // namespace

void registerLossKernels(KernelRegistry &registry) {
  registry.add(KernelId::LinearCrossEntropy, launchLinearCrossEntropy);
  registry.add(KernelId::CrossEntropy, launchCrossEntropy);
  registry.add(KernelId::CrossEntropyGrad, launchCrossEntropyGrad);
  registry.add(KernelId::CrossEntropyStats, launchCrossEntropyStats);
  registry.add(KernelId::CrossEntropyCombine, launchCrossEntropyCombine);
  registry.add(KernelId::CrossEntropyBlockGrad, launchCrossEntropyBlockGrad);
}

} // namespace loom::cuda
