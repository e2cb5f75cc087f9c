// Corruption fuzzing: damaged or foreign bytes must load as a verified
// executable or fail with a one-line error, never crash (this suite also runs
// under ASan/UBSan with LOOM_SANITIZE=ON).

#include "SampleExecutable.h"

#include "runtime/executable/Executable.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>

// With LOOM_SANITIZE=ON, make undefined behaviour fail the suite instead of
// printing a report and carrying on.
extern "C" const char *__ubsan_default_options() {
  return "halt_on_error=1:print_stacktrace=1";
}

namespace loom {
namespace {

struct Outcomes {
  size_t loaded = 0;
  size_t rejected = 0;
  void report(const char *what) const {
    std::printf("[ outcomes ] %s: %zu loaded and verified, %zu rejected\n",
                what, loaded, rejected);
  }
};

/// Loads `size` bytes and checks the contract either way.
void loadAndCheck(const uint8_t *data, size_t size, Outcomes &outcomes,
                  const std::string &what) {
  auto exe = loadExecutable(data, size);
  if (!exe) {
    std::string message = llvm::toString(exe.takeError());
    EXPECT_FALSE(message.empty()) << what;
    EXPECT_EQ(message.find('\n'), std::string::npos)
        << what << ": error is not one line: " << message;
    ++outcomes.rejected;
    return;
  }
  ++outcomes.loaded;
  // Whatever loads is fully verified and survives another round trip.
  if (llvm::Error err = verifyExecutable(*exe))
    ADD_FAILURE() << what << ": loaded but does not verify: "
                  << llvm::toString(std::move(err));
  std::vector<uint8_t> again = serializeExecutable(*exe);
  auto reloaded = loadExecutable(again.data(), again.size());
  if (!reloaded)
    ADD_FAILURE() << what << ": re-serialized copy does not load: "
                  << llvm::toString(reloaded.takeError());
}

std::vector<uint8_t> sampleBytes() {
  return serializeExecutable(test::makeSampleExecutable());
}

TEST(ExecutableFuzz, EveryTruncation) {
  std::vector<uint8_t> bytes = sampleBytes();
  Outcomes outcomes;
  for (size_t length = 0; length < bytes.size(); ++length) {
    // A fresh allocation of exactly `length` bytes lets ASan catch any read
    // past the end.
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + length);
    loadAndCheck(prefix.data(), prefix.size(), outcomes,
                 "truncated to " + std::to_string(length));
  }
  outcomes.report("truncations");
  // Builders write back to front, so every prefix loses referenced data.
  EXPECT_EQ(outcomes.loaded, 0u);
  EXPECT_EQ(outcomes.rejected, bytes.size());
}

TEST(ExecutableFuzz, RandomByteFlips) {
  const std::vector<uint8_t> original = sampleBytes();
  std::mt19937_64 rng(0x100A5EEDu);
  Outcomes outcomes;
  constexpr int kIterations = 4000;
  for (int iteration = 0; iteration < kIterations; ++iteration) {
    std::vector<uint8_t> bytes = original;
    int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) {
      size_t position = rng() % bytes.size();
      bytes[position] ^= static_cast<uint8_t>(1 + rng() % 255);
    }
    loadAndCheck(bytes.data(), bytes.size(), outcomes,
                 "flip iteration " + std::to_string(iteration));
  }
  outcomes.report("byte flips");
  EXPECT_EQ(outcomes.loaded + outcomes.rejected, size_t{kIterations});
  // Flips land in offsets and counts as well as in harmless payload bytes.
  EXPECT_GT(outcomes.rejected, 0u);
  EXPECT_GT(outcomes.loaded, 0u);
}

TEST(ExecutableFuzz, BoundaryValuesInAlignedWords) {
  // Lengths, offsets and indices are 4- or 8-byte words; extreme values there
  // exercise the overflow checks that single bit flips rarely reach.
  const std::vector<uint8_t> original = sampleBytes();
  const uint64_t kValues[] = {0,          1,          0x7f,       0x80,
                              0xff,       0x7fffffff, 0x80000000, 0xffffffff,
                              0xfffffff0, ~0ull,      1ull << 63, 1ull << 40};
  std::mt19937_64 rng(42);
  Outcomes outcomes;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::vector<uint8_t> bytes = original;
    size_t width = (rng() % 2) ? 8 : 4;
    size_t position = (rng() % (bytes.size() / width)) * width;
    uint64_t value = kValues[rng() % std::size(kValues)];
    std::memcpy(bytes.data() + position, &value, width);
    loadAndCheck(bytes.data(), bytes.size(), outcomes,
                 "word iteration " + std::to_string(iteration));
  }
  outcomes.report("boundary words");
  EXPECT_GT(outcomes.rejected, 0u);
}

TEST(ExecutableFuzz, RandomGarbage) {
  std::mt19937_64 rng(7);
  Outcomes outcomes;
  std::vector<size_t> sizes;
  for (size_t size = 0; size <= 64; ++size)
    sizes.push_back(size);
  for (int i = 0; i < 200; ++i)
    sizes.push_back(rng() % 65536);
  for (size_t size : sizes) {
    std::vector<uint8_t> garbage(size);
    for (uint8_t &byte : garbage)
      byte = static_cast<uint8_t>(rng());
    loadAndCheck(garbage.data(), garbage.size(), outcomes,
                 "garbage of " + std::to_string(size) + " bytes");
    if (size < 8)
      continue;
    // With the identifier and a root offset in range the bytes reach the
    // flatbuffers verifier instead of failing the identifier check.
    std::memcpy(garbage.data() + 4, "LOOM", 4);
    uint32_t root = static_cast<uint32_t>(rng() % size);
    std::memcpy(garbage.data(), &root, 4);
    loadAndCheck(garbage.data(), garbage.size(), outcomes,
                 "garbage with identifier, " + std::to_string(size) +
                     " bytes");
  }
  outcomes.report("garbage");
  EXPECT_EQ(outcomes.loaded, 0u);
}

} // namespace
} // namespace loom
