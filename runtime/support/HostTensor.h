#ifndef LOOM_RUNTIME_SUPPORT_HOSTTENSOR_H
#define LOOM_RUNTIME_SUPPORT_HOSTTENSOR_H

#include "runtime/abi/DType.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

/// A tensor held in host memory: row-major, little-endian elements. What
/// the runtime reads from and writes to a program's buffers, and what
/// checkpoints and weight files hold.
struct HostTensor {
  std::string name; // may be empty
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

} // namespace loom

#endif
