#ifndef LOOM_DIALECTS_NN_SHARDINGRULE_H
#define LOOM_DIALECTS_NN_SHARDINGRULE_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

namespace loom::nn {

/// How one factor (an index space shared by operand and result dims) may be
/// split across ranks.
enum class FactorKind {
  /// Appears in a result: splitting it splits the result the same way.
  Parallel,
  /// Summed over (in no result): each rank's result is a partial sum.
  Reduction,
  /// Must be whole on every rank (a softmax, norm or rotary axis, a sliced
  /// or padded dim, the vocabulary of a lookup).
  Blocked,
};

/// An op's einsum-like sharding rule (Shardy's idea): factors, and for each
/// operand and result dim the factors it is made of, major first. A reshape
/// of [B, S, H*D] to [B, S, H, D] gives the input's last dim the factors
/// {H, D}: splitting that dim block-wise splits H.
struct ShardingRule {
  struct Factor {
    FactorKind kind = FactorKind::Parallel;
    int64_t size = 0; // 0: unknown
    /// The op computes a mean over this factor (a reduction) or normalizes
    /// by its extent: when split over g ranks, each rank's result is g
    /// times its share, so the partitioner scales it by 1/g.
    bool meanScaled = false;
  };
  llvm::SmallVector<Factor> factors;
  /// operandDims[i][d]: the factors of dim d of operand i.
  llvm::SmallVector<llvm::SmallVector<llvm::SmallVector<int>>> operandDims, resultDims;
  /// Every operand may carry a pending partial sum and the result is then
  /// partial too, if all float operands are partial over the same axes
  /// (add, sub).
  bool additive = false;
  /// Linear in each operand separately (mul, neg, reshape, transpose, sum):
  /// one partial operand gives a partial result.
  bool linear = false;
  /// An elementwise update of optimizer state (AdamW): its operands may be
  /// split further than the values they came from (ZeRO).
  bool optimizerUpdate = false;
  /// Its reduction factors take a maximum, not a sum (nn.amax): a split one
  /// leaves each rank a partial maximum, settled at once by an all-reduce
  /// max; it never passes on as a partial sum.
  bool reducesByMax = false;
  /// Its split reduction factors scatter rows into a larger result
  /// (gather_grad): the partial result then costs its settlement, and the
  /// partitioner also weighs gathering the operands instead of splitting.
  bool partialResultCosted = false;

  int addFactor(FactorKind kind, int64_t size, bool meanScaled = false) {
    factors.push_back({kind, size, meanScaled});
    return int(factors.size()) - 1;
  }
};

/// Elementwise rule with NumPy broadcasting over all operands and results.
ShardingRule elementwiseShardingRule(mlir::Operation *op, bool linear);
/// Binary arithmetic: elementwise; add/sub additive, mul/neg linear.
ShardingRule binaryShardingRule(mlir::Operation *op);
/// reduce_sum / reduce_mean / reduce_max over the op's `dims`.
ShardingRule reductionShardingRule(mlir::Operation *op);
/// Elementwise, except that dim `dim` of the first operand (and the
/// results) must stay whole (softmax).
ShardingRule wholeDimShardingRule(mlir::Operation *op, int64_t dim);

/// What the SPMD partitioner tells an op it rewrites for one rank's shard
/// (SpmdLocalizeOpInterface, ClassParallelLossOpInterface).
struct ShardContext {
  /// The op's sharding rule.
  const ShardingRule &rule;
  /// Whether factor `factor` of the rule is split over ranks.
  llvm::function_ref<bool(int factor)> isSplit;
  /// The global (unpartitioned) type of a value of the original program.
  llvm::function_ref<mlir::RankedTensorType(mlir::Value)> globalType;
  /// Records that `op`'s attribute `attr` (element `element` of an i64
  /// array, or the i64 itself when -1) grows by `stride` times the rank's
  /// block index along factor `factor` of the rule.
  llvm::function_ref<void(mlir::Operation *op, llvm::StringRef attr, int64_t element, int factor,
                          int64_t stride)>
      addRankOffset;
};

} // namespace loom::nn

#endif
