#include "runtime/data/WindowOrder.h"

namespace loom {

namespace {
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
} // namespace

uint64_t mixBits(uint64_t value) {
  value ^= value >> 30;
  value *= 0xBF58476D1CE4E5B9ull;
  value ^= value >> 27;
  value *= 0x94D049BB133111EBull;
  value ^= value >> 31;
  return value;
}

EpochPermutation::EpochPermutation(uint64_t count, uint64_t seed, uint64_t epoch)
    : count_(count) {
  unsigned bits = 1;
  while (bits < 64 && (uint64_t(1) << bits) < count)
    ++bits;
  halfBits_ = (bits + 1) / 2;
  halfMask_ = (uint64_t(1) << halfBits_) - 1;
  // Distinct (seed, epoch) pairs give unrelated keys: both are mixed before
  // they meet, so seed s epoch e+1 is not seed s+1 epoch e.
  uint64_t state = mixBits(seed + kGolden) ^ mixBits(mixBits(epoch) + 2 * kGolden);
  for (uint64_t &key : roundKeys_) {
    state += kGolden;
    key = mixBits(state);
  }
}

uint64_t EpochPermutation::encrypt(uint64_t value) const {
  uint64_t left = value >> halfBits_;
  uint64_t right = value & halfMask_;
  for (uint64_t key : roundKeys_) {
    const uint64_t next = left ^ (mixBits(right ^ key) & halfMask_);
    left = right;
    right = next;
  }
  return (left << halfBits_) | right;
}

uint64_t EpochPermutation::operator()(uint64_t position) const {
  if (count_ <= 1)
    return 0;
  // encrypt permutes [0, 2^(2*halfBits)); walking the cycle from `position`
  // until it lands below count_ permutes [0, count_). The domain is under 4x
  // count_, so the walk takes under four steps on average.
  uint64_t value = position;
  do
    value = encrypt(value);
  while (value >= count_);
  return value;
}

} // namespace loom
