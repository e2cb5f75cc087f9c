#ifndef LOOM_RUNTIME_SUPPORT_USERFILE_H
#define LOOM_RUNTIME_SUPPORT_USERFILE_H

// Guards for the files a user hands to Loom's tools. Readers that need a
// file's size refuse anything that is not a regular file (/dev/zero would be
// read forever) and read no more than that size; text parsed by recursive
// parsers (llvm::json, MLIR's parser) is first scanned for its nesting depth
// so a deeply nested file is an error, not a stack overflow.

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom {

/// "'path': not a regular file" when `path` exists and is a device, a FIFO
/// or a socket (" (a directory)" added for a directory); "'path': cannot open: ..." when it is missing.
llvm::Error checkRegularFile(const std::string &path);

/// The whole of a regular file, read up to the size it had when opened.
llvm::Expected<std::vector<uint8_t>> readRegularFile(const std::string &path);

/// A regular file mapped (or read) whole, its size fixed when it was opened;
/// devices, FIFOs and directories are refused as above.
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
openRegularFile(const std::string &path, bool requiresNullTerminator = false);

/// The deepest nesting Loom's readers accept, far beyond any real model and
/// far below what exhausts a thread's stack.
constexpr unsigned kMaxNestingDepth = 512;

enum class NestingSyntax {
  Json, ///< [ and { outside "strings"
  Mlir, ///< [ ( { < outside "strings" and // comments; -> >= <= are not brackets
};

/// An output path can be written: it is not a folder, and its folder exists
/// and is writable. Checked before any work, so a mistyped path fails at once
/// rather than after it. `what` names the path in the message ("-o", "--metrics").
/// "" and "-" (standard output) pass.
llvm::Error checkOutputPath(const std::string &path, llvm::StringRef what);

/// Refuses `text` when its brackets nest deeper than `limit`:
/// "'name': nesting deeper than 512 levels at line L (a crafted or corrupt
/// file?)". `name` names the file (and the member, for an archive).
llvm::Error checkNestingDepth(llvm::StringRef text, NestingSyntax syntax,
                              const std::string &name,
                              unsigned limit = kMaxNestingDepth);

} // namespace loom

#endif
