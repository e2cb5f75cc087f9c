#include "KernelTestSupport.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

using namespace loom;
using namespace loom::cpu;
using namespace loom::cpu::test;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

enum class Op { Sum, Mean, Max };

/// Reference: visit every input element and fold it into the output element
/// it maps to (reduced dims dropped or kept as size 1).
std::vector<double> referenceReduce(const std::vector<double> &x,
                                    const std::vector<int64_t> &shape,
                                    const std::set<int64_t> &dims, bool keepDim,
                                    Op op, std::vector<int64_t> &outShape) {
  outShape.clear();
  int64_t reduceCount = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (dims.count(d)) {
      reduceCount *= shape[d];
      if (keepDim)
        outShape.push_back(1);
    } else {
      outShape.push_back(shape[d]);
    }
  }
  std::vector<double> out(numElementsOf(outShape),
                          op == Op::Max ? -std::numeric_limits<double>::infinity() : 0.0);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    std::vector<int64_t> index = unravel(i, shape), outIndex;
    for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
      if (!dims.count(d))
        outIndex.push_back(index[d]);
      else if (keepDim)
        outIndex.push_back(0);
    }
    double &slot = out[ravel(outIndex, outShape)];
    slot = op == Op::Max ? std::max(slot, x[i]) : slot + x[i];
  }
  if (op == Op::Mean)
    for (double &v : out)
      v /= reduceCount;
  return out;
}

TEST(ReduceKernelTest, SumMeanMaxOverDimSets) {
  const std::vector<int64_t> shape = {3, 4, 5};
  const std::vector<std::vector<int64_t>> dimLists = {{0}, {1}, {2}, {0, 2}, {-1, 0},
                                                      {0, 1, 2}, {}};
  const std::pair<const char *, Op> ops[] = {
      {"nn.reduce_sum", Op::Sum}, {"nn.reduce_mean", Op::Mean}, {"nn.reduce_max", Op::Max}};
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    std::vector<double> xs = roundAll(dtype, randomValues(60, -3, 3, 51));
    OwnedTensor in(dtype, shape, xs);
    for (const auto &[kernel, op] : ops) {
      for (const auto &dims : dimLists) {
        for (bool keepDim : {false, true}) {
          std::set<int64_t> normalized;
          for (int64_t d : dims)
            normalized.insert(d < 0 ? d + 3 : d);
          std::vector<int64_t> outShape;
          std::vector<double> expected =
              referenceReduce(xs, shape, normalized, keepDim, op, outShape);
          OwnedTensor out(dtype, outShape);
          ASSERT_KERNEL_OK(run(kernel, {in}, {out},
                               KernelAttrs().set("dims", dims).set("keepdim", int64_t(keepDim))));
          const double tol = dtype == DType::BF16 ? 1.0 / 256 : dtype == DType::F32 ? 1e-7 : 1e-15;
          expectClose(out.values(), roundAll(dtype, expected), tol, 1e-12, kernel);
        }
      }
    }
  }
}

TEST(ReduceKernelTest, IntegersAndSpecialCases) {
  OwnedTensor ints(DType::I32, {2, 3}, {1, -2, 3, 4, 5, -6});
  OwnedTensor sums(DType::I32, {3}), maxes(DType::I32, {2});
  ASSERT_KERNEL_OK(run("nn.reduce_sum", {ints}, {sums}, KernelAttrs().set("dims", std::vector<int64_t>{0})));
  EXPECT_EQ(sums.values(), (std::vector<double>{5, 3, -3}));
  ASSERT_KERNEL_OK(run("nn.reduce_max", {ints}, {maxes}, KernelAttrs().set("dims", std::vector<int64_t>{1})));
  EXPECT_EQ(maxes.values(), (std::vector<double>{3, 5}));
  EXPECT_KERNEL_ERROR(run("nn.reduce_mean", {ints}, {sums},
                          KernelAttrs().set("dims", std::vector<int64_t>{0})),
                      "unsupported dtype i32");

  OwnedTensor withNaN(DType::F32, {2, 2}, {1, kNaN, 2, 3}), rowMax(DType::F32, {2});
  ASSERT_KERNEL_OK(run("nn.reduce_max", {withNaN}, {rowMax},
                       KernelAttrs().set("dims", std::vector<int64_t>{1})));
  expectClose(rowMax.values(), {kNaN, 3}, 0);

  OwnedTensor empty(DType::F32, {0, 3}), emptySum(DType::F32, {3}), emptyMean(DType::F32, {3});
  ASSERT_KERNEL_OK(run("nn.reduce_sum", {empty}, {emptySum},
                       KernelAttrs().set("dims", std::vector<int64_t>{0})));
  EXPECT_EQ(emptySum.values(), (std::vector<double>{0, 0, 0}));
  ASSERT_KERNEL_OK(run("nn.reduce_mean", {empty}, {emptyMean},
                       KernelAttrs().set("dims", std::vector<int64_t>{0})));
  expectClose(emptyMean.values(), {kNaN, kNaN, kNaN}, 0);
  EXPECT_KERNEL_ERROR(run("nn.reduce_max", {empty}, {emptySum},
                          KernelAttrs().set("dims", std::vector<int64_t>{0})),
                      "empty set");
}

TEST(ReduceKernelTest, LongReductionsMatchAndAreThreadIndependent) {
  // More elements per output than the precomputed offset table holds.
  const std::vector<int64_t> shape = {300, 4, 300};
  std::vector<double> xs = randomValues(numElementsOf(shape), -1, 1, 52);
  OwnedTensor in(DType::F32, shape, xs);
  OwnedTensor one(DType::F32, {4}), many(DType::F32, {4});
  KernelAttrs attrs = KernelAttrs().set("dims", std::vector<int64_t>{0, 2});
  ASSERT_KERNEL_OK(run("nn.reduce_sum", {in}, {one}, attrs, 1));
  ASSERT_KERNEL_OK(run("nn.reduce_sum", {in}, {many}, attrs, 4));
  EXPECT_EQ(one.bytes(), many.bytes());
  std::vector<int64_t> outShape;
  std::vector<double> expected =
      referenceReduce(in.values(), shape, {0, 2}, false, Op::Sum, outShape);
  expectClose(one.values(), expected, 1e-6, 1e-5);
}

TEST(ReduceKernelTest, Errors) {
  OwnedTensor in(DType::F32, {2, 3}), out(DType::F32, {2});
  EXPECT_KERNEL_ERROR(run("nn.reduce_sum", {in}, {out},
                          KernelAttrs().set("dims", std::vector<int64_t>{0})),
                      "output shape [2] should be [3]");
  EXPECT_KERNEL_ERROR(run("nn.reduce_sum", {in}, {out},
                          KernelAttrs().set("dims", std::vector<int64_t>{1, -1})),
                      "listed twice");
  EXPECT_KERNEL_ERROR(run("nn.reduce_sum", {in}, {out},
                          KernelAttrs().set("dims", std::vector<int64_t>{2})),
                      "out of range");
  EXPECT_KERNEL_ERROR(run("nn.reduce_sum", {in}, {out}), "missing attribute 'dims'");
}

std::vector<double> referenceSoftmax(const std::vector<double> &x,
                                     const std::vector<int64_t> &shape, int64_t dim,
                                     bool logSoftmax) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<int64_t> index = unravel(i, shape);
    // Plain formula (inputs are small enough not to overflow).
    double sum = 0;
    for (int64_t j = 0; j < shape[dim]; ++j) {
      std::vector<int64_t> other = index;
      other[dim] = j;
      sum += std::exp(x[ravel(other, shape)]);
    }
    out[i] = logSoftmax ? x[i] - std::log(sum) : std::exp(x[i]) / sum;
  }
  return out;
}

TEST(SoftmaxKernelTest, MatchesReferenceAlongAnyDim) {
  const std::vector<int64_t> shape = {3, 5, 4};
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    std::vector<double> xs = roundAll(dtype, randomValues(60, -4, 4, 61));
    OwnedTensor in(dtype, shape, xs), out(dtype, shape);
    for (int64_t dim : {0, 1, 2, -1}) {
      for (bool logSoftmax : {false, true}) {
        const char *kernel = logSoftmax ? "nn.log_softmax" : "nn.softmax";
        ASSERT_KERNEL_OK(run(kernel, {in}, {out}, KernelAttrs().set("dim", dim)));
        const double tol = dtype == DType::BF16 ? 1.0 / 256 : dtype == DType::F32 ? 1e-7 : 1e-14;
        expectClose(out.values(), referenceSoftmax(xs, shape, dim < 0 ? dim + 3 : dim, logSoftmax),
                    tol, 1e-12, kernel);
      }
    }
  }
}

TEST(SoftmaxKernelTest, StableForLargeInputs) {
  OwnedTensor in(DType::F32, {1, 3}, {1000, 1001, 1002}), out(DType::F32, {1, 3});
  ASSERT_KERNEL_OK(run("nn.softmax", {in}, {out}, KernelAttrs().set("dim", int64_t(1))));
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0), total = 1 + e1 + e2;
  expectClose(out.values(), {e2 / total, e1 / total, 1 / total}, 1e-7);
  ASSERT_KERNEL_OK(run("nn.log_softmax", {in}, {out}, KernelAttrs().set("dim", int64_t(1))));
  expectClose(out.values(), {-2 - std::log(total), -1 - std::log(total), -std::log(total)}, 1e-7);
  OwnedTensor ints(DType::I64, {3});
  EXPECT_KERNEL_ERROR(run("nn.softmax", {ints}, {ints}, KernelAttrs().set("dim", int64_t(0))),
                      "unsupported dtype i64");
}

// nn.sum_squares_multi (the gradient norm, --loom-fuse-sum-squares) against
// the sums it replaces, computed here in long double: per tensor, and the
// total; a tensor spanning several chunks, an empty one, bf16 and f32.
TEST(SumSquaresMultiTest, MatchesEachTensorsSumOfSquaresAndTheirTotal) {
  const std::vector<std::pair<DType, std::vector<int64_t>>> tensors = {
      {DType::F32, {4, 3}}, {DType::F32, {70001}}, {DType::BF16, {9, 7}}, {DType::F32, {0}}};
  std::vector<OwnedTensor> in;
  std::vector<long double> expected;
  long double all = 0;
  int64_t slots = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto &[dtype, shape] = tensors[i];
    std::vector<double> xs = roundAll(dtype, randomValues(numElementsOf(shape), -3, 3, 70 + i));
    long double sum = 0;
    for (double x : xs)
      sum += (long double)x * x;
    expected.push_back(sum);
    all += sum;
    in.emplace_back(dtype, shape, xs);
    slots += (int64_t(xs.size()) + 32767) / 32768 + 1;
  }
  EXPECT_EQ(slots, 1 + 3 + 1 + 0 + 4);
  std::vector<Tensor> inputs(in.begin(), in.end());
  for (int64_t total : {0, 1}) {
    std::vector<OwnedTensor> sums;
    for (size_t i = 0; i < (total ? 1 : in.size()); ++i)
      sums.emplace_back(DType::F32, std::vector<int64_t>{});
    OwnedTensor scratch(DType::F64, {slots});
    std::vector<Tensor> outputs(sums.begin(), sums.end());
    outputs.push_back(scratch);
    ASSERT_KERNEL_OK(runKernel("nn.sum_squares_multi", inputs, outputs,
                               KernelAttrs().set("total", total)));
    if (total) {
      EXPECT_EQ(sums[0].values()[0], double(float(all)));
    } else {
      for (size_t i = 0; i < in.size(); ++i)
        EXPECT_EQ(sums[i].values()[0], double(float(expected[i]))) << "tensor " << i;
    }
  }
  // Operand errors name the problem.
  OwnedTensor ints(DType::I64, {3}), one(DType::F32, {}), small(DType::F64, {1});
  EXPECT_KERNEL_ERROR(runKernel("nn.sum_squares_multi", {ints}, {one, small}, KernelAttrs()),
                      "expected f32, bf16 or f16");
  OwnedTensor x(DType::F32, {3});
  EXPECT_KERNEL_ERROR(runKernel("nn.sum_squares_multi", {x}, {one, one}, KernelAttrs()),
                      "scratch result must be f64 with at least 2 elements");
  EXPECT_KERNEL_ERROR(runKernel("nn.sum_squares_multi", {x, x}, {one, small}, KernelAttrs()),
                      "expected n tensors and n + 1 results");
}

} // namespace
