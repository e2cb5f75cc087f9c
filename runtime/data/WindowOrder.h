#ifndef LOOM_RUNTIME_DATA_WINDOWORDER_H
#define LOOM_RUNTIME_DATA_WINDOWORDER_H

// The order in which an epoch visits a corpus's windows: a pseudo-random
// permutation of [0, count) chosen by (seed, epoch), evaluated one position
// at a time. It is a keyed Feistel network over the smallest even power of
// two that covers `count`, cycle-walked back into range, so it needs O(1)
// memory (a shuffled index of a trillion-token corpus would need gigabytes)
// and restoring a position costs nothing. The mixing is Loom's own, so the
// order is the same on every platform and standard library.

#include <array>
#include <cstdint>

namespace loom {

/// A 64-bit mixing bijection (the splitmix64 finalizer).
uint64_t mixBits(uint64_t value);

class EpochPermutation {
public:
  EpochPermutation(uint64_t count, uint64_t seed, uint64_t epoch);

  uint64_t size() const { return count_; }
  /// The window visited at `position` (< size()).
  uint64_t operator()(uint64_t position) const;

private:
  static constexpr int kRounds = 8;
  uint64_t encrypt(uint64_t value) const;

  uint64_t count_;
  unsigned halfBits_ = 1;
  uint64_t halfMask_ = 1;
  std::array<uint64_t, kRounds> roundKeys_{};
};

} // namespace loom

#endif
