#include "runtime/data/IndexedDataset.h"

#include "llvm/Support/Endian.h"

#include <cstring>
#include <limits>

namespace loom {

namespace {

constexpr char kMagic[] = "MMIDIDX\0\0";
constexpr size_t kMagicSize = 9;
constexpr uint64_t kVersion = 1;
// magic, version, dtype code, sequence count, document-index entry count.
constexpr size_t kHeaderSize = kMagicSize + 8 + 1 + 8 + 8;

struct MegatronCode {
  uint8_t code;
  std::optional<TokenDType> type; // none: a float dtype, not token ids
  std::string_view name;
};
constexpr MegatronCode kCodes[] = {
    {1, TokenDType::U8, "uint8"},   {2, TokenDType::I8, "int8"},
    {3, TokenDType::I16, "int16"},  {4, TokenDType::I32, "int32"},
    {5, TokenDType::I64, "int64"},  {6, std::nullopt, "float64"},
    {7, std::nullopt, "float32"},   {8, TokenDType::U16, "uint16"},
};

llvm::Error indexError(const std::string &name, const llvm::Twine &problem) {
  return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                 "'" + name + "': " + problem);
}

uint64_t readU64(const uint8_t *at) { return llvm::support::endian::read64le(at); }
int64_t readI64(const uint8_t *at) {
  return static_cast<int64_t>(llvm::support::endian::read64le(at));
}
int32_t readI32(const uint8_t *at) {
  return static_cast<int32_t>(llvm::support::endian::read32le(at));
}

void appendU64(std::vector<uint8_t> &bytes, uint64_t value) {
  uint8_t le[8];
  llvm::support::endian::write64le(le, value);
  bytes.insert(bytes.end(), le, le + 8);
}

} // namespace

std::optional<uint8_t> megatronDTypeCode(TokenDType type) {
  for (const MegatronCode &code : kCodes)
    if (code.type == type)
      return code.code;
  return std::nullopt;
}

llvm::Expected<IndexedDatasetSummary>
checkIndexedDatasetIndex(llvm::ArrayRef<uint8_t> index, uint64_t binSize,
                         const std::string &indexName, const std::string &binName) {
  const uint64_t size = index.size();
  if (size < kHeaderSize)
    return indexError(indexName, "truncated: " + llvm::Twine(size) +
                                     " bytes, the header alone takes " +
                                     llvm::Twine(kHeaderSize));
  const uint8_t *at = index.data();
  if (std::memcmp(at, kMagic, kMagicSize) != 0)
    return indexError(indexName, "not a Megatron indexed dataset index (no MMIDIDX magic)");
  at += kMagicSize;
  const uint64_t version = readU64(at);
  at += 8;
  if (version != kVersion)
    return indexError(indexName, "index version " + llvm::Twine(version) +
                                     " is not supported (Loom reads version 1)");
  const uint8_t code = *at++;
  const MegatronCode *dtype = nullptr;
  for (const MegatronCode &candidate : kCodes)
    if (candidate.code == code)
      dtype = &candidate;
  if (!dtype)
    return indexError(indexName, "unknown dtype code " + llvm::Twine(unsigned(code)));
  if (!dtype->type)
    return indexError(indexName, "holds " + llvm::Twine(dtype->name) +
                                     " values; token ids must be integers");
  const uint64_t itemSize = tokenDTypeSize(*dtype->type);
  const uint64_t sequenceCount = readU64(at);
  at += 8;
  const uint64_t documentEntries = readU64(at);
  at += 8;

  // Bound the counts by the file before multiplying, so a damaged count
  // cannot overflow the expected size.
  const uint64_t body = size - kHeaderSize;
  if (sequenceCount > body / 12 || documentEntries > body / 8)
    return indexError(indexName, "truncated: it declares " + llvm::Twine(sequenceCount) +
                                     " sequences and " + llvm::Twine(documentEntries) +
                                     " document-index entries but has " +
                                     llvm::Twine(size) + " bytes");
  const uint64_t expected = kHeaderSize + 12 * sequenceCount + 8 * documentEntries;
  // Multimodal datasets append one i8 mode per sequence.
  if (size != expected && size != expected + sequenceCount)
    return indexError(indexName,
                      (size < expected ? "truncated: " : "has trailing bytes: ") +
                          llvm::Twine(size) + " bytes where " + llvm::Twine(sequenceCount) +
                          " sequences and " + llvm::Twine(documentEntries) +
                          " document-index entries need " + llvm::Twine(expected));

  const uint8_t *sizes = at;
  const uint8_t *pointers = sizes + 4 * sequenceCount;
  const uint8_t *documents = pointers + 8 * sequenceCount;
  uint64_t nextByte = 0;
  for (uint64_t i = 0; i < sequenceCount; ++i) {
    const int32_t tokens = readI32(sizes + 4 * i);
    if (tokens < 0)
      return indexError(indexName, "sequence " + llvm::Twine(i) + " has a negative size (" +
                                       llvm::Twine(tokens) + ")");
    const int64_t pointer = readI64(pointers + 8 * i);
    if (pointer < 0 || static_cast<uint64_t>(pointer) != nextByte)
      return indexError(indexName, "sequence " + llvm::Twine(i) + " starts at byte " +
                                       llvm::Twine(pointer) + " of the data, expected " +
                                       llvm::Twine(nextByte) +
                                       " (right after the sequence before it)");
    // Cannot overflow: sizes are below 2^31 and there are fewer than 2^61.
    nextByte += static_cast<uint64_t>(tokens) * itemSize;
  }
  if (nextByte != binSize)
    return indexError(indexName, "its sequences take " + llvm::Twine(nextByte) +
                                     " bytes but '" + binName + "' has " +
                                     llvm::Twine(binSize));

  if (documentEntries == 0)
    return indexError(indexName, "the document index is empty (it must start with 0)");
  int64_t previous = 0;
  for (uint64_t i = 0; i < documentEntries; ++i) {
    const int64_t start = readI64(documents + 8 * i);
    if ((i == 0 && start != 0) || start < previous ||
        static_cast<uint64_t>(start) > sequenceCount)
      return indexError(indexName, "document-index entry " + llvm::Twine(i) + " is " +
                                       llvm::Twine(start) +
                                       "; entries must rise from 0 to the sequence count " +
                                       llvm::Twine(sequenceCount));
    previous = start;
  }
  if (static_cast<uint64_t>(previous) != sequenceCount)
    return indexError(indexName, "the document index ends at sequence " +
                                     llvm::Twine(previous) + ", not at the sequence count " +
                                     llvm::Twine(sequenceCount));

  IndexedDatasetSummary summary;
  summary.dtype = *dtype->type;
  summary.sequenceCount = sequenceCount;
  summary.documentCount = documentEntries - 1;
  summary.tokenCount = binSize / itemSize;
  return summary;
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenDType dtype,
                                           std::unique_ptr<AtomicFileWriter> bin)
    : prefix_(std::move(prefix)), dtype_(dtype), bin_(std::move(bin)) {}

llvm::Expected<std::unique_ptr<IndexedDatasetWriter>>
IndexedDatasetWriter::create(const std::string &prefix, TokenDType dtype) {
  if (!megatronDTypeCode(dtype))
    return indexError(prefix + ".idx", "Megatron datasets cannot hold " +
                                           llvm::Twine(tokenDTypeName(dtype)) + " tokens");
  llvm::Expected<std::unique_ptr<AtomicFileWriter>> bin =
      AtomicFileWriter::create(prefix + ".bin");
  if (!bin)
    return bin.takeError();
  return std::unique_ptr<IndexedDatasetWriter>(
      new IndexedDatasetWriter(prefix, dtype, std::move(*bin)));
}

llvm::Error IndexedDatasetWriter::recordSize(uint64_t tokens) {
  if (tokens > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
    return indexError(prefix_ + ".idx", "document " + llvm::Twine(sizes_.size()) + " has " +
                                            llvm::Twine(tokens) +
                                            " tokens; Megatron's index holds at most "
                                            "2^31-1 per sequence");
  sizes_.push_back(static_cast<int32_t>(tokens));
  tokenCount_ += tokens;
  return llvm::Error::success();
}

llvm::Error IndexedDatasetWriter::addDocument(llvm::ArrayRef<int64_t> tokens) {
  if (llvm::Error err = recordSize(tokens.size()))
    return err;
  const size_t width = tokenDTypeSize(dtype_);
  const bool isSigned = dtype_ == TokenDType::I8 || dtype_ == TokenDType::I16 ||
                        dtype_ == TokenDType::I32 || dtype_ == TokenDType::I64;
  const int64_t low = isSigned && width < 8 ? -(int64_t(1) << (8 * width - 1))
                      : isSigned            ? std::numeric_limits<int64_t>::min()
                                            : 0;
  const int64_t high = width == 8 ? std::numeric_limits<int64_t>::max()
                       : isSigned ? (int64_t(1) << (8 * width - 1)) - 1
                                  : (int64_t(1) << (8 * width)) - 1;
  scratch_.resize(tokens.size() * width);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < low || tokens[i] > high)
      return indexError(prefix_ + ".bin", "token " + llvm::Twine(tokens[i]) +
                                              " does not fit " +
                                              llvm::Twine(tokenDTypeName(dtype_)));
    // Little-endian: the low `width` bytes of the two's-complement value.
    const uint64_t bits = static_cast<uint64_t>(tokens[i]);
    for (size_t b = 0; b < width; ++b)
      scratch_[i * width + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
  return bin_->write(scratch_.data(), scratch_.size());
}

llvm::Error IndexedDatasetWriter::addByteDocument(llvm::ArrayRef<uint8_t> bytes) {
  if (llvm::Error err = recordSize(bytes.size()))
    return err;
  const size_t width = tokenDTypeSize(dtype_);
  if (width == 1)
    return bin_->write(bytes.data(), bytes.size());
  scratch_.assign(bytes.size() * width, 0);
  for (size_t i = 0; i < bytes.size(); ++i)
    scratch_[i * width] = bytes[i];
  return bin_->write(scratch_.data(), scratch_.size());
}

llvm::Error IndexedDatasetWriter::finish() {
  std::vector<uint8_t> index(kMagic, kMagic + kMagicSize);
  appendU64(index, kVersion);
  index.push_back(*megatronDTypeCode(dtype_));
  appendU64(index, sizes_.size());
  appendU64(index, sizes_.size() + 1);
  index.reserve(index.size() + 20 * sizes_.size() + 8);
  for (int32_t tokens : sizes_) {
    uint8_t le[4];
    llvm::support::endian::write32le(le, static_cast<uint32_t>(tokens));
    index.insert(index.end(), le, le + 4);
  }
  const uint64_t width = tokenDTypeSize(dtype_);
  uint64_t pointer = 0;
  for (int32_t tokens : sizes_) {
    appendU64(index, pointer);
    pointer += static_cast<uint64_t>(tokens) * width;
  }
  // One sequence per document: document d starts at sequence d.
  for (uint64_t d = 0; d <= sizes_.size(); ++d)
    appendU64(index, d);

  llvm::Expected<std::unique_ptr<AtomicFileWriter>> idx =
      AtomicFileWriter::create(prefix_ + ".idx");
  if (!idx)
    return idx.takeError();
  if (llvm::Error err = (*idx)->write(index.data(), index.size()))
    return err;
  if (llvm::Error err = bin_->commit())
    return err;
  return (*idx)->commit();
}

} // namespace loom
