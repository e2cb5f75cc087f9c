#ifndef LOOM_DIALECTS_RT_RTDIALECT_H
#define LOOM_DIALECTS_RT_RTDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"

#include "runtime/abi/Collective.h"
#include "runtime/abi/Mesh.h"

#include "dialects/rt/RtDialect.h.inc"
#include "dialects/rt/RtEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/rt/RtAttrs.h.inc"

#include "runtime/abi/KernelList.h"

#define GET_OP_CLASSES
#include "dialects/rt/RtOps.h.inc"

namespace loom::rt {

// The rt dialect's discardable attributes, all on the module
// (RtDialect::verifyOperationAttribute checks them).
inline constexpr llvm::StringLiteral kMeshAxesAttr = "rt.mesh_axes";
inline constexpr llvm::StringLiteral kMeshShapeAttr = "rt.mesh_shape";
inline constexpr llvm::StringLiteral kScheduleCsvAttr = "rt.schedule_csv";

/// Bytes a buffer of this type occupies.
int64_t bufferBytes(mlir::MemRefType type);

/// The kernel's arity from Kernels.def, or failure for an unknown kernel.
struct KernelArity {
  int minInputs, maxInputs, numOutputs; // -1: one or more
};
std::optional<KernelArity> lookupKernel(llvm::StringRef name);

/// The buffer whose bytes `buffer` shows: itself, or what its aliases alias.
mlir::Value rootBuffer(mlir::Value buffer);
/// Whether a root buffer lives in the persistent arena (parameters and
/// persistent rt.alloc buffers).
bool isPersistent(mlir::Value root);
/// Whether a root buffer lives in the host arena (rt.alloc host).
bool isHost(mlir::Value root);
/// The planned offset of a root buffer, if the planner has run.
std::optional<int64_t> plannedOffset(mlir::Value root);
void setPlannedOffset(mlir::Value root, int64_t offset);

/// The device mesh of the module holding `op` (rt.mesh_axes, rt.mesh_shape),
/// or nullopt when the module has none (one rank) or it is malformed.
std::optional<loom::Mesh> moduleMesh(mlir::Operation *op);

/// Sets the module's rt.mesh_axes and rt.mesh_shape.
void setModuleMesh(mlir::Operation *module, llvm::ArrayRef<llvm::StringRef> axes,
                   llvm::ArrayRef<int64_t> shape);
bool hasModuleMesh(mlir::Operation *module);
/// rt.schedule_csv: a pipelined step's schedule, as CSV (null if absent).
mlir::StringAttr getScheduleCsv(mlir::Operation *module);
void setScheduleCsv(mlir::Operation *module, mlir::StringAttr csv);

/// A sharding attribute ([["dp"], []]) as the runtime's Sharding; nullopt
/// when it is not an array of string arrays.
std::optional<loom::Sharding> parseSharding(mlir::Attribute attr);

/// The runtime's collective kind and reduction for the dialect's (the same
/// values: the executable format does not change with the IR's spelling).
loom::CollectiveKind toRuntime(CollectiveKind kind);
loom::ReduceOp toRuntime(ReduceKind reduce);

/// The collective an rt.collective describes (its attributes, defaults 0).
loom::CollectiveDesc collectiveDesc(CollectiveOp op);

} // namespace loom::rt

#endif
