#ifndef LOOM_FRONTEND_MODELFILE_H
#define LOOM_FRONTEND_MODELFILE_H

// A model file as the tools take it: .pt2 (torch.export), .onnx, or nn IR in
// .mlir, by its extension.

#include "frontend/common/ImportOptions.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

#include <string>

namespace loom {

/// Reads `path` into a module of `context`. On failure returns null and
/// either sets `error` to a one-line message (a missing file, an unknown
/// extension) or leaves it empty when a diagnostic already said what is
/// wrong (through `sourceMgr`'s handler for .mlir, the importers' own).
mlir::OwningOpRef<mlir::ModuleOp> loadModelFile(mlir::MLIRContext &context,
                                                llvm::SourceMgr &sourceMgr,
                                                const std::string &path,
                                                const ImportOptions &options, std::string &error);

} // namespace loom

#endif
