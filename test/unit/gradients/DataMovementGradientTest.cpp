// Gradient rules of the data-movement ops, checked against central finite
// differences in f64 (tolerances: GradientCheck.h).

#include "GradientCheck.h"

using namespace mlir;
using namespace loom::nn;
using namespace loom::nn::test;

namespace {

TEST(DataMovementGradientTest, Reshape) {
  GradientCheck g;
  Value x = g.random({2, 3, 4});
  g.check(g.builder().create<ReshapeOp>(g.loc(), g.tensor({6, 4}), x));
}

TEST(DataMovementGradientTest, Transpose) {
  GradientCheck g;
  Value x = g.random({2, 3, 4});
  g.check(g.builder().create<TransposeOp>(g.loc(), x,
                                          g.builder().getDenseI64ArrayAttr({2, 0, 1})));
}

TEST(DataMovementGradientTest, Broadcast) {
  GradientCheck g;
  Value x = g.random({3, 1});
  g.check(g.builder().create<BroadcastOp>(g.loc(), g.tensor({2, 3, 4}), x));
}

TEST(DataMovementGradientTest, StridedSlice) {
  GradientCheck g;
  OpBuilder &b = g.builder();
  Value x = g.random({5, 7, 2});
  g.check(b.create<SliceOp>(g.loc(), x, b.getDenseI64ArrayAttr({1, 0, 1}),
                            b.getDenseI64ArrayAttr({5, 6, 2}),
                            b.getDenseI64ArrayAttr({2, 3, 1})));
}

TEST(DataMovementGradientTest, PadWithInteriorAndValue) {
  GradientCheck g;
  OpBuilder &b = g.builder();
  Value x = g.random({3, 4, 2});
  g.check(b.create<PadOp>(g.loc(), x, b.getDenseI64ArrayAttr({2, 0, 1}),
                          b.getDenseI64ArrayAttr({0, 3, 1}), b.getDenseI64ArrayAttr({1, 0, 2}),
                          b.getF64FloatAttr(-1.5)));
}

TEST(DataMovementGradientTest, Concat) {
  GradientCheck g;
  Value a = g.random({2, 1, 3}), b = g.random({2, 4, 3}), c = g.random({2, 2, 3});
  g.check(g.builder().create<ConcatOp>(g.loc(), ValueRange{a, b, c},
                                       g.builder().getI64IntegerAttr(1)));
}

TEST(DataMovementGradientTest, SplitWithAPieceWithoutGradient) {
  GradientCheck g;
  OpBuilder &b = g.builder();
  Value x = g.random({6, 2});
  auto split = b.create<SplitOp>(
      g.loc(), TypeRange{g.tensor({1, 2}), g.tensor({3, 2}), g.tensor({2, 2})}, x,
      b.getI64IntegerAttr(0));
  g.check(split);
  g.check(split, Tolerance{}, {true, false, true});
}

TEST(DataMovementGradientTest, GatherWithNegativeAndRepeatedIndices) {
  GradientCheck g;
  OpBuilder &b = g.builder();
  Value data = g.random({2, 5, 3});
  Value indices = g.ints({2, 2}, {4, -1, 0, 2});
  g.check(b.create<GatherOp>(g.loc(), data, indices, b.getI64IntegerAttr(1)));
}

TEST(DataMovementGradientTest, GatherOfIntegersHasNoGradient) {
  GradientCheck g;
  OpBuilder &b = g.builder();
  Value data = g.ints({4}, {5, 6, 7, 8});
  Value indices = g.ints({2}, {1, 3});
  auto gather = b.create<GatherOp>(g.loc(), data, indices, b.getI64IntegerAttr(0));
  EXPECT_FALSE(g.gradient(gather, 0, {g.ints({2}, {1, 1})}));
}

} // namespace
