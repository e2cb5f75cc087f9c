#ifndef LOOM_RUNTIME_ABI_NORMWEIGHTGRAD_H
#define LOOM_RUNTIME_ABI_NORMWEIGHTGRAD_H

// nn.norm_weight_grad's scratch, which the compiler (sizing it,
// --loom-fuse-norm-weight-grad) and every backend (filling it) agree on:
// one f32 inverse deviation per row, one f32 mean per row (0 for rms_norm),
// then one f32 partial column sum per block of kNormWeightGradRows rows.

#include <cstdint>

namespace loom {

inline constexpr int64_t kNormWeightGradRows = 32;

inline constexpr int64_t normWeightGradBlocks(int64_t rows) {
  return (rows + kNormWeightGradRows - 1) / kNormWeightGradRows;
}

/// f32 scratch elements for `rows` rows of `cols` features.
inline constexpr int64_t normWeightGradScratch(int64_t rows, int64_t cols) {
  return 2 * rows + normWeightGradBlocks(rows) * cols;
}

} // namespace loom

#endif
