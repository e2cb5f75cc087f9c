// .mlir files as loom-compile and loom-opt parse them: Loom's dialects (nn,
// dist, pipe, rt) registered, each op's verifier run. A module that parses
// and verifies is printed (Loom's custom printers) and parsed back.

#include "fuzz/FuzzMlir.h"
#include "fuzz/FuzzSupport.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext &context = loom::fuzz::loomContext();
  // MLIR's lexer needs the NUL after the text that a file read through
  // MemoryBuffer::getFile (as loom-compile and loom-opt do) has; the fuzzer's
  // bytes have none.
  const std::string source(reinterpret_cast<const char *>(data), size);
  llvm::StringRef text(source.c_str(), size);
  mlir::ParserConfig config(&context);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, config, "fuzz.mlir");
  if (!module)
    return 0;
  std::string printed;
  llvm::raw_string_ostream os(printed);
  module->print(os);
  os.flush();
  mlir::OwningOpRef<mlir::ModuleOp> again =
      mlir::parseSourceString<mlir::ModuleOp>(printed, config, "printed.mlir");
  (void)again;
  return 0;
}
