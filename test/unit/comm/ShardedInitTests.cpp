// A sharded parameter starts as its block of the global initial tensor, so a
// sharded run begins from the same weights as a one-rank run.

#include "runtime/backends/ProgramExecutor.h"

#include <gtest/gtest.h>

#include <cstring>

namespace loom {
namespace {

/// One parameter "w" of global shape [4, 6] (normal init, or data), one rank
/// per mesh position holding its block under `sharding`.
Executable makeExecutable(const Mesh &mesh, const Sharding &sharding, bool data) {
  Executable exe;
  exe.mode = "infer";
  exe.mesh = mesh;
  ParameterDesc w;
  w.name = "w";
  w.shape = {4, 6};
  w.sharding = sharding;
  if (data) {
    w.init = InitKind::Data;
    for (int i = 0; i < 24; ++i) {
      float v = 0.5f * i - 3.0f;
      const auto *bytes = reinterpret_cast<const uint8_t *>(&v);
      w.data.insert(w.data.end(), bytes, bytes + 4);
    }
  } else {
    w.init = InitKind::Normal;
    w.initScale = 0.02;
  }
  exe.parameters.push_back(w);
  for (int64_t r = 0; r < mesh.numRanks(); ++r) {
    RankProgram p;
    p.rank = r;
    auto block = shardBlock(mesh, r, sharding, w.shape);
    EXPECT_TRUE(bool(block));
    BufferDesc b;
    b.arena = ArenaKind::Persistent;
    b.shape = block->shape;
    p.arenaSize[0] = b.sizeInBytes();
    p.buffers.push_back(b);
    p.streams = {"compute"};
    p.params = {{0, 0}};
    exe.ranks.push_back(p);
  }
  if (llvm::Error err = verifyExecutable(exe))
    ADD_FAILURE() << llvm::toString(std::move(err));
  return exe;
}

std::vector<float> floats(const HostTensor &t) {
  std::vector<float> v(t.data.size() / 4);
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

std::vector<float> parameterOnRank(const Executable &exe, uint32_t rank) {
  auto backend = createCpuBackend(1);
  auto executor = ProgramExecutor::create(exe, rank, *backend, /*seed=*/7);
  EXPECT_TRUE(bool(executor)) << llvm::toString(executor.takeError());
  auto value = (*executor)->readBuffer(0);
  EXPECT_TRUE(bool(value));
  return floats(*value);
}

TEST(ShardedInit, EachRankHoldsItsBlockOfTheGlobalInit) {
  for (bool data : {false, true}) {
    SCOPED_TRACE(data ? "stored data" : "seeded normal");
    std::vector<float> global = parameterOnRank(makeExecutable(Mesh{}, {}, data), 0);
    ASSERT_EQ(global.size(), 24u);
    Mesh mesh{{"dp", "tp"}, {2, 3}};
    Sharding sharding{{"dp"}, {"tp"}};
    Executable exe = makeExecutable(mesh, sharding, data);
    for (int64_t r = 0; r < mesh.numRanks(); ++r) {
      std::vector<float> local = parameterOnRank(exe, r);
      auto block = shardBlock(mesh, r, sharding, {4, 6});
      ASSERT_EQ(local.size(), 4u);
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 2; ++j)
          EXPECT_EQ(local[i * 2 + j],
                    global[(block->offsets[0] + i) * 6 + block->offsets[1] + j])
              << "rank " << r;
    }
    // A replicated parameter is whole, and equal, on every rank.
    Executable replicated = makeExecutable(mesh, {{}, {}}, data);
    EXPECT_EQ(parameterOnRank(replicated, 5), global);
  }
}

} // namespace
} // namespace loom
