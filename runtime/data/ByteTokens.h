#ifndef LOOM_RUNTIME_DATA_BYTETOKENS_H
#define LOOM_RUNTIME_DATA_BYTETOKENS_H

// Byte-level tokenization (token = byte value, vocabulary 256) and the token
// files loom-tokenize writes from it. Needing no vocabulary file, it lets any
// text become training data for tests, examples and benchmarks.

#include "runtime/data/TokenCorpus.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace loom {

constexpr int64_t kByteVocabularySize = 256;

/// Calls `onDocument` for each document of `text`, in order, stopping at its
/// first error. Documents are separated by blank lines (empty, or only spaces,
/// tabs and carriage returns); a document keeps its lines' line ends, the
/// blank lines between documents belong to none.
llvm::Error forEachDocument(llvm::StringRef text,
                            llvm::function_ref<llvm::Error(llvm::StringRef)> onDocument);

struct ByteTokenCounts {
  uint64_t tokens = 0;
  uint64_t documents = 0; // 0 for flat files, which keep no boundaries
};

/// Told how many bytes of the text are done, now and then.
using ProgressCallback = llvm::function_ref<void(uint64_t bytesDone)>;

/// Writes every byte of `text` as one `dtype` token to a flat file, atomically.
llvm::Expected<ByteTokenCounts> writeFlatByteTokens(llvm::StringRef text,
                                                    const std::string &path,
                                                    TokenDType dtype,
                                                    ProgressCallback progress);
/// Writes the documents of `text` (forEachDocument) as a Megatron indexed
/// dataset PREFIX.bin + PREFIX.idx of uint16 tokens, atomically.
llvm::Expected<ByteTokenCounts> writeMegatronByteTokens(llvm::StringRef text,
                                                        const std::string &prefix,
                                                        ProgressCallback progress);

} // namespace loom

#endif
