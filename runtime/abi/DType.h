#ifndef LOOM_RUNTIME_ABI_DTYPE_H
#define LOOM_RUNTIME_ABI_DTYPE_H

// Element types the runtime stores. The numbering is part of the executable
// format (runtime/schema/executable.fbs mirrors it): append, never reorder.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace loom {

enum class DType : uint8_t {
  F32 = 0,
  F16 = 1,
  BF16 = 2,
  F8E4M3FN = 3,
  F8E5M2 = 4,
  I64 = 5,
  I32 = 6,
  I1 = 7, // stored as one byte, 0 or 1
  F64 = 8,
};

constexpr int kNumDTypes = 9;

/// Bytes per element.
size_t dtypeSize(DType t);
/// The MLIR spelling: "f32", "bf16", "f8E4M3FN", "i1", ...
std::string_view dtypeName(DType t);
std::optional<DType> parseDType(std::string_view name);
bool isFloat(DType t);

} // namespace loom

#endif
