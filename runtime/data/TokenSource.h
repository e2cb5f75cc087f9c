#ifndef LOOM_RUNTIME_DATA_TOKENSOURCE_H
#define LOOM_RUNTIME_DATA_TOKENSOURCE_H

// Training batches of token ids. Each step takes `batchSize` windows of
// `sequenceLength + 1` tokens, as int64 [batchSize, sequenceLength + 1]
// row-major: the model reads tokens[:, :-1] and predicts tokens[:, 1:].
//
// A file-backed source cuts its corpus (TokenCorpus.h: one stream, documents
// concatenated) into windows starting every `sequenceLength` tokens, so
// consecutive windows share one token and every token is predicted once per
// epoch. An epoch visits every window once, in an order drawn from
// (seed, epoch) (WindowOrder.h); batches run across epoch boundaries. The
// position is two integers (DataPosition): a run restored to a saved
// position sees exactly the tokens an uninterrupted run would have.

#include "runtime/data/TokenCorpus.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace loom {

/// Where a source stands: the epoch, and how many of its windows were used.
struct DataPosition {
  uint64_t epoch = 0;
  uint64_t index = 0;

  bool operator==(const DataPosition &other) const {
    return epoch == other.epoch && index == other.index;
  }
  bool operator!=(const DataPosition &other) const { return !(*this == other); }
};

/// {"epoch": E, "index": I}, for checkpoints.
llvm::json::Value toJSON(const DataPosition &position);
bool fromJSON(const llvm::json::Value &value, DataPosition &position,
              llvm::json::Path path);

struct TokenSourceOptions {
  int64_t batchSize = 1;
  /// Tokens the model reads per row; windows hold one more.
  int64_t sequenceLength = 0;
  uint64_t seed = 0;
  /// When positive, every token must be below it (an error otherwise).
  int64_t vocabSize = 0;
  /// The token type of a flat file whose name does not tell it (.bin).
  std::optional<TokenDType> dtype;
  /// Visit windows in file order instead of a seeded shuffle (benchmarks
  /// that feed another framework the very same batches).
  bool sequential = false;
};

class TokenSource {
public:
  virtual ~TokenSource();

  int64_t batchSize() const { return batchSize_; }
  int64_t sequenceLength() const { return sequenceLength_; }
  /// Tokens in one batch: batchSize * (sequenceLength + 1).
  size_t batchTokens() const;
  /// Windows in one epoch; 0 for an endless (synthetic) source.
  virtual uint64_t windowsPerEpoch() const = 0;
  /// One line for logs, e.g. "'data.u16' (u16, 1000000 tokens, 7812 windows of 129)".
  virtual std::string describe() const = 0;

  /// Fills `tokens` (batchTokens() elements) with the next batch and moves
  /// past it. On error the position does not move.
  llvm::Error nextBatch(llvm::MutableArrayRef<int64_t> tokens);
  llvm::Expected<std::vector<int64_t>> nextBatch();

  DataPosition state() const { return position_; }
  /// Continues from `position`, as returned by state() on the same data with
  /// the same options.
  llvm::Error restore(const DataPosition &position);

protected:
  explicit TokenSource(const TokenSourceOptions &options);
  /// Writes the window used at `position` (sequenceLength + 1 tokens).
  virtual llvm::Error readWindow(const DataPosition &position,
                                 llvm::MutableArrayRef<int64_t> window) const = 0;

  int64_t batchSize_;
  int64_t sequenceLength_;
  uint64_t seed_;
  int64_t vocabSize_;
  bool sequential_;

private:
  DataPosition position_;
};

/// Windows of `corpus`, shuffled per epoch.
llvm::Expected<std::unique_ptr<TokenSource>>
createCorpusTokenSource(TokenCorpus corpus, const TokenSourceOptions &options);
/// Endless seeded random tokens below `vocabSize`, for benchmarks. Window w
/// depends only on (seed, w).
llvm::Expected<std::unique_ptr<TokenSource>>
createSyntheticTokenSource(int64_t vocabSize, const TokenSourceOptions &options);

/// Opens the data named by `path`:
///   synthetic:VOCAB          createSyntheticTokenSource(VOCAB)
///   X.npy                    a 1-D integer .npy array
///   P.idx, or P.bin or P     Megatron's indexed dataset P.bin + P.idx
///     with P.idx present
///   X.u16, X.u32             a flat file of little-endian uint16/uint32 tokens
///   anything else            a flat file of options.dtype tokens
llvm::Expected<std::unique_ptr<TokenSource>>
openTokenSource(const std::string &path, const TokenSourceOptions &options);

} // namespace loom

#endif
