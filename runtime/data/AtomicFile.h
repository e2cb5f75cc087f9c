#ifndef LOOM_RUNTIME_DATA_ATOMICFILE_H
#define LOOM_RUNTIME_DATA_ATOMICFILE_H

// A file written in pieces that appears under its final name only once it is
// complete and on disk: a temporary file in the same directory, fsync, rename.
// A crash or an error half-way leaves the previous file (or none), never a
// truncated one that a training run would read as data.

#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom {

class AtomicFileWriter {
public:
  /// Creates the temporary file next to `path`.
  static llvm::Expected<std::unique_ptr<AtomicFileWriter>> create(const std::string &path);
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter &) = delete;
  AtomicFileWriter &operator=(const AtomicFileWriter &) = delete;

  /// Appends `size` bytes (buffered).
  llvm::Error write(const void *bytes, size_t size);
  /// Bytes appended so far.
  uint64_t bytesWritten() const { return bytesWritten_; }
  /// Flushes, fsyncs, renames the temporary file to the final path and
  /// fsyncs the directory. The writer accepts nothing afterwards.
  llvm::Error commit();

  const std::string &path() const { return path_; }

private:
  AtomicFileWriter(std::string path, std::string tempPath, int fd);
  llvm::Error flushBuffer();
  void discard();

  std::string path_;
  std::string tempPath_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t bytesWritten_ = 0;
  std::vector<uint8_t> buffer_;
};

} // namespace loom

#endif
