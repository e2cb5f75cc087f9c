// .pt2 archives (frontend/torch_export) as raw bytes: the zip layer (libzip
// through Pt2Archive) and everything behind it. Mutating stored members
// mostly breaks their CRC, so fuzz_pt2 fuzzes the members themselves.

#include "fuzz/FuzzMlir.h"
#include "fuzz/FuzzSupport.h"
#include "frontend/torch_export/TorchExportImporter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext &context = loom::fuzz::loomContext();
  const std::string path = loom::fuzz::scratchDir() + "/model.pt2";
  loom::fuzz::writeFile(path, data, size);
  loom::ImportOptions options;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      loom::importTorchExportModel(&context, path, options);
  (void)module;
  return 0;
}
