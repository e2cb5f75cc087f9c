// --loom-fold-transposes: an nn.transpose that all its readers, or the op
// that produces its input, can do itself (TransposeAbsorbingOpInterface) is
// folded into them. A producer whose result has other readers takes the
// transpose only when each of those can read the result with it undone.

#include "passes/fusion/Passes.h"

#include "dialects/nn/NNOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <optional>

namespace loom {
#define GEN_PASS_DEF_FOLDTRANSPOSES
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

/// Replaces every result of `old` by `now`'s and erases `old`.
void replaceOp(Operation *old, Operation *now) {
  for (auto [from, to] : llvm::zip(old->getResults(), now->getResults()))
    from.replaceAllUsesWith(to);
  old->erase();
}

/// The readers of `v`, each able to read it with `permutation` undone (that
/// is, to take the value before, or after, a transpose by `permutation`), or
/// nullopt when one cannot or reads it twice.
std::optional<SmallVector<std::pair<nn::TransposeAbsorbingOpInterface, int>>>
absorbingReaders(Value v, ArrayRef<int64_t> permutation, Operation *except = nullptr) {
  SmallVector<std::pair<nn::TransposeAbsorbingOpInterface, int>> readers;
  llvm::SmallPtrSet<Operation *, 4> seen;
  for (OpOperand &use : v.getUses()) {
    if (use.getOwner() == except)
      continue;
    auto reader = dyn_cast<nn::TransposeAbsorbingOpInterface>(use.getOwner());
    int index = int(use.getOperandNumber());
    if (!reader || !seen.insert(reader).second || !reader.canAbsorbTranspose(index, permutation))
      return std::nullopt;
    readers.push_back({reader, index});
  }
  return readers;
}

/// Each reader reads `source` in place of its operand (whose layout differs
/// from `source`'s by a transpose it now does itself).
void absorbInto(ArrayRef<std::pair<nn::TransposeAbsorbingOpInterface, int>> readers, Value source) {
  for (auto [reader, index] : readers) {
    OpBuilder b(reader);
    replaceOp(reader, reader.absorbTranspose(b, index, source, Type()));
  }
}

SmallVector<int64_t> inverse(ArrayRef<int64_t> permutation) {
  SmallVector<int64_t> inv(permutation.size());
  for (auto [i, p] : llvm::enumerate(permutation))
    inv[p] = int64_t(i);
  return inv;
}

struct FoldTransposesPass : impl::FoldTransposesBase<FoldTransposesPass> {
  void runOnOperation() override {
    SmallVector<nn::TransposeOp> transposes;
    getOperation()->walk([&](nn::TransposeOp t) { transposes.push_back(t); });
    for (nn::TransposeOp t : transposes) {
      ArrayRef<int64_t> perm = t.getPermutation();
      // Into the readers: every one takes the transpose's input instead.
      if (!t.getResult().use_empty()) {
        if (auto readers = absorbingReaders(t.getResult(), perm)) {
          absorbInto(*readers, t.getInput());
          t->erase();
          continue;
        }
      }
      // Into the producer: it writes the transposed result. Its other
      // readers, if any, must then read that result with the transpose
      // undone.
      auto result = dyn_cast<OpResult>(t.getInput());
      if (!result)
        continue;
      auto producer = dyn_cast<nn::TransposeAbsorbingOpInterface>(result.getOwner());
      const int index = -1 - int(result.getResultNumber());
      if (!producer || !producer.canAbsorbTranspose(index, perm))
        continue;
      auto others = absorbingReaders(result, inverse(perm), t);
      if (!others)
        continue;
      OpBuilder b(producer);
      Operation *now = producer.absorbTranspose(b, index, Value(), t.getType());
      Value transposed = now->getResult(result.getResultNumber());
      t.getResult().replaceAllUsesWith(transposed);
      t->erase();
      absorbInto(*others, transposed);
      replaceOp(producer, now);
    }
  }
};

} // namespace
} // namespace loom
