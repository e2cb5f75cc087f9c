#ifndef LOOM_RUNTIME_ABI_SUMSQUARES_H
#define LOOM_RUNTIME_ABI_SUMSQUARES_H

// nn.sum_squares_multi's chunking, which the compiler (sizing the kernel's
// scratch output, --loom-fuse-sum-squares) and every backend (filling it)
// must agree on: each tensor is summed in chunks of kSumSquaresChunk
// elements, one f64 partial sum per chunk, then the partials in order into
// one f64 sum per tensor (after all the partials in the scratch), then, for
// a total, those in order.

#include <cstdint>

namespace loom {

inline constexpr int64_t kSumSquaresChunk = 32768;

/// Partial sums (f64 scratch elements) a tensor of `elements` needs.
inline constexpr int64_t sumSquaresChunks(int64_t elements) {
  return (elements + kSumSquaresChunk - 1) / kSumSquaresChunk;
}

/// The f64 scratch of a call over tensors of these sizes: the chunks'
/// partial sums, then one sum per tensor.
template <typename Sizes> inline int64_t sumSquaresScratch(const Sizes &elementCounts) {
  int64_t slots = 0;
  for (int64_t n : elementCounts)
    slots += sumSquaresChunks(n) + 1;
  return slots;
}

} // namespace loom

#endif
