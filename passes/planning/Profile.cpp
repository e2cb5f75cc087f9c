// loom-plan's model profile: probes of the model cut to one and two layers,
// compiled by the real pipeline, their work counted op by op and their
// memory read off the memory planner's arenas.

#include "passes/planning/Profile.h"

#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNOps.h"
#include "passes/lowering/ExecutableEmitter.h"
#include "passes/training/Layers.h"
#include "runtime/executable/ExecutableListing.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>
#include <chrono>

using namespace mlir;

namespace loom::planning {

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(std::errc::invalid_argument, "%s", message.str().c_str());
}

double bytesOf(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  unsigned bits = tensor.getElementType().getIntOrFloatBitWidth();
  return double(tensor.getNumElements()) * double(std::max(1u, bits / 8));
}

/// An op's work: its FLOPs (a fused group's, summed over its body) and the
/// bytes it reads and writes at its boundary.
OpWork workOf(Operation *op) {
  OpWork w;
  w.name = op->getName().getStringRef().str();
  if (op->getNumRegions() > 0) {
    op->walk([&](Operation *inner) {
      if (inner != op && inner->getNumRegions() == 0 && isa<nn::NNDialect>(inner->getDialect()))
        w.flops += double(nn::FlopCountOpInterface::flopsOf(inner));
    });
  } else {
    w.flops = double(nn::FlopCountOpInterface::flopsOf(op));
  }
  for (Value v : op->getOperands())
    w.bytes += bytesOf(v.getType());
  for (Value v : op->getResults())
    w.bytes += bytesOf(v.getType());
  return w;
}

/// While alive, keeps the first error diagnostic's message (which becomes
/// the planner's one-line error) and prints none.
struct FirstError {
  explicit FirstError(MLIRContext *context)
      : handler(context, [this](Diagnostic &d) {
          if (d.getSeverity() == DiagnosticSeverity::Error && message.empty())
            message = d.str();
          return success();
        }) {}
  std::string message;
  ScopedDiagnosticHandler handler;
};

/// The optimizer's update of a parameter, which the lowering writes into
/// the parameter's own buffer and fuses with the gradient's clipping
/// multiply (--loom-fuse-adamw).
bool isInPlaceUpdate(Value v) {
  return v.hasOneUse() && isa_and_nonnull<nn::AdamWOp>(v.getDefiningOp());
}
bool isScalar(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.hasStaticShape() && t.getNumElements() == 1;
}

/// Views and constants do no work of their own, nor does what the lowering
/// folds away: an assignment the update already wrote in place, and a
/// gradient's scaling by a scalar that feeds only the update (the update's
/// kernel reads the unscaled gradient instead, the same bytes).
bool doesWork(Operation *op) {
  if (isa<nn::ParameterOp, nn::ConstantOp, nn::ReshapeOp>(op))
    return false;
  if (auto assign = dyn_cast<nn::AssignOp>(op))
    return !isInPlaceUpdate(assign.getValue());
  if (auto mul = dyn_cast<nn::MulOp>(op))
    if (mul->hasOneUse() && isa<nn::AdamWOp>(*mul->getUsers().begin()) &&
        (isScalar(mul->getOperand(0)) || isScalar(mul->getOperand(1))))
      return false;
  return isa<nn::NNDialect>(op->getDialect());
}

} // namespace

double PhaseWork::flops() const {
  double f = 0;
  for (const OpWork &w : ops)
    f += w.flops;
  return f;
}

llvm::Error truncateLayers(ModuleOp module, llvm::StringRef entry, int64_t keep) {
  auto func = module.lookupSymbol<func::FuncOp>(entry);
  if (!func)
    return error("no function @" + entry);
  FirstError diagnostics(module.getContext());
  FailureOr<LayerAssignment> layers = assignLayers(func, "plan");
  if (failed(layers))
    return error(diagnostics.message.empty() ? "the model has no transformer layers"
                                             : diagnostics.message);
  const int64_t n = layers->numLayers;
  if (keep >= n)
    return llvm::Error::success();
  auto layerOf = [&](Operation *op) -> int64_t {
    if (isa<func::ReturnOp>(op))
      return n;
    auto it = layers->layer.find(op);
    return it == layers->layer.end() ? -1 : it->second;
  };
  // What leaves layer keep-1 for the next layer, and what leaves the last
  // layer for the epilogue: one value each, of one type.
  llvm::SetVector<Value> out, last;
  for (Operation &op : func.getBody().front()) {
    int64_t l = layerOf(&op);
    if (l != keep - 1 && l != n - 1)
      continue;
    for (Value r : op.getResults())
      for (Operation *user : r.getUsers()) {
        int64_t u = layerOf(user);
        if (l == keep - 1 && u > l && u < n)
          out.insert(r);
        if (l == n - 1 && u == n)
          last.insert(r);
      }
  }
  // The residual stream: of what layer keep-1 passes on, the value of the
  // type the last layer hands the epilogue (others, such as a mask made in
  // the first layer and read by all, stay as they are).
  llvm::SmallVector<Value> residual;
  if (last.size() == 1)
    for (Value v : out)
      if (v.getType() == last[0].getType())
        residual.push_back(v);
  // Several of that type: an op of the next layer that reads only shared
  // parameters (a deduplicated all-ones norm weight of the first layer) is
  // counted in this one. The residual is the one the others are computed
  // from.
  if (residual.size() > 1) {
    llvm::sort(residual, [](Value a, Value b) {
      return a.getDefiningOp()->isBeforeInBlock(b.getDefiningOp());
    });
    Value root = residual.front();
    auto derives = [&](Value v) {
      llvm::SmallVector<Value> stack{v};
      llvm::DenseSet<Value> seen;
      while (!stack.empty()) {
        Value x = stack.pop_back_val();
        if (x == root)
          return true;
        Operation *def = x.getDefiningOp();
        if (!def || !seen.insert(x).second || def->isBeforeInBlock(root.getDefiningOp()))
          continue;
        for (Value operand : def->getOperands())
          stack.push_back(operand);
      }
      return false;
    };
    if (llvm::all_of(llvm::drop_begin(residual), derives))
      residual.resize(1);
  }
  if (last.size() != 1 || residual.size() != 1)
    return error("the model's layers do not chain through one value (layer " +
                 llvm::Twine(keep - 1) + " passes on " + llvm::Twine(out.size()) + ", " +
                 llvm::Twine(residual.size()) + " of the last layer's output type; the last "
                 "layer passes on " + llvm::Twine(last.size()) +
                 "): loom-plan profiles a model by cutting it to fewer layers");
  Value lastValue = last[0];
  lastValue.replaceUsesWithIf(residual[0], [&](OpOperand &use) { return layerOf(use.getOwner()) == n; });
  // Erase what no longer feeds anything, last first.
  bool erased = true;
  while (erased) {
    erased = false;
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(func.getBody().front()))) {
      if (op.hasTrait<OpTrait::IsTerminator>() || !op.use_empty() || !isMemoryEffectFree(&op))
        continue;
      op.erase();
      erased = true;
    }
  }
  return llvm::Error::success();
}

namespace {

llvm::Expected<Probe> runProbe(ModuleOp base, PipelineOptions options,
                               const PipelineHooks &hooks, int64_t layers, int64_t batch) {
  OwningOpRef<ModuleOp> module = base.clone();
  if (llvm::Error err = truncateLayers(*module, options.entry, layers))
    return std::move(err);
  options.stepBatch = batch > 1 ? batch : 0;
  options.globalBatch = batch;
  FirstError diagnostics(base.getContext());
  const std::string &diagnostic = diagnostics.message;
  auto run = [&](PipelineStep step) -> llvm::Error {
    PassManager pm(base.getContext());
    buildPipelineStep(pm, options, hooks, step);
    if (failed(pm.run(*module)))
      return error("compiling the " + llvm::Twine(layers) + "-layer probe (" +
                   stepName(step) + "): " + diagnostic);
    return llvm::Error::success();
  };
  Probe probe;
  probe.layers = layers;
  probe.batch = batch;
  for (PipelineStep step : kPipelineSteps) {
    if (int(step) < int(PipelineStep::TrainingStep) &&
        !(step == PipelineStep::Rebatch && batch > 1))
      continue;
    if (step == PipelineStep::LowerToRt) {
      // The step as it will run: count each op's work before lowering.
      module->walk([&](func::FuncOp f) {
        for (Operation &op : f.getBody().getOps()) {
          if (!doesWork(&op))
            continue;
          OpWork w = workOf(&op);
          std::optional<BackwardKind> kind = getBackwardKind(&op);
          if (kind == BackwardKind::Weight)
            probe.weightGrad.ops.push_back(std::move(w));
          else if (kind == BackwardKind::Input)
            probe.inputGrad.ops.push_back(std::move(w));
          else if (getMicrobatch(&op))
            probe.forward.ops.push_back(std::move(w));
          else
            probe.optimizer.ops.push_back(std::move(w));
        }
      });
    }
    if (step != PipelineStep::LowerToRt && !stepRuns(step, options))
      continue;
    if (llvm::Error err = run(step))
      return std::move(err);
  }
  FailureOr<Executable> exe = emitExecutable(*module, ExecutableMetadata{});
  if (failed(exe) || exe->ranks.empty())
    return error("emitting the " + llvm::Twine(layers) + "-layer probe: " + diagnostic);
  const RankProgram &program = exe->ranks[0];
  MemoryPlanSummary plan = summarizeMemoryPlan(program);
  MemoryBreakdown memory = summarizeMemory(*exe, program);
  probe.persistent = double(plan.persistentArenaBytes);
  probe.scratch = double(plan.scratchArenaBytes);
  probe.activations = double(memory.byCategory[MemoryCategory::Activation]);
  probe.activationPeak = double(memory.activationPeak);
  probe.liveAtActivationPeak = double(memory.liveAtActivationPeak);
  probe.trainableBytes = double(memory.trainableBytes);
  probe.updatedBytes = double(memory.updatedBytes);
  return probe;
}

} // namespace

llvm::Error probeTensorParallel(ModuleOp base, const PipelineOptions &baseOptions,
                                const PipelineHooks &hooks, int64_t tp) {
  OwningOpRef<ModuleOp> module = base.clone();
  if (llvm::Error err = truncateLayers(*module, baseOptions.entry, 1))
    return err;
  PipelineOptions options = baseOptions;
  options.mode = PipelineMode::Train;
  options.pp = options.dp = 1;
  options.tp = tp;
  options.sp = true;
  options.zero1 = false;
  options.microbatches = 1;
  options.globalBatch = 1;
  options.stepBatch = 0;
  options.recompute = "none";
  FirstError diagnostics(base.getContext());
  for (PipelineStep step : kPipelineSteps) {
    if (int(step) < int(PipelineStep::TrainingStep))
      continue;
    if (int(step) > int(PipelineStep::Shard))
      break;
    if (!stepRuns(step, options))
      continue;
    PassManager pm(base.getContext());
    buildPipelineStep(pm, options, hooks, step);
    if (failed(pm.run(*module)))
      return error(diagnostics.message.empty() ? "the sharding passes fail"
                                               : diagnostics.message);
  }
  return llvm::Error::success();
}

llvm::Expected<std::vector<double>> compiledMemory(ModuleOp base, const PipelineOptions &options,
                                                   const PipelineHooks &hooks) {
  OwningOpRef<ModuleOp> module = base.clone();
  FirstError diagnostics(base.getContext());
  for (PipelineStep step : kPipelineSteps) {
    if (int(step) < int(PipelineStep::Rebatch))
      continue;
    if (step != PipelineStep::LowerToRt && !stepRuns(step, options))
      continue;
    PassManager pm(base.getContext());
    buildPipelineStep(pm, options, hooks, step);
    if (failed(pm.run(*module)))
      return error(llvm::Twine("compiling the plan (") + stepName(step) +
                   "): " + diagnostics.message);
  }
  FailureOr<Executable> exe = emitExecutable(*module, ExecutableMetadata{});
  if (failed(exe))
    return error("emitting the plan: " + diagnostics.message);
  std::vector<double> bytes;
  for (const RankProgram &program : exe->ranks) {
    // The arenas as planned (a GPU rounds each up to 2 MiB, nothing at
    // this scale), and the attention's pool scratch.
    DeviceMemoryPrediction gpu = predictCudaMemory(program);
    double arenas = 0;
    for (ArenaKind a : {ArenaKind::Persistent, ArenaKind::Scratch})
      arenas += double(program.arenaSize[static_cast<int>(a)]);
    bytes.push_back(arenas + double(gpu.poolBytes));
  }
  std::sort(bytes.rbegin(), bytes.rend());
  return bytes;
}

namespace {

/// The experts of a mixture-of-experts model, from its forward (batch 1):
/// each nn.grouped_matmul whose weight is a parameter (through casts and
/// transposes that keep the experts first, as --ep finds them); a layer's
/// GEMMs share their offsets (the tokens' groups).
void profileExperts(func::FuncOp func, ModelProfile &profile) {
  llvm::SetVector<Value> groups;
  llvm::SetVector<Operation *> weights;
  int64_t rowElements = 0;
  func.walk([&](nn::GroupedMatmulOp gmm) {
    Value v = gmm.getWeight();
    while (true) {
      if (auto t = v.getDefiningOp<nn::TransposeOp>(); t && t.getPermutation()[0] == 0)
        v = t.getInput();
      else if (auto c = v.getDefiningOp<nn::CastOp>())
        v = c.getInput();
      else
        break;
    }
    auto param = v.getDefiningOp<nn::ParameterOp>();
    if (!param)
      return;
    auto in = cast<RankedTensorType>(gmm.getInput().getType());
    auto out = cast<RankedTensorType>(gmm.getResult().getType());
    auto w = cast<RankedTensorType>(param.getType());
    profile.experts = std::max(profile.experts, w.getDimSize(0));
    if (profile.seq > 0)
      profile.topK = std::max(profile.topK, in.getDimSize(0) / profile.seq);
    if (groups.insert(gmm.getOffsets()) && groups.size() == 1)
      rowElements = 0;
    if (groups.size() == 1)
      rowElements += in.getDimSize(1) + out.getDimSize(1);
    weights.insert(param);
  });
  profile.moeLayers = int64_t(groups.size());
  profile.routedRowElements = rowElements;
  for (Operation *w : weights)
    profile.expertParameters +=
        double(cast<RankedTensorType>(cast<nn::ParameterOp>(w).getType()).getNumElements());
}

} // namespace

llvm::Expected<ModelProfile> profileModel(ModuleOp module, const PipelineOptions &base,
                                          const PipelineHooks &hooks,
                                          const std::vector<std::string> &recomputeModes) {
  auto start = std::chrono::steady_clock::now();
  ModelProfile profile;
  auto func = module.lookupSymbol<func::FuncOp>(base.entry);
  if (!func)
    return error("no function @" + base.entry);
  {
    FirstError diagnostics(module.getContext());
    FailureOr<LayerAssignment> layers = assignLayers(func, "plan");
    if (failed(layers))
      return error(diagnostics.message);
    profile.numLayers = layers->numLayers;
    // The residual stream: what layer 0 hands on.
    for (Operation &op : func.getBody().front())
      if (layers->layer.lookup(&op) == 0 && !isa<nn::ParameterOp>(op))
        for (Value r : op.getResults())
          for (Operation *user : r.getUsers())
            if (layers->layer.count(user) && layers->layer.lookup(user) > 0)
              if (auto t = dyn_cast<RankedTensorType>(r.getType()); t && t.getRank() == 3) {
                profile.seq = t.getDimSize(1);
                profile.hidden = t.getDimSize(2);
                profile.residualBytes = int64_t(bytesOf(t));
              }
  }
  if (profile.hidden <= 0)
    return error("found no residual stream of shape [batch, seq, hidden] between the "
                 "model's first two layers");
  profileExperts(func, profile);
  PipelineOptions options = base;
  options.mode = PipelineMode::Train;
  options.pp = options.tp = options.dp = 1;
  options.sp = options.zero1 = false;
  options.microbatches = 1;
  options.globalBatch = 1;
  options.recomputeFullLayers = 0;
  for (const std::string &mode : recomputeModes) {
    options.recompute = mode;
    std::vector<Probe> &probes = profile.probes[mode];
    for (int64_t batch : {1, 2})
      for (int64_t layers : {1, 2}) {
        auto probe = runProbe(module, options, hooks, std::min(layers, profile.numLayers), batch);
        if (!probe)
          return probe.takeError();
        probes.push_back(std::move(*probe));
      }
  }
  const Probe &one = profile.probes.begin()->second[0], &two = profile.probes.begin()->second[1];
  profile.layerParameters = (two.trainableBytes - one.trainableBytes) / 4.0;
  profile.parameters = one.trainableBytes / 4.0 +
                       double(profile.numLayers - 1) * profile.layerParameters;
  profile.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return profile;
}

} // namespace loom::planning
