// Bucket instructions (an all_reduce or reduce_scatter with several inputs
// and outputs) in an executable: they survive serialization with no new
// fields, the verifier checks each entry and refuses buckets of other kinds
// or unpaired buffers in one line, and listings show each bucket's tensors.

#include "SampleExecutable.h"

#include "runtime/executable/ExecutableListing.h"

#include <gtest/gtest.h>

#include <functional>

namespace loom {
namespace {

using test::errorMessage;

/// A dp = 2 executable whose ranks all-reduce two gradients (f32[2, 3] and
/// f32[4]) in one bucket on dp_comm.
Executable makeBucketExecutable() {
  Executable exe;
  exe.modelName = "bucket";
  exe.mode = "train";
  exe.mesh = {{"dp"}, {2}};
  for (uint32_t r = 0; r < 2; ++r) {
    RankProgram p;
    p.rank = r;
    p.arenaSize[static_cast<int>(ArenaKind::Scratch)] = 256;
    auto buffer = [](uint64_t offset, DType dtype, std::vector<int64_t> shape) {
      BufferDesc b;
      b.arena = ArenaKind::Scratch;
      b.offset = offset;
      b.dtype = dtype;
      b.shape = std::move(shape);
      return b;
    };
    p.buffers = {buffer(0, DType::F32, {2, 3}),   // 0 dw
                 buffer(64, DType::F32, {4}),     // 1 db
                 buffer(128, DType::F32, {2, 3}), // 2 summed dw
                 buffer(192, DType::F32, {4})};   // 3 summed db
    p.streams = {"compute", "dp_comm"};
    p.inputs = {{"dw", 0}, {"db", 1}};
    p.outputs = {{"gw", 2}, {"gb", 3}};
    Instruction bucket;
    bucket.kind = InstrKind::Collective;
    bucket.stream = 1;
    bucket.collective.kind = CollectiveKind::AllReduce;
    bucket.collective.axes = {"dp"};
    bucket.inputs = {0, 1};
    bucket.outputs = {2, 3};
    p.instructions = {bucket};
    exe.ranks.push_back(std::move(p));
  }
  return exe;
}

TEST(BucketExecutable, VerifiesAndRoundTrips) {
  Executable exe = makeBucketExecutable();
  EXPECT_EQ(errorMessage(verifyExecutable(exe)), "(no error)");
  std::vector<uint8_t> bytes = serializeExecutable(exe);
  auto loaded = loadExecutable(bytes.data(), bytes.size());
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  test::expectSameExecutable(exe, *loaded);
  EXPECT_EQ(loaded->ranks[1].instructions[0].inputs, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(loaded->ranks[1].instructions[0].outputs, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(loaded->formatVersion, 2u);
}

struct BrokenCase {
  const char *name;
  std::function<void(Executable &)> breakIt;
  const char *expectedMessage;
};

const BrokenCase kBrokenCases[] = {
    {"UnpairedOutputs", [](Executable &e) { e.ranks[1].instructions[0].outputs = {2}; },
     "rank 1, instruction 0 (collective): a collective takes at most one input and one output "
     "(all_reduce and reduce_scatter a bucket of one output per input), has 2 inputs and 1 "
     "output"},
    {"AllGatherBucket",
     [](Executable &e) {
       e.ranks[0].instructions[0].collective.kind = CollectiveKind::AllGather;
     },
     "rank 0, instruction 0 (collective): a collective takes at most one input and one output"},
    {"EntryShapeMismatch", [](Executable &e) { e.ranks[0].buffers[3].shape = {2}; },
     "rank 0, instruction 0 (collective): bucket entry 1: all_reduce: input [4] and output [2] "
     "must have the same shape"},
};

class BucketVerifierRule : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(BucketVerifierRule, VerifyAndLoadReportItInOneLine) {
  Executable exe = makeBucketExecutable();
  GetParam().breakIt(exe);
  test::expectVerifyAndLoadReport(exe, GetParam().expectedMessage);
}

INSTANTIATE_TEST_SUITE_P(Executable, BucketVerifierRule, ::testing::ValuesIn(kBrokenCases),
                         [](const ::testing::TestParamInfo<BrokenCase> &info) {
                           return std::string(info.param.name);
                         });

TEST(BucketExecutable, ListingShowsTheBucketsTensors) {
  Executable exe = makeBucketExecutable();
  std::string text;
  llvm::raw_string_ostream os(text);
  printExecutable(exe, os);
  const char *line = "    #0 [dp_comm] all_reduce(sum) over [\"dp\"]: bucket of 2 tensors, 40 "
                     "bytes: f32[2, 3] -> f32[2, 3], f32[4] -> f32[4]\n";
  EXPECT_NE(text.find(line), std::string::npos) << "missing:\n" << line << "in:\n" << text;
}

} // namespace
} // namespace loom
