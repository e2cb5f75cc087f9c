#ifndef LOOM_TEST_UNIT_DATA_DATATESTUTILS_H
#define LOOM_TEST_UNIT_DATA_DATATESTUTILS_H

// Shared by the data tests: a scratch directory per test and raw file I/O.

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace loom::testing {

/// A fresh directory per test, removed (with its files) afterwards.
class DataDirTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "loom-data-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    for (const std::string &name : listDir())
      ::unlink((dir_ + "/" + name).c_str());
    ::rmdir(dir_.c_str());
  }
  std::string path(const std::string &name) const { return dir_ + "/" + name; }
  std::vector<std::string> listDir() const {
    std::vector<std::string> names;
    if (DIR *d = ::opendir(dir_.c_str())) {
      while (dirent *entry = ::readdir(d))
        if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0)
          names.push_back(entry->d_name);
      ::closedir(d);
    }
    return names;
  }

  std::string dir_;
};

inline void writeBytes(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::vector<uint8_t> readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in),
                              std::istreambuf_iterator<char>());
}

/// Appends `value`'s low `width` bytes, little-endian.
inline void appendLE(std::vector<uint8_t> &bytes, uint64_t value, size_t width) {
  for (size_t i = 0; i < width; ++i)
    bytes.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

/// The message of `err` (consumed); "" for success.
inline std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

template <typename T> std::string errorText(llvm::Expected<T> value) {
  return value ? std::string() : llvm::toString(value.takeError());
}

} // namespace loom::testing

#endif
