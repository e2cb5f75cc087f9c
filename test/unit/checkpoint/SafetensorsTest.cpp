#include "runtime/checkpoint/Safetensors.h"

#include "CheckpointTestSupport.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

using namespace loom;
using namespace loom::checkpoint_test;
using ::testing::HasSubstr;

namespace {

class SafetensorsTest : public ScratchDirectoryTest {};

HostTensor makeTensor(const std::string &name, DType dtype, std::vector<int64_t> shape,
                      uint32_t seed) {
  HostTensor tensor{name, dtype, std::move(shape), {}};
  tensor.data.resize(*tensorByteSize(dtype, tensor.shape));
  std::mt19937 random(seed);
  for (uint8_t &byte : tensor.data)
    byte = dtype == DType::I1 ? random() % 2 : static_cast<uint8_t>(random());
  return tensor;
}

/// A file made of `header` (padded as given) and `data`.
std::vector<uint8_t> makeFile(const std::string &header,
                              const std::vector<uint8_t> &data) {
  std::string text(8, '\0');
  for (size_t i = 0; i < 8; ++i)
    text[i] = static_cast<char>(uint64_t(header.size()) >> (8 * i));
  text += header;
  text.append(data.begin(), data.end());
  return std::vector<uint8_t>(text.begin(), text.end());
}

std::string parseError(const std::vector<uint8_t> &bytes) {
  llvm::Expected<SafetensorsFile> file = parseSafetensors(bytes, "t.safetensors");
  if (file)
    return "(parsed)";
  return oneLineMessage(file.takeError());
}

// The file layout, byte by byte, as the format's specification has it.
TEST_F(SafetensorsTest, HeaderLayoutFollowsTheSpecification) {
  const HostTensor half{"a", DType::BF16, {3}, {1, 2, 3, 4, 5, 6}};
  const HostTensor wide{"z", DType::F32, {2}, {10, 11, 12, 13, 14, 15, 16, 17}};
  const std::string file = path("x.safetensors");
  ASSERT_FALSE(llvm::errorToBool(
      writeSafetensors(file, viewsOf({half, wide}), {{"format", "pt"}})));
  const std::vector<uint8_t> bytes = readBytes(file);

  // The 4-byte tensor comes first so both start aligned to their size.
  const std::string json =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"z\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"a\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[8,14]}}";
  const size_t headerSize = (json.size() + 7) / 8 * 8;
  ASSERT_EQ(bytes.size(), 8 + headerSize + 14);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(bytes[i], static_cast<uint8_t>(uint64_t(headerSize) >> (8 * i))) << i;
  EXPECT_EQ(std::string(bytes.begin() + 8, bytes.begin() + 8 + json.size()), json);
  for (size_t i = 8 + json.size(); i < 8 + headerSize; ++i)
    EXPECT_EQ(bytes[i], ' ') << "padding byte " << i;
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + 8 + headerSize,
                                 bytes.begin() + 8 + headerSize + 8),
            wide.data);
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + 8 + headerSize + 8, bytes.end()),
            half.data);
}

TEST_F(SafetensorsTest, RoundTripsEveryDTypeScalarsAndEmptyTensors) {
  std::vector<HostTensor> tensors = {
      makeTensor("f32", DType::F32, {2, 3}, 1),
      makeTensor("f16", DType::F16, {5}, 2),
      makeTensor("bf16", DType::BF16, {2, 2}, 3),
      makeTensor("f8e4m3", DType::F8E4M3FN, {7}, 4),
      makeTensor("f8e5m2", DType::F8E5M2, {3}, 5),
      makeTensor("i64", DType::I64, {2}, 6),
      makeTensor("i32", DType::I32, {3, 1}, 7),
      makeTensor("bool", DType::I1, {4}, 8),
      makeTensor("f64", DType::F64, {2}, 9),
      makeTensor("scalar", DType::F32, {}, 10),
      makeTensor("empty", DType::F16, {0, 3}, 11),
  };
  const std::string file = path("all.safetensors");
  ASSERT_FALSE(llvm::errorToBool(writeSafetensors(file, viewsOf(tensors), {{"k", "v"}})));
  llvm::Expected<SafetensorsFile> read = readSafetensors(file);
  ASSERT_TRUE(static_cast<bool>(read)) << llvm::toString(read.takeError());
  EXPECT_EQ(read->metadata, (std::map<std::string, std::string>{{"k", "v"}}));
  ASSERT_EQ(read->tensors.size(), tensors.size());
  std::map<std::string, const HostTensor *> byName;
  for (const HostTensor &tensor : read->tensors)
    byName[tensor.name] = &tensor;
  for (const HostTensor &expected : tensors) {
    ASSERT_TRUE(byName.count(expected.name)) << expected.name;
    const HostTensor &got = *byName[expected.name];
    EXPECT_EQ(got.dtype, expected.dtype) << expected.name;
    EXPECT_EQ(got.shape, expected.shape) << expected.name;
    EXPECT_EQ(got.data, expected.data) << expected.name;
  }
  // Each tensor's bytes start at a multiple of its element size.
  const std::vector<uint8_t> bytes = readBytes(file);
  uint64_t headerSize = 0;
  std::memcpy(&headerSize, bytes.data(), 8);
  EXPECT_EQ(headerSize % 8, 0u);
  uint64_t offset = 0;
  for (const HostTensor &tensor : read->tensors) {
    EXPECT_EQ(offset % dtypeSize(tensor.dtype), 0u) << tensor.name;
    offset += tensor.data.size();
  }
}

TEST_F(SafetensorsTest, DTypeSpellings) {
  const std::pair<DType, const char *> spellings[] = {
      {DType::F32, "F32"},          {DType::F16, "F16"},        {DType::BF16, "BF16"},
      {DType::F8E4M3FN, "F8_E4M3"}, {DType::F8E5M2, "F8_E5M2"}, {DType::I64, "I64"},
      {DType::I32, "I32"},          {DType::I1, "BOOL"},        {DType::F64, "F64"}};
  for (const auto &[type, name] : spellings) {
    EXPECT_EQ(safetensorsDTypeName(type), name);
    EXPECT_EQ(parseSafetensorsDType(name), type);
  }
  EXPECT_EQ(parseSafetensorsDType("U8"), std::nullopt);
}

TEST_F(SafetensorsTest, WriterRefusesInconsistentTensors) {
  HostTensor shortData{"w", DType::F32, {2, 2}, std::vector<uint8_t>(12)};
  EXPECT_THAT(
      oneLineMessage(writeSafetensors(path("a.safetensors"), viewsOf({shortData}), {})),
      HasSubstr("tensor 'w': shape [2, 2] of F32 needs 16 bytes, got 12"));
  HostTensor one = makeTensor("same", DType::F32, {1}, 1);
  EXPECT_THAT(
      oneLineMessage(writeSafetensors(path("b.safetensors"), viewsOf({one, one}), {})),
      HasSubstr("two tensors are named 'same'"));
  HostTensor reserved = makeTensor("__metadata__", DType::F32, {1}, 1);
  EXPECT_THAT(
      oneLineMessage(writeSafetensors(path("c.safetensors"), viewsOf({reserved}), {})),
      HasSubstr("cannot store a tensor named '__metadata__'"));
  EXPECT_FALSE(checkpoint_io::pathExists(path("a.safetensors")));
}

// Every strict prefix of a valid file is refused with a message, never read
// past its end.
TEST_F(SafetensorsTest, EveryTruncationIsRefused) {
  const std::string file = path("t.safetensors");
  ASSERT_FALSE(llvm::errorToBool(writeSafetensors(
      file,
      viewsOf({makeTensor("a", DType::F32, {3}, 1), makeTensor("b", DType::I1, {5}, 2)}),
      {})));
  const std::vector<uint8_t> bytes = readBytes(file);
  for (size_t length = 0; length < bytes.size(); ++length) {
    const std::string message =
        parseError(std::vector<uint8_t>(bytes.begin(), bytes.begin() + length));
    EXPECT_THAT(message, HasSubstr("'t.safetensors': ")) << "length " << length;
  }
  EXPECT_EQ(parseError(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 5)),
            "'t.safetensors': truncated: 5 bytes, fewer than the 8-byte header size");
  EXPECT_THAT(
      parseError(std::vector<uint8_t>(bytes.begin(), bytes.end() - 1)),
      HasSubstr("truncated: tensor 'b' ends at byte 17 of the data, which has 16"));
}

// Random damage to the header either parses (if it happens to stay valid)
// or is an error; it must never crash or read out of bounds.
TEST_F(SafetensorsTest, RandomHeaderDamageNeverCrashes) {
  const std::string file = path("d.safetensors");
  ASSERT_FALSE(llvm::errorToBool(writeSafetensors(
      file,
      viewsOf({makeTensor("a", DType::F32, {3}, 1), makeTensor("b", DType::I64, {2}, 2)}),
      {{"format", "pt"}})));
  const std::vector<uint8_t> original = readBytes(file);
  std::mt19937 random(42);
  int refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> bytes = original;
    const size_t at = random() % (bytes.size() - 24); // mostly the header
    bytes[at] ^= static_cast<uint8_t>(1u << (random() % 8));
    if (parseError(bytes) != "(parsed)")
      ++refused;
  }
  EXPECT_GT(refused, 1000);
}

TEST_F(SafetensorsTest, MalformedHeadersGiveSpecificErrors) {
  const std::vector<uint8_t> eight(8, 0);
  auto entry = [](const std::string &name, const std::string &dtype,
                  const std::string &shape, const std::string &offsets) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":" + offsets + "}";
  };

  std::vector<uint8_t> huge(16, 0);
  huge[5] = 1; // 2^40 bytes of header
  EXPECT_THAT(parseError(huge), HasSubstr("exceeds the 100 MiB limit"));
  EXPECT_THAT(parseError(makeFile("[1,2]   ", {})),
              HasSubstr("the header does not begin with '{'"));
  EXPECT_THAT(parseError(makeFile("{\"a\":", {})),
              HasSubstr("the header is not valid JSON"));
  EXPECT_THAT(parseError(makeFile("{" + entry("a", "U8", "[8]", "[0,8]") + "}", eight)),
              HasSubstr("tensor 'a': dtype 'U8' is not one Loom supports"));
  EXPECT_THAT(parseError(makeFile("{" + entry("a", "F32", "[3]", "[0,8]") + "}", eight)),
              HasSubstr("tensor 'a': shape [3] of F32 needs 12 bytes, data_offsets "
                        "[0, 8] hold 8"));
  EXPECT_THAT(parseError(makeFile("{" + entry("a", "F32", "[-2]", "[0,8]") + "}", eight)),
              HasSubstr("tensor 'a': shape has an entry that is not a non-negative"));
  EXPECT_THAT(parseError(makeFile("{" + entry("a", "F32", "[2]", "[8,0]") + "}", eight)),
              HasSubstr("tensor 'a': data_offsets [8, 0] end before they begin"));
  EXPECT_THAT(parseError(makeFile("{" + entry("a", "F32", "[2]", "[0,8]") + "," +
                                      entry("b", "F32", "[1]", "[4,8]") + "}",
                                  eight)),
              HasSubstr("tensors 'a' and 'b' overlap"));
  EXPECT_THAT(parseError(makeFile("{" + entry("a", "F32", "[1]", "[4,8]") + "}", eight)),
              HasSubstr("bytes 0 to 4 of the data belong to no tensor"));
  EXPECT_THAT(parseError(makeFile("{" + entry("a", "F32", "[1]", "[0,4]") + "}", eight)),
              HasSubstr("4 bytes after the last tensor belong to no tensor"));
  EXPECT_THAT(parseError(makeFile("{" + entry("a", "F32", "[1]", "[0,4]") + "," +
                                      entry("a", "F32", "[1]", "[4,8]") + "}",
                                  eight)),
              HasSubstr("the header names 'a' twice"));
  // The same name spelled with an escape is the same name.
  EXPECT_THAT(parseError(makeFile("{" + entry("a", "F32", "[1]", "[0,4]") + "," +
                                      entry("\\u0061", "F32", "[1]", "[4,8]") + "}",
                                  eight)),
              HasSubstr("the header names 'a' twice"));
  EXPECT_THAT(parseError(makeFile("{\"__metadata__\":{\"k\":1}}", {})),
              HasSubstr("__metadata__ value 'k' is not a string"));
  EXPECT_THAT(parseError(makeFile("{\"a\":{\"dtype\":\"F32\",\"shape\":[],"
                                  "\"data_offsets\":[0,4],\"extra\":1}}",
                                  std::vector<uint8_t>(4))),
              HasSubstr("tensor 'a': unexpected key 'extra'"));
  // A header padded with trailing spaces, as the specification allows.
  const std::string padded = "{" + entry("a", "F32", "[2]", "[0,8]") + "}      ";
  llvm::Expected<SafetensorsFile> ok = parseSafetensors(makeFile(padded, eight), "p");
  ASSERT_TRUE(static_cast<bool>(ok)) << llvm::toString(ok.takeError());
  EXPECT_EQ(ok->tensors.at(0).shape, std::vector<int64_t>{2});
}

TEST_F(SafetensorsTest, MissingFileNamesThePath) {
  llvm::Expected<SafetensorsFile> read = readSafetensors(path("absent.safetensors"));
  ASSERT_FALSE(static_cast<bool>(read));
  EXPECT_EQ(oneLineMessage(read.takeError()),
            "'" + path("absent.safetensors") +
                "': cannot open: No such file or directory");
}

} // namespace
