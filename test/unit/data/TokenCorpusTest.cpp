#include "runtime/data/TokenCorpus.h"

#include "runtime/support/Npy.h"

#include "DataTestUtils.h"

using namespace loom;
using namespace loom::testing;

namespace {

class TokenCorpusTest : public DataDirTest {};

std::vector<int64_t> readAll(const TokenCorpus &corpus, int64_t vocabSize = 0) {
  std::vector<int64_t> tokens(corpus.size());
  llvm::Error err = corpus.read(0, tokens, vocabSize);
  EXPECT_FALSE(err) << llvm::toString(std::move(err));
  return tokens;
}

std::vector<uint8_t> encode(const std::vector<int64_t> &tokens, size_t width) {
  std::vector<uint8_t> bytes;
  for (int64_t token : tokens)
    appendLE(bytes, static_cast<uint64_t>(token), width);
  return bytes;
}

TEST_F(TokenCorpusTest, FlatUint16ReadsBackEveryToken) {
  const std::vector<int64_t> tokens = {0, 1, 255, 256, 65535, 1234, 7};
  writeBytes(path("t.u16"), encode(tokens, 2));
  llvm::Expected<TokenCorpus> corpus = openFlatTokenFile(path("t.u16"), TokenDType::U16);
  ASSERT_TRUE(bool(corpus)) << llvm::toString(corpus.takeError());
  EXPECT_EQ(corpus->size(), tokens.size());
  EXPECT_EQ(corpus->dtype(), TokenDType::U16);
  EXPECT_FALSE(corpus->documentCount().has_value());
  EXPECT_EQ(readAll(*corpus), tokens);
}

TEST_F(TokenCorpusTest, FlatUint32HoldsIdsBeyond16Bits) {
  const std::vector<int64_t> tokens = {70000, 0, 4294967295, 65536, 3};
  writeBytes(path("t.u32"), encode(tokens, 4));
  llvm::Expected<TokenCorpus> corpus = openFlatTokenFile(path("t.u32"), TokenDType::U32);
  ASSERT_TRUE(bool(corpus)) << llvm::toString(corpus.takeError());
  EXPECT_EQ(readAll(*corpus), tokens);
}

TEST_F(TokenCorpusTest, ReadsAnInnerRange) {
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 100; ++i)
    tokens.push_back(i * 3);
  writeBytes(path("t.u16"), encode(tokens, 2));
  TokenCorpus corpus = llvm::cantFail(openFlatTokenFile(path("t.u16"), TokenDType::U16));
  std::vector<int64_t> window(5);
  ASSERT_EQ(errorText(corpus.read(40, window, 0)), "");
  EXPECT_EQ(window, (std::vector<int64_t>{120, 123, 126, 129, 132}));
  EXPECT_NE(errorText(corpus.read(96, window, 0)).find("past the end"), std::string::npos);
}

TEST_F(TokenCorpusTest, FlatFileOfPartialTokenIsAnError) {
  writeBytes(path("odd.u16"), {1, 0, 2});
  std::string message = errorText(openFlatTokenFile(path("odd.u16"), TokenDType::U16));
  EXPECT_NE(message.find("odd.u16"), std::string::npos) << message;
  EXPECT_NE(message.find("not a multiple"), std::string::npos) << message;
}

TEST_F(TokenCorpusTest, MissingFileIsAnErrorNamingIt) {
  std::string message = errorText(openFlatTokenFile(path("none.u16"), TokenDType::U16));
  EXPECT_NE(message.find("none.u16"), std::string::npos) << message;
}

TEST_F(TokenCorpusTest, NpyIntegerArraysReadBack) {
  const std::vector<int64_t> tokens = {5, 0, 200, 17, 99};
  const std::pair<NpyKind, size_t> kinds[] = {{NpyKind::U8, 1},  {NpyKind::U16, 2},
                                              {NpyKind::U32, 4}, {NpyKind::I32, 4},
                                              {NpyKind::I64, 8}};
  for (auto [kind, width] : kinds) {
    NpyArray array;
    array.kind = kind;
    array.shape = {static_cast<int64_t>(tokens.size())};
    array.data = encode(tokens, width);
    const std::string file = path("t" + std::to_string(width) + ".npy");
    ASSERT_EQ(errorText(writeNpy(file, array)), "");
    llvm::Expected<TokenCorpus> corpus = openNpyTokenFile(file);
    ASSERT_TRUE(bool(corpus)) << llvm::toString(corpus.takeError());
    EXPECT_EQ(readAll(*corpus), tokens) << npyDescr(kind);
  }
}

TEST_F(TokenCorpusTest, NpyMustBeOneDimensionalIntegers) {
  NpyArray matrix;
  matrix.kind = NpyKind::I32;
  matrix.shape = {2, 2};
  matrix.data = encode({1, 2, 3, 4}, 4);
  ASSERT_EQ(errorText(writeNpy(path("m.npy"), matrix)), "");
  std::string message = errorText(openNpyTokenFile(path("m.npy")));
  EXPECT_NE(message.find("m.npy"), std::string::npos) << message;
  EXPECT_NE(message.find("1-D"), std::string::npos) << message;

  NpyArray floats;
  floats.kind = NpyKind::F32;
  floats.shape = {1};
  floats.data = {0, 0, 128, 63};
  ASSERT_EQ(errorText(writeNpy(path("f.npy"), floats)), "");
  message = errorText(openNpyTokenFile(path("f.npy")));
  EXPECT_NE(message.find("<f4"), std::string::npos) << message;
}

TEST_F(TokenCorpusTest, TokensAtOrAboveTheVocabularyAreErrors) {
  writeBytes(path("t.u16"), encode({1, 2, 300, 4}, 2));
  TokenCorpus corpus = llvm::cantFail(openFlatTokenFile(path("t.u16"), TokenDType::U16));
  std::vector<int64_t> tokens(4);
  std::string message = errorText(corpus.read(0, tokens, 256));
  EXPECT_NE(message.find("t.u16"), std::string::npos) << message;
  EXPECT_NE(message.find("token 300 at position 2"), std::string::npos) << message;
  EXPECT_NE(message.find("256"), std::string::npos) << message;
  // The vocabulary is an exclusive bound: 300 fits 301 but not 300.
  EXPECT_FALSE(errorText(corpus.read(0, tokens, 300)).empty());
  EXPECT_TRUE(errorText(corpus.read(0, tokens, 301)).empty());
  EXPECT_TRUE(errorText(corpus.read(0, tokens, 0)).empty());
}

TEST_F(TokenCorpusTest, NegativeTokensAreErrors) {
  NpyArray array;
  array.kind = NpyKind::I32;
  array.shape = {3};
  array.data = encode({1, -7, 2}, 4);
  ASSERT_EQ(errorText(writeNpy(path("neg.npy"), array)), "");
  TokenCorpus corpus = llvm::cantFail(openNpyTokenFile(path("neg.npy")));
  std::vector<int64_t> tokens(3);
  std::string message = errorText(corpus.read(0, tokens, 0));
  EXPECT_NE(message.find("token -7 at position 1 is negative"), std::string::npos)
      << message;
}

TEST(TokenDTypeTest, NamesRoundTrip) {
  for (TokenDType type : {TokenDType::U8, TokenDType::I8, TokenDType::I16, TokenDType::U16,
                          TokenDType::I32, TokenDType::U32, TokenDType::I64}) {
    EXPECT_EQ(parseTokenDType(tokenDTypeName(type)), type);
  }
  EXPECT_EQ(parseTokenDType("uint16"), TokenDType::U16);
  EXPECT_EQ(parseTokenDType("int32"), TokenDType::I32);
  EXPECT_EQ(tokenDTypeSize(TokenDType::U32), 4u);
  EXPECT_FALSE(parseTokenDType("f32").has_value());
}

} // namespace
