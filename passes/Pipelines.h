#ifndef LOOM_PASSES_PIPELINES_H
#define LOOM_PASSES_PIPELINES_H

// Loom's pass pipeline, from imported nn IR to planned rt programs, as a
// library (like IREE's buildIREEVMTransformPassPipeline): loom-compile runs
// it step by step, loom-opt runs it as `--loom-compile-pipeline='OPTIONS'`.

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom {

enum class PipelineMode {
  Infer,
  Train,     // one optimizer step
  Gradients, // a step returning the loss and every parameter gradient
};

enum class ComputePrecision { F32, BF16 };

/// Everything the pipeline's passes are built from: the values loom-compile's
/// flags resolve to. Batch sizes are resolved ones; loom-compile derives them
/// from its flags and the model's batch (see loom-compile's --batch).
struct PipelineOptions {
  PipelineMode mode = PipelineMode::Infer;
  std::string entry = "main";
  /// Raise decomposed patterns to nn's high-level ops.
  bool raise = true;
  ComputePrecision precision = ComputePrecision::F32;
  /// Re-infer the forward's shapes for this batch (0: keep the model's).
  int64_t stepBatch = 0;
  /// The training step's global batch (0: the forward's batch).
  int64_t globalBatch = 0;
  /// Microbatches per data-parallel rank: the pipeline schedule's count.
  int64_t microbatches = 0;
  // AdamW and clipping (training).
  double maxGradNorm = 1.0;
  /// The load-balancing loss of MoE softmax routers, times this (0: none).
  double moeAuxLossCoef = 0.0;
  /// DeepSeek-V3's bias update of MoE routers per step (0: none).
  double moeSeqAuxLossCoef = 0.0;
  double moeBiasUpdateRate = 0.0;
  /// MoE expert capacity as a factor of the even share (0: dropless).
  double moeCapacityFactor = 0.0;
  double weightDecay = 0.1;
  double adamBeta1 = 0.9;
  double adamBeta2 = 0.95;
  double adamEpsilon = 1e-8;
  // Pipeline parallelism.
  int64_t pp = 1;
  int64_t vpp = 1;
  std::string schedule = "1f1b";
  std::string ppLayout;     // "4,4,4,4", "even", or empty: balanced by FLOPs
  std::string scheduleFile; // a PyTorch pipelining CSV instead of `schedule`
  // Tensor, sequence and data parallelism.
  int64_t tp = 1;
  int64_t dp = 1;
  /// Expert parallelism: the experts split over `ep` ranks, which also
  /// split the batch (dp x ep data ranks).
  int64_t ep = 1;
  /// The dispatch of routed rows as dist.gather_rows (each row only to the
  /// ranks whose experts read it) instead of an all-gather of the tokens.
  bool epAllToAll = false;
  bool sp = false;
  bool zero1 = false;
  double dpBucketMb = 25.0; // 0: one reduction per gradient
  /// Group fusible ops into nn.fused ops (--loom-fuse) before lowering.
  bool fuse = false;
  /// Fold widening casts of GEMM results into the GEMMs (--loom-widen-results).
  bool widenResults = true;
  /// Fold transposes into the ops next to them (--loom-fold-transposes).
  bool foldTransposes = true;
  /// A training step's attention saves its softmax statistics for its
  /// backward (--loom-attention-stats), which then does not recompute the
  /// forward.
  bool attentionStats = true;
  /// The gradient norm's sums of squares run as one multi-tensor kernel per
  /// run (--loom-fuse-sum-squares).
  bool fuseSumSquares = true;
  /// A current-scaling FP8 quantization, its amaxes and scales run as one
  /// kernel (--loom-fuse-fp8-quantize).
  bool fuseFp8Quantize = true;
  /// With fuseFp8Quantize: the writer of a tensor quantized whole gives its
  /// scale (the FP8 scale epilogue).
  bool fp8WriterScales = true;
  /// Each norm's weight gradient runs as one kernel (--loom-fuse-norm-weight-grad).
  bool fuseNormWeightGrad = true;
  /// The optimizer writes each weight's compute-precision copy, and the
  /// step's weight casts run only after the parameters are set
  /// (--loom-optimizer-writes-copies).
  bool optimizerWritesCopies = true;
  /// The LM head's GEMM, the loss and their gradients run as one chunked
  /// kernel (--loom-fuse-linear-cross-entropy), chunks of this many rows
  /// (0: automatic).
  bool fuseLinearCrossEntropy = true;
  int64_t linearCrossEntropyChunk = 0;
  /// Forward values recomputed in the backward (--loom-recompute): none,
  /// selective or full.
  std::string recompute = "none";
  /// With recompute = selective: the first this many layers fully.
  int64_t recomputeFullLayers = 0;
  /// Saved activations of these layers go to host memory between forward
  /// and backward (--loom-offload-activations): "all", "0-3,6", or empty.
  std::string offloadActivations;
  /// Offloaded layers' reloads issued this many layers of the backward early.
  int64_t offloadPrefetch = 1;

  /// FP8 GEMMs for the linear layers (--loom-fp8-mark, --loom-fp8-expand):
  /// a recipe (tensorwise, tensorwise-delayed, rowwise, blockwise), or empty
  /// for none.
  std::string fp8Recipe;
  std::string fp8Format = "e4m3";
  int64_t fp8Margin = 0;
  int64_t fp8AmaxHistory = 1;
  std::vector<std::string> fp8Exclude;
  /// What the target's FP8 GEMM needs of K and N (16 on CUDA: rows of 16
  /// bytes); a GEMM that falls short stays in the compute type.
  int64_t fp8GemmAlignment = 1;
  /// A weight quantized once a step for all microbatches (--fp8-weights-once).
  bool fp8WeightsOnce = true;

  bool training() const { return mode != PipelineMode::Infer; }
  bool fp8() const { return !fp8Recipe.empty(); }
  bool distributed() const { return tp > 1 || dp > 1 || ep > 1; }
  /// The ranks that split the batch: data- and expert-parallel.
  int64_t dataRanks() const { return dp * ep; }
};

/// The IR phases, in order: each names the IR you see when you stop after it
/// (loom-compile --compile-to, loom-opt --loom-compile-pipeline='compile-to=...').
enum class Phase { Input, NN, Train, Fp8, Pipe, Dist, Fused, RT };

/// The pipeline's steps, in order. loom-compile runs each in its own pass
/// manager (reporting progress by step name) and stops or acts between them;
/// a phase ends after one of them (lastStepOf).
enum class PipelineStep {
  Raise,        // "nn": fold constants, raise, canonicalize (the frontend's)
  Precision,    // "precision": bf16 compute for inference
  Rebatch,      // "rebatch": the forward's shapes for the step's batch
  Partition,    // "partition": forward ops onto pipeline stages
  TrainingStep, // "train": loss, backward, optimizer (stages re-assigned)
  Fp8,          // "fp8": FP8 GEMMs with explicit quantization (fp8 recipe given)
  Schedule,     // "pipe": the verified pipe.schedule
  PipeSplit,    // "pipe-split": one function per pipeline rank
  Shard,        // "dist": sharding, SPMD partition, gradient buckets
  AttentionStats, // "attention-stats": forward/backward attention pairs share statistics
  Fuse,         // "fused": widened GEMM results, folded transposes; nn.fused groups (opt-in: fuse)
  LowerToRt,    // "rt": rt programs, fused, memory planned, streams assigned
};
constexpr PipelineStep kPipelineSteps[] = {
    PipelineStep::Raise,        PipelineStep::Precision, PipelineStep::Rebatch,
    PipelineStep::Partition,    PipelineStep::TrainingStep, PipelineStep::Fp8,
    PipelineStep::Schedule,
    PipelineStep::PipeSplit,    PipelineStep::Shard,     PipelineStep::AttentionStats,
    PipelineStep::Fuse,         PipelineStep::LowerToRt};

/// "nn", "precision", "rebatch", "partition", "train", "fp8", "pipe", "pipe-split",
/// "dist", "attention-stats", "fused", "rt".
llvm::StringRef stepName(PipelineStep step);

/// Whether `options` need the step (Precision: bf16 inference; Rebatch: a
/// step batch; Partition, Schedule, PipeSplit: pp > 1; TrainingStep:
/// training; Shard: tp or dp > 1; AttentionStats: training and
/// attentionStats; Fuse: fuse, widenResults or foldTransposes; the others
/// always).
bool stepRuns(PipelineStep step, const PipelineOptions &options);

/// The last step of `phase`'s IR; nullopt for Input (no step).
std::optional<PipelineStep> lastStepOf(Phase phase);

/// What the pipeline takes from layers above passes/. The nn phase after
/// import (constant folding and raising) is the frontend's
/// (frontend/raising: loom::buildRaisingPipeline); passes/ may not include
/// the frontend, so the tools hand it in, as IREE's IREEVMPipelineHooks do.
struct PipelineHooks {
  void (*buildRaising)(mlir::OpPassManager &pm, bool raise) = nullptr;
};

/// Adds one step's passes to `pm` (whether or not stepRuns says it is
/// needed: callers decide).
void buildPipelineStep(mlir::OpPassManager &pm, const PipelineOptions &options,
                       const PipelineHooks &hooks, PipelineStep step);

/// Adds every step that runs up to the end of `stopAfter`, in order: the IR
/// loom-compile prints with --compile-to=stopAfter.
void buildLoomPipeline(mlir::OpPassManager &pm, const PipelineOptions &options,
                       const PipelineHooks &hooks, Phase stopAfter = Phase::RT);

/// rt IR as input (hand-written, or another tool's per-rank programs): plan
/// memory where `planMemory`, then assign streams.
void buildRtInputPipeline(mlir::OpPassManager &pm, bool planMemory);

/// Options the passes cannot be built from, or that contradict each other
/// (impossible layouts, an ungeneratable schedule, parallelism without
/// training), and a `stopAfter` phase the options do not produce: one line,
/// naming the options as loom-opt's --loom-compile-pipeline spells them.
/// The FP8 options alone (fp8, fp8-format, ...), each error naming its
/// option.
llvm::Error verifyFp8Options(const PipelineOptions &options);
llvm::Error verifyPipelineOptions(const PipelineOptions &options, Phase stopAfter = Phase::RT);

/// Registers `--loom-compile-pipeline` (options named as loom-compile's flags; see
/// `loom-opt --help`) with MLIR's pass registry.
void registerLoomPipeline(const PipelineHooks &hooks);

} // namespace loom

#endif
