#ifndef LOOM_DIALECTS_NN_NNOPS_H
#define LOOM_DIALECTS_NN_NNOPS_H

#include "dialects/nn/NNDialect.h"
#include "dialects/nn/ShardingRule.h"
#include "runtime/abi/FusedBody.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <algorithm>
#include <optional>

namespace loom::nn::OpTrait {
/// The op's result element types are part of its meaning (NNInterfaces.td).
template <typename ConcreteType>
class KeepsResultPrecision
    : public mlir::OpTrait::TraitBase<ConcreteType, KeepsResultPrecision> {};
} // namespace loom::nn::OpTrait

namespace loom::nn {
/// How an op joins an nn.fused group (FusibleOpInterface, --loom-fuse).
enum class FusionKind {
  None,         // not fusible (this instance)
  Elementwise,  // one result element from the same element of each operand (NumPy broadcasting)
  Broadcast,    // nn.broadcast-like: a read of a smaller operand
  Cast,         // an element type conversion
  RowReduction, // a reduction over the innermost dims
};
/// RowReduction when a reduction op (an operand, `dims`) reduces only the
/// innermost dims of its input, else None.
FusionKind reductionFusionKind(mlir::Operation *op);

/// The values an integer (or i1: 0 and 1) tensor can hold, [lo, hi]
/// (IntegerRangeOpInterface).
struct IntegerRange {
  int64_t lo, hi;
  IntegerRange join(IntegerRange other) const {
    return {std::min(lo, other.lo), std::max(hi, other.hi)};
  }
};
} // namespace loom::nn

#include "dialects/nn/NNEnums.h.inc"
#include "dialects/nn/NNInterfaces.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/nn/NNAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/nn/NNOps.h.inc"

namespace loom::nn {

/// NumPy broadcasting of two shapes; failure if a pair of dims is neither
/// equal nor 1.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

/// Whether `from` broadcasts to exactly `to`.
bool isBroadcastableTo(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to);

/// The range of the values of integer (or i1) tensor `value`, from the ops
/// that compute it (IntegerRangeOpInterface), followed at most `depth` ops
/// back; std::nullopt where unknown (a function argument, a float, an op
/// without the interface).
std::optional<IntegerRange> integerRange(mlir::Value value, int depth = 16);

/// The discardable attribute (an Fp8PolicyAttr) that puts an nn.matmul
/// under an FP8 recipe (passes/fp8).
inline constexpr llvm::StringLiteral kFp8PolicyAttrName = "nn.fp8";

} // namespace loom::nn

#endif
