#ifndef LOOM_PASSES_SHARDING_PASSES_H
#define LOOM_PASSES_SHARDING_PASSES_H

#include "dialects/dist/DistDialect.h"
#include "dialects/loom/LoomDialect.h"
#include "dialects/pipe/PipeDialect.h"
#include "dialects/nn/NNDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom {
#define GEN_PASS_DECL
#include "passes/sharding/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/sharding/Passes.h.inc"
} // namespace loom

#endif
