// .npy files (runtime/support/Npy): what loom-run --input/--expect and .npy
// token files read. A file that parses must survive a write/read round trip
// unchanged.

#include "fuzz/FuzzSupport.h"
#include "runtime/support/Npy.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::Expected<NpyArray> array = parseNpy(data, size, "fuzz.npy");
  if (!fuzz::succeeded(array))
    return 0;
  LOOM_FUZZ_CHECK(array->numElements() >= 0);
  LOOM_FUZZ_CHECK(array->data.size() ==
                  static_cast<size_t>(array->numElements()) * npyKindSize(array->kind));
  llvm::Expected<std::vector<uint8_t>> bytes = serializeNpy(*array);
  if (!fuzz::succeeded(bytes))
    return 0;
  llvm::Expected<NpyArray> again = parseNpy(bytes->data(), bytes->size(), "round-trip.npy");
  LOOM_FUZZ_CHECK(again);
  LOOM_FUZZ_CHECK(again->kind == array->kind && again->shape == array->shape &&
                  again->data == array->data);
  return 0;
}
