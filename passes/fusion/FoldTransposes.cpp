// --loom-fold-transposes: an nn.transpose that its only reader, or the op
// whose only use it is, can do itself (TransposeAbsorbingOpInterface) is
// folded into that op.

#include "passes/fusion/Passes.h"

#include "dialects/nn/NNOps.h"

#include "mlir/IR/Builders.h"

namespace loom {
#define GEN_PASS_DEF_FOLDTRANSPOSES
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

struct FoldTransposesPass : impl::FoldTransposesBase<FoldTransposesPass> {
  void runOnOperation() override {
    SmallVector<nn::TransposeOp> transposes;
    getOperation()->walk([&](nn::TransposeOp t) { transposes.push_back(t); });
    for (nn::TransposeOp t : transposes) {
      ArrayRef<int64_t> perm = t.getPermutation();
      // Into the reader: it takes the transpose's input instead.
      if (t.getResult().hasOneUse()) {
        OpOperand &use = *t.getResult().use_begin();
        auto reader = dyn_cast<nn::TransposeAbsorbingOpInterface>(use.getOwner());
        int index = int(use.getOperandNumber());
        if (reader && reader->getNumResults() == 1 && reader.canAbsorbTranspose(index, perm)) {
          OpBuilder b(reader);
          Operation *now = reader.absorbTranspose(b, index, t.getInput(), Type());
          reader->getResult(0).replaceAllUsesWith(now->getResult(0));
          reader->erase();
          t->erase();
          continue;
        }
      }
      // Into the producer: it writes the transposed result.
      auto result = dyn_cast<OpResult>(t.getInput());
      if (!result || !result.hasOneUse() || result.getOwner()->getNumResults() != 1)
        continue;
      auto producer = dyn_cast<nn::TransposeAbsorbingOpInterface>(result.getOwner());
      if (!producer || !producer.canAbsorbTranspose(-1, perm))
        continue;
      OpBuilder b(producer);
      Operation *now = producer.absorbTranspose(b, -1, Value(), t.getType());
      t.getResult().replaceAllUsesWith(now->getResult(0));
      t->erase();
      producer->erase();
    }
  }
};

} // namespace
} // namespace loom
