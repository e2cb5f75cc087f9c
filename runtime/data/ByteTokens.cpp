#include "runtime/data/ByteTokens.h"

#include "runtime/support/AtomicFile.h"
#include "runtime/data/IndexedDataset.h"

#include <vector>

namespace loom {

namespace {

// Bytes converted per write, and between progress reports.
constexpr size_t kChunkBytes = 1 << 20;
constexpr uint64_t kProgressBytes = 64ull << 20;

bool isBlankLine(llvm::StringRef line) {
  return line.find_first_not_of(" \t\r\n") == llvm::StringRef::npos;
}

} // namespace

llvm::Error forEachDocument(llvm::StringRef text,
                            llvm::function_ref<llvm::Error(llvm::StringRef)> onDocument) {
  size_t documentStart = llvm::StringRef::npos;
  size_t lineStart = 0;
  while (lineStart < text.size()) {
    size_t newline = text.find('\n', lineStart);
    const size_t lineEnd = newline == llvm::StringRef::npos ? text.size() : newline + 1;
    const llvm::StringRef line = text.slice(lineStart, lineEnd);
    if (isBlankLine(line)) {
      if (documentStart != llvm::StringRef::npos) {
        if (llvm::Error err = onDocument(text.slice(documentStart, lineStart)))
          return err;
        documentStart = llvm::StringRef::npos;
      }
    } else if (documentStart == llvm::StringRef::npos) {
      documentStart = lineStart;
    }
    lineStart = lineEnd;
  }
  if (documentStart != llvm::StringRef::npos)
    return onDocument(text.substr(documentStart));
  return llvm::Error::success();
}

llvm::Expected<ByteTokenCounts> writeFlatByteTokens(llvm::StringRef text,
                                                    const std::string &path,
                                                    TokenDType dtype,
                                                    ProgressCallback progress) {
  if (dtype == TokenDType::I8)
    return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                   "'" + path + "': i8 tokens cannot hold bytes above 127");
  llvm::Expected<std::unique_ptr<AtomicFileWriter>> file = AtomicFileWriter::create(path);
  if (!file)
    return file.takeError();
  const size_t width = tokenDTypeSize(dtype);
  std::vector<uint8_t> chunk;
  uint64_t nextReport = kProgressBytes;
  for (size_t start = 0; start < text.size(); start += kChunkBytes) {
    const llvm::StringRef bytes = text.substr(start, kChunkBytes);
    // Little-endian and zero-extended: the byte, then width - 1 zero bytes.
    chunk.assign(bytes.size() * width, 0);
    for (size_t i = 0; i < bytes.size(); ++i)
      chunk[i * width] = static_cast<uint8_t>(bytes[i]);
    if (llvm::Error err = (*file)->write(chunk.data(), chunk.size()))
      return std::move(err);
    if (start + bytes.size() >= nextReport) {
      progress(start + bytes.size());
      nextReport += kProgressBytes;
    }
  }
  if (llvm::Error err = (*file)->commit())
    return std::move(err);
  return ByteTokenCounts{text.size(), 0};
}

llvm::Expected<ByteTokenCounts> writeMegatronByteTokens(llvm::StringRef text,
                                                        const std::string &prefix,
                                                        ProgressCallback progress) {
  llvm::Expected<std::unique_ptr<IndexedDatasetWriter>> writer =
      IndexedDatasetWriter::create(prefix, TokenDType::U16);
  if (!writer)
    return writer.takeError();
  uint64_t nextReport = kProgressBytes;
  llvm::Error err = forEachDocument(text, [&](llvm::StringRef document) -> llvm::Error {
    if (llvm::Error err = (*writer)->addByteDocument(llvm::ArrayRef<uint8_t>(
            reinterpret_cast<const uint8_t *>(document.data()), document.size())))
      return err;
    const uint64_t done = static_cast<uint64_t>(document.end() - text.begin());
    if (done >= nextReport) {
      progress(done);
      nextReport = done + kProgressBytes;
    }
    return llvm::Error::success();
  });
  if (err)
    return std::move(err);
  if ((*writer)->documentCount() == 0)
    return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                   "'" + prefix + "': the text has no documents (only "
                                                  "blank lines)");
  if (llvm::Error err = (*writer)->finish())
    return std::move(err);
  return ByteTokenCounts{(*writer)->tokenCount(), (*writer)->documentCount()};
}

} // namespace loom
