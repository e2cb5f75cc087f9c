// A pipelined executable's schedule (Executable::scheduleCsv, the schema's
// appended `schedule_csv`): it survives serialization, is absent on disk
// when there is none, files written without the field load with no
// schedule, the verifier ties it to the mesh's pp axis, and the listing
// names it.

#include "SampleExecutable.h"

#include "runtime/executable/ExecutableListing.h"
#include "runtime/schema/executable_generated.h"

#include <gtest/gtest.h>

#include <functional>

namespace loom {
namespace {

using test::errorMessage;

constexpr const char *kCsv =
    "# loom-schedule kind=1f1b ranks=2 stages=2 microbatches=2 chains=1\n"
    "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
    "1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n";

/// Two pipeline ranks (mesh pp = 2) with nothing to run, and their schedule.
Executable makePipelinedExecutable() {
  Executable exe;
  exe.modelName = "pipelined";
  exe.mode = "train";
  exe.mesh = {{"pp"}, {2}};
  for (uint32_t r = 0; r < 2; ++r) {
    RankProgram program;
    program.rank = r;
    program.streams = {"compute"};
    exe.ranks.push_back(std::move(program));
  }
  exe.scheduleCsv = kCsv;
  return exe;
}

TEST(ScheduleExecutable, Verifies) {
  EXPECT_EQ(errorMessage(verifyExecutable(makePipelinedExecutable())), "(no error)");
}

TEST(ScheduleExecutable, RoundTripPreservesTheSchedule) {
  Executable exe = makePipelinedExecutable();
  std::vector<uint8_t> bytes = serializeExecutable(exe);
  auto loaded = loadExecutable(bytes.data(), bytes.size());
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  test::expectSameExecutable(exe, *loaded);
  EXPECT_EQ(loaded->scheduleCsv, kCsv); // not two empty strings
  EXPECT_EQ(loaded->formatVersion, 2u);
  const fb::Executable *root = fb::GetExecutable(bytes.data());
  ASSERT_NE(root->schedule_csv(), nullptr);
  EXPECT_EQ(root->schedule_csv()->str(), kCsv);
}

TEST(ScheduleExecutable, NoScheduleIsAbsentOnDisk) {
  Executable exe = makePipelinedExecutable();
  exe.scheduleCsv.clear();
  std::vector<uint8_t> bytes = serializeExecutable(exe);
  EXPECT_EQ(fb::GetExecutable(bytes.data())->schedule_csv(), nullptr);
  Executable loaded = cantFail(loadExecutable(bytes.data(), bytes.size()));
  EXPECT_TRUE(loaded.scheduleCsv.empty());
}

TEST(ScheduleExecutable, FileWithoutTheFieldLoadsWithoutASchedule) {
  // What a build before the field wrote for a pipeline: version 2, a pp
  // mesh, two programs, and no schedule_csv.
  flatbuffers::FlatBufferBuilder builder;
  std::vector<flatbuffers::Offset<fb::RankProgram>> ranks;
  for (uint32_t r = 0; r < 2; ++r)
    ranks.push_back(fb::CreateRankProgram(builder, r, 0, 0, 0,
                                          builder.CreateVectorOfStrings({"compute"})));
  auto ranksVector = builder.CreateVector(ranks);
  auto meshAxes = builder.CreateVectorOfStrings({"pp"});
  auto meshShape = builder.CreateVector(std::vector<int64_t>{2});
  fb::ExecutableBuilder root(builder);
  root.add_format_version(2);
  root.add_ranks(ranksVector);
  root.add_mesh_axes(meshAxes);
  root.add_mesh_shape(meshShape);
  fb::FinishExecutableBuffer(builder, root.Finish());
  auto loaded = loadExecutable(builder.GetBufferPointer(), builder.GetSize());
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_EQ(loaded->ranks.size(), 2u);
  EXPECT_EQ(loaded->mesh.numRanks(), 2);
  EXPECT_TRUE(loaded->scheduleCsv.empty());
}

struct BrokenCase {
  const char *name;
  std::function<void(Executable &)> breakIt;
  const char *expectedMessage;
};

const BrokenCase kBrokenCases[] = {
    {"NoPipelineAxis", [](Executable &e) { e.mesh.axes = {"dp"}; },
     "the executable holds a pipeline schedule but its mesh has no 'pp' axis"},
    {"NoMesh",
     [](Executable &e) {
       e.mesh = {};
       e.ranks.pop_back();
     },
     "the executable holds a pipeline schedule but its mesh has no 'pp' axis"},
    {"RowMissing",
     [](Executable &e) { e.scheduleCsv = e.scheduleCsv.substr(0, e.scheduleCsv.rfind("1RECV_F0")); },
     "the pipeline schedule has 1 row but the mesh's 'pp' axis has 2 ranks"},
    {"RowTooMany", [](Executable &e) { e.scheduleCsv += "2F0\n"; },
     "the pipeline schedule has 3 rows but the mesh's 'pp' axis has 2 ranks"},
    {"PipelineAxisOfAnotherSize",
     [](Executable &e) {
       e.mesh = {{"dp", "pp"}, {2, 4}};
       while (e.ranks.size() < 8) {
         RankProgram program;
         program.rank = uint32_t(e.ranks.size());
         program.streams = {"compute"};
         e.ranks.push_back(std::move(program));
       }
     },
     "the pipeline schedule has 2 rows but the mesh's 'pp' axis has 4 ranks"},
};

class ScheduleVerifierRule : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(ScheduleVerifierRule, VerifyAndLoadReportItInOneLine) {
  Executable exe = makePipelinedExecutable();
  GetParam().breakIt(exe);
  test::expectVerifyAndLoadReport(exe, GetParam().expectedMessage);
}

INSTANTIATE_TEST_SUITE_P(Executable, ScheduleVerifierRule, ::testing::ValuesIn(kBrokenCases),
                         [](const ::testing::TestParamInfo<BrokenCase> &info) {
                           return std::string(info.param.name);
                         });

TEST(ScheduleExecutable, ListingNamesTheSchedule) {
  Executable exe = makePipelinedExecutable();
  auto listing = [&](llvm::StringRef summary) {
    std::string text;
    llvm::raw_string_ostream os(text);
    printExecutable(exe, os, summary);
    return text;
  };
  std::string header = "  mesh:          pp=2\n  schedule:      ";
  // The caller's summary when it parsed the CSV, else the CSV's size.
  EXPECT_NE(listing("1f1b, 2 ranks, 2 stages, 2 microbatches")
                .find(header + "1f1b, 2 ranks, 2 stages, 2 microbatches\n"),
            std::string::npos);
  EXPECT_NE(listing("").find(header + "pipeline schedule CSV, " +
                             std::to_string(exe.scheduleCsv.size()) + " bytes\n"),
            std::string::npos);
  llvm::json::Value json = executableToJson(exe);
  EXPECT_EQ(json.getAsObject()->getString("scheduleCsv"), kCsv);

  exe.scheduleCsv.clear();
  EXPECT_EQ(listing("ignored").find("schedule:"), std::string::npos);
  llvm::json::Value none = executableToJson(exe);
  const llvm::json::Object *object = none.getAsObject();
  ASSERT_NE(object, nullptr);
  ASSERT_NE(object->get("scheduleCsv"), nullptr);
  EXPECT_EQ(object->get("scheduleCsv")->kind(), llvm::json::Value::Null);
}

} // namespace
} // namespace loom
