// Reductions over a set of dims (sum, mean, max) and softmax/log_softmax.
// Float sums accumulate in double, in row-major order of the reduced dims,
// and round once on store.

#include "kernels/cpu/KernelSupport.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::cpu::detail {

namespace {

enum class ReduceOp { Sum, Mean, Max };

// Reduced-offset tables up to this many entries are precomputed; longer
// reductions walk their dims instead.
constexpr int64_t kMaxOffsetTable = 1 << 16;

struct ReducePlan {
  std::vector<int64_t> keptShape, keptStrides;       // output order
  std::vector<int64_t> reducedShape, reducedStrides; // input strides
  int64_t reduceCount = 1;
};

llvm::Expected<ReducePlan> planReduction(const Tensor &in, const Tensor &out,
                                         const std::vector<int64_t> &rawDims,
                                         bool keepDim) {
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  std::vector<bool> reduced(rank, false);
  for (int64_t rawDim : rawDims) {
    LOOM_ASSIGN_OR_RETURN(int64_t dim, normalizeDim(rawDim, rank, "reduced dim"));
    if (reduced[dim])
      return kernelError("dim " + llvm::Twine(rawDim) + " is listed twice in 'dims'");
    reduced[dim] = true;
  }
  ReducePlan plan;
  std::vector<int64_t> expected;
  const std::vector<int64_t> strides = contiguousStrides(in.shape);
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) {
      plan.reducedShape.push_back(in.shape[d]);
      plan.reducedStrides.push_back(strides[d]);
      plan.reduceCount *= in.shape[d];
      if (keepDim)
        expected.push_back(1);
    } else {
      plan.keptShape.push_back(in.shape[d]);
      plan.keptStrides.push_back(strides[d]);
      expected.push_back(in.shape[d]);
    }
  }
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected));
  return plan;
}

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
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, call.attrs.getInts("dims"));
  LOOM_ASSIGN_OR_RETURN(bool keepDim, call.attrs.getBool("keepdim", false));
  LOOM_ASSIGN_OR_RETURN(ReducePlan plan, planReduction(in, out, dims, keepDim));
  if (call.name == "nn.reduce_sum")
    return reduceDispatch<ReduceOp::Sum>(call, plan);
  if (call.name == "nn.reduce_mean")
    return reduceDispatch<ReduceOp::Mean>(call, plan);
  if (plan.reduceCount == 0)
    return kernelError("cannot take the maximum of an empty set (a reduced dim "
                       "has size 0)");
  return reduceDispatch<ReduceOp::Max>(call, plan);
}

llvm::Error runSoftmax(const KernelCall &call) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameShape(in, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  const bool logSoftmax = call.name == "nn.log_softmax";
  LOOM_ASSIGN_OR_RETURN(int64_t rawDim, call.attrs.getInt("dim"));
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  if (rank == 0)
    return kernelError("input must have rank >= 1");
  LOOM_ASSIGN_OR_RETURN(int64_t dim, normalizeDim(rawDim, rank, "attribute 'dim'"));
  const int64_t length = in.shape[dim];
  const int64_t inner = contiguousStrides(in.shape)[dim];
  const int64_t lines = length == 0 ? 0 : in.numElements() / length;
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

} // namespace loom::cpu::detail
