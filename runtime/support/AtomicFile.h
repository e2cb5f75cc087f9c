#ifndef LOOM_RUNTIME_SUPPORT_ATOMICFILE_H
#define LOOM_RUNTIME_SUPPORT_ATOMICFILE_H

// The one way Loom writes an output file. A regular file (or a new one) is
// written in pieces and appears under its final name only once it is complete
// and on disk: a temporary file in the same directory, fsync, rename. A crash
// or an error half-way leaves the previous file (or none), never a truncated
// one that a later run would read as data, and the temporary is removed.
//
// A path naming something that is not a regular file is never replaced: a
// character device (/dev/null, a terminal) or a FIFO is written in place; a
// directory, block device or socket is refused.

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace loom {

/// Writes all `size` bytes to `fd`, retrying short writes and EINTR.
/// `limit`, when set, caps each write (a test's simulated disk: 0 is ENOSPC).
/// Errors name `path`.
llvm::Error writeAll(int fd, const void *bytes, size_t size, const std::string &path,
                     const std::function<size_t(size_t)> &limit = {});

class AtomicFileWriter {
public:
  /// Creates the temporary file next to `path` (or opens a device in place).
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
  /// fsyncs the directory (for a device: flushes and closes). The writer
  /// accepts nothing afterwards.
  llvm::Error commit();

  /// Limits how many bytes reach the disk, for tests: called with the bytes
  /// about to be written, returns how many of them fit; 0 fails the write as
  /// on a full disk (ENOSPC).
  void setSpaceLimit(std::function<size_t(size_t)> limit) { spaceLimit_ = std::move(limit); }

  const std::string &path() const { return path_; }
  /// True when `path` is a device or FIFO written in place.
  bool inPlace() const { return tempPath_.empty(); }

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
  std::function<size_t(size_t)> spaceLimit_;
};

/// Writes `path` through an AtomicFileWriter; `writeContents` appends the
/// bytes. Nothing is left behind on failure.
llvm::Error
writeFileAtomically(const std::string &path,
                    llvm::function_ref<llvm::Error(AtomicFileWriter &)> writeContents);
/// Writes `size` bytes as the whole of `path`, as above.
llvm::Error writeFileAtomically(const std::string &path, const void *bytes, size_t size);

} // namespace loom

#endif
