#ifndef LOOM_RUNTIME_SUPPORT_NPY_H
#define LOOM_RUNTIME_SUPPORT_NPY_H

// NumPy .npy files: read (format 1.0 and 2.0) and write (1.0, atomically).
//
// Only C-order arrays of little-endian (or byte-order-free) element types are
// supported. NumPy has no bf16/f8 dtypes; those arrays travel as their raw
// bits ('<u2' / '|u1', or the void dtypes '|V2' / '|V1' that ml_dtypes
// arrays are saved as), and take their Loom type only when a reader asks for
// it explicitly (readNpyAs).

#include "runtime/abi/DType.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

/// The element types .npy I/O understands.
enum class NpyKind : uint8_t {
  F32,  // '<f4'
  F64,  // '<f8'
  F16,  // '<f2'
  I32,  // '<i4'
  I64,  // '<i8'
  Bool, // '|b1'
  U8,   // '|u1'
  U16,  // '<u2'
  U32,  // '<u4'
  V1,   // '|V1': one opaque byte (an f8 element from ml_dtypes)
  V2,   // '|V2': two opaque bytes (a bf16 element from ml_dtypes)
};

struct NpyArray {
  NpyKind kind = NpyKind::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data; // little-endian elements, C order

  int64_t numElements() const;
};

/// Bytes per element.
size_t npyKindSize(NpyKind kind);
/// The descr string written for `kind`, e.g. "<f4".
std::string_view npyDescr(NpyKind kind);
/// The Loom element type an array of `kind` holds without reinterpretation,
/// if any (u8/u16/u32 and void kinds have none).
std::optional<DType> npyKindToDType(NpyKind kind);
/// The kind that stores a Loom `type` losslessly as itself; none for
/// bf16/f8 (see readNpyAs and npyRawKindFor).
std::optional<NpyKind> dtypeToNpyKind(DType type);
/// The kind to write a `type` array as: dtypeToNpyKind's answer where there
/// is one, else the raw bits (bf16 -> U16, f8 -> U8).
NpyKind npyRawKindFor(DType type);

/// Parses the bytes of a .npy file; `name` is used in error messages.
llvm::Expected<NpyArray> parseNpy(const uint8_t *bytes, size_t size,
                                  std::string_view name);
llvm::Expected<NpyArray> readNpy(const std::string &path);

/// Reads `path` as an array of `expected`: the file's kind must be
/// dtypeToNpyKind(expected) or, for bf16 and the f8 types (which NumPy
/// lacks), raw bits of the same width (U16/V2 for bf16, U8/V1 for f8).
/// `data` is then the elements of `expected`, bit for bit.
llvm::Expected<NpyArray> readNpyAs(const std::string &path, DType expected);

/// Encodes `array` as a format 1.0 file (format 2.0 if the header needs it).
llvm::Expected<std::vector<uint8_t>> serializeNpy(const NpyArray &array);
/// Writes atomically: a temporary file in the same directory, fsync, rename.
llvm::Error writeNpy(const std::string &path, const NpyArray &array);

} // namespace loom

#endif
