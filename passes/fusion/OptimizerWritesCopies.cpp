// --loom-optimizer-writes-copies: the optimizer writes each weight's
// compute-precision copy, and the step's cast of the weight becomes a
// refresh (run only after the parameters are set). See Passes.td.

#include "passes/fusion/Passes.h"
#include "passes/fusion/RtBuffers.h"
#include "runtime/abi/KernelList.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"

namespace loom {
#define GEN_PASS_DEF_OPTIMIZERWRITESCOPIES
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

using fusion::rootOf;

/// Where a parameter is updated: an nn.adamw_multi call and the index of
/// its group (param, grad, exp_avg, exp_avg_sq).
struct Update {
  rt::KernelOp adamw;
  int64_t group;
};

/// The first input of nn.adamw_multi's groups: after lr, step and the
/// optional scale.
unsigned firstGroupInput(rt::KernelOp adamw) {
  auto hasScale = adamw.getAttrs().getAs<IntegerAttr>("has_scale");
  return hasScale && hasScale.getInt() ? 3 : 2;
}

/// Every op that reads or writes `root` or a view of it.
SmallVector<Operation *> usersOf(Value root) {
  SmallVector<Operation *> users;
  SmallVector<Value> work{root};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (auto alias = dyn_cast<rt::AliasOp>(user)) {
        work.push_back(alias.getResult());
        continue;
      }
      users.push_back(user);
    }
  }
  return users;
}

/// Whether kernel `op` writes `root` (or a view of it).
bool writes(Operation *op, Value root) {
  auto kernel = dyn_cast<rt::KernelOp>(op);
  if (!kernel)
    return !isa<rt::OutputOp>(op); // a collective, or anything unknown: assume it does
  for (Value out : kernel.getOutputs())
    if (rootOf(out) == root)
      return true;
  return false;
}

struct OptimizerWritesCopiesPass
    : impl::OptimizerWritesCopiesBase<OptimizerWritesCopiesPass> {
  void runOnOperation() override {
    getOperation().walk([&](rt::ProgramOp program) { run(program); });
  }

  void run(rt::ProgramOp program) {
    llvm::DenseMap<Operation *, int64_t> position;
    llvm::DenseMap<Value, Update> updates; // parameter root -> its update
    for (Operation &op : program.getBlock()) {
      position[&op] = int64_t(position.size());
      auto kernel = dyn_cast<rt::KernelOp>(op);
      if (!kernel || kernel.getKernelId() != KernelId::AdamwMulti)
        continue;
      ValueRange in = kernel.getInputs();
      const unsigned first = firstGroupInput(kernel);
      for (unsigned i = first; i + 3 < in.size(); i += 4)
        updates.try_emplace(rootOf(in[i]), Update{kernel, int64_t((i - first) / 4)});
    }

    // Per cast call: which of its (weight, copy) pairs the optimizer can keep.
    llvm::MapVector<Operation *, SmallVector<unsigned>> kept;
    // Per update call: its groups' copies, by group.
    llvm::MapVector<Operation *, std::map<int64_t, Value>> copies;
    for (Operation &op : program.getBlock()) {
      auto cast = dyn_cast<rt::KernelOp>(op);
      // A cast that gives an FP8 scale of its copy (KernelList.h) stays.
      if (!cast || cast.getRefresh() ||
          (cast.getKernelId() != KernelId::CastMulti && cast.getKernelId() != KernelId::Cast) ||
          cast.getAttrs().contains(kFp8ScaleOfAttr))
        continue;
      for (auto [i, pair] : llvm::enumerate(llvm::zip(cast.getInputs(), cast.getOutputs()))) {
        auto [weight, copy] = pair;
        std::optional<std::optional<Update>> keep = keepable(cast, weight, copy, updates, position);
        if (!keep)
          continue;
        if (std::optional<Update> update = *keep) {
          auto &groups = copies[update->adamw];
          if (groups.count(update->group))
            continue; // the weight is cast twice: keep one copy
          groups[update->group] = rootOf(copy);
        } else {
          // A parameter nothing writes (a frozen table): its copy only
          // needs the refresh.
          markPersistent(copy, weight);
        }
        kept[cast].push_back(unsigned(i));
      }
    }

    for (auto &[adamwOp, groups] : copies)
      addCopies(cast<rt::KernelOp>(adamwOp), groups);
    for (auto &[castOp, pairs] : kept)
      splitRefresh(cast<rt::KernelOp>(castOp), pairs);
  }

  /// Whether `copy` (the cast of `weight`) can persist across steps, and
  /// if so the update that keeps it (none: nothing writes `weight`). The
  /// weight is a parameter that nothing writes, or only one nn.adamw_multi
  /// after every read of `copy`; `copy` is scratch that only this cast
  /// writes. Then the copy the optimizer writes from the new weight is the
  /// one the next step's cast would make.
  std::optional<std::optional<Update>>
  keepable(rt::KernelOp cast, Value weight, Value copy,
           const llvm::DenseMap<Value, Update> &updates,
           const llvm::DenseMap<Operation *, int64_t> &position) {
    Value root = rootOf(weight), copyRoot = rootOf(copy);
    if (!root.getDefiningOp<rt::ParamOp>() || root != weight)
      return std::nullopt;
    auto alloc = copyRoot.getDefiningOp<rt::AllocOp>();
    if (!alloc || alloc.getPersistent() || copyRoot != copy ||
        !isa<FloatType>(llvm::cast<MemRefType>(copy.getType()).getElementType()))
      return std::nullopt;
    std::optional<Update> update;
    if (auto it = updates.find(root); it != updates.end())
      update = it->second;
    // Until the end of the step when nothing updates the weight.
    const int64_t at = update ? position.lookup(update->adamw) : int64_t(position.size());
    if (position.lookup(cast) >= at)
      return std::nullopt;
    for (Operation *user : usersOf(root))
      if ((!update || user != update->adamw.getOperation()) && writes(user, root))
        return std::nullopt;
    for (Operation *user : usersOf(copyRoot)) {
      if (user == cast.getOperation())
        continue;
      if (writes(user, copyRoot) || position.lookup(user) >= at)
        return std::nullopt;
    }
    return std::optional<std::optional<Update>>(update);
  }

  /// `copy` becomes a persistent buffer named after its weight.
  static void markPersistent(Value copy, Value weight) {
    auto alloc = copy.getDefiningOp<rt::AllocOp>();
    alloc.setPersistent(true);
    alloc.setNameAttr(StringAttr::get(copy.getContext(),
                                      weight.getDefiningOp<rt::ParamOp>().getName() + ".copy"));
  }

  /// The update call with one more output per kept copy, listed in
  /// `copies` by group; the copies become persistent.
  void addCopies(rt::KernelOp adamw, const std::map<int64_t, Value> &groups) {
    OpBuilder b(adamw);
    SmallVector<Value> outputs(adamw.getOutputs());
    SmallVector<int64_t> indices;
    for (auto &[group, copy] : groups) {
      indices.push_back(group);
      outputs.push_back(copy);
      markPersistent(copy, adamw.getInputs()[firstGroupInput(adamw) + 4 * group]);
    }
    NamedAttrList attrs(adamw.getAttrs());
    attrs.set("copies", b.getDenseI64ArrayAttr(indices));
    auto now = b.create<rt::KernelOp>(adamw.getLoc(), adamw.getKernelAttr(), adamw.getInputs(),
                                      outputs, attrs.getDictionary(b.getContext()),
                                      adamw.getStreamAttr());
    now->setDiscardableAttrs(adamw->getDiscardableAttrDictionary());
    adamw.erase();
  }

  /// The kept pairs of `cast` move to a refresh call; the rest stay.
  void splitRefresh(rt::KernelOp cast, ArrayRef<unsigned> pairs) {
    OpBuilder b(cast);
    SmallVector<Value> keptIn, keptOut, restIn, restOut;
    for (auto [i, pair] : llvm::enumerate(llvm::zip(cast.getInputs(), cast.getOutputs()))) {
      bool isKept = llvm::is_contained(pairs, unsigned(i));
      (isKept ? keptIn : restIn).push_back(std::get<0>(pair));
      (isKept ? keptOut : restOut).push_back(std::get<1>(pair));
    }
    auto make = [&](ValueRange in, ValueRange out, bool refresh) {
      StringRef name = in.size() == 1 ? "nn.cast" : "nn.cast_multi";
      auto call = b.create<rt::KernelOp>(cast.getLoc(), b.getStringAttr(name), in, out,
                                         cast.getAttrsAttr(), cast.getStreamAttr());
      call->setDiscardableAttrs(cast->getDiscardableAttrDictionary());
      call.setRefresh(refresh);
    };
    make(keptIn, keptOut, true);
    if (!restIn.empty())
      make(restIn, restOut, false);
    cast.erase();
  }
};

} // namespace
} // namespace loom
