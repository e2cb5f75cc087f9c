#include "runtime/executable/Executable.h"

#include <limits>

namespace loom {

int64_t BufferDesc::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(count, dim, &count))
      return -1;
  }
  return count;
}

uint64_t BufferDesc::sizeInBytes() const {
  constexpr uint64_t kInvalid = std::numeric_limits<uint64_t>::max();
  int64_t count = numElements();
  if (count < 0 || static_cast<int>(dtype) >= kNumDTypes)
    return kInvalid;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(count),
                             static_cast<uint64_t>(dtypeSize(dtype)), &bytes))
    return kInvalid;
  return bytes;
}

const char *memoryCategoryName(MemoryCategory category) {
  switch (category) {
  case MemoryCategory::Unknown:
    return "unknown";
  case MemoryCategory::Input:
    return "inputs";
  case MemoryCategory::Activation:
    return "activations";
  case MemoryCategory::ActivationGrad:
    return "activation gradients and recomputed values";
  case MemoryCategory::WeightGrad:
    return "weight gradients";
  case MemoryCategory::Workspace:
    return "kernel workspace";
  case MemoryCategory::Communication:
    return "collective results";
  case MemoryCategory::Step:
    return "loss, norms, optimizer";
  }
  return "invalid";
}

} // namespace loom
