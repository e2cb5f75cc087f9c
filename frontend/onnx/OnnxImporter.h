#ifndef LOOM_FRONTEND_ONNX_ONNXIMPORTER_H
#define LOOM_FRONTEND_ONNX_ONNXIMPORTER_H

#include "frontend/common/ImportOptions.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace loom {

/// Imports an ONNX model (default domain, opsets 13-24, weights inline or as
/// external data beside the file) into a module holding `func.func @main`
/// over nn ops. Graph inputs and outputs become arguments and results named
/// by `loom.name`; initializers become named parameters carrying their
/// weights. Problems (unparsable file, unsupported operator, attribute or
/// type, unfixed symbolic dimension) are emitted as one diagnostic naming the
/// node, the operator and the opset; the result is then null.
mlir::OwningOpRef<mlir::ModuleOp> importOnnxModel(mlir::MLIRContext *context,
                                                  llvm::StringRef path,
                                                  const ImportOptions &options);

} // namespace loom

#endif
