// loom-tokenize: turns a text file into training tokens, one token per byte
// (vocabulary 256), as a flat token file or a Megatron indexed dataset.

#include "tools/LoomVersion.h"
#include "runtime/data/ByteTokens.h"
#include "runtime/support/UserFile.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"

namespace cl = llvm::cl;
using namespace loom;

namespace {

enum class OutputFormat { Flat, Megatron };

cl::OptionCategory category("loom-tokenize options");
cl::opt<std::string> inputPath(cl::Positional, cl::desc("<text file, or - for stdin>"),
                               cl::Required, cl::cat(category));
cl::opt<std::string> outputPath(
    "o",
    cl::desc("output: FILE.u16 / FILE.u32 (flat), or PREFIX for PREFIX.bin + PREFIX.idx "
             "(megatron)"),
    cl::value_desc("path"), cl::Required, cl::cat(category));
cl::opt<OutputFormat> format(
    "format", cl::desc("output format (default: flat)"), cl::init(OutputFormat::Flat),
    cl::values(clEnumValN(OutputFormat::Flat, "flat",
                          "every byte as one little-endian token, the type from -o's "
                          "suffix (.u16 or .u32)"),
               clEnumValN(OutputFormat::Megatron, "megatron",
                          "Megatron-LM indexed dataset of uint16 tokens; documents "
                          "split at blank lines")),
    cl::cat(category));
cl::opt<bool> quiet("quiet", cl::desc("print neither progress nor the summary (default off)"),
                    cl::cat(category));

// Progress is worth printing only when tokenizing takes a while.
constexpr uint64_t kProgressThresholdBytes = 64ull << 20;

[[noreturn]] void fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "loom-tokenize") << message << "\n";
  std::exit(1);
}

template <typename T> T check(llvm::Expected<T> value) {
  if (!value)
    fail(llvm::toString(value.takeError()));
  return std::move(*value);
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  loom::setVersionPrinter();
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "loom-tokenize: byte-level tokens (token = byte value, vocabulary 256) from text\n\n"
      "  loom-tokenize corpus.txt -o corpus.u16\n"
      "  loom-tokenize corpus.txt -o corpus --format=megatron   # corpus.bin + corpus.idx\n");

  // A named input must be a regular file (/dev/zero never ends); '-' reads stdin.
  if (inputPath != "-")
    if (llvm::Error err = loom::checkRegularFile(inputPath))
      fail(llvm::toString(std::move(err)));
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> input = llvm::MemoryBuffer::getFileOrSTDIN(
      inputPath, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!input)
    fail("'" + inputPath + "': cannot read: " + input.getError().message());
  const llvm::StringRef text = (*input)->getBuffer();

  if (text.empty())
    fail("'" + inputPath + "' is empty: nothing to tokenize");
  const uint64_t totalBytes = text.size();
  auto progress = [&](uint64_t bytesDone) {
    if (quiet || totalBytes < kProgressThresholdBytes)
      return;
    llvm::errs() << "loom-tokenize: " << (bytesDone >> 20) << " of " << (totalBytes >> 20)
                 << " MiB ("
                 << llvm::format("%.0f", 100.0 * static_cast<double>(bytesDone) /
                                             static_cast<double>(totalBytes))
                 << "%)\n";
  };

  ByteTokenCounts counts;
  std::string written;
  if (format == OutputFormat::Flat) {
    llvm::StringRef out(outputPath);
    TokenDType dtype;
    if (out.ends_with(".u16"))
      dtype = TokenDType::U16;
    else if (out.ends_with(".u32"))
      dtype = TokenDType::U32;
    else
      fail("'" + outputPath +
           "': a flat token file's name ends in its token type, .u16 or .u32 "
           "(or use --format=megatron)");
    counts = check(writeFlatByteTokens(text, outputPath, dtype, progress));
    written = "'" + outputPath + "'";
  } else {
    // Megatron's tools name a dataset by its prefix; accept either file's
    // name too, since users often type one.
    llvm::StringRef prefix(outputPath);
    if (prefix.ends_with(".bin") || prefix.ends_with(".idx"))
      prefix = prefix.drop_back(4);
    if (prefix.empty() || prefix.ends_with("/"))
      fail("-o '" + outputPath + "' names no dataset prefix");
    counts = check(writeMegatronByteTokens(text, prefix.str(), progress));
    written = "'" + prefix.str() + ".bin' and '" + prefix.str() + ".idx'";
  }
  if (!quiet) {
    llvm::errs() << "loom-tokenize: wrote " << counts.tokens << " tokens";
    if (format == OutputFormat::Megatron)
      llvm::errs() << " in " << counts.documents
                   << (counts.documents == 1 ? " document" : " documents");
    llvm::errs() << " to " << written << "\n";
  }
  return 0;
}
