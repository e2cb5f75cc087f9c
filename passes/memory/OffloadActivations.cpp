// --loom-offload-activations: saved activations go to host memory between
// their last forward use and their first backward use (see Passes.td).

#include "passes/memory/Passes.h"
#include "passes/training/Layers.h"

#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <map>
#include <set>

namespace loom {
#define GEN_PASS_DEF_OFFLOADACTIVATIONS
#include "passes/memory/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

/// The op whose tags speak for `op`: a fusion group's first member.
Operation *tagged(Operation *op) {
  if (auto fused = dyn_cast<nn::FusedOp>(op))
    for (Operation &member : fused.getBodyBlock().without_terminator())
      return &member;
  return op;
}

bool isForward(Operation *op) {
  Operation *t = tagged(op);
  return !loom::isBackward(t) && loom::getMicrobatch(t).has_value();
}

/// "all", or "0-3,6": the layers, or an error naming the bad part.
FailureOr<std::set<int64_t>> parseLayers(StringRef spec, int64_t numLayers, Location loc) {
  std::set<int64_t> layers;
  if (spec == "all") {
    for (int64_t l = 0; l < numLayers; ++l)
      layers.insert(l);
    return layers;
  }
  SmallVector<StringRef> parts;
  spec.split(parts, ',');
  for (StringRef part : parts) {
    auto [lo, hi] = part.trim().split('-');
    int64_t first = 0, last = 0;
    if (lo.trim().getAsInteger(10, first) ||
        (hi.empty() ? (last = first, false) : hi.trim().getAsInteger(10, last)) || first < 0 ||
        last < first)
      return emitError(loc, "offload-activations: '") << part
             << "' is not a layer index or range (layers are 0-" << numLayers - 1 << ")";
    for (int64_t l = first; l <= last && l < numLayers; ++l)
      layers.insert(l);
  }
  return layers;
}

struct OffloadActivationsPass
    : public loom::impl::OffloadActivationsBase<OffloadActivationsPass> {
  using OffloadActivationsBase::OffloadActivationsBase;

  void runOnOperation() override {
    for (auto func : llvm::make_early_inc_range(getOperation().getOps<func::FuncOp>()))
      if (failed(offload(func)))
        return signalPassFailure();
  }

  LogicalResult offload(func::FuncOp func) {
    if (func.isExternal())
      return success();
    bool hasParameters = llvm::any_of(func.getBody().front(), [](Operation &op) {
      return isa<nn::ParameterOp>(op);
    });
    if (!hasParameters)
      return success();
    // A rank with no layer of its own (a pipeline's head stage) has nothing
    // to offload; the assignment's error is not one.
    FailureOr<LayerAssignment> assignment = [&]() -> FailureOr<LayerAssignment> {
      ScopedDiagnosticHandler quiet(func.getContext(), [](Diagnostic &) { return success(); });
      return assignLayers(func, "offload");
    }();
    if (failed(assignment))
      return success();
    // The model's layers: those its forward runs (the optimizer's state
    // may number more, after them).
    int64_t numLayers = 0;
    for (Operation &op : func.getBody().front())
      if (isForward(&op))
        if (auto it = assignment->layer.find(&op); it != assignment->layer.end())
          numLayers = std::max(numLayers, it->second + 1);
    if (numLayers == 0)
      return success();
    FailureOr<std::set<int64_t>> chosen = parseLayers(layers, numLayers, func.getLoc());
    if (failed(chosen))
      return failure();
    Block &block = func.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &op : block)
      ops.push_back(&op);
    // Activations are the values computed from the step's inputs. A value
    // of the parameters alone (a weight's bf16 cast that the backward reads
    // again) does not grow with the batch and stays on the device.
    llvm::DenseSet<Value> fromInputs(block.getArguments().begin(), block.getArguments().end());
    for (Operation *op : ops)
      if (llvm::any_of(op->getOperands(), [&](Value v) { return fromInputs.contains(v); }))
        fromInputs.insert(op->getResults().begin(), op->getResults().end());
    // The values to move, grouped by (microbatch, layer): a group's reloads
    // are issued `prefetch` groups ahead, where the backward first reads the
    // layer it runs that many layers before, so the copy back overlaps
    // those layers' backward instead of stalling the stream at the first
    // use (each layer ahead keeps one more layer's values on the device).
    struct Moved {
      Value value;
      Operation *def, *lastForward, *firstBackward;
    };
    std::map<std::pair<int64_t, int64_t>, SmallVector<Moved>> groups;
    // Every layer's saved values are grouped (the groups order the
    // backward); only the chosen layers' move.
    for (Operation *op : ops) {
      auto it = assignment->layer.find(op);
      if (it == assignment->layer.end() || it->second < 0 || it->second >= numLayers ||
          !isForward(op))
        continue;
      int64_t mb = loom::getMicrobatch(tagged(op)).value_or(0);
      for (Value result : op->getResults()) {
        auto type = dyn_cast<RankedTensorType>(result.getType());
        if (!type || !type.hasStaticShape() || !fromInputs.contains(result))
          continue;
        SmallVector<Operation *> forwardUsers, backwardUsers;
        for (Operation *user : result.getUsers())
          (loom::isBackward(tagged(user)) ? backwardUsers : forwardUsers).push_back(user);
        if (backwardUsers.empty())
          continue;
        Operation *lastForward = op;
        for (Operation *user : forwardUsers)
          if (lastForward->isBeforeInBlock(user))
            lastForward = user;
        Operation *firstBackward = backwardUsers.front();
        for (Operation *user : backwardUsers)
          if (user->isBeforeInBlock(firstBackward))
            firstBackward = user;
        if (firstBackward->isBeforeInBlock(lastForward))
          continue;
        groups[{mb, it->second}].push_back({result, op, lastForward, firstBackward});
      }
    }
    // Per microbatch, the groups in the order the backward first reads them.
    struct Group {
      Operation *firstRead;
      int64_t layer;
      SmallVector<Moved> *moved;
    };
    std::map<int64_t, SmallVector<Group>> order;
    for (auto &[key, moved] : groups) {
      Operation *first = moved.front().firstBackward;
      for (const Moved &m : moved)
        if (m.firstBackward->isBeforeInBlock(first))
          first = m.firstBackward;
      order[key.first].push_back({first, key.second, &moved});
    }
    OpBuilder b(func.getContext());
    const size_t ahead = size_t(std::max<int64_t>(prefetch, 0));
    for (auto &[mb, list] : order) {
      llvm::sort(list, [](const Group &x, const Group &y) {
        return x.firstRead->isBeforeInBlock(y.firstRead);
      });
      for (size_t g = 0; g < list.size(); ++g) {
        if (!chosen->count(list[g].layer))
          continue;
        for (Moved &m : *list[g].moved) {
          auto type = cast<RankedTensorType>(m.value.getType());
          b.setInsertionPointAfter(m.lastForward);
          auto out = b.create<nn::OffloadOp>(m.def->getLoc(), type, m.value);
          if (std::optional<int64_t> mbOf = loom::getMicrobatch(tagged(m.def)))
            loom::setMicrobatch(out, *mbOf);
          // `prefetch` layers ahead: where the backward first reads the
          // layer that many groups earlier, once the copy out is issued.
          Operation *at = m.firstBackward;
          for (size_t back = std::min(ahead, g); back > 0; --back) {
            Operation *early = list[g - back].firstRead;
            if (out->isBeforeInBlock(early) && early->isBeforeInBlock(at)) {
              at = early;
              break;
            }
          }
          b.setInsertionPoint(at);
          auto back = b.create<nn::ReloadOp>(m.def->getLoc(), type, out.getResult());
          loom::setBackwardKind(back, BackwardKind::Input);
          if (std::optional<int64_t> mbOf = loom::getMicrobatch(tagged(m.firstBackward)))
            loom::setMicrobatch(back, *mbOf);
          m.value.replaceUsesWithIf(back.getResult(), [&](OpOperand &use) {
            return use.getOwner() != out && loom::isBackward(tagged(use.getOwner()));
          });
        }
      }
    }
    return success();
  }
};

} // namespace
