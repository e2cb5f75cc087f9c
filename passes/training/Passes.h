#ifndef LOOM_PASSES_TRAINING_PASSES_H
#define LOOM_PASSES_TRAINING_PASSES_H

#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom {
#define GEN_PASS_DECL
#include "passes/training/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/training/Passes.h.inc"

/// Replaces every nn.stop_gradient under `root` by its input.
void stripStopGradients(mlir::Operation *root);
} // namespace loom

#endif
