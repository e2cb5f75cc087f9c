// Executable version 2: the mesh, sharded parameters and inputs, and
// collective instructions survive serialization, and the verifier checks
// them against the mesh.

#include "SampleExecutable.h"

#include "runtime/executable/ExecutableListing.h"
#include "runtime/schema/executable_generated.h"

#include <gtest/gtest.h>

#include <functional>

namespace loom {
namespace {

using test::errorMessage;

Instruction collective(CollectiveKind kind, std::vector<std::string> axes,
                       std::vector<uint32_t> inputs, std::vector<uint32_t> outputs) {
  Instruction instr;
  instr.kind = InstrKind::Collective;
  instr.stream = 1;
  instr.collective.kind = kind;
  instr.collective.axes = std::move(axes);
  instr.inputs = std::move(inputs);
  instr.outputs = std::move(outputs);
  return instr;
}

/// A 2x2 (dp x tp) SPMD executable: w [8, 4] split along tp on dim 0, tokens
/// [4, 3] split along dp on dim 0, and one collective of every kind.
Executable makeShardedExecutable() {
  Executable exe;
  exe.modelName = "sharded";
  exe.mode = "train";
  exe.mesh = {{"dp", "tp"}, {2, 2}};
  ParameterDesc w;
  w.name = "w";
  w.shape = {8, 4};
  w.init = InitKind::Normal;
  w.initScale = 0.5;
  w.sharding = {{"tp"}, {}};
  exe.parameters.push_back(w);
  for (uint32_t r = 0; r < 4; ++r) {
    RankProgram p;
    p.rank = r;
    p.arenaSize[0] = 64;
    p.arenaSize[1] = 512;
    auto buffer = [](ArenaKind arena, uint64_t offset, DType dtype, std::vector<int64_t> shape) {
      BufferDesc b;
      b.arena = arena;
      b.offset = offset;
      b.dtype = dtype;
      b.shape = std::move(shape);
      return b;
    };
    p.buffers = {buffer(ArenaKind::Persistent, 0, DType::F32, {4, 4}),  // 0 w block
                 buffer(ArenaKind::Scratch, 0, DType::I64, {2, 3}),      // 1 tokens block
                 buffer(ArenaKind::Scratch, 64, DType::F32, {8, 4}),     // 2 gathered
                 buffer(ArenaKind::Scratch, 192, DType::F32, {2, 4}),    // 3 scattered
                 buffer(ArenaKind::Scratch, 224, DType::F32, {2, 8}),    // 4 all_to_all out
                 buffer(ArenaKind::Scratch, 288, DType::F32, {4, 4})};   // 5 copy of w
    p.streams = {"compute", "tp_comm", "pp_comm"};
    p.params = {{0, 0}};
    p.inputs = {{"tokens", 1, {4, 3}, {{"dp"}, {}}}};
    p.outputs = {{"w", 0}};
    Instruction reduce = collective(CollectiveKind::AllReduce, {"tp"}, {0}, {5});
    reduce.collective.reduce = ReduceOp::Avg;
    Instruction gather = collective(CollectiveKind::AllGather, {"tp"}, {0}, {2});
    Instruction scatter = collective(CollectiveKind::ReduceScatter, {"tp"}, {0}, {3});
    scatter.collective.reduce = ReduceOp::Max;
    Instruction a2a = collective(CollectiveKind::AllToAll, {"dp"}, {0}, {4});
    a2a.collective.splitDim = 0;
    a2a.collective.concatDim = 1;
    Instruction bcast = collective(CollectiveKind::Broadcast, {"dp", "tp"}, {0}, {5});
    bcast.collective.root = 3;
    Instruction send = collective(CollectiveKind::Send, {}, {0}, {});
    send.collective.peer = r ^ 1;
    send.stream = 2;
    Instruction recv = collective(CollectiveKind::Recv, {}, {}, {5});
    recv.collective.peer = r ^ 1;
    recv.stream = 2;
    p.instructions = {reduce, gather, scatter, a2a, bcast, send, recv};
    exe.ranks.push_back(std::move(p));
  }
  return exe;
}

TEST(ShardedExecutable, Verifies) {
  EXPECT_EQ(errorMessage(verifyExecutable(makeShardedExecutable())), "(no error)");
}

TEST(ShardedExecutable, RoundTripPreservesMeshShardingAndCollectives) {
  Executable exe = makeShardedExecutable();
  auto loaded = loadExecutable(serializeExecutable(exe).data(), serializeExecutable(exe).size());
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  test::expectSameExecutable(exe, *loaded);
  // Guard against a comparison that passes on empty fields.
  EXPECT_EQ(loaded->mesh.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(loaded->parameters[0].sharding, (Sharding{{"tp"}, {}}));
  EXPECT_EQ(loaded->ranks[3].instructions[4].collective.root, 3);
  EXPECT_EQ(loaded->ranks[2].inputs[0].globalShape, (std::vector<int64_t>{4, 3}));
}

TEST(ShardedExecutable, VersionOneFileStillLoads) {
  // What a build before multi-rank execution wrote: version 1, no mesh.
  flatbuffers::FlatBufferBuilder builder;
  auto rank = fb::CreateRankProgram(builder, 0, 0, 0, 0,
                                    builder.CreateVectorOfStrings({"compute"}));
  auto root = fb::CreateExecutable(
      builder, 1, builder.CreateString("old"), builder.CreateString("infer"), 0, 0,
      builder.CreateVector(std::vector<flatbuffers::Offset<fb::RankProgram>>{rank}));
  fb::FinishExecutableBuffer(builder, root);
  auto loaded = loadExecutable(builder.GetBufferPointer(), builder.GetSize());
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_EQ(loaded->formatVersion, 1u);
  EXPECT_EQ(loaded->modelName, "old");
  EXPECT_TRUE(loaded->mesh.axes.empty());
  EXPECT_EQ(loaded->mesh.numRanks(), 1);
}

struct BrokenCase {
  const char *name;
  std::function<void(Executable &)> breakIt;
  const char *expectedMessage;
};

const BrokenCase kBrokenCases[] = {
    {"MeshSizesDiffer", [](Executable &e) { e.mesh.shape = {4}; },
     "the mesh names 2 axes but has 1 size"},
    {"MeshAxisRepeated", [](Executable &e) { e.mesh.axes = {"dp", "dp"}; },
     "mesh axis 1 ('dp') is empty or repeated"},
    {"TooFewRankPrograms", [](Executable &e) { e.ranks.pop_back(); },
     "the mesh has 4 ranks but the executable holds 3 rank programs"},
    {"RankOutsideMesh", [](Executable &e) { e.ranks[3].rank = 7; },
     "rank 7 is outside the mesh of 4 ranks"},
    {"ShardingUnknownAxis", [](Executable &e) { e.parameters[0].sharding = {{"ep"}, {}}; },
     "parameter 0 (w): sharding axis 'ep' is not a mesh axis"},
    {"ShardingDoesNotDivide",
     [](Executable &e) {
       e.parameters[0].shape = {7, 4};
     },
     "dimension 0 (7) does not divide into 2 blocks"},
    {"ParamBufferNotItsBlock",
     [](Executable &e) { e.parameters[0].sharding = {{}, {}}; },
     "rank 0, parameter binding 0 (w): buffer 0 is f32[4, 4] but the parameter is f32[8, 4]"},
    {"InputBufferNotItsBlock",
     [](Executable &e) { e.ranks[1].inputs[0].globalShape = {8, 3}; },
     "rank 1, input 0 (tokens): buffer 1 is i64[2, 3] but its block of the global i64[8, 3] "
     "is i64[4, 3]"},
    {"GatherWrongSize",
     [](Executable &e) { e.ranks[0].instructions[1].collective.axes = {"dp", "tp"}; },
     "rank 0, instruction 1 (collective): all_gather: input [4x4] and output [8x4] differ "
     "along dim 0: output must be 16 (the group has 4 ranks)"},
    {"CollectiveUnknownAxis",
     [](Executable &e) { e.ranks[2].instructions[0].collective.axes = {"sp"}; },
     "rank 2, instruction 0 (collective): axis 'sp' is not a mesh axis"},
    {"BroadcastRootOutsideGroup",
     [](Executable &e) { e.ranks[0].instructions[4].collective.root = 4; },
     "broadcast: root 4 is not an index in a group of 4"},
    {"SendToSelf", [](Executable &e) { e.ranks[1].instructions[5].collective.peer = 1; },
     "rank 1, instruction 5 (collective): peer 1 is not another rank (of 4 ranks)"},
    {"RecvWithInput",
     [](Executable &e) { e.ranks[0].instructions[6].inputs = {0}; },
     "recv takes no input and one output"},
    {"CollectiveKindInvalid",
     [](Executable &e) { e.ranks[0].instructions[0].collective.kind = CollectiveKind(kNumCollectiveKinds + 3); },
     "invalid collective kind 13"},
    {"ReduceInvalid",
     [](Executable &e) { e.ranks[0].instructions[0].collective.reduce = ReduceOp(5); },
     "all_reduce: invalid reduction 5"},
    {"CollectiveOfBools",
     [](Executable &e) {
       e.ranks[0].buffers[5].dtype = DType::I1;
       e.ranks[0].buffers[0].dtype = DType::I1;
       e.parameters[0].dtype = DType::I1;
     },
     "element type i1 is not one collectives move"},
};

class ShardedVerifierRule : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(ShardedVerifierRule, VerifyAndLoadReportIt) {
  Executable exe = makeShardedExecutable();
  GetParam().breakIt(exe);
  test::expectVerifyAndLoadReport(exe, GetParam().expectedMessage);
}

INSTANTIATE_TEST_SUITE_P(Executable, ShardedVerifierRule, ::testing::ValuesIn(kBrokenCases),
                         [](const ::testing::TestParamInfo<BrokenCase> &info) {
                           return std::string(info.param.name);
                         });

TEST(ShardedExecutable, ListingShowsMeshShardingAndCollectives) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printExecutable(makeShardedExecutable(), os);
  for (const char *line :
       {"  mesh:          dp=2 x tp=2\n",
        "  p0 w: f32[8, 4], init normal(scale 0.5), trainable, sharded [[\"tp\"], []]\n",
        "    tokens: b1 i64[2, 3], block of global [4, 3] [[\"dp\"], []]\n",
        "  collectives (7):\n",
        "    #0 [tp_comm] all_reduce(avg) over [\"tp\"] f32[4, 4] -> f32[4, 4]\n",
        "    #3 [tp_comm] all_to_all(split 0, concat 1) over [\"dp\"] f32[4, 4] -> f32[2, 8]\n",
        "    #5 [pp_comm] send to rank 2 f32[4, 4]\n"})
    EXPECT_NE(text.find(line), std::string::npos) << "missing:\n" << line << "in:\n" << text;
  llvm::json::Value json = executableToJson(makeShardedExecutable());
  const llvm::json::Object *root = json.getAsObject();
  ASSERT_NE(root, nullptr);
  const llvm::json::Object *mesh = root->getObject("mesh");
  ASSERT_NE(mesh, nullptr);
  EXPECT_EQ((*mesh->getArray("shape"))[1].getAsInteger(), 2);
  const llvm::json::Object *instr =
      (*(*root->getArray("ranks"))[0].getAsObject()->getArray("instructions"))[2].getAsObject();
  const llvm::json::Object *collectiveJson = instr->getObject("collective");
  ASSERT_NE(collectiveJson, nullptr);
  EXPECT_EQ(collectiveJson->getString("kind"), "reduce_scatter");
  EXPECT_EQ(collectiveJson->getString("reduce"), "max");
  EXPECT_EQ(collectiveJson->getInteger("dim"), 0);
}

} // namespace
} // namespace loom
