// --loom-recompute: forward values recomputed in the backward instead of
// kept alive across it (see Passes.td).

#include "passes/memory/Passes.h"
#include "passes/training/Layers.h"

#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

namespace loom {
#define GEN_PASS_DEF_RECOMPUTE
#include "passes/memory/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

/// At most this many FLOPs per result element is cheap to redo: every
/// elementwise op, norm, softmax and cast, and no GEMM (2K per element).
constexpr double kCheapFlopsPerElement = 16;

/// The forward ops of a training step: those of a microbatch's forward
/// (loom.microbatch) that are not backward.
bool isForward(Operation *op) {
  return !loom::isBackward(op) && loom::getMicrobatch(op).has_value();
}

/// Whether a copy of `op` computes exactly what it did: no memory effects
/// (a seeded dropout is pure), no regions, results only.
bool canRecompute(Operation *op) {
  return op->getNumRegions() == 0 && op->getNumResults() > 0 && isMemoryEffectFree(op) &&
         !isa<nn::ParameterOp, nn::ConstantOp>(op);
}

bool readByBackward(Value v) {
  return llvm::any_of(v.getUsers(), [](Operation *user) { return loom::isBackward(user); });
}

bool isCheap(Operation *op) {
  int64_t elements = 0;
  for (Type type : op->getResultTypes())
    if (auto tensor = dyn_cast<RankedTensorType>(type); tensor && tensor.hasStaticShape())
      elements += tensor.getNumElements();
  return elements > 0 &&
         double(nn::FlopCountOpInterface::flopsOf(op)) <= kCheapFlopsPerElement * double(elements);
}

struct RecomputePass : public loom::impl::RecomputeBase<RecomputePass> {
  using RecomputeBase::RecomputeBase;

  void runOnOperation() override {
    if (mode != "none" && mode != "selective" && mode != "full") {
      getOperation().emitError("--recompute='") << mode << "': expected none, selective or full";
      return signalPassFailure();
    }
    if (mode == "none")
      return;
    auto func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func || !llvm::any_of(func.getBody().front(),
                               [](Operation &op) { return loom::isBackward(&op); })) {
      getOperation().emitError("--recompute needs a training step (a function @main with a "
                               "backward)");
      return signalPassFailure();
    }
    Block &body = func.getBody().front();
    if (fullLayers < 0 || (fullLayers > 0 && mode != "selective")) {
      getOperation().emitError("full-layers=")
          << fullLayers << " needs mode=selective and a count of layers";
      return signalPassFailure();
    }
    llvm::SetVector<Operation *> chosen;
    // Ops of the fully recomputed layers, the kept layer outputs included:
    // selective recompute leaves them as full recompute decided.
    llvm::DenseSet<Operation *> decided;
    if (mode == "full" || fullLayers > 0)
      if (failed(chooseFull(func, mode == "full" ? -1 : int64_t(fullLayers), chosen, decided)))
        return signalPassFailure();
    if (mode == "selective")
      chooseSelective(body, decided, chosen);
    // In program order: a clone's recomputed operands come before it.
    llvm::SmallVector<Operation *> ordered(chosen.begin(), chosen.end());
    llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    rematerialize(llvm::SetVector<Operation *>(ordered.begin(), ordered.end()));
  }

  /// Cheap forward ops whose operands the backward keeps anyway, in
  /// program order (an operand may be another chosen op).
  static void chooseSelective(Block &body, const llvm::DenseSet<Operation *> &decided,
                              llvm::SetVector<Operation *> &chosen) {
    for (Operation &op : body) {
      if (decided.contains(&op) || !isForward(&op) || !canRecompute(&op) || !isCheap(&op))
        continue;
      if (!llvm::any_of(op.getResults(), readByBackward))
        continue;
      bool inputsKept = llvm::all_of(op.getOperands(), [&](Value v) {
        Operation *def = v.getDefiningOp();
        return !def || isa<nn::ParameterOp, nn::ConstantOp>(def) || chosen.contains(def) ||
               readByBackward(v);
      });
      if (inputsKept)
        chosen.insert(&op);
    }
  }

  /// Every recomputable forward op of a layer but the layer's outputs, in
  /// the first `firstLayers` layers (all for -1).
  LogicalResult chooseFull(func::FuncOp func, int64_t firstLayers,
                           llvm::SetVector<Operation *> &chosen,
                           llvm::DenseSet<Operation *> &decided) {
    FailureOr<LayerAssignment> layers = assignLayers(func, "recompute");
    if (failed(layers))
      return failure();
    auto layerOf = [&](Operation *op) -> int64_t {
      auto it = layers->layer.find(op);
      return it == layers->layer.end() ? -1 : it->second;
    };
    for (Operation &op : func.getBody().front()) {
      int64_t l = layerOf(&op);
      if (!isForward(&op) || !canRecompute(&op) || l < 0 || l >= layers->numLayers ||
          (firstLayers >= 0 && l >= firstLayers))
        continue;
      decided.insert(&op);
      bool layerOutput = llvm::any_of(op.getUsers(), [&](Operation *user) {
        return isForward(user) && layerOf(user) > l;
      });
      if (!layerOutput)
        chosen.insert(&op);
    }
    return success();
  }

  /// Clones each chosen op before its first backward user and points the
  /// backward's uses at the clone. Last op first, so that a clone's own
  /// recomputed operands are cloned after it and placed before it.
  /// In a pipelined step, only backward users on the op's own stage read
  /// the clone: its operands are there, while another stage would need a
  /// transfer the schedule does not have (a value crossing stages is sent
  /// once, in the forward). Users on other stages keep the forward's value.
  static void rematerialize(const llvm::SetVector<Operation *> &chosen) {
    for (Operation *op : llvm::reverse(chosen)) {
      Attribute stage = op->getAttr(pipe::kStageAttr);
      SmallVector<Operation *> users;
      for (Operation *user : op->getUsers())
        if (loom::isBackward(user) && (!stage || user->getAttr(pipe::kStageAttr) == stage))
          users.push_back(user);
      if (users.empty())
        continue;
      Operation *first = *llvm::min_element(
          users, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
      OpBuilder builder(first);
      Operation *clone = builder.clone(*op);
      bool weightOnly = llvm::all_of(users, [](Operation *user) {
        return loom::getBackwardKind(user) == BackwardKind::Weight;
      });
      loom::setBackwardKind(clone, weightOnly ? BackwardKind::Weight : BackwardKind::Input);
      llvm::SmallPtrSet<Operation *, 8> backward(users.begin(), users.end());
      for (auto [from, to] : llvm::zip(op->getResults(), clone->getResults()))
        from.replaceUsesWithIf(to, [&](OpOperand &use) { return backward.contains(use.getOwner()); });
    }
  }
};

} // namespace
