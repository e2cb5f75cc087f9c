#ifndef LOOM_RUNTIME_ABI_LINEARCROSSENTROPY_H
#define LOOM_RUNTIME_ABI_LINEARCROSSENTROPY_H

// nn.linear_cross_entropy's chunking and scratch, which the compiler
// (choosing the chunk and sizing the scratch, --loom-fuse-linear-cross-entropy)
// and every backend (filling it) agree on. The scratch is f32 words:
//   [logits]  chunk x V f32: one chunk's logits;
//   [grad]    chunk x V of the input's type: that chunk's logits gradient;
//   [losses]  N f32: each row's loss;
//   [count]   2 words: the rows not ignored, an i64;
//   [sums]    V x H f32: the weight gradient's running sums, only when the
//             weight gradient is not itself f32;
// each part starting on a 256-byte boundary (GEMM operands).

#include <algorithm>
#include <cstdint>

namespace loom {

struct LinearCrossEntropyScratch {
  int64_t logits = 0, grad = 0, losses = 0, count = 0, sums = 0; // offsets, in f32 words
  int64_t words = 0;                                   // the whole scratch
};

inline constexpr int64_t kLinearCrossEntropyAlign = 64; // f32 words: 256 bytes

inline constexpr int64_t linearCrossEntropyAlignUp(int64_t words) {
  return (words + kLinearCrossEntropyAlign - 1) / kLinearCrossEntropyAlign *
         kLinearCrossEntropyAlign;
}

/// The scratch of `rows` rows of `features` features and `classes` classes
/// in chunks of `chunk` rows, the gradient's elements `gradBytes` bytes each,
/// the weight gradient f32 (`f32WeightGrad`) or not.
inline constexpr LinearCrossEntropyScratch
linearCrossEntropyScratch(int64_t rows, int64_t features, int64_t classes, int64_t chunk,
                          int64_t gradBytes, bool f32WeightGrad) {
  LinearCrossEntropyScratch s;
  const int64_t c = std::min(chunk, rows);
  s.logits = 0;
  s.grad = linearCrossEntropyAlignUp(c * classes);
  s.losses = s.grad + linearCrossEntropyAlignUp((c * classes * gradBytes + 3) / 4);
  s.count = s.losses + linearCrossEntropyAlignUp(rows);
  s.sums = s.count + kLinearCrossEntropyAlign;
  s.words = s.sums + (f32WeightGrad ? 0 : classes * features);
  return s;
}

/// The default chunk: rows whose logits and gradient fill about 1 GiB, at
/// least 2048 (GEMMs of fewer rows re-read the weight gradient too often),
/// a multiple of 256, and no more than the rows there are.
inline constexpr int64_t linearCrossEntropyDefaultChunk(int64_t rows, int64_t classes,
                                                        int64_t gradBytes) {
  const int64_t perRow = std::max<int64_t>(1, classes * (4 + gradBytes));
  const int64_t fit = (int64_t(1) << 30) / perRow / 256 * 256;
  return std::max<int64_t>(1, std::min(rows, std::max<int64_t>(2048, fit)));
}

} // namespace loom

#endif
