#ifndef LOOM_PASSES_LOWERING_EXECUTABLEEMITTER_H
#define LOOM_PASSES_LOWERING_EXECUTABLEEMITTER_H

#include "runtime/executable/Executable.h"

#include "mlir/IR/BuiltinOps.h"

namespace loom {

struct ExecutableMetadata {
  std::string modelName;
  std::string mode = "infer";
  std::string compileFlags;
};

/// Translates a module of planned, stream-assigned rt.programs (one per rank)
/// into the executable the runtime loads. Emits a diagnostic and fails on a
/// program that is not ready (an unplanned buffer, an unknown element type).
mlir::FailureOr<Executable> emitExecutable(mlir::ModuleOp module,
                                           const ExecutableMetadata &meta);

} // namespace loom

#endif
