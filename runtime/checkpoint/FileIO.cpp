#include "runtime/checkpoint/FileIO.h"
#include "runtime/support/AtomicFile.h"

#include "runtime/support/UserFile.h"

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace loom {
namespace checkpoint_io {

llvm::Error systemError(const std::string &path, const llvm::Twine &what) {
  const int savedErrno = errno;
  return llvm::createStringError(std::error_code(savedErrno, std::generic_category()),
                                 "'" + path + "': " + what + ": " +
                                     std::strerror(savedErrno));
}

llvm::Error contentError(const std::string &path, const llvm::Twine &problem) {
  return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                 "'" + path + "': " + problem);
}

size_t SimulatedDiskSpace::take(size_t wanted) {
  uint64_t left = bytesLeft_.load();
  while (true) {
    const uint64_t granted = std::min<uint64_t>(left, wanted);
    if (bytesLeft_.compare_exchange_weak(left, left - granted))
      return static_cast<size_t>(granted);
  }
}

llvm::Expected<DurableFile> DurableFile::create(const std::string &path,
                                                SimulatedDiskSpace *space) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return systemError(path, "cannot create");
  return DurableFile(path, fd, space);
}

DurableFile::DurableFile(DurableFile &&other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), space_(other.space_),
      bytesWritten_(other.bytesWritten_), hasher_(other.hasher_) {
  other.fd_ = -1;
}

DurableFile::~DurableFile() {
  if (fd_ >= 0)
    ::close(fd_);
}

llvm::Error DurableFile::write(const void *bytes, size_t size) {
  hasher_.update(static_cast<const uint8_t *>(bytes), size);
  std::function<size_t(size_t)> limit;
  if (space_)
    limit = [this](size_t wanted) { return space_->take(wanted); };
  if (llvm::Error err = writeAll(fd_, bytes, size, path_, limit))
    return err;
  bytesWritten_ += size;
  return llvm::Error::success();
}

llvm::Error DurableFile::finish() {
  // Delayed allocation means a full disk may first show up here.
  if (::fsync(fd_) != 0)
    return systemError(path_, "cannot fsync");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    return systemError(path_, "cannot close");
  return llvm::Error::success();
}

llvm::Error
replaceFileAtomically(const std::string &path,
                      llvm::function_ref<llvm::Error(AtomicFileWriter &)> writeContents,
                      SimulatedDiskSpace *space) {
  llvm::Expected<std::unique_ptr<AtomicFileWriter>> file = AtomicFileWriter::create(path);
  if (!file)
    return file.takeError();
  if (space)
    (*file)->setSpaceLimit([space](size_t wanted) { return space->take(wanted); });
  if (llvm::Error err = writeContents(**file))
    return err; // the destructor removes the temporary file
  return (*file)->commit();
}

llvm::Expected<std::vector<uint8_t>> readWholeFile(const std::string &path) {
  return readRegularFile(path);
}

llvm::Error fsyncDirectory(const std::string &path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return systemError(path, "cannot open directory");
  if (::fsync(fd) != 0) {
    llvm::Error err = systemError(path, "cannot fsync directory");
    ::close(fd);
    return err;
  }
  ::close(fd);
  return llvm::Error::success();
}

llvm::Expected<std::vector<std::string>> listDirectory(const std::string &path) {
  DIR *dir = ::opendir(path.c_str());
  if (!dir)
    return systemError(path, "cannot list directory");
  std::vector<std::string> names;
  while (const dirent *entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..")
      names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

llvm::Error removeTree(const std::string &path) {
  struct stat info;
  if (::lstat(path.c_str(), &info) != 0)
    return errno == ENOENT ? llvm::Error::success() : systemError(path, "cannot stat");
  if (S_ISDIR(info.st_mode)) {
    llvm::Expected<std::vector<std::string>> names = listDirectory(path);
    if (!names)
      return names.takeError();
    for (const std::string &name : *names)
      if (llvm::Error err = removeTree(path + "/" + name))
        return err;
    if (::rmdir(path.c_str()) != 0)
      return systemError(path, "cannot remove directory");
    return llvm::Error::success();
  }
  if (::unlink(path.c_str()) != 0)
    return systemError(path, "cannot remove");
  return llvm::Error::success();
}

bool pathExists(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

bool isDirectory(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string parentDirectory(const std::string &path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

} // namespace checkpoint_io
} // namespace loom
