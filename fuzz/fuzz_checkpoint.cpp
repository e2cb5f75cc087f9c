// Training checkpoints (runtime/checkpoint): loom-run --resume reads a step
// directory's index.json, then each rank file it lists (checked by size and
// SHA-256), then places the shards. The input is
//
//   index.json text
//   "\n--rank-00000.safetensors--\n"   (optional)
//   that rank file's bytes
//
// and in the index text "@SHA@" and "@BYTES@" stand for the rank file's real
// SHA-256 and size, so mutations reach past the checksum to the shards.

#include "fuzz/FuzzSupport.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Sha256.h"

#include "llvm/ADT/StringRef.h"

#include <sys/stat.h>

using namespace loom;

static std::string replaceAll(llvm::StringRef text, llvm::StringRef from, llvm::StringRef to) {
  std::string out;
  while (true) {
    size_t at = text.find(from);
    out += text.take_front(at).str();
    if (at == llvm::StringRef::npos)
      return out;
    out += to.str();
    text = text.drop_front(at + from.size());
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string stepDir = [] {
    std::string dir = fuzz::scratchDir() + "/step-000001";
    mkdir(dir.c_str(), 0700);
    return dir;
  }();
  llvm::StringRef input(reinterpret_cast<const char *>(data), size);
  auto [index, rankFile] = input.split("\n--rank-00000.safetensors--\n");
  const std::string sha = Sha256::hexOf(reinterpret_cast<const uint8_t *>(rankFile.data()),
                                        rankFile.size());
  std::string indexText = replaceAll(index, "@SHA@", sha);
  indexText = replaceAll(indexText, "@BYTES@", std::to_string(rankFile.size()));
  fuzz::writeFile(stepDir + "/index.json", indexText.data(), indexText.size());
  fuzz::writeFile(stepDir + "/rank-00000.safetensors", rankFile.data(), rankFile.size());
  llvm::Expected<LoadedCheckpoint> checkpoint = loadCheckpoint(stepDir);
  if (!fuzz::succeeded(checkpoint))
    return 0;
  for (const auto &[name, tensor] : checkpoint->tensors) {
    LOOM_FUZZ_CHECK(name == tensor.name);
    std::optional<uint64_t> bytes = tensorByteSize(tensor.dtype, tensor.shape);
    LOOM_FUZZ_CHECK(bytes && *bytes == tensor.data.size());
  }
  // What loom-run does next: check it against the executable's parameters.
  std::vector<TensorSpec> expected;
  for (const auto &[name, tensor] : checkpoint->tensors)
    expected.push_back({name, tensor.dtype, tensor.shape});
  LOOM_FUZZ_CHECK(fuzz::succeeded(checkMatches(*checkpoint, expected)));
  return 0;
}
