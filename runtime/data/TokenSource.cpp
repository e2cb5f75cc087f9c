#include "runtime/data/TokenSource.h"

#include "runtime/data/WindowOrder.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"

namespace loom {

namespace {

llvm::Error sourceError(const llvm::Twine &message) {
  return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                 message);
}

/// Windows of a corpus: window w is tokens [w * seq, w * seq + seq + 1).
class CorpusTokenSource : public TokenSource {
public:
  CorpusTokenSource(TokenCorpus corpus, const TokenSourceOptions &options,
                    uint64_t windows)
      : TokenSource(options), corpus_(std::move(corpus)), windows_(windows) {}

  uint64_t windowsPerEpoch() const override { return windows_; }

  std::string describe() const override {
    std::string text = "'" + corpus_.name() + "' (" +
                       std::string(tokenDTypeName(corpus_.dtype())) + ", " +
                       std::to_string(corpus_.size()) + " tokens";
    if (std::optional<uint64_t> documents = corpus_.documentCount())
      text += ", " + std::to_string(*documents) + " documents";
    return text + ", " + std::to_string(windows_) + " windows of " +
           std::to_string(sequenceLength_ + 1) + ")";
  }

protected:
  llvm::Error readWindow(const DataPosition &position,
                         llvm::MutableArrayRef<int64_t> window) const override {
    const uint64_t chosen = sequential_ ? position.index
                                        : EpochPermutation(windows_, seed_, position.epoch)(position.index);
    return corpus_.read(chosen * static_cast<uint64_t>(sequenceLength_), window, vocabSize_);
  }

private:
  TokenCorpus corpus_;
  uint64_t windows_;
};

class SyntheticTokenSource : public TokenSource {
public:
  SyntheticTokenSource(int64_t vocabSize, const TokenSourceOptions &options)
      : TokenSource(options), syntheticVocab_(vocabSize) {}

  uint64_t windowsPerEpoch() const override { return 0; }

  std::string describe() const override {
    return "synthetic tokens below " + std::to_string(syntheticVocab_) + " (seed " +
           std::to_string(seed_) + ")";
  }

protected:
  llvm::Error readWindow(const DataPosition &position,
                         llvm::MutableArrayRef<int64_t> window) const override {
    // A counter-based stream: window w is a function of (seed, w) alone, so
    // restoring needs no replay.
    uint64_t state = mixBits(seed_ + 0x9E3779B97F4A7C15ull) ^ mixBits(position.index);
    for (int64_t &token : window) {
      state += 0x9E3779B97F4A7C15ull;
      // The modulo bias of a 64-bit value over a vocabulary is negligible.
      token = static_cast<int64_t>(mixBits(state) % static_cast<uint64_t>(syntheticVocab_));
    }
    return llvm::Error::success();
  }

private:
  int64_t syntheticVocab_;
};

llvm::Error checkShape(const TokenSourceOptions &options) {
  if (options.batchSize < 1)
    return sourceError("the batch size must be positive, got " +
                       llvm::Twine(options.batchSize));
  if (options.sequenceLength < 1)
    return sourceError("the sequence length must be positive, got " +
                       llvm::Twine(options.sequenceLength));
  if (options.vocabSize < 0)
    return sourceError("the vocabulary size must not be negative, got " +
                       llvm::Twine(options.vocabSize));
  return llvm::Error::success();
}

bool fileExists(const llvm::Twine &path) { return llvm::sys::fs::exists(path); }

} // namespace

llvm::json::Value toJSON(const DataPosition &position) {
  return llvm::json::Object{{"epoch", position.epoch}, {"index", position.index}};
}

bool fromJSON(const llvm::json::Value &value, DataPosition &position,
              llvm::json::Path path) {
  llvm::json::ObjectMapper mapper(value, path);
  return mapper && mapper.map("epoch", position.epoch) &&
         mapper.map("index", position.index);
}

TokenSource::TokenSource(const TokenSourceOptions &options)
    : batchSize_(options.batchSize), sequenceLength_(options.sequenceLength),
      seed_(options.seed), vocabSize_(options.vocabSize), sequential_(options.sequential) {}

TokenSource::~TokenSource() = default;

size_t TokenSource::batchTokens() const {
  return static_cast<size_t>(batchSize_) * static_cast<size_t>(sequenceLength_ + 1);
}

llvm::Error TokenSource::nextBatch(llvm::MutableArrayRef<int64_t> tokens) {
  if (tokens.size() != batchTokens())
    return sourceError("a batch of " + llvm::Twine(batchSize_) + " x " +
                       llvm::Twine(sequenceLength_ + 1) + " tokens needs " +
                       llvm::Twine(batchTokens()) + " elements, got " +
                       llvm::Twine(tokens.size()));
  const size_t windowLength = static_cast<size_t>(sequenceLength_) + 1;
  const uint64_t windows = windowsPerEpoch();
  DataPosition position = position_;
  for (int64_t row = 0; row < batchSize_; ++row) {
    if (llvm::Error err =
            readWindow(position, tokens.slice(static_cast<size_t>(row) * windowLength,
                                              windowLength)))
      return err;
    if (++position.index == windows) {
      ++position.epoch;
      position.index = 0;
    }
  }
  position_ = position;
  return llvm::Error::success();
}

llvm::Expected<std::vector<int64_t>> TokenSource::nextBatch() {
  std::vector<int64_t> tokens(batchTokens());
  if (llvm::Error err = nextBatch(llvm::MutableArrayRef<int64_t>(tokens)))
    return std::move(err);
  return tokens;
}

llvm::Error TokenSource::restore(const DataPosition &position) {
  const uint64_t windows = windowsPerEpoch();
  if (windows != 0 && position.index >= windows)
    return sourceError("cannot restore the data position (epoch " +
                       llvm::Twine(position.epoch) + ", window " +
                       llvm::Twine(position.index) + "): " + describe() + " has " +
                       llvm::Twine(windows) + " windows per epoch");
  position_ = position;
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<TokenSource>>
createCorpusTokenSource(TokenCorpus corpus, const TokenSourceOptions &options) {
  if (llvm::Error err = checkShape(options))
    return std::move(err);
  const uint64_t windowLength = static_cast<uint64_t>(options.sequenceLength) + 1;
  if (corpus.size() < windowLength)
    return sourceError("'" + corpus.name() + "': " + llvm::Twine(corpus.size()) +
                       " tokens are too few for one window of " +
                       llvm::Twine(windowLength) + " (sequence length " +
                       llvm::Twine(options.sequenceLength) + " + 1)");
  // Windows start every `seq` tokens and need one token past their last
  // input, so the final token can only end a window.
  const uint64_t windows =
      (corpus.size() - 1) / static_cast<uint64_t>(options.sequenceLength);
  return std::make_unique<CorpusTokenSource>(std::move(corpus), options, windows);
}

llvm::Expected<std::unique_ptr<TokenSource>>
createSyntheticTokenSource(int64_t vocabSize, const TokenSourceOptions &options) {
  if (llvm::Error err = checkShape(options))
    return std::move(err);
  if (vocabSize < 1)
    return sourceError("a synthetic source needs a positive vocabulary size, got " +
                       llvm::Twine(vocabSize));
  if (options.vocabSize > 0 && vocabSize > options.vocabSize)
    return sourceError("synthetic tokens below " + llvm::Twine(vocabSize) +
                       " do not fit the model's vocabulary of " +
                       llvm::Twine(options.vocabSize));
  return std::make_unique<SyntheticTokenSource>(vocabSize, options);
}

llvm::Expected<std::unique_ptr<TokenSource>>
openTokenSource(const std::string &path, const TokenSourceOptions &options) {
  llvm::StringRef name(path);
  auto fromCorpus = [&](llvm::Expected<TokenCorpus> corpus)
      -> llvm::Expected<std::unique_ptr<TokenSource>> {
    if (!corpus)
      return corpus.takeError();
    return createCorpusTokenSource(std::move(*corpus), options);
  };

  if (name.consume_front("synthetic:")) {
    int64_t vocab = 0;
    if (name.getAsInteger(10, vocab) || vocab < 1)
      return sourceError("'" + path + "': expected synthetic:VOCAB with a positive "
                                      "vocabulary size");
    return createSyntheticTokenSource(vocab, options);
  }
  if (name.ends_with(".npy"))
    return fromCorpus(openNpyTokenFile(path));
  if (name.ends_with(".idx"))
    return fromCorpus(openMegatronDataset(name.drop_back(4).str()));
  if (name.ends_with(".bin") && fileExists(name.drop_back(4) + ".idx"))
    return fromCorpus(openMegatronDataset(name.drop_back(4).str()));

  for (TokenDType suffixType : {TokenDType::U16, TokenDType::U32}) {
    if (!name.ends_with("." + std::string(tokenDTypeName(suffixType))))
      continue;
    if (options.dtype && *options.dtype != suffixType)
      return sourceError("'" + path + "': its name says " +
                         llvm::Twine(tokenDTypeName(suffixType)) + " tokens but " +
                         llvm::Twine(tokenDTypeName(*options.dtype)) + " was asked for");
    return fromCorpus(openFlatTokenFile(path, suffixType));
  }
  if (options.dtype)
    return fromCorpus(openFlatTokenFile(path, *options.dtype));
  if (fileExists(path + ".idx"))
    return fromCorpus(openMegatronDataset(path));
  if (!fileExists(path))
    return sourceError("'" + path + "': no such file, nor a Megatron dataset '" + path +
                       ".idx'");
  return sourceError("'" + path + "': cannot tell the token format from the name: name a "
                                  "flat token file FILE.u16 or FILE.u32 (its token type), "
                                  "give a FILE.npy, or a Megatron dataset's PREFIX (with "
                                  "PREFIX.bin and PREFIX.idx)");
}

} // namespace loom
