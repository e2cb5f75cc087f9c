#include "runtime/checkpoint/Sha256.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace loom;

namespace {

std::string sha256Of(const std::string &message) {
  return Sha256::hexOf(message.data(), message.size());
}

// FIPS 180-4 / NIST CSRC example vectors.
TEST(Sha256Test, StandardVectors) {
  EXPECT_EQ(sha256Of(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Of("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256Of("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                     "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256Of(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// An empty file's bytes: a null pointer with size 0 (an empty vector's
// data()), as loadCheckpoint hashes an empty rank file. Found by fuzz_checkpoint
// (UBSan: null passed to memcpy); see fuzz/regressions/checkpoint/.
TEST(Sha256Test, NullEmptyInput) {
  EXPECT_EQ(Sha256::hexOf(nullptr, 0),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 hasher;
  hasher.update("ab", 2);
  hasher.update(nullptr, 0);
  hasher.update("c", 1);
  EXPECT_EQ(Sha256::toHex(hasher.finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

// Lengths around the padding boundaries (55/56 bytes: the length field fits
// in the last block or needs another); values from Python's hashlib.
TEST(Sha256Test, PaddingBoundaries) {
  const std::pair<size_t, const char *> vectors[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {57, "f13b2d724659eb3bf47f2dd6af1accc87b81f09f59f2b75e5c0bed6589dfe8c6"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
  };
  for (const auto &[length, digest] : vectors)
    EXPECT_EQ(sha256Of(std::string(length, 'a')), digest) << "length " << length;
}

// Feeding a message in pieces gives the digest of the whole, wherever the
// pieces split it; and finish() starts the hasher over.
TEST(Sha256Test, IncrementalUpdatesMatchOneShot) {
  std::string message;
  for (int i = 0; i < 300; ++i)
    message.push_back(static_cast<char>(i * 7 + 3));
  const std::string whole = sha256Of(message);
  Sha256 hasher;
  for (size_t split = 0; split <= message.size(); split += 13) {
    hasher.update(message.data(), split);
    for (size_t at = split; at < message.size(); at += 5)
      hasher.update(message.data() + at, std::min<size_t>(5, message.size() - at));
    EXPECT_EQ(Sha256::toHex(hasher.finish()), whole) << "split at " << split;
  }
}

} // namespace

// The SHA extensions (where this CPU has them) and the portable rounds give
// the same digests, for messages of every length around block boundaries
// and fed in uneven pieces.
TEST(Sha256Test, ExtensionsAgreeWithPortableRounds) {
  std::string message;
  for (int i = 0; i < 4099; ++i)
    message.push_back(char((i * 131 + i / 7) & 0xff));
  auto digestOf = [&](size_t length, size_t piece) {
    Sha256 hasher;
    for (size_t done = 0; done < length; done += piece)
      hasher.update(message.data() + done, std::min(piece, length - done));
    return Sha256::toHex(hasher.finish());
  };
  const bool accelerated = Sha256::setAccelerated(true);
  std::vector<std::string> fast;
  for (size_t length : {0, 1, 63, 64, 65, 127, 128, 129, 1000, 4096, 4099})
    for (size_t piece : {1, 7, 64, 100, 5000})
      fast.push_back(digestOf(length, piece));
  Sha256::setAccelerated(false);
  size_t i = 0;
  for (size_t length : {0, 1, 63, 64, 65, 127, 128, 129, 1000, 4096, 4099})
    for (size_t piece : {1, 7, 64, 100, 5000})
      EXPECT_EQ(digestOf(length, piece), fast[i++]) << "length " << length << ", pieces of " << piece;
  Sha256::setAccelerated(true);
  if (!accelerated)
    GTEST_SKIP() << "this CPU has no SHA extensions: only the portable rounds were checked";
}
