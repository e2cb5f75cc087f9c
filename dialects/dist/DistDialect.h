#ifndef LOOM_DIALECTS_DIST_DISTDIALECT_H
#define LOOM_DIALECTS_DIST_DISTDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/dist/DistDialect.h.inc"
#include "dialects/dist/DistEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/dist/DistAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/dist/DistOps.h.inc"

namespace loom::dist {

/// The module attribute holding the device mesh.
inline constexpr llvm::StringLiteral kMeshAttrName = "dist.mesh";
/// The attribute a value-defining op carries for its results' shardings
/// (an ArrayAttr of ShardingAttr, one per result).
inline constexpr llvm::StringLiteral kShardingAttrName = "dist.sharding";

/// The attribute holding an op's, or a function argument's, type
/// before partitioning (a TypeAttr of a ranked tensor type).
inline constexpr llvm::StringLiteral kGlobalTypeAttrName = "dist.global_type";

/// The module attribute asking for ZeRO-1 (optimizer state split over dp).
inline constexpr llvm::StringLiteral kZero1AttrName = "dist.zero1";
bool isZero1(mlir::ModuleOp module);
void setZero1(mlir::ModuleOp module);

/// The mesh of the module enclosing `op`, if it has one.
MeshAttr lookupMesh(mlir::Operation *op);
void setMesh(mlir::ModuleOp module, MeshAttr mesh);

/// `dist.sharding` of an op (one per result; null if absent) or of a
/// function argument.
mlir::ArrayAttr getResultShardings(mlir::Operation *op);
void setResultShardings(mlir::Operation *op, llvm::ArrayRef<mlir::Attribute> shardings);
ShardingAttr getArgSharding(mlir::FunctionOpInterface fn, unsigned i);
void setArgSharding(mlir::FunctionOpInterface fn, unsigned i, ShardingAttr sharding);

/// `dist.global_type` of an op's result or a function argument (null if absent).
mlir::TypeAttr getGlobalType(mlir::Operation *op);
void setGlobalType(mlir::Operation *op, mlir::Type type);
mlir::TypeAttr getArgGlobalType(mlir::FunctionOpInterface fn, unsigned i);
void setArgGlobalType(mlir::FunctionOpInterface fn, unsigned i, mlir::Type type);

/// The tensor type one rank holds of `global` under `sharding`; failure (and
/// `error` set) if a split dimension is not divisible by its axes' product.
mlir::FailureOr<mlir::RankedTensorType>
localType(mlir::RankedTensorType global, ShardingAttr sharding, MeshAttr mesh,
          std::string *error = nullptr);

/// Rank offsets: in an SPMD program every rank runs one program, but an op
/// that works on its rank's block of a split dimension must know where the
/// block starts (a vocabulary-parallel lookup, a local slice). Such an op
/// carries its attributes as rank 0 has them and, in `dist.rank_offsets`,
/// what to add on other ranks: `attr` (element `element` of an i64 array
/// attribute, or the i64 attribute itself when `element` is -1) grows by
/// `stride` times the rank's index in the group over `axes` (row-major over
/// the listed axes: the block index of a dim split by them). The emitter
/// resolves them per rank; nothing after the partitioner recomputes them.
inline constexpr llvm::StringLiteral kRankOffsetsAttrName = "dist.rank_offsets";

struct RankOffset {
  std::string attr;
  int64_t element = -1;
  llvm::SmallVector<std::string> axes;
  int64_t stride = 0;
};

/// Appends one offset to `op`'s `dist.rank_offsets`.
void addRankOffset(mlir::Operation *op, llvm::StringRef attr, int64_t element,
                   llvm::ArrayRef<llvm::StringRef> axes, int64_t stride);
/// The offsets `op` carries; failure (with a diagnostic) if malformed.
mlir::FailureOr<llvm::SmallVector<RankOffset>> getRankOffsets(mlir::Operation *op);
/// Rewrites `op`'s attributes as the rank whose index in each offset's group
/// is `groupIndex(axes)` has them (the offsets stay, for other ranks).
mlir::LogicalResult
applyRankOffsets(mlir::Operation *op,
                 llvm::function_ref<int64_t(llvm::ArrayRef<std::string>)> groupIndex);

} // namespace loom::dist

#endif
