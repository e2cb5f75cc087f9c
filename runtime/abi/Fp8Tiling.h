#ifndef LOOM_RUNTIME_ABI_FP8TILING_H
#define LOOM_RUNTIME_ABI_FP8TILING_H

// How an FP8 scale (or amax) tensor tiles the tensor it scales, which the
// verifiers, the FP8 pass and every backend must agree on
// (dialects/nn/NNFp8Ops.td). A scale of rank 0 is one tile. Otherwise it has
// the tensor's rank, and in each dim d the tensor's X elements fall in S
// tiles of T elements, T the smallest power of two with T * S >= X, the last
// tile holding what is left (DeepSeek-V3's 128-element tiles over any size:
// 5632 = 44 x 128; 192 = 128 + 64; 24 in one tile of 32). S = X is one
// scale per element (T = 1); S = 1 is one tile over the dim. A tiling whose
// S is not ceil(X / T) (5 tiles of 48: T = 16 makes 3) is invalid.

#include <cstdint>

namespace loom {

/// Elements a tile spans in a dim of `size` elements cut into `tiles`
/// tiles, or 0 where `tiles` does not tile it.
inline constexpr int64_t fp8TileSize(int64_t size, int64_t tiles) {
  if (tiles <= 0 || size < 0 || tiles > (size > 0 ? size : 1))
    return 0;
  int64_t t = 1;
  while (t * tiles < size)
    t *= 2;
  const int64_t used = t == 0 ? 0 : (size + t - 1) / t;
  return used == tiles || (size == 0 && tiles == 1) ? t : 0;
}

/// Tiles of `tileSize` elements a dim of `size` elements needs.
inline constexpr int64_t fp8Tiles(int64_t size, int64_t tileSize) {
  return size <= 0 ? 1 : (size + tileSize - 1) / tileSize;
}

/// The block DeepSeek-V3's blockwise recipe scales by: 1 x 128 tiles of
/// activations and gradients, 128 x 128 blocks of weights; cuBLASLt's
/// VEC128_32F and BLK128x128_32F scale modes.
inline constexpr int64_t kFp8Block = 128;

/// Whether every tile of a [rows, cols] matrix cut in tiles of tr x tc
/// elements lies inside one kFp8Block x kFp8Block block of it: tiles one
/// row or a block tall (or all rows, at most a block) and a block wide (or
/// all columns, at most a block). Such a quantization and its transposed
/// copy read each block once (nn.quantize_tiles, --loom-fuse-fp8-quantize).
inline constexpr bool fp8TilesInBlocks(int64_t rows, int64_t cols, int64_t tr, int64_t tc) {
  auto fits = [](int64_t t, int64_t n) { return t == kFp8Block || (t >= n && n <= kFp8Block); };
  return (tr == 1 || fits(tr, rows)) && fits(tc, cols);
}

} // namespace loom

#endif
