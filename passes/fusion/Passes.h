#ifndef LOOM_PASSES_FUSION_PASSES_H
#define LOOM_PASSES_FUSION_PASSES_H

#include "dialects/rt/RtDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom {
#define GEN_PASS_DECL
#include "passes/fusion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/fusion/Passes.h.inc"
} // namespace loom

#endif
