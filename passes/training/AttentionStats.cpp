// --loom-attention-stats: a differentiated attention saves its softmax
// statistics (row logsumexp) for its backward, which then does not run the
// forward again (see Passes.td).

#include "passes/training/Passes.h"

#include "dialects/dist/DistDialect.h"
#include "dialects/nn/NNOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"

#include <cstring>
#include <tuple>

namespace loom {
#define GEN_PASS_DEF_ATTENTIONSTATS
#include "passes/training/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

/// The effective scale's bits: the forward and its gradient must apply the
/// very same scale, however each spells it (default or explicit).
uint64_t scaleBits(double scale) {
  uint64_t bits;
  std::memcpy(&bits, &scale, sizeof bits);
  return bits;
}

/// Whether `grad` differentiates `forward`: the same q, k, v, mask, window and scale.
bool differentiates(nn::AttentionGradOp grad, nn::AttentionOp forward) {
  return grad.getQuery() == forward.getQuery() && grad.getKey() == forward.getKey() &&
         grad.getValue() == forward.getValue() && grad.getCausal() == forward.getCausal() &&
         grad.getWindowAttr() == forward.getWindowAttr() &&
         scaleBits(grad.getEffectiveScale()) == scaleBits(forward.getEffectiveScale()) &&
         grad.getGrad().getType() == forward.getType();
}

/// For each gradient of `block`, the forward it differentiates: the nearest
/// matching nn.attention before it in the block.
void collectPairs(Block &block,
                  llvm::MapVector<Operation *, SmallVector<nn::AttentionGradOp>> &pairs) {
  using Operands = std::tuple<Value, Value, Value>;
  llvm::DenseMap<Operands, SmallVector<nn::AttentionOp, 1>> forwards;
  for (Operation &op : block) {
    if (auto forward = dyn_cast<nn::AttentionOp>(op)) {
      forwards[{forward.getQuery(), forward.getKey(), forward.getValue()}].push_back(forward);
      continue;
    }
    auto grad = dyn_cast<nn::AttentionGradOp>(op);
    if (!grad)
      continue;
    auto it = forwards.find({grad.getQuery(), grad.getKey(), grad.getValue()});
    if (it == forwards.end())
      continue;
    for (nn::AttentionOp forward : llvm::reverse(it->second))
      if (differentiates(grad, forward)) {
        pairs[forward].push_back(grad);
        break;
      }
  }
}

/// The forward's result shardings (dist.sharding, one per result, set by
/// SPMD partitioning) for its two results: the output's, and for lse the
/// output's batch, head and sequence dims.
void setStatsShardings(nn::AttentionOp forward, nn::AttentionWithStatsOp stats) {
  ArrayAttr shardings = dist::getResultShardings(forward);
  if (!shardings || shardings.size() != 1)
    return;
  Attribute out = shardings[0], lse = out; // a unit entry: undecided, for both
  if (auto sharding = dyn_cast<dist::ShardingAttr>(out)) {
    // The output's [B, H, S] dims, wherever its layout (seq_major bit 3) has them.
    SmallVector<ArrayAttr> dims(sharding.getDims().drop_back());
    if (forward.getSeqMajor() & 0b1000 && dims.size() == 3)
      std::swap(dims[1], dims[2]);
    lse = dist::ShardingAttr::get(forward.getContext(), dims, sharding.getPartial());
  }
  dist::setResultShardings(stats, {out, lse});
}

struct AttentionStatsPass : public loom::impl::AttentionStatsBase<AttentionStatsPass> {
  void runOnOperation() override {
    llvm::MapVector<Operation *, SmallVector<nn::AttentionGradOp>> pairs;
    getOperation()->walk([&](Block *block) { collectPairs(*block, pairs); });

    OpBuilder b(&getContext());
    for (auto &[op, grads] : pairs) {
      auto forward = cast<nn::AttentionOp>(op);
      b.setInsertionPoint(forward);
      auto stats = b.create<nn::AttentionWithStatsOp>(
          forward.getLoc(), forward.getQuery(), forward.getKey(), forward.getValue(),
          forward.getCausalAttr(), forward.getScaleAttr(), forward.getSeqMajorAttr(),
          forward.getWindowAttr());
      // Stage, microbatch and stream tags stay with the op; the result
      // shardings gain lse's.
      stats->setDiscardableAttrs(forward->getDiscardableAttrDictionary());
      stats->removeAttr(dist::kShardingAttrName);
      setStatsShardings(forward, stats);
      forward.getResult().replaceAllUsesWith(stats.getResult());
      const int64_t forwardMask = forward.getSeqMajor();
      forward.erase();
      for (nn::AttentionGradOp grad : grads) {
        b.setInsertionPoint(grad);
        // seq_major: q, k, v keep their bits; out takes the forward's
        // result's; grad and dq, dk, dv move past out and lse.
        const int64_t g = grad.getSeqMajor();
        const int64_t mask = (g & 0b111) | (forwardMask & 0b1000) | (g & 0b1111000) << 2;
        auto backward = b.create<nn::AttentionGradWithStatsOp>(
            grad.getLoc(), grad.getQuery(), grad.getKey(), grad.getValue(), stats.getResult(),
            stats.getLse(), grad.getGrad(), grad.getCausalAttr(), grad.getScaleAttr(),
            b.getI64IntegerAttr(mask), grad.getWindowAttr());
        backward->setDiscardableAttrs(grad->getDiscardableAttrDictionary());
        grad->replaceAllUsesWith(backward->getResults());
        grad.erase();
      }
    }
  }
};

} // namespace
