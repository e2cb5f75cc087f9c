// .loomx executables (runtime/executable): what loom-run and loom-inspect
// load. A file that loads must verify, list (loom-inspect's text and JSON)
// and serialize back to a file that loads again.

#include "fuzz/FuzzSupport.h"
#include "runtime/executable/Executable.h"
#include "runtime/executable/ExecutableListing.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::Expected<Executable> exe = loadExecutable(data, size);
  if (!fuzz::succeeded(exe))
    return 0;
  // loadExecutable promises a fully verified executable.
  LOOM_FUZZ_CHECK(fuzz::succeeded(verifyExecutable(*exe)));
  std::string text;
  llvm::raw_string_ostream os(text);
  printExecutable(*exe, os);
  llvm::json::Value json = executableToJson(*exe);
  os << json;
  for (const RankProgram &program : exe->ranks)
    (void)summarizeMemoryPlan(program);
  std::vector<uint8_t> bytes = serializeExecutable(*exe);
  llvm::Expected<Executable> again = loadExecutable(bytes.data(), bytes.size());
  LOOM_FUZZ_CHECK(again);
  LOOM_FUZZ_CHECK(again->parameters.size() == exe->parameters.size() &&
                  again->ranks.size() == exe->ranks.size() &&
                  again->scheduleCsv == exe->scheduleCsv);
  return 0;
}
