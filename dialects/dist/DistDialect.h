#ifndef LOOM_DIALECTS_DIST_DISTDIALECT_H
#define LOOM_DIALECTS_DIST_DISTDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/dist/DistDialect.h.inc"

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

/// The mesh of the module enclosing `op`, if it has one.
MeshAttr lookupMesh(mlir::Operation *op);

/// The tensor type one rank holds of `global` under `sharding`; failure (and
/// `error` set) if a split dimension is not divisible by its axes' product.
mlir::FailureOr<mlir::RankedTensorType>
localType(mlir::RankedTensorType global, ShardingAttr sharding, MeshAttr mesh,
          std::string *error = nullptr);

} // namespace loom::dist

#endif
