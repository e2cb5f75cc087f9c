#ifndef LOOM_RUNTIME_DATA_INDEXEDDATASET_H
#define LOOM_RUNTIME_DATA_INDEXEDDATASET_H

// Megatron-LM's indexed dataset ("mmap" implementation): PREFIX.bin holds the
// tokens of every sequence back to back; PREFIX.idx describes them. The index,
// all integers little-endian:
//
//   "MMIDIDX\0\0"          9 bytes of magic
//   version                u64, 1
//   dtype code             u8: 1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16
//   sequence count S       u64
//   document count D       u64 (entries of the document index: documents + 1)
//   sizes                  i32[S]: tokens per sequence
//   pointers               i64[S]: byte offset of each sequence in .bin
//   document index         i64[D]: sequence index where each document starts,
//                          0 first and S last
//   (multimodal datasets append i8[S] sequence modes; they are accepted and
//   ignored)
//
// Megatron's writer lays the sequences out contiguously in order, so Loom
// requires exactly that (pointer[i] = sum of the sizes before i, times the
// token size; .bin exactly as long as all sequences): anything else is a
// damaged or foreign file, and the token stream is then simply all of .bin.

#include "runtime/support/AtomicFile.h"
#include "runtime/data/TokenCorpus.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace loom {

/// Megatron's dtype code for `type`; none for u32, which Megatron lacks.
std::optional<uint8_t> megatronDTypeCode(TokenDType type);

/// What a valid index says.
struct IndexedDatasetSummary {
  TokenDType dtype = TokenDType::U16;
  uint64_t sequenceCount = 0;
  uint64_t documentCount = 0; // documents, not entries of the document index
  uint64_t tokenCount = 0;
};

/// Checks every field of the index bytes `index` (read from `indexName`)
/// against each other and against the size of the data file `binName`.
llvm::Expected<IndexedDatasetSummary>
checkIndexedDatasetIndex(llvm::ArrayRef<uint8_t> index, uint64_t binSize,
                         const std::string &indexName, const std::string &binName);

/// Writes PREFIX.bin and PREFIX.idx, one sequence per document, streaming the
/// tokens. Both files appear only at finish() (atomically, .bin first, so a
/// reader never pairs a new index with an old, shorter .bin unnoticed).
class IndexedDatasetWriter {
public:
  static llvm::Expected<std::unique_ptr<IndexedDatasetWriter>>
  create(const std::string &prefix, TokenDType dtype);

  /// Appends one document. Each token must fit `dtype`.
  llvm::Error addDocument(llvm::ArrayRef<int64_t> tokens);
  /// Appends one document of byte tokens (token = byte value).
  llvm::Error addByteDocument(llvm::ArrayRef<uint8_t> bytes);
  uint64_t documentCount() const { return sizes_.size(); }
  uint64_t tokenCount() const { return tokenCount_; }
  /// Writes the index and moves both files into place.
  llvm::Error finish();

private:
  IndexedDatasetWriter(std::string prefix, TokenDType dtype,
                       std::unique_ptr<AtomicFileWriter> bin);
  llvm::Error recordSize(uint64_t tokens);

  std::string prefix_;
  TokenDType dtype_;
  std::unique_ptr<AtomicFileWriter> bin_;
  std::vector<int32_t> sizes_;
  uint64_t tokenCount_ = 0;
  std::vector<uint8_t> scratch_;
};

} // namespace loom

#endif
