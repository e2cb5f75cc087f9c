#ifndef LOOM_PASSES_TRAINING_LAYERS_H
#define LOOM_PASSES_TRAINING_LAYERS_H

// Which transformer layer each op of a function belongs to: what pipeline
// partitioning splits by and full recompute recomputes by.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

namespace loom {

struct LayerAssignment {
  /// Parameters by the numbered block of their module path (or the layer
  /// index in their name); other ops by the deepest layer among their
  /// operands. -1 is the prologue (the embedding), numLayers the epilogue
  /// (the final norm, the head). Unnumbered parameters used amid the layers
  /// (a rotary table) have no entry.
  llvm::DenseMap<mlir::Operation *, int64_t> layer;
  int64_t numLayers = 0;
  /// Parameters whose layer came from their name (no module path).
  int64_t byName = 0;
};

/// Fails, with an error naming `purpose` ("partition"), when no parameter
/// lies in a numbered layer.
mlir::FailureOr<LayerAssignment> assignLayers(mlir::func::FuncOp func, llvm::StringRef purpose);

} // namespace loom

#endif
