#include "runtime/support/UserFile.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace loom {

namespace {

llvm::Error systemError(const std::string &path, const char *what) {
  const int savedErrno = errno;
  return llvm::createStringError(std::error_code(savedErrno, std::generic_category()),
                                 "'" + path + "': " + what + ": " +
                                     std::strerror(savedErrno));
}

llvm::Error notRegular(const std::string &path, const struct stat &info) {
  return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                 "'" + path + "': " +
                                     (S_ISDIR(info.st_mode) ? "not a regular file (a directory)"
                                                            : "not a regular file"));
}

} // namespace

llvm::Error checkRegularFile(const std::string &path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0)
    return systemError(path, "cannot open");
  if (!S_ISREG(info.st_mode))
    return notRegular(path, info);
  return llvm::Error::success();
}

llvm::Expected<std::vector<uint8_t>> readRegularFile(const std::string &path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return systemError(path, "cannot open");
  auto fail = [&](llvm::Error err) {
    ::close(fd);
    return err;
  };
  struct stat info;
  if (::fstat(fd, &info) != 0)
    return fail(systemError(path, "cannot stat"));
  if (!S_ISREG(info.st_mode))
    return fail(notRegular(path, info));
  std::vector<uint8_t> bytes(static_cast<size_t>(info.st_size));
  size_t filled = 0;
  while (filled < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + filled, bytes.size() - filled);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return fail(systemError(path, "cannot read"));
    if (got == 0)
      break; // the file shrank while being read: callers see the short size
    filled += static_cast<size_t>(got);
  }
  ::close(fd);
  bytes.resize(filled);
  return bytes;
}

llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
openRegularFile(const std::string &path, bool requiresNullTerminator) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return systemError(path, "cannot open");
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    llvm::Error err = ::fstat(fd, &info) != 0 ? systemError(path, "cannot stat")
                                              : notRegular(path, info);
    ::close(fd);
    return std::move(err);
  }
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getOpenFile(llvm::sys::fs::convertFDToNativeFile(fd), path,
                                      static_cast<uint64_t>(info.st_size),
                                      requiresNullTerminator);
  ::close(fd);
  if (!buffer)
    return llvm::createStringError(buffer.getError(), "'" + path + "': cannot read: " +
                                                          buffer.getError().message());
  return std::move(*buffer);
}

llvm::Error checkNestingDepth(llvm::StringRef text, NestingSyntax syntax,
                              const std::string &name, unsigned limit) {
  const bool mlir = syntax == NestingSyntax::Mlir;
  unsigned depth = 0;
  uint64_t line = 1;
  const size_t size = text.size();
  for (size_t i = 0; i < size; ++i) {
    const char c = text[i];
    switch (c) {
    case '\n':
      ++line;
      break;
    case '"':
      // Skip the string, honouring backslash escapes.
      for (++i; i < size && text[i] != '"'; ++i) {
        if (text[i] == '\\')
          ++i;
        else if (text[i] == '\n')
          ++line;
      }
      break;
    case '/':
      if (mlir && i + 1 < size && text[i + 1] == '/')
        while (i + 1 < size && text[i + 1] != '\n')
          ++i;
      break;
    case '<':
      if (!mlir || (i + 1 < size && text[i + 1] == '='))
        break;
      [[fallthrough]];
    case '[':
    case '{':
    case '(':
      if (c == '(' && !mlir)
        break;
      if (++depth > limit)
        return llvm::createStringError(
            std::make_error_code(std::errc::invalid_argument),
            "'" + name + "': nesting deeper than " + llvm::Twine(limit) +
                " levels at line " + llvm::Twine(line) + " (a crafted or corrupt file?)");
      break;
    case '>':
      if (!mlir || (i > 0 && text[i - 1] == '-') || (i + 1 < size && text[i + 1] == '='))
        break;
      [[fallthrough]];
    case ']':
    case '}':
    case ')':
      if (c == ')' && !mlir)
        break;
      if (depth > 0)
        --depth;
      break;
    default:
      break;
    }
  }
  return llvm::Error::success();
}

llvm::Error checkOutputPath(const std::string &path, llvm::StringRef what) {
  if (path.empty() || path == "-")
    return llvm::Error::success();
  auto error = [&](const llvm::Twine &problem) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   what + " '" + path + "'" + problem);
  };
  if (llvm::sys::fs::is_directory(path))
    return error(" is a directory, not a file");
  llvm::StringRef parent = llvm::sys::path::parent_path(path);
  if (parent.empty())
    parent = ".";
  if (!llvm::sys::fs::is_directory(parent))
    return error(": the folder '" + parent + "' does not exist");
  if (llvm::sys::fs::access(parent, llvm::sys::fs::AccessMode::Write))
    return error(": the folder '" + parent + "' is not writable");
  return llvm::Error::success();
}

} // namespace loom
