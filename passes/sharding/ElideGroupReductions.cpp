// --loom-elide-group-reductions: expert parallelism's partial results that
// only the same experts read are not summed (see Passes.td).

#include "passes/sharding/FactorSharding.h"
#include "passes/sharding/Passes.h"

#include "dialects/nn/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace loom {
#define GEN_PASS_DEF_ELIDEGROUPREDUCTIONS
#include "passes/sharding/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

/// Whether `a` and `b` work on the same block of the same groups on every
/// rank: one offsets value, one first group and count, and the same rank
/// offsets moving the block.
bool sameBlock(nn::GroupedRowsOpInterface a, nn::GroupedRowsOpInterface b) {
  return a.getGroupOffsets() == b.getGroupOffsets() && a.getFirstGroup() == b.getFirstGroup() &&
         a.getGroupCount() == b.getGroupCount() &&
         a->getAttr(dist::kRankOffsetsAttrName) == b->getAttr(dist::kRankOffsetsAttrName);
}

/// Whether `user` computes each row of its results from the same row of
/// operand `index` (dim 0): its sharding rule gives that dim one parallel
/// factor, which is dim 0 of every result.
bool rowWise(Operation *user, unsigned index) {
  auto ruleOp = dyn_cast<nn::ShardingRuleOpInterface>(user);
  if (!ruleOp || user->getNumResults() == 0)
    return false;
  nn::ShardingRule rule = ruleOp.getShardingRule();
  if (index >= rule.operandDims.size() || rule.operandDims[index].empty() ||
      rule.operandDims[index][0].size() != 1)
    return false;
  int rows = rule.operandDims[index][0].front();
  if (rule.factors[rows].kind != nn::FactorKind::Parallel)
    return false;
  for (unsigned r = 0; r < user->getNumResults(); ++r)
    if (r >= rule.resultDims.size() || rule.resultDims[r].empty() ||
        rule.resultDims[r][0] != SmallVector<int>{rows})
      return false;
  return true;
}

/// Whether the block of `op` moves over exactly `axes`, in any order (its
/// rank offsets are all along them): the ranks of the reduction hold the
/// other blocks.
bool blockMovesAlong(Operation *op, ArrayAttr axes) {
  FailureOr<SmallVector<dist::RankOffset>> offsets = dist::getRankOffsets(op);
  if (failed(offsets) || offsets->empty())
    return false;
  for (const dist::RankOffset &o : *offsets) {
    if (o.axes.size() != axes.size())
      return false;
    for (Attribute b : axes)
      if (!llvm::is_contained(o.axes, cast<StringAttr>(b).getValue()))
        return false;
  }
  return true;
}

/// Whether `v` is whole on every rank, no sum pending: a function argument,
/// a collective's result, or an annotated result with no partial axes.
bool complete(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def || isa<dist::AllReduceOp, dist::AllGatherOp, dist::BroadcastOp>(def))
    return true;
  std::optional<sharding::Layout> layout = sharding::getAnnotation(v);
  return layout && layout->partial.empty();
}

/// The reductions to drop, found as the largest set in which each one's
/// input is exact at one block's rows and every reader of its result,
/// transitively, needs no other rows.
class Analysis {
public:
  explicit Analysis(SmallVector<dist::AllReduceOp> candidates)
      : chosen(candidates.begin(), candidates.end()) {}

  llvm::SetVector<dist::AllReduceOp> run() {
    for (bool changed = true; changed;) {
      changed = false;
      for (dist::AllReduceOp ar : SmallVector<dist::AllReduceOp>(chosen.begin(), chosen.end())) {
        nn::GroupedRowsOpInterface block;
        if (exactRows(ar.getInputs()[0], block) && block &&
            blockMovesAlong(block, ar.getAxes()) && onlyBlockRowsRead(ar.getResult(0), block))
          continue;
        chosen.remove(ar);
        changed = true;
      }
    }
    return chosen;
  }

private:
  llvm::SetVector<dist::AllReduceOp> chosen;

  /// Whether `v`'s rows of a block of groups hold the whole (summed) value
  /// on the rank of that block, and where a sum is pending the other
  /// ranks' `v` is zero there: a grouped result written only at its
  /// block's rows, a chosen reduction of such a value, or a row-wise op of
  /// such values and complete ones. `block` is set to (and must match) the
  /// block found.
  bool exactRows(Value v, nn::GroupedRowsOpInterface &block) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return false;
    if (auto grouped = dyn_cast<nn::GroupedRowsOpInterface>(def)) {
      if (!grouped.writesOnlyGroupRows() || (block && !sameBlock(block, grouped)))
        return false;
      block = grouped;
      return true;
    }
    if (auto ar = dyn_cast<dist::AllReduceOp>(def); ar && chosen.contains(ar))
      return exactRows(ar.getInputs()[0], block);
    bool any = false;
    for (OpOperand &operand : def->getOpOperands()) {
      Value o = operand.get();
      if (!isa<RankedTensorType>(o.getType()) || complete(o))
        continue;
      if (!rowWise(def, operand.getOperandNumber()) || !exactRows(o, block))
        return false;
      any = true;
    }
    return any;
  }

  /// Whether every reader of `value`, transitively through row-wise ops
  /// and chosen reductions, needs only the rows of `block`'s groups.
  bool onlyBlockRowsRead(Value value, nn::GroupedRowsOpInterface block) {
    SmallVector<Value> work{value};
    llvm::DenseSet<Value> seen;
    while (!work.empty()) {
      Value v = work.pop_back_val();
      if (!seen.insert(v).second)
        continue;
      for (OpOperand &use : v.getUses()) {
        Operation *user = use.getOwner();
        if (auto reader = dyn_cast<nn::GroupedRowsOpInterface>(user);
            reader && reader.readsOnlyGroupRows(use.getOperandNumber()) &&
            sameBlock(block, reader))
          continue;
        auto ar = dyn_cast<dist::AllReduceOp>(user);
        if (!(ar && chosen.contains(ar)) && !rowWise(user, use.getOperandNumber()))
          return false;
        for (Value r : user->getResults())
          work.push_back(r);
      }
    }
    return true;
  }
};

struct ElideGroupReductionsPass
    : public loom::impl::ElideGroupReductionsBase<ElideGroupReductionsPass> {
  void runOnOperation() override {
    // Sums of several values (issued together) are looked at one value at a
    // time, and those kept are issued together again.
    SmallVector<SmallVector<dist::AllReduceOp>> buckets;
    SmallVector<dist::AllReduceOp> candidates;
    getOperation().walk([&](dist::AllReduceOp ar) {
      if (ar.getReduce() != dist::ReduceKind::Sum)
        return;
      if (ar.getInputs().size() == 1) {
        candidates.push_back(ar);
        return;
      }
      OpBuilder b(ar);
      SmallVector<dist::AllReduceOp> singles;
      for (auto [input, result] : llvm::zip(ar.getInputs(), ar.getResults())) {
        auto single = b.create<dist::AllReduceOp>(ar.getLoc(), ValueRange{input},
                                                  ar.getAxesAttr(), ar.getReduceAttr());
        result.replaceAllUsesWith(single.getResult(0));
        singles.push_back(single);
        candidates.push_back(single);
      }
      buckets.push_back(singles);
      ar.erase();
    });
    llvm::SetVector<dist::AllReduceOp> elided = Analysis(candidates).run();
    for (dist::AllReduceOp ar : elided) {
      ar.getResult(0).replaceAllUsesWith(ar.getInputs()[0]);
      ar.erase();
    }
    for (ArrayRef<dist::AllReduceOp> bucket : buckets) {
      SmallVector<dist::AllReduceOp> kept;
      for (dist::AllReduceOp single : bucket)
        if (!elided.contains(single))
          kept.push_back(single);
      if (kept.size() < 2)
        continue;
      OpBuilder b(kept.front());
      SmallVector<Value> inputs;
      for (dist::AllReduceOp single : kept)
        inputs.push_back(single.getInputs()[0]);
      auto merged = b.create<dist::AllReduceOp>(kept.front().getLoc(), inputs,
                                                kept.front().getAxesAttr(),
                                                kept.front().getReduceAttr());
      for (auto [single, result] : llvm::zip(kept, merged.getResults())) {
        single.getResult(0).replaceAllUsesWith(result);
        single.erase();
      }
    }
  }
};

} // namespace
