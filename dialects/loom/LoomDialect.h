#ifndef LOOM_DIALECTS_LOOM_LOOMDIALECT_H
#define LOOM_DIALECTS_LOOM_LOOMDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include "dialects/loom/LoomDialect.h.inc"
#include "dialects/loom/LoomEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/loom/LoomAttrs.h.inc"

// Typed access to the `loom.*` discardable attributes (LoomDialect.td lists
// them); LoomDialect::verifyOperationAttribute checks what they hold.
namespace loom {

inline constexpr llvm::StringLiteral kNameAttr = "loom.name";
inline constexpr llvm::StringLiteral kUpdatesAttr = "loom.updates";
inline constexpr llvm::StringLiteral kMicrobatchAttr = "loom.microbatch";
/// On a training step's tokens argument (and its rt.input): the global rows
/// come as this many microbatches, each split over the data ranks, and the
/// caller orders them so (IOBinding::rowGroups).
inline constexpr llvm::StringLiteral kRowGroupsAttrName = "loom.row_groups";
/// On a module holding a training step: the loss's classes (i64), which the
/// executable records so that the training loop can check its data.
inline constexpr llvm::StringLiteral kVocabSizeAttr = "loom.vocab_size";
inline constexpr llvm::StringLiteral kBackwardAttr = "loom.backward";
inline constexpr llvm::StringLiteral kStreamAttr = "loom.stream";
inline constexpr llvm::StringLiteral kHostCopyAttr = "loom.host_copy";
inline constexpr llvm::StringLiteral kMemoryAttr = "loom.memory";

/// `loom.name`: the name a step input or output has in the executable.
mlir::StringAttr getArgName(mlir::FunctionOpInterface fn, unsigned i);
mlir::StringAttr getResultName(mlir::FunctionOpInterface fn, unsigned i);
void setArgName(mlir::FunctionOpInterface fn, unsigned i, llvm::StringRef name);
void setResultName(mlir::FunctionOpInterface fn, unsigned i, llvm::StringRef name);

/// `loom.updates`: result `i` is the new value of the input named `input`.
void setResultUpdates(mlir::FunctionOpInterface fn, unsigned i, llvm::StringRef input);

/// `loom.microbatch`: the microbatch an op of the training step computes.
std::optional<int64_t> getMicrobatch(mlir::Operation *op);
void setMicrobatch(mlir::Operation *op, int64_t microbatch);

/// `loom.backward`: which gradient a backward op computes; nullopt on a
/// forward op. Setting it needs the loom dialect loaded.
std::optional<BackwardKind> getBackwardKind(mlir::Operation *op);
bool isBackward(mlir::Operation *op);
void setBackwardKind(mlir::Operation *op, BackwardKind kind);

/// `loom.stream`: the stream an op runs on once lowered (null: the default).
mlir::StringAttr getStream(mlir::Operation *op);
void setStream(mlir::Operation *op, llvm::StringRef stream);

/// `loom.host_copy`: an rt.copy that goes on the host-copy stream.
bool isHostCopy(mlir::Operation *op);

/// `loom.memory`: what an rt.alloc holds, by the op that writes it:
/// "activation" (a forward value), "activation_grad", "weight_grad",
/// "workspace" (a kernel's scratch), "communication" (a collective's
/// result) or "step" (the rest: loss, norms, the optimizer's work). For the
/// memory breakdown in loom-inspect.
inline constexpr llvm::StringLiteral kMemoryCategories[] = {
    "activation", "activation_grad", "weight_grad", "workspace", "communication", "step"};

} // namespace loom

#endif
