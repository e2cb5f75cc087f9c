// Megatron-LM .idx index files (runtime/data/IndexedDataset): loom-run
// --data PREFIX. The input is the .bin file's size (8 bytes, little-endian)
// followed by the .idx bytes. An index that checks against a small .bin is
// then opened from disk through openMegatronDataset and every token read.

#include "fuzz/FuzzSupport.h"
#include "runtime/data/IndexedDataset.h"
#include "runtime/data/TokenCorpus.h"

#include <cstring>

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 8)
    return 0;
  uint64_t binSize = 0;
  for (int i = 7; i >= 0; --i)
    binSize = (binSize << 8) | data[i];
  llvm::ArrayRef<uint8_t> index(data + 8, size - 8);
  llvm::Expected<IndexedDatasetSummary> summary =
      checkIndexedDatasetIndex(index, binSize, "fuzz.idx", "fuzz.bin");
  if (!fuzz::succeeded(summary))
    return 0;
  LOOM_FUZZ_CHECK(summary->tokenCount * tokenDTypeSize(summary->dtype) == binSize);
  if (binSize > (1u << 16))
    return 0;
  // The same index on disk, beside a .bin of that size (tokens 0, 1, 2, ...).
  const std::string prefix = fuzz::scratchDir() + "/data";
  std::vector<uint8_t> bin(binSize);
  for (size_t i = 0; i < bin.size(); ++i)
    bin[i] = static_cast<uint8_t>(i % 7);
  fuzz::writeFile(prefix + ".bin", bin.data(), bin.size());
  fuzz::writeFile(prefix + ".idx", index.data(), index.size());
  llvm::Expected<TokenCorpus> corpus = openMegatronDataset(prefix);
  LOOM_FUZZ_CHECK(corpus);
  LOOM_FUZZ_CHECK(corpus->size() == summary->tokenCount);
  std::vector<int64_t> tokens(corpus->size());
  (void)fuzz::succeeded(corpus->read(0, tokens, /*vocabSize=*/0));
  return 0;
}
