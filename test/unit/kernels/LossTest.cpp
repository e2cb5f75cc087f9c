#include "KernelTestSupport.h"
#include "runtime/abi/LinearCrossEntropy.h"

#include <cmath>

using namespace loom;
using namespace loom::cpu;
using namespace loom::cpu::test;

namespace {

/// -log(softmax(row)[label]) from the plain formula (logits kept small).
double referenceRowLoss(const std::vector<double> &logits, int64_t classes, int64_t row,
                        int64_t label) {
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c)
    sum += std::exp(logits[row * classes + c]);
  return -std::log(std::exp(logits[row * classes + label]) / sum);
}

TEST(CrossEntropyKernelTest, Reductions) {
  const int64_t rows = 6, classes = 10;
  const std::vector<double> labelValues = {3, -100, 0, 9, -100, 5};
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    std::vector<double> logits = roundAll(dtype, randomValues(rows * classes, -3, 3, 101));
    OwnedTensor x(dtype, {rows, classes}, logits);
    for (DType labelType : {DType::I32, DType::I64}) {
      OwnedTensor labels(labelType, {rows}, labelValues);
      std::vector<double> perRow;
      double total = 0;
      int counted = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t label = static_cast<int64_t>(labelValues[r]);
        perRow.push_back(label == -100 ? 0.0 : referenceRowLoss(logits, classes, r, label));
        if (label != -100) {
          total += perRow.back();
          ++counted;
        }
      }
      OwnedTensor none(DType::F32, {rows}), sum(DType::F32, {}), mean(DType::F32, {});
      ASSERT_KERNEL_OK(run("nn.cross_entropy", {x, labels}, {none},
                           KernelAttrs().set("reduction", std::string("none"))));
      expectClose(none.values(), perRow, 1e-6, 1e-7, "none");
      ASSERT_KERNEL_OK(run("nn.cross_entropy", {x, labels}, {sum},
                           KernelAttrs().set("reduction", std::string("sum"))));
      expectClose(sum.values(), {total}, 1e-6, 0, "sum");
      ASSERT_KERNEL_OK(run("nn.cross_entropy", {x, labels}, {mean})); // mean is the default
      expectClose(mean.values(), {total / counted}, 1e-6, 0, "mean");
    }
  }
}

TEST(CrossEntropyKernelTest, IgnoreIndexAndStability) {
  OwnedTensor x(DType::F32, {2, 3}, {1000, 1001, 1002, -1000, 0, 1000});
  OwnedTensor labels(DType::I64, {2}, {2, 7}), out(DType::F32, {});
  // Row 1's label 7 is the ignore index: only row 0 counts.
  ASSERT_KERNEL_OK(run("nn.cross_entropy", {x, labels}, {out},
                       KernelAttrs().set("ignore_index", int64_t(7))));
  const double expected = std::log(1 + std::exp(-1.0) + std::exp(-2.0));
  expectClose(out.values(), {expected}, 1e-6);

  OwnedTensor allIgnored(DType::I64, {2}, {7, 7});
  ASSERT_KERNEL_OK(run("nn.cross_entropy", {x, allIgnored}, {out},
                       KernelAttrs().set("ignore_index", int64_t(7))));
  EXPECT_EQ(out.values(), std::vector<double>{0.0});
}

TEST(CrossEntropyKernelTest, Errors) {
  OwnedTensor x(DType::F32, {2, 3}), labels(DType::I64, {2}, {0, 3}), out(DType::F32, {});
  EXPECT_KERNEL_ERROR(run("nn.cross_entropy", {x, labels}, {out}),
                      "label 3 of row 1 is outside [0, 3)");
  OwnedTensor good(DType::I64, {2}, {0, 1}), wrongOut(DType::F32, {2});
  EXPECT_KERNEL_ERROR(run("nn.cross_entropy", {x, good}, {wrongOut}),
                      "should be [] for reduction 'mean'");
  OwnedTensor f64Out(DType::F64, {});
  EXPECT_KERNEL_ERROR(run("nn.cross_entropy", {x, good}, {f64Out}), "expected f32");
  OwnedTensor floatLabels(DType::F32, {2});
  EXPECT_KERNEL_ERROR(run("nn.cross_entropy", {x, floatLabels}, {out}), "expected i32 or i64");
  EXPECT_KERNEL_ERROR(run("nn.cross_entropy", {x, good}, {out},
                          KernelAttrs().set("reduction", std::string("max"))),
                      "'reduction' is 'max'");
  OwnedTensor shortLabels(DType::I64, {1}, {0});
  EXPECT_KERNEL_ERROR(run("nn.cross_entropy", {x, shortLabels}, {out}), "does not match logits");
}

// nn.linear_cross_entropy (--loom-fuse-linear-cross-entropy) refuses what it
// cannot run: a scratch smaller than its chunk needs, a label out of range,
// reduction none, a chunk of no rows, a weight of another width.
TEST(LinearCrossEntropyKernelTest, Errors) {
  OwnedTensor x(DType::F32, {4, 3}), w(DType::F32, {5, 3}), labels(DType::I64, {4}, {0, 1, 4, 2});
  OwnedTensor dloss(DType::F32, {}, {1.0}), loss(DType::F32, {}), dx(DType::F32, {4, 3}),
      dw(DType::F32, {5, 3});
  const int64_t words = linearCrossEntropyScratch(4, 3, 5, 2, 4, true).words;
  OwnedTensor scratch(DType::F32, {words}), small(DType::F32, {words - 1});
  KernelAttrs attrs = KernelAttrs().set("chunk", int64_t(2));
  ASSERT_KERNEL_OK(run("nn.linear_cross_entropy", {x, w, labels, dloss}, {loss, dx, dw, scratch},
                       attrs));
  EXPECT_KERNEL_ERROR(run("nn.linear_cross_entropy", {x, w, labels, dloss},
                          {loss, dx, dw, small}, attrs),
                      "the scratch must be at least");
  OwnedTensor outside(DType::I64, {4}, {0, 1, 5, 2});
  EXPECT_KERNEL_ERROR(run("nn.linear_cross_entropy", {x, w, outside, dloss},
                          {loss, dx, dw, scratch}, attrs),
                      "label 5 of row 2 is outside [0, 5)");
  EXPECT_KERNEL_ERROR(run("nn.linear_cross_entropy", {x, w, labels, dloss},
                          {loss, dx, dw, scratch},
                          KernelAttrs(attrs).set("reduction", std::string("none"))),
                      "must be mean or sum");
  EXPECT_KERNEL_ERROR(run("nn.linear_cross_entropy", {x, w, labels, dloss},
                          {loss, dx, dw, scratch}, KernelAttrs().set("chunk", int64_t(0))),
                      "'chunk' must be at least 1");
  OwnedTensor wide(DType::F32, {5, 4});
  EXPECT_KERNEL_ERROR(run("nn.linear_cross_entropy", {x, wide, labels, dloss},
                          {loss, dx, dw, scratch}, attrs),
                      "should be [N, H], [V, H] and [N]");
}

} // namespace
