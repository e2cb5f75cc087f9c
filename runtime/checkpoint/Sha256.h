#ifndef LOOM_RUNTIME_CHECKPOINT_SHA256_H
#define LOOM_RUNTIME_CHECKPOINT_SHA256_H

// SHA-256 (FIPS 180-4), the checksum of checkpoint files. Loom carries its
// own (it is small and fixed) so the checkpoint format's definition does not
// rest on an LLVM internal; the unit tests check it against the standard's
// test vectors. Incremental, so a file is hashed while it is written.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace loom {

class Sha256 {
public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  /// Feeds `size` more bytes of the message.
  void update(const void *bytes, size_t size);
  /// Pads the message and returns its digest; the object then starts over.
  Digest finish();

  /// Lower-case hexadecimal, 64 characters.
  static std::string toHex(const Digest &digest);
  /// The hexadecimal digest of one buffer.
  static std::string hexOf(const void *bytes, size_t size);
  /// Whole blocks go through the CPU's SHA extensions where it has them
  /// (x86-64), five times the portable code's rate. Tests turn them
  /// off to check both; returns whether they are now used.
  static bool setAccelerated(bool on);

private:
  void compressBlock(const uint8_t *block);
  void compressBlocks(const uint8_t *blocks, size_t count);
  void reset();

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> pending_;
  size_t pendingSize_ = 0;
  uint64_t messageBytes_ = 0;
};

} // namespace loom

#endif
