#ifndef LOOM_RUNTIME_CHECKPOINT_SAFETENSORS_H
#define LOOM_RUNTIME_CHECKPOINT_SAFETENSORS_H

// Hugging Face's safetensors format (github.com/huggingface/safetensors):
//
//   8 bytes   N, the header size, unsigned little-endian
//   N bytes   a UTF-8 JSON object beginning with '{', possibly padded with
//             trailing spaces: {"NAME": {"dtype": "F32", "shape": [2, 3],
//             "data_offsets": [BEGIN, END]}, ..., "__metadata__": {string:
//             string}}; offsets are relative to the byte buffer, END is
//             one past the last byte
//   the rest  the byte buffer: little-endian, row-major tensors, packed
//
// The reader treats a file as hostile: it checks the header size against the
// file and a 100 MiB limit (the reference implementation's), that every
// tensor's size is its shape times its element size, and that the tensors
// cover the byte buffer exactly (no overlaps, no holes, nothing after) as
// the reference implementation requires. A bad file is an error, never a
// read out of bounds.
//
// The writer does what the reference implementation does: the header is
// padded with spaces to a multiple of 8 bytes, and tensors are stored in
// decreasing element size, then by name, so each starts aligned to its
// element size.

#include "runtime/abi/DType.h"
#include "runtime/support/HostTensor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace loom {


/// A tensor to write, referring to bytes owned elsewhere.
struct HostTensorView {
  llvm::StringRef name;
  DType dtype = DType::F32;
  llvm::ArrayRef<int64_t> shape;
  llvm::ArrayRef<uint8_t> data;
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata; // "__metadata__"
  std::vector<HostTensor> tensors;             // in the order of their bytes
};

/// The largest header accepted, as in the reference implementation.
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100u << 20;

/// The safetensors spelling of a Loom element type ("F32", "BF16", "BOOL",
/// "F8_E4M3", ...).
llvm::StringRef safetensorsDTypeName(DType type);
/// The Loom element type of a safetensors dtype string, if Loom has one.
std::optional<DType> parseSafetensorsDType(llvm::StringRef name);

/// The product of `shape` times the element size; nullopt when a dimension
/// is negative or the size overflows.
std::optional<uint64_t> tensorByteSize(DType type, llvm::ArrayRef<int64_t> shape);

/// How a set of tensors is laid out in a file: the 8-byte size and padded
/// header, then the tensors in `dataOrder` (indices into the input), packed.
struct SafetensorsLayout {
  std::vector<uint8_t> header;
  std::vector<size_t> dataOrder;
  uint64_t dataBytes = 0;
};

/// Checks the tensors (unique non-empty UTF-8 names, data sizes matching
/// shapes) and lays them out; `where` names the file in error messages.
llvm::Expected<SafetensorsLayout>
layoutSafetensors(llvm::ArrayRef<HostTensorView> tensors,
                  const std::map<std::string, std::string> &metadata,
                  const std::string &where);

/// Parses a whole file held in memory; `where` names it in error messages.
llvm::Expected<SafetensorsFile> parseSafetensors(llvm::ArrayRef<uint8_t> bytes,
                                                 const std::string &where);
llvm::Expected<SafetensorsFile> readSafetensors(const std::string &path);

/// Writes atomically (temporary file, fsync, rename, fsync of the directory).
llvm::Error writeSafetensors(const std::string &path,
                             llvm::ArrayRef<HostTensorView> tensors,
                             const std::map<std::string, std::string> &metadata);

/// Views of `tensors`, for the writers.
std::vector<HostTensorView> viewsOf(llvm::ArrayRef<HostTensor> tensors);

} // namespace loom

#endif
