#ifndef LOOM_PASSES_LOWERING_PASSES_H
#define LOOM_PASSES_LOWERING_PASSES_H

#include "dialects/nn/NNDialect.h"
#include "dialects/rt/RtDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom {
#define GEN_PASS_DECL
#include "passes/lowering/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/lowering/Passes.h.inc"
} // namespace loom

#endif
