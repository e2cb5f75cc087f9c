#include "runtime/support/AtomicFile.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace loom {

namespace {

// Large enough that writes are few, small enough to not matter in memory.
constexpr size_t kBufferSize = 1 << 20;

llvm::Error systemError(const std::string &path, const char *what) {
  const int savedErrno = errno;
  return llvm::createStringError(std::error_code(savedErrno, std::generic_category()),
                                 "'" + path + "': " + what + ": " +
                                     std::strerror(savedErrno));
}

llvm::Error refusal(const std::string &path, const char *what) {
  return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                 "'" + path + "': " + what);
}

std::string directoryOf(const std::string &path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

} // namespace

AtomicFileWriter::AtomicFileWriter(std::string path, std::string tempPath, int fd)
    : path_(std::move(path)), tempPath_(std::move(tempPath)), fd_(fd) {
  buffer_.reserve(kBufferSize);
}

llvm::Expected<std::unique_ptr<AtomicFileWriter>>
AtomicFileWriter::create(const std::string &path) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    // Never rename over a device node, a directory or a socket.
    if (S_ISDIR(info.st_mode))
      return refusal(path, "is a directory, not a file to write");
    if (!S_ISCHR(info.st_mode) && !S_ISFIFO(info.st_mode))
      return refusal(path, "not a regular file; refusing to replace it");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      return systemError(path, "cannot open for writing");
    return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, "", fd));
  }
  std::string tempPath = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tempPath.data());
  if (fd < 0)
    return systemError(path, "cannot create a temporary file next to it");
  return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, tempPath, fd));
}

AtomicFileWriter::~AtomicFileWriter() { discard(); }

void AtomicFileWriter::discard() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!committed_ && !tempPath_.empty()) {
    ::unlink(tempPath_.c_str());
    tempPath_.clear();
  }
}

llvm::Error writeAll(int fd, const void *data, size_t size, const std::string &path,
                     const std::function<size_t(size_t)> &limit) {
  const uint8_t *bytes = static_cast<const uint8_t *>(data);
  while (size > 0) {
    size_t chunk = size;
    if (limit) {
      chunk = limit(size);
      if (chunk == 0) {
        errno = ENOSPC;
        return systemError(path, "cannot write");
      }
    }
    const ssize_t written = ::write(fd, bytes, chunk);
    if (written < 0) {
      if (errno == EINTR)
        continue;
      return systemError(path, "cannot write");
    }
    bytes += written;
    size -= static_cast<size_t>(written);
  }
  return llvm::Error::success();
}

llvm::Error AtomicFileWriter::flushBuffer() {
  const uint8_t *bytes = buffer_.data();
  size_t size = buffer_.size();
  const std::string &target = tempPath_.empty() ? path_ : tempPath_;
  if (llvm::Error err = writeAll(fd_, bytes, size, target, spaceLimit_))
    return err;
  buffer_.clear();
  return llvm::Error::success();
}

llvm::Error AtomicFileWriter::write(const void *bytes, size_t size) {
  if (fd_ < 0)
    return llvm::createStringError(std::make_error_code(std::errc::bad_file_descriptor),
                                   "'" + path_ + "': written after commit or failure");
  const uint8_t *data = static_cast<const uint8_t *>(bytes);
  bytesWritten_ += size;
  while (size > 0) {
    const size_t room = kBufferSize - buffer_.size();
    const size_t chunk = size < room ? size : room;
    buffer_.insert(buffer_.end(), data, data + chunk);
    data += chunk;
    size -= chunk;
    if (buffer_.size() == kBufferSize)
      if (llvm::Error err = flushBuffer()) {
        discard();
        return err;
      }
  }
  return llvm::Error::success();
}

llvm::Error AtomicFileWriter::commit() {
  if (fd_ < 0)
    return llvm::createStringError(std::make_error_code(std::errc::bad_file_descriptor),
                                   "'" + path_ + "': committed twice or after a failure");
  auto fail = [&](llvm::Error err) {
    discard();
    return err;
  };
  if (llvm::Error err = flushBuffer())
    return fail(std::move(err));
  if (inPlace()) {
    // A device or FIFO: no fsync (most refuse it), no rename.
    const int fd = fd_;
    fd_ = -1;
    committed_ = true;
    if (::close(fd) != 0)
      return systemError(path_, "cannot close");
    return llvm::Error::success();
  }
  // Delayed allocation means a full disk may first show up here.
  if (::fsync(fd_) != 0)
    return fail(systemError(tempPath_, "cannot fsync"));
  // mkstemp creates 0600; give the file the usual permissions.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    return fail(systemError(tempPath_, "cannot close"));
  // The target may have become a device since create(): check again.
  struct stat info;
  if (::stat(path_.c_str(), &info) == 0 && !S_ISREG(info.st_mode))
    return fail(refusal(path_, "not a regular file; refusing to replace it"));
  if (::rename(tempPath_.c_str(), path_.c_str()) != 0)
    return fail(systemError(path_, "cannot rename the temporary file to it"));
  committed_ = true;
  // Persist the rename itself.
  const int dirFd = ::open(directoryOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd < 0)
    return systemError(directoryOf(path_), "cannot open directory");
  if (::fsync(dirFd) != 0) {
    llvm::Error err = systemError(directoryOf(path_), "cannot fsync directory");
    ::close(dirFd);
    return err;
  }
  ::close(dirFd);
  return llvm::Error::success();
}

llvm::Error
writeFileAtomically(const std::string &path,
                    llvm::function_ref<llvm::Error(AtomicFileWriter &)> writeContents) {
  llvm::Expected<std::unique_ptr<AtomicFileWriter>> file = AtomicFileWriter::create(path);
  if (!file)
    return file.takeError();
  if (llvm::Error err = writeContents(**file))
    return err; // the destructor removes the temporary
  return (*file)->commit();
}

llvm::Error writeFileAtomically(const std::string &path, const void *bytes, size_t size) {
  return writeFileAtomically(
      path, [&](AtomicFileWriter &file) { return file.write(bytes, size); });
}

} // namespace loom
