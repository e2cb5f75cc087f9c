// How nn ops rewrite themselves for one rank's shard when the SPMD
// partitioner (passes/sharding/SpmdPartition.cpp) splits them:
// attributes that speak of global sizes (SpmdLocalizeOpInterface) and the
// vocabulary-parallel cross-entropy (ClassParallelLossOpInterface).

#include "dialects/nn/NNOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace loom::nn;

namespace {

/// A vocabulary split along `factor`: the op holds rows [vocab_start,
/// vocab_start + localRows) of it on rank 0 and the next block on each
/// further rank; `vocab_size` keeps the whole vocabulary, so that every
/// block can still reject an id outside it.
void localizeVocabularyBlock(Operation *op, const ShardContext &shard, int factor, int64_t localRows,
                             std::optional<int64_t> start) {
  if (!shard.isSplit(factor))
    return;
  Builder b(op->getContext());
  op->setAttr("vocab_start", b.getI64IntegerAttr(start.value_or(0)));
  if (!op->hasAttr("vocab_size"))
    op->setAttr("vocab_size", b.getI64IntegerAttr(shard.rule.factors[factor].size));
  shard.addRankOffset(op, "vocab_start", -1, factor, localRows);
}

} // namespace

//===----------------------------------------------------------------------===//
// SpmdLocalizeOpInterface
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::localizeAttributes(Operation *, const ShardContext &shard) {
  localizeVocabularyBlock(*this, shard, shard.rule.operandDims[0][0].front(),
                          getTable().getType().getDimSize(0), getVocabStart());
  return success();
}

LogicalResult EmbeddingGradOp::localizeAttributes(Operation *, const ShardContext &shard) {
  int64_t rows = getType().getDimSize(0);
  if (rows != getNumEmbeddings()) {
    setNumEmbeddings(rows);
    localizeVocabularyBlock(*this, shard, shard.rule.resultDims[0][0].front(), rows,
                            getVocabStart());
  }
  return success();
}

/// A block of the groups of a grouped GEMM (expert parallelism): rank 0
/// holds groups [0, local), each further rank the next block.
static void localizeGroupBlock(Operation *op, const ShardContext &shard,
                               ArrayRef<int> factors, int64_t localGroups,
                               std::optional<uint64_t> start) {
  if (factors.empty() || !shard.isSplit(factors.front()))
    return;
  int factor = factors.front();
  op->setAttr("group_start", Builder(op->getContext()).getI64IntegerAttr(start.value_or(0)));
  shard.addRankOffset(op, "group_start", -1, factor, localGroups);
}

LogicalResult GroupedMatmulOp::localizeAttributes(Operation *, const ShardContext &shard) {
  localizeGroupBlock(*this, shard, shard.rule.operandDims[1][0],
                     getWeight().getType().getDimSize(0), getGroupStart());
  return success();
}

LogicalResult GroupedMatmulWeightGradOp::localizeAttributes(Operation *,
                                                            const ShardContext &shard) {
  localizeGroupBlock(*this, shard, shard.rule.resultDims[0][0],
                     getType().getDimSize(0), getGroupStart());
  return success();
}

LogicalResult SliceOp::localizeAttributes(Operation *global, const ShardContext &shard) {
  // Only whole dims are split: their limit is the local size.
  SmallVector<int64_t> limits(getLimits());
  auto in = getInput().getType();
  ArrayRef<int64_t> globalLimits = cast<SliceOp>(global).getLimits();
  RankedTensorType globalIn = shard.globalType(global->getOperand(0));
  for (unsigned d = 0; d < limits.size(); ++d)
    if (globalLimits[d] == globalIn.getDimSize(d))
      limits[d] = in.getDimSize(d);
  setLimitsAttr(Builder(getContext()).getDenseI64ArrayAttr(limits));
  return success();
}

LogicalResult ConstantOp::localizeAttributes(Operation *global, const ShardContext &) {
  // A split constant is a splat (the rule blocks every other): the same
  // value at the local shape.
  if (getType() != global->getResult(0).getType()) {
    auto dense = cast<DenseElementsAttr>(getValue());
    setValueAttr(DenseElementsAttr::get(getType(), dense.getSplatValue<Attribute>()));
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ClassParallelLossOpInterface: each rank's statistics of its block of
// classes (max, sum of exponentials, the label's logit), gathered, then the
// loss or the block's gradient from them.
//===----------------------------------------------------------------------===//

namespace {

Operation *blockStatistics(OpBuilder &b, Operation *op, Value logits, Value labels,
                           IntegerAttr ignoreIndex, const ShardContext &shard, int classFactor) {
  auto stats = b.create<CrossEntropyStatsOp>(op->getLoc(), logits, labels, b.getI64IntegerAttr(0),
                                             ignoreIndex);
  shard.addRankOffset(stats, "vocab_start", -1, classFactor,
                      cast<RankedTensorType>(logits.getType()).getDimSize(1));
  return stats;
}

} // namespace

Operation *CrossEntropyOp::buildBlockStatistics(OpBuilder &b, Value logits, Value labels,
                                                const ShardContext &shard) {
  return blockStatistics(b, *this, logits, labels, getIgnoreIndexAttr(), shard,
                         getClassFactor(shard.rule));
}

Operation *CrossEntropyGradOp::buildBlockStatistics(OpBuilder &b, Value logits, Value labels,
                                                    const ShardContext &shard) {
  return blockStatistics(b, *this, logits, labels, getIgnoreIndexAttr(), shard,
                         getClassFactor(shard.rule));
}

Operation *CrossEntropyOp::buildFromBlockStatistics(OpBuilder &b, IRMapping &local, Value stats,
                                                    const ShardContext &shard) {
  int64_t classes = shard.globalType(getLogits()).getDimSize(1);
  return b.create<CrossEntropyCombineOp>(getLoc(), stats, local.lookup(getLabels()),
                                         b.getI64IntegerAttr(classes), getIgnoreIndexAttr(),
                                         getReductionAttr());
}

Operation *CrossEntropyGradOp::buildFromBlockStatistics(OpBuilder &b, IRMapping &local, Value stats,
                                                        const ShardContext &shard) {
  Value logits = local.lookup(getLogits());
  auto grad = b.create<CrossEntropyBlockGradOp>(
      getLoc(), logits, local.lookup(getLabels()), local.lookup(getGrad()), stats,
      b.getI64IntegerAttr(0), getIgnoreIndexAttr(), getReductionAttr());
  shard.addRankOffset(grad, "vocab_start", -1, getClassFactor(shard.rule),
                      cast<RankedTensorType>(logits.getType()).getDimSize(1));
  return grad;
}
