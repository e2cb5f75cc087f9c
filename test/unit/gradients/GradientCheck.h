#ifndef LOOM_TEST_UNIT_GRADIENTS_GRADIENTCHECK_H
#define LOOM_TEST_UNIT_GRADIENTS_GRADIENTCHECK_H

// Numerical checks of the nn gradient rules. A test builds one op on
// constant inputs; GradientCheck builds every operand's gradient through
// GradientOpInterface, evaluates it with the CPU kernels
// (frontend/common/ConstantEvaluator.h) and compares it with central finite
// differences of sum(result * R), R a fixed random cotangent per result.

#include "dialects/nn/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <gtest/gtest.h>

#include <vector>

namespace loom::nn::test {

/// |analytic - numeric| <= abs + rel * |numeric| per element, with central
/// differences of step `step`. The defaults suit f64 ops: the truncation
/// error is O(step^2) ~ 1e-12 and the rounding error ~ 1e-16 / step.
struct Tolerance {
  double step = 1e-6;
  double rel = 1e-6;
  double abs = 1e-7;
};

class GradientCheck {
public:
  GradientCheck();

  mlir::OpBuilder &builder() { return builder_; }
  mlir::Location loc() { return builder_.getUnknownLoc(); }
  mlir::Type f64() { return builder_.getF64Type(); }
  mlir::RankedTensorType tensor(llvm::ArrayRef<int64_t> shape, mlir::Type element = {});

  /// An nn.constant holding `values` (floats, integers or 0/1 for i1).
  mlir::Value constant(mlir::RankedTensorType type, const std::vector<double> &values);
  /// Uniform in [lo, hi] with |v| >= 0.1, so no input sits on a kink at 0.
  mlir::Value random(llvm::ArrayRef<int64_t> shape, double lo = -2.0, double hi = 2.0,
                     mlir::Type element = {});
  mlir::Value ints(llvm::ArrayRef<int64_t> shape, const std::vector<double> &values,
                   unsigned width = 64);
  mlir::Value bools(llvm::ArrayRef<int64_t> shape, const std::vector<double> &values);

  /// Checks the gradient of every operand of `op`: float operands must get
  /// a gradient of their own type that matches finite differences; the
  /// others must get none. `withCotangent[i]` false gives result i no
  /// gradient (the rule must treat it as zero); by default every float
  /// result has one.
  void check(mlir::Operation *op, Tolerance tolerance = {},
             std::vector<bool> withCotangent = {});

  /// Builds the gradient of operand `index` with the given result
  /// gradients; fails the test when the rule fails.
  mlir::Value gradient(mlir::Operation *op, unsigned index,
                       llvm::ArrayRef<mlir::Value> resultGradients);
  /// A value's elements, evaluated by the CPU kernels, widened to double.
  std::vector<double> evaluate(mlir::Value value);

private:
  mlir::MLIRContext context_;
  mlir::OwningOpRef<mlir::ModuleOp> module_;
  mlir::OpBuilder builder_;
  uint64_t nextSeed_ = 1;
};

} // namespace loom::nn::test

#endif
