// --loom-shard-annotate: the mesh, and Megatron-style seeds for propagation,
// found from the dataflow (see Passes.td).

#include "passes/sharding/FactorSharding.h"
#include "passes/sharding/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

namespace loom {
#define GEN_PASS_DEF_SHARDANNOTATE
#include "passes/sharding/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;
using namespace loom::sharding;

namespace {

/// The trainable parameter `v` reads, through casts, reshapes and FP8
/// quantization (its values as stored, not its transposed copy).
nn::ParameterOp weightOf(Value v) {
  while (true) {
    if (auto cast = v.getDefiningOp<nn::CastOp>())
      v = cast.getInput();
    else if (auto reshape = v.getDefiningOp<nn::ReshapeOp>())
      v = reshape.getInput();
    else if (auto q = v.getDefiningOp<nn::QuantizeOp>(); q && q.getResult() == v)
      v = q.getInput();
    else
      break;
  }
  auto param = v.getDefiningOp<nn::ParameterOp>();
  return param && param.isTrainable() ? param : nn::ParameterOp();
}

bool isBackward(Operation *op) { return loom::isBackward(op); }

/// A forward GEMM by a weight (the weight is its right operand): an
/// nn.matmul, or an FP8 nn.scaled_matmul (the weight [N, K] as stored).
bool isWeightMatmul(Operation *op) {
  if (!isa<nn::MatmulOp, nn::ScaledMatmulOp>(op) || isBackward(op))
    return false;
  return bool(weightOf(op->getOperand(1)));
}

/// Whether a weight GEMM reads its weight as [N, K] (output features
/// first): `x W^T`, and every FP8 GEMM.
bool readsWeightTransposed(Operation *op) {
  auto mm = dyn_cast<nn::MatmulOp>(op);
  return !mm || mm.getTransposeRhs();
}

/// Whether the matmul's result reaches the attention, the activation input
/// of another weight matmul, or the logits of a cross-entropy, through ops
/// that treat its output
/// features per element: no contraction over them and no op that needs all
/// of them at once (a norm over the features). Such a matmul's output
/// features can be split (column parallel); head-wise ops such as rotary
/// embeddings, whose whole dims are smaller than the features, pass.
bool feedsSplittableConsumer(Operation *mm, int64_t *attentionHeads = nullptr) {
  int64_t features = cast<RankedTensorType>(mm->getResult(0).getType()).getShape().back();
  SmallVector<Value> work{mm->getResult(0)};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (isBackward(user))
        continue;
      if (isa<nn::AttentionOp>(user))
        return true;
      // Key/value heads that --loom-expand-kv-heads copied to one per query
      // head (the tp ranks do not divide them): their count.
      if (auto gather = dyn_cast<nn::GatherOp>(user);
          gather && attentionHeads && use.getOperandNumber() == 0 && gather.getAxis() == 1 &&
          cast<RankedTensorType>(v.getType()).getRank() == 4 &&
          llvm::any_of(gather->getUsers(), [](Operation *u) { return isa<nn::AttentionOp>(u); }))
        *attentionHeads = cast<RankedTensorType>(v.getType()).getDimSize(1);
      if (isWeightMatmul(user) && use.getOperandNumber() == 0)
        return true;
      // The LM head: its logits feed the loss. Splitting the vocabulary
      // splits the head's weight and matmul, and the loss is computed per block.
      if (isa<nn::CrossEntropyOp>(user) && use.getOperandNumber() == 0)
        return true;
      auto rule = dyn_cast<nn::ShardingRuleOpInterface>(user);
      if (!rule || isa<nn::MatmulOp, nn::ScaledMatmulOp>(user))
        continue;
      nn::ShardingRule r = rule.getShardingRule();
      ArrayRef<int64_t> shape = cast<RankedTensorType>(v.getType()).getShape();
      bool passes = true;
      for (auto [d, factors] : llvm::enumerate(r.operandDims[use.getOperandNumber()]))
        for (int f : factors) {
          nn::FactorKind kind = r.factors[f].kind;
          passes &= kind != nn::FactorKind::Reduction &&
                    !(kind == nn::FactorKind::Blocked && shape[d] == features);
        }
      if (!passes)
        continue;
      for (Value res : user->getResults())
        work.push_back(res);
    }
  }
  return false;
}

struct ShardAnnotatePass : public loom::impl::ShardAnnotateBase<ShardAnnotatePass> {
  using ShardAnnotateBase::ShardAnnotateBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // A pipelined step (--loom-pipeline-split) already has the mesh ["pp"];
    // its per-rank functions are each sharded over the axes added here.
    auto existing = module->getAttrOfType<dist::MeshAttr>(dist::kMeshAttrName);
    bool pipelined = existing && llvm::any_of(module.getOps<func::FuncOp>(), [](func::FuncOp f) {
                       return pipe::getRank(f).has_value();
                     });
    if (existing && !pipelined)
      return; // the user's own mesh and annotations
    if (tp < 1 || dp < 1 || ep < 1) {
      module.emitError("--tp, --dp and --ep must be at least 1, got tp=")
          << int64_t(tp) << " dp=" << int64_t(dp) << " ep=" << int64_t(ep);
      return signalPassFailure();
    }
    if (sp && tp == 1) {
      module.emitError("--sp splits the sequence over the tensor-parallel ranks: it needs --tp > 1");
      return signalPassFailure();
    }
    if (zero1 && dp * ep == 1) {
      module.emitError("--zero1 splits optimizer state over the data-parallel ranks: it needs --dp > 1 or --ep > 1");
      return signalPassFailure();
    }
    SmallVector<StringAttr> names;
    SmallVector<int64_t> sizes;
    MLIRContext *ctx = module.getContext();
    if (pipelined) {
      names.append(existing.getNames().begin(), existing.getNames().end());
      sizes.append(existing.getSizes().begin(), existing.getSizes().end());
    }
    const size_t pipelineAxes = names.size();
    if (dp > 1) {
      names.push_back(StringAttr::get(ctx, "dp"));
      sizes.push_back(dp);
    }
    if (ep > 1) {
      names.push_back(StringAttr::get(ctx, "ep"));
      sizes.push_back(ep);
    }
    if (tp > 1) {
      names.push_back(StringAttr::get(ctx, "tp"));
      sizes.push_back(tp);
    }
    if (names.size() == pipelineAxes)
      return; // nothing to shard
    dist::setMesh(module, dist::MeshAttr::get(ctx, names, sizes));
    if (zero1)
      dist::setZero1(module);
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal() && failed(annotate(func)))
        return signalPassFailure();
    // A pipeline stage may hold no MoE layer (DeepSeek's dense first
    // layers): the model needs experts somewhere, not on every stage.
    if (ep > 1 && !expertsFound) {
      module.emitError("--ep ")
          << int64_t(ep)
          << ": the model has no grouped GEMM of experts' weights to split (a "
             "mixture-of-experts model exported with transformers' default grouped_mm "
             "experts backend has one; its batched_mm backend gathers each token's "
             "experts' weights instead)";
      return signalPassFailure();
    }
  }

  bool expertsFound = false;

  /// The mesh axes that split the batch: dp, then ep (expert-parallel ranks
  /// hold different tokens).
  SmallVector<StringRef> batchAxes() const {
    SmallVector<StringRef> axes;
    if (dp > 1)
      axes.push_back("dp");
    if (ep > 1)
      axes.push_back("ep");
    return axes;
  }

  LogicalResult annotate(func::FuncOp func) {
    const int64_t dataRanks = dp * ep;
    if (dataRanks > 1) {
      // The batch: the first argument (token ids) split along dim 0.
      const char *flag = dp > 1 ? "--dp" : "--ep";
      if (func.getNumArguments() == 0)
        return func.emitError(flag) << " needs a function whose first argument is the batch";
      auto type = dyn_cast<RankedTensorType>(func.getArgument(0).getType());
      if (!type || type.getRank() == 0)
        return func.emitError(flag) << " needs a batch argument, got "
                                    << func.getArgument(0).getType();
      if (type.getDimSize(0) % dataRanks != 0)
        return func.emitError("cannot split the batch of ")
               << type.getDimSize(0) << " sequences (argument " << type << ") over dp="
               << int64_t(dp) << " x ep=" << int64_t(ep) << " ranks";
      // Microbatches cut from contiguous rows would each sit on one rank.
      for (Operation *user : func.getArgument(0).getUsers())
        if (auto slice = dyn_cast<nn::SliceOp>(user))
          if (slice.getStarts()[0] != 0 || slice.getLimits()[0] != type.getDimSize(0))
            return slice.emitOpError("takes rows [")
                   << slice.getStarts()[0] << ", " << slice.getLimits()[0] << ") of the batch of "
                   << type.getDimSize(0)
                   << " as one microbatch; with --dp, build the step with "
                      "--loom-build-training-step=\"data-parallel="
                   << dataRanks << "\" so every microbatch is split over the data ranks";
      Layout l = Layout::replicated(type.getRank());
      l.dims[0].append(batchAxes());
      setAnnotation(func.getArgument(0), l);
    }
    // A pipeline's transfers move whole microbatches' activations and
    // gradients between ranks that hold the same dp and tp coordinates:
    // both ends agree on one layout, the batch split over dp (each dp rank
    // sends its share), replicated over tp.
    func.walk([&](dist::ExchangeOp exchange) {
      auto mark = [&](Value v) {
        auto t = cast<RankedTensorType>(v.getType());
        Layout l = Layout::replicated(t.getRank());
        if (dataRanks > 1 && t.getRank() >= 2 && t.getDimSize(0) % dataRanks == 0)
          l.dims[0].append(batchAxes());
        setAnnotation(v, l);
      };
      for (Value v : exchange->getOperands())
        mark(v);
      for (Value v : exchange->getResults())
        mark(v);
    });
    if ((ep > 1 || dp > 1 || tp > 1) && failed(annotateExperts(func)))
      return failure();
    if (tp == 1)
      return success();

    // Column-parallel weights: split their output features over tp.
    llvm::SetVector<Operation *> columnParallel;
    llvm::DenseMap<Operation *, int64_t> attentionHeads;
    func.walk([&](Operation *mm) {
      int64_t heads = 0;
      if (isWeightMatmul(mm) && feedsSplittableConsumer(mm, &heads))
        columnParallel.insert(mm);
      if (heads > 0)
        attentionHeads[mm] = heads;
    });
    if (columnParallel.empty())
      return func.emitError("--tp ") << int64_t(tp)
             << ": found no weight matmul feeding attention or another weight matmul to split";
    llvm::StringSet<> wholeWeights;
    for (Operation *mm : columnParallel) {
      nn::ParameterOp w = weightOf(mm->getOperand(1));
      auto wType = cast<RankedTensorType>(w.getType());
      if (wType.getRank() != 2)
        return mm->emitOpError("column-parallel weight '") << w.getName() << "' must be 2-D, got "
                                                           << wType;
      auto rhsType = cast<RankedTensorType>(mm->getOperand(1).getType());
      if (rhsType.getShape() != wType.getShape())
        return mm->emitOpError("column-parallel weight '")
               << w.getName() << "' is reshaped before the matmul; cannot split it";
      int64_t outDim = readsWeightTransposed(mm) ? 0 : 1;
      // Key/value heads the ranks do not divide (multi-query attention, or
      // GQA with few groups; --loom-expand-kv-heads copied them to one per
      // query head): their projections stay whole on every rank, and each
      // rank's query heads read the ones they need (Megatron replicates
      // them too).
      if (auto heads = attentionHeads.find(mm);
          heads != attentionHeads.end() && heads->second % tp != 0) {
        if (wholeWeights.insert(w.getName()).second)
          mlir::emitRemark(mm->getLoc())
              << "--tp " << int64_t(tp) << ": weight '" << w.getName() << "' " << wType
              << " stays whole: its " << heads->second
              << " key/value head(s) do not divide over the ranks (each rank reads the ones "
                 "its query heads need)";
        continue;
      }
      // A weight with fewer output features than ranks (a gate of one
      // output, as Qwen2-MoE's shared expert has) stays whole on every rank;
      // the partitioner gathers or slices around it as its readers need.
      // Any other count the ranks do not divide is an impossible layout.
      const int64_t features = wType.getDimSize(outDim);
      if (features < tp) {
        if (wholeWeights.insert(w.getName()).second)
          mlir::emitRemark(mm->getLoc())
              << "--tp " << int64_t(tp) << ": weight '" << w.getName() << "' " << wType
              << " stays whole: its " << features << " output feature(s) are fewer than the ranks";
        continue;
      }
      if (features % tp != 0)
        return mm->emitOpError("cannot split weight '")
               << w.getName() << "' " << wType << ": its " << features
               << " output features are not divisible by tp=" << int64_t(tp);
      Layout l = Layout::replicated(2);
      l.dims[outDim].push_back("tp");
      setAnnotation(w.getResult(), l);
      // The matmul's output features too, so that a sequence split of its
      // input (sp) gives way to the weight's split.
      auto outType = cast<RankedTensorType>(mm->getResult(0).getType());
      Layout out = Layout::replicated(outType.getRank());
      out.dims.back().push_back("tp");
      if (outType.getRank() >= 3)
        out.dims.front().append(batchAxes());
      setAnnotation(mm->getResult(0), out);
    }
    annotateVocabulary(func);
    if (sp)
      annotateSequence(func);
    return success();
  }

  /// Expert parallelism: the weights of the experts' grouped GEMMs (found
  /// from the dataflow: the weight operand of a forward nn.grouped_matmul)
  /// are split along their first dim, the experts, over ep.
  LogicalResult annotateExperts(func::FuncOp func) {
    bool found = false;
    WalkResult walk = func.walk([&](nn::GroupedMatmulOp gmm) {
      if (isBackward(gmm))
        return WalkResult::advance();
      // The weight as stored, through casts and transposes that keep the
      // experts first (transformers stores [E, N, K] and transposes).
      Value v = gmm.getWeight();
      while (true) {
        if (auto t = v.getDefiningOp<nn::TransposeOp>(); t && t.getPermutation()[0] == 0)
          v = t.getInput();
        else if (auto cast = v.getDefiningOp<nn::CastOp>())
          v = cast.getInput();
        else
          break;
      }
      nn::ParameterOp w = weightOf(v);
      if (!w)
        return WalkResult::advance();
      auto type = cast<RankedTensorType>(w.getType());
      if (type.getShape() != cast<RankedTensorType>(v.getType()).getShape()) {
        // Without --ep the experts may stay whole: only dp and tp would
        // have split them.
        if (ep == 1)
          return WalkResult::advance();
        gmm.emitError("--ep ") << int64_t(ep) << ": the experts' weight '"
            << w.getName() << "' " << type
            << " is reshaped before the grouped GEMM; cannot split it by experts";
        return WalkResult::interrupt();
      }
      if (type.getDimSize(0) % ep != 0) {
        gmm.emitError("--ep ") << int64_t(ep) << ": the " << type.getDimSize(0)
                                 << " experts of '" << w.getName()
                                 << "' do not divide over " << int64_t(ep) << " ranks";
        return WalkResult::interrupt();
      }
      auto keepWhole = [&](WholeExperts &whole, int64_t over) {
        if (whole.weights.insert(w) && whole.weights.size() == 1)
          whole.over = over;
      };
      Layout l = Layout::replicated(type.getRank());
      if (ep > 1)
        l.dims[0].push_back("ep");
      // The data-parallel ranks split the experts too, where they divide:
      // the routing sorts the whole microbatch's choices, so every rank
      // sees every token's (the dispatch gathers them over dp as over ep);
      // with the experts replicated, each would compute all of them, dp
      // times the work.
      int64_t split = ep;
      if (dp > 1 && type.getDimSize(0) % (split * dp) == 0) {
        l.dims[0].push_back("dp");
        split *= dp;
      } else if (dp > 1) {
        keepWhole(wholeOver[0], split * dp);
      }
      // So do the tensor-parallel ranks: the experts' weights are whole on
      // each of them (their features are not split), so each would compute
      // every expert's rows for the same tokens.
      if (tp > 1 && type.getDimSize(0) % (split * tp) == 0)
        l.dims[0].push_back("tp");
      else if (tp > 1)
        keepWhole(wholeOver[1], split * tp);
      if (!l.isSplit())
        return WalkResult::advance();
      setAnnotation(w.getResult(), l);
      found = true;
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    expertsFound |= found;
    // Experts the dp or tp ranks cannot split stay whole there, and every
    // such rank computes them all for the same tokens: said once.
    for (int i : {0, 1}) {
      WholeExperts &whole = wholeOver[i];
      if (whole.weights.empty())
        continue;
      const char *flag = i == 0 ? "--dp" : "--tp";
      const int64_t ranks = i == 0 ? dp : tp;
      auto w = cast<nn::ParameterOp>(whole.weights.front());
      auto diag = mlir::emitRemark(w.getLoc())
                  << flag << " " << ranks << ": the " << w.getType().getDimSize(0)
                  << " experts of '" << w.getName() << "'";
      if (whole.weights.size() > 1)
        diag << " (and " << whole.weights.size() - 1 << " more expert weights)";
      diag << " do not divide over " << whole.over << " ranks, so they stay whole over " << flag
           << "'s ranks, each of which computes every expert's rows for the same tokens ("
           << ranks << " times the experts' work); --ep or a " << flag
           << " that divides the experts splits them";
      whole = WholeExperts();
    }
    return success();
  }
  /// Expert weights the dp ([0]) or tp ([1]) ranks could not split, and the
  /// ranks the first did not divide over: said once, in a remark.
  struct WholeExperts {
    llvm::SetVector<Operation *> weights;
    int64_t over = 0;
  };
  WholeExperts wholeOver[2];

  /// Vocabulary-parallel embeddings (Megatron's): a trainable table whose
  /// rows divide by tp is split by rows; each rank looks up the ids of its
  /// block (others give zero rows) and the partial lookups are summed (or,
  /// with --sp, reduce-scattered along the sequence). A table tied to the
  /// LM head gets the head's split, which is the same one.
  void annotateVocabulary(func::FuncOp func) {
    func.walk([&](nn::EmbeddingOp embedding) {
      if (isBackward(embedding))
        return;
      nn::ParameterOp table = weightOf(embedding.getTable());
      if (!table ||
          cast<RankedTensorType>(embedding.getTable().getType()).getShape() !=
              cast<RankedTensorType>(table.getType()).getShape())
        return;
      auto type = cast<RankedTensorType>(table.getType());
      if (type.getRank() != 2 || type.getDimSize(0) % tp != 0)
        return;
      Layout l = Layout::replicated(2);
      l.dims[0].push_back("tp");
      setAnnotation(table.getResult(), l);
    });
  }

  /// Sequence parallelism: the residual stream (norm inputs and outputs,
  /// residual adds: [batch, seq, hidden] values outside the column/row
  /// parallel regions) is split along the sequence over tp.
  void annotateSequence(func::FuncOp func) {
    func.walk([&](Operation *op) {
      if (isBackward(op) || op->getNumResults() != 1)
        return;
      auto rule = dyn_cast<nn::ShardingRuleOpInterface>(op);
      if (!rule)
        return;
      auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
      if (!type || type.getRank() != 3 || type.getDimSize(1) % tp != 0)
        return;
      // Norms keep their last dim whole: their inputs and outputs are the
      // residual stream, and so are residual adds of such values.
      nn::ShardingRule r = rule.getShardingRule();
      bool isNorm = !r.resultDims[0].back().empty() &&
                    r.factors[r.resultDims[0].back().front()].kind == nn::FactorKind::Blocked &&
                    r.resultDims[0][1].size() == 1 &&
                    r.factors[r.resultDims[0][1].front()].kind == nn::FactorKind::Parallel &&
                    op->getNumOperands() >= 1 &&
                    op->getOperand(0).getType() == type;
      if (!isNorm)
        return;
      auto mark = [&](Value v) {
        // A value crossing pipeline ranks keeps the layout both ends agreed
        // on (replicated over tp); its readers take their block locally.
        if (v.getDefiningOp<dist::ExchangeOp>() ||
            llvm::any_of(v.getUsers(), [](Operation *u) { return isa<dist::ExchangeOp>(u); }))
          return;
        Layout l = Layout::replicated(3);
        l.dims[0].append(batchAxes());
        l.dims[1].push_back("tp");
        setAnnotation(v, l);
      };
      mark(op->getResult(0));
      if (op->getOperand(0).getDefiningOp())
        mark(op->getOperand(0));
    });
  }
};

} // namespace
