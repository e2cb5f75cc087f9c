// --loom-pipeline-partition: every op of the forward to a pipeline stage, by
// transformer layer, balanced by FLOPs or as given (see Passes.td).

#include "passes/pipeline/Passes.h"
#include "passes/training/Layers.h"
#include "runtime/schedule/ScheduleGenerators.h"

#include "dialects/nn/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>
#include <set>

namespace loom {
#define GEN_PASS_DEF_PIPELINEPARTITION
#include "passes/pipeline/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

int64_t elements(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t && t.hasStaticShape() ? t.getNumElements() : 0;
}

/// FLOPs of one op, as the op counts them (FlopCountOpInterface).
double flopsOf(Operation *op) { return double(nn::FlopCountOpInterface::flopsOf(op)); }

struct PipelinePartitionPass
    : public loom::impl::PipelinePartitionBase<PipelinePartitionPass> {
  using PipelinePartitionBase::PipelinePartitionBase;

  void runOnOperation() override {
    if (failed(partition()))
      signalPassFailure();
  }

  LogicalResult partition() {
    ModuleOp module = getOperation();
    auto kind = pipeline::parseScheduleKind(schedule);
    if (!kind)
      return mlir::emitError(module.getLoc()) << llvm::toString(kind.takeError());
    if (pp < 1 || vpp < 1)
      return mlir::emitError(module.getLoc()) << "--pp and --vpp must be at least 1";
    // Where stages run: the schedule's placement (any microbatch count will do).
    bool dual = *kind == pipeline::ScheduleKind::DualPipe || *kind == pipeline::ScheduleKind::DualPipeV;
    auto placement = scheduleFile.empty()
                         ? pipeline::generateSchedule(*kind, int(pp), int(vpp), int(dual ? 2 * pp : pp))
                         : pipeline::readScheduleFile(scheduleFile);
    if (!placement)
      return mlir::emitError(module.getLoc()) << llvm::toString(placement.takeError());
    // The model pieces: one per stage of a chain.
    int64_t pieces = placement->chainLength();
    auto func = module.lookupSymbol<func::FuncOp>("main");
    if (!func)
      return mlir::emitError(module.getLoc(), "no function @main to partition");
    if (llvm::any_of(func.getBody().front(),
                     [](Operation &op) { return op.hasAttr(pipe::kStageAttr); }))
      return propagate(func);

    // Layers: parameters by the block of the module that holds them, ops by
    // the deepest parameter they depend on (passes/training/Layers.h).
    FailureOr<LayerAssignment> layers = assignLayers(func, "partition");
    if (failed(layers))
      return failure();
    llvm::DenseMap<Operation *, int64_t> &layer = layers->layer;
    const int64_t numLayers = layers->numLayers;

    // Units: -1 prologue, 0..L-1 layers, L epilogue; cost per unit.
    std::vector<double> cost(numLayers + 2, 0.0);
    for (Operation &op : func.getBody().front())
      if (!isa<nn::ParameterOp>(op))
        cost[layer[&op] + 1] += flopsOf(&op);

    // Layers per piece.
    std::vector<int64_t> counts, padding(pieces, 0);
    if (layout.empty()) {
      counts = balance(cost, numLayers, pieces);
    } else if (layout == "even") {
      int64_t per = (numLayers + pieces - 1) / pieces;
      int64_t pad = per * pieces - numLayers;
      counts.assign(pieces, per);
      // Empty layers where the embedding and the head already add work: last, then first.
      for (int64_t i = 0; i < pad; ++i) {
        int64_t piece = i % 2 == 0 ? pieces - 1 - i / 2 : i / 2;
        --counts[piece];
        ++padding[piece];
      }
    } else {
      llvm::SmallVector<StringRef> fields;
      StringRef(layout).split(fields, ',');
      int64_t sum = 0;
      for (StringRef f : fields) {
        int64_t n = 0;
        if (f.trim().getAsInteger(10, n) || n < 0)
          return mlir::emitError(module.getLoc()) << "--pp-layout '" << layout
                                    << "': expected layers per stage like 4,4,4,4, or 'even'";
        counts.push_back(n);
        sum += n;
      }
      if (int64_t(counts.size()) != pieces || sum != numLayers)
        return mlir::emitError(module.getLoc())
               << "--pp-layout '" << layout << "' gives " << counts.size() << " stages with "
               << sum << " layers; the model has " << numLayers << " layers and "
               << (scheduleFile.empty()
                       ? "--schedule=" + schedule.getValue() + " with --pp " +
                             std::to_string(placement->numRanks)
                       : "the schedule in '" + scheduleFile.getValue() + "'")
               << " needs " << pieces << " stages";
    }
    // Layer -> piece.
    std::vector<int64_t> pieceOfLayer(numLayers + 2);
    pieceOfLayer[0] = 0;
    pieceOfLayer[numLayers + 1] = pieces - 1;
    for (int64_t p = 0, l = 0; p < pieces; ++p)
      for (int64_t i = 0; i < counts[p]; ++i)
        pieceOfLayer[1 + l++] = p;

    Builder b(module.getContext());
    std::vector<double> pieceCost(pieces, 0.0);
    std::vector<bool> hasPrologue(pieces), hasEpilogue(pieces);
    for (Operation &op : func.getBody().front()) {
      if (isa<func::ReturnOp>(op))
        continue;
      int64_t l = layer.count(&op) ? layer[&op] : -1;
      int64_t piece = pieceOfLayer[l + 1];
      op.setAttr(pipe::kStageAttr, b.getI64IntegerAttr(piece));
      if (!isa<nn::ParameterOp>(op))
        pieceCost[piece] += flopsOf(&op);
      if (l < 0 && !isa<nn::ConstantOp>(op))
        hasPrologue[piece] = true;
      if (l >= numLayers)
        hasEpilogue[piece] = true;
    }
    // Parameters and constants live where they are first used.
    for (Operation &op : func.getBody().front())
      if (isa<nn::ParameterOp, nn::ConstantOp>(op) && !op.getUsers().empty()) {
        Operation *user = *llvm::min_element(op.getUsers(), [](Operation *x, Operation *y) {
          return x->isBeforeInBlock(y);
        });
        if (auto stage = user->getAttrOfType<IntegerAttr>(pipe::kStageAttr))
          op.setAttr(pipe::kStageAttr, stage);
      }

    pipe::setLayersPerStage(module, counts);
    llvm::SmallVector<int64_t> flops;
    for (double c : pieceCost)
      flops.push_back(int64_t(c));
    pipe::setStageFlops(module, flops);
    int64_t layer0 = 0;
    for (int64_t p = 0; p < pieces; ++p) {
      std::string ranks = std::to_string(placement->stageRank[p]);
      if (placement->numChains == 2)
        ranks += " and " + std::to_string(placement->stageRank[p + pieces]);
      std::string what;
      if (hasPrologue[p])
        what += "embedding, ";
      if (counts[p] > 0)
        what += llvm::formatv("layers {0}-{1}", layer0, layer0 + counts[p] - 1).str();
      else
        what += "no layers";
      if (padding[p])
        what += llvm::formatv(" + {0} empty", padding[p]).str();
      if (hasEpilogue[p])
        what += ", norm + head + loss";
      mlir::emitRemark(func.getLoc()) << llvm::formatv("stage {0} (rank {1}): {2} ({3} layers), {4} FLOP",
                                         p, ranks, what, counts[p], int64_t(pieceCost[p]));
      layer0 += counts[p];
    }
    // Parameters read on several stages (tied embeddings, a shared rotary
    // table): every such stage holds a copy; trainable ones must sum their
    // gradients over those stages.
    for (Operation &op : func.getBody().front()) {
      auto param = dyn_cast<nn::ParameterOp>(op);
      if (!param)
        continue;
      std::set<int64_t> readers;
      for (Operation *user : op.getUsers())
        if (auto s = user->getAttrOfType<IntegerAttr>(pipe::kStageAttr))
          readers.insert(s.getInt());
      if (readers.size() < 2)
        continue;
      llvm::SmallVector<int64_t> list(readers.begin(), readers.end());
      pipe::setSharedStages(&op, list);
      mlir::emitRemark(func.getLoc())
          << "parameter '" << param.getName() << "' is read on stages "
          << llvm::join(llvm::map_range(list, [](int64_t s) { return std::to_string(s); }), ", ")
          << ": each holds a copy"
          << (param.isTrainable() ? ", and their gradients are summed" : "");
    }
    return reportBoundaries(func);
  }

  /// The tensors each forward transfer carries (SEND_F/RECV_F's payload; the
  /// backward sends their gradients): values of one stage read by a later one.
  LogicalResult reportBoundaries(func::FuncOp func) {
    std::map<std::pair<int64_t, int64_t>, llvm::SetVector<Value>> edges;
    for (Operation &op : func.getBody().front()) {
      auto to = op.getAttrOfType<IntegerAttr>(pipe::kStageAttr);
      if (!to)
        continue;
      for (Value v : op.getOperands()) {
        Operation *def = v.getDefiningOp();
        if (!def || isa<nn::ParameterOp, nn::ConstantOp>(def))
          continue;
        auto from = def->getAttrOfType<IntegerAttr>(pipe::kStageAttr);
        if (!from || from.getInt() == to.getInt())
          continue;
        if (from.getInt() > to.getInt())
          return op.emitOpError() << "on stage " << to.getInt() << " reads a value of stage "
                                  << from.getInt() << ": pipeline stages must only feed later ones";
        edges[{from.getInt(), to.getInt()}].insert(v);
      }
    }
    for (auto &[stages, values] : edges) {
      int64_t bytes = 0;
      for (Value v : values)
        if (auto type = dyn_cast<RankedTensorType>(v.getType()))
          bytes += elements(type) * int64_t(std::max(8u, type.getElementTypeBitWidth()) / 8);
      mlir::emitRemark(func.getLoc())
          << llvm::formatv("boundary stage {0} -> {1}: {2} tensor(s), {3} bytes per microbatch{4}",
                           stages.first, stages.second, values.size(), bytes,
                           stages.second > stages.first + 1 ? " (skips stages: relayed)" : "");
    }
    return success();
  }

  /// A program built from a partitioned forward (the training step): ops
  /// that kept their stage through autodiff keep it; every other op takes
  /// the stage of its operands (a backward op fed by several: the earliest,
  /// where the gradient arrives), or -1 when they come from several stages
  /// (the global gradient norm, the clipping factor: values every pipeline
  /// rank needs, reduced over the pipeline group); ops with no staged
  /// operand (token slices, moments, scalar constants) go with their first
  /// staged user.
  LogicalResult propagate(func::FuncOp func) {
    Builder b(func.getContext());
    Block &body = func.getBody().front();
    int64_t kept = 0, derived = 0, shared = 0;
    for (Operation &op : body) {
      if (isa<func::ReturnOp>(op))
        continue;
      if (op.hasAttr(pipe::kStageAttr)) {
        ++kept;
        continue;
      }
      // Constants can be anywhere; values of several stages (-1) are on every rank.
      // A shared value of the result's type (a partial sum of squares) keeps
      // the result shared; a shared scalar scaling a stage's tensor (the
      // clipping factor) does not.
      llvm::SmallSetVector<int64_t, 2> stages;
      bool usesShared = false, sharedLikeResult = false;
      for (Value v : op.getOperands())
        if (Operation *def = v.getDefiningOp(); def && !isa<nn::ConstantOp>(def))
          if (auto s = def->getAttrOfType<IntegerAttr>(pipe::kStageAttr)) {
            if (s.getInt() >= 0) {
              stages.insert(s.getInt());
            } else {
              usesShared = true;
              sharedLikeResult |= op.getNumResults() == 1 && v.getType() == op.getResult(0).getType();
            }
          }
      if ((stages.empty() && usesShared) || (sharedLikeResult && !loom::isBackward(&op))) {
        op.setAttr(pipe::kStageAttr, b.getI64IntegerAttr(-1));
        ++shared;
        continue;
      }
      if (stages.empty())
        continue; // decided by its users below
      // Gradients flow toward earlier stages: a sum of gradients from several
      // stages (the residual stream at a stage boundary) is the earliest's.
      // A forward op of one microbatch that reads several stages (a sum over
      // the layers, such as the load-balancing loss's counts) runs on the
      // latest: the earlier stages' values are sent forward to it, and its
      // gradient comes back to them as the residual stream's does.
      bool backward = loom::isBackward(&op);
      int64_t stage = stages.size() == 1 ? stages[0]
                      : backward         ? *llvm::min_element(stages)
                      : loom::getMicrobatch(&op) ? *llvm::max_element(stages)
                                                 : -1;
      op.setAttr(pipe::kStageAttr, b.getI64IntegerAttr(stage));
      stage >= 0 ? ++derived : ++shared;
    }
    for (Operation &op : llvm::reverse(body)) {
      if (isa<func::ReturnOp>(op) || op.hasAttr(pipe::kStageAttr))
        continue;
      int64_t stage = -1;
      Operation *first = nullptr;
      for (Operation *user : op.getUsers())
        if (auto s = user->getAttrOfType<IntegerAttr>(pipe::kStageAttr);
            s && s.getInt() >= 0 && (!first || user->isBeforeInBlock(first))) {
          first = user;
          stage = s.getInt();
        }
      op.setAttr(pipe::kStageAttr, b.getI64IntegerAttr(stage));
      stage >= 0 ? ++derived : ++shared;
    }
    mlir::emitRemark(func.getLoc())
        << llvm::formatv("training step: {0} ops kept their stage, {1} took their operands' "
                         "or users' stage, {2} combine stages (pipe.stage = -1)",
                         kept, derived, shared);
    // Per stage, the FLOPs of its forward (F), input-gradient (I) and
    // weight-gradient (W) ops over all microbatches, for the schedule's cost
    // model: [F0, I0, W0, F1, ...].
    int64_t numStages = 0;
    for (Operation &op : body)
      if (auto stage = op.getAttrOfType<IntegerAttr>(pipe::kStageAttr))
        numStages = std::max(numStages, stage.getInt() + 1);
    llvm::SmallVector<double> fiw(3 * numStages, 0.0);
    for (Operation &op : body) {
      auto stage = op.getAttrOfType<IntegerAttr>(pipe::kStageAttr);
      if (!stage || stage.getInt() < 0 || !loom::getMicrobatch(&op))
        continue;
      std::optional<loom::BackwardKind> backward = loom::getBackwardKind(&op);
      int part = !backward ? 0 : *backward == loom::BackwardKind::Weight ? 2 : 1;
      fiw[3 * stage.getInt() + part] += flopsOf(&op);
    }
    llvm::SmallVector<int64_t> rounded;
    for (double f : fiw)
      rounded.push_back(int64_t(f));
    pipe::setStageFiwFlops(func->getParentOfType<ModuleOp>(), rounded);
    return success();
  }

  /// Consecutive pieces minimizing the most expensive one (prologue cost on
  /// the first piece, epilogue on the last); a dynamic program over prefixes.
  static std::vector<int64_t> balance(const std::vector<double> &cost, int64_t layers,
                                      int64_t pieces) {
    std::vector<double> prefix(layers + 1, 0.0);
    for (int64_t l = 0; l < layers; ++l)
      prefix[l + 1] = prefix[l] + cost[l + 1];
    double pro = cost[0], epi = cost[layers + 1];
    const double inf = std::numeric_limits<double>::infinity();
    // best[p][l]: the smallest max cost putting layers [0, l) in pieces [0, p).
    std::vector<std::vector<double>> best(pieces + 1, std::vector<double>(layers + 1, inf));
    std::vector<std::vector<int64_t>> cut(pieces + 1, std::vector<int64_t>(layers + 1, 0));
    best[0][0] = 0;
    for (int64_t p = 1; p <= pieces; ++p)
      for (int64_t l = 0; l <= layers; ++l)
        for (int64_t k = 0; k <= l; ++k) {
          double c = prefix[l] - prefix[k] + (p == 1 ? pro : 0) + (p == pieces ? epi : 0);
          // Prefer more layers early on ties: stable, predictable layouts.
          double value = std::max(best[p - 1][k], c);
          if (value < best[p][l] * (1 - 1e-12)) {
            best[p][l] = value;
            cut[p][l] = k;
          }
        }
    std::vector<int64_t> counts(pieces);
    for (int64_t p = pieces, l = layers; p >= 1; --p) {
      counts[p - 1] = l - cut[p][l];
      l = cut[p][l];
    }
    return counts;
  }
};

} // namespace
