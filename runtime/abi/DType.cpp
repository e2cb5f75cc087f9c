#include "runtime/abi/DType.h"

namespace loom {

namespace {
struct DTypeInfo {
  std::string_view name;
  size_t size;
  bool isFloat;
};
constexpr DTypeInfo kInfo[kNumDTypes] = {
    {"f32", 4, true},      {"f16", 2, true},      {"bf16", 2, true},
    {"f8E4M3FN", 1, true}, {"f8E5M2", 1, true},   {"i64", 8, false},
    {"i32", 4, false},     {"i1", 1, false},      {"f64", 8, true},
};
} // namespace

size_t dtypeSize(DType t) { return kInfo[static_cast<int>(t)].size; }
std::string_view dtypeName(DType t) { return kInfo[static_cast<int>(t)].name; }
bool isFloat(DType t) { return kInfo[static_cast<int>(t)].isFloat; }

std::optional<DType> parseDType(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kInfo[i].name == name)
      return static_cast<DType>(i);
  return std::nullopt;
}

} // namespace loom
