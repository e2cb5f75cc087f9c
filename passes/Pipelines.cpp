// Loom's pass pipeline (see Pipelines.h): the passes of each step, the
// phases a run can stop after, and loom-opt's --loom-compile-pipeline.

#include "passes/Pipelines.h"

#include "passes/fp8/Passes.h"
#include "passes/fusion/Passes.h"
#include "passes/lowering/Passes.h"
#include "passes/memory/Passes.h"
#include "passes/pipeline/Passes.h"
#include "passes/sharding/Passes.h"
#include "passes/training/Passes.h"
#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/ScheduleGenerators.h"

#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/ErrorHandling.h"

#include <algorithm>
#include <cmath>

using namespace mlir;

namespace loom {

llvm::StringRef stepName(PipelineStep step) {
  switch (step) {
  case PipelineStep::Raise:
    return "nn";
  case PipelineStep::Precision:
    return "precision";
  case PipelineStep::Rebatch:
    return "rebatch";
  case PipelineStep::Partition:
    return "partition";
  case PipelineStep::TrainingStep:
    return "train";
  case PipelineStep::Fp8:
    return "fp8";
  case PipelineStep::Schedule:
    return "pipe";
  case PipelineStep::PipeSplit:
    return "pipe-split";
  case PipelineStep::Shard:
    return "dist";
  case PipelineStep::AttentionStats:
    return "attention-stats";
  case PipelineStep::Fuse:
    return "fused";
  case PipelineStep::LowerToRt:
    return "rt";
  }
  llvm_unreachable("unknown pipeline step");
}

bool stepRuns(PipelineStep step, const PipelineOptions &options) {
  switch (step) {
  case PipelineStep::Raise:
  case PipelineStep::LowerToRt:
    return true;
  case PipelineStep::Precision:
    // A training step casts inside its own step, before autodiff.
    return options.precision == ComputePrecision::BF16 && !options.training();
  case PipelineStep::Rebatch:
    return options.stepBatch > 0 || options.training();
  case PipelineStep::Partition:
  case PipelineStep::Schedule:
  case PipelineStep::PipeSplit:
    return options.pp > 1;
  case PipelineStep::TrainingStep:
    return options.training();
  case PipelineStep::Fp8:
    return options.fp8();
  case PipelineStep::Shard:
    return options.distributed();
  case PipelineStep::AttentionStats:
    return options.training() && options.attentionStats;
  case PipelineStep::Fuse:
    return options.fuse || options.widenResults || options.foldTransposes;
  }
  llvm_unreachable("unknown pipeline step");
}

std::optional<PipelineStep> lastStepOf(Phase phase) {
  switch (phase) {
  case Phase::Input:
    return std::nullopt;
  case Phase::NN:
    return PipelineStep::Rebatch;
  case Phase::Train:
    return PipelineStep::TrainingStep;
  case Phase::Fp8:
    return PipelineStep::Fp8;
  case Phase::Pipe:
    return PipelineStep::Schedule;
  case Phase::Dist:
    return PipelineStep::Shard;
  case Phase::Fused:
    return PipelineStep::Fuse;
  case Phase::RT:
    return PipelineStep::LowerToRt;
  }
  llvm_unreachable("unknown phase");
}

namespace {

Fp8MarkOptions fp8MarkOptions(const PipelineOptions &options) {
  Fp8MarkOptions mark;
  mark.recipe = options.fp8Recipe;
  mark.format = options.fp8Format;
  mark.margin = options.fp8Margin;
  mark.history = options.fp8AmaxHistory;
  mark.exclude = options.fp8Exclude;
  return mark;
}

PipelinePartitionOptions partitionOptions(const PipelineOptions &options) {
  PipelinePartitionOptions partition;
  partition.pp = options.pp;
  partition.vpp = options.vpp;
  partition.schedule = options.schedule;
  partition.layout = options.ppLayout;
  partition.scheduleFile = options.scheduleFile;
  return partition;
}

} // namespace

void buildPipelineStep(OpPassManager &pm, const PipelineOptions &options,
                       const PipelineHooks &hooks, PipelineStep step) {
  switch (step) {
  case PipelineStep::Raise:
    if (!hooks.buildRaising)
      llvm::report_fatal_error("loom pipeline: no raising pipeline in PipelineHooks (the tool "
                               "must pass loom::buildRaisingPipeline)");
    hooks.buildRaising(pm, options.raise);
    // no_grad and detach matter to a backward only.
    if (options.mode == PipelineMode::Infer)
      pm.addPass(createStripStopGradients());
    return;
  case PipelineStep::Precision:
    pm.addPass(createCastCompute(CastComputeOptions{"bf16"}));
    pm.addPass(createCanonicalizerPass());
    return;
  case PipelineStep::Rebatch:
    if (options.stepBatch > 0)
      pm.addPass(createRebatch(RebatchOptions{options.stepBatch, options.entry}));
    // A training step feeds token ids alone: an attention_mask and the like
    // take their values for unpadded sequences, after --loom-rebatch, which
    // follows the batch through them as inputs.
    if (options.training())
      pm.addPass(createBindTrainingInputs());
    return;
  case PipelineStep::Partition:
    pm.addPass(createPipelinePartition(partitionOptions(options)));
    return;
  case PipelineStep::TrainingStep: {
    // A bf16 or f16 export trains through f32 master weights.
    pm.addPass(createPromoteMasters());
    // Key/value heads that tensor parallelism cannot split: one per query head.
    if (options.tp > 1)
      pm.addPass(createExpandKvHeads(ExpandKvHeadsOptions{options.tp}));
    if (options.precision == ComputePrecision::BF16)
      pm.addPass(createCastCompute(CastComputeOptions{"bf16"}));
    // On the forward: autodiff carries the policy onto the gradient GEMMs.
    if (options.fp8())
      pm.addPass(createFp8Mark(fp8MarkOptions(options)));
    BuildTrainingStepOptions step;
    step.batch = options.globalBatch;
    step.maxGradNorm = options.maxGradNorm;
    step.moeAuxLossCoef = options.moeAuxLossCoef;
    step.moeBiasUpdateRate = options.moeBiasUpdateRate;
    step.moeSeqAuxLossCoef = options.moeSeqAuxLossCoef;
    step.moeCapacityFactor = options.moeCapacityFactor;
    step.weightDecay = options.weightDecay;
    step.beta1 = options.adamBeta1;
    step.beta2 = options.adamBeta2;
    step.epsilon = options.adamEpsilon;
    step.gradientsOnly = options.mode == PipelineMode::Gradients;
    step.dataParallel = options.dataRanks();
    pm.addPass(createBuildTrainingStep(step));
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
    // The backward's ops join their forward's stages.
    if (options.pp > 1)
      pm.addPass(createPipelinePartition(partitionOptions(options)));
    // After CSE, which would merge a clone back into its forward op were
    // they alike (their loom.backward tags tell them apart afterwards), and
    // after the stages are known: a clone serves its own stage only.
    if (options.recompute != "none")
      pm.addPass(
          createRecompute(RecomputeOptions{options.recompute, options.recomputeFullLayers}));
    return;
  }
  case PipelineStep::Fp8:
    if (!options.training())
      pm.addPass(createFp8Mark(fp8MarkOptions(options)));
  {
    Fp8ExpandOptions expand;
    expand.gemmAlignment = options.fp8GemmAlignment;
    expand.weightsOnce = options.fp8WeightsOnce;
    expand.tokenRanks = options.dataRanks() * (options.sp ? options.tp : 1);
    expand.featureRanks = options.tp;
    pm.addPass(createFp8Expand(expand));
  }
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
    return;
  case PipelineStep::Schedule: {
    PipelineScheduleOptions schedule;
    schedule.pp = options.pp;
    schedule.vpp = options.vpp;
    schedule.schedule = options.schedule;
    schedule.microbatches = options.microbatches;
    schedule.scheduleFile = options.scheduleFile;
    pm.addPass(createPipelineSchedule(schedule));
    return;
  }
  case PipelineStep::PipeSplit:
    // No canonicalization after: a collective whose result one rank does
    // not read must still run there.
    pm.addPass(createPipelineSplit());
    return;
  case PipelineStep::Shard: {
    ShardAnnotateOptions shard;
    shard.tp = options.tp;
    shard.dp = options.dp;
    shard.ep = options.ep;
    shard.sp = options.sp;
    shard.zero1 = options.zero1;
    pm.addPass(createShardAnnotate(shard));
    pm.addPass(createShardingPropagation());
    pm.addPass(createSpmdPartition());
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
    // After CSE: the grouped GEMMs of one layer then share their offsets.
    if (options.ep > 1 || options.dp > 1 || options.tp > 1)
      pm.addPass(createElideGroupReductions());
    if (options.epAllToAll && (options.ep > 1 || options.dp > 1))
      pm.addPass(createGatherGroupRows());
    // The gradients' reductions over the data ranks (dp, and ep for the
    // weights it replicates).
    if (options.dataRanks() > 1 && options.dpBucketMb > 0)
      pm.addPass(createBucketReductions(BucketReductionsOptions{
          std::max<int64_t>(1, int64_t(options.dpBucketMb * 1024 * 1024)),
          options.dp > 1 ? "dp" : "ep"}));
    return;
  }
  case PipelineStep::AttentionStats:
    // After pipeline splitting and sharding: each rank's program holds the
    // forwards its backwards differentiate, and no rule sees the new ops.
    pm.addPass(createAttentionStats());
    return;
  case PipelineStep::Fuse:
    // Before grouping: a cast inside a group no longer sees its GEMM.
    if (options.widenResults)
      pm.addPass(createWidenResults());
    if (options.training())
      pm.addPass(createShareCasts());
    // After widening: it matches the f32 logits and the compute-type gradient.
    if (options.fuseLinearCrossEntropy && options.training())
      pm.addPass(createFuseLinearCrossEntropy(
          FuseLinearCrossEntropyOptions{options.linearCrossEntropyChunk}));
    if (options.foldTransposes)
      pm.addPass(createFoldTransposes());
    if (options.fuse)
      pm.addPass(createFuse());
    return;
  case PipelineStep::LowerToRt:
    // A fusion group the CUDA code generator takes stays one nn.fused call
    // (the CPU backend runs its ops one by one); any other is inlined.
    pm.addPass(createUnfuse(UnfuseOptions{/*keepGeneratable=*/true}));
    if (!options.offloadActivations.empty())
      pm.addPass(createOffloadActivations(
          OffloadActivationsOptions{options.offloadActivations, options.offloadPrefetch}));
    pm.addPass(createLowerToRt(LowerToRtOptions{options.entry}));
    pm.addPass(createFuseMatmulEpilogue());
    pm.addPass(createFuseAdamW());
    if (options.fuseSumSquares)
      pm.addPass(createFuseSumSquares());
    if (options.fuseNormWeightGrad)
      pm.addPass(createFuseNormWeightGrad());
    pm.addPass(createFuseSwiglu());
    pm.addPass(createFuseCasts());
    // After the casts are one call and the updates one: it splits the first.
    if (options.optimizerWritesCopies)
      pm.addPass(createOptimizerWritesCopies());
    // After the casts are settled: a quantized tensor's writer is the call
    // that will write it.
    if (options.fuseFp8Quantize)
      pm.addPass(createFuseFp8Quantize(FuseFp8QuantizeOptions{options.fp8WriterScales}));
    pm.addPass(createPlanMemory());
    pm.addPass(createAssignStreams());
    return;
  }
  llvm_unreachable("unknown pipeline step");
}

void buildLoomPipeline(OpPassManager &pm, const PipelineOptions &options,
                       const PipelineHooks &hooks, Phase stopAfter) {
  std::optional<PipelineStep> last = lastStepOf(stopAfter);
  if (!last)
    return;
  for (PipelineStep step : kPipelineSteps) {
    if (stepRuns(step, options))
      buildPipelineStep(pm, options, hooks, step);
    if (step == *last)
      return;
  }
}

void buildRtInputPipeline(OpPassManager &pm, bool planMemory) {
  if (planMemory)
    pm.addPass(createPlanMemory());
  pm.addPass(createAssignStreams());
}

llvm::Error verifyFp8Options(const PipelineOptions &o) {
  auto error = [](const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  auto n = [](int64_t v) { return std::to_string(v); };
  if (!o.fp8()) {
    if (o.fp8Format != "e4m3" || o.fp8Margin != 0 || o.fp8AmaxHistory != 1 ||
        !o.fp8Exclude.empty())
      return error("fp8-format, fp8-margin, fp8-amax-history and fp8-exclude need fp8=RECIPE");
    return llvm::Error::success();
  }
  const std::string &recipe = o.fp8Recipe;
  if (recipe != "tensorwise" && recipe != "tensorwise-delayed" && recipe != "rowwise" &&
      recipe != "blockwise")
    return error("fp8=" + recipe +
                 ": unknown recipe (expected tensorwise, tensorwise-delayed, rowwise or blockwise)");
  if (o.fp8Format != "e4m3" && o.fp8Format != "hybrid")
    return error("fp8-format=" + o.fp8Format + ": unknown format (expected e4m3 or hybrid)");
  if (o.fp8Margin < 0 || o.fp8Margin > 64)
    return error("fp8-margin must be in [0, 64], got " + n(o.fp8Margin));
  if (o.fp8AmaxHistory < 1)
    return error("fp8-amax-history must be at least 1, got " + n(o.fp8AmaxHistory));
  if (o.fp8AmaxHistory > 1 && recipe != "tensorwise-delayed")
    return error("fp8-amax-history=" + n(o.fp8AmaxHistory) + " needs fp8=tensorwise-delayed");
  return llvm::Error::success();
}

llvm::Error verifyPipelineOptions(const PipelineOptions &o, Phase stopAfter) {
  auto error = [](const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  auto n = [](int64_t v) { return std::to_string(v); };
  if (o.pp < 1 || o.vpp < 1)
    return error("pp and vpp must be at least 1, got pp=" + n(o.pp) + " vpp=" + n(o.vpp));
  if (o.tp < 1 || o.dp < 1 || o.ep < 1)
    return error("tp, dp and ep must be at least 1, got tp=" + n(o.tp) + " dp=" + n(o.dp) +
                 " ep=" + n(o.ep));
  if (o.stepBatch < 0 || o.globalBatch < 0 || o.microbatches < 0)
    return error("batch and microbatches must be at least 1");
  if (o.linearCrossEntropyChunk < 0)
    return error("linear-cross-entropy-chunk must be 0 (automatic) or a positive number of "
                 "rows, got " + llvm::Twine(o.linearCrossEntropyChunk));
  if (o.entry.empty())
    return error("entry must name a function");
  auto kind = pipeline::parseScheduleKind(o.schedule);
  if (!kind)
    return kind.takeError();
  if (*kind == pipeline::ScheduleKind::Custom)
    return error("schedule=custom is not generated; give one of 1f1b, interleaved, zb-h1, "
                 "dualpipe, dualpipev (or schedule-file=)");
  if (o.pp == 1 && (o.vpp != 1 || !o.ppLayout.empty() || !o.scheduleFile.empty()))
    return error("vpp, pp-layout and schedule-file need pp=2 or more");
  if (o.microbatches > 0 && !o.training())
    return error("microbatches applies to mode=train");
  if (o.pp > 1 && !o.training())
    return error("pp=" + n(o.pp) + " pipelines a training step: add mode=train");
  if (o.pp > 1 && o.microbatches == 0)
    return error("pp=" + n(o.pp) + " needs microbatches (the schedule's microbatch count)");
  if (o.pp > 1 && o.scheduleFile.empty())
    if (auto s = pipeline::generateSchedule(*kind, int(o.pp), int(o.vpp), int(o.microbatches));
        !s)
      return s.takeError();
  if (o.sp && o.tp == 1)
    return error("sp splits the sequence over the tensor-parallel ranks: it needs tp > 1");
  if (o.zero1 && o.dataRanks() == 1)
    return error("zero1 splits optimizer state over the data-parallel ranks: it needs dp > 1 "
                 "or ep > 1");
  if (o.distributed() && !o.training())
    return error("tp, dp and ep apply to mode=train");
  if (!std::isfinite(o.dpBucketMb) || o.dpBucketMb < 0 || o.dpBucketMb > 1e6)
    return error("dp-bucket-mb must be between 0 and 1e6, got " + std::to_string(o.dpBucketMb));
  struct Range {
    const char *name;
    double value, low, high;
    bool lowOpen, highOpen;
  };
  for (const Range &r : {Range{"max-grad-norm", o.maxGradNorm, 0, 1e30, false, false},
                         Range{"moe-aux-loss-coef", o.moeAuxLossCoef, 0, 1e30, false, false},
                         Range{"moe-bias-update-rate", o.moeBiasUpdateRate, 0, 1e30, false, false},
                         Range{"moe-seq-aux-loss-coef", o.moeSeqAuxLossCoef, 0, 1e30, false, false},
                         Range{"moe-capacity-factor", o.moeCapacityFactor, 0, 1e30, false, false},
                         Range{"weight-decay", o.weightDecay, 0, 1e30, false, false},
                         Range{"adam-beta1", o.adamBeta1, 0, 1, false, true},
                         Range{"adam-beta2", o.adamBeta2, 0, 1, false, true},
                         Range{"adam-epsilon", o.adamEpsilon, 0, 1, true, false}}) {
    double v = r.value;
    if (!std::isfinite(v) || v < r.low || (r.lowOpen && v == r.low) || v > r.high ||
        (r.highOpen && v == r.high))
      return error(llvm::Twine(r.name) + " must be " +
                   (r.high == 1 ? llvm::Twine("in ") + (r.lowOpen ? "(" : "[") + "0, 1" +
                                      (r.highOpen ? ")" : "]")
                                : llvm::Twine("a finite number >= 0")) +
                   ", got " + std::to_string(v));
  }
  int64_t perStep = o.dataRanks() * std::max<int64_t>(o.microbatches, 1);
  if (o.training() && o.globalBatch > 0 && o.globalBatch % perStep != 0)
    return error("batch (" + n(o.globalBatch) + ") must be a multiple of " +
                 (o.ep > 1 ? "dp x ep" : "dp") + " (" + n(o.dataRanks()) +
                 ") times microbatches (" + n(std::max<int64_t>(o.microbatches, 1)) +
                 "): each data-parallel rank runs whole microbatches");
  if (stopAfter == Phase::Train && !o.training())
    return error("compile-to=train needs mode=train");
  if (stopAfter == Phase::Pipe && o.pp == 1)
    return error("compile-to=pipe needs pp=2 or more");
  if (llvm::Error err = verifyFp8Options(o))
    return err;
  if (stopAfter == Phase::Fp8 && !o.fp8())
    return error("compile-to=fp8 needs fp8=RECIPE");
  if (stopAfter == Phase::Fused && !o.fuse)
    return error("compile-to=fused needs fuse");
  return llvm::Error::success();
}

namespace {

/// --loom-compile-pipeline's options: loom-compile's flags that shape the passes,
/// under the same names.
struct PipelineCLOptions : public PassPipelineOptions<PipelineCLOptions> {
  Option<Phase> compileTo{
      *this, "compile-to", llvm::cl::desc("stop after this phase (default: rt)"),
      llvm::cl::init(Phase::RT),
      llvm::cl::values(clEnumValN(Phase::Input, "input", "as given, no pass"),
                       clEnumValN(Phase::NN, "nn", "nn after folding, raising and rebatching"),
                       clEnumValN(Phase::Train, "train", "the training step (mode=train)"),
                       clEnumValN(Phase::Fp8, "fp8", "FP8 GEMMs, quantization explicit (fp8)"),
                       clEnumValN(Phase::Pipe, "pipe", "stages and the pipe.schedule (pp > 1)"),
                       clEnumValN(Phase::Dist, "dist", "each rank's program (tp/dp > 1)"),
                       clEnumValN(Phase::Fused, "fused", "nn.fused groups (implies fuse)"),
                       clEnumValN(Phase::RT, "rt", "rt programs, memory planned, streams"))};
  Option<PipelineMode> mode{
      *this, "mode", llvm::cl::desc("infer, train or gradients (default: infer)"),
      llvm::cl::init(PipelineMode::Infer),
      llvm::cl::values(clEnumValN(PipelineMode::Infer, "infer", "the forward"),
                       clEnumValN(PipelineMode::Train, "train", "one optimizer step"),
                       clEnumValN(PipelineMode::Gradients, "gradients",
                                  "the loss and every parameter gradient"))};
  Option<std::string> entry{*this, "entry", llvm::cl::desc("the function to compile"),
                            llvm::cl::init("main")};
  Option<bool> raise{*this, "raise", llvm::cl::desc("raise decomposed patterns (default on)"),
                     llvm::cl::init(true)};
  Option<ComputePrecision> precision{
      *this, "precision", llvm::cl::desc("f32 or bf16 (default: f32)"),
      llvm::cl::init(ComputePrecision::F32),
      llvm::cl::values(clEnumValN(ComputePrecision::F32, "f32", "f32 compute"),
                       clEnumValN(ComputePrecision::BF16, "bf16",
                                  "bf16 compute, f32 master weights"))};
  Option<int64_t> batch{*this, "batch",
                        llvm::cl::desc("the global batch (default: the model's); with "
                                       "mode=train give microbatches too"),
                        llvm::cl::init(0)};
  Option<int64_t> microbatches{*this, "microbatches",
                               llvm::cl::desc("microbatches per data-parallel rank (with batch)"),
                               llvm::cl::init(0)};
  Option<double> maxGradNorm{*this, "max-grad-norm", llvm::cl::desc("clip the gradient norm"),
                             llvm::cl::init(1.0)};
  Option<double> weightDecay{*this, "weight-decay", llvm::cl::desc("AdamW weight decay"),
                             llvm::cl::init(0.1)};
  Option<double> moeAuxLossCoef{
      *this, "moe-aux-loss-coef",
      llvm::cl::desc("the MoE softmax routers' load-balancing loss, times this (0: none)"),
      llvm::cl::init(0.0)};
  Option<double> moeCapacityFactor{
      *this, "moe-capacity-factor",
      llvm::cl::desc("MoE expert capacity as a factor of the even share (0: dropless)"),
      llvm::cl::init(0.0)};
  Option<double> moeSeqAuxLossCoef{
      *this, "moe-seq-aux-loss-coef",
      llvm::cl::desc("DeepSeek-V3's sequence-wise balance loss of every MoE router, times this "
                     "(0: none)"),
      llvm::cl::init(0.0)};
  Option<double> moeBiasUpdateRate{
      *this, "moe-bias-update-rate",
      llvm::cl::desc("DeepSeek-V3's bias update of MoE routers per step (0: none)"),
      llvm::cl::init(0.0)};
  Option<double> adamBeta1{*this, "adam-beta1", llvm::cl::desc("AdamW beta1"),
                           llvm::cl::init(0.9)};
  Option<double> adamBeta2{*this, "adam-beta2", llvm::cl::desc("AdamW beta2"),
                           llvm::cl::init(0.95)};
  Option<double> adamEpsilon{*this, "adam-epsilon", llvm::cl::desc("AdamW epsilon"),
                             llvm::cl::init(1e-8)};
  Option<int64_t> pp{*this, "pp", llvm::cl::desc("pipeline-parallel ranks"), llvm::cl::init(1)};
  Option<int64_t> vpp{*this, "vpp", llvm::cl::desc("stages per pipeline rank"),
                      llvm::cl::init(1)};
  Option<std::string> schedule{
      *this, "schedule",
      llvm::cl::desc("1f1b, interleaved, zb-h1, dualpipe or dualpipev (default: 1f1b)"),
      llvm::cl::init("1f1b")};
  Option<std::string> ppLayout{*this, "pp-layout",
                               llvm::cl::desc("layers per stage (4,4,4,4), or 'even'")};
  Option<std::string> scheduleFile{*this, "schedule-file",
                                   llvm::cl::desc("a schedule CSV instead of schedule")};
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("tensor-parallel ranks"), llvm::cl::init(1)};
  Option<int64_t> dp{*this, "dp", llvm::cl::desc("data-parallel ranks"), llvm::cl::init(1)};
  Option<int64_t> ep{*this, "ep", llvm::cl::desc("expert-parallel ranks"), llvm::cl::init(1)};
  Option<std::string> epDispatch{
      *this, "ep-dispatch",
      llvm::cl::desc("all-gather, or all-to-all (dist.gather_rows and dist.scatter_rows)"),
      llvm::cl::init("all-gather")};
  Option<bool> sp{*this, "sp", llvm::cl::desc("sequence parallelism over tp"),
                  llvm::cl::init(false)};
  Option<bool> zero1{*this, "zero1", llvm::cl::desc("ZeRO-1 over dp"), llvm::cl::init(false)};
  Option<bool> widenResults{*this, "widen-results",
                            llvm::cl::desc("fold widening casts of GEMM results into the GEMMs "
                                           "(default on)"),
                            llvm::cl::init(true)};
  Option<bool> foldTransposes{*this, "fold-transposes",
                              llvm::cl::desc("fold transposes into the ops next to them "
                                             "(default on)"),
                              llvm::cl::init(true)};
  Option<bool> fuseSumSquares{*this, "fuse-sum-squares",
                              llvm::cl::desc("the gradient norm's sums of squares as one "
                                             "multi-tensor kernel (default on)"),
                              llvm::cl::init(true)};
  Option<bool> fuseNormWeightGrad{*this, "fuse-norm-weight-grad",
                                  llvm::cl::desc("each norm's weight gradient as one kernel "
                                                 "(default on)"),
                                  llvm::cl::init(true)};
  Option<bool> optimizerWritesCopies{
      *this, "optimizer-writes-copies",
      llvm::cl::desc("the optimizer writes each weight's compute-precision copy; the step's "
                     "weight casts run only after the parameters are set (default on)"),
      llvm::cl::init(true)};
  Option<bool> fuseLinearCrossEntropy{
      *this, "fuse-linear-cross-entropy",
      llvm::cl::desc("the LM head's GEMM, the loss and their gradients as one kernel chunked "
                     "over rows (default on)"),
      llvm::cl::init(true)};
  Option<int64_t> linearCrossEntropyChunk{
      *this, "linear-cross-entropy-chunk",
      llvm::cl::desc("rows a chunk of the fused LM head and loss (0: automatic)"),
      llvm::cl::init(0)};
  Option<bool> fuse{*this, "fuse",
                    llvm::cl::desc("group fusible ops into nn.fused ops (default off)"),
                    llvm::cl::init(false)};
  Option<bool> attentionStats{
      *this, "attention-stats",
      llvm::cl::desc("a training step's attention saves its softmax statistics for its "
                     "backward, which then does not recompute the forward (default on)"),
      llvm::cl::init(true)};
  Option<std::string> fp8{*this, "fp8",
                          llvm::cl::desc("FP8 GEMMs for the linear layers: tensorwise, "
                                         "tensorwise-delayed, rowwise or blockwise")};
  Option<std::string> fp8Format{*this, "fp8-format",
                                llvm::cl::desc("e4m3, or hybrid (e5m2 gradients)"),
                                llvm::cl::init("e4m3")};
  Option<int64_t> fp8Margin{*this, "fp8-margin",
                            llvm::cl::desc("binades of headroom in FP8 scales"), llvm::cl::init(0)};
  Option<int64_t> fp8AmaxHistory{*this, "fp8-amax-history",
                                 llvm::cl::desc("steps of amax history (tensorwise-delayed)"),
                                 llvm::cl::init(1)};
  ListOption<std::string> fp8Exclude{*this, "fp8-exclude",
                                     llvm::cl::desc("parameter name globs kept out of FP8")};
  Option<std::string> recompute{
      *this, "recompute",
      llvm::cl::desc("forward values recomputed in the backward: none, selective or full "
                     "(auto needs the driver's candidate compiles: loom-compile)"),
      llvm::cl::init("none")};
  Option<std::string> offloadActivations{
      *this, "offload-activations",
      llvm::cl::desc("saved activations of these layers go to host memory between forward "
                     "and backward: all, or layer indices and ranges (0-3,6)"),
      llvm::cl::init("")};
  Option<int64_t> offloadPrefetch{
      *this, "offload-prefetch",
      llvm::cl::desc("reload an offloaded layer's activations this many layers of the "
                     "backward early (0: at their first use)"),
      llvm::cl::init(1)};
  Option<double> dpBucketMb{*this, "dp-bucket-mb",
                            llvm::cl::desc("MiB per data-parallel gradient bucket (0: none)"),
                            llvm::cl::init(25.0)};

  /// The pass-level options, or why there are none. Unlike loom-compile,
  /// the pipeline is built before the model is read: the batch given is
  /// the global batch, and a training step's microbatch count cannot be
  /// derived from the model's batch, so it is given with it.
  llvm::Expected<PipelineOptions> resolve() const {
    auto error = [](const llvm::Twine &message) {
      return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
    };
    for (const Option<int64_t> *size : {&batch, &microbatches})
      if (size->hasValue() && *size < 1)
        return error(size->getArgStr() + " must be at least 1, got " + llvm::Twine(int64_t(*size)));
    PipelineOptions o;
    o.mode = mode;
    o.entry = entry;
    o.raise = raise;
    o.precision = precision;
    o.maxGradNorm = maxGradNorm;
    o.moeAuxLossCoef = moeAuxLossCoef;
    o.moeBiasUpdateRate = moeBiasUpdateRate;
    o.moeSeqAuxLossCoef = moeSeqAuxLossCoef;
    o.moeCapacityFactor = moeCapacityFactor;
    o.weightDecay = weightDecay;
    o.adamBeta1 = adamBeta1;
    o.adamBeta2 = adamBeta2;
    o.adamEpsilon = adamEpsilon;
    o.pp = pp;
    o.vpp = vpp;
    o.schedule = schedule;
    o.ppLayout = ppLayout;
    o.scheduleFile = scheduleFile;
    o.tp = tp;
    o.dp = dp;
    o.ep = ep;
    o.epAllToAll = epDispatch == "all-to-all";
    if (epDispatch != "all-gather" && epDispatch != "all-to-all")
      return error("ep-dispatch must be all-gather or all-to-all, got '" + epDispatch + "'");
    o.sp = sp;
    o.zero1 = zero1;
    o.dpBucketMb = dpBucketMb;
    o.fuse = fuse || compileTo == Phase::Fused;
    o.widenResults = widenResults;
    o.foldTransposes = foldTransposes;
    o.attentionStats = attentionStats;
    o.fuseSumSquares = fuseSumSquares;
    o.fuseNormWeightGrad = fuseNormWeightGrad;
    o.optimizerWritesCopies = optimizerWritesCopies;
    o.fuseLinearCrossEntropy = fuseLinearCrossEntropy;
    o.linearCrossEntropyChunk = linearCrossEntropyChunk;
    o.microbatches = microbatches;
    o.fp8Recipe = fp8;
    o.fp8Format = fp8Format;
    o.fp8Margin = fp8Margin;
    o.fp8AmaxHistory = fp8AmaxHistory;
    o.fp8Exclude.assign(fp8Exclude.begin(), fp8Exclude.end());
    o.recompute = recompute;
    o.offloadActivations = offloadActivations;
    o.offloadPrefetch = offloadPrefetch;
    if (!offloadActivations.empty() && mode != PipelineMode::Train &&
        mode != PipelineMode::Gradients)
      return error("offload-activations applies to mode=train or mode=gradients");
    if (recompute != "none" && recompute != "selective" && recompute != "full")
      return error("recompute must be none, selective or full (auto is loom-compile's), got '" +
                   recompute + "'");
    if (recompute != "none" && mode == PipelineMode::Infer)
      return error("recompute applies to mode=train or mode=gradients");
    if (pp == 1 && schedule.hasValue())
      return error("schedule needs pp=2 or more");
    if (attentionStats.hasValue() && mode == PipelineMode::Infer)
      return error("attention-stats pairs a forward attention with its gradient: it applies "
                   "to mode=train or mode=gradients");
    if (dpBucketMb.hasValue() && dp * ep == 1)
      return error("dp-bucket-mb groups the data-parallel reductions: it needs dp > 1");
    for (const Option<double> *r :
         {&maxGradNorm, &weightDecay, &adamBeta1, &adamBeta2, &adamEpsilon})
      if (r->hasValue() && mode != PipelineMode::Train)
        return error(r->getArgStr() + " sets the optimizer: it applies to mode=train");
    if (!o.training()) {
      o.stepBatch = batch;
    } else if (batch > 0 || microbatches > 0) {
      if (batch == 0 || microbatches == 0)
        return error("with mode=train, give batch and microbatches together (loom-compile "
                     "derives the one missing from the model's batch; this pipeline is built "
                     "before the model is read)");
      if (batch % microbatches != 0)
        return error("batch (" + llvm::Twine(int64_t(batch)) +
                     ") must be a multiple of microbatches (" +
                     llvm::Twine(int64_t(microbatches)) + ")");
      o.globalBatch = batch;
      o.stepBatch = batch / microbatches;
    }
    if (llvm::Error err = verifyPipelineOptions(o, compileTo))
      return std::move(err);
    return o;
  }
};

} // namespace

void registerLoomPipeline(const PipelineHooks &hooks) {
  registerPassPipeline(
      "loom-compile-pipeline",
      "Loom's pipeline as loom-compile runs it, from imported nn IR to rt programs (or to "
      "compile-to=PHASE); options named as loom-compile's flags",
      [hooks](OpPassManager &pm, llvm::StringRef text,
              llvm::function_ref<LogicalResult(const llvm::Twine &)> errorHandler) {
        PipelineCLOptions cl;
        if (failed(cl.parseFromString(text)))
          return failure();
        llvm::Expected<PipelineOptions> options = cl.resolve();
        if (!options)
          return errorHandler("loom-compile-pipeline: " + llvm::toString(options.takeError()));
        buildLoomPipeline(pm, *options, hooks, cl.compileTo);
        return success();
      },
      [](llvm::function_ref<void(const mlir::detail::PassOptions &)> optHandler) {
        optHandler(PipelineCLOptions());
      });
}

} // namespace loom
