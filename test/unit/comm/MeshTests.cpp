// Ranks, groups and shard blocks of a mesh.

#include "runtime/abi/Mesh.h"

#include <gtest/gtest.h>

#include <numeric>

namespace loom {
namespace {

const Mesh kMesh2x2{{"dp", "tp"}, {2, 2}};

Group group(const Mesh &mesh, int64_t rank, std::vector<std::string> axes) {
  auto g = groupOf(mesh, rank, axes);
  EXPECT_TRUE(bool(g)) << llvm::toString(g.takeError());
  return g ? *g : Group{};
}

TEST(Mesh, RanksAreRowMajor) {
  EXPECT_EQ(kMesh2x2.numRanks(), 4);
  EXPECT_EQ(kMesh2x2.coordinates(2), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(kMesh2x2.coordinates(1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(Mesh{}.numRanks(), 1);
}

TEST(Mesh, GroupsOfA2x2Mesh) {
  Group tp = group(kMesh2x2, 3, {"tp"});
  EXPECT_EQ(tp.members, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tp.index, 1);
  Group dp = group(kMesh2x2, 1, {"dp"});
  EXPECT_EQ(dp.members, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(dp.index, 0);
  Group all = group(kMesh2x2, 2, {"dp", "tp"});
  EXPECT_EQ(all.members, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(all.index, 2);
  // Listed order decides member order: row-major over (tp, dp).
  Group swapped = group(kMesh2x2, 1, {"tp", "dp"});
  EXPECT_EQ(swapped.members, (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(swapped.index, 2);
  Group alone = group(kMesh2x2, 1, {});
  EXPECT_EQ(alone.members, (std::vector<int64_t>{1}));
}

TEST(Mesh, GroupErrors) {
  auto unknown = groupOf(kMesh2x2, 0, {"pp"});
  ASSERT_FALSE(bool(unknown));
  EXPECT_EQ(llvm::toString(unknown.takeError()),
            "axis 'pp' is not a mesh axis (the mesh has [\"dp\", \"tp\"])");
  auto twice = groupOf(kMesh2x2, 0, {"tp", "tp"});
  ASSERT_FALSE(bool(twice));
  EXPECT_EQ(llvm::toString(twice.takeError()), "axis 'tp' is listed twice");
}

TEST(Mesh, ShardBlocks) {
  Mesh mesh{{"dp", "tp"}, {2, 3}};
  // Rank 4 is dp=1, tp=1.
  auto block = shardBlock(mesh, 4, {{"dp"}, {"tp"}}, std::vector<int64_t>{4, 6});
  ASSERT_TRUE(bool(block));
  EXPECT_EQ(block->offsets, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(block->shape, (std::vector<int64_t>{2, 2}));
  // Two axes on one dimension: the first is outermost.
  auto both = shardBlock(mesh, 4, {{"dp", "tp"}, {}}, std::vector<int64_t>{12, 5});
  ASSERT_TRUE(bool(both));
  EXPECT_EQ(both->offsets, (std::vector<int64_t>{8, 0}));
  EXPECT_EQ(both->shape, (std::vector<int64_t>{2, 5}));
  auto uneven = shardBlock(mesh, 0, {{"tp"}}, std::vector<int64_t>{4});
  ASSERT_FALSE(bool(uneven));
  EXPECT_EQ(llvm::toString(uneven.takeError()),
            "dimension 0 (4) does not divide into 3 blocks along [\"tp\"]");
  EXPECT_TRUE(ownsBlock(mesh, 1, {{"tp"}}));
  EXPECT_FALSE(ownsBlock(mesh, 4, {{"tp"}}));
  EXPECT_TRUE(ownsBlock(mesh, 0, {}));
  EXPECT_FALSE(ownsBlock(mesh, 3, {}));
}

TEST(Mesh, ExtractThenInsertTilesTheTensor) {
  std::vector<int32_t> global(4 * 6);
  std::iota(global.begin(), global.end(), 0);
  std::vector<int32_t> rebuilt(global.size(), -1);
  Mesh mesh{{"dp", "tp"}, {2, 3}};
  for (int64_t r = 0; r < mesh.numRanks(); ++r) {
    auto block = shardBlock(mesh, r, {{"dp"}, {"tp"}}, std::vector<int64_t>{4, 6});
    ASSERT_TRUE(bool(block));
    std::vector<int32_t> piece(4);
    extractBlock(global.data(), {4, 6}, 4, *block, piece.data());
    // Row-major within the block.
    EXPECT_EQ(piece[0], int32_t(block->offsets[0] * 6 + block->offsets[1]));
    EXPECT_EQ(piece[2], int32_t((block->offsets[0] + 1) * 6 + block->offsets[1]));
    insertBlock(rebuilt.data(), {4, 6}, 4, *block, piece.data());
  }
  EXPECT_EQ(rebuilt, global);
}


// A batch of 8 rows in 2 microbatches over 2 data ranks: rank 0's block gets
// the first half of each microbatch, rank 1's the second, in order, so
// microbatch m of the ranks together is rows [4m, 4m + 4) as read.
TEST(Mesh, RowGroupOrderGivesEachBlockItsShareOfEveryGroup) {
  EXPECT_EQ(rowGroupOrder(8, 2, 2), (std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7}));
  // One group or one block: the rows as they are.
  EXPECT_EQ(rowGroupOrder(6, 1, 3), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(rowGroupOrder(6, 3, 1), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  // 3 groups of 4 rows over 4 blocks: block r takes row r of each group.
  EXPECT_EQ(rowGroupOrder(12, 3, 4),
            (std::vector<int64_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
}

} // namespace
} // namespace loom
