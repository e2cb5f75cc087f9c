#ifndef LOOM_RUNTIME_DATA_TOKENCORPUS_H
#define LOOM_RUNTIME_DATA_TOKENCORPUS_H

// A training corpus as one stream of token ids: the documents of a file
// concatenated in file order, as Megatron-LM's GPT dataset sees them. Files
// are memory-mapped where the format allows (flat token files, Megatron's
// .bin), so a corpus larger than memory costs only address space.

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

/// How token ids are stored on disk (little-endian).
enum class TokenDType : uint8_t { U8, I8, I16, U16, I32, U32, I64 };

size_t tokenDTypeSize(TokenDType type);
/// "u8", "i8", "i16", "u16", "i32", "u32", "i64".
std::string_view tokenDTypeName(TokenDType type);
/// Accepts tokenDTypeName's spellings and NumPy's ("uint16", "int32", ...).
std::optional<TokenDType> parseTokenDType(std::string_view name);

class TokenCorpus {
public:
  /// Tokens in the stream.
  uint64_t size() const { return tokenCount_; }
  TokenDType dtype() const { return dtype_; }
  /// The file the tokens come from, for messages.
  const std::string &name() const { return name_; }
  /// Documents in the file, where the format records them (Megatron).
  std::optional<uint64_t> documentCount() const { return documentCount_; }

  /// Copies tokens [start, start + out.size()) into `out`. Each must lie in
  /// [0, vocabSize) when vocabSize > 0 (else only be non-negative); the first
  /// that does not is an error naming the file and the token's position.
  llvm::Error read(uint64_t start, llvm::MutableArrayRef<int64_t> out,
                   int64_t vocabSize) const;

  /// A corpus over tokens held in memory (tests, .npy arrays).
  static TokenCorpus fromBytes(std::vector<uint8_t> bytes, TokenDType dtype,
                               std::string name,
                               std::optional<uint64_t> documentCount = std::nullopt);

private:
  TokenCorpus() = default;
  friend llvm::Expected<TokenCorpus> openFlatTokenFile(const std::string &, TokenDType);
  friend llvm::Expected<TokenCorpus> openMegatronDataset(const std::string &);

  std::unique_ptr<llvm::MemoryBuffer> mapped_;
  std::vector<uint8_t> owned_;
  const uint8_t *tokens_ = nullptr;
  uint64_t tokenCount_ = 0;
  TokenDType dtype_ = TokenDType::U16;
  std::string name_;
  std::optional<uint64_t> documentCount_;
};

/// Raw little-endian tokens of `dtype`, nothing else (the file's size must be
/// a multiple of the token size).
llvm::Expected<TokenCorpus> openFlatTokenFile(const std::string &path, TokenDType dtype);
/// A 1-D .npy array of u1/u2/u4/i4/i8 elements.
llvm::Expected<TokenCorpus> openNpyTokenFile(const std::string &path);
/// Megatron-LM's indexed dataset PREFIX.bin + PREFIX.idx (see IndexedDataset.h).
llvm::Expected<TokenCorpus> openMegatronDataset(const std::string &prefix);

} // namespace loom

#endif
