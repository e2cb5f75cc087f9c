// ONNX models (frontend/onnx): loom-compile model.onnx. The input is the
// model file's bytes (protobuf), written to a scratch directory because the
// importer reads a path (and resolves external data beside it).

#include "fuzz/FuzzMlir.h"
#include "fuzz/FuzzSupport.h"
#include "frontend/onnx/OnnxImporter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext &context = loom::fuzz::loomContext();
  const std::string path = loom::fuzz::scratchDir() + "/model.onnx";
  loom::fuzz::writeFile(path, data, size);
  loom::ImportOptions options;
  mlir::OwningOpRef<mlir::ModuleOp> module = loom::importOnnxModel(&context, path, options);
  (void)module;
  return 0;
}
