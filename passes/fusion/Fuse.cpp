// --loom-fuse: producer-consumer groups of fusible nn ops (FusibleOpInterface)
// become nn.fused ops; --loom-unfuse inlines them back (all of them, or those
// the CUDA code generator cannot make one kernel of).

#include "passes/fusion/Passes.h"

#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace loom {
#define GEN_PASS_DEF_FUSE
#define GEN_PASS_DEF_UNFUSE
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

using nn::FusionKind;

/// Whether `op` may be put in a group at all.
bool isFusible(Operation *op) {
  auto fusible = dyn_cast<nn::FusibleOpInterface>(op);
  if (!fusible || op->getNumRegions() != 0 || op->getNumResults() == 0)
    return false;
  if (fusible.getFusionKind() == FusionKind::None)
    return false;
  auto ranked = [](Type t) { return isa<RankedTensorType>(t); };
  return llvm::all_of(op->getOperandTypes(), ranked) &&
         llvm::all_of(op->getResultTypes(), ranked);
}

/// Ops share a group only when their discardable attributes (pipe.stage,
/// pipe.rank, ...) are the same.
bool sameDiscardableAttrs(Operation *a, Operation *b) {
  return a->getDiscardableAttrDictionary() == b->getDiscardableAttrDictionary();
}

/// Calls `fn` with the op of `block` that defines each value `op` (or an op
/// nested in it) reads, when that value is defined in `block`.
void forEachProducerInBlock(Operation *op, Block &block, function_ref<void(Operation *)> fn) {
  auto visit = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return;
    if (Operation *inBlock = block.findAncestorOpInBlock(*def))
      if (inBlock != op)
        fn(inBlock);
  };
  for (Value v : op->getOperands())
    visit(v);
  if (op->getNumRegions() != 0)
    op->walk([&](Operation *nested) {
      if (nested != op)
        for (Value v : nested->getOperands())
          visit(v);
    });
}

class BlockFuser {
public:
  BlockFuser(Block &block, unsigned maxSpan) : block(block), maxSpan(maxSpan) {
    unsigned i = 0;
    for (Operation &op : block)
      order[&op] = i++;
  }

  /// Forms the groups, in program order.
  void formGroups() {
    for (Operation &op : block) {
      if (!isFusible(&op))
        continue;
      int chosen = -1;
      for (Value v : op.getOperands()) {
        Operation *def = v.getDefiningOp();
        if (!def || def->getBlock() != &block)
          continue;
        auto it = groupOf.find(def);
        if (it == groupOf.end() || !sameDiscardableAttrs(&op, def))
          continue;
        if (canJoin(&op, it->second)) {
          chosen = it->second;
          break;
        }
      }
      if (chosen < 0) {
        chosen = int(groups.size());
        groups.emplace_back();
        firstOrder.push_back(order[&op]);
        lastOrder.push_back(order[&op]);
      }
      lastOrder[chosen] = order[&op];
      groups[chosen].push_back(&op);
      groupOf[&op] = chosen;
    }
  }

  /// Replaces every group of two or more ops with an nn.fused op.
  void materialize() {
    for (SmallVector<Operation *> &group : groups)
      if (group.size() >= 2)
        fuse(group);
  }

private:
  /// Whether `op` can join group `g`: it must lie within `maxSpan` ops of
  /// the group's first op (the nn.fused op runs where its last op was: a
  /// group spanning the step, such as gradient accumulations across
  /// microbatches, would hold its inputs until the end; this also bounds
  /// the search below), and none of its inputs from outside the group may
  /// depend on the group (groups contracted), or the group would have to
  /// run both before and after that input.
  bool canJoin(Operation *op, int g) {
    if (order.lookup(op) - firstOrder[g] > maxSpan)
      return false;
    bool ok = true;
    forEachProducerInBlock(op, block, [&](Operation *def) {
      if (!ok)
        return;
      auto it = groupOf.find(def);
      if (it != groupOf.end() && it->second == g)
        return;
      if (dependsOnGroup(def, g))
        ok = false;
    });
    return ok;
  }

  /// Whether `start` reaches group `g` through its producers, every group
  /// (formed so far) taken as one node. The search skips ops before `g`'s
  /// first op, unless their group reaches past it; fuse() checks the
  /// groups again on the program as it is, for what this misses.
  bool dependsOnGroup(Operation *start, int g) {
    unsigned low = firstOrder[g];
    SmallVector<Operation *> work{start};
    DenseSet<Operation *> seen{start};
    DenseSet<int> seenGroups;
    auto push = [&](Operation *p) {
      auto it = groupOf.find(p);
      unsigned reach = it == groupOf.end() ? order.lookup(p) : lastOrder[it->second];
      if (reach >= low && seen.insert(p).second)
        work.push_back(p);
    };
    while (!work.empty()) {
      Operation *n = work.pop_back_val();
      auto it = groupOf.find(n);
      if (it != groupOf.end()) {
        if (it->second == g)
          return true;
        if (seenGroups.insert(it->second).second)
          for (Operation *member : groups[it->second])
            push(member);
      }
      forEachProducerInBlock(n, block, push);
    }
    return false;
  }

  void fuse(ArrayRef<Operation *> groupOps) {
    SmallVector<Operation *> sorted(groupOps);
    llvm::sort(sorted, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    DenseSet<Operation *> candidates(sorted.begin(), sorted.end());

    // Walk from the first member to the last on the program as it is now
    // (earlier groups already single ops). Ops between that read the
    // group's values (directly or not) move after it. A member that reads
    // such an op would need the group both before and after it: the group
    // ends before that member (formGroups' search makes this rare; this
    // check makes the result acyclic whatever it missed).
    SmallVector<Operation *> members;
    DenseSet<Operation *> inGroup, tainted;
    SmallVector<Operation *> toMove;
    for (Operation *op = sorted.front(); op; op = op->getNextNode()) {
      bool readsGroup = false, readsOutside = false;
      forEachProducerInBlock(op, block, [&](Operation *def) {
        if (tainted.contains(def)) {
          readsGroup = true;
          readsOutside |= !inGroup.contains(def);
        }
      });
      if (candidates.contains(op)) {
        if (readsOutside)
          break;
        members.push_back(op);
        inGroup.insert(op);
        tainted.insert(op);
        if (op == sorted.back())
          break;
      } else if (readsGroup) {
        tainted.insert(op);
        toMove.push_back(op);
      }
    }
    if (members.size() < 2)
      return;
    Operation *first = members.front(), *last = members.back();
    Operation *after = last;
    for (Operation *op : toMove) {
      if (!op->isBeforeInBlock(last))
        break;
      op->moveAfter(after);
      after = op;
    }

    auto insideGroup = [&](Operation *user) {
      Operation *anc = block.findAncestorOpInBlock(*user);
      return anc && inGroup.contains(anc);
    };
    llvm::SetVector<Value> inputs;
    SmallVector<Value> outputs;
    for (Operation *op : members) {
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (!def || !inGroup.contains(def))
          inputs.insert(v);
      }
      for (Value r : op->getResults())
        if (llvm::any_of(r.getUsers(), [&](Operation *u) { return !insideGroup(u); }))
          outputs.push_back(r);
    }

    OpBuilder b(last->getContext());
    b.setInsertionPointAfter(last);
    SmallVector<Type> resultTypes;
    for (Value v : outputs)
      resultTypes.push_back(v.getType());
    auto fused = b.create<nn::FusedOp>(last->getLoc(), resultTypes, inputs.getArrayRef());
    // The group's pipeline stage and rank (its members all share them);
    // other attributes (a result's sharding) stay on the members.
    for (StringRef name : {pipe::kStageAttr, pipe::kRankAttr})
      if (Attribute attr = first->getAttr(name))
        fused->setAttr(name, attr);
    Block *body = b.createBlock(&fused.getBody());
    IRMapping map;
    for (Value v : inputs)
      map.map(v, body->addArgument(v.getType(), v.getLoc()));
    b.setInsertionPointToStart(body);
    for (Operation *op : members)
      b.clone(*op, map);
    SmallVector<Value> yielded;
    for (Value v : outputs)
      yielded.push_back(map.lookup(v));
    b.create<nn::YieldOp>(last->getLoc(), yielded);

    for (auto [old, now] : llvm::zip(outputs, fused.getResults()))
      old.replaceUsesWithIf(now, [&](OpOperand &use) { return !insideGroup(use.getOwner()); });
    for (Operation *op : llvm::reverse(members))
      op->erase();
  }

  Block &block;
  unsigned maxSpan;
  DenseMap<Operation *, unsigned> order;
  DenseMap<Operation *, int> groupOf;
  std::vector<SmallVector<Operation *>> groups;
  SmallVector<unsigned> firstOrder, lastOrder;
};

struct FusePass : impl::FuseBase<FusePass> {
  using FuseBase::FuseBase;
  void runOnOperation() override {
    SmallVector<Block *> blocks;
    getOperation()->walk([&](Block *block) {
      if (!isa<nn::FusedOp>(block->getParentOp()))
        blocks.push_back(block);
    });
    for (Block *block : blocks) {
      BlockFuser fuser(*block, maxSpan);
      fuser.formGroups();
      fuser.materialize();
    }
  }
};

/// Whether the CUDA code generator makes one kernel of `fused`.
bool isGeneratable(nn::FusedOp fused) {
  llvm::Expected<FusedBody> body = fused.kernelBody();
  if (!body) {
    llvm::consumeError(body.takeError());
    return false;
  }
  return fusedCodegenProblem(*body).empty();
}

struct UnfusePass : impl::UnfuseBase<UnfusePass> {
  using UnfuseBase::UnfuseBase;
  void runOnOperation() override {
    SmallVector<nn::FusedOp> fusedOps;
    getOperation()->walk([&](nn::FusedOp op) { fusedOps.push_back(op); });
    for (nn::FusedOp fused : fusedOps) {
      if (keepGeneratable && isGeneratable(fused))
        continue;
      OpBuilder b(fused);
      IRMapping map;
      Block &body = fused.getBodyBlock();
      for (auto [arg, input] : llvm::zip(body.getArguments(), fused.getInputs()))
        map.map(arg, input);
      for (Operation &op : body.without_terminator())
        b.clone(op, map);
      auto yield = cast<nn::YieldOp>(body.getTerminator());
      for (auto [result, value] : llvm::zip(fused.getResults(), yield.getValues()))
        result.replaceAllUsesWith(map.lookupOrDefault(value));
      fused->erase();
    }
  }
};

} // namespace
} // namespace loom
