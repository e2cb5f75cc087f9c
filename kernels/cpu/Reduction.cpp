// Reductions over a set of dims (sum, mean, max) and softmax/log_softmax.
// Float sums accumulate in double, in row-major order of the reduced dims,
// and round once on store. nn.sum_squares_multi: the gradient norm's sums.

#include "kernels/cpu/KernelSupport.h"
#include "runtime/abi/SumSquares.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::cpu::detail {

namespace {

// Reduced-offset tables up to this many entries are precomputed; longer
// reductions walk their dims instead.
constexpr int64_t kMaxOffsetTable = 1 << 16;

template <typename T, ReduceOp Op>
void reduceAs(const KernelCall &call, const ReducePlan &plan) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  InputArray<T> src(in);
  const T *x = src.data();
  // Sums accumulate in double for floats and in wrapping int64 for integers.
  using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  std::vector<int64_t> offsetTable;
  if (plan.reduceCount <= kMaxOffsetTable) {
    offsetTable.reserve(plan.reduceCount);
    StridedWalker<1> walker(plan.reducedShape, {plan.reducedStrides.data()}, 0);
    for (int64_t r = 0; r < plan.reduceCount; ++r, walker.next())
      offsetTable.push_back(walker.offset(0));
  }
  auto reduceOne = [&](int64_t base, auto &&offsetAt) -> Acc {
    Acc acc = Op == ReduceOp::Max ? std::numeric_limits<Acc>::lowest() : Acc(0);
    if constexpr (Op == ReduceOp::Max && !std::is_integral_v<T>)
      acc = -std::numeric_limits<double>::infinity();
    for (int64_t r = 0; r < plan.reduceCount; ++r) {
      const Acc v = static_cast<Acc>(x[base + offsetAt(r)]);
      if constexpr (Op == ReduceOp::Max) {
        if constexpr (!std::is_integral_v<T>)
          if (std::isnan(v))
            return v;
        acc = v > acc ? v : acc;
      } else if constexpr (std::is_integral_v<T>) {
        acc = static_cast<Acc>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(v));
      } else {
        acc += v;
      }
    }
    if constexpr (Op == ReduceOp::Mean)
      acc /= static_cast<double>(plan.reduceCount); // 0/0 = NaN when empty
    return acc;
  };
  const int64_t outCount = out.numElements();
  parallelFor(call.ctx, outCount, plan.reduceCount + 1, [&](int64_t begin, int64_t end) {
    StridedWalker<1> keptWalker(plan.keptShape, {plan.keptStrides.data()}, begin);
    for (int64_t o = begin; o < end; ++o, keptWalker.next()) {
      const int64_t base = keptWalker.offset(0);
      Acc value;
      if (!offsetTable.empty() || plan.reduceCount == 0) {
        value = reduceOne(base, [&](int64_t r) { return offsetTable[r]; });
      } else {
        StridedWalker<1> walker(plan.reducedShape, {plan.reducedStrides.data()}, 0);
        int64_t next = 0;
        value = reduceOne(base, [&](int64_t r) {
          // Called with r = 0, 1, 2, ... in order.
          for (; next < r; ++next)
            walker.next();
          return walker.offset(0);
        });
      }
      if constexpr (std::is_integral_v<T>)
        storeInt(out.data, out.dtype, o, value);
      else
        storeFromDouble(out.data, out.dtype, o, value);
    }
  });
}

template <ReduceOp Op> llvm::Error reduceDispatch(const KernelCall &call,
                                                  const ReducePlan &plan) {
  const DType type = call.inputs[0].dtype;
  if (type == DType::I64 || type == DType::I32) {
    if constexpr (Op == ReduceOp::Mean)
      return kernelError(llvm::Twine("unsupported dtype ") + dtypeName(type) +
                         " (a float type is required)");
    else {
      reduceAs<int64_t, Op>(call, plan);
      return llvm::Error::success();
    }
  }
  return dispatchFloat(type, "input", [&](auto tag) {
    reduceAs<decltype(tag), Op>(call, plan);
    return llvm::Error::success();
  });
}

} // namespace

llvm::Error runReduce(const KernelCall &call) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(ReducePlan plan, checkReduce(call.id, in, out, call.attrs));
  if (plan.op == ReduceOp::Sum)
    return reduceDispatch<ReduceOp::Sum>(call, plan);
  if (plan.op == ReduceOp::Mean)
    return reduceDispatch<ReduceOp::Mean>(call, plan);
  return reduceDispatch<ReduceOp::Max>(call, plan);
}

llvm::Error runSoftmax(const KernelCall &call) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(SoftmaxPlan plan, checkSoftmax(call.id, in, out, call.attrs));
  const bool logSoftmax = plan.log;
  const int64_t length = plan.length, inner = plan.inner, lines = plan.lines;
  return dispatchFloat(in.dtype, "input", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> src(in);
    const T *x = src.data();
    parallelFor(call.ctx, lines, length * 25, [&](int64_t begin, int64_t end) {
      for (int64_t line = begin; line < end; ++line) {
        const int64_t base = (line / inner) * length * inner + line % inner;
        double maxValue = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < length; ++j)
          maxValue = std::max(maxValue, static_cast<double>(x[base + j * inner]));
        double sum = 0.0;
        for (int64_t j = 0; j < length; ++j)
          sum += std::exp(static_cast<double>(x[base + j * inner]) - maxValue);
        const double logSum = std::log(sum);
        for (int64_t j = 0; j < length; ++j) {
          const double shifted = static_cast<double>(x[base + j * inner]) - maxValue;
          storeFromDouble(out.data, out.dtype, base + j * inner,
                          logSoftmax ? shifted - logSum : std::exp(shifted) / sum);
        }
      }
    });
    return llvm::Error::success();
  });
}

llvm::Error runSumSquaresMulti(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(bool total, call.attrs.getBool("total", false));
  LOOM_RETURN_IF_ERROR(checkSumSquaresMulti(call.inputs, call.outputs, total));
  double *scratch = static_cast<double *>(call.outputs.back().data);
  // Every chunk's partial (f64, squares accumulated in element order), the
  // chunks in parallel; then each tensor's partials in order, then the
  // tensors' sums in order.
  const size_t n = call.inputs.size();
  std::vector<int64_t> firstChunk{0};
  for (const Tensor &t : call.inputs)
    firstChunk.push_back(firstChunk.back() + sumSquaresChunks(t.numElements()));
  double *sums = scratch + firstChunk.back();
  for (size_t i = 0; i < n; ++i) {
    const Tensor &x = call.inputs[i];
    const int64_t count = x.numElements(), chunks = firstChunk[i + 1] - firstChunk[i];
    parallelFor(call.ctx, chunks, kSumSquaresChunk, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const int64_t lo = c * kSumSquaresChunk, hi = std::min(count, lo + kSumSquaresChunk);
        double acc = 0;
        for (int64_t j = lo; j < hi; ++j) {
          const double v = loadAsDouble(x.data, x.dtype, j);
          acc += v * v;
        }
        scratch[firstChunk[i] + c] = acc;
      }
    });
    double sum = 0;
    for (int64_t c = firstChunk[i]; c < firstChunk[i + 1]; ++c)
      sum += scratch[c];
    sums[i] = sum;
    if (!total)
      *static_cast<float *>(call.outputs[i].data) = static_cast<float>(sum);
  }
  if (total) {
    double all = 0;
    for (size_t i = 0; i < n; ++i)
      all += sums[i];
    *static_cast<float *>(call.outputs[0].data) = static_cast<float>(all);
  }
  return llvm::Error::success();
}

} // namespace loom::cpu::detail
