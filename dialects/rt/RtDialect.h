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

#define GET_OP_CLASSES
#include "dialects/rt/RtOps.h.inc"

namespace loom::rt {

/// Bytes a buffer of this type occupies.
int64_t bufferBytes(mlir::MemRefType type);

/// The kernel's arity from Kernels.def, or failure for an unknown kernel.
struct KernelArity {
  int minInputs, maxInputs, numOutputs; // -1: one or more
};
std::optional<KernelArity> lookupKernel(llvm::StringRef name);

/// The buffer whose bytes `buffer` shows: itself, or what its aliases alias.
mlir::Value rootBuffer(mlir::Value buffer);
/// Whether a root buffer lives in the persistent arena (parameters).
bool isPersistent(mlir::Value root);
/// The planned offset of a root buffer, if the planner has run.
std::optional<int64_t> plannedOffset(mlir::Value root);
void setPlannedOffset(mlir::Value root, int64_t offset);

/// The device mesh of the module holding `op` (rt.mesh_axes, rt.mesh_shape),
/// or nullopt when the module has none (one rank) or it is malformed.
std::optional<loom::Mesh> moduleMesh(mlir::Operation *op);

/// A sharding attribute ([["dp"], []]) as the runtime's Sharding; nullopt
/// when it is not an array of string arrays.
std::optional<loom::Sharding> parseSharding(mlir::Attribute attr);

/// The collective an rt.collective describes (its attributes, defaults 0).
loom::CollectiveDesc collectiveDesc(CollectiveOp op);

} // namespace loom::rt

#endif
