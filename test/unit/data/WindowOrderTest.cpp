#include "runtime/data/WindowOrder.h"

#include <gtest/gtest.h>

#include <vector>

using namespace loom;

namespace {

std::vector<uint64_t> orderOf(const EpochPermutation &permutation) {
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < permutation.size(); ++i)
    order.push_back(permutation(i));
  return order;
}

TEST(EpochPermutationTest, IsAPermutationForEveryCount) {
  std::vector<uint64_t> counts;
  for (uint64_t count = 1; count <= 300; ++count)
    counts.push_back(count);
  counts.insert(counts.end(), {1023, 1024, 1025, 4097, 65536, 100003});
  for (uint64_t count : counts) {
    for (uint64_t seed : {0ull, 1ull, 0xDEADBEEFull}) {
      EpochPermutation permutation(count, seed, /*epoch=*/seed % 3);
      std::vector<bool> seen(count, false);
      for (uint64_t i = 0; i < count; ++i) {
        const uint64_t window = permutation(i);
        ASSERT_LT(window, count) << "count " << count << " seed " << seed;
        ASSERT_FALSE(seen[window]) << "count " << count << " seed " << seed;
        seen[window] = true;
      }
    }
  }
}

TEST(EpochPermutationTest, SeedAndEpochChooseTheOrder) {
  const uint64_t count = 1000;
  const std::vector<uint64_t> base = orderOf(EpochPermutation(count, 42, 0));
  EXPECT_EQ(base, orderOf(EpochPermutation(count, 42, 0)));
  EXPECT_NE(base, orderOf(EpochPermutation(count, 43, 0)));
  EXPECT_NE(base, orderOf(EpochPermutation(count, 42, 1)));
  // Mixing seed and epoch separately keeps (s, e + 1) apart from (s + 1, e).
  EXPECT_NE(orderOf(EpochPermutation(count, 42, 1)), orderOf(EpochPermutation(count, 43, 0)));
}

TEST(EpochPermutationTest, LooksShuffled) {
  // Not a statistical test: it catches an order that is the identity or a
  // rotation, which a broken network tends to produce.
  const uint64_t count = 10000;
  EpochPermutation permutation(count, 5, 0);
  uint64_t fixedPoints = 0, ascendingSteps = 0;
  for (uint64_t i = 0; i < count; ++i) {
    fixedPoints += permutation(i) == i;
    if (i > 0)
      ascendingSteps += permutation(i) == permutation(i - 1) + 1;
  }
  // A random permutation has about one fixed point and one ascending step.
  EXPECT_LT(fixedPoints, 20u);
  EXPECT_LT(ascendingSteps, 20u);
}

} // namespace
