#ifndef LOOM_FRONTEND_TORCH_EXPORT_TORCHEXPORTIMPORTER_H
#define LOOM_FRONTEND_TORCH_EXPORT_TORCHEXPORTIMPORTER_H

#include "frontend/common/ImportOptions.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace loom {

/// Imports a `.pt2` archive written by `torch.export.save` (torch 2.5 and
/// newer) into a module holding `func.func @main` over nn ops. Parameters
/// and persistent buffers become nn.parameter under their fully-qualified
/// names with their weights; non-persistent buffers and lifted constants
/// become nn.constant. Problems (not a zip, unknown schema version,
/// unsupported operator or dtype) are emitted as one diagnostic naming the
/// node and the operator; the result is then null.
mlir::OwningOpRef<mlir::ModuleOp> importTorchExportModel(mlir::MLIRContext *context,
                                                         llvm::StringRef path,
                                                         const ImportOptions &options);

} // namespace loom

#endif
