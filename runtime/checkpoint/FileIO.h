#ifndef LOOM_RUNTIME_CHECKPOINT_FILEIO_H
#define LOOM_RUNTIME_CHECKPOINT_FILEIO_H

// POSIX file plumbing shared by the safetensors and checkpoint writers and
// readers: durable writes (every byte checked, fsync before close), whole-file
// reads, directory fsync and removal. Every failure is an llvm::Error naming
// the path and the errno text. Internal to runtime/checkpoint.

#include "runtime/checkpoint/Sha256.h"
#include "runtime/support/AtomicFile.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace loom {
namespace checkpoint_io {

/// An error for a system call that just failed: "'path': what: strerror".
llvm::Error systemError(const std::string &path, const llvm::Twine &what);
/// An error for bad content: "'path': problem".
llvm::Error contentError(const std::string &path, const llvm::Twine &problem);

/// A byte budget shared by the files of one write; when it runs out, writes
/// fail as on a full disk (ENOSPC). Lets tests fail a write at any byte.
class SimulatedDiskSpace {
public:
  explicit SimulatedDiskSpace(uint64_t bytes) : bytesLeft_(bytes) {}
  /// How many of `wanted` bytes still fit (and consumes them).
  size_t take(size_t wanted);

private:
  std::atomic<uint64_t> bytesLeft_;
};

/// A new file written front to back and made durable by finish(). The
/// destructor closes a file that was not finished; removing it is the
/// caller's business (usually by removing its temporary directory).
class DurableFile {
public:
  /// Creates `path`, which must not exist yet. `space` may be null.
  static llvm::Expected<DurableFile> create(const std::string &path,
                                            SimulatedDiskSpace *space);
  DurableFile(DurableFile &&other) noexcept;
  DurableFile &operator=(DurableFile &&) = delete;
  DurableFile(const DurableFile &) = delete;
  ~DurableFile();

  llvm::Error write(const void *bytes, size_t size);
  /// fsync, then close; an error from either (ENOSPC, EIO) is reported.
  llvm::Error finish();

  uint64_t bytesWritten() const { return bytesWritten_; }
  /// The SHA-256 of everything written, in hex.
  std::string sha256Hex() { return Sha256::toHex(hasher_.finish()); }

private:
  DurableFile(std::string path, int fd, SimulatedDiskSpace *space)
      : path_(std::move(path)), fd_(fd), space_(space) {}

  std::string path_;
  int fd_ = -1;
  SimulatedDiskSpace *space_ = nullptr;
  uint64_t bytesWritten_ = 0;
  Sha256 hasher_;
};

/// Writes `bytes` to `path` durably through Loom's AtomicFileWriter (a
/// temporary file in the same directory, fsync, rename, directory fsync): a
/// reader sees the old file or the new one, never a mixture. `writeContents`
/// writes the bytes; `space` (may be null) limits them as on a full disk.
llvm::Error
replaceFileAtomically(const std::string &path,
                      llvm::function_ref<llvm::Error(AtomicFileWriter &)> writeContents,
                      SimulatedDiskSpace *space);

/// The whole of a regular file (anything else is refused).
llvm::Expected<std::vector<uint8_t>> readWholeFile(const std::string &path);
llvm::Error fsyncDirectory(const std::string &path);
/// The entry names of a directory, without "." and "..".
llvm::Expected<std::vector<std::string>> listDirectory(const std::string &path);
/// Removes a file or a directory tree; errors are reported, not thrown away,
/// so callers can decide whether they matter.
llvm::Error removeTree(const std::string &path);
bool pathExists(const std::string &path);
bool isDirectory(const std::string &path);
/// The directory part of `path` ("." when there is none).
std::string parentDirectory(const std::string &path);

} // namespace checkpoint_io
} // namespace loom

#endif
