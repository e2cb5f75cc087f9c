#include "runtime/data/ByteTokens.h"

#include "runtime/data/TokenCorpus.h"

#include "DataTestUtils.h"

using namespace loom;
using namespace loom::testing;

namespace {

std::vector<std::string> documentsOf(llvm::StringRef text) {
  std::vector<std::string> documents;
  llvm::Error err = forEachDocument(text, [&](llvm::StringRef document) {
    documents.push_back(document.str());
    return llvm::Error::success();
  });
  EXPECT_FALSE(err) << llvm::toString(std::move(err));
  return documents;
}

using Docs = std::vector<std::string>;

TEST(ByteTokensTest, DocumentsAreSplitAtBlankLines) {
  EXPECT_EQ(documentsOf("a\nb\n\n\nc\n  \t\r\n d\n"), (Docs{"a\nb\n", "c\n", " d\n"}));
  EXPECT_EQ(documentsOf("\n\nfirst\r\n\r\nsecond"), (Docs{"first\r\n", "second"}));
  EXPECT_EQ(documentsOf("one line"), (Docs{"one line"}));
  EXPECT_EQ(documentsOf("only\n\n"), (Docs{"only\n"}));
  EXPECT_EQ(documentsOf(" \n\n\t\n"), Docs{});
  EXPECT_EQ(documentsOf(""), Docs{});
}

TEST(ByteTokensTest, ADocumentErrorStopsTheWalk) {
  int calls = 0;
  llvm::Error err = forEachDocument("a\n\nb\n\nc\n", [&](llvm::StringRef) -> llvm::Error {
    if (++calls == 2)
      return llvm::createStringError(std::errc::io_error, "stop");
    return llvm::Error::success();
  });
  EXPECT_EQ(errorText(std::move(err)), "stop");
  EXPECT_EQ(calls, 2);
}

class ByteTokenFilesTest : public DataDirTest {};

std::vector<int64_t> bytesAsTokens(llvm::StringRef text) {
  std::vector<int64_t> tokens;
  for (char c : text)
    tokens.push_back(static_cast<uint8_t>(c));
  return tokens;
}

TEST_F(ByteTokenFilesTest, FlatFilesHoldEveryByte) {
  const std::string text = std::string("hi\n\n\xff\x00 end", 9);
  for (TokenDType dtype : {TokenDType::U16, TokenDType::U32, TokenDType::U8}) {
    const std::string file = path("t." + std::string(tokenDTypeName(dtype)));
    llvm::Expected<ByteTokenCounts> counts =
        writeFlatByteTokens(text, file, dtype, [](uint64_t) {});
    ASSERT_TRUE(bool(counts)) << llvm::toString(counts.takeError());
    EXPECT_EQ(counts->tokens, 9u);
    EXPECT_EQ(readBytes(file).size(), 9 * tokenDTypeSize(dtype));
    TokenCorpus corpus = llvm::cantFail(openFlatTokenFile(file, dtype));
    std::vector<int64_t> tokens(corpus.size());
    ASSERT_EQ(errorText(corpus.read(0, tokens, kByteVocabularySize)), "");
    EXPECT_EQ(tokens, bytesAsTokens(text));
  }
  EXPECT_EQ(listDir().size(), 3u) << "no temporary files are left behind";
  EXPECT_NE(errorText(writeFlatByteTokens(text, path("t.i8"), TokenDType::I8,
                                          [](uint64_t) {})),
            "");
}

TEST_F(ByteTokenFilesTest, MegatronDatasetsHoldTheDocuments) {
  const std::string text = "first doc\nline two\n\n\nsecond\n \n\xc3\xa9t\xc3\xa9\n";
  llvm::Expected<ByteTokenCounts> counts =
      writeMegatronByteTokens(text, path("corpus"), [](uint64_t) {});
  ASSERT_TRUE(bool(counts)) << llvm::toString(counts.takeError());
  EXPECT_EQ(counts->documents, 3u);
  const std::string joined = "first doc\nline two\nsecond\n\xc3\xa9t\xc3\xa9\n";
  EXPECT_EQ(counts->tokens, joined.size());

  TokenCorpus corpus = llvm::cantFail(openMegatronDataset(path("corpus")));
  EXPECT_EQ(corpus.documentCount(), 3u);
  std::vector<int64_t> tokens(corpus.size());
  ASSERT_EQ(errorText(corpus.read(0, tokens, kByteVocabularySize)), "");
  EXPECT_EQ(tokens, bytesAsTokens(joined));
  EXPECT_EQ(listDir().size(), 2u);
}

TEST_F(ByteTokenFilesTest, TextWithoutDocumentsWritesNothing) {
  std::string message = errorText(writeMegatronByteTokens("\n  \n", path("e"), [](uint64_t) {}));
  EXPECT_NE(message.find("no documents"), std::string::npos) << message;
  EXPECT_TRUE(listDir().empty());
}

TEST_F(ByteTokenFilesTest, UnwritableDestinationsAreErrors) {
  std::string message =
      errorText(writeFlatByteTokens("x", path("missing/t.u16"), TokenDType::U16, [](uint64_t) {}));
  EXPECT_NE(message.find("missing/t.u16"), std::string::npos) << message;
}

} // namespace
