// nn.gather_grad along a permutation is a gather. The gradient of a gather
// by indices is a scatter-add: each slice of the gradient is added to the
// slice its index names, which takes a sort of the indices and a sum per
// target (kernels/cuda/DataMovement.cu). Where the indices are a
// permutation p of [0, n) (the positions an nn.sort gives), every target
// receives exactly one slice, the one at p's inverse, so the scatter-add is
// a gather by p's inverse; where they are p / k (each of k consecutive
// targets' slices to one: a mixture-of-experts layer's routed rows back to
// their tokens), it is that gather, seen as [targets, k, ...], summed over
// k. p's inverse is the positions that sort p: an nn.sort of p, or, where p
// is itself the positions that sort a permutation q, q.
//
// A mixture-of-experts layer's backward has three: the routed rows'
// gradient unsorted (p's inverse), the routing weights' gradient sorted
// (p), and the tokens' gradient, each token's k rows added up (p / k).

#include "dialects/nn/NNOps.h"

#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace loom::nn;

namespace {

/// Whether `value` is the positions result of an nn.sort of a 1-D tensor:
/// a permutation of [0, n), n its static length.
bool isPermutation(Value value) {
  auto result = dyn_cast<OpResult>(value);
  auto sort = result ? dyn_cast<SortOp>(result.getOwner()) : nullptr;
  if (!sort || result.getResultNumber() != 1)
    return false;
  auto type = cast<RankedTensorType>(sort.getInput().getType());
  return type.getRank() == 1 && !type.isDynamicDim(0);
}

/// The inverse of permutation `p` (isPermutation): the q that p sorts when
/// q is a permutation, an nn.sort of p before `user` in its block, or a new
/// one after p's definition.
Value inverse(Value p, Operation *user, PatternRewriter &rewriter) {
  auto sort = cast<SortOp>(cast<OpResult>(p).getOwner());
  // p sorts q ascending: p[i] is where q holds i, so q = p's inverse.
  if (!sort.getDescending() && isPermutation(sort.getInput()) &&
      sort.getInput().getType() == p.getType())
    return sort.getInput();
  for (Operation *reader : p.getUsers()) {
    auto other = dyn_cast<SortOp>(reader);
    if (other && !other.getDescending() && other.getInput() == p &&
        other->getBlock() == user->getBlock() && other->isBeforeInBlock(user))
      return other.getIndices();
  }
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointAfter(sort);
  auto inverted = rewriter.create<SortOp>(sort.getLoc(), p, /*descending=*/false);
  // The pass keeps the microbatch tag (and any other discardable attribute).
  inverted->setDiscardableAttrs(sort->getDiscardableAttrDictionary());
  return inverted.getIndices();
}

/// k if `value` is a positive integer every element of which is k.
std::optional<int64_t> settledPositive(Value value) {
  std::optional<IntegerRange> range = integerRange(value);
  if (!range || range->lo != range->hi || range->lo <= 0)
    return std::nullopt;
  return range->lo;
}

struct GatherGradOfPermutation : OpRewritePattern<GatherGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(GatherGradOp op, PatternRewriter &rewriter) const override {
    auto gradType = cast<RankedTensorType>(op.getGrad().getType());
    const int64_t axis = op.getAxis(), targets = op.getAxisSize();
    if (axis < 0 || axis >= gradType.getRank() || gradType.isDynamicDim(axis))
      return failure();
    const int64_t n = gradType.getDimSize(axis);
    Value indices = op.getIndices();
    int64_t k = 1;
    if (auto div = indices.getDefiningOp<DivOp>()) {
      std::optional<int64_t> divisor = settledPositive(div.getRhs());
      if (!divisor || div.getType() != div.getLhs().getType())
        return failure();
      indices = div.getLhs();
      k = *divisor;
    }
    if (!isPermutation(indices) || cast<RankedTensorType>(indices.getType()).getDimSize(0) != n ||
        targets * k != n)
      return failure();
    Location loc = op.getLoc();
    // The new ops keep the gradient's tags (loom.backward, loom.microbatch).
    DictionaryAttr tags = op->getDiscardableAttrDictionary();
    auto gather = rewriter.create<GatherOp>(loc, op.getGrad(), inverse(indices, op, rewriter),
                                            op.getAxisAttr());
    gather->setDiscardableAttrs(tags);
    if (k == 1) {
      rewriter.replaceOp(op, gather.getResult());
      return success();
    }
    SmallVector<int64_t> split(gradType.getShape());
    split[axis] = targets;
    split.insert(split.begin() + axis + 1, k);
    auto rows = rewriter.create<ReshapeOp>(
        loc, RankedTensorType::get(split, gradType.getElementType()), gather.getResult());
    rows->setDiscardableAttrs(tags);
    auto sum = rewriter.create<ReduceSumOp>(loc, op.getType(), rows.getResult(),
                                            rewriter.getDenseI64ArrayAttr({axis + 1}), UnitAttr());
    sum->setDiscardableAttrs(tags);
    rewriter.replaceOp(op, sum.getResult());
    return success();
  }
};

} // namespace

void GatherGradOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                               MLIRContext *context) {
  patterns.add<GatherGradOfPermutation>(context);
}
