// loom-plan: which layout to train a model with on a cluster. Profiles the
// model by compiling it cut to one and two layers, searches every layout
// Loom can compile, costs each, and prints the fastest that fit with the
// loom-compile flags for each (docs/planning.md).

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
#include "passes/planning/Planner.h"
#include "runtime/support/AtomicFile.h"
#include "runtime/support/UserFile.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;
namespace cl = llvm::cl;
namespace planning = loom::planning;

namespace {

cl::OptionCategory category("loom-plan options");
cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx|model.pt2|model.mlir>"),
                               cl::cat(category));
cl::opt<int64_t> batch("batch", cl::desc("the global batch, in sequences per step (required)"),
                       cl::init(0), cl::cat(category));
cl::opt<int64_t> seq("seq", cl::desc("the sequence length, for a model whose sequence is symbolic"),
                     cl::init(0), cl::cat(category));
cl::opt<std::string> clusterPath(
    "cluster", cl::desc("the cluster, a JSON file (docs/planning.md; default: one node of 8 H200s)"),
    cl::value_desc("path"), cl::init(""), cl::cat(category));
cl::opt<int64_t> nodes("nodes", cl::desc("nodes of the cluster (default: the cluster file's)"),
                       cl::init(0), cl::cat(category));
cl::opt<int64_t> gpusPerNode("gpus-per-node",
                              cl::desc("GPUs per node (default: the cluster file's)"), cl::init(0),
                              cl::cat(category));
cl::opt<std::string> calibrationPath(
    "calibration",
    cl::desc("per-op rates measured by loom-kernel-bench --calibration-out (default: built in, "
             "an H200)"),
    cl::value_desc("path"), cl::init(""), cl::cat(category));
cl::opt<std::string> precision("precision", cl::desc("bf16 (default) or f32"), cl::init("bf16"),
                               cl::cat(category));
cl::opt<std::string> target("target",
                           cl::desc("the --target of the plans' loom-compile flags: cuda "
                                    "(default), or cpu to try a plan on CPU ranks"),
                           cl::init("cuda"), cl::cat(category));
cl::opt<int64_t> top("top", cl::desc("plans to print (default: 5)"), cl::init(5), cl::cat(category));
cl::opt<int64_t> showRejected("rejected",
                              cl::desc("plans rejected for memory to print (default: 5)"),
                              cl::init(5), cl::cat(category));
cl::opt<std::string> jsonPath("json", cl::desc("also write the plans as JSON ('-': stdout only)"),
                              cl::value_desc("path"), cl::init(""), cl::cat(category));
cl::opt<int64_t> whatIfLayers(
    "layers",
    cl::desc("plan as if the model had this many layers like its own (a deeper variant, "
             "before exporting it); default: the model's"),
    cl::init(0), cl::cat(category));
cl::opt<int64_t> verify(
    "verify",
    cl::desc("compile the best N plans through the memory planner and print each one's "
             "exact memory (loom-inspect's prediction for a GPU); one that does not fit is "
             "said so and the next is compiled (default 1, when the plan compiles quickly; "
             "0: the estimate alone)"),
    cl::init(1), cl::cat(category));
cl::opt<bool> showProfile("show-profile",
                           cl::desc("print the probes: each one's work and the memory planner's "
                                    "figures"),
                           cl::init(false), cl::cat(category));
cl::opt<int64_t> fixTp("tp", cl::desc("only layouts with this many tensor-parallel ranks"),
                       cl::init(0), cl::cat(category));
cl::opt<int64_t> fixPp("pp", cl::desc("only layouts with this many pipeline ranks"), cl::init(0),
                       cl::cat(category));
cl::opt<int64_t> fixDp("dp", cl::desc("only layouts with this many data-parallel ranks"),
                       cl::init(0), cl::cat(category));
cl::opt<int64_t> fixEp("ep",
                       cl::desc("only layouts with this many expert-parallel ranks (a "
                                "mixture-of-experts model; default: searched over the "
                                "divisors of its experts)"),
                       cl::init(0), cl::cat(category));
cl::opt<int64_t> fixVpp("vpp", cl::desc("only layouts with this many stages per pipeline rank"),
                        cl::init(0), cl::cat(category));
cl::opt<int64_t> fixMicrobatches("microbatches",
                                 cl::desc("only layouts with this many microbatches per rank"),
                                 cl::init(0), cl::cat(category));
cl::opt<std::string> fixSchedule("schedule",
                                 cl::desc("only this pipeline schedule (1f1b, interleaved, zb-h1, "
                                          "dualpipe, dualpipev)"),
                                 cl::init(""), cl::cat(category));
cl::opt<std::string> fixOffload("offload",
                                cl::desc("only layouts with this activation offload: none or all "
                                         "(default: both)"),
                                cl::init(""), cl::cat(category));
cl::opt<std::string> fixRecompute("recompute",
                                  cl::desc("only this recompute (none, selective, full)"),
                                  cl::init(""), cl::cat(category));

[[noreturn]] void fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "loom-plan") << message << "\n";
  std::exit(1);
}

std::string readFile(const std::string &path, const char *what) {
  auto file = loom::openRegularFile(path, /*requiresNullTerminator=*/false);
  if (!file)
    fail(llvm::Twine("cannot read the ") + what + " " + llvm::toString(file.takeError()));
  return (*file)->getBuffer().str();
}

/// Bytes in the largest unit that keeps them at least 1 (GiB, MiB, KiB).
std::string gib(double bytes) {
  const char *units[] = {"GiB", "MiB", "KiB"};
  double scale = double(1ull << 30);
  for (const char *unit : units) {
    if (bytes >= scale || scale == 1024.0)
      return llvm::formatv("{0:F2} {1}", bytes / scale, unit).str();
    scale /= 1024.0;
  }
  return llvm::formatv("{0:F2} KiB", bytes / 1024.0).str();
}

/// Seconds with four significant digits.
std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g s", s);
  return text;
}

llvm::json::Object planJson(const planning::PlanResult &p, int64_t rank,
                            const planning::SearchOptions &options) {
  const planning::Layout &l = p.layout;
  llvm::json::Object layout{{"tp", l.tp},         {"sp", l.sp()},
                            {"pp", l.pp},         {"vpp", l.vpp},
                            {"dp", l.dp},         {"ep", l.ep},
                            {"zero1", l.zero1()},
                            {"schedule", l.schedule}, {"microbatches", l.microbatches},
                            {"microbatch_size", l.microbatchSize}, {"recompute", l.recompute},
                            {"offload", l.offload}, {"padding_layers", l.paddingLayers}};
  llvm::json::Object o{{"layout", std::move(layout)},
                       {"step_time_s", p.stepSeconds},
                       {"tokens_per_s", p.tokensPerSecond},
                       {"mfu", p.mfu},
                       {"peak_memory_bytes", int64_t(p.memoryBytes())},
                       {"estimated_memory_bytes", int64_t(p.peakMemoryBytes)},
                       {"bubble", p.bubble},
                       {"breakdown_s", llvm::json::Object{{"pipeline", p.computeSeconds},
                                                          {"tp_collectives", p.tpCommSeconds},
                                                          {"dp_collectives", p.dpCommSeconds},
                                                          {"ep_collectives", p.epCommSeconds},
                                                          {"optimizer", p.optimizerSeconds},
                                                          {"gradient_copies", p.copiesSeconds}}},
                       {"flags", planning::compileFlags(p.layout, options)}};
  if (rank > 0)
    o["rank"] = rank;
  if (p.compiledMemoryBytes)
    o["compiled_memory_bytes"] = int64_t(*p.compiledMemoryBytes);
  return o;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  loom::setVersionPrinter();
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "loom-plan: the layouts to train a model with on a cluster, fastest first\n\n"
      "  loom-plan model.pt2 --batch 256 --seq 4096\n"
      "  loom-plan model.pt2 --batch 1024 --cluster cluster.json --nodes 8 --json plans.json\n"
      "  loom-plan model.pt2 --batch 4 --tp 1 --pp 1 --dp 1   (one layout, costed)\n\n"
      "Each plan prints with the loom-compile flags that build it. The cost model, the\n"
      "cluster and calibration files: docs/planning.md\n");
  auto start = std::chrono::steady_clock::now();
  if (inputPath.empty())
    fail("no model: loom-plan MODEL.pt2|.onnx|.mlir --batch N");
  if (batch < 1)
    fail("--batch (the global batch, sequences per step) is required and must be at least 1");
  if (precision != "bf16" && precision != "f32")
    fail("--precision must be bf16 or f32, got '" + precision + "'");
  if (target != "cuda" && target != "cpu")
    fail("--target must be cuda or cpu, got '" + target + "'");
  if (top < 1 || showRejected < 0)
    fail("--top must be at least 1 and --rejected at least 0");
  if (verify < 0)
    fail("--verify must be 0 or more");
  for (cl::opt<int64_t> *o : {&fixTp, &fixPp, &fixDp, &fixEp, &fixVpp, &fixMicrobatches, &nodes, &gpusPerNode, &seq, &whatIfLayers})
    if (o->getNumOccurrences() && *o < 1)
      fail("--" + o->ArgStr + " must be at least 1");
  if (!fixOffload.empty() && fixOffload != "none" && fixOffload != "all")
    fail("--offload must be none or all, got '" + fixOffload + "'");
  if (!fixRecompute.empty() && fixRecompute != "none" && fixRecompute != "selective" &&
      fixRecompute != "full")
    fail("--recompute must be none, selective or full, got '" + fixRecompute + "'");
  if (!fixSchedule.empty()) {
    auto kind = loom::pipeline::parseScheduleKind(fixSchedule);
    if (!kind || *kind == loom::pipeline::ScheduleKind::Custom)
      fail(kind ? "--schedule=custom is not generated" : llvm::toString(kind.takeError()));
  }
  if (!jsonPath.empty() && jsonPath != "-")
    if (llvm::Error err = loom::checkOutputPath(jsonPath, "--json"))
      fail(llvm::toString(std::move(err)));

  planning::Cluster cluster = planning::defaultCluster();
  if (!clusterPath.empty()) {
    auto c = planning::parseCluster(readFile(clusterPath, "cluster file"), clusterPath);
    if (!c)
      fail(llvm::toString(c.takeError()));
    cluster = *c;
  }
  if (nodes > 0)
    cluster.nodes = nodes;
  if (gpusPerNode > 0)
    cluster.gpusPerNode = gpusPerNode;
  const int64_t fixedRanks = std::max<int64_t>(fixTp, 1) * std::max<int64_t>(fixPp, 1) *
                            std::max<int64_t>(fixDp, 1) * std::max<int64_t>(fixEp, 1);
  if (cluster.gpus() % fixedRanks != 0 ||
      (fixTp && fixPp && fixDp && fixedRanks != cluster.gpus()))
    fail(llvm::formatv("--tp {0} --pp {1} --dp {2}{4} does not use the cluster's {3} GPUs "
                       "(tp x pp x dp{5} must equal them; --nodes and --gpus-per-node set "
                       "them)",
                       int64_t(fixTp), int64_t(fixPp), int64_t(fixDp), cluster.gpus(),
                       fixEp ? " --ep " + std::to_string(fixEp) : std::string(),
                       fixEp ? " x ep" : "")
             .str());
  planning::Calibration calibration = planning::defaultCalibration();
  // The cluster's GEMM rate scales the built-in curve (equal by default).
  calibration.gemmBf16.tflops *= cluster.gemmTflops / calibration.gemmTflopsBf16;
  calibration.gemmTflopsBf16 = cluster.gemmTflops;
  calibration.memoryGBps = cluster.memoryGBps;
  if (!calibrationPath.empty()) {
    auto c = planning::parseCalibration(readFile(calibrationPath, "calibration file"),
                                        calibrationPath);
    if (!c)
      fail(llvm::toString(c.takeError()));
    calibration = *c;
  }

  // The model, imported at one sequence per microbatch.
  DialectRegistry registry;
  registry.insert<loom::LoomDialect, loom::nn::NNDialect, loom::dist::DistDialect,
                  loom::pipe::PipeDialect, loom::rt::RtDialect, func::FuncDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  loom::ImportOptions importOptions;
  importOptions.embedWeights = false;
  importOptions.batch = 1;
  if (seq > 0)
    importOptions.seq = seq;
  std::string error;
  OwningOpRef<ModuleOp> module =
      loom::loadModelFile(context, sourceMgr, inputPath, importOptions, error);
  if (!module && !error.empty())
    fail(error);
  if (!module)
    std::exit(1);
  loom::PipelineOptions options;
  options.mode = loom::PipelineMode::Train;
  options.precision =
      precision == "bf16" ? loom::ComputePrecision::BF16 : loom::ComputePrecision::F32;
  loom::PipelineHooks hooks;
  hooks.buildRaising = loom::buildRaisingPipeline;
  {
    PassManager pm(&context);
    loom::buildPipelineStep(pm, options, hooks, loom::PipelineStep::Raise);
    if (failed(pm.run(*module)))
      std::exit(1);
  }
  // A model exported at a fixed batch: its forward at one sequence.
  if (auto forward = module->lookupSymbol<func::FuncOp>(options.entry))
    if (forward.getNumArguments() >= 1)
      if (auto ids = dyn_cast<RankedTensorType>(forward.getArgumentTypes()[0]);
          ids && ids.getRank() == 2 && ids.getDimSize(0) != 1) {
        options.stepBatch = 1;
        PassManager pm(&context);
        loom::buildPipelineStep(pm, options, hooks, loom::PipelineStep::Rebatch);
        if (failed(pm.run(*module)))
          std::exit(1);
        options.stepBatch = 0;
      }

  std::vector<std::string> modes = {"none", "selective", "full"};
  if (!fixRecompute.empty())
    modes = {fixRecompute};
  auto profile = planning::profileModel(*module, options, hooks, modes);
  if (!profile)
    fail(llvm::toString(profile.takeError()));
  profile->modelName = llvm::sys::path::stem(inputPath).str();
  const int64_t modelLayers = profile->numLayers;
  if (fixEp > 1 && profile->experts == 0)
    fail(llvm::formatv("--ep {0}: the model has no experts (no grouped GEMM of experts' "
                       "weights) to split",
                       int64_t(fixEp))
             .str());
  if (fixEp > 1 && profile->experts % fixEp != 0)
    fail(llvm::formatv("--ep {0}: the model's {1} experts do not divide over {0} ranks",
                       int64_t(fixEp), profile->experts)
             .str());
  if (whatIfLayers > 0) {
    // The added layers are like the last: with experts where it has them.
    if (profile->moeLayers > 0) {
      const int64_t moe =
          std::max<int64_t>(0, profile->moeLayers + whatIfLayers - profile->numLayers);
      profile->expertParameters *= double(moe) / double(profile->moeLayers);
      profile->moeLayers = moe;
    }
    profile->parameters += double(whatIfLayers - profile->numLayers) * profile->layerParameters;
    profile->numLayers = whatIfLayers;
  }
  if (showProfile)
    for (const auto &[mode, probes] : profile->probes)
      for (const planning::Probe &probe : probes)
        llvm::errs() << llvm::formatv(
            "loom-plan: probe {0}, {1} layer(s), {12} sequence(s): forward {2} ops {3:E2} FLOPs, "
            "input gradients {4} ops {5:E2}, weight gradients {6} ops {7:E2}, optimizer {8} "
            "ops; persistent {9}, scratch {10}, activations at the peak {11}\n",
            mode, probe.layers, probe.forward.ops.size(), probe.forward.flops(),
            probe.inputGrad.ops.size(), probe.inputGrad.flops(), probe.weightGrad.ops.size(),
            probe.weightGrad.flops(), probe.optimizer.ops.size(), gib(probe.persistent),
            gib(probe.scratch), gib(probe.activations), probe.batch);

  planning::SearchOptions search;
  search.globalBatch = batch;
  search.precision = precision;
  search.target = target;
  search.tp = fixTp;
  search.pp = fixPp;
  search.dp = fixDp;
  search.ep = fixEp;
  search.vpp = fixVpp;
  search.microbatches = fixMicrobatches;
  search.schedule = fixSchedule;
  search.recompute = fixRecompute;
  search.offload = fixOffload;
  // Which tensor-parallel degrees the model shards over: each one's
  // one-layer probe through the sharding passes.
  std::vector<std::string> tpNotes;
  for (int64_t tp = 2; tp <= std::min<int64_t>(cluster.gpusPerNode, cluster.gpus()); ++tp) {
    if (cluster.gpus() % tp != 0 || (fixTp && tp != fixTp))
      continue;
    if (llvm::Error err = planning::probeTensorParallel(*module, options, hooks, tp)) {
      std::string why = llvm::toString(std::move(err));
      why = why.substr(0, why.find('\n'));
      tpNotes.push_back(llvm::formatv("loom-plan: tp {0} does not shard this model: {1}", tp, why)
                            .str());
      search.excludedTp.push_back(tp);
    }
  }
  auto result = planning::search(*profile, cluster, calibration, search);
  if (!result)
    fail(llvm::toString(result.takeError()));

  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  llvm::raw_ostream &os = jsonPath == "-" ? llvm::errs() : llvm::outs();
  os << llvm::formatv("loom-plan: {0}: {1} layers, {2:F2}B parameters, hidden {3}, sequence {4}; "
                      "global batch {5}\n",
                      profile->modelName, profile->numLayers, profile->parameters / 1e9,
                      profile->hidden, profile->seq, int64_t(batch));
  if (profile->experts > 0)
    os << llvm::formatv("loom-plan: mixture of experts: {0} experts in {1} of the {2} layers, "
                        "top-{3}, {4:F2}B expert parameters; expert parallelism (--ep) "
                        "searched over the experts' divisors\n",
                        profile->experts, profile->moeLayers, profile->numLayers,
                        profile->topK, profile->expertParameters / 1e9);
  os << llvm::formatv("loom-plan: cluster {0}: {1} node(s) x {2} GPUs, {3} each; "
                      "calibration {4}\n",
                      cluster.name, cluster.nodes, cluster.gpusPerNode,
                      gib(cluster.gpuMemoryGiB * double(1ull << 30)), calibration.device);
  os << llvm::formatv("loom-plan: calibration rates: bf16 GEMM {0:F0} TFLOP/s + {1:F1} us a kernel, "
                      "attention {2:F0} + {3:F1} us forward, {4:F0} + {5:F1} us backward, "
                      "memory {6:F0} GB/s\n",
                      calibration.gemmBf16.tflops, calibration.gemmBf16.fixedUs,
                      calibration.attentionForward.tflops, calibration.attentionForward.fixedUs,
                      calibration.attentionBackward.tflops, calibration.attentionBackward.fixedUs,
                      calibration.memoryGBps);
  os << llvm::formatv("loom-plan: profiled in {0:F1} s ({1} probe compiles), searched {2} "
                      "layouts in {3:F2} s: {4} fit, {5} rejected for memory; {6:F1} s in all\n",
                      profile->seconds, 4 * profile->probes.size(), result->searched,
                      result->seconds, result->plans.size(), result->rejected.size(), total);
  for (const std::string &note : tpNotes)
    os << note << "\n";
  // The best plans compiled through the memory planner, fastest first,
  // until --verify of them fit: one that does not joins the rejected. Each
  // compile also corrects the estimates of the plans of its kind (schedule
  // and recompute) by how far off its own was, so a kind the probes
  // underestimate stops coming back.
  const double budget = cluster.gpuMemoryGiB * double(1ull << 30);
  auto kindOf = [](const planning::Layout &l) {
    return (l.pp > 1 ? l.schedule + "/" + std::to_string(l.vpp) : std::string("flat")) + "/" +
           l.recompute;
  };
  std::map<std::string, double> correction;
  auto reject = [&](size_t i) {
    result->plans[i].fits = false;
    result->rejected.push_back(std::move(result->plans[i]));
    result->plans.erase(result->plans.begin() + i);
  };
  // A deeper variant (--layers) is not the model that would compile.
  if (verify > 0 && whatIfLayers > 0 && whatIfLayers != modelLayers) {
    os << "loom-plan: --layers: the plans are estimates (the model file has other layers, so "
          "none is compiled)\n";
  } else if (verify > 0) {
    int64_t fitting = 0, attempts = 0;
    for (size_t i = 0; i < result->plans.size() && fitting < verify && attempts < verify + 8;) {
      planning::PlanResult &candidate = result->plans[i];
      const planning::Layout &l = candidate.layout;
      // By default only a plan that compiles in a few seconds: Loom unrolls
      // microbatches, so a compile grows with layers x microbatches (16 x 32
      // took 5 s on 2 cores). An explicit --verify compiles any.
      constexpr int64_t kQuickCompile = 256;
      if (!verify.getNumOccurrences() && modelLayers * l.microbatches > kQuickCompile) {
        os << "loom-plan: not compiling " << l.describe() << " (" << modelLayers
           << " layers x " << l.microbatches
           << " microbatches take a while): its memory is the estimate; --verify 1 compiles "
              "it\n";
        break;
      }
      loom::PipelineOptions plan = options;
      plan.mode = loom::PipelineMode::Train;
      plan.stepBatch = batch / l.microbatches;
      plan.globalBatch = batch;
      plan.microbatches = l.microbatches;
      plan.tp = l.tp;
      plan.sp = l.sp();
      plan.dp = l.dp;
      plan.zero1 = l.zero1();
      plan.pp = l.pp;
      plan.vpp = l.vpp;
      if (l.pp > 1)
        plan.schedule = l.schedule;
      plan.recompute = l.recompute;
      plan.offloadActivations = l.offload ? "all" : "";
      auto compileStart = std::chrono::steady_clock::now();
      auto bytes = planning::compiledMemory(*module, plan, hooks);
      ++attempts;
      if (!bytes) {
        std::string why = llvm::toString(bytes.takeError());
        os << "loom-plan: " << l.describe() << " does not compile: "
           << why.substr(0, why.find('\n')) << "\n";
        result->plans.erase(result->plans.begin() + i);
        continue;
      }
      candidate.compiledMemoryBytes = bytes->front() + cluster.runtimeGiB * double(1ull << 30);
      double compiled = *candidate.compiledMemoryBytes, estimate = candidate.peakMemoryBytes;
      os << llvm::formatv("loom-plan: compiled {0} in {1:F2} s: {2}/GPU on its largest rank "
                          "(estimated {3}, {4}{5:F1}%){6}\n",
                          l.describe(),
                          std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                        compileStart)
                              .count(),
                          gib(compiled), gib(estimate), estimate >= compiled ? "+" : "",
                          100.0 * (estimate - compiled) / compiled,
                          compiled > budget ? ": it does not fit" : "");
      std::string kind = kindOf(l);
      double ratio = compiled / std::max(estimate, 1.0);
      if (ratio > correction[kind]) {
        correction[kind] = ratio;
        for (size_t j = result->plans.size(); j-- > i + 1;) {
          planning::PlanResult &other = result->plans[j];
          if (other.compiledMemoryBytes || kindOf(other.layout) != kind)
            continue;
          other.peakMemoryBytes *= ratio / std::max(1e-9, other.correction);
          other.correction = ratio;
          if (other.peakMemoryBytes > budget)
            reject(j);
        }
      }
      if (compiled > budget) {
        reject(i);
        continue;
      }
      ++fitting;
      ++i;
    }
    std::stable_sort(result->rejected.begin(), result->rejected.end(),
                     [](const planning::PlanResult &a, const planning::PlanResult &b) {
                       return a.stepSeconds < b.stepSeconds;
                     });
  }
  if (result->plans.empty()) {
    std::string least;
    if (!result->rejected.empty()) {
      const planning::PlanResult *smallest = &result->rejected.front();
      for (const planning::PlanResult &p : result->rejected)
        if (p.peakMemoryBytes < smallest->peakMemoryBytes)
          smallest = &p;
      least = "; the least any needs is " + gib(smallest->peakMemoryBytes) + " per GPU (" +
              smallest->layout.describe() + ")";
    }
    fail(llvm::formatv("no layout of {0} GPUs with {1} each fits{2}{3}", cluster.gpus(),
                       gib(cluster.gpuMemoryGiB * double(1ull << 30)), least,
                       result->searched == 0 ? ": none can be built (check --batch against the "
                                               "GPUs and the fixed --tp/--pp/--dp)"
                                             : "; more GPUs, a smaller --batch or a smaller "
                                               "sequence would")
             .str());
  }
  auto printPlan = [&](const planning::PlanResult &p, int64_t rank) {
    os << llvm::formatv("{0,3}  {1,10}  {2,10:F0} tok/s  MFU {3,5:F1}%  {4,10}/GPU{5} "
                        "bubble {6,5:F1}%  {7}\n",
                        rank, seconds(p.stepSeconds), p.tokensPerSecond, 100 * p.mfu,
                        gib(p.memoryBytes()), p.compiledMemoryBytes ? "*" : " ", 100 * p.bubble,
                        p.layout.describe());
    os << "       loom-compile " << inputPath << " " << planning::compileFlags(p.layout, search)
       << "\n";
  };
  os << "\n  #        step          tokens/s        MFU      memory           bubble  layout\n";
  for (int64_t i = 0; i < std::min<int64_t>(top, result->plans.size()); ++i)
    printPlan(result->plans[i], i + 1);
  if (verify > 0)
    os << "  (* compiled: the memory planner's figure; the others are estimates)\n";
  if (showRejected > 0 && !result->rejected.empty()) {
    os << "\nrejected for memory (the fastest " << std::min<int64_t>(showRejected, result->rejected.size())
       << " of " << result->rejected.size() << "; " << gib(cluster.gpuMemoryGiB * double(1ull << 30))
       << " per GPU):\n";
    for (int64_t i = 0; i < std::min<int64_t>(showRejected, result->rejected.size()); ++i) {
      const planning::PlanResult &p = result->rejected[i];
      os << llvm::formatv("     {0,10}  needs {1}/GPU{2} {3}\n", seconds(p.stepSeconds),
                          gib(p.memoryBytes()), p.compiledMemoryBytes ? "*" : " ",
                          p.layout.describe());
    }
  }
  if (!jsonPath.empty()) {
    llvm::json::Array plans, rejected;
    for (int64_t i = 0; i < std::min<int64_t>(top, result->plans.size()); ++i)
      plans.push_back(planJson(result->plans[i], i + 1, search));
    for (int64_t i = 0; i < std::min<int64_t>(showRejected, result->rejected.size()); ++i)
      rejected.push_back(planJson(result->rejected[i], 0, search));
    llvm::json::Object root{
        {"schema", "loom-plan/1"},
        {"model", llvm::json::Object{{"name", profile->modelName},
                                     {"layers", profile->numLayers},
                                     {"parameters", profile->parameters},
                                     {"hidden", profile->hidden},
                                     {"seq", profile->seq}}},
        {"global_batch", int64_t(batch)},
        {"cluster", llvm::json::Object{{"name", cluster.name},
                                       {"nodes", cluster.nodes},
                                       {"gpus_per_node", cluster.gpusPerNode},
                                       {"gpu_memory_gib", cluster.gpuMemoryGiB}}},
        {"calibration", calibration.device},
        {"searched", result->searched},
        {"fit", int64_t(result->plans.size())},
        {"rejected_count", int64_t(result->rejected.size())},
        {"plans", std::move(plans)},
        {"rejected", std::move(rejected)}};
    std::string text;
    llvm::raw_string_ostream out(text);
    out << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
    out.flush();
    if (jsonPath == "-")
      llvm::outs() << text;
    else if (llvm::Error err = loom::writeFileAtomically(jsonPath, text.data(), text.size()))
      fail("cannot write " + llvm::toString(std::move(err)));
  }
  return 0;
}
