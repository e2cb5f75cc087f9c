#include "runtime/checkpoint/Sha256.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define LOOM_SHA256_X86 1
#endif

namespace loom {

namespace {

constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

constexpr std::array<uint32_t, 8> kInitialState = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                                   0xa54ff53a, 0x510e527f, 0x9b05688c,
                                                   0x1f83d9ab, 0x5be0cd19};

inline uint32_t rotateRight(uint32_t value, int bits) {
  return (value >> bits) | (value << (32 - bits));
}

#ifdef LOOM_SHA256_X86
/// Whether this CPU has the SHA extensions (and the SSE4.1 shuffles their
/// use needs): CPUID leaf 7 EBX bit 29, leaf 1 ECX bit 19.
bool cpuHasShaExtensions() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19)))
    return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
    return false;
  return (b & (1u << 29)) != 0;
}

/// `blocks` 64-byte blocks through the SHA extensions: sha256rnds2 does two
/// rounds on the state held as ABEF and CDGH, sha256msg1/msg2 extend the
/// message schedule four words at a time. 1.5 GB/s where the portable
/// compressBlock does 0.3 GB/s (one core of the development machine).
__attribute__((target("sha,sse4.1"))) void compressWithShaExtensions(uint32_t *state,
                                                                      const uint8_t *data,
                                                                      size_t blocks) {
  // Big-endian words: reverse the bytes of each 32-bit lane.
  const __m128i byteSwap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i *>(state));
  __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i *>(state + 4));
  __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
  __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
  for (; blocks > 0; --blocks, data += 64) {
    const __m128i abefBefore = abef, cdghBefore = cdgh;
    __m128i w[4];
    for (int i = 0; i < 4; ++i)
      w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i *>(data + 16 * i)),
                              byteSwap);
    for (int group = 0; group < 16; ++group) {
      __m128i words = w[group % 4];
      __m128i sum = _mm_add_epi32(
          words, _mm_loadu_si128(reinterpret_cast<const __m128i *>(kRoundConstants + 4 * group)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, sum);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(sum, 0x0E));
      // Words 4(group + 4)..+3 from the sixteen before them, in the slot
      // of words 4 group..+3, which are no longer needed.
      if (group < 12) {
        __m128i next = _mm_sha256msg1_epu32(w[group % 4], w[(group + 1) % 4]);
        next = _mm_add_epi32(next, _mm_alignr_epi8(w[(group + 3) % 4], w[(group + 2) % 4], 4));
        w[group % 4] = _mm_sha256msg2_epu32(next, w[(group + 3) % 4]);
      }
    }
    abef = _mm_add_epi32(abef, abefBefore);
    cdgh = _mm_add_epi32(cdgh, cdghBefore);
  }
  __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i *>(state), _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i *>(state + 4), _mm_alignr_epi8(dchg, feba, 8));
}
#endif

/// Whether whole blocks go through the SHA extensions: where the CPU has
/// them, unless a test turned them off.
std::atomic<bool> &useShaExtensions() {
#ifdef LOOM_SHA256_X86
  static std::atomic<bool> use{cpuHasShaExtensions()};
#else
  static std::atomic<bool> use{false};
#endif
  return use;
}

} // namespace

bool Sha256::setAccelerated(bool on) {
#ifdef LOOM_SHA256_X86
  bool available = cpuHasShaExtensions();
#else
  bool available = false;
#endif
  useShaExtensions() = on && available;
  return on && available;
}

void Sha256::compressBlocks(const uint8_t *blocks, size_t count) {
#ifdef LOOM_SHA256_X86
  if (useShaExtensions().load(std::memory_order_relaxed)) {
    compressWithShaExtensions(state_.data(), blocks, count);
    return;
  }
#endif
  for (size_t i = 0; i < count; ++i)
    compressBlock(blocks + 64 * i);
}

Sha256::Sha256() { reset(); }

void Sha256::reset() {
  state_ = kInitialState;
  pendingSize_ = 0;
  messageBytes_ = 0;
}

void Sha256::compressBlock(const uint8_t *block) {
  uint32_t schedule[64];
  for (int i = 0; i < 16; ++i)
    schedule[i] = uint32_t(block[4 * i]) << 24 | uint32_t(block[4 * i + 1]) << 16 |
                  uint32_t(block[4 * i + 2]) << 8 | uint32_t(block[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = rotateRight(schedule[i - 15], 7) ^
                        rotateRight(schedule[i - 15], 18) ^ (schedule[i - 15] >> 3);
    const uint32_t s1 = rotateRight(schedule[i - 2], 17) ^
                        rotateRight(schedule[i - 2], 19) ^ (schedule[i - 2] >> 10);
    schedule[i] = schedule[i - 16] + s0 + schedule[i - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t sum1 = rotateRight(e, 6) ^ rotateRight(e, 11) ^ rotateRight(e, 25);
    const uint32_t choose = (e & f) ^ (~e & g);
    const uint32_t t1 = h + sum1 + choose + kRoundConstants[i] + schedule[i];
    const uint32_t sum0 = rotateRight(a, 2) ^ rotateRight(a, 13) ^ rotateRight(a, 22);
    const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = sum0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(const void *bytes, size_t size) {
  // Nothing to add; `bytes` may then be null (an empty vector's data()),
  // which memcpy must not be given even with a zero size.
  if (size == 0)
    return;
  const uint8_t *input = static_cast<const uint8_t *>(bytes);
  messageBytes_ += size;
  if (pendingSize_ > 0) {
    const size_t take = std::min(size, pending_.size() - pendingSize_);
    std::memcpy(pending_.data() + pendingSize_, input, take);
    pendingSize_ += take;
    input += take;
    size -= take;
    if (pendingSize_ < pending_.size())
      return;
    compressBlocks(pending_.data(), 1);
    pendingSize_ = 0;
  }
  const size_t whole = size / 64;
  compressBlocks(input, whole);
  input += 64 * whole;
  size -= 64 * whole;
  std::memcpy(pending_.data(), input, size);
  pendingSize_ = size;
}

Sha256::Digest Sha256::finish() {
  const uint64_t messageBits = messageBytes_ * 8;
  // A 1 bit, zeros up to 56 mod 64 bytes, then the length in bits (big-endian).
  uint8_t padding[72] = {0x80};
  const size_t padBytes = pendingSize_ < 56 ? 56 - pendingSize_ : 64 + 56 - pendingSize_;
  uint8_t length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<uint8_t>(messageBits >> (56 - 8 * i));
  update(padding, padBytes);
  update(length, sizeof(length));
  Digest digest;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j)
      digest[4 * i + j] = static_cast<uint8_t>(state_[i] >> (24 - 8 * j));
  reset();
  return digest;
}

std::string Sha256::toHex(const Digest &digest) {
  static constexpr char kHexDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * digest.size());
  for (uint8_t byte : digest) {
    hex.push_back(kHexDigits[byte >> 4]);
    hex.push_back(kHexDigits[byte & 15]);
  }
  return hex;
}

std::string Sha256::hexOf(const void *bytes, size_t size) {
  Sha256 hasher;
  hasher.update(bytes, size);
  return toHex(hasher.finish());
}

} // namespace loom
