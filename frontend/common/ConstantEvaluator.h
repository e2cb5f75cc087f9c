#ifndef LOOM_FRONTEND_COMMON_CONSTANTEVALUATOR_H
#define LOOM_FRONTEND_COMMON_CONSTANTEVALUATOR_H

// Evaluates nn values that depend on no input at compile time, by running
// the CPU reference kernels on them: causal masks built from arange, rotary
// tables, shape arithmetic. Importers use it for operators Loom has no op
// for (they need their inputs' values), and --loom-fold-constants uses it to
// replace constant subgraphs by nn.constant.

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Value.h"

namespace loom {

/// Results larger than this are left to run at run time.
constexpr int64_t kMaxFoldedElements = int64_t(1) << 27;

/// The value of `v` if it is an nn.constant, or an nn op whose operands all
/// evaluate (recursively, memoized per call); failure otherwise. Parameters
/// never evaluate: their values may change (training, supplied weights).
mlir::FailureOr<mlir::DenseElementsAttr> evaluateConstant(mlir::Value v);

/// Runs one nn op's CPU kernel on constant operands.
mlir::FailureOr<llvm::SmallVector<mlir::DenseElementsAttr>>
evaluateOp(mlir::Operation *op, llvm::ArrayRef<mlir::DenseElementsAttr> operands);

} // namespace loom

#endif
