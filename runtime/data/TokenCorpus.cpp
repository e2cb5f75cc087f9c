#include "runtime/data/TokenCorpus.h"

#include "runtime/data/IndexedDataset.h"
#include "runtime/support/UserFile.h"
#include "runtime/support/Npy.h"

#include "llvm/Support/Endian.h"

namespace loom {

namespace {

struct DTypeInfo {
  TokenDType type;
  std::string_view name;
  std::string_view numpyName;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {TokenDType::U8, "u8", "uint8", 1},    {TokenDType::I8, "i8", "int8", 1},
    {TokenDType::I16, "i16", "int16", 2},  {TokenDType::U16, "u16", "uint16", 2},
    {TokenDType::I32, "i32", "int32", 4},  {TokenDType::U32, "u32", "uint32", 4},
    {TokenDType::I64, "i64", "int64", 8},
};

const DTypeInfo &infoFor(TokenDType type) {
  for (const DTypeInfo &info : kDTypes)
    if (info.type == type)
      return info;
  return kDTypes[0]; // unreachable: every enumerator is in the table
}

llvm::Error corpusError(const std::string &name, const llvm::Twine &problem) {
  return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                 "'" + name + "': " + problem);
}

/// Maps `path` read-only; large files are mmapped rather than copied.
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> mapFile(const std::string &path) {
  // Devices and FIFOs are refused: /dev/zero has no end to read up to.
  return openRegularFile(path);
}

template <typename T>
llvm::Error readAs(const uint8_t *tokens, uint64_t start, llvm::MutableArrayRef<int64_t> out,
                   int64_t vocabSize, const std::string &name) {
  const uint8_t *at = tokens + start * sizeof(T);
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t token = static_cast<int64_t>(
        llvm::support::endian::read<T, llvm::endianness::little>(at + i * sizeof(T)));
    if (token < 0)
      return corpusError(name, "token " + llvm::Twine(token) + " at position " +
                                   llvm::Twine(start + i) + " is negative");
    if (vocabSize > 0 && token >= vocabSize)
      return corpusError(name, "token " + llvm::Twine(token) + " at position " +
                                   llvm::Twine(start + i) +
                                   " is not below the vocabulary size " +
                                   llvm::Twine(vocabSize));
    out[i] = token;
  }
  return llvm::Error::success();
}

} // namespace

size_t tokenDTypeSize(TokenDType type) { return infoFor(type).size; }
std::string_view tokenDTypeName(TokenDType type) { return infoFor(type).name; }

std::optional<TokenDType> parseTokenDType(std::string_view name) {
  for (const DTypeInfo &info : kDTypes)
    if (name == info.name || name == info.numpyName)
      return info.type;
  return std::nullopt;
}

llvm::Error TokenCorpus::read(uint64_t start, llvm::MutableArrayRef<int64_t> out,
                              int64_t vocabSize) const {
  if (start > tokenCount_ || out.size() > tokenCount_ - start)
    return corpusError(name_, "tokens [" + llvm::Twine(start) + ", " +
                                  llvm::Twine(start + out.size()) +
                                  ") are past the end of its " + llvm::Twine(tokenCount_) +
                                  " tokens");
  switch (dtype_) {
  case TokenDType::U8:
    return readAs<uint8_t>(tokens_, start, out, vocabSize, name_);
  case TokenDType::I8:
    return readAs<int8_t>(tokens_, start, out, vocabSize, name_);
  case TokenDType::I16:
    return readAs<int16_t>(tokens_, start, out, vocabSize, name_);
  case TokenDType::U16:
    return readAs<uint16_t>(tokens_, start, out, vocabSize, name_);
  case TokenDType::I32:
    return readAs<int32_t>(tokens_, start, out, vocabSize, name_);
  case TokenDType::U32:
    return readAs<uint32_t>(tokens_, start, out, vocabSize, name_);
  case TokenDType::I64:
    return readAs<int64_t>(tokens_, start, out, vocabSize, name_);
  }
  return corpusError(name_, "unknown token type"); // unreachable: all cases return
}

TokenCorpus TokenCorpus::fromBytes(std::vector<uint8_t> bytes, TokenDType dtype,
                                   std::string name, std::optional<uint64_t> documentCount) {
  TokenCorpus corpus;
  corpus.owned_ = std::move(bytes);
  corpus.tokens_ = corpus.owned_.data();
  corpus.tokenCount_ = corpus.owned_.size() / tokenDTypeSize(dtype);
  corpus.dtype_ = dtype;
  corpus.name_ = std::move(name);
  corpus.documentCount_ = documentCount;
  return corpus;
}

llvm::Expected<TokenCorpus> openFlatTokenFile(const std::string &path, TokenDType dtype) {
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> buffer = mapFile(path);
  if (!buffer)
    return buffer.takeError();
  const size_t bytes = (*buffer)->getBufferSize();
  const size_t width = tokenDTypeSize(dtype);
  if (bytes % width != 0)
    return corpusError(path, "its size, " + llvm::Twine(bytes) +
                                 " bytes, is not a multiple of the " +
                                 llvm::Twine(width) + "-byte " + tokenDTypeName(dtype) +
                                 " token");
  TokenCorpus corpus;
  corpus.tokens_ = reinterpret_cast<const uint8_t *>((*buffer)->getBufferStart());
  corpus.mapped_ = std::move(*buffer);
  corpus.tokenCount_ = bytes / width;
  corpus.dtype_ = dtype;
  corpus.name_ = path;
  return corpus;
}

llvm::Expected<TokenCorpus> openNpyTokenFile(const std::string &path) {
  llvm::Expected<NpyArray> array = readNpy(path);
  if (!array)
    return array.takeError();
  if (array->shape.size() != 1)
    return corpusError(path, "a token array must be 1-D, this one has " +
                                 llvm::Twine(array->shape.size()) + " dimensions");
  std::optional<TokenDType> dtype;
  switch (array->kind) {
  case NpyKind::U8:
    dtype = TokenDType::U8;
    break;
  case NpyKind::U16:
    dtype = TokenDType::U16;
    break;
  case NpyKind::U32:
    dtype = TokenDType::U32;
    break;
  case NpyKind::I32:
    dtype = TokenDType::I32;
    break;
  case NpyKind::I64:
    dtype = TokenDType::I64;
    break;
  default:
    break;
  }
  if (!dtype)
    return corpusError(path, "token ids must be integers (u1, u2, u4, i4 or i8), this "
                             "array holds '" +
                                 llvm::Twine(npyDescr(array->kind)) + "'");
  return TokenCorpus::fromBytes(std::move(array->data), *dtype, path);
}

llvm::Expected<TokenCorpus> openMegatronDataset(const std::string &prefix) {
  const std::string indexPath = prefix + ".idx";
  const std::string binPath = prefix + ".bin";
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> index = mapFile(indexPath);
  if (!index)
    return index.takeError();
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> bin = mapFile(binPath);
  if (!bin)
    return bin.takeError();
  llvm::ArrayRef<uint8_t> indexBytes(
      reinterpret_cast<const uint8_t *>((*index)->getBufferStart()),
      (*index)->getBufferSize());
  llvm::Expected<IndexedDatasetSummary> summary =
      checkIndexedDatasetIndex(indexBytes, (*bin)->getBufferSize(), indexPath, binPath);
  if (!summary)
    return summary.takeError();

  TokenCorpus corpus;
  corpus.tokens_ = reinterpret_cast<const uint8_t *>((*bin)->getBufferStart());
  corpus.mapped_ = std::move(*bin);
  corpus.tokenCount_ = summary->tokenCount;
  corpus.dtype_ = summary->dtype;
  corpus.name_ = binPath;
  corpus.documentCount_ = summary->documentCount;
  return corpus;
}

} // namespace loom
