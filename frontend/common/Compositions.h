#ifndef LOOM_FRONTEND_COMMON_COMPOSITIONS_H
#define LOOM_FRONTEND_COMMON_COMPOSITIONS_H

// Operators that both importers (torch.export and ONNX) build from nn ops
// because Loom has no op of their own: a 1-D convolution, a constant pad
// that may crop, log-sum-exp and running sums. Each either builds its ops or says why
// not in one line, touching nothing.

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

#include <optional>
#include <string>

namespace loom {

struct Conv1dShape {
  int64_t stride = 1;
  int64_t padLow = 0;
  int64_t padHigh = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
};

/// input [B, C, T] or [C, T] (float), weight [O, C / groups, K], bias [O] or
/// null: for groups 1 (a matmul per tap) or depthwise (groups = C = O, a
/// product per tap: the short causal convolutions of Mamba and
/// linear-attention layers), the sum over the K taps of the tap's weight
/// times the padded input's strided window. `why` says what does not fit.
mlir::FailureOr<mlir::Value> buildConv1d(mlir::OpBuilder &b, mlir::Location loc,
                                         mlir::Value input, mlir::Value weight,
                                         mlir::Value bias, const Conv1dShape &shape,
                                         std::string &why);

/// `input` with before[d] and after[d] elements of `value` around dim d; a
/// negative amount crops instead.
mlir::FailureOr<mlir::Value> buildConstantPad(mlir::OpBuilder &b, mlir::Location loc,
                                              mlir::Value input,
                                              llvm::ArrayRef<int64_t> before,
                                              llvm::ArrayRef<int64_t> after, double value,
                                              std::string &why);

/// log(sum(exp(input))) over `dims` (sorted, distinct), as m + log(sum(exp(
/// input - m))) with m the maximum, zero where that is not finite, so a row
/// of -inf gives -inf rather than NaN.
mlir::Value buildLogSumExp(mlir::OpBuilder &b, mlir::Location loc, mlir::Value input,
                           llvm::ArrayRef<int64_t> dims, bool keepdim);

/// `v` with dims `axis` and last swapped (a transpose that is its own
/// inverse, so the same call swaps them back); `v` itself when `axis` is the
/// last or `v` is a scalar.
mlir::Value buildSwapWithLast(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v,
                              int64_t axis);

/// Running sums of `input` along `axis`: out[i] = sum of x[j] over j <= i
/// (j < i when `exclusive`; j >= i or j > i when `reverse`). Integers sum in
/// i64 as products with a triangle of ones reduced (exact, and untouched by
/// a bf16 step) and come back as i64; floats as a matmul with the triangle,
/// in their own type. The axis is swapped with the last and back. `why`
/// says what does not fit (a triangle of more than 2^26 elements).
mlir::FailureOr<mlir::Value> buildCumSum(mlir::OpBuilder &b, mlir::Location loc,
                                         mlir::Value input, int64_t axis, bool exclusive,
                                         bool reverse, std::string &why);

/// Attention as torch's math backend computes it: query [B, H, Sq, D] times
/// key [B, Hkv, Skv, D] transposed, times `scale` (1 / sqrt(D) when unset),
/// under `mask` (a bool mask choosing -inf where false, a float one added;
/// broadcast to the scores), softmax over the keys, times value [B, Hkv,
/// Skv, Dv]; fewer key/value heads than query heads are repeated to them.
/// The result is [B, H, Sq, Dv] of the query's type. `why` says what does
/// not fit.
mlir::FailureOr<mlir::Value> buildMaskedAttention(mlir::OpBuilder &b, mlir::Location loc,
                                                  mlir::Value query, mlir::Value key,
                                                  mlir::Value value, mlir::Value mask,
                                                  std::optional<double> scale,
                                                  std::string &why);

} // namespace loom

#endif
