#ifndef LOOM_PASSES_FP8_PASSES_H
#define LOOM_PASSES_FP8_PASSES_H

#include "dialects/nn/NNDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom {
#define GEN_PASS_DECL
#include "passes/fp8/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/fp8/Passes.h.inc"
} // namespace loom

#endif
