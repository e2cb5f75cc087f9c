// --loom-raise-grouped-gemm (see Passes.td).

#include "frontend/raising/Passes.h"

#include "dialects/nn/NNOps.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace loom {
#define GEN_PASS_DEF_RAISEGROUPEDGEMM
#include "frontend/raising/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

/// A batched GEMM of per-row weights picked from a stack by index,
///   nn.matmul (nn.gather %w [E, N, K], %ids [R] axis 0), %x [R, K, 1]
/// (or %x [R, 1, K] times the picked weights transposed, or %x [R, 1, K]
/// times weights picked from a stack [E, K, N]), is one GEMM per
/// index: the rows sorted by index (stably), one nn.grouped_matmul over
/// them with the stack as its weights, and the rows put back in order.
struct GroupedFromGatheredWeights : OpRewritePattern<nn::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(nn::MatmulOp mm, PatternRewriter &rewriter) const override {
    if (mm.getTransposeLhs())
      return failure();
    // Form A: picked [R, N, K] x rows [R, K, 1]. Form B: rows [R, 1, K] x
    // picked [R, N, K] transposed. Form C: rows [R, 1, K] x picked [R, K, N]
    // (a stack stored [E, K, N], as gpt-oss keeps its experts).
    bool formA = !mm.getTransposeRhs() && mm.getLhs().getDefiningOp<nn::GatherOp>();
    bool formC = !mm.getTransposeRhs() && !formA;
    Value picked = formA ? mm.getLhs() : mm.getRhs();
    Value rows = formA ? mm.getRhs() : mm.getLhs();
    auto gather = picked.getDefiningOp<nn::GatherOp>();
    if (!gather || gather.getAxis() != 0)
      return failure();
    auto stackType = dyn_cast<RankedTensorType>(gather.getData().getType());
    auto idsType = dyn_cast<RankedTensorType>(gather.getIndices().getType());
    auto rowsType = dyn_cast<RankedTensorType>(rows.getType());
    auto outType = dyn_cast<RankedTensorType>(mm.getType());
    if (!stackType || !idsType || !rowsType || !outType || stackType.getRank() != 3 ||
        idsType.getRank() != 1 || rowsType.getRank() != 3 || !stackType.hasStaticShape() ||
        !rowsType.hasStaticShape() || !idsType.hasStaticShape())
      return failure();
    const int64_t e = stackType.getDimSize(0), n = stackType.getDimSize(formC ? 2 : 1),
                  k = stackType.getDimSize(formC ? 1 : 2), r = idsType.getDimSize(0);
    if (r < 1 || e < 1)
      return failure();
    if (formA ? rowsType.getShape() != ArrayRef<int64_t>{r, k, 1}
              : rowsType.getShape() != ArrayRef<int64_t>{r, 1, k})
      return failure();
    Type elem = outType.getElementType();
    if (rowsType.getElementType() != elem || stackType.getElementType() != elem)
      return failure();

    Location loc = mm.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    Type i64 = rewriter.getI64Type();
    Value ids = gather.getIndices();
    auto idsI64 = RankedTensorType::get({r}, i64);
    if (idsType.getElementType() != i64)
      ids = rewriter.create<nn::CastOp>(loc, idsI64, ids);
    // The rows in order of their index (stable: a group keeps its order).
    auto sort = rewriter.create<nn::SortOp>(loc, TypeRange{idsI64, idsI64}, ids, UnitAttr());
    Value flat = rewriter.create<nn::ReshapeOp>(loc, RankedTensorType::get({r, k}, elem), rows);
    Value sorted = rewriter.create<nn::GatherOp>(loc, flat.getType(), flat, sort.getIndices(),
                                                 rewriter.getI64IntegerAttr(0));
    // offsets[g] = rows whose index is at most g (the groups' running ends).
    Value column = rewriter.create<nn::ReshapeOp>(loc, RankedTensorType::get({r, 1}, i64), ids);
    Value groups = rewriter.create<nn::IotaOp>(loc, RankedTensorType::get({1, e}, i64),
                                               rewriter.getI64IntegerAttr(1),
                                               rewriter.getF64FloatAttr(0),
                                               rewriter.getF64FloatAttr(1));
    Value atMost = rewriter.create<nn::CompareOp>(
        loc, nn::ComparePredicateAttr::get(ctx, nn::ComparePredicate::le), column, groups);
    Value counted = rewriter.create<nn::CastOp>(loc, RankedTensorType::get({r, e}, i64), atMost);
    Value ends = rewriter.create<nn::ReduceSumOp>(loc, counted, rewriter.getDenseI64ArrayAttr({0}),
                                                  UnitAttr());
    Value offsets =
        rewriter.create<nn::CastOp>(loc, RankedTensorType::get({e}, rewriter.getI32Type()), ends);
    Value weights = formC ? gather.getData()
                          : rewriter.create<nn::TransposeOp>(
                                loc, RankedTensorType::get({e, k, n}, elem), gather.getData(),
                                rewriter.getDenseI64ArrayAttr({0, 2, 1}));
    auto rowsOut = RankedTensorType::get({r, n}, elem);
    Value grouped =
        rewriter.create<nn::GroupedMatmulOp>(loc, rowsOut, sorted, weights, offsets, IntegerAttr());
    // Back in the rows' order: the inverse permutation is the order of the
    // permutation's own sort.
    auto inverse =
        rewriter.create<nn::SortOp>(loc, TypeRange{idsI64, idsI64}, sort.getIndices(), UnitAttr());
    Value unsorted = rewriter.create<nn::GatherOp>(loc, rowsOut, grouped, inverse.getIndices(),
                                                   rewriter.getI64IntegerAttr(0));
    rewriter.replaceOpWithNewOp<nn::ReshapeOp>(mm, outType, unsorted);
    return success();
  }
};

struct RaiseGroupedGemmPass : public loom::impl::RaiseGroupedGemmBase<RaiseGroupedGemmPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<GroupedFromGatheredWeights>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
