#include "runtime/data/TokenSource.h"

#include "runtime/data/IndexedDataset.h"
#include "runtime/support/Npy.h"

#include "DataTestUtils.h"

#include <algorithm>
#include <set>

using namespace loom;
using namespace loom::testing;

namespace {

/// A corpus whose token at position p is p, so a window names itself.
TokenCorpus countingCorpus(uint64_t tokens) {
  std::vector<uint8_t> bytes;
  for (uint64_t p = 0; p < tokens; ++p)
    appendLE(bytes, p, 4);
  return TokenCorpus::fromBytes(std::move(bytes), TokenDType::U32, "counting");
}

TokenSourceOptions shape(int64_t batch, int64_t seq, uint64_t seed = 0) {
  TokenSourceOptions options;
  options.batchSize = batch;
  options.sequenceLength = seq;
  options.seed = seed;
  return options;
}

std::unique_ptr<TokenSource> countingSource(uint64_t tokens,
                                            const TokenSourceOptions &options) {
  return llvm::cantFail(createCorpusTokenSource(countingCorpus(tokens), options));
}

std::vector<int64_t> take(TokenSource &source) {
  llvm::Expected<std::vector<int64_t>> batch = source.nextBatch();
  EXPECT_TRUE(bool(batch)) << llvm::toString(batch.takeError());
  return batch ? *batch : std::vector<int64_t>();
}

std::vector<std::vector<int64_t>> take(TokenSource &source, int batches) {
  std::vector<std::vector<int64_t>> out;
  for (int i = 0; i < batches; ++i)
    out.push_back(take(source));
  return out;
}

/// The start token of each row of a counting-corpus batch.
std::vector<int64_t> rowStarts(const TokenSource &source, const std::vector<int64_t> &batch) {
  std::vector<int64_t> starts;
  for (size_t row = 0; row < batch.size(); row += source.sequenceLength() + 1)
    starts.push_back(batch[row]);
  return starts;
}

TEST(TokenSourceTest, WindowsOverlapByOneTokenAndRowsAreContiguous) {
  auto source = countingSource(/*tokens=*/101, shape(/*batch=*/3, /*seq=*/10));
  // Windows start every 10 tokens and need 11: 101 tokens make 10.
  EXPECT_EQ(source->windowsPerEpoch(), 10u);
  EXPECT_EQ(source->batchTokens(), 33u);
  std::vector<int64_t> batch = take(*source);
  ASSERT_EQ(batch.size(), 33u);
  for (int row = 0; row < 3; ++row) {
    const int64_t start = batch[row * 11];
    EXPECT_EQ(start % 10, 0) << "windows start at multiples of the sequence length";
    for (int j = 0; j < 11; ++j)
      EXPECT_EQ(batch[row * 11 + j], start + j);
  }
}

TEST(TokenSourceTest, AnEpochUsesEveryWindowOnce) {
  for (int64_t batch : {1, 3, 7}) {
    auto source = countingSource(/*tokens=*/1000, shape(batch, /*seq=*/8, /*seed=*/9));
    const uint64_t windows = source->windowsPerEpoch();
    ASSERT_EQ(windows, 124u); // (1000 - 1) / 8
    std::vector<int64_t> starts;
    while (starts.size() < windows) {
      for (int64_t start : rowStarts(*source, take(*source)))
        starts.push_back(start);
    }
    // The batch that crosses the epoch boundary carries the next epoch's
    // first windows; only this epoch's windows are compared.
    starts.resize(windows);
    std::vector<int64_t> expected;
    for (uint64_t w = 0; w < windows; ++w)
      expected.push_back(static_cast<int64_t>(w * 8));
    std::vector<int64_t> sorted = starts;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, expected) << "batch " << batch;
    EXPECT_NE(starts, expected) << "the order is shuffled";
  }
}

TEST(TokenSourceTest, EpochsAdvanceAndReshuffle) {
  auto source = countingSource(/*tokens=*/51, shape(/*batch=*/1, /*seq=*/5, /*seed=*/3));
  ASSERT_EQ(source->windowsPerEpoch(), 10u);
  std::vector<int64_t> first, second;
  for (int i = 0; i < 10; ++i)
    first.push_back(take(*source)[0]);
  EXPECT_EQ(source->state(), (DataPosition{1, 0}));
  for (int i = 0; i < 10; ++i)
    second.push_back(take(*source)[0]);
  EXPECT_EQ(source->state(), (DataPosition{2, 0}));
  EXPECT_NE(first, second);
  std::sort(first.begin(), first.end());
  std::sort(second.begin(), second.end());
  EXPECT_EQ(first, second);
}

TEST(TokenSourceTest, BatchesRunAcrossEpochBoundaries) {
  auto source = countingSource(/*tokens=*/26, shape(/*batch=*/4, /*seq=*/5));
  ASSERT_EQ(source->windowsPerEpoch(), 5u);
  take(*source);
  EXPECT_EQ(source->state(), (DataPosition{0, 4}));
  take(*source);
  EXPECT_EQ(source->state(), (DataPosition{1, 3}));
}

TEST(TokenSourceTest, TheSeedDeterminesTheOrder) {
  auto a = countingSource(10000, shape(4, 16, /*seed=*/1234));
  auto b = countingSource(10000, shape(4, 16, /*seed=*/1234));
  auto c = countingSource(10000, shape(4, 16, /*seed=*/1235));
  const auto batchesA = take(*a, 5);
  EXPECT_EQ(batchesA, take(*b, 5));
  EXPECT_NE(batchesA, take(*c, 5));
}

TEST(TokenSourceTest, RestoringAPositionReplaysTheSameTokens) {
  // 40 windows, batch 3: 12 + 7 batches cross an epoch boundary.
  for (int taken : {0, 5, 12, 13}) {
    auto uninterrupted = countingSource(321, shape(3, 8, /*seed=*/77));
    take(*uninterrupted, taken);
    const DataPosition saved = uninterrupted->state();
    const auto expected = take(*uninterrupted, 7);

    // The position travels through JSON, as in a checkpoint.
    llvm::json::Value json = toJSON(saved);
    std::string text;
    llvm::raw_string_ostream(text) << json;
    llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
    ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
    DataPosition restored;
    llvm::json::Path::Root root;
    ASSERT_TRUE(fromJSON(*parsed, restored, root)) << text;
    EXPECT_EQ(restored, saved);

    auto resumed = countingSource(321, shape(3, 8, /*seed=*/77));
    ASSERT_EQ(errorText(resumed->restore(restored)), "");
    EXPECT_EQ(take(*resumed, 7), expected) << "after " << taken << " batches";
  }
}

TEST(TokenSourceTest, RestoreRejectsPositionsPastTheEpoch) {
  auto source = countingSource(51, shape(1, 5));
  std::string message = errorText(source->restore(DataPosition{0, 10}));
  EXPECT_NE(message.find("10 windows per epoch"), std::string::npos) << message;
  EXPECT_EQ(errorText(source->restore(DataPosition{7, 9})), "");
  EXPECT_EQ(source->state(), (DataPosition{7, 9}));
}

TEST(TokenSourceTest, PositionJsonNeedsBothIntegers) {
  DataPosition position;
  llvm::json::Path::Root root;
  EXPECT_FALSE(fromJSON(llvm::json::Object{{"epoch", 1}}, position, root));
  llvm::json::Path::Root root2;
  EXPECT_FALSE(fromJSON(llvm::json::Object{{"epoch", 1}, {"index", "x"}}, position, root2));
}

TEST(TokenSourceTest, AFileTooSmallForOneWindowIsAnError) {
  std::string message =
      errorText(createCorpusTokenSource(countingCorpus(8), shape(1, 8)));
  EXPECT_NE(message.find("'counting': 8 tokens are too few for one window of 9"),
            std::string::npos)
      << message;
  // Exactly one window's worth is enough, and every batch is that window.
  auto source = countingSource(9, shape(2, 8));
  EXPECT_EQ(source->windowsPerEpoch(), 1u);
  std::vector<int64_t> batch = take(*source);
  EXPECT_EQ(rowStarts(*source, batch), (std::vector<int64_t>{0, 0}));
}

TEST(TokenSourceTest, BadShapesAreErrors) {
  EXPECT_NE(errorText(createCorpusTokenSource(countingCorpus(100), shape(0, 8)))
                .find("batch size"),
            std::string::npos);
  EXPECT_NE(errorText(createCorpusTokenSource(countingCorpus(100), shape(1, 0)))
                .find("sequence length"),
            std::string::npos);
  auto source = countingSource(100, shape(2, 4));
  std::vector<int64_t> wrong(9);
  EXPECT_NE(errorText(source->nextBatch(wrong)).find("needs 10 elements"), std::string::npos);
}

TEST(TokenSourceTest, VocabularyViolationsStopTheBatchWithoutMovingOn) {
  std::vector<uint8_t> bytes;
  for (int p = 0; p < 41; ++p)
    appendLE(bytes, p == 22 ? 500 : 1, 2);
  TokenSourceOptions options = shape(/*batch=*/2, /*seq=*/4, /*seed=*/5);
  options.vocabSize = 100;
  auto source = llvm::cantFail(createCorpusTokenSource(
      TokenCorpus::fromBytes(bytes, TokenDType::U16, "bad.u16"), options));
  std::string message;
  for (int step = 0; step < 5 && message.empty(); ++step) {
    const DataPosition before = source->state();
    message = errorText(source->nextBatch().takeError());
    if (!message.empty())
      EXPECT_EQ(source->state(), before);
  }
  EXPECT_NE(message.find("'bad.u16': token 500 at position 22 is not below the "
                         "vocabulary size 100"),
            std::string::npos)
      << message;
}

TEST(TokenSourceTest, SyntheticTokensAreSeededAndBelowTheVocabulary) {
  TokenSourceOptions options = shape(4, 32, /*seed=*/11);
  auto a = llvm::cantFail(createSyntheticTokenSource(1000, options));
  auto b = llvm::cantFail(createSyntheticTokenSource(1000, options));
  options.seed = 12;
  auto c = llvm::cantFail(createSyntheticTokenSource(1000, options));
  EXPECT_EQ(a->windowsPerEpoch(), 0u);
  const auto batches = take(*a, 3);
  EXPECT_EQ(batches, take(*b, 3));
  EXPECT_NE(batches, take(*c, 3));
  std::set<int64_t> distinct;
  for (const auto &batch : batches)
    for (int64_t token : batch) {
      EXPECT_GE(token, 0);
      EXPECT_LT(token, 1000);
      distinct.insert(token);
    }
  EXPECT_GT(distinct.size(), 300u) << "396 draws from 1000 should rarely collide";
  EXPECT_EQ(a->state(), (DataPosition{0, 12}));

  auto resumed = llvm::cantFail(createSyntheticTokenSource(1000, shape(4, 32, 11)));
  ASSERT_EQ(errorText(resumed->restore(DataPosition{0, 8})), "");
  EXPECT_EQ(take(*resumed), batches[2]);
}

TEST(TokenSourceTest, SyntheticVocabularyMustFitTheModel) {
  TokenSourceOptions options = shape(1, 4);
  options.vocabSize = 512;
  EXPECT_NE(errorText(openTokenSource("synthetic:1000", options)).find("512"),
            std::string::npos);
  EXPECT_EQ(errorText(openTokenSource("synthetic:512", options)), "");
  EXPECT_NE(errorText(openTokenSource("synthetic:0", options)), "");
  EXPECT_NE(errorText(openTokenSource("synthetic:many", options)).find("synthetic:VOCAB"),
            std::string::npos);
}

class OpenTokenSourceTest : public DataDirTest {
protected:
  /// Writes tokens 0..20 as `width`-byte little-endian integers.
  std::vector<uint8_t> countingBytes(size_t width) {
    std::vector<uint8_t> bytes;
    for (uint64_t p = 0; p < 21; ++p)
      appendLE(bytes, p + 1000, width);
    return bytes;
  }
  /// The sorted row starts of one epoch of windows of 5 (seq 4).
  std::string firstEpoch(const std::string &name, std::optional<TokenDType> dtype = {}) {
    TokenSourceOptions options = shape(1, 4, /*seed=*/3);
    options.dtype = dtype;
    llvm::Expected<std::unique_ptr<TokenSource>> source = openTokenSource(name, options);
    if (!source)
      return "error: " + llvm::toString(source.takeError());
    std::vector<int64_t> starts;
    for (uint64_t i = 0; i < (*source)->windowsPerEpoch(); ++i)
      starts.push_back(take(**source)[0]);
    std::sort(starts.begin(), starts.end());
    std::string text;
    for (int64_t start : starts)
      text += std::to_string(start) + " ";
    return text;
  }
  const std::string kExpected = "1000 1004 1008 1012 1016 ";
};

TEST_F(OpenTokenSourceTest, ChoosesTheFormatFromTheName) {
  writeBytes(path("t.u16"), countingBytes(2));
  writeBytes(path("t.u32"), countingBytes(4));
  writeBytes(path("raw.bin"), countingBytes(4));
  writeBytes(path("raw.tokens"), countingBytes(2));
  NpyArray array;
  array.kind = NpyKind::I64;
  array.shape = {21};
  array.data = countingBytes(8);
  ASSERT_EQ(errorText(writeNpy(path("t.npy"), array)), "");
  auto writer = llvm::cantFail(IndexedDatasetWriter::create(path("mega"), TokenDType::U16));
  std::vector<int64_t> tokens;
  for (int64_t p = 0; p < 21; ++p)
    tokens.push_back(p + 1000);
  ASSERT_EQ(errorText(writer->addDocument(llvm::ArrayRef(tokens).take_front(10))), "");
  ASSERT_EQ(errorText(writer->addDocument(llvm::ArrayRef(tokens).drop_front(10))), "");
  ASSERT_EQ(errorText(writer->finish()), "");

  EXPECT_EQ(firstEpoch(path("t.u16")), kExpected);
  EXPECT_EQ(firstEpoch(path("t.u32")), kExpected);
  EXPECT_EQ(firstEpoch(path("t.npy")), kExpected);
  EXPECT_EQ(firstEpoch(path("mega")), kExpected);
  EXPECT_EQ(firstEpoch(path("mega.idx")), kExpected);
  EXPECT_EQ(firstEpoch(path("mega.bin")), kExpected);
  EXPECT_EQ(firstEpoch(path("raw.bin"), TokenDType::U32), kExpected);
  EXPECT_EQ(firstEpoch(path("raw.tokens"), TokenDType::U16), kExpected);

  auto megatron = llvm::cantFail(openTokenSource(path("mega"), shape(1, 4)));
  EXPECT_NE(megatron->describe().find("2 documents"), std::string::npos)
      << megatron->describe();
}

TEST_F(OpenTokenSourceTest, UnclearOrConflictingNamesAreErrors) {
  writeBytes(path("raw.bin"), countingBytes(2));
  writeBytes(path("t.u16"), countingBytes(2));
  std::string message = firstEpoch(path("raw.bin"));
  EXPECT_NE(message.find("cannot tell the token format"), std::string::npos) << message;
  message = firstEpoch(path("t.u16"), TokenDType::U32);
  EXPECT_NE(message.find("its name says u16 tokens but u32 was asked for"),
            std::string::npos)
      << message;
  message = firstEpoch(path("absent"));
  EXPECT_NE(message.find("no such file"), std::string::npos) << message;
  message = firstEpoch(path("absent.u16"));
  EXPECT_NE(message.find("absent.u16"), std::string::npos) << message;
}

} // namespace
