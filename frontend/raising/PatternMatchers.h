#ifndef LOOM_FRONTEND_RAISING_PATTERNMATCHERS_H
#define LOOM_FRONTEND_RAISING_PATTERNMATCHERS_H

// Small matchers shared by the raising passes: splat constants, commutative
// binary ops, and views that only add or drop unit dimensions.

#include "dialects/nn/NNOps.h"

#include "mlir/IR/Matchers.h"

namespace loom::raising {

/// The value of a splat float or integer constant (any shape), looking
/// through broadcasts and reshapes of it.
std::optional<double> splatValue(mlir::Value v);

/// Whether `v` is a splat constant within `tolerance` (relative) of `expected`.
bool isSplat(mlir::Value v, double expected, double tolerance = 1e-6);

/// For a commutative binary op of type OpT: binds the operand satisfying
/// `pred` to `matched` and the other to `other`.
template <typename OpT, typename Pred>
bool matchCommutative(mlir::Value v, Pred pred, mlir::Value &matched,
                      mlir::Value &other) {
  auto op = v.getDefiningOp<OpT>();
  if (!op)
    return false;
  if (pred(op.getLhs())) {
    matched = op.getLhs();
    other = op.getRhs();
    return true;
  }
  if (pred(op.getRhs())) {
    matched = op.getRhs();
    other = op.getLhs();
    return true;
  }
  return false;
}

/// `v` with reshapes that only insert or remove size-1 dims peeled off.
mlir::Value stripUnitReshapes(mlir::Value v);

/// NumPy broadcasting: whether `from` broadcasts to exactly `to`.
bool isBroadcastableShape(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to);

/// The dims of `v`'s type with leading 1s dropped.
llvm::SmallVector<int64_t> withoutLeadingOnes(llvm::ArrayRef<int64_t> shape);

} // namespace loom::raising

#endif
