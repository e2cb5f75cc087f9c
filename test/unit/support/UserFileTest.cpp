// The shared file guards: the atomic writer's device rule, the regular-file
// readers, the nesting scan and CRC-32C.

#include "runtime/support/AtomicFile.h"
#include "runtime/support/Crc32c.h"
#include "runtime/support/UserFile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <dirent.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace loom {
namespace {

std::string errorText(llvm::Error err) { return llvm::toString(std::move(err)); }

class UserFileTest : public ::testing::Test {
protected:
  void SetUp() override {
    char pattern[] = "/tmp/loom-userfile-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string path(const std::string &name) const { return dir_ + "/" + name; }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    if (DIR *d = ::opendir(dir_.c_str())) {
      while (dirent *e = ::readdir(d))
        if (std::string(e->d_name) != "." && std::string(e->d_name) != "..")
          names.push_back(e->d_name);
      ::closedir(d);
    }
    return names;
  }
  std::string dir_;
};

TEST(Crc32c, KnownValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // Extending in pieces equals one pass.
  const std::string text = "the quick brown fox jumps over the lazy dog";
  EXPECT_EQ(crc32c(text.data() + 10, text.size() - 10, crc32c(text.data(), 10)),
            crc32c(text.data(), text.size()));
}

TEST_F(UserFileTest, WritesRegularFilesAtomically) {
  ASSERT_EQ(errorText(writeFileAtomically(path("a"), "hello", 5)), "");
  llvm::Expected<std::vector<uint8_t>> back = readRegularFile(path("a"));
  ASSERT_TRUE(static_cast<bool>(back)) << errorText(back.takeError());
  EXPECT_EQ(std::string(back->begin(), back->end()), "hello");
  EXPECT_EQ(entries(), std::vector<std::string>{"a"});
}

TEST_F(UserFileTest, FailedContentsLeaveNothing) {
  llvm::Error err = writeFileAtomically(path("b"), [](AtomicFileWriter &file) {
    llvm::cantFail(file.write("partial", 7));
    return llvm::createStringError(std::errc::io_error, "stopped");
  });
  EXPECT_EQ(errorText(std::move(err)), "stopped");
  EXPECT_TRUE(entries().empty());
}

TEST_F(UserFileTest, CharacterDeviceIsWrittenInPlace) {
  ASSERT_EQ(errorText(writeFileAtomically("/dev/null", "x", 1)), "");
  struct stat info;
  ASSERT_EQ(::stat("/dev/null", &info), 0);
  EXPECT_TRUE(S_ISCHR(info.st_mode));
}

TEST_F(UserFileTest, DirectoryIsRefused) {
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  EXPECT_EQ(errorText(writeFileAtomically(path("d"), "x", 1)),
            "'" + path("d") + "': is a directory, not a file to write");
  EXPECT_EQ(entries(), std::vector<std::string>{"d"});
}

TEST_F(UserFileTest, ReadersRefuseDevices) {
  EXPECT_EQ(errorText(readRegularFile("/dev/zero").takeError()),
            "'/dev/zero': not a regular file");
  EXPECT_EQ(errorText(openRegularFile("/dev/zero").takeError()),
            "'/dev/zero': not a regular file");
  EXPECT_EQ(errorText(checkRegularFile("/dev/zero")), "'/dev/zero': not a regular file");
  EXPECT_EQ(errorText(checkRegularFile(dir_)), "'" + dir_ + "': not a regular file (a directory)");
}

TEST(NestingDepth, Json) {
  const std::string ok = std::string(512, '[') + std::string(512, ']');
  EXPECT_EQ(errorText(checkNestingDepth(ok, NestingSyntax::Json, "f")), "");
  const std::string deep = "{\"a\":\n" + std::string(513, '{') + "}";
  EXPECT_EQ(errorText(checkNestingDepth(deep, NestingSyntax::Json, "f")),
            "'f': nesting deeper than 512 levels at line 2 (a crafted or corrupt file?)");
  // Brackets inside strings (with escaped quotes) do not count.
  const std::string quoted = "[\"\\\"" + std::string(1000, '[') + "\"]";
  EXPECT_EQ(errorText(checkNestingDepth(quoted, NestingSyntax::Json, "f")), "");
}

TEST(NestingDepth, Mlir) {
  std::string ok = "// " + std::string(1000, '<') + "\n";
  for (int i = 0; i < 600; ++i)
    ok += "(a) -> b >= c <= d ";
  EXPECT_EQ(errorText(checkNestingDepth(ok, NestingSyntax::Mlir, "m")), "");
  const std::string deep = std::string(300, '(') + std::string(300, '<');
  EXPECT_FALSE(errorText(checkNestingDepth(deep, NestingSyntax::Mlir, "m")).empty());
  EXPECT_EQ(errorText(checkNestingDepth(deep, NestingSyntax::Json, "m")), "");
}

} // namespace
} // namespace loom
