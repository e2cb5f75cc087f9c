// safetensors files (runtime/checkpoint/Safetensors): loom-run --weights and
// every checkpoint rank file. A file that parses must lay out again and
// re-parse to the same tensors.

#include "fuzz/FuzzSupport.h"
#include "runtime/checkpoint/Safetensors.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::Expected<SafetensorsFile> file =
      parseSafetensors(llvm::ArrayRef<uint8_t>(data, size), "fuzz.safetensors");
  if (!fuzz::succeeded(file))
    return 0;
  for (const HostTensor &tensor : file->tensors) {
    std::optional<uint64_t> bytes = tensorByteSize(tensor.dtype, tensor.shape);
    LOOM_FUZZ_CHECK(bytes && *bytes == tensor.data.size());
  }
  // Write it again (the writer's checks may refuse what the reader accepts,
  // e.g. an empty name; that is an error, not a crash) and read that back.
  std::vector<HostTensorView> views = viewsOf(file->tensors);
  llvm::Expected<SafetensorsLayout> layout =
      layoutSafetensors(views, file->metadata, "round-trip.safetensors");
  if (!fuzz::succeeded(layout))
    return 0;
  std::vector<uint8_t> bytes = layout->header;
  for (size_t index : layout->dataOrder)
    bytes.insert(bytes.end(), views[index].data.begin(), views[index].data.end());
  LOOM_FUZZ_CHECK(bytes.size() == layout->header.size() + layout->dataBytes);
  llvm::Expected<SafetensorsFile> again = parseSafetensors(bytes, "round-trip.safetensors");
  LOOM_FUZZ_CHECK(again);
  LOOM_FUZZ_CHECK(again->metadata == file->metadata);
  LOOM_FUZZ_CHECK(again->tensors.size() == file->tensors.size());
  return 0;
}
