// .pt2 archives (frontend/torch_export) by member: the model JSON, the
// weights and constants configs and the payloads, packed into a valid zip by
// the harness so every mutation reaches the JSON readers and the payload
// checks. The input is a list of members, each introduced by a line
//
//   @@ NAME
//
// (the first at the very start, the others after a newline), its bytes up to
// the next such line. fuzz/pt2-members.py makes seeds from .pt2 files.

#include "fuzz/FuzzMlir.h"
#include "fuzz/FuzzSupport.h"
#include "frontend/torch_export/TorchExportImporter.h"

#include "llvm/ADT/StringRef.h"

#include <zip.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef input(reinterpret_cast<const char *>(data), size);
  if (!input.consume_front("@@ "))
    return 0;
  const std::string path = loom::fuzz::scratchDir() + "/model.pt2";
  int error = 0;
  zip_t *archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  LOOM_FUZZ_CHECK(archive);
  while (!input.empty()) {
    auto [member, rest] = input.split("\n@@ ");
    auto [name, bytes] = member.split('\n');
    input = rest;
    if (name.empty())
      continue;
    zip_source_t *source = zip_source_buffer(archive, bytes.data(), bytes.size(), 0);
    LOOM_FUZZ_CHECK(source);
    // Two members of one name: the last wins, as a mutation would want.
    zip_int64_t index =
        zip_file_add(archive, name.str().c_str(), source, ZIP_FL_OVERWRITE | ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(source);
      continue;
    }
    zip_set_file_compression(archive, index, ZIP_CM_STORE, 0);
  }
  if (zip_close(archive) != 0) {
    zip_discard(archive);
    return 0;
  }
  mlir::MLIRContext &context = loom::fuzz::loomContext();
  loom::ImportOptions options;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      loom::importTorchExportModel(&context, path, options);
  (void)module;
  return 0;
}
