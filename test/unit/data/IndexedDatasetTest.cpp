#include "runtime/data/IndexedDataset.h"

#include "DataTestUtils.h"

#include <functional>
#include <random>

using namespace loom;
using namespace loom::testing;

namespace {

/// An index laid out field by field from Megatron's description, independent
/// of Loom's writer, so a test can also state damaged ones.
struct IndexFields {
  std::string magic = std::string("MMIDIDX\0\0", 9);
  uint64_t version = 1;
  uint8_t dtypeCode = 8;
  std::vector<int32_t> sizes;
  std::vector<int64_t> pointers;
  std::vector<int64_t> documentIndex;
  std::optional<uint64_t> declaredSequences; // else sizes.size()
  std::optional<uint64_t> declaredDocumentEntries;

  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out(magic.begin(), magic.end());
    appendLE(out, version, 8);
    out.push_back(dtypeCode);
    appendLE(out, declaredSequences.value_or(sizes.size()), 8);
    appendLE(out, declaredDocumentEntries.value_or(documentIndex.size()), 8);
    for (int32_t size : sizes)
      appendLE(out, static_cast<uint32_t>(size), 4);
    for (int64_t pointer : pointers)
      appendLE(out, static_cast<uint64_t>(pointer), 8);
    for (int64_t start : documentIndex)
      appendLE(out, static_cast<uint64_t>(start), 8);
    return out;
  }
};

/// Three uint16 documents, the second made of two sequences: 5 tokens.
IndexFields validFields() {
  IndexFields fields;
  fields.sizes = {2, 1, 0, 2};
  fields.pointers = {0, 4, 6, 6};
  fields.documentIndex = {0, 1, 3, 4};
  return fields;
}
std::vector<uint8_t> validBin() { return {1, 0, 2, 0, 3, 0, 4, 1, 5, 0}; }

class IndexedDatasetTest : public DataDirTest {
protected:
  /// Writes PREFIX "d" and returns the open error ("" when it opens).
  std::string openWith(const std::vector<uint8_t> &index, const std::vector<uint8_t> &bin) {
    writeBytes(path("d.idx"), index);
    writeBytes(path("d.bin"), bin);
    return errorText(openMegatronDataset(path("d")));
  }
};

TEST_F(IndexedDatasetTest, ReadsAHandWrittenIndex) {
  ASSERT_EQ(openWith(validFields().bytes(), validBin()), "");
  TokenCorpus corpus = llvm::cantFail(openMegatronDataset(path("d")));
  EXPECT_EQ(corpus.size(), 5u);
  EXPECT_EQ(corpus.documentCount(), 3u);
  EXPECT_EQ(corpus.dtype(), TokenDType::U16);
  EXPECT_EQ(corpus.name(), path("d.bin"));
  std::vector<int64_t> tokens(5);
  ASSERT_EQ(errorText(corpus.read(0, tokens, 0)), "");
  EXPECT_EQ(tokens, (std::vector<int64_t>{1, 2, 3, 260, 5}));
}

TEST_F(IndexedDatasetTest, ReadsInt32Tokens) {
  IndexFields fields;
  fields.dtypeCode = 4;
  fields.sizes = {2};
  fields.pointers = {0};
  fields.documentIndex = {0, 1};
  std::vector<uint8_t> bin;
  appendLE(bin, 100000, 4);
  appendLE(bin, 7, 4);
  ASSERT_EQ(openWith(fields.bytes(), bin), "");
  TokenCorpus corpus = llvm::cantFail(openMegatronDataset(path("d")));
  std::vector<int64_t> tokens(2);
  ASSERT_EQ(errorText(corpus.read(0, tokens, 0)), "");
  EXPECT_EQ(tokens, (std::vector<int64_t>{100000, 7}));
}

TEST_F(IndexedDatasetTest, AcceptsMultimodalSequenceModes) {
  std::vector<uint8_t> index = validFields().bytes();
  index.insert(index.end(), {0, 1, 0, 1}); // one i8 mode per sequence
  EXPECT_EQ(openWith(index, validBin()), "");
}

TEST_F(IndexedDatasetTest, WriterMatchesMegatronsLayout) {
  auto writer = llvm::cantFail(IndexedDatasetWriter::create(path("w"), TokenDType::U16));
  ASSERT_EQ(errorText(writer->addDocument({1, 2})), "");
  ASSERT_EQ(errorText(writer->addDocument({})), "");
  const uint8_t text[] = {'h', 'i', 0xFF};
  ASSERT_EQ(errorText(writer->addByteDocument(text)), "");
  // Nothing appears before finish().
  EXPECT_EQ(listDir().size(), 1u); // the .bin's temporary file
  ASSERT_EQ(errorText(writer->finish()), "");

  IndexFields expected;
  expected.sizes = {2, 0, 3};
  expected.pointers = {0, 4, 4};
  expected.documentIndex = {0, 1, 2, 3};
  EXPECT_EQ(readBytes(path("w.idx")), expected.bytes());
  EXPECT_EQ(readBytes(path("w.bin")),
            (std::vector<uint8_t>{1, 0, 2, 0, 'h', 0, 'i', 0, 0xFF, 0}));
  EXPECT_EQ(listDir().size(), 2u); // no temporary files left

  TokenCorpus corpus = llvm::cantFail(openMegatronDataset(path("w")));
  EXPECT_EQ(corpus.documentCount(), 3u);
  std::vector<int64_t> tokens(5);
  ASSERT_EQ(errorText(corpus.read(0, tokens, 256)), "");
  EXPECT_EQ(tokens, (std::vector<int64_t>{1, 2, 'h', 'i', 255}));
}

TEST_F(IndexedDatasetTest, WriterRejectsTokensTheTypeCannotHold) {
  auto writer = llvm::cantFail(IndexedDatasetWriter::create(path("w"), TokenDType::U16));
  EXPECT_NE(errorText(writer->addDocument({65536})).find("does not fit u16"),
            std::string::npos);
  EXPECT_NE(errorText(writer->addDocument({-1})).find("does not fit u16"), std::string::npos);
  auto signedWriter = llvm::cantFail(IndexedDatasetWriter::create(path("s"), TokenDType::I16));
  EXPECT_EQ(errorText(signedWriter->addDocument({-32768, 32767})), "");
  EXPECT_NE(errorText(signedWriter->addDocument({32768})), "");
  EXPECT_NE(errorText(IndexedDatasetWriter::create(path("u"), TokenDType::U32))
                .find("cannot hold u32"),
            std::string::npos);
}

TEST_F(IndexedDatasetTest, EveryDamagedFieldIsAnErrorNamingTheFile) {
  struct Case {
    const char *what;
    std::function<void(IndexFields &)> damage;
    const char *expected;
  };
  const std::vector<Case> cases = {
      {"magic", [](IndexFields &f) { f.magic[0] = 'X'; }, "MMIDIDX"},
      {"version", [](IndexFields &f) { f.version = 2; }, "version 2"},
      {"float dtype", [](IndexFields &f) { f.dtypeCode = 7; }, "float32"},
      {"unknown dtype", [](IndexFields &f) { f.dtypeCode = 42; }, "dtype code 42"},
      {"negative size", [](IndexFields &f) { f.sizes[1] = -1; }, "negative size"},
      {"size too big", [](IndexFields &f) { f.sizes[3] = 3; }, "bytes but"},
      {"pointer", [](IndexFields &f) { f.pointers[2] = 8; }, "starts at byte 8"},
      {"document start", [](IndexFields &f) { f.documentIndex[0] = 1; }, "entry 0"},
      {"document order", [](IndexFields &f) { f.documentIndex = {0, 3, 1, 4}; }, "entry 2"},
      {"document end", [](IndexFields &f) { f.documentIndex = {0, 1, 3}; }, "ends at"},
      {"document past end", [](IndexFields &f) { f.documentIndex = {0, 1, 5, 4}; },
       "entry 2"},
      {"no documents", [](IndexFields &f) { f.documentIndex = {}; }, "empty"},
      {"sequence count", [](IndexFields &f) { f.declaredSequences = 5; }, "truncated"},
      {"huge sequence count",
       [](IndexFields &f) { f.declaredSequences = uint64_t(1) << 62; }, "truncated"},
      {"huge document count",
       [](IndexFields &f) { f.declaredDocumentEntries = ~uint64_t(0); }, "truncated"},
      {"trailing bytes", [](IndexFields &f) { f.declaredDocumentEntries = 2; },
       "trailing bytes"},
  };
  for (const Case &c : cases) {
    IndexFields fields = validFields();
    c.damage(fields);
    std::string message = openWith(fields.bytes(), validBin());
    EXPECT_NE(message.find("d.idx"), std::string::npos) << c.what << ": " << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.what << ": " << message;
  }
}

TEST_F(IndexedDatasetTest, DataFileOfTheWrongSizeIsAnError) {
  std::vector<uint8_t> bin = validBin();
  bin.pop_back();
  std::string message = openWith(validFields().bytes(), bin);
  EXPECT_NE(message.find("d.bin' has 9"), std::string::npos) << message;
  bin = validBin();
  bin.push_back(0);
  bin.push_back(0);
  EXPECT_NE(openWith(validFields().bytes(), bin), "");
}

TEST_F(IndexedDatasetTest, MissingFilesAreErrorsNamingThem) {
  writeBytes(path("d.idx"), validFields().bytes());
  std::string message = errorText(openMegatronDataset(path("d")));
  EXPECT_NE(message.find("d.bin"), std::string::npos) << message;
  message = errorText(openMegatronDataset(path("none")));
  EXPECT_NE(message.find("none.idx"), std::string::npos) << message;
}

TEST_F(IndexedDatasetTest, EveryTruncationOfTheIndexIsAnError) {
  const std::vector<uint8_t> index = validFields().bytes();
  for (size_t length = 0; length < index.size(); ++length) {
    std::string message =
        openWith(std::vector<uint8_t>(index.begin(), index.begin() + length), validBin());
    EXPECT_NE(message.find("d.idx"), std::string::npos) << length << ": " << message;
  }
}

TEST_F(IndexedDatasetTest, BitFlipsNeverCrashAndWhatOpensIsReadable) {
  const std::vector<uint8_t> index = validFields().bytes();
  std::mt19937 random(7);
  int rejected = 0;
  for (size_t byte = 0; byte < index.size(); ++byte) {
    std::vector<uint8_t> damaged = index;
    damaged[byte] ^= static_cast<uint8_t>(1u << (random() % 8));
    if (!openWith(damaged, validBin()).empty()) {
      ++rejected;
      continue;
    }
    // A flip can leave a valid index (say, an empty document); then every
    // token must still be readable.
    TokenCorpus corpus = llvm::cantFail(openMegatronDataset(path("d")));
    std::vector<int64_t> tokens(corpus.size());
    EXPECT_EQ(errorText(corpus.read(0, tokens, 0)), "") << byte;
  }
  // Most fields are checked exactly, so nearly every flip must be caught.
  EXPECT_GT(rejected, static_cast<int>(index.size()) * 3 / 4);
}

} // namespace
