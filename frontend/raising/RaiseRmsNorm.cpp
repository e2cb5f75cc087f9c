// --loom-raise-rms-norm (see Passes.td).

#include "frontend/raising/Passes.h"
#include "frontend/raising/PatternMatchers.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace loom {
#define GEN_PASS_DEF_RAISERMSNORM
#include "frontend/raising/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;
using namespace loom::raising;

namespace {

/// Whether `sq` is x^2 (pow(x, 2) or x * x).
bool isSquareOf(Value sq, Value x) {
  if (auto pow = sq.getDefiningOp<nn::PowOp>())
    return pow.getLhs() == x && isSplat(pow.getRhs(), 2.0);
  if (auto mul = sq.getDefiningOp<nn::MulOp>())
    return mul.getLhs() == x && mul.getRhs() == x;
  return false;
}

/// Whether `m` is the mean over the last dim (keepdim) of f(x), f checked by `inner`.
template <typename Pred>
bool isLastDimMeanOf(Value m, Pred inner) {
  auto mean = m.getDefiningOp<nn::ReduceMeanOp>();
  if (!mean || !mean.getKeepdim())
    return false;
  int64_t last = mean.getInput().getType().getRank() - 1;
  return mean.getDims().size() == 1 && mean.getDims()[0] == last &&
         inner(mean.getInput());
}

/// If `r` is 1 / sqrt(g + eps) for a `g` accepted by `inner`, returns eps.
template <typename Pred>
std::optional<double> inverseSqrtPlusEps(Value r, Pred inner) {
  Value sum;
  if (auto rsqrt = r.getDefiningOp<nn::RsqrtOp>())
    sum = rsqrt.getInput();
  else if (auto recip = r.getDefiningOp<nn::ReciprocalOp>()) {
    if (auto sqrt = recip.getInput().getDefiningOp<nn::SqrtOp>())
      sum = sqrt.getInput();
  } else if (auto div = r.getDefiningOp<nn::DivOp>()) {
    if (isSplat(div.getLhs(), 1.0))
      if (auto sqrt = div.getRhs().getDefiningOp<nn::SqrtOp>())
        sum = sqrt.getInput();
  }
  if (!sum)
    return std::nullopt;
  Value eps, g;
  if (!matchCommutative<nn::AddOp>(
          sum, [](Value v) { return splatValue(v).has_value(); }, eps, g) ||
      !inner(g))
    return std::nullopt;
  return splatValue(eps);
}

struct RmsNormFromDecomposition : OpRewritePattern<nn::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::MulOp mul, PatternRewriter &rewriter) const override {
    for (auto [x, r] : {std::pair{mul.getLhs(), mul.getRhs()},
                        std::pair{mul.getRhs(), mul.getLhs()}}) {
      if (x.getType() != mul.getType())
        continue;
      std::optional<double> eps = inverseSqrtPlusEps(r, [&](Value g) {
        return isLastDimMeanOf(g, [&](Value sq) { return isSquareOf(sq, x); });
      });
      if (!eps)
        continue;
      rewriter.replaceOpWithNewOp<nn::RmsNormOp>(
          mul, mul.getType(), x, Value(), rewriter.getF64FloatAttr(*eps));
      return success();
    }
    return failure();
  }
};

/// `w * rms_norm(x)` with a [D] weight (or one of only leading unit dims)
/// is rms_norm(x, weight w).
struct RmsNormWeight : OpRewritePattern<nn::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::MulOp mul, PatternRewriter &rewriter) const override {
    for (auto [n, w] : {std::pair{mul.getLhs(), mul.getRhs()},
                        std::pair{mul.getRhs(), mul.getLhs()}}) {
      auto norm = n.getDefiningOp<nn::RmsNormOp>();
      if (!norm || norm.getWeight() || !norm->hasOneUse() || norm.getType() != mul.getType())
        continue;
      auto wType = cast<RankedTensorType>(w.getType());
      int64_t d = norm.getType().getShape().back();
      if (withoutLeadingOnes(wType.getShape()) != SmallVector<int64_t>{d} ||
          wType.getElementType() != norm.getType().getElementType())
        continue;
      Value weight = w;
      if (wType.getRank() != 1)
        weight = rewriter.create<nn::ReshapeOp>(
            mul.getLoc(), RankedTensorType::get({d}, wType.getElementType()), w);
      rewriter.replaceOpWithNewOp<nn::RmsNormOp>(mul, mul.getType(), norm.getInput(),
                                                 weight, norm.getEpsilonAttr());
      return success();
    }
    return failure();
  }
};

struct RaiseRmsNormPass : public loom::impl::RaiseRmsNormBase<RaiseRmsNormPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<RmsNormFromDecomposition, RmsNormWeight>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
