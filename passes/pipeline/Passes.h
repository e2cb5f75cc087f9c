#ifndef LOOM_PASSES_PIPELINE_PASSES_H
#define LOOM_PASSES_PIPELINE_PASSES_H

#include "dialects/dist/DistDialect.h"
#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNDialect.h"
#include "dialects/pipe/PipeDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom {
#define GEN_PASS_DECL
#include "passes/pipeline/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/pipeline/Passes.h.inc"
} // namespace loom

#endif
