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

/// reduce_sum(mul(a, b)) over dims where both operands are full, with dims
/// only `a` spans (M) and dims only `b` spans (N) besides, is a batched
/// matrix product: eager code's `(x[..., :, None, :] * y[..., None, :,
/// :]).sum(-1)` (Mamba-2's chunked scan) becomes one nn.matmul instead of
/// a broadcast product of M x N x K elements a batch. Only when both M and
/// N have more than one element: a product that one side only broadcasts
/// (a mixture of experts' weighted sum over its k choices) stays as it is.
struct ContractionOfProducts : OpRewritePattern<nn::ReduceSumOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::ReduceSumOp sum, PatternRewriter &rewriter) const override {
    auto mul = sum.getInput().getDefiningOp<nn::MulOp>();
    if (!mul || !mul->hasOneUse())
      return failure();
    auto r = cast<RankedTensorType>(mul.getType());
    auto aType = dyn_cast<RankedTensorType>(mul.getLhs().getType());
    auto bType = dyn_cast<RankedTensorType>(mul.getRhs().getType());
    if (!aType || !bType || !r.hasStaticShape() || !aType.hasStaticShape() ||
        !bType.hasStaticShape() || !isa<FloatType>(r.getElementType()) ||
        aType.getElementType() != r.getElementType() ||
        bType.getElementType() != r.getElementType() || aType.getRank() > r.getRank() ||
        bType.getRank() > r.getRank())
      return failure();
    const int64_t rank = r.getRank();
    auto padded = [&](RankedTensorType t) {
      SmallVector<int64_t> shape(rank - t.getRank(), 1);
      shape.append(t.getShape().begin(), t.getShape().end());
      return shape;
    };
    SmallVector<int64_t> a = padded(aType), b = padded(bType);
    SmallVector<bool> reduced(rank, false);
    for (int64_t d : sum.getDims())
      reduced[d < 0 ? d + rank : d] = true;
    SmallVector<int64_t> batch, m, n, k;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t size = r.getDimSize(d);
      if (reduced[d]) {
        if (a[d] != size || b[d] != size)
          return failure();
        k.push_back(d);
      } else if (a[d] == size && b[d] == size) {
        batch.push_back(d);
      } else if (a[d] == size && b[d] == 1) {
        m.push_back(d);
      } else if (b[d] == size && a[d] == 1) {
        n.push_back(d);
      } else {
        return failure();
      }
    }
    auto extent = [&](ArrayRef<int64_t> dims) {
      int64_t p = 1;
      for (int64_t d : dims)
        p *= r.getDimSize(d);
      return p;
    };
    const int64_t bt = extent(batch), mt = extent(m), nt = extent(n), kt = extent(k);
    if (mt < 2 || nt < 2 || kt < 2)
      return failure();
    Location loc = sum.getLoc();
    // An operand viewed at the product's rank, its dims in `order`, then
    // flattened to `flat`.
    auto arrange = [&](Value v, ArrayRef<int64_t> shape, ArrayRef<int64_t> order,
                       ArrayRef<int64_t> flat) -> Value {
      auto type = cast<RankedTensorType>(v.getType());
      if (type.getShape() != shape)
        v = rewriter.create<nn::ReshapeOp>(loc, type.clone(shape), v);
      bool identity = llvm::equal(order, llvm::seq<int64_t>(0, rank));
      if (!identity) {
        SmallVector<int64_t> moved;
        for (int64_t d : order)
          moved.push_back(shape[d]);
        v = rewriter.create<nn::TransposeOp>(loc, type.clone(moved), v,
                                             rewriter.getDenseI64ArrayAttr(order));
      }
      return rewriter.create<nn::ReshapeOp>(loc, type.clone(flat), v);
    };
    SmallVector<int64_t> aOrder(batch), bOrder(batch);
    llvm::append_range(aOrder, m);
    llvm::append_range(aOrder, k);
    llvm::append_range(aOrder, n);
    llvm::append_range(bOrder, k);
    llvm::append_range(bOrder, n);
    llvm::append_range(bOrder, m);
    bool batched = bt > 1;
    auto dims = [&](std::initializer_list<int64_t> inner) {
      SmallVector<int64_t> shape;
      if (batched)
        shape.push_back(bt);
      shape.append(inner.begin(), inner.end());
      return shape;
    };
    Value lhs = arrange(mul.getLhs(), a, aOrder, dims({mt, kt}));
    Value rhs = arrange(mul.getRhs(), b, bOrder, dims({kt, nt}));
    Value product = rewriter.create<nn::MatmulOp>(loc, r.clone(dims({mt, nt})), lhs, rhs,
                                                  UnitAttr(), UnitAttr());
    // Back to the kept dims' order: [batch..., M..., N...] -> as in the sum.
    SmallVector<int64_t> grouped(batch), groupedShape;
    llvm::append_range(grouped, m);
    llvm::append_range(grouped, n);
    for (int64_t d : grouped)
      groupedShape.push_back(r.getDimSize(d));
    product = rewriter.create<nn::ReshapeOp>(loc, r.clone(groupedShape), product);
    SmallVector<int64_t> kept, order;
    for (int64_t d = 0; d < rank; ++d)
      if (!reduced[d])
        kept.push_back(d);
    for (int64_t d : kept)
      order.push_back(llvm::find(grouped, d) - grouped.begin());
    if (!llvm::equal(order, llvm::seq<int64_t>(0, int64_t(order.size())))) {
      SmallVector<int64_t> shape;
      for (int64_t d : kept)
        shape.push_back(r.getDimSize(d));
      product = rewriter.create<nn::TransposeOp>(loc, r.clone(shape), product,
                                                 rewriter.getDenseI64ArrayAttr(order));
    }
    rewriter.replaceOpWithNewOp<nn::ReshapeOp>(sum, sum.getType(), product);
    rewriter.eraseOp(mul);
    return success();
  }
};

struct RaiseMatmulFormsPass : public loom::impl::RaiseMatmulFormsBase<RaiseMatmulFormsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<MatmulOfTransposed2D, UnflattenBatchedMatmul, MatmulOfBroadcastWeight,
                 ContractionOfProducts>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
