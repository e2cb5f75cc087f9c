// --loom-raise-layer-norm (see Passes.td).

#include "frontend/raising/Passes.h"
#include "frontend/raising/PatternMatchers.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace loom {
#define GEN_PASS_DEF_RAISELAYERNORM
#include "frontend/raising/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;
using namespace loom::raising;

namespace {

/// If `v` is the mean over the last dim (keepdim) of something, returns it.
Value lastDimMeanInput(Value v) {
  auto mean = v.getDefiningOp<nn::ReduceMeanOp>();
  if (!mean || !mean.getKeepdim() || mean.getDims().size() != 1 ||
      mean.getDims()[0] != mean.getInput().getType().getRank() - 1)
    return {};
  return mean.getInput();
}

/// If `d` is x - mean(x), returns x.
Value centeredInput(Value d) {
  auto sub = d.getDefiningOp<nn::SubOp>();
  if (!sub)
    return {};
  Value x = lastDimMeanInput(sub.getRhs());
  return x == sub.getLhs() ? x : Value();
}

/// If `s` is var(d) + eps with var the mean of d^2, returns eps.
std::optional<double> varianceEps(Value s, Value d) {
  Value eps, var;
  if (!matchCommutative<nn::AddOp>(
          s, [](Value v) { return splatValue(v).has_value(); }, eps, var))
    return std::nullopt;
  Value sq = lastDimMeanInput(var);
  if (!sq)
    return std::nullopt;
  bool square = false;
  if (auto pow = sq.getDefiningOp<nn::PowOp>())
    square = pow.getLhs() == d && isSplat(pow.getRhs(), 2.0);
  else if (auto mul = sq.getDefiningOp<nn::MulOp>())
    square = mul.getLhs() == d && mul.getRhs() == d;
  if (!square)
    return std::nullopt;
  return splatValue(eps);
}

struct LayerNormFromDecomposition : RewritePattern {
  LayerNormFromDecomposition(MLIRContext *ctx)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, ctx) {}
  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    Value d, s;
    if (auto div = dyn_cast<nn::DivOp>(op)) {
      auto sqrt = div.getRhs().getDefiningOp<nn::SqrtOp>();
      if (!sqrt)
        return failure();
      d = div.getLhs();
      s = sqrt.getInput();
    } else if (auto mul = dyn_cast<nn::MulOp>(op)) {
      for (auto [a, b] : {std::pair{mul.getLhs(), mul.getRhs()},
                          std::pair{mul.getRhs(), mul.getLhs()}})
        if (auto rsqrt = b.getDefiningOp<nn::RsqrtOp>()) {
          d = a;
          s = rsqrt.getInput();
          break;
        }
      if (!d)
        return failure();
    } else {
      return failure();
    }
    Value x = centeredInput(d);
    if (!x || x.getType() != op->getResult(0).getType())
      return failure();
    std::optional<double> eps = varianceEps(s, d);
    if (!eps)
      return failure();
    rewriter.replaceOpWithNewOp<nn::LayerNormOp>(op, x.getType(), x, Value(), Value(),
                                                 rewriter.getF64FloatAttr(*eps));
    return success();
  }
};

/// A [D] tensor (possibly with leading unit dims) as [D], or null.
Value asFeatureVector(PatternRewriter &rewriter, Location loc, Value v,
                      RankedTensorType normType) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t d = normType.getShape().back();
  if (withoutLeadingOnes(type.getShape()) != SmallVector<int64_t>{d} ||
      type.getElementType() != normType.getElementType())
    return {};
  if (type.getRank() == 1)
    return v;
  return rewriter.create<nn::ReshapeOp>(loc, RankedTensorType::get({d}, type.getElementType()), v);
}

/// `w * layer_norm(x)` and `layer_norm(x) + b` fold into the op.
struct LayerNormAffine : RewritePattern {
  LayerNormAffine(MLIRContext *ctx) : RewritePattern(MatchAnyOpTypeTag(), 1, ctx) {}
  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    bool isMul = isa<nn::MulOp>(op), isAdd = isa<nn::AddOp>(op);
    if (!isMul && !isAdd)
      return failure();
    for (auto [n, p] : {std::pair{op->getOperand(0), op->getOperand(1)},
                        std::pair{op->getOperand(1), op->getOperand(0)}}) {
      auto norm = n.getDefiningOp<nn::LayerNormOp>();
      if (!norm || !norm->hasOneUse() || norm.getType() != op->getResult(0).getType())
        continue;
      if (isMul && (norm.getWeight() || norm.getBias()))
        continue;
      if (isAdd && norm.getBias())
        continue;
      Value feature = asFeatureVector(rewriter, op->getLoc(), p, norm.getType());
      if (!feature)
        continue;
      rewriter.replaceOpWithNewOp<nn::LayerNormOp>(
          op, norm.getType(), norm.getInput(), isMul ? feature : norm.getWeight(),
          isAdd ? feature : Value(), norm.getEpsilonAttr());
      return success();
    }
    return failure();
  }
};

struct RaiseLayerNormPass : public loom::impl::RaiseLayerNormBase<RaiseLayerNormPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<LayerNormFromDecomposition, LayerNormAffine>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
