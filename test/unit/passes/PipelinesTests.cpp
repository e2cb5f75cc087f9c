// Loom's pass pipeline (passes/Pipelines.h): which passes each set of options
// builds, in which order, where a phase stops, and which options it refuses.
// That its IR equals loom-compile's is tested end to end in
// test/tools/loom-opt-pipeline.test.

#include "passes/Pipelines.h"

#include "frontend/raising/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include "gtest/gtest.h"

#include <string>

using namespace loom;

namespace {

PipelineHooks hooks() {
  PipelineHooks h;
  h.buildRaising = buildRaisingPipeline;
  return h;
}

/// The pipeline as mlir-opt's textual form.
std::string textOf(const PipelineOptions &options, Phase stopAfter) {
  mlir::MLIRContext context;
  mlir::PassManager pm(&context);
  buildLoomPipeline(pm, options, hooks(), stopAfter);
  std::string text;
  llvm::raw_string_ostream os(text);
  pm.printAsTextualPipeline(os);
  return text;
}

/// Position of `pass` in `text`, failing the test when it is absent.
size_t at(const std::string &text, const std::string &pass) {
  size_t pos = text.find(pass);
  EXPECT_NE(pos, std::string::npos) << pass << " missing from " << text;
  return pos;
}

PipelineOptions trainingWithEverything() {
  PipelineOptions o;
  o.mode = PipelineMode::Train;
  o.precision = ComputePrecision::BF16;
  o.stepBatch = 2;
  o.globalBatch = 16;
  o.microbatches = 4;
  o.pp = 2;
  o.tp = 2;
  o.dp = 2;
  return o;
}

TEST(LoomPipeline, RunsTheStepsInLoomCompilesOrder) {
  std::string text = textOf(trainingWithEverything(), Phase::RT);
  size_t raise = at(text, "loom-fold-constants");
  size_t rebatch = at(text, "loom-rebatch{batch=2");
  size_t partition = at(text, "loom-pipeline-partition");
  size_t cast = at(text, "loom-cast-compute");
  size_t step = at(text, "loom-build-training-step{batch=16");
  size_t schedule = at(text, "loom-pipeline-schedule");
  size_t split = at(text, "loom-pipeline-split");
  size_t shard = at(text, "loom-shard-annotate");
  size_t buckets = at(text, "loom-bucket-reductions");
  size_t stats = at(text, "loom-attention-stats");
  size_t lower = at(text, "loom-lower-to-rt");
  size_t streams = at(text, "loom-assign-streams");
  EXPECT_LT(raise, rebatch);
  EXPECT_LT(rebatch, partition);
  EXPECT_LT(partition, cast);
  EXPECT_LT(cast, step);
  EXPECT_LT(step, schedule);
  EXPECT_LT(schedule, split);
  EXPECT_LT(split, shard);
  EXPECT_LT(shard, buckets);
  // Forward/backward attention pairs once each rank's program is final.
  EXPECT_LT(buckets, stats);
  EXPECT_LT(stats, lower);
  EXPECT_LT(lower, streams);
  // The training step re-partitions, so the backward joins its stages.
  EXPECT_NE(text.find("loom-pipeline-partition", step), std::string::npos);
}

TEST(LoomPipeline, StopsAfterEachPhasesLastStep) {
  PipelineOptions o = trainingWithEverything();
  mlir::MLIRContext context;
  mlir::PassManager input(&context);
  buildLoomPipeline(input, o, hooks(), Phase::Input);
  EXPECT_EQ(input.size(), 0u);
  std::string nn = textOf(o, Phase::NN);
  EXPECT_NE(nn.find("loom-rebatch"), std::string::npos);
  EXPECT_EQ(nn.find("loom-pipeline-partition"), std::string::npos);
  std::string train = textOf(o, Phase::Train);
  EXPECT_NE(train.find("loom-build-training-step"), std::string::npos);
  EXPECT_EQ(train.find("loom-pipeline-schedule"), std::string::npos);
  std::string pipe = textOf(o, Phase::Pipe);
  EXPECT_NE(pipe.find("loom-pipeline-schedule"), std::string::npos);
  EXPECT_EQ(pipe.find("loom-pipeline-split"), std::string::npos);
  std::string dist = textOf(o, Phase::Dist);
  EXPECT_NE(dist.find("loom-spmd-partition"), std::string::npos);
  EXPECT_EQ(dist.find("loom-lower-to-rt"), std::string::npos);
  EXPECT_EQ(dist.find("loom-attention-stats"), std::string::npos);
}

TEST(LoomPipeline, AttentionStatsRunOnTrainingStepsUnlessTurnedOff) {
  PipelineOptions o = trainingWithEverything();
  EXPECT_TRUE(stepRuns(PipelineStep::AttentionStats, o));
  o.mode = PipelineMode::Gradients;
  EXPECT_TRUE(stepRuns(PipelineStep::AttentionStats, o));
  o.attentionStats = false;
  EXPECT_FALSE(stepRuns(PipelineStep::AttentionStats, o));
  EXPECT_EQ(textOf(o, Phase::RT).find("loom-attention-stats"), std::string::npos);
  PipelineOptions infer;
  EXPECT_FALSE(stepRuns(PipelineStep::AttentionStats, infer));
  EXPECT_EQ(stepName(PipelineStep::AttentionStats), "attention-stats");
}

TEST(LoomPipeline, InferenceRunsOnlyWhatItNeeds) {
  PipelineOptions o;
  std::string text = textOf(o, Phase::RT);
  for (const char *absent : {"loom-cast-compute", "loom-rebatch", "loom-build-training-step",
                             "loom-pipeline-partition", "loom-shard-annotate"})
    EXPECT_EQ(text.find(absent), std::string::npos) << absent << " in " << text;
  at(text, "loom-lower-to-rt");
  // bf16 inference casts before rebatching, outside any training step.
  o.precision = ComputePrecision::BF16;
  EXPECT_TRUE(stepRuns(PipelineStep::Precision, o));
  o.mode = PipelineMode::Gradients;
  EXPECT_FALSE(stepRuns(PipelineStep::Precision, o));
}

std::string errorOf(const PipelineOptions &o, Phase stopAfter = Phase::RT) {
  llvm::Error err = verifyPipelineOptions(o, stopAfter);
  return err ? llvm::toString(std::move(err)) : "";
}

TEST(LoomPipeline, RefusesOptionsItCannotBuild) {
  EXPECT_EQ(errorOf(trainingWithEverything()), "");
  PipelineOptions o;
  o.pp = 2;
  EXPECT_EQ(errorOf(o), "pp=2 pipelines a training step: add mode=train");
  o = trainingWithEverything();
  o.microbatches = 0;
  EXPECT_EQ(errorOf(o), "pp=2 needs microbatches (the schedule's microbatch count)");
  o = trainingWithEverything();
  o.schedule = "dualpipev";
  o.microbatches = 1;
  o.globalBatch = 2;
  EXPECT_NE(errorOf(o).find("--schedule=dualpipev needs --microbatches"), std::string::npos);
  o = trainingWithEverything();
  o.globalBatch = 12; // dp 2 x microbatches 4 = 8 does not divide it
  EXPECT_EQ(errorOf(o), "batch (12) must be a multiple of dp (2) times microbatches (4): each "
                        "data-parallel rank runs whole microbatches");
  o.ep = 3; // dp 2 x ep 3 x microbatches 4 = 24
  EXPECT_EQ(errorOf(o), "batch (12) must be a multiple of dp x ep (6) times microbatches (4): "
                        "each data-parallel rank runs whole microbatches");
  o = PipelineOptions();
  o.tp = 2;
  EXPECT_EQ(errorOf(o), "tp, dp and ep apply to mode=train");
  o = PipelineOptions();
  o.ep = 0;
  EXPECT_EQ(errorOf(o), "tp, dp and ep must be at least 1, got tp=1 dp=1 ep=0");
  o = PipelineOptions();
  o.vpp = 2;
  EXPECT_EQ(errorOf(o), "vpp, pp-layout and schedule-file need pp=2 or more");
  o.vpp = 1;
  o.adamBeta2 = 1;
  EXPECT_EQ(errorOf(o), "adam-beta2 must be in [0, 1), got 1.000000");
  EXPECT_EQ(errorOf(PipelineOptions(), Phase::Pipe), "compile-to=pipe needs pp=2 or more");
}

} // namespace
