#ifndef LOOM_FUZZ_FUZZSUPPORT_H
#define LOOM_FUZZ_FUZZSUPPORT_H

// Shared by Loom's libFuzzer harnesses: a private scratch directory for the
// readers that take a path, and consuming llvm::Error without printing.

#include "llvm/Support/Error.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace loom::fuzz {

/// A directory of this process's own (under $TMPDIR, else /dev/shm or /tmp),
/// created on first use and removed at exit.
inline const std::string &scratchDir() {
  static const std::string dir = [] {
    const char *base = std::getenv("TMPDIR");
    std::string root = base && *base ? base : (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    std::string pattern = root + "/loom-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) {
      std::perror("loom-fuzz: mkdtemp");
      std::abort();
    }
    static std::string removeCommand = "rm -rf '" + pattern + "'";
    std::atexit([] { (void)std::system(removeCommand.c_str()); });
    return pattern;
  }();
  return dir;
}

/// Writes `size` bytes to `path` (replacing it); aborts if it cannot, since a
/// harness that silently feeds nothing would fuzz nothing.
inline void writeFile(const std::string &path, const void *data, size_t size) {
  FILE *file = std::fopen(path.c_str(), "wb");
  if (!file || (size && std::fwrite(data, 1, size, file) != size) || std::fclose(file) != 0) {
    std::perror(("loom-fuzz: writing " + path).c_str());
    std::abort();
  }
}

/// Drops an expected error: a clean error is the right answer to bad input.
template <typename T> bool succeeded(llvm::Expected<T> &value) {
  if (value)
    return true;
  llvm::consumeError(value.takeError());
  return false;
}
inline bool succeeded(llvm::Error error) {
  if (!error)
    return true;
  llvm::consumeError(std::move(error));
  return false;
}

/// A property every successful parse must have; a failure aborts (and the
/// fuzzer records the input).
#define LOOM_FUZZ_CHECK(condition)                                                           \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      std::fprintf(stderr, "loom-fuzz: check failed at %s:%d: %s\n", __FILE__, __LINE__,     \
                   #condition);                                                               \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

} // namespace loom::fuzz

#endif
