#ifndef LOOM_FRONTEND_RAISING_PASSES_H
#define LOOM_FRONTEND_RAISING_PASSES_H

#include "dialects/nn/NNDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom {
#define GEN_PASS_DECL
#include "frontend/raising/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "frontend/raising/Passes.h.inc"

/// The nn phase after import: fold constant subgraphs, raise decomposed
/// patterns to Loom's high-level ops (unless `raise` is false),
/// canonicalize, and remove duplicates.
void buildRaisingPipeline(mlir::OpPassManager &pm, bool raise = true);
} // namespace loom

#endif
