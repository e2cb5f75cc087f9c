// loom-compile: imports a model, runs Loom's passes phase by phase, and
// writes the executable (or, with --compile-to, the IR at that phase).

#include "tools/LoomVersion.h"
#include "dialects/dist/DistDialect.h"
#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNDialect.h"
#include "dialects/pipe/PipeDialect.h"
#include "dialects/rt/RtDialect.h"
#include "frontend/ModelFile.h"
#include "frontend/common/ImportOptions.h"
#include "frontend/raising/Passes.h"
#include "passes/Pipelines.h"
#include "passes/training/Layers.h"
#include "passes/lowering/ExecutableEmitter.h"
#include "runtime/executable/ExecutableListing.h"
#include "runtime/support/AtomicFile.h"
#include "runtime/support/UserFile.h"
#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/ScheduleGenerators.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/Format.h"

#include <chrono>
#include "llvm/Support/WithColor.h"

#include <cmath>

using namespace mlir;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("loom-compile options");

cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx|model.pt2|model.mlir>"),
                               cl::Required, cl::cat(category));
cl::opt<std::string> outputPath("o", cl::desc("output file (.loomx, or IR with --compile-to; '-' for stdout)"),
                                cl::value_desc("path"), cl::cat(category));

/// The phases, in order. Each names the IR you see when you stop after it.
enum class Phase { Input, NN, Train, Fp8, Pipe, Dist, Fused, RT, Executable };
cl::opt<Phase> compileTo(
    "compile-to", cl::desc("stop after a phase and print its IR"),
    cl::values(clEnumValN(Phase::Input, "input", "as imported, before any pass"),
               clEnumValN(Phase::NN, "nn", "nn after folding and raising (the model, one device)"),
               clEnumValN(Phase::Train, "train", "the training step: loss, backward, optimizer (--mode=train)"),
               clEnumValN(Phase::Fp8, "fp8", "the program with its FP8 GEMMs and their quantization explicit (--fp8)"),
               clEnumValN(Phase::Pipe, "pipe", "the training step with every op on a pipeline stage, and the verified pipe.schedule (--pp)"),
               clEnumValN(Phase::Dist, "dist", "the program each rank runs: local shards and dist collectives (--tp/--dp)"),
               clEnumValN(Phase::Fused, "fused", "the program with its fusion groups as nn.fused ops, after the training step (implies --fuse)"),
               clEnumValN(Phase::RT, "rt", "rt programs: buffers planned, streams and events assigned"),
               clEnumValN(Phase::Executable, "executable", "the serialized executable (default)")),
    cl::init(Phase::Executable), cl::cat(category));
cl::opt<std::string> mode("mode",
                          cl::desc("infer, train, or gradients (a step that returns the loss and "
                                   "every parameter gradient, for checking them); default: infer"),
                          cl::init("infer"),
                          cl::cat(category));
cl::opt<std::string> target("target", cl::desc("cpu or cuda (the executable runs on either backend; default: cpu)"),
                            cl::init("cpu"), cl::cat(category));
cl::opt<std::string> entry("entry", cl::desc("the function to compile (default: main)"),
                           cl::init("main"), cl::cat(category));
cl::opt<bool> raise("raise",
                    cl::desc("raise decomposed patterns (RMSNorm, GELU, RoPE, attention, ...) "
                             "to nn's high-level ops (default on; --raise=false keeps them)"),
                    cl::init(true), cl::cat(category));
cl::opt<bool> embedWeights(
    "embed-weights",
    cl::desc("carry the model's weights in the executable (default); with "
             "--embed-weights=false parameters start from a seeded init and "
             "loom-run --weights supplies their values (for large models)"),
    cl::init(true), cl::cat(category));
cl::opt<int64_t> batch("batch",
                       cl::desc("the global batch (sequences per step; default: the model's "
                                "batch). Each data-parallel rank runs whole microbatches of "
                                "batch / (dp * microbatches) sequences; the model's batch "
                                "dimension, fixed or symbolic, is re-inferred for it"),
                       cl::init(0), cl::cat(category));
cl::opt<int64_t> microbatches("microbatches",
                              cl::desc("microbatches per data-parallel rank (gradient "
                                       "accumulation); default: batch / (dp * the model's "
                                       "batch) when that divides, else 1"),
                              cl::init(0), cl::cat(category));
cl::opt<std::string> precision("precision",
                              cl::desc("f32, or bf16 (compute in bf16 with f32 master weights); default: f32"),
                              cl::init("f32"), cl::cat(category));
cl::opt<double> maxGradNorm("max-grad-norm", cl::desc("clip the global gradient norm (default: 1; 0: off)"),
                            cl::init(1.0), cl::cat(category));
cl::opt<double> moeAuxLossCoef(
    "moe-aux-loss-coef",
    cl::desc("add this times the load-balancing loss of the mixture-of-experts softmax routers "
             "(Switch Transformer, Mixtral: experts x the sum over experts of the fraction of "
             "choices and the mean probability, over every router's tokens) to the loss "
             "(default: 0, none)"),
    cl::init(0.0), cl::cat(category));
cl::opt<double> moeSeqAuxLossCoef(
    "moe-seq-aux-loss-coef",
    cl::desc("add this times DeepSeek-V3's complementary sequence-wise balance loss to the loss: "
             "for every mixture-of-experts router (softmax or sigmoid) and each sequence, the sum "
             "over experts of f x P, f = experts / (k x tokens) x the expert's choices in the "
             "sequence, P = the mean of its affinities normalized over the experts; the mean over "
             "sequences, summed over layers (default: 0, none; DeepSeek-V3 used 0.0001)"),
    cl::init(0.0), cl::cat(category));
cl::opt<double> moeBiasUpdateRate(
    "moe-bias-update-rate",
    cl::desc("DeepSeek-V3's auxiliary-loss-free balancing: after each step, every MoE router's "
             "correction bias (a buffer added to its scores before the top-k) moves by this "
             "towards the experts that received fewer tokens than the mean, away from those "
             "that received more (default: 0, none; DeepSeek-V3 used 0.001)"),
    cl::init(0.0), cl::cat(category));
cl::opt<double> moeCapacityFactor(
    "moe-capacity-factor",
    cl::desc("mixture of experts: each expert takes at most ceil(F x a microbatch's choices / "
             "experts) of them, in token order; the rest are dropped (that expert's output for "
             "them is zero) and counted per layer in --metrics (moe_dropped_tokens) (default: "
             "0, dropless)"),
    cl::init(0.0), cl::cat(category));
cl::opt<double> weightDecay("weight-decay", cl::desc("AdamW weight decay on matrices (default: 0.1)"),
                            cl::init(0.1), cl::cat(category));
cl::opt<double> adamBeta1("adam-beta1", cl::desc("AdamW beta1 (default: 0.9)"), cl::init(0.9), cl::cat(category));
cl::opt<double> adamBeta2("adam-beta2", cl::desc("AdamW beta2 (default: 0.95)"), cl::init(0.95), cl::cat(category));
cl::opt<double> adamEpsilon("adam-epsilon", cl::desc("AdamW epsilon (default: 1e-8)"), cl::init(1e-8),
                            cl::cat(category));
cl::opt<int64_t> seq("seq", cl::desc("the sequence length: fixes a symbolic sequence dimension (default: the "
                              "model's, or its export example's)"),
                     cl::init(0), cl::cat(category));
cl::opt<int64_t> pp("pp", cl::desc("pipeline-parallel ranks, stages cut by layer (default: 1)"), cl::init(1),
                    cl::cat(category));
cl::opt<int64_t> vpp("vpp", cl::desc("stages per pipeline rank, --schedule=interleaved (default: 1)"),
                     cl::init(1), cl::cat(category));
cl::opt<std::string> schedule("schedule",
                              cl::desc("pipeline schedule: 1f1b, interleaved, zb-h1, dualpipe or "
                                       "dualpipev (default: 1f1b)"),
                              cl::init("1f1b"), cl::cat(category));
cl::opt<std::string> ppLayout("pp-layout",
                              cl::desc("layers per pipeline stage (4,4,4,4), or 'even' (equal "
                                       "counts, padded); default: balanced by FLOPs"),
                              cl::init(""), cl::cat(category));
cl::opt<std::string> offloadActivations(
    "offload-activations",
    cl::desc("saved activations of these transformer layers go to host memory after their "
             "last forward use and come back before their first backward use, on the "
             "host-copy stream: all, layer indices and ranges (0-3,6), or auto (the first "
             "layers, as few as fit --memory-budget)"),
    cl::value_desc("layers"), cl::init(""), cl::cat(category));
cl::opt<int> offloadPrefetch(
    "offload-prefetch",
    cl::desc("with --offload-activations: bring a layer's activations back this many layers "
             "of the backward before their use, so the copies overlap those layers' compute; "
             "each layer ahead keeps one more layer's activations on the device (default 1; "
             "0: at their first use)"),
    cl::init(1), cl::cat(category));
cl::opt<bool> memoryReport(
    "memory-report",
    cl::desc("after writing the executable, print each rank's memory by what it holds, as "
             "loom-inspect does: parameters by role, the scratch peak by category"),
    cl::init(false), cl::cat(category));
cl::opt<std::string> scheduleCsv("schedule-csv",
                                 cl::desc("also write the pipeline schedule as PyTorch "
                                          "pipelining's CSV (one row per rank)"),
                                 cl::value_desc("path"), cl::init(""), cl::cat(category));
cl::opt<std::string> scheduleFile("schedule-file",
                                  cl::desc("run the pipeline schedule in this CSV (PyTorch "
                                           "pipelining's format, verified) instead of --schedule"),
                                  cl::value_desc("path"), cl::init(""), cl::cat(category));
cl::opt<int64_t> tensorParallel("tp", cl::desc("tensor-parallel ranks, Megatron column/row split (default: 1)"),
                                cl::init(1), cl::cat(category));
cl::opt<int64_t> dataParallel("dp", cl::desc("data-parallel ranks, the global batch split along dim 0 (default: 1)"),
                              cl::init(1), cl::cat(category));
cl::opt<int64_t> expertParallel(
    "ep",
    cl::desc("expert-parallel ranks: each mixture-of-experts layer's experts split over them "
             "(each rank holds experts/ep and computes their rows of every token); they split "
             "the batch as data-parallel ranks do, so there are dp x ep x tp x pp ranks "
             "(default: 1)"),
    cl::init(1), cl::cat(category));
cl::opt<std::string> epDispatch(
    "ep-dispatch",
    cl::desc("how a mixture-of-experts layer's tokens reach the ranks of their experts: "
             "all-gather (every token to every rank of the group; the default) or all-to-all "
             "(each routed row only to the rank whose experts read it and back, "
             "dist.gather_rows and dist.scatter_rows; on GPUs the step then runs uncaptured, "
             "its row lists read on the host)"),
    cl::init("all-gather"), cl::cat(category));
cl::opt<bool> sequenceParallel("sp", cl::desc("sequence parallelism over the tensor-parallel ranks (default off)"),
                               cl::init(false), cl::cat(category));
cl::opt<bool> zero1("zero1", cl::desc("ZeRO-1: optimizer state and updates split over the data-parallel ranks "
                             "(default off)"),
                    cl::init(false), cl::cat(category));
cl::opt<double> dpBucketMb(
    "dp-bucket-mb",
    cl::desc("group the data-parallel gradient reductions into buckets of about this many "
             "MiB, each one collective (as PyTorch DDP's bucket_cap_mb; default: 25; 0: one per "
             "gradient)"),
    cl::init(25.0), cl::cat(category));
cl::opt<bool> fuse("fuse",
                   cl::desc("group chains of elementwise, broadcast, cast and row-reduction ops "
                            "into nn.fused ops (--compile-to=fused prints them; the CPU backend "
                            "runs their ops one by one; default off)"),
                   cl::init(false), cl::cat(category));
cl::opt<bool> fuseSumSquares(
    "fuse-sum-squares",
    cl::desc("compute the gradient norm's sums of squares with one multi-tensor kernel, each "
             "gradient read once (default on; --fuse-sum-squares=false: a square, a row sum "
             "and a sum per gradient)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> fp8WriterScales(
    "fp8-writer-scales",
    cl::desc("with --fuse-fp8-quantize, let the kernel that writes a tensor quantized whole "
             "(one scale) give the scale as it writes, so the amax does not read the tensor "
             "again (default on)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> fuseFp8Quantize(
    "fuse-fp8-quantize",
    cl::desc("with --fp8's current-scaling recipes, quantize each GEMM operand, its transposed "
             "copy and their scales in one kernel (default on; --fuse-fp8-quantize=false: "
             "amax, scale and quantize kernels one by one)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> optimizerWritesCopies(
    "optimizer-writes-copies",
    cl::desc("the optimizer writes each weight's compute-precision (bf16) copy in the same "
             "kernel, so a step casts no master weight; the casts run only in the first step "
             "after the weights are set (default on; --optimizer-writes-copies=false: a cast "
             "of every weight each step)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> fuseNormWeightGrad(
    "fuse-norm-weight-grad",
    cl::desc("compute each norm's weight gradient with one kernel reading x and dy once "
             "(default on; --fuse-norm-weight-grad=false: the norm again, a product and a row "
             "sum)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> fuseLinearCrossEntropy(
    "fuse-linear-cross-entropy",
    cl::desc("run the LM head's GEMM, the cross-entropy and their gradients as one kernel, "
             "chunk by chunk of tokens, so the [tokens, vocab] logits never exist whole "
             "(default on; --fuse-linear-cross-entropy=false: logits, loss and gradients one "
             "op at a time)"),
    cl::init(true), cl::cat(category));
cl::opt<int64_t> linearCrossEntropyChunk(
    "linear-cross-entropy-chunk",
    cl::desc("tokens a chunk of the fused LM head and loss (default 0: about 1 GiB of logits "
             "and gradient, at least 2048)"),
    cl::init(0), cl::cat(category));
cl::opt<bool> widenResults(
    "widen-results",
    cl::desc("write a GEMM's result in f32 where the program casts it to f32 (weight gradients "
             "and logits in bf16 training): no rounding to bf16, no cast kernel (default on)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> foldTransposes(
    "fold-transposes",
    cl::desc("let ops read or write a transposed layout themselves where they can (rope "
             "writes attention's [B, H, S, D] from the projections' [B, S, H, D]), so the "
             "transposes never run (default on)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> attentionStats(
    "attention-stats",
    cl::desc("in a training step, each attention saves its softmax statistics (row "
             "logsumexp) for its backward, which then does not run the forward again "
             "(default on; --attention-stats=false recomputes)"),
    cl::init(true), cl::cat(category));
cl::opt<std::string> recompute(
    "recompute",
    cl::desc("in a training step, recompute forward values in the backward instead of keeping "
             "them: none (default); selective (activations, norms and other cheap ops whose "
             "inputs are kept anyway); full (keep only each layer's input, recompute the "
             "layer); auto (the least that fits --memory-budget: none, selective, then full "
             "recompute of more and more layers, the choice printed). Losses and gradients "
             "are unchanged"),
    cl::value_desc("none|selective|full|auto"), cl::init("none"), cl::cat(category));
cl::opt<double> memoryBudget(
    "memory-budget",
    cl::desc("GiB one rank may use, for --recompute=auto: its arenas (weights, optimizer "
             "state, activations, gradients) plus a reserve for the runtime (1 GiB on cuda: "
             "context, library workspaces, NCCL). Default on cuda: 72 (an 80 GB H100 less "
             "10%); needed on cpu"),
    cl::value_desc("GiB"), cl::init(0), cl::cat(category));
cl::opt<std::string> fp8(
    "fp8",
    cl::desc("run the linear layers' GEMMs (forward, data and weight gradients) in FP8: "
             "tensorwise (one scale per tensor from this step's amax), tensorwise-delayed "
             "(from an amax history), rowwise, or blockwise (1x128 activation tiles, 128x128 "
             "weight blocks); --compile-to=fp8 shows the casts and scales"),
    cl::value_desc("RECIPE"), cl::cat(category));
cl::opt<std::string> fp8Format("fp8-format",
                               cl::desc("e4m3 for every FP8 operand (default), or hybrid: e5m2 "
                                        "for gradients"),
                               cl::init("e4m3"), cl::cat(category));
cl::opt<int64_t> fp8Margin("fp8-margin",
                           cl::desc("binades of headroom below the FP8 format's largest value "
                                    "in each scale (default 0)"),
                           cl::init(0), cl::cat(category));
cl::opt<int64_t> fp8AmaxHistory("fp8-amax-history",
                                cl::desc("steps of amax history a tensorwise-delayed scale "
                                         "takes the maximum of (default 1)"),
                                cl::init(1), cl::cat(category));
cl::list<std::string> fp8Exclude(
    "fp8-exclude",
    cl::desc("keep the GEMMs of parameters whose names match these globs (comma-separated, "
             "* and ?) in the compute type; the embedding and the LM head always are"),
    cl::value_desc("PATTERN,..."), cl::CommaSeparated, cl::cat(category));
cl::opt<bool> fp8WeightsOnce(
    "fp8-weights-once",
    cl::desc("quantize each weight once a step for all microbatches, not once a microbatch "
             "(default on; current-scaling recipes, no pipeline)"),
    cl::init(true), cl::cat(category));
cl::opt<bool> fp8Emulate("fp8-emulate",
                         cl::desc("allow --fp8 for --target=cpu: the CPU backend emulates FP8 "
                                  "exactly (values on the FP8 grid, f32 accumulation), slowly"),
                         cl::init(false), cl::cat(category));
cl::list<std::string> dims("dim", cl::desc("fixes the symbolic dimension NAME to VALUE"),
                           cl::value_desc("NAME=VALUE"), cl::cat(category));

/// Exits after a failure an MLIR diagnostic (file:line:col: error: ...)
/// has already described in one line.
[[noreturn]] void failDiagnosed() { std::exit(1); }

[[noreturn]] void fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "loom-compile") << message << "\n";
  std::exit(1);
}

/// An output file's path, checked before any work (runtime/support/UserFile.h).
void checkOutputFile(const std::string &path, const char *option) {
  if (llvm::Error err = loom::checkOutputPath(path, option))
    fail(llvm::toString(std::move(err)));
}

/// Flags as given, recorded in the executable's metadata.
std::string commandLine(int argc, char **argv) {
  std::string s;
  for (int i = 1; i < argc; ++i) {
    if (i > 1)
      s += ' ';
    s += argv[i];
  }
  return s;
}

} // namespace

/// Bytes for messages: GiB, MiB or KiB.
std::string gib(double bytes) {
  if (bytes >= double(1 << 30))
    return llvm::formatv("{0:f2} GiB", bytes / double(1 << 30)).str();
  if (bytes >= double(1 << 20))
    return llvm::formatv("{0:f1} MiB", bytes / double(1 << 20)).str();
  return llvm::formatv("{0:f1} KiB", bytes / 1024.0).str();
}

/// The largest rank's device arenas (persistent and scratch; a host arena
/// is not the device's) when the rest of the step, from the training step
/// to rt, is compiled on a copy of `module` with `candidate`.
double deviceArenas(ModuleOp module, const loom::PipelineOptions &candidate,
                    const loom::PipelineHooks &hooks) {
  OwningOpRef<ModuleOp> copy = module.clone();
  for (loom::PipelineStep step : loom::kPipelineSteps) {
    if (int(step) < int(loom::PipelineStep::TrainingStep))
      continue;
    if (step != loom::PipelineStep::LowerToRt && !loom::stepRuns(step, candidate))
      continue;
    PassManager pm(module.getContext());
    loom::buildPipelineStep(pm, candidate, hooks, step);
    if (failed(pm.run(*copy)))
      failDiagnosed();
  }
  double bytes = 0;
  for (auto program : copy->getOps<loom::rt::ProgramOp>())
    if (std::optional<llvm::ArrayRef<int64_t>> sizes = program.getArenaSizes())
      bytes = std::max(bytes, double((*sizes)[0] + (*sizes)[1]));
  return bytes;
}

/// The budget of --recompute=auto and --offload-activations=auto, and the
/// runtime's reserve on a GPU (its context, workspaces, kernel images).
std::pair<double, double> memoryBudgetFor(llvm::StringRef flag) {
  const bool cuda = target == "cuda";
  if (!cuda && !memoryBudget.getNumOccurrences())
    fail(flag + " needs --memory-budget=GiB on --target=cpu");
  return {(memoryBudget > 0 ? double(memoryBudget) : 72.0) * double(1 << 30),
          cuda ? double(1 << 30) : 0.0};
}

/// --offload-activations=auto: the least layers offloaded (the first K,
/// found by bisection) whose largest rank's device arenas fit
/// --memory-budget. Prints each candidate and the choice.
void chooseOffload(ModuleOp module, loom::PipelineOptions &options,
                   const loom::PipelineHooks &hooks) {
  auto [budget, reserve] = memoryBudgetFor("--offload-activations=auto");
  auto forward = module.lookupSymbol<func::FuncOp>(options.entry);
  if (!forward)
    fail("--offload-activations=auto: no function @" + options.entry);
  FailureOr<loom::LayerAssignment> layers = loom::assignLayers(forward, "offload");
  if (failed(layers))
    failDiagnosed();
  const int64_t numLayers = layers->numLayers;
  auto spec = [](int64_t k) {
    return k == 0 ? std::string() : k == 1 ? std::string("0") : "0-" + std::to_string(k - 1);
  };
  auto peak = [&](int64_t k) {
    loom::PipelineOptions candidate = options;
    candidate.offloadActivations = spec(k);
    double bytes = deviceArenas(module, candidate, hooks) + reserve;
    llvm::errs() << "loom-compile: --offload-activations=auto: "
                 << (k == 0 ? std::string("none")
                            : "the first " + std::to_string(k) + " of " +
                                  std::to_string(numLayers) + " layers")
                 << ": " << gib(bytes) << " per rank\n";
    return bytes;
  };
  double none = peak(0);
  int64_t chosen = 0;
  double fits = none;
  if (none > budget) {
    double all = peak(numLayers);
    if (all > budget)
      fail("--offload-activations=auto: offloading every layer's activations still needs " +
           gib(all) + " per rank, beyond the --memory-budget of " + gib(budget) +
           "; --recompute, a smaller --batch or more --microbatches need less");
    int64_t lo = 1, hi = numLayers;
    fits = all;
    while (lo < hi) {
      int64_t mid = (lo + hi) / 2;
      double bytes = peak(mid);
      if (bytes <= budget) {
        hi = mid;
        fits = bytes;
      } else {
        lo = mid + 1;
      }
    }
    chosen = hi;
  }
  options.offloadActivations = spec(chosen);
  llvm::errs() << "loom-compile: --offload-activations=auto: "
               << (chosen == 0 ? std::string("no offload")
                               : "the first " + std::to_string(chosen) + " of " +
                                     std::to_string(numLayers) + " layers' activations (" +
                                     options.offloadActivations + ")")
               << ": " << gib(fits) << " per rank (device arenas"
               << (reserve > 0 ? " and a 1 GiB runtime reserve" : "") << ") within the budget of "
               << gib(budget) << "\n";
}

/// --recompute=auto: compiles the rest of the step (a copy of `module`,
/// from the training step to rt) for each candidate, least recompute
/// first, and keeps the first whose largest rank fits --memory-budget:
/// none, selective, then selective with the first K layers recomputed
/// fully (the least K, found by bisection). Prints the choice.
void chooseRecompute(ModuleOp module, loom::PipelineOptions &options,
                     const loom::PipelineHooks &hooks) {
  auto [budget, reserve] = memoryBudgetFor("--recompute=auto");
  auto forward = module.lookupSymbol<func::FuncOp>(options.entry);
  if (!forward)
    fail("--recompute=auto: no function @" + options.entry);
  FailureOr<loom::LayerAssignment> layers = loom::assignLayers(forward, "recompute");
  if (failed(layers))
    failDiagnosed();
  const int64_t numLayers = layers->numLayers;
  // The largest rank's arenas with this recompute.
  auto peak = [&](llvm::StringRef mode, int64_t fullLayers) -> double {
    loom::PipelineOptions candidate = options;
    candidate.recompute = mode.str();
    candidate.recomputeFullLayers = fullLayers;
    double bytes = deviceArenas(module, candidate, hooks) + reserve;
    // Each candidate is a compile of the step: say what each gave.
    llvm::errs() << "loom-compile: --recompute=auto: " << mode;
    if (fullLayers == 1)
      llvm::errs() << ", the first layer fully";
    else if (fullLayers > 1)
      llvm::errs() << ", the first " << fullLayers << " layers fully";
    llvm::errs() << ": " << gib(bytes) << " per rank\n";
    return bytes;
  };
  auto choose = [&](llvm::StringRef mode, int64_t fullLayers, double bytes,
                    llvm::StringRef what) {
    options.recompute = mode.str();
    options.recomputeFullLayers = fullLayers;
    llvm::errs() << "loom-compile: --recompute=auto: " << what << ": " << gib(bytes)
                 << " per rank (arenas" << (reserve > 0 ? " and a 1 GiB runtime reserve" : "")
                 << ") within the budget of " << gib(budget) << "\n";
  };
  double none = peak("none", 0);
  if (none <= budget)
    return choose("none", 0, none, "no recompute");
  double selective = peak("selective", 0);
  if (selective <= budget)
    return choose("selective", 0, selective,
                  llvm::formatv("selective (none would need {0})", gib(none)).str());
  // Selective with the first K layers fully recomputed: the least K that
  // fits, by bisection when recomputing all of them fits. More recompute is
  // not always less memory (the clones' buffers in the backward), so
  // otherwise the first few K are tried one by one.
  int64_t hi = numLayers;
  double fits = peak("selective", numLayers);
  if (fits <= budget) {
    int64_t lo = 1; // the least K that fits lies in [lo, hi]
    while (lo < hi) {
      int64_t mid = (lo + hi) / 2;
      double bytes = peak("selective", mid);
      if (bytes <= budget) {
        hi = mid;
        fits = bytes;
      } else {
        lo = mid + 1;
      }
    }
  } else {
    double least = std::min(selective, fits);
    hi = 0;
    for (int64_t k = 1; k < numLayers && k <= 8 && hi == 0; ++k) {
      double bytes = peak("selective", k);
      least = std::min(least, bytes);
      if (bytes <= budget) {
        hi = k;
        fits = bytes;
      }
    }
    if (hi == 0)
      fail("--recompute=auto: no recompute fits the --memory-budget of " + gib(budget) +
           ": the least a rank needs is " + gib(least) + " (none: " + gib(none) +
           "); a smaller --batch, more --microbatches or more --pp ranks need less");
  }
  choose("selective", hi, fits,
         llvm::formatv("full recompute of the first {0} of {1} layers, selective in the rest "
                       "(selective alone would need {2})",
                       hi, numLayers, gib(selective))
             .str());
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  loom::setVersionPrinter();
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "loom-compile: compile a model (.pt2, .onnx or nn IR in .mlir) into a Loom executable\n\n"
      "  loom-compile model.pt2 -o model.loomx\n"
      "  loom-compile model.pt2 --mode=train --batch 16 --microbatches 4 -o train.loomx\n"
      "  loom-compile model.mlir --compile-to=rt\n"
      "  loom-compile model.pt2 --mode=train --compile-to=fused   (the fusion groups)\n\n"
      "From a Hugging Face transformers model: scripts/export-hf.py exports it (a .pt2\n"
      "with a dynamic batch, weights as safetensors for loom-run --weights); the model\n"
      "families that import, and how to check them against PyTorch: docs/models.md\n");

  if (mode != "infer" && mode != "train" && mode != "gradients")
    fail("--mode must be 'infer', 'train' or 'gradients', got '" + mode + "'");
  bool training = mode == "train" || mode == "gradients";
  if (target != "cpu" && target != "cuda")
    fail("--target must be 'cpu' or 'cuda', got '" + target + "'");
  if (compileTo == Phase::Executable && outputPath.empty())
    fail("no output file: pass -o OUT.loomx (or --compile-to=PHASE to print IR)");

  checkOutputFile(outputPath, "-o");
  checkOutputFile(scheduleCsv, "--schedule-csv");

  loom::ImportOptions importOptions;
  importOptions.embedWeights = embedWeights;
  // Given, a size must be one: 0 is no batch, no microbatch, no sequence.
  for (cl::opt<int64_t> *size : {&batch, &microbatches, &seq})
    if (size->getNumOccurrences() && *size < 1)
      fail("--" + size->ArgStr + " must be at least 1, got " + llvm::Twine(int64_t(*size)));
  if (microbatches > 0 && !training)
    fail("--microbatches applies to --mode=train");
  if (linearCrossEntropyChunk < 0)
    fail("--linear-cross-entropy-chunk must be 0 (automatic) or a positive number of rows, got " +
         llvm::Twine(int64_t(linearCrossEntropyChunk)));
  if (recompute != "none" && recompute != "selective" && recompute != "full" &&
      recompute != "auto")
    fail("--recompute must be none, selective, full or auto, got '" + recompute + "'");
  if (memoryBudget.getNumOccurrences() && recompute != "auto" && offloadActivations != "auto")
    fail("--memory-budget is the budget of --recompute=auto and --offload-activations=auto");
  if (recompute == "auto" && offloadActivations == "auto")
    fail("--recompute=auto and --offload-activations=auto: give one of them auto, the other a "
         "value");
  if (memoryBudget.getNumOccurrences() && (!(memoryBudget > 0) || !std::isfinite(memoryBudget)))
    fail("--memory-budget must be a positive number of GiB");
  if (recompute.getNumOccurrences() && recompute != "none" && !training)
    fail("--recompute=" + recompute + " recomputes forward values in the backward: it applies "
         "to --mode=train or --mode=gradients");
  if (offloadActivations.getNumOccurrences() && !training)
    fail("--offload-activations moves saved activations between forward and backward: it "
         "applies to --mode=train or --mode=gradients");
  if (offloadActivations.getNumOccurrences() && offloadActivations.empty())
    fail("--offload-activations needs layers: all, or layer indices and ranges (0-3,6)");
  if (offloadPrefetch.getNumOccurrences() && offloadPrefetch < 0)
    fail("--offload-prefetch must be 0 or more layers, got " + llvm::Twine(int(offloadPrefetch)));
  if (offloadPrefetch.getNumOccurrences() && !offloadActivations.getNumOccurrences())
    fail("--offload-prefetch applies with --offload-activations");
  if (attentionStats.getNumOccurrences() && !training)
    fail("--attention-stats pairs a forward attention with its gradient: it applies to "
         "--mode=train or --mode=gradients");
  if (microbatches > 0 && batch > 0 && batch % microbatches != 0)
    fail("--batch (" + llvm::Twine(int64_t(batch)) + ") must be a multiple of --microbatches (" +
         llvm::Twine(int64_t(microbatches)) + ")");
  if (precision != "f32" && precision != "bf16")
    fail("--precision must be f32 or bf16, got '" + precision + "'");
  if (pp < 1 || vpp < 1)
    fail("--pp and --vpp must be at least 1");
  if (auto kind = loom::pipeline::parseScheduleKind(schedule); !kind ||
                                                               *kind == loom::pipeline::ScheduleKind::Custom)
    fail(kind ? "--schedule=custom is not generated; give one of 1f1b, interleaved, zb-h1, "
                "dualpipe, dualpipev"
              : llvm::toString(kind.takeError()));
  if (pp == 1 && (vpp != 1 || schedule.getNumOccurrences() || !ppLayout.empty() ||
                  !scheduleCsv.empty() || !scheduleFile.empty()))
    fail("--vpp, --schedule, --schedule-file, --pp-layout and --schedule-csv need --pp 2 or more");
  if (!scheduleFile.empty()) {
    auto s = loom::pipeline::readScheduleFile(scheduleFile);
    if (!s)
      fail(llvm::toString(s.takeError()));
    if (s->numRanks != pp)
      fail("--schedule-file '" + scheduleFile + "' has " + llvm::Twine(s->numRanks) +
           " ranks, --pp is " + llvm::Twine(int64_t(pp)));
    if (microbatches == 0)
      microbatches = s->numMicrobatches;
    else if (microbatches != s->numMicrobatches)
      fail("--schedule-file '" + scheduleFile + "' runs " + llvm::Twine(s->numMicrobatches) +
           " microbatches, --microbatches is " + llvm::Twine(int64_t(microbatches)));
    if (batch > 0 && batch % microbatches != 0)
      fail("--batch (" + llvm::Twine(int64_t(batch)) + ") must be a multiple of the schedule's " +
           llvm::Twine(int64_t(microbatches)) + " microbatches");
  }
  if (pp > 1 && !training)
    fail("--pp " + llvm::Twine(int64_t(pp)) + " pipelines a training step: add --mode=train");
  if (pp > 1 && microbatches == 0)
    fail("--pp " + llvm::Twine(int64_t(pp)) + " needs --microbatches (the schedule's microbatch count)");
  if (pp > 1 && scheduleFile.empty()) {
    // Bad schedule combinations fail here, before any model work.
    auto kind = loom::pipeline::parseScheduleKind(schedule);
    auto s = loom::pipeline::generateSchedule(*kind, int(pp), int(vpp), int(microbatches));
    if (!s)
      fail(llvm::toString(s.takeError()));
  }
  if (compileTo == Phase::Pipe && pp == 1)
    fail("--compile-to=pipe needs --pp 2 or more");
  if (compileTo == Phase::Train && !training)
    fail("--compile-to=train needs --mode=train");
  if (fp8.getNumOccurrences() == 0 &&
      (fp8Format.getNumOccurrences() || fp8Margin.getNumOccurrences() ||
       fp8AmaxHistory.getNumOccurrences() || fp8Exclude.getNumOccurrences() ||
       fp8Emulate.getNumOccurrences() || fp8WeightsOnce.getNumOccurrences()))
    fail("--fp8-format, --fp8-margin, --fp8-amax-history, --fp8-exclude, --fp8-weights-once "
         "and --fp8-emulate need --fp8=RECIPE");
  if (compileTo == Phase::Fp8 && fp8.empty())
    fail("--compile-to=fp8 needs --fp8=RECIPE");
  if (!fp8.empty() && target == "cpu" && !fp8Emulate)
    fail("--fp8=" + fp8 + ": the cpu target has no FP8 GEMM; pass --target=cuda (Hopper or "
         "newer), or --fp8-emulate to emulate FP8 on the CPU");
  if (tensorParallel < 1 || dataParallel < 1 || expertParallel < 1)
    fail("--tp, --dp and --ep must be at least 1, got --tp " +
         llvm::Twine(int64_t(tensorParallel)) + " --dp " + llvm::Twine(int64_t(dataParallel)) +
         " --ep " + llvm::Twine(int64_t(expertParallel)));
  // The ranks that split the batch: data- and expert-parallel.
  const int64_t dataRanks = int64_t(dataParallel) * int64_t(expertParallel);
  const std::string dataFlag = expertParallel > 1 ? "--dp x --ep" : "--dp";
  if (epDispatch != "all-gather" && epDispatch != "all-to-all")
    fail("--ep-dispatch must be all-gather or all-to-all, got '" + epDispatch + "'");
  if (sequenceParallel && tensorParallel == 1)
    fail("--sp splits the sequence over the tensor-parallel ranks: it needs --tp > 1");
  if (!std::isfinite(double(dpBucketMb)) || dpBucketMb < 0 || dpBucketMb > 1e6)
    fail("--dp-bucket-mb must be between 0 and 1e6, got " + std::to_string(dpBucketMb));
  if (dpBucketMb.getNumOccurrences() && dataRanks == 1)
    fail("--dp-bucket-mb groups the data-parallel reductions: it needs --dp > 1");
  // The optimizer's settings: finite, in range, and for a training step.
  struct Range {
    cl::opt<double> *option;
    double low, high;
    bool lowOpen, highOpen;
  };
  for (const Range &r : {Range{&maxGradNorm, 0, 1e30, false, false},
                         Range{&moeAuxLossCoef, 0, 1e30, false, false},
                         Range{&moeBiasUpdateRate, 0, 1e30, false, false},
                         Range{&moeSeqAuxLossCoef, 0, 1e30, false, false},
                         Range{&moeCapacityFactor, 0, 1e30, false, false},
                         Range{&weightDecay, 0, 1e30, false, false},
                         Range{&adamBeta1, 0, 1, false, true}, Range{&adamBeta2, 0, 1, false, true},
                         Range{&adamEpsilon, 0, 1, true, false}}) {
    double v = *r.option;
    if (!std::isfinite(v) || v < r.low || (r.lowOpen && v == r.low) || v > r.high ||
        (r.highOpen && v == r.high))
      fail("--" + r.option->ArgStr + " must be " +
           (r.high == 1 ? llvm::Twine("in ") + (r.lowOpen ? "(" : "[") + "0, 1" +
                              (r.highOpen ? ")" : "]")
                        : llvm::Twine("a finite number >= 0")) +
           ", got " + std::to_string(v));
    if (r.option == &moeBiasUpdateRate) {
      if (r.option->getNumOccurrences() && mode != "train")
        fail("--moe-bias-update-rate updates the routers after each step: it applies to "
             "--mode=train");
      continue;
    }
    if (r.option == &moeCapacityFactor) {
      if (r.option->getNumOccurrences() && mode != "train" && mode != "gradients")
        fail("--moe-capacity-factor drops a training step's overflowing choices: it applies to "
             "--mode=train or --mode=gradients");
      continue;
    }
    if (r.option == &moeAuxLossCoef || r.option == &moeSeqAuxLossCoef) {
      if (r.option->getNumOccurrences() && mode != "train" && mode != "gradients")
        fail("--" + r.option->ArgStr + " adds to the training loss: it applies to --mode=train "
             "or --mode=gradients");
      continue;
    }
    if (r.option->getNumOccurrences() && mode != "train")
      fail("--" + r.option->ArgStr + " sets the optimizer: it applies to --mode=train");
  }
  if (zero1 && dataRanks == 1)
    fail("--zero1 splits optimizer state over the data-parallel ranks: it needs --dp > 1 or "
         "--ep > 1");
  bool distributed = tensorParallel > 1 || dataParallel > 1 || expertParallel > 1;
  if (distributed && !training)
    fail("--tp/--dp/--ep apply to --mode=train");
  if (batch > 0 && training && batch % (dataRanks * std::max<int64_t>(microbatches, 1)) != 0)
    fail("--batch (" + llvm::Twine(int64_t(batch)) + ") must be a multiple of " + dataFlag +
         " (" + llvm::Twine(dataRanks) + ")" +
         (microbatches > 0 ? " times --microbatches (" + llvm::Twine(int64_t(microbatches)) + ")"
                           : llvm::Twine("")) +
         ": each data-parallel rank runs whole microbatches");
  // A symbolic batch is fixed at the forward's batch: one microbatch of
  // every data-parallel rank (a fixed one is re-inferred after import).
  if (batch > 0)
    importOptions.batch = microbatches > 0 ? batch / microbatches : batch;
  if (seq > 0)
    importOptions.seq = seq;
  for (const std::string &dim : dims) {
    size_t eq = dim.find('=');
    long long value = 0;
    if (eq == std::string::npos || eq == 0 ||
        llvm::StringRef(dim).substr(eq + 1).getAsInteger(10, value) || value <= 0)
      fail("--dim expects NAME=VALUE with a positive VALUE, got '" + dim + "'");
    importOptions.dims[dim.substr(0, eq)] = value;
  }
  loom::ImportOptions::Usage importUsage;
  importOptions.usage = &importUsage;

  DialectRegistry registry;
  registry.insert<loom::LoomDialect, loom::nn::NNDialect, loom::dist::DistDialect,
                  loom::pipe::PipeDialect,
                  loom::rt::RtDialect,
                  func::FuncDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // One line per error: the message names the op and the numbers; the op's
  // generic form would only repeat it.
  context.printOpOnDiagnostic(getenv("LOOM_PRINT_OP_ON_DIAGNOSTIC") != nullptr);

  // Diagnostics print as `file:line:col: error: message`, one per line.
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);

  std::string error;
  std::string extension = llvm::sys::path::extension(inputPath).lower();
  OwningOpRef<ModuleOp> module =
      loom::loadModelFile(context, sourceMgr, inputPath, importOptions, error);
  if (!module && !error.empty())
    fail(error);
  if (!module)
    failDiagnosed();
  // --seq and --dim fix symbolic dimensions of an imported model; one that
  // fixes none does nothing (a static model, or a name the model lacks).
  bool imported = extension != ".mlir";
  if (seq.getNumOccurrences() && !importUsage.seq)
    fail("--seq " + llvm::Twine(int64_t(seq)) + " does nothing: '" + inputPath + "' has " +
         (imported ? "no symbolic sequence dimension (its input shapes are fixed)"
                   : "no symbolic dimensions (nn IR is imported as is)"));
  for (const auto &[name, value] : importOptions.dims)
    if (!importUsage.dims.count(name))
      fail("--dim " + name + "=" + llvm::Twine(value) + " does nothing: '" + inputPath +
           "' has no symbolic dimension named '" + name + "'");

  auto emitIR = [&]() {
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os);
    os << "\n";
    if (outputPath.empty() || outputPath == "-") {
      llvm::outs() << text;
      llvm::outs().flush();
    } else if (llvm::Error err =
                   loom::writeFileAtomically(outputPath, text.data(), text.size())) {
      fail("cannot write " + llvm::toString(std::move(err)));
    }
    std::exit(0);
  };
  if (compileTo == Phase::Input)
    emitIR();

  // The pipeline's passes are built from these (passes/Pipelines.h); the
  // batch sizes follow once the model's batch is known.
  loom::PipelineOptions pipelineOptions;
  pipelineOptions.mode = mode == "train"       ? loom::PipelineMode::Train
                  : mode == "gradients" ? loom::PipelineMode::Gradients
                                        : loom::PipelineMode::Infer;
  pipelineOptions.entry = entry;
  pipelineOptions.raise = raise;
  pipelineOptions.precision =
      precision == "bf16" ? loom::ComputePrecision::BF16 : loom::ComputePrecision::F32;
  pipelineOptions.maxGradNorm = maxGradNorm;
  pipelineOptions.moeAuxLossCoef = moeAuxLossCoef;
  pipelineOptions.moeBiasUpdateRate = moeBiasUpdateRate;
  pipelineOptions.moeSeqAuxLossCoef = moeSeqAuxLossCoef;
  pipelineOptions.moeCapacityFactor = moeCapacityFactor;
  pipelineOptions.weightDecay = weightDecay;
  pipelineOptions.adamBeta1 = adamBeta1;
  pipelineOptions.adamBeta2 = adamBeta2;
  pipelineOptions.adamEpsilon = adamEpsilon;
  pipelineOptions.pp = pp;
  pipelineOptions.vpp = vpp;
  pipelineOptions.schedule = schedule;
  pipelineOptions.ppLayout = ppLayout;
  pipelineOptions.scheduleFile = scheduleFile;
  pipelineOptions.tp = tensorParallel;
  pipelineOptions.dp = dataParallel;
  pipelineOptions.ep = expertParallel;
  pipelineOptions.epAllToAll = epDispatch == "all-to-all";
  pipelineOptions.sp = sequenceParallel;
  pipelineOptions.zero1 = zero1;
  pipelineOptions.dpBucketMb = dpBucketMb;
  pipelineOptions.fuse = fuse || compileTo == Phase::Fused;
  pipelineOptions.widenResults = widenResults;
  pipelineOptions.fuseSumSquares = fuseSumSquares;
  pipelineOptions.fuseFp8Quantize = fuseFp8Quantize;
  pipelineOptions.fp8WriterScales = fp8WriterScales;
  pipelineOptions.optimizerWritesCopies = optimizerWritesCopies;
  pipelineOptions.fuseNormWeightGrad = fuseNormWeightGrad;
  pipelineOptions.fuseLinearCrossEntropy = fuseLinearCrossEntropy;
  pipelineOptions.recompute = recompute;
  pipelineOptions.offloadActivations = offloadActivations;
  pipelineOptions.offloadPrefetch = offloadPrefetch;
  pipelineOptions.linearCrossEntropyChunk = linearCrossEntropyChunk;
  pipelineOptions.foldTransposes = foldTransposes;
  pipelineOptions.attentionStats = attentionStats;
  pipelineOptions.fp8Recipe = fp8;
  pipelineOptions.fp8Format = fp8Format;
  pipelineOptions.fp8Margin = fp8Margin;
  pipelineOptions.fp8AmaxHistory = fp8AmaxHistory;
  pipelineOptions.fp8Exclude.assign(fp8Exclude.begin(), fp8Exclude.end());
  pipelineOptions.fp8WeightsOnce = fp8WeightsOnce;
  // cuBLASLt's FP8 GEMMs read rows of 16 bytes.
  pipelineOptions.fp8GemmAlignment = target == "cuda" ? 16 : 1;
  if (llvm::Error err = loom::verifyFp8Options(pipelineOptions))
    fail("--" + llvm::toString(std::move(err)));
  loom::PipelineHooks hooks;
  hooks.buildRaising = loom::buildRaisingPipeline;

  // rt-level input (hand-written, or another tool's per-rank programs): the
  // model phases do not apply; plan what is unplanned and emit.
  bool rtInput = !module->getOps<loom::rt::ProgramOp>().empty();
  if (rtInput) {
    if (!fp8.empty())
      fail("'" + inputPath + "' is already rt; --fp8 does not apply");
    if (recompute != "none")
      fail("'" + inputPath + "' is already rt; --recompute does not apply");
    if (compileTo == Phase::NN || compileTo == Phase::Train || compileTo == Phase::Fused)
      fail("'" + inputPath + "' is already rt; --compile-to=" +
           (compileTo == Phase::NN ? "nn" : compileTo == Phase::Train ? "train" : "fused") +
           " does not apply");
  }

  // Large programs (many microbatches, many layers) say which phase runs
  // and how long it took, on stderr.
  auto runPhase = [&](llvm::function_ref<void(PassManager &)> build,
                      llvm::StringRef phase) {
    PassManager pm(&context);
    build(pm);
    constexpr int64_t kReportOps = 50000;
    int64_t ops = 0;
    module->walk([&](Operation *) { ++ops; });
    auto start = std::chrono::steady_clock::now();
    if (ops >= kReportOps)
      llvm::errs() << "loom-compile: " << phase << " (" << ops << " ops)...\n";
    if (failed(pm.run(*module)))
      failDiagnosed();
    if (ops >= kReportOps)
      llvm::errs() << llvm::format(
          "loom-compile: %s done in %.1f s\n", phase.str().c_str(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  auto runStep = [&](loom::PipelineStep step) {
    runPhase(
        [&](PassManager &pm) { loom::buildPipelineStep(pm, pipelineOptions, hooks, step); },
        loom::stepName(step));
  };

  if (rtInput) {
    bool planned = llvm::all_of(module->getOps<loom::rt::ProgramOp>(),
                                [](loom::rt::ProgramOp p) { return bool(p.getArenaSizes()); });
    runPhase([&](PassManager &pm) { loom::buildRtInputPipeline(pm, !planned); }, "rt");
  } else {
    runStep(loom::PipelineStep::Raise);
  }
  if (!rtInput && loom::stepRuns(loom::PipelineStep::Precision, pipelineOptions))
    runStep(loom::PipelineStep::Precision);

  // The model's batch (fixed when exported, or symbolic and fixed on
  // import) becomes the forward's: the given one for inference; for
  // training, one microbatch of every data-parallel rank at once (sharding
  // splits it over the ranks), the step taking the global batch.
  int64_t modelBatch = 0;
  if (!rtInput) {
    auto forward = module->lookupSymbol<func::FuncOp>(entry);
    if (forward && forward.getNumArguments() >= 1)
      if (auto ids = dyn_cast<RankedTensorType>(forward.getArgumentTypes()[0]);
          ids && ids.getRank() >= 1 && (ids.getRank() == 2 || !training))
        modelBatch = ids.getDimSize(0);
  }
  if (batch.getNumOccurrences() && modelBatch == 0 && (rtInput || !training))
    fail("--batch " + llvm::Twine(int64_t(batch)) + " does nothing: '" + inputPath + "' " +
         (rtInput ? "is rt IR (per-rank programs, their buffers planned as written)"
                  : "has no batch dimension to set (no first input of rank 1 or more)"));
  if (modelBatch > 0) {
    int64_t stepBatch = modelBatch;
    if (!training && batch > 0)
      stepBatch = batch;
    if (training) {
      int64_t globalBatch = batch > 0 ? int64_t(batch) : modelBatch;
      int64_t dp = dataRanks;
      if (globalBatch % dp != 0)
        fail("the global batch (" + llvm::Twine(globalBatch) +
             (batch > 0 ? "" : ", the model's; set it with --batch") +
             ") must be a multiple of " + dataFlag + " (" + llvm::Twine(dp) +
             "): each data-parallel rank runs whole microbatches");
      // Per rank: microbatches of the model's batch where they fit.
      if (microbatches == 0)
        microbatches =
            globalBatch % (dp * modelBatch) == 0 ? globalBatch / (dp * modelBatch) : 1;
      // Microbatches are unrolled into the step: beyond this, the program
      // (and its compile) is larger than any accumulation is worth.
      constexpr int64_t kMaxMicrobatches = 16384;
      if (microbatches > kMaxMicrobatches)
        fail("--batch " + llvm::Twine(globalBatch) + " makes " + llvm::Twine(int64_t(microbatches)) +
             " microbatches per rank; Loom unrolls microbatches into the step and compiles at "
             "most " + llvm::Twine(kMaxMicrobatches) +
             ": pass --microbatches N for fewer, larger microbatches");
      if (globalBatch % (dp * microbatches) != 0)
        fail("the global batch (" + llvm::Twine(globalBatch) + ") must be a multiple of " +
             dataFlag + " (" + llvm::Twine(dp) + ") times --microbatches (" + llvm::Twine(int64_t(microbatches)) +
             ")");
      stepBatch = globalBatch / microbatches;
    }
    if (stepBatch != modelBatch)
      pipelineOptions.stepBatch = stepBatch;
  }
  pipelineOptions.microbatches = microbatches;
  pipelineOptions.globalBatch = batch > 0 ? int64_t(batch) : modelBatch;
  if (loom::stepRuns(loom::PipelineStep::Rebatch, pipelineOptions))
    runStep(loom::PipelineStep::Rebatch);
  if (compileTo == Phase::NN)
    emitIR();

  if (loom::stepRuns(loom::PipelineStep::Partition, pipelineOptions)) {
    runStep(loom::PipelineStep::Partition);
    // A stage without layers still takes a rank that waits through the step.
    if (auto counts = loom::pipe::getLayersPerStage(*module)) {
      int64_t stages = counts.size(), layers = 0, empty = 0;
      for (int64_t n : counts.asArrayRef()) {
        layers += n;
        empty += n == 0;
      }
      if (empty > 0)
        llvm::WithColor::warning(llvm::errs(), "loom-compile")
            << "--pp " << int64_t(pp) << ": " << empty << " of " << stages
            << " pipeline stages hold no layers (the model has " << layers
            << "): their ranks idle through every step, a bubble of at least "
            << llvm::format("%.0f", 100.0 * double(empty) / double(stages))
            << "% of the pipeline's time\n";
    }
  }

  if (recompute == "auto" && !rtInput)
    chooseRecompute(*module, pipelineOptions, hooks);
  if (offloadActivations == "auto" && !rtInput)
    chooseOffload(*module, pipelineOptions, hooks);
  if (!rtInput && loom::stepRuns(loom::PipelineStep::TrainingStep, pipelineOptions))
    runStep(loom::PipelineStep::TrainingStep);
  if (compileTo == Phase::Train)
    emitIR();

  if (!rtInput && loom::stepRuns(loom::PipelineStep::Fp8, pipelineOptions))
    runStep(loom::PipelineStep::Fp8);
  if (compileTo == Phase::Fp8)
    emitIR();

  if (loom::stepRuns(loom::PipelineStep::Schedule, pipelineOptions)) {
    runStep(loom::PipelineStep::Schedule);
    if (!scheduleCsv.empty()) {
      auto ops = module->getOps<loom::pipe::ScheduleOp>();
      if (ops.empty())
        fail("internal error: no pipe.schedule after the pipe phase");
      std::string csv = loom::pipeline::exportCsv(loom::pipe::scheduleFromOp(*ops.begin()));
      auto out = openOutputFile(scheduleCsv, &error);
      if (!out)
        fail("cannot write '" + scheduleCsv + "': " + error);
      out->os() << csv;
      out->keep();
    }
    if (compileTo == Phase::Pipe)
      emitIR();
    runStep(loom::PipelineStep::PipeSplit);
  }

  if (!rtInput && loom::stepRuns(loom::PipelineStep::Shard, pipelineOptions))
    runStep(loom::PipelineStep::Shard);
  if (compileTo == Phase::Dist)
    emitIR();

  if (!rtInput && loom::stepRuns(loom::PipelineStep::AttentionStats, pipelineOptions))
    runStep(loom::PipelineStep::AttentionStats);
  if (!rtInput && loom::stepRuns(loom::PipelineStep::Fuse, pipelineOptions))
    runStep(loom::PipelineStep::Fuse);
  if (compileTo == Phase::Fused)
    emitIR();

  if (!rtInput)
    runStep(loom::PipelineStep::LowerToRt);
  if (compileTo == Phase::RT)
    emitIR();

  loom::ExecutableMetadata meta;
  meta.modelName = llvm::sys::path::stem(inputPath).str();
  meta.mode = mode;
  meta.compileFlags = commandLine(argc, argv);
  FailureOr<loom::Executable> exe = loom::emitExecutable(*module, meta);
  if (failed(exe))
    failDiagnosed();
  if (llvm::Error err = loom::verifyExecutable(*exe))
    fail("internal error: the emitted executable does not verify: " +
         llvm::toString(std::move(err)));
  if (llvm::Error err = loom::writeExecutableFile(*exe, outputPath))
    fail(llvm::toString(std::move(err)));
  if (memoryReport)
    for (const loom::RankProgram &program : exe->ranks) {
      loom::MemoryPlanSummary plan = loom::summarizeMemoryPlan(program);
      llvm::outs() << "rank " << program.rank << ": arenas "
                   << gib(double(plan.persistentArenaBytes + plan.scratchArenaBytes))
                   << " (persistent " << gib(double(plan.persistentArenaBytes))
                   << ", scratch at its peak " << gib(double(plan.scratchArenaBytes)) << ")\n";
      loom::printMemoryBreakdown(*exe, program, llvm::outs());
    }
  return 0;
}
