// --loom-raise-matmul-forms (see Passes.td): the matrix products of a
// decomposed export (torch.export's core ATen IR, where linear is t + mm
// or addmm and a batched matmul is bmm over flattened batch dims) in the
// form the rest of raising reads.

#include "frontend/raising/Passes.h"

#include "dialects/nn/NNOps.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace loom {
#define GEN_PASS_DEF_RAISEMATMULFORMS
#include "frontend/raising/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

int64_t product(ArrayRef<int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims)
    p *= d;
  return p;
}

/// nn.matmul %x, (nn.transpose %w [1, 0]) becomes nn.matmul %x, %w with its
/// transpose flag toggled (and likewise for the lhs): a 2-D transpose that
/// only matmuls read. `aten.t` + `aten.mm` is how core ATen spells a
/// linear layer.
struct MatmulOfTransposed2D : OpRewritePattern<nn::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::MatmulOp mm, PatternRewriter &rewriter) const override {
    for (int side = 0; side < 2; ++side) {
      Value operand = side == 0 ? mm.getLhs() : mm.getRhs();
      auto t = operand.getDefiningOp<nn::TransposeOp>();
      if (!t || t.getPermutation().size() != 2 || t.getPermutation()[0] != 1)
        continue;
      rewriter.modifyOpInPlace(mm, [&] {
        mm->setOperand(side, t.getInput());
        if (side == 0)
          mm.setTransposeLhs(!mm.getTransposeLhs());
        else
          mm.setTransposeRhs(!mm.getTransposeRhs());
      });
      if (t->use_empty())
        rewriter.eraseOp(t);
      return success();
    }
    return failure();
  }
};

/// The value a reshape merged leading dims of: `v = reshape(src)` where
/// src's last two dims are v's and v has rank 3.
Value mergedSource(Value v) {
  auto reshape = v.getDefiningOp<nn::ReshapeOp>();
  if (!reshape)
    return {};
  auto src = dyn_cast<RankedTensorType>(reshape.getInput().getType());
  auto dst = cast<RankedTensorType>(v.getType());
  if (!src || !src.hasStaticShape() || src.getRank() < 3 || dst.getRank() != 3 ||
      src.getShape().take_back(2) != dst.getShape().take_back(2))
    return {};
  return reshape.getInput();
}

/// reshape(matmul(reshape(a), reshape(b))) over batch dims merged into one
/// (bmm over [B*H, M, K] and [B*H, K, N], its result viewed as
/// [B, H, M, N]) becomes one matmul over the result's batch dims
/// (`[B, H, M, K] x [B, H, K, N]`), the operands viewed with them: the
/// form an unflattened export has, where attention is matched.
struct UnflattenBatchedMatmul : OpRewritePattern<nn::ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::ReshapeOp out, PatternRewriter &rewriter) const override {
    auto mm = out.getInput().getDefiningOp<nn::MatmulOp>();
    if (!mm || !mm->hasOneUse() || mm.getTransposeLhs() || mm.getTransposeRhs())
      return failure();
    auto mmType = cast<RankedTensorType>(mm.getType());
    auto outType = cast<RankedTensorType>(out.getType());
    if (mmType.getRank() != 3 || outType.getRank() < 4 || !outType.hasStaticShape() ||
        outType.getShape().take_back(2) != mmType.getShape().take_back(2))
      return failure();
    Value a = mergedSource(mm.getLhs()), b = mergedSource(mm.getRhs());
    if (!a || !b)
      return failure();
    ArrayRef<int64_t> batch = outType.getShape().drop_back(2);
    if (product(batch) != mmType.getDimSize(0))
      return failure();
    auto view = [&](Value v) -> Value {
      auto type = cast<RankedTensorType>(v.getType());
      SmallVector<int64_t> shape(batch);
      shape.append(type.getShape().take_back(2).begin(), type.getShape().take_back(2).end());
      if (type.getShape() == ArrayRef<int64_t>(shape))
        return v;
      return rewriter.create<nn::ReshapeOp>(out.getLoc(), type.clone(shape), v);
    };
    Value lhs = view(a), rhs = view(b);
    rewriter.replaceOpWithNewOp<nn::MatmulOp>(out, outType, lhs, rhs, UnitAttr(), UnitAttr());
    if (mm->use_empty())
      rewriter.eraseOp(mm);
    return success();
  }
};

/// nn.matmul %x, (nn.broadcast %w) where %x is [..., M, K] and the
/// broadcast only repeats a 2-D %w over %x's batch dims (core ATen's
/// expand + bmm for a linear layer on a non-contiguous input) becomes
/// reshape(nn.matmul(reshape(%x) to [prod(...) * M, K], %w)): the form
/// a linear layer imports in.
struct MatmulOfBroadcastWeight : OpRewritePattern<nn::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::MatmulOp mm, PatternRewriter &rewriter) const override {
    auto broadcast = mm.getRhs().getDefiningOp<nn::BroadcastOp>();
    if (!broadcast || mm.getTransposeLhs())
      return failure();
    auto w = cast<RankedTensorType>(broadcast.getInput().getType());
    auto x = cast<RankedTensorType>(mm.getLhs().getType());
    auto outType = cast<RankedTensorType>(mm.getType());
    auto expanded = cast<RankedTensorType>(broadcast.getType());
    if (w.getRank() != 2 || x.getRank() < 3 || !x.hasStaticShape() ||
        expanded.getRank() != x.getRank() ||
        expanded.getShape().take_back(2) != w.getShape() ||
        expanded.getShape().drop_back(2) != x.getShape().drop_back(2))
      return failure();
    int64_t rows = product(x.getShape().drop_back(1));
    Location loc = mm.getLoc();
    Value flat = rewriter.create<nn::ReshapeOp>(
        loc, x.clone({rows, x.getShape().back()}), mm.getLhs());
    Value product2D = rewriter.create<nn::MatmulOp>(
        loc, outType.clone({rows, outType.getShape().back()}), flat, broadcast.getInput(),
        UnitAttr(), mm.getTransposeRhsAttr());
    rewriter.replaceOpWithNewOp<nn::ReshapeOp>(mm, outType, product2D);
    if (broadcast->use_empty())
      rewriter.eraseOp(broadcast);
    return success();
  }
};

struct RaiseMatmulFormsPass : public loom::impl::RaiseMatmulFormsBase<RaiseMatmulFormsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<MatmulOfTransposed2D, UnflattenBatchedMatmul, MatmulOfBroadcastWeight>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
