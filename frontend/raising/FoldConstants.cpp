// --loom-fold-constants: replaces nn ops over constants by their values,
// computed with the CPU reference kernels (see Passes.td).

#include "frontend/raising/Passes.h"

#include "dialects/nn/NNOps.h"
#include "frontend/common/ConstantEvaluator.h"

#include "mlir/IR/Builders.h"

#include "llvm/ADT/SetVector.h"

namespace loom {
#define GEN_PASS_DEF_FOLDCONSTANTS
#include "frontend/raising/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

struct FoldConstantsPass : public loom::impl::FoldConstantsBase<FoldConstantsPass> {
  void runOnOperation() override {
    // Program order: an op's operands are folded before the op is visited.
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (op->getDialect() && op->getDialect()->getNamespace() == "nn" &&
          !isa<nn::ConstantOp, nn::ParameterOp>(op))
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      SmallVector<DenseElementsAttr> operands;
      bool allConstant = true;
      for (Value operand : op->getOperands()) {
        auto constant = operand.getDefiningOp<nn::ConstantOp>();
        auto dense = constant ? dyn_cast<DenseElementsAttr>(constant.getValue())
                              : DenseElementsAttr();
        if (!dense) {
          allConstant = false;
          break;
        }
        operands.push_back(dense);
      }
      if (!allConstant)
        continue;
      FailureOr<SmallVector<DenseElementsAttr>> values = evaluateOp(op, operands);
      if (failed(values))
        continue;
      OpBuilder b(op);
      for (auto [result, value] : llvm::zip(op->getResults(), *values))
        result.replaceAllUsesWith(b.create<nn::ConstantOp>(op->getLoc(), value));
      // The operands were folded (or written) constants; once the op is gone
      // those it alone used are dead: a chain folds to its last value, not
      // to every intermediate (an iota, a compare, ...) kept alive in the IR.
      llvm::SmallSetVector<Operation *, 4> inputs;
      for (Value operand : op->getOperands())
        inputs.insert(operand.getDefiningOp());
      op->erase();
      for (Operation *input : inputs)
        if (input->use_empty())
          input->erase();
    }
  }
};

} // namespace
