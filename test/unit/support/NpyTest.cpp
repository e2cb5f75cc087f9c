#include "runtime/support/Npy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <random>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace loom;

namespace {

/// A fresh directory per test, removed (with its files) afterwards.
class NpyTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "loom-npy-XXXXXX";
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
  void writeBytes(const std::string &name, const std::string &bytes) {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }

  std::string dir_;
};

/// A .npy file as NumPy writes it: the given header dict, padded to 64 bytes.
std::string npyBytes(const std::string &dict, const std::string &data,
                     int major = 1) {
  std::string header = dict;
  const size_t preamble = major == 1 ? 10 : 12;
  while ((preamble + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += static_cast<char>(major);
  bytes += '\0';
  const size_t lengthBytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < lengthBytes; ++i)
    bytes += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return bytes + header + data;
}

std::string errorText(llvm::Error err) { return llvm::toString(std::move(err)); }

template <typename T> std::string errorOf(llvm::Expected<T> value) {
  if (value)
    return "";
  return llvm::toString(value.takeError());
}

TEST_F(NpyTest, RoundTripsEveryKind) {
  const NpyKind kinds[] = {NpyKind::F32, NpyKind::F64, NpyKind::F16, NpyKind::I32,
                           NpyKind::I64, NpyKind::Bool, NpyKind::U8, NpyKind::U16,
                           NpyKind::U32, NpyKind::V1,  NpyKind::V2};
  const std::vector<std::vector<int64_t>> shapes = {{}, {5}, {2, 3}, {0, 4}, {2, 1, 3}};
  std::mt19937 rng(7);
  for (NpyKind kind : kinds) {
    for (const auto &shape : shapes) {
      NpyArray array;
      array.kind = kind;
      array.shape = shape;
      array.data.resize(array.numElements() * npyKindSize(kind));
      for (uint8_t &byte : array.data)
        byte = kind == NpyKind::Bool ? rng() % 2 : static_cast<uint8_t>(rng());
      const std::string file = path("a.npy");
      ASSERT_FALSE(writeNpy(file, array)) << npyDescr(kind);
      llvm::Expected<NpyArray> back = readNpy(file);
      ASSERT_TRUE(static_cast<bool>(back)) << errorOf(std::move(back));
      EXPECT_EQ(back->kind, kind);
      EXPECT_EQ(back->shape, shape);
      EXPECT_EQ(back->data, array.data);
    }
  }
}

TEST_F(NpyTest, WritesNumPysLayout) {
  NpyArray array;
  array.kind = NpyKind::F32;
  array.shape = {2, 3};
  array.data.resize(24, 0);
  llvm::Expected<std::vector<uint8_t>> bytes = serializeNpy(array);
  ASSERT_TRUE(static_cast<bool>(bytes));
  const std::string text(bytes->begin(), bytes->end());
  EXPECT_EQ(text.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t headerLength = (*bytes)[8] | ((*bytes)[9] << 8);
  EXPECT_EQ((10 + headerLength) % 64, 0u);
  EXPECT_EQ(text[10 + headerLength - 1], '\n');
  EXPECT_NE(text.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"),
            std::string::npos);
  EXPECT_EQ(bytes->size(), 10 + headerLength + 24);

  array.shape = {6};
  bytes = serializeNpy(array);
  ASSERT_TRUE(static_cast<bool>(bytes));
  EXPECT_NE(std::string(bytes->begin(), bytes->end()).find("'shape': (6,)"),
            std::string::npos);
}

TEST_F(NpyTest, ReadsNumPyFilesOfBothVersions) {
  std::string data;
  for (int64_t v : {int64_t(1), int64_t(-2), int64_t(1) << 40})
    data.append(reinterpret_cast<const char *>(&v), 8);
  for (int major : {1, 2}) {
    writeBytes("v.npy",
               npyBytes("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                        data, major));
    llvm::Expected<NpyArray> array = readNpy(path("v.npy"));
    ASSERT_TRUE(static_cast<bool>(array)) << errorOf(std::move(array));
    EXPECT_EQ(array->kind, NpyKind::I64);
    EXPECT_EQ(array->shape, std::vector<int64_t>{3});
    int64_t third;
    std::memcpy(&third, array->data.data() + 16, 8);
    EXPECT_EQ(third, int64_t(1) << 40);
  }
  // Key order, quotes and spacing vary between writers.
  writeBytes("w.npy", npyBytes("{\"shape\":(1,2),\"fortran_order\":False,\"descr\":\"|u1\"}",
                               std::string("\x05\x06", 2)));
  llvm::Expected<NpyArray> array = readNpy(path("w.npy"));
  ASSERT_TRUE(static_cast<bool>(array)) << errorOf(std::move(array));
  EXPECT_EQ(array->kind, NpyKind::U8);
  EXPECT_EQ(array->shape, (std::vector<int64_t>{1, 2}));
}

TEST_F(NpyTest, ReadAsChecksAndReinterprets) {
  NpyArray raw;
  raw.kind = NpyKind::U16;
  raw.shape = {2};
  raw.data = {0x80, 0x3F, 0x00, 0xC0}; // bf16 1.0 and -2.0
  ASSERT_FALSE(writeNpy(path("bf16.npy"), raw));
  llvm::Expected<NpyArray> asBf16 = readNpyAs(path("bf16.npy"), DType::BF16);
  ASSERT_TRUE(static_cast<bool>(asBf16)) << errorOf(std::move(asBf16));
  EXPECT_EQ(asBf16->data, raw.data);

  std::string error = errorOf(readNpyAs(path("bf16.npy"), DType::F32));
  EXPECT_NE(error.find("expected f32"), std::string::npos) << error;
  EXPECT_NE(error.find("bf16.npy"), std::string::npos) << error;
  EXPECT_FALSE(errorOf(readNpyAs(path("bf16.npy"), DType::F8E4M3FN)).empty());

  NpyArray floats;
  floats.kind = NpyKind::F32;
  floats.shape = {1};
  floats.data = {0, 0, 0x80, 0x3F};
  ASSERT_FALSE(writeNpy(path("f.npy"), floats));
  EXPECT_TRUE(errorOf(readNpyAs(path("f.npy"), DType::F32)).empty());
  EXPECT_FALSE(errorOf(readNpyAs(path("f.npy"), DType::I32)).empty());
  EXPECT_EQ(dtypeToNpyKind(DType::I1), NpyKind::Bool);
  EXPECT_EQ(dtypeToNpyKind(DType::BF16), std::nullopt);
  EXPECT_EQ(npyRawKindFor(DType::F8E5M2), NpyKind::U8);
  EXPECT_EQ(npyRawKindFor(DType::BF16), NpyKind::U16);
  EXPECT_EQ(npyRawKindFor(DType::F16), NpyKind::F16); // NumPy has float16
  EXPECT_EQ(npyRawKindFor(DType::I64), NpyKind::I64);
  EXPECT_EQ(npyKindToDType(NpyKind::F16), DType::F16);
}

TEST_F(NpyTest, RejectsMalformedFiles) {
  const std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string eightBytes(8, '\0');
  struct Case {
    const char *what;
    std::string bytes;
    const char *expected; // a fragment of the message
  };
  const Case cases[] = {
      {"empty", "", "bad magic"},
      {"bad magic", "\x93NUMPZ\x01\x00" + std::string(60, ' '), "bad magic"},
      {"version 3", npyBytes(good, eightBytes, 1).replace(6, 1, "\x03"), "version 3.0"},
      {"no header length", std::string("\x93NUMPY\x02\x00\x10", 9), "truncated"},
      {"header past the end", std::string("\x93NUMPY\x01\x00\xFF\x00{'descr'", 18),
       "truncated header"},
      {"not a dict", npyBytes("['descr']", eightBytes), "not a dict"},
      {"unterminated dict",
       npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", eightBytes),
       "unparsable"},
      {"missing key", npyBytes("{'descr': '<f4', 'shape': (2,), }", eightBytes),
       "lacks"},
      {"unknown key", npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",
                               eightBytes),
       "unexpected header key"},
      {"negative dim",
       npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", eightBytes),
       "non-negative"},
      {"bad shape",
       npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", eightBytes),
       "not a tuple"},
      {"bad bool",
       npyBytes("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", eightBytes),
       "True or False"},
      {"fortran order",
       npyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", eightBytes),
       "Fortran"},
      {"big endian",
       npyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", eightBytes),
       "unsupported dtype '>f4'"},
      {"complex",
       npyBytes("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", eightBytes),
       "unsupported dtype"},
      {"structured",
       npyBytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
                eightBytes),
       "structured"},
      {"short data", npyBytes(good, std::string(7, '\0')), "data is truncated"},
      {"long data", npyBytes(good, std::string(9, '\0')), "unexpected bytes"},
      {"huge shape",
       npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, "
                "1099511627776), }",
                eightBytes),
       "too large"},
      {"dim beyond 64 bits",
       npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': "
                "(99999999999999999999,), }",
                eightBytes),
       "overflows"},
  };
  for (const Case &c : cases) {
    writeBytes("bad.npy", c.bytes);
    const std::string error = errorOf(readNpy(path("bad.npy")));
    EXPECT_NE(error.find(c.expected), std::string::npos)
        << c.what << ": got '" << error << "'";
    EXPECT_NE(error.find("bad.npy"), std::string::npos) << c.what << ": " << error;
  }
  EXPECT_NE(errorOf(readNpy(path("missing.npy"))).find("cannot open"), std::string::npos);
  EXPECT_NE(errorOf(readNpy(dir_)).find("not a regular file"), std::string::npos);
}

TEST_F(NpyTest, EveryTruncationIsAnError) {
  NpyArray array;
  array.kind = NpyKind::F64;
  array.shape = {3, 2};
  array.data.assign(48, 0x11);
  llvm::Expected<std::vector<uint8_t>> bytes = serializeNpy(array);
  ASSERT_TRUE(static_cast<bool>(bytes));
  for (size_t size = 0; size < bytes->size(); ++size)
    EXPECT_FALSE(errorOf(parseNpy(bytes->data(), size, "cut")).empty()) << size;
  EXPECT_TRUE(errorOf(parseNpy(bytes->data(), bytes->size(), "whole")).empty());
}

TEST_F(NpyTest, CorruptedHeadersNeverCrash) {
  NpyArray array;
  array.kind = NpyKind::I32;
  array.shape = {4, 1};
  array.data.assign(16, 0);
  llvm::Expected<std::vector<uint8_t>> bytes = serializeNpy(array);
  ASSERT_TRUE(static_cast<bool>(bytes));
  std::mt19937 rng(99);
  int rejected = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<uint8_t> corrupted = *bytes;
    for (int flips = 1 + rng() % 3; flips > 0; --flips)
      corrupted[rng() % 80] = static_cast<uint8_t>(rng());
    llvm::Expected<NpyArray> parsed = parseNpy(corrupted.data(), corrupted.size(), "x");
    if (!parsed) {
      ++rejected;
      llvm::consumeError(parsed.takeError());
    } else {
      // Whatever parsed must be self-consistent.
      EXPECT_EQ(parsed->data.size(), parsed->numElements() * npyKindSize(parsed->kind));
    }
  }
  EXPECT_GT(rejected, 10000);
}

TEST_F(NpyTest, WriteIsAtomicAndChecksItsInput) {
  NpyArray array;
  array.kind = NpyKind::U8;
  array.shape = {3};
  array.data = {1, 2, 3};
  ASSERT_FALSE(writeNpy(path("out.npy"), array));
  array.data = {4, 5, 6};
  ASSERT_FALSE(writeNpy(path("out.npy"), array)); // replaces
  EXPECT_EQ(listDir(), std::vector<std::string>{"out.npy"}); // no temporaries left
  llvm::Expected<NpyArray> back = readNpy(path("out.npy"));
  ASSERT_TRUE(static_cast<bool>(back));
  EXPECT_EQ(back->data, (std::vector<uint8_t>{4, 5, 6}));

  array.data.pop_back();
  std::string error = errorText(writeNpy(path("short.npy"), array));
  EXPECT_NE(error.find("needs 3 bytes"), std::string::npos) << error;
  EXPECT_EQ(listDir(), std::vector<std::string>{"out.npy"});

  array.data.push_back(0);
  error = errorText(writeNpy(path("no-such-dir/x.npy"), array));
  EXPECT_NE(error.find("no-such-dir"), std::string::npos) << error;
  array.shape = {-3};
  EXPECT_FALSE(errorText(writeNpy(path("neg.npy"), array)).empty());
}

} // namespace
