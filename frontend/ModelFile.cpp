// loadModelFile: one entry for every model format the tools read.

#include "frontend/ModelFile.h"

#ifdef LOOM_HAVE_ONNX_IMPORTER
#include "frontend/onnx/OnnxImporter.h"
#endif
#ifdef LOOM_HAVE_TORCH_EXPORT_IMPORTER
#include "frontend/torch_export/TorchExportImporter.h"
#endif
#include "runtime/support/UserFile.h"

#include "mlir/Parser/Parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace loom {

mlir::OwningOpRef<mlir::ModuleOp> loadModelFile(mlir::MLIRContext &context,
                                                llvm::SourceMgr &sourceMgr,
                                                const std::string &path,
                                                const ImportOptions &options, std::string &error) {
  error.clear();
  if (!llvm::sys::fs::exists(path)) {
    error = "cannot read '" + path + "': no such file";
    return nullptr;
  }
  if (llvm::Error err = checkRegularFile(path)) {
    error = "cannot read " + llvm::toString(std::move(err));
    return nullptr;
  }
  std::string extension = llvm::sys::path::extension(path).lower();
  if (extension == ".mlir") {
    auto file = openRegularFile(path, /*requiresNullTerminator=*/true);
    if (!file) {
      error = "cannot read " + llvm::toString(file.takeError());
      return nullptr;
    }
    if (llvm::Error err = checkNestingDepth((*file)->getBuffer(), NestingSyntax::Mlir, path)) {
      error = llvm::toString(std::move(err));
      return nullptr;
    }
    sourceMgr.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
    return mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
  }
#ifdef LOOM_HAVE_ONNX_IMPORTER
  if (extension == ".onnx")
    return importOnnxModel(&context, path, options);
#endif
#ifdef LOOM_HAVE_TORCH_EXPORT_IMPORTER
  if (extension == ".pt2")
    return importTorchExportModel(&context, path, options);
#endif
  error = "'" + path + "': unsupported model format '" + extension +
          "' (expected .onnx, .pt2 or .mlir)";
  return nullptr;
}

} // namespace loom
