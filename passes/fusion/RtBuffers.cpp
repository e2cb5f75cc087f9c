#include "passes/fusion/RtBuffers.h"

#include "llvm/ADT/SetVector.h"

using namespace mlir;

namespace loom::fusion {

Value rootOf(Value buffer) {
  while (auto alias = buffer.getDefiningOp<rt::AliasOp>())
    buffer = alias.getOperand();
  return buffer;
}

bool usedOnlyBy(Value buffer, llvm::ArrayRef<Operation *> allowed) {
  for (Operation *user : buffer.getUsers()) {
    if (auto alias = dyn_cast<rt::AliasOp>(user)) {
      if (!usedOnlyBy(alias.getResult(), allowed))
        return false;
      continue;
    }
    if (!llvm::is_contained(allowed, user))
      return false;
  }
  return true;
}

static rt::KernelOp writerThrough(Value buffer) {
  for (Operation *user : buffer.getUsers()) {
    if (auto kernel = dyn_cast<rt::KernelOp>(user); kernel &&
                                                    llvm::is_contained(kernel.getOutputs(), buffer))
      return kernel;
    if (auto alias = dyn_cast<rt::AliasOp>(user))
      if (rt::KernelOp kernel = writerThrough(alias.getResult()))
        return kernel;
  }
  return nullptr;
}

rt::KernelOp writerOf(Value buffer) { return writerThrough(rootOf(buffer)); }

llvm::SmallVector<std::pair<Operation *, Value>> usersThroughViews(Value buffer) {
  llvm::SmallVector<std::pair<Operation *, Value>> users;
  llvm::SmallVector<Value> work{rootOf(buffer)};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (auto alias = dyn_cast<rt::AliasOp>(user))
        work.push_back(alias.getResult());
      else
        users.emplace_back(user, v);
    }
  }
  return users;
}

void eraseDeadBuffers(llvm::SmallVector<Value> &values) {
  // Each value once: a buffer listed twice would be read after its erase.
  llvm::SetVector<Value> work(values.begin(), values.end());
  for (size_t i = 0; i < work.size(); ++i) {
    Value value = work[i];
    Operation *def = value.getDefiningOp();
    if (!def || !value.use_empty() || !isa<rt::AliasOp, rt::AllocOp>(def))
      continue;
    if (isa<rt::AliasOp>(def))
      work.insert(def->getOperand(0));
    def->erase();
  }
  values.clear();
}

} // namespace loom::fusion
