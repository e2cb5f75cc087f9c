#ifndef LOOM_TEST_UNIT_CHECKPOINT_CHECKPOINTTESTSUPPORT_H
#define LOOM_TEST_UNIT_CHECKPOINT_CHECKPOINTTESTSUPPORT_H

// Helpers shared by the checkpoint tests: a scratch directory per test and
// whole-file reads and writes.

#include "runtime/checkpoint/FileIO.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace loom {
namespace checkpoint_test {

/// A fresh directory per test, removed with everything in it afterwards.
class ScratchDirectoryTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "loom-checkpoint-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override { llvm::consumeError(checkpoint_io::removeTree(root_)); }
  std::string path(const std::string &name) const { return root_ + "/" + name; }

  std::string root_;
};

inline std::vector<uint8_t> readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline std::string readText(const std::string &path) {
  const std::vector<uint8_t> bytes = readBytes(path);
  return std::string(bytes.begin(), bytes.end());
}

inline void writeBytes(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline void writeText(const std::string &path, const std::string &text) {
  writeBytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

/// The error's message, which must be a single line.
inline std::string oneLineMessage(llvm::Error err) {
  EXPECT_TRUE(static_cast<bool>(err)) << "expected an error";
  const std::string message = llvm::toString(std::move(err));
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

} // namespace checkpoint_test
} // namespace loom

#endif
