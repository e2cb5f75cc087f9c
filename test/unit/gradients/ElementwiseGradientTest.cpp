// Gradient rules of the elementwise ops, matmul and the reductions, checked
// against central finite differences in f64 (tolerances: GradientCheck.h).

#include "GradientCheck.h"

using namespace mlir;
using namespace loom::nn;
using namespace loom::nn::test;

namespace {

template <typename OpT> void checkUnary(double lo = -2.0, double hi = 2.0) {
  GradientCheck g;
  Value x = g.random({2, 3, 4}, lo, hi);
  g.check(g.builder().create<OpT>(g.loc(), x.getType(), x));
}

TEST(ElementwiseGradientTest, Neg) { checkUnary<NegOp>(); }
TEST(ElementwiseGradientTest, Abs) { checkUnary<AbsOp>(); }
TEST(ElementwiseGradientTest, Exp) { checkUnary<ExpOp>(); }
TEST(ElementwiseGradientTest, Log) { checkUnary<LogOp>(0.2, 3.0); }
TEST(ElementwiseGradientTest, Sqrt) { checkUnary<SqrtOp>(0.2, 3.0); }
TEST(ElementwiseGradientTest, Rsqrt) { checkUnary<RsqrtOp>(0.2, 3.0); }
TEST(ElementwiseGradientTest, Reciprocal) { checkUnary<ReciprocalOp>(); }
TEST(ElementwiseGradientTest, Tanh) { checkUnary<TanhOp>(); }
TEST(ElementwiseGradientTest, Erf) { checkUnary<ErfOp>(); }
TEST(ElementwiseGradientTest, Sigmoid) { checkUnary<SigmoidOp>(-5.0, 5.0); }
TEST(ElementwiseGradientTest, Silu) { checkUnary<SiluOp>(-5.0, 5.0); }
TEST(ElementwiseGradientTest, Relu) { checkUnary<ReluOp>(); }

TEST(ElementwiseGradientTest, GeluBothForms) {
  for (GeluApproximation form : {GeluApproximation::none, GeluApproximation::tanh}) {
    GradientCheck g;
    Value x = g.random({3, 5}, -4.0, 4.0);
    g.check(g.builder().create<GeluOp>(
        g.loc(), x.getType(), x,
        GeluApproximationAttr::get(g.builder().getContext(), form)));
  }
}

TEST(ElementwiseGradientTest, IntegerOperandsHaveNoGradient) {
  GradientCheck g;
  Value ids = g.ints({3}, {1, -2, 3});
  auto neg = g.builder().create<NegOp>(g.loc(), ids.getType(), ids);
  Value cotangent = g.ints({3}, {1, 1, 1});
  EXPECT_FALSE(g.gradient(neg, 0, {cotangent}));
}

TEST(ElementwiseGradientTest, NoResultGradientGivesNoOperandGradient) {
  GradientCheck g;
  Value x = g.random({3});
  auto exp = g.builder().create<ExpOp>(g.loc(), x.getType(), x);
  EXPECT_FALSE(g.gradient(exp, 0, {Value()}));
}

TEST(ElementwiseGradientTest, OperandIndexOutOfRangeFails) {
  GradientCheck g;
  Value x = g.random({3});
  auto exp = g.builder().create<ExpOp>(g.loc(), x.getType(), x);
  auto rule = cast<GradientOpInterface>(exp.getOperation());
  EXPECT_TRUE(failed(rule.buildOperandGradient(g.builder(), 1, {x})));
}

/// lhs [2,3,4] and rhs [3,1]: the rhs gradient sums over the added leading
/// dim and the stretched last dim.
template <typename OpT> void checkBinary(double lo = -2.0, double hi = 2.0) {
  GradientCheck g;
  Value lhs = g.random({2, 3, 4}, lo, hi);
  Value rhs = g.random({3, 1}, lo, hi);
  g.check(g.builder().create<OpT>(g.loc(), lhs, rhs));
  // And the other way round, with a rank-0 operand inside the other's range
  // (so maximum/minimum pick each side somewhere).
  GradientCheck h;
  Value scalar = h.constant(h.tensor({}), {(lo + hi) / 2 + 0.05});
  Value full = h.random({2, 3}, lo, hi);
  h.check(h.builder().create<OpT>(h.loc(), scalar, full));
}

TEST(ElementwiseGradientTest, Add) { checkBinary<AddOp>(); }
TEST(ElementwiseGradientTest, Sub) { checkBinary<SubOp>(); }
TEST(ElementwiseGradientTest, Mul) { checkBinary<MulOp>(); }
TEST(ElementwiseGradientTest, Div) { checkBinary<DivOp>(); }
TEST(ElementwiseGradientTest, Pow) { checkBinary<PowOp>(0.2, 2.0); }
TEST(ElementwiseGradientTest, Maximum) { checkBinary<MaximumOp>(); }
TEST(ElementwiseGradientTest, Minimum) { checkBinary<MinimumOp>(); }

TEST(ElementwiseGradientTest, PowBaseZeroGivesZeroExponentGradient) {
  GradientCheck g;
  Value base = g.constant(g.tensor({2}), {0.0, 2.0});
  Value exponent = g.constant(g.tensor({2}), {3.0, 3.0});
  auto pow = g.builder().create<PowOp>(g.loc(), base, exponent);
  Value ones = g.constant(g.tensor({2}), {1.0, 1.0});
  std::vector<double> dExponent = g.evaluate(g.gradient(pow, 1, {ones}));
  ASSERT_EQ(dExponent.size(), 2u);
  EXPECT_EQ(dExponent[0], 0.0);
  EXPECT_NEAR(dExponent[1], 8.0 * std::log(2.0), 1e-12);
}

TEST(ElementwiseGradientTest, MaximumTieGoesToLhs) {
  GradientCheck g;
  Value a = g.constant(g.tensor({2}), {1.0, 5.0});
  Value b = g.constant(g.tensor({2}), {1.0, 2.0});
  auto max = g.builder().create<MaximumOp>(g.loc(), a, b);
  Value ones = g.constant(g.tensor({2}), {1.0, 1.0});
  EXPECT_EQ(g.evaluate(g.gradient(max, 0, {ones})), (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(g.evaluate(g.gradient(max, 1, {ones})), (std::vector<double>{0.0, 0.0}));
}

TEST(ElementwiseGradientTest, WhereBranchesNotCondition) {
  GradientCheck g;
  Value condition = g.bools({2, 1, 4}, {1, 0, 0, 1, 0, 1, 1, 0});
  Value lhs = g.random({3, 4});
  Value rhs = g.random({2, 3, 4});
  g.check(g.builder().create<WhereOp>(g.loc(), condition, lhs, rhs));
}

TEST(ElementwiseGradientTest, CompareHasNoGradient) {
  GradientCheck g;
  Value a = g.random({3}), b = g.random({3});
  auto cmp = g.builder().create<CompareOp>(
      g.loc(), ComparePredicateAttr::get(g.builder().getContext(), ComparePredicate::lt),
      a, b);
  Value cotangent = g.bools({3}, {1, 1, 1});
  EXPECT_FALSE(g.gradient(cmp, 0, {cotangent}));
  EXPECT_FALSE(g.gradient(cmp, 1, {cotangent}));
}

TEST(ElementwiseGradientTest, CastBackToTheOperandType) {
  // f64 -> f32: the forward rounds to f32, so the differences use a larger
  // step and a tolerance of f32's precision.
  GradientCheck g;
  Value x = g.random({2, 3});
  auto cast = g.builder().create<CastOp>(g.loc(), g.tensor({2, 3}, g.builder().getF32Type()), x);
  g.check(cast, Tolerance{1e-3, 1e-4, 1e-4});
  // Integer to float: the operand has no gradient.
  GradientCheck h;
  Value ids = h.ints({3}, {1, 2, 3});
  auto fromInt = h.builder().create<CastOp>(h.loc(), h.tensor({3}), ids);
  EXPECT_FALSE(h.gradient(fromInt, 0, {h.random({3})}));
}

TEST(MatmulGradientTest, EveryTransposeWithBroadcastBatch) {
  const int64_t m = 3, k = 4, n = 2;
  for (bool transposeLhs : {false, true}) {
    for (bool transposeRhs : {false, true}) {
      SCOPED_TRACE(std::string("transpose_lhs=") + (transposeLhs ? "1" : "0") +
                   " transpose_rhs=" + (transposeRhs ? "1" : "0"));
      GradientCheck g;
      OpBuilder &b = g.builder();
      // Batch [2, 1] against [3]: both operands broadcast.
      Value lhs = g.random(transposeLhs ? ArrayRef<int64_t>{2, 1, k, m}
                                        : ArrayRef<int64_t>{2, 1, m, k});
      Value rhs = g.random(transposeRhs ? ArrayRef<int64_t>{3, n, k}
                                        : ArrayRef<int64_t>{3, k, n});
      g.check(b.create<MatmulOp>(g.loc(), lhs, rhs,
                                 transposeLhs ? b.getUnitAttr() : UnitAttr(),
                                 transposeRhs ? b.getUnitAttr() : UnitAttr()));
    }
  }
}

TEST(MatmulGradientTest, LinearLayer) {
  GradientCheck g;
  Value x = g.random({2, 3, 4});
  Value w = g.random({5, 4});
  g.check(g.builder().create<MatmulOp>(g.loc(), x, w, UnitAttr(),
                                       g.builder().getUnitAttr()));
}

template <typename OpT> void checkReduction(bool keepdim) {
  GradientCheck g;
  OpBuilder &b = g.builder();
  Value x = g.random({2, 3, 4});
  g.check(b.create<OpT>(g.loc(), x, b.getDenseI64ArrayAttr({0, 2}),
                        keepdim ? b.getUnitAttr() : UnitAttr()));
}

TEST(ReductionGradientTest, Sum) {
  checkReduction<ReduceSumOp>(false);
  checkReduction<ReduceSumOp>(true);
}
TEST(ReductionGradientTest, Mean) {
  checkReduction<ReduceMeanOp>(false);
  checkReduction<ReduceMeanOp>(true);
}
TEST(ReductionGradientTest, Max) {
  checkReduction<ReduceMaxOp>(false);
  checkReduction<ReduceMaxOp>(true);
}

TEST(ReductionGradientTest, MaxSplitsTiesEvenly) {
  GradientCheck g;
  OpBuilder &b = g.builder();
  Value x = g.constant(g.tensor({2, 3}), {1, 3, 3, 4, 2, 0});
  auto max = b.create<ReduceMaxOp>(g.loc(), x, b.getDenseI64ArrayAttr({1}), UnitAttr());
  Value dy = g.constant(g.tensor({2}), {2.0, 5.0});
  EXPECT_EQ(g.evaluate(g.gradient(max, 0, {dy})),
            (std::vector<double>{0, 1, 1, 5, 0, 0}));
}

TEST(SoftmaxGradientTest, SoftmaxAndLogSoftmax) {
  for (int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    GradientCheck g;
    OpBuilder &b = g.builder();
    Value x = g.random({2, 3, 4});
    g.check(b.create<SoftmaxOp>(g.loc(), x.getType(), x, b.getI64IntegerAttr(dim)));
    g.check(b.create<LogSoftmaxOp>(g.loc(), x.getType(), x, b.getI64IntegerAttr(dim)));
  }
}

} // namespace
