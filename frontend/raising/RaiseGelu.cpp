// --loom-raise-gelu (see Passes.td).

#include "frontend/raising/Passes.h"
#include "frontend/raising/PatternMatchers.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace loom {
#define GEN_PASS_DEF_RAISEGELU
#include "frontend/raising/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;
using namespace loom::raising;

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubicCoefficient = 0.044715;

/// The factors of a product: nested nn.mul flattened (a division by a
/// constant c counts as the factor 1/c).
void collectFactors(Value v, SmallVectorImpl<Value> &factors,
                    SmallVectorImpl<double> &constants, int depth = 0) {
  if (depth < 4) {
    if (auto mul = v.getDefiningOp<nn::MulOp>()) {
      collectFactors(mul.getLhs(), factors, constants, depth + 1);
      collectFactors(mul.getRhs(), factors, constants, depth + 1);
      return;
    }
    if (auto div = v.getDefiningOp<nn::DivOp>())
      if (std::optional<double> c = splatValue(div.getRhs()); c && *c != 0) {
        collectFactors(div.getLhs(), factors, constants, depth + 1);
        constants.push_back(1.0 / *c);
        return;
      }
  }
  if (std::optional<double> c = splatValue(v))
    constants.push_back(*c);
  else
    factors.push_back(v);
}

double product(ArrayRef<double> values) {
  double p = 1;
  for (double v : values)
    p *= v;
  return p;
}

/// Relative closeness, tight enough to tell 0.044715 from 0.044716 (an
/// absolute tolerance would not) and loose enough for constants rounded to
/// f32 and multiplied together.
bool near(double a, double b) { return std::fabs(a - b) <= 1e-6 * std::fabs(b); }

/// Whether `v` is x^3: pow(x, 3), or x * x * x.
bool isCubeOf(Value v, Value x) {
  if (auto pow = v.getDefiningOp<nn::PowOp>())
    return pow.getLhs() == x && isSplat(pow.getRhs(), 3.0);
  SmallVector<Value> factors;
  SmallVector<double> constants;
  collectFactors(v, factors, constants);
  return constants.empty() && factors.size() == 3 &&
         llvm::all_of(factors, [&](Value f) { return f == x; });
}

/// Whether `inner` is sqrt(2/pi) * (x + 0.044715 * x^3).
bool isTanhGeluArgument(Value inner, Value x) {
  SmallVector<Value> factors;
  SmallVector<double> constants;
  collectFactors(inner, factors, constants);
  if (factors.size() != 1 || !near(product(constants), kSqrt2OverPi))
    return false;
  Value cubic, other;
  if (!matchCommutative<nn::AddOp>(factors[0], [&](Value v) { return v == x; }, other, cubic))
    return false;
  SmallVector<Value> cubicFactors;
  SmallVector<double> cubicConstants;
  collectFactors(cubic, cubicFactors, cubicConstants);
  if (!near(product(cubicConstants), kCubicCoefficient))
    return false;
  if (cubicFactors.size() == 1)
    return isCubeOf(cubicFactors[0], x);
  return cubicFactors.size() == 3 &&
         llvm::all_of(cubicFactors, [&](Value f) { return f == x; });
}

/// Whether `inner` is x / sqrt(2).
bool isErfGeluArgument(Value inner, Value x) {
  SmallVector<Value> factors;
  SmallVector<double> constants;
  collectFactors(inner, factors, constants);
  return factors.size() == 1 && factors[0] == x && near(product(constants), M_SQRT1_2);
}

struct GeluFromDecomposition : OpRewritePattern<nn::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::MulOp mul, PatternRewriter &rewriter) const override {
    SmallVector<Value> factors;
    SmallVector<double> constants;
    collectFactors(mul.getResult(), factors, constants);
    if (factors.size() != 2 || !near(product(constants), 0.5))
      return failure();
    for (auto [x, onePlus] : {std::pair{factors[0], factors[1]},
                              std::pair{factors[1], factors[0]}}) {
      if (x.getType() != mul.getType())
        continue;
      Value one, fn;
      if (!matchCommutative<nn::AddOp>(onePlus, [](Value v) { return isSplat(v, 1.0); }, one, fn))
        continue;
      if (auto t = fn.getDefiningOp<nn::TanhOp>(); t && isTanhGeluArgument(t.getInput(), x)) {
        rewriter.replaceOpWithNewOp<nn::GeluOp>(
            mul, x.getType(), x, nn::GeluApproximation::tanh);
        return success();
      }
      if (auto e = fn.getDefiningOp<nn::ErfOp>(); e && isErfGeluArgument(e.getInput(), x)) {
        rewriter.replaceOpWithNewOp<nn::GeluOp>(
            mul, x.getType(), x, nn::GeluApproximation::none);
        return success();
      }
    }
    return failure();
  }
};

struct RaiseGeluPass : public loom::impl::RaiseGeluBase<RaiseGeluPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<GeluFromDecomposition>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
