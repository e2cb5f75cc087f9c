// --loom-build-training-step: forward -> loss -> autodiff -> AdamW, one
// function per optimizer step (see Passes.td).

#include "passes/training/Passes.h"

#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

#include <cmath>
#include <map>

namespace loom {
#define GEN_PASS_DEF_BUILDTRAININGSTEP
#define GEN_PASS_DEF_STRIPSTOPGRADIENTS
#include "passes/training/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

/// Records the ops a builder creates, to tag them afterwards.
struct CreatedOps : public OpBuilder::Listener {
  SmallVector<Operation *> ops;
  void notifyOperationInserted(Operation *op, OpBuilder::InsertPoint) override {
    ops.push_back(op);
  }
};

RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }

Value scalarConstant(OpBuilder &b, Location loc, double value) {
  auto type = RankedTensorType::get({}, b.getF32Type());
  return b.create<nn::ConstantOp>(loc, DenseElementsAttr::get(type, b.getF32FloatAttr(value)));
}

/// Whether `v` is a trainable parameter, seen directly or through the casts
/// and reshapes that mixed precision and importers put in front of it.
bool isWeight(Value v) {
  while (true) {
    if (auto cast = v.getDefiningOp<nn::CastOp>())
      v = cast.getInput();
    else if (auto reshape = v.getDefiningOp<nn::ReshapeOp>())
      v = reshape.getInput();
    else
      break;
  }
  auto param = v.getDefiningOp<nn::ParameterOp>();
  return param && param.isTrainable();
}

struct BuildTrainingStepPass
    : public loom::impl::BuildTrainingStepBase<BuildTrainingStepPass> {
  using BuildTrainingStepBase::BuildTrainingStepBase;

  void runOnOperation() override {
    if (failed(build()))
      return signalPassFailure();
    // The backward is built: no_grad and detach have done their work.
    stripStopGradients(getOperation());
  }

  LogicalResult build() {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("main");
    if (!forward)
      return module.emitError("no function @main to train");
    FunctionType fwdType = forward.getFunctionType();
    if (fwdType.getNumInputs() > 1 && fwdType.getNumResults() >= 1) {
      auto name = forward.getArgAttrOfType<StringAttr>(1, kNameAttr);
      return forward.emitError("training feeds the forward token ids alone; its ")
             << (name ? "input '" + name.getValue().str() + "'" : std::string("second input"))
             << " is not one a training step can fill (attention_mask, position_ids, "
                "token_type_ids)";
    }
    if (fwdType.getNumInputs() != 1 || fwdType.getNumResults() < 1)
      return forward.emitError("training needs a forward that takes token ids and "
                               "returns logits first; @main takes ")
             << fwdType.getNumInputs() << " inputs and returns " << fwdType.getNumResults();
    auto idsType = dyn_cast<RankedTensorType>(fwdType.getInput(0));
    auto logitsType = dyn_cast<RankedTensorType>(fwdType.getResult(0));
    if (!idsType || idsType.getRank() != 2 || !isa<IntegerType>(idsType.getElementType()))
      return forward.emitError("the forward's input must be token ids [batch, seq], got ")
             << fwdType.getInput(0);
    int64_t b = idsType.getDimSize(0), seq = idsType.getDimSize(1);
    if (!logitsType || logitsType.getRank() != 3 ||
        logitsType.getShape().take_front(2) != ArrayRef<int64_t>{b, seq} ||
        !isa<FloatType>(logitsType.getElementType()))
      return forward.emitError("the forward's first result must be logits [")
             << b << ", " << seq << ", vocab], got " << fwdType.getResult(0);
    int64_t vocab = logitsType.getDimSize(2);
    int64_t globalBatch = batch > 0 ? int64_t(batch) : b;
    if (globalBatch % b != 0)
      return forward.emitError("the global batch (")
             << globalBatch << ") must be a multiple of the forward's batch (" << b
             << "): each microbatch runs the forward once";
    int64_t microbatches = globalBatch / b;
    // The loss's classes: the executable keeps them, and the training loop
    // refuses data with a token at or past them (an id past the embedding
    // or a label past the logits would otherwise train on garbage where a
    // backend does not check, as CUDA's gathers do not).
    module->setAttr(loom::kVocabSizeAttr,
                    IntegerAttr::get(IntegerType::get(module.getContext(), 64), vocab));

    OpBuilder builder(module.getContext());
    Location loc = forward.getLoc();
    MLIRContext *ctx = module.getContext();
    auto f32Scalar = RankedTensorType::get({}, builder.getF32Type());
    auto tokensType = RankedTensorType::get({globalBatch, seq + 1}, builder.getI64Type());
    builder.setInsertionPoint(forward);
    // Gradients-only steps take just the tokens; their results are named
    // once the gradients are known.
    auto step = builder.create<func::FuncOp>(
        loc, "train_step",
        gradientsOnly ? builder.getFunctionType({tokensType}, {})
                      : builder.getFunctionType({tokensType, f32Scalar, f32Scalar},
                                                {f32Scalar, f32Scalar}));
    static const char *const kInputs[] = {"tokens", "lr", "step"};
    static const char *const kOutputs[] = {"loss", "grad_norm"};
    for (unsigned i = 0; i < step.getNumArguments(); ++i)
      loom::setArgName(step, i, kInputs[i]);
    for (unsigned i = 0; i < step.getNumResults(); ++i)
      loom::setResultName(step, i, kOutputs[i]);
    Block *body = step.addEntryBlock();
    builder.setInsertionPointToStart(body);
    Value tokens = body->getArgument(0);
    Value lr = gradientsOnly ? Value() : body->getArgument(1);
    Value stepNumber = gradientsOnly ? Value() : body->getArgument(2);

    Block &fwdBody = forward.getBody().front();
    // Expert capacity: the forward drops each expert's overflowing choices
    // and counts them per layer (summed over microbatches below).
    SmallVector<Value> droppedInForward;
    SmallVector<Value> droppedTotal;
    if (moeCapacityFactor > 0) {
      FailureOr<SmallVector<Value>> dropped = applyCapacity(fwdBody, moeCapacityFactor);
      if (failed(dropped))
        return failure();
      droppedInForward = *dropped;
      droppedTotal.assign(droppedInForward.size(), Value());
    }
    // Parameters and constants once; everything else once per microbatch.
    IRMapping shared;
    for (Operation &op : fwdBody)
      if (isa<nn::ParameterOp, nn::ConstantOp>(op))
        builder.clone(op, shared);

    // With data parallelism and several microbatches, microbatch m is made
    // of rows m of every rank's block, so each rank's block of the batch
    // holds its share of every microbatch.
    int64_t dp = std::max<int64_t>(dataParallel, 1);
    Value blocked;
    if (dp > 1 && microbatches > 1) {
      if (b % dp != 0)
        return forward.emitError("the model's batch (")
               << b << ") must be a multiple of the data-parallel ranks (" << dp
               << ") to split every microbatch";
      blocked = builder.create<nn::ReshapeOp>(
          loc, RankedTensorType::get({dp, microbatches, b / dp, seq + 1}, builder.getI64Type()),
          tokens);
      // The caller orders the global rows so that rank blocks hold these
      // shares of microbatch m = rows [m b, (m+1) b) of the batch as read:
      // the microbatches are a single rank's, whatever the ranks.
      step.setArgAttr(0, loom::kRowGroupsAttrName, builder.getI64IntegerAttr(microbatches));
    }
    // DeepSeek-V3's balancing: each router's correction bias and the
    // choices of every microbatch, counted after the step.
    SmallVector<std::pair<nn::ParameterOp, Value>> biasedRouters;
    llvm::MapVector<Operation *, SmallVector<Value>> biasCounts;
    if (moeBiasUpdateRate > 0 && !gradientsOnly) {
      biasedRouters = correctionBiases(fwdBody);
      if (biasedRouters.empty())
        return forward.emitError("--moe-bias-update-rate: the model has no router with a "
                                 "correction bias (a buffer added to the scores before a top-k "
                                 "whose choices are sorted by expert)");
    }
    SmallVector<Value> losses;
    for (int64_t m = 0; m < microbatches; ++m) {
      IRMapping mapping = shared;
      auto slice = [&](int64_t colBegin, int64_t colEnd) -> Value {
        if (blocked) {
          Value rows = builder.create<nn::SliceOp>(
              loc, blocked, builder.getDenseI64ArrayAttr({0, m, 0, colBegin}),
              builder.getDenseI64ArrayAttr({dp, m + 1, b / dp, colEnd}),
              builder.getDenseI64ArrayAttr({1, 1, 1, 1}));
          return builder.create<nn::ReshapeOp>(
              loc, RankedTensorType::get({b, colEnd - colBegin}, builder.getI64Type()), rows);
        }
        return builder.create<nn::SliceOp>(
            loc, tokens, builder.getDenseI64ArrayAttr({m * b, colBegin}),
            builder.getDenseI64ArrayAttr({(m + 1) * b, colEnd}),
            builder.getDenseI64ArrayAttr({1, 1}));
      };
      Value ids = slice(0, seq);
      if (idsType.getElementType() != builder.getI64Type())
        ids = builder.create<nn::CastOp>(loc, idsType, ids);
      mapping.map(forward.getArgument(0), ids);
      Value labels = builder.create<nn::ReshapeOp>(
          loc, RankedTensorType::get({b * seq}, builder.getI64Type()), slice(1, seq + 1));
      Value logits;
      for (Operation &op : fwdBody) {
        if (isa<nn::ParameterOp, nn::ConstantOp>(op))
          continue;
        if (auto ret = dyn_cast<func::ReturnOp>(op)) {
          logits = mapping.lookup(ret.getOperand(0));
          continue;
        }
        Operation *clone = builder.clone(op, mapping);
        loom::setMicrobatch(clone, m);
      }
      Value flat = builder.create<nn::ReshapeOp>(
          loc, RankedTensorType::get({b * seq, vocab}, logitsType.getElementType()), logits);
      Value loss = builder.create<nn::CrossEntropyOp>(loc, flat, labels);
      loom::setMicrobatch(loss.getDefiningOp(), m);
      for (auto [l, d] : llvm::enumerate(droppedInForward)) {
        Value local = mapping.lookup(d);
        droppedTotal[l] =
            droppedTotal[l] ? builder.create<nn::AddOp>(loc, droppedTotal[l], local).getResult()
                            : local;
      }
      if (moeBiasUpdateRate > 0 && !gradientsOnly)
        for (auto &[bias, ids] : biasedRouters)
          biasCounts[bias].push_back(mapping.lookup(ids));
      // The balance losses, each times its coefficient, join the loss.
      auto addTerm = [&](FailureOr<Value> term, double coef) -> LogicalResult {
        if (failed(term))
          return failure();
        Value scaled = builder.create<nn::MulOp>(loc, *term, scalarConstant(builder, loc, coef));
        loom::setMicrobatch(scaled.getDefiningOp(), m);
        loss = builder.create<nn::AddOp>(loc, loss, scaled);
        loom::setMicrobatch(loss.getDefiningOp(), m);
        return success();
      };
      if (moeAuxLossCoef > 0 &&
          failed(addTerm(loadBalancingLoss(builder, loc, fwdBody, mapping, m), moeAuxLossCoef)))
        return failure();
      if (moeSeqAuxLossCoef > 0 &&
          failed(addTerm(sequenceBalanceLoss(builder, loc, fwdBody, mapping, m, b, seq),
                         moeSeqAuxLossCoef)))
        return failure();
      losses.push_back(loss);
    }
    Value totalLoss = losses.front();
    for (Value l : ArrayRef<Value>(losses).drop_front())
      totalLoss = builder.create<nn::AddOp>(loc, totalLoss, l);
    if (microbatches > 1)
      totalLoss = builder.create<nn::MulOp>(loc, totalLoss,
                                            scalarConstant(builder, loc, 1.0 / microbatches));

    // Reverse-mode autodiff, from each microbatch's loss (weight 1/M).
    llvm::DenseMap<Value, Value> adjoint;
    if (failed(differentiate(builder, body, losses, 1.0 / microbatches, adjoint)))
      return failure();

    // Parameter gradients, the global norm, clipping, AdamW.
    SmallVector<nn::ParameterOp> params;
    for (Operation &op : *body)
      if (auto p = dyn_cast<nn::ParameterOp>(op); p && p.isTrainable())
        params.push_back(p);
    SmallVector<std::pair<nn::ParameterOp, Value>> grads;
    SmallVector<std::pair<Value, bool>> partials; // each gradient's sum of squares; a matrix's?
    for (nn::ParameterOp p : params) {
      Value g = adjoint.lookup(p.getResult());
      if (!g)
        continue; // the loss does not depend on it: nothing to update
      if (g.getType() != p.getType())
        g = builder.create<nn::CastOp>(loc, p.getType(), g);
      auto type = tensorType(g);
      Value sq = builder.create<nn::MulOp>(loc, g, g);
      // Sum of squares in two stages, rows then the row sums: a whole-tensor
      // reduction to one scalar would leave most of a GPU idle.
      if (type.getRank() >= 2) {
        int64_t rows = type.getDimSize(0), cols = type.getNumElements() / std::max<int64_t>(rows, 1);
        if (type.getRank() > 2)
          sq = builder.create<nn::ReshapeOp>(
              loc, RankedTensorType::get({rows, cols}, type.getElementType()), sq);
        sq = builder.create<nn::ReduceSumOp>(loc, sq, builder.getDenseI64ArrayAttr({1}),
                                             /*keepdim=*/false);
      }
      Value partial = builder.create<nn::ReduceSumOp>(loc, sq, builder.getDenseI64ArrayAttr({0}),
                                                      /*keepdim=*/false);
      if (tensorType(partial).getElementType() != builder.getF32Type())
        partial = builder.create<nn::CastOp>(loc, f32Scalar, partial);
      partials.push_back({partial, type.getRank() >= 2});
      grads.push_back({p, g});
    }
    // The total: the matrices' sums first, then the rest. Tensor
    // parallelism splits the matrices, whose sums are then partial over the
    // same ranks: summed first, they meet in one all-reduce instead of one
    // per matrix.
    Value normSquared;
    for (bool matrices : {true, false})
      for (auto [partial, isMatrix] : partials)
        if (isMatrix == matrices)
          normSquared = normSquared
                            ? builder.create<nn::AddOp>(loc, normSquared, partial).getResult()
                            : partial;
    if (grads.empty())
      return forward.emitError("no trainable parameter influences the loss");
    if (gradientsOnly)
      return finishWithGradients(builder, loc, forward, step, totalLoss, grads);
    Value gradNorm = builder.create<nn::SqrtOp>(loc, f32Scalar, normSquared);
    Value clipCoefficient;
    if (maxGradNorm > 0) {
      Value denom = builder.create<nn::AddOp>(loc, gradNorm, scalarConstant(builder, loc, 1e-6));
      Value ratio = builder.create<nn::DivOp>(loc, scalarConstant(builder, loc, maxGradNorm), denom);
      clipCoefficient = builder.create<nn::MinimumOp>(loc, ratio, scalarConstant(builder, loc, 1.0));
    }
    for (auto [p, g] : grads) {
      auto type = p.getType();
      if (!type.getElementType().isF32())
        return p.emitOpError("is trained with f32 master weights; got ")
               << type.getElementType() << " (compile the model in f32)";
      if (clipCoefficient)
        g = builder.create<nn::MulOp>(loc, g, clipCoefficient);
      auto state = [&](StringRef suffix) {
        return builder.create<nn::ParameterOp>(
            p.getLoc(), type, builder.getStringAttr((p.getName() + suffix).str()),
            builder.getUnitAttr(), nn::InitKindAttr::get(ctx, nn::InitKind::zeros),
            builder.getF64FloatAttr(0.0), ElementsAttr());
      };
      Value m = state(".exp_avg"), v = state(".exp_avg_sq");
      double decay = type.getRank() >= 2 ? double(weightDecay) : 0.0;
      auto update = builder.create<nn::AdamWOp>(
          p.getLoc(), TypeRange{type, type, type}, p.getResult(), g, m, v, lr, stepNumber,
          builder.getF64FloatAttr(beta1), builder.getF64FloatAttr(beta2),
          builder.getF64FloatAttr(epsilon), builder.getF64FloatAttr(decay));
      builder.create<nn::AssignOp>(p.getLoc(), p.getResult(), update.getNewParam());
      builder.create<nn::AssignOp>(p.getLoc(), m, update.getNewExpAvg());
      builder.create<nn::AssignOp>(p.getLoc(), v, update.getNewExpAvgSq());
    }
    for (auto &[biasOp, indices] : biasCounts)
      updateCorrectionBias(builder, loc, cast<nn::ParameterOp>(shared.lookup(
                                             cast<nn::ParameterOp>(biasOp).getResult())
                                             .getDefiningOp()),
                           indices);
    Value lossOut = totalLoss;
    if (tensorType(lossOut).getElementType() != builder.getF32Type())
      lossOut = builder.create<nn::CastOp>(loc, f32Scalar, lossOut);
    SmallVector<Value> results{lossOut, gradNorm};
    SmallVector<std::string> names{"loss", "grad_norm"};
    if (Value counts = expertTokenCounts(builder, loc, *body)) {
      results.push_back(counts);
      names.push_back("moe_tokens_per_expert");
    }
    if (!droppedTotal.empty()) {
      SmallVector<Value> rows;
      for (Value d : droppedTotal)
        rows.push_back(builder.create<nn::ReshapeOp>(
            loc, RankedTensorType::get({1}, builder.getI64Type()), d));
      results.push_back(stackLayerRows(builder, loc, rows, isPipelined(*body)));
      names.push_back("moe_dropped_tokens");
    }
    builder.create<func::ReturnOp>(loc, results);
    if (results.size() > 2) {
      SmallVector<Type> types;
      for (Value r : results)
        types.push_back(r.getType());
      SmallVector<DictionaryAttr> attrs;
      step.getAllResultAttrs(attrs);
      attrs.resize(types.size(), builder.getDictionaryAttr({}));
      step.setFunctionType(builder.getFunctionType(step.getArgumentTypes(), types));
      step.setAllResultAttrs(attrs);
      for (size_t i = 2; i < names.size(); ++i)
        loom::setResultName(step, i, names[i]);
    }
    runMicrobatchesInTurn(*body);

    forward.erase();
    step.setName("main");
    return success();
  }

  /// The top-k of a router: its indices reach a sort (the tokens grouped
  /// by expert) through reshapes and casts.
  static bool choicesAreSorted(nn::TopkOp topk) {
    SmallVector<Value> work{topk.getIndices()};
    for (size_t i = 0; i < work.size() && i < 16; ++i)
      for (Operation *user : work[i].getUsers()) {
        if (isa<nn::SortOp>(user))
          return true;
        if (isa<nn::ReshapeOp, nn::CastOp>(user))
          work.push_back(user->getResult(0));
      }
    return false;
  }

  /// A router of the forward for the load-balancing loss: the top-k
  /// choices of a mixture-of-experts layer (the value its dispatch sorts:
  /// every token's k expert ids, from one or more top-k ops through
  /// reshapes, casts and concatenations) and the scores the first of those
  /// top-k ops ranks, [tokens, experts]: a softmax (Mixtral, Qwen), or the
  /// router's logits when the softmax comes after the top-k (GPT-OSS,
  /// Granite-MoE) or the choices are made another way (PhiMoE's two top-1
  /// rounds), whose softmax the loss then takes, as transformers'
  /// load_balancing_loss_func does. Scores computed through a sigmoid
  /// (DeepSeek-V3, GLM-4-MoE) are not a softmax router.
  struct Router {
    Value choices; // i64, tokens x k elements
    Value scores;  // [..., experts]
    bool logits;   // scores are logits: the loss takes their softmax
    int64_t experts, k;
    Operation *op;
    /// A sigmoid router's affinities (DeepSeek-V3, GLM-4-MoE): the sigmoid
    /// the selection's scores come from, before any bias or group mask;
    /// null for a softmax router.
    Value sigmoid;
  };

  /// The sigmoid `scores` were computed through, if any: its producers,
  /// back to the router's projection (a contraction) or a few ops.
  static Value sigmoidOf(Value scores) {
    SmallVector<Value> work{scores};
    llvm::DenseSet<Value> seen{scores};
    for (size_t i = 0; i < work.size() && i < 32; ++i) {
      Operation *def = work[i].getDefiningOp();
      if (!def || isa<nn::MatmulOp>(def))
        continue;
      if (isa<nn::SigmoidOp>(def))
        return def->getResult(0);
      for (Value operand : def->getOperands())
        if (isa<FloatType>(getElementTypeOrSelf(operand.getType())) && seen.insert(operand).second)
          work.push_back(operand);
    }
    return {};
  }

  /// The softmax routers of the forward (routers() without the sigmoid
  /// ones): the load-balancing loss's.
  static SmallVector<Router> softmaxRouters(Block &fwdBody) {
    SmallVector<Router> all = routers(fwdBody), softmax;
    for (const Router &r : all)
      if (!r.sigmoid)
        softmax.push_back(r);
    return softmax;
  }

  static SmallVector<Router> routers(Block &fwdBody) {
    SmallVector<Router> found;
    for (Operation &op : fwdBody) {
      auto sort = dyn_cast<nn::SortOp>(op);
      if (!sort || !getElementTypeOrSelf(sort.getInput().getType()).isInteger(64))
        continue;
      // Back from the sorted ids to the top-k ops (or routers) that chose
      // them.
      SmallVector<Value> work{sort.getInput()};
      SmallVector<Operation *> topks;
      bool clean = true;
      for (size_t i = 0; i < work.size() && clean; ++i) {
        Operation *def = work[i].getDefiningOp();
        if (auto topk = dyn_cast_or_null<nn::TopkOp>(def);
            topk && work[i] == topk.getIndices() && !topk.getSmallest()) {
          topks.push_back(topk);
        } else if (auto router = dyn_cast_or_null<nn::RouterOp>(def);
                   router && work[i] == router.getIds()) {
          topks.push_back(router);
        } else if (def && isa<nn::ReshapeOp, nn::CastOp, nn::ConcatOp>(def)) {
          llvm::append_range(work, def->getOperands());
        } else {
          clean = false;
        }
        if (work.size() > 64)
          clean = false;
      }
      if (!clean || topks.empty())
        continue;
      Operation *first = *llvm::min_element(
          topks, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
      // A router's scores are its affinities: a softmax's probabilities,
      // or the sigmoids. A top-k ranks a softmax, logits, or scores
      // computed through a sigmoid.
      auto router = dyn_cast<nn::RouterOp>(first);
      Value scores = router ? router.getScores() : cast<nn::TopkOp>(first).getInput();
      auto type = cast<RankedTensorType>(scores.getType());
      int64_t experts = type.getShape().back();
      int64_t tokens = type.getNumElements() / experts;
      int64_t choices = cast<RankedTensorType>(sort.getInput().getType()).getNumElements();
      if (tokens <= 0 || choices % tokens)
        continue;
      bool logits = !router && !scores.getDefiningOp<nn::SoftmaxOp>();
      Value sigmoid = router ? (router.getSigmoid() ? scores : Value())
                             : (logits ? sigmoidOf(scores) : Value());
      if (sigmoid && cast<RankedTensorType>(sigmoid.getType()).getNumElements() != tokens * experts)
        continue;
      found.push_back({sort.getInput(), scores, logits, experts, choices / tokens, first, sigmoid});
    }
    return found;
  }

  /// The one-hot of expert ids `ids` [A, B, 1] (i64) over `experts`:
  /// [A, B, experts] f32 (the counts of the balance losses; no gradient).
  template <typename Tag>
  static Value oneHotExperts(OpBuilder &builder, Location loc, Value ids, int64_t experts,
                             Tag &&tag) {
    auto shape = cast<RankedTensorType>(ids.getType()).getShape();
    Value iota = tag(builder.create<nn::IotaOp>(
        loc, RankedTensorType::get({1, 1, experts}, builder.getI64Type()),
        builder.getI64IntegerAttr(2), builder.getF64FloatAttr(0), builder.getF64FloatAttr(1)));
    Value hit = tag(builder.create<nn::CompareOp>(
        loc, nn::ComparePredicateAttr::get(builder.getContext(), nn::ComparePredicate::eq), ids,
        iota));
    return tag(builder.create<nn::CastOp>(
        loc, RankedTensorType::get({shape[0], shape[1], experts}, builder.getF32Type()), hit));
  }

  /// The load-balancing loss (Switch Transformer; Mixtral's) of microbatch
  /// m's softmax routers, over all their tokens at once: experts x the sum
  /// over choices j and experts e of the fraction of tokens whose j-th
  /// choice is e times e's mean probability. The fractions count choices
  /// (no gradient); the probabilities (the router's softmax over all its
  /// experts) carry it.
  FailureOr<Value> loadBalancingLoss(OpBuilder &builder, Location loc, Block &fwdBody,
                                     IRMapping &mapping, int64_t m) {
    SmallVector<Router> routers = softmaxRouters(fwdBody);
    if (routers.empty())
      return emitError(loc, "--moe-aux-loss-coef: the model has no softmax router (top-k "
                            "choices, sorted by expert, over router logits or their softmax; a "
                            "sigmoid router balances with --moe-bias-update-rate or "
                            "--moe-seq-aux-loss-coef)");
    Type f32 = builder.getF32Type(), i64 = builder.getI64Type();
    int64_t experts = routers.front().experts, k = routers.front().k;
    Value counts, probs;
    int64_t tokens = 0;
    auto tag = [&](Value v) {
      loom::setMicrobatch(v.getDefiningOp(), m);
      return v;
    };
    for (const Router &router : routers) {
      if (router.experts != experts || router.k != k)
        return router.op->emitError("--moe-aux-loss-coef: the routers differ in experts or top-k (")
               << router.experts << " and " << router.k << ", against " << experts << " and " << k
               << ")";
      auto type = cast<RankedTensorType>(router.scores.getType());
      int64_t t = type.getNumElements() / experts;
      tokens += t;
      Value p = mapping.lookup(router.scores);
      Value idx = mapping.lookup(router.choices);
      p = tag(builder.create<nn::ReshapeOp>(loc, RankedTensorType::get({t, experts},
                                                                       type.getElementType()), p));
      if (type.getElementType() != f32)
        p = tag(builder.create<nn::CastOp>(loc, RankedTensorType::get({t, experts}, f32), p));
      if (router.logits)
        p = tag(builder.create<nn::SoftmaxOp>(loc, p.getType(), p, builder.getI64IntegerAttr(1)));
      Value idx3 = tag(builder.create<nn::ReshapeOp>(loc, RankedTensorType::get({t, k, 1}, i64),
                                                     idx));
      Value mask = oneHotExperts(builder, loc, idx3, experts, tag);
      Value c = tag(builder.create<nn::ReduceSumOp>(loc, mask, builder.getDenseI64ArrayAttr({0}),
                                                    UnitAttr()));
      Value ps = tag(builder.create<nn::ReduceSumOp>(loc, p, builder.getDenseI64ArrayAttr({0}),
                                                     UnitAttr()));
      counts = counts ? tag(builder.create<nn::AddOp>(loc, counts, c)) : c;
      probs = probs ? tag(builder.create<nn::AddOp>(loc, probs, ps)) : ps;
    }
    Value inv = scalarConstant(builder, loc, 1.0 / double(tokens));
    Value fractions = tag(builder.create<nn::MulOp>(loc, counts, inv));
    Value meanProbs = tag(builder.create<nn::MulOp>(loc, probs, inv));
    Value row = tag(builder.create<nn::ReshapeOp>(
        loc, RankedTensorType::get({1, experts}, f32), meanProbs));
    Value products = tag(builder.create<nn::MulOp>(loc, fractions, row));
    Value total = tag(builder.create<nn::ReduceSumOp>(
        loc, products, builder.getDenseI64ArrayAttr({0, 1}), UnitAttr()));
    return tag(builder.create<nn::MulOp>(loc, total, scalarConstant(builder, loc, double(experts))));
  }

  /// DeepSeek-V3's complementary sequence-wise balance loss of microbatch
  /// m's routers (softmax or sigmoid), each of its `sequences` sequences of
  /// `seq` tokens on its own: the sum over experts i of f_i P_i, with
  /// f_i = experts / (k seq) x the choices of i in the sequence and P_i the
  /// mean over the sequence of the router's affinities normalized to sum 1
  /// over the experts (a softmax router's probabilities; a sigmoid router's
  /// sigmoids divided by their sum, before any bias). The mean over the
  /// sequences, summed over the routers (the MoE layers). The counts carry
  /// no gradient; the affinities do.
  FailureOr<Value> sequenceBalanceLoss(OpBuilder &builder, Location loc, Block &fwdBody,
                                       IRMapping &mapping, int64_t m, int64_t sequences,
                                       int64_t seq) {
    SmallVector<Router> all = routers(fwdBody);
    if (all.empty())
      return emitError(loc, "--moe-seq-aux-loss-coef: the model has no router (top-k choices "
                            "of experts, sorted by expert)");
    Type f32 = builder.getF32Type(), i64 = builder.getI64Type();
    auto tag = [&](Value v) {
      loom::setMicrobatch(v.getDefiningOp(), m);
      return v;
    };
    Value total;
    for (const Router &router : all) {
      const int64_t e = router.experts, k = router.k;
      Value affinity = router.sigmoid ? router.sigmoid : router.scores;
      auto type = cast<RankedTensorType>(affinity.getType());
      if (type.getNumElements() != sequences * seq * e)
        return router.op->emitError("--moe-seq-aux-loss-coef: this router scores ")
               << type.getNumElements() / e << " tokens, not the microbatch's " << sequences
               << " sequences of " << seq;
      auto bse = RankedTensorType::get({sequences, seq, e}, f32);
      Value s = tag(builder.create<nn::ReshapeOp>(
          loc, RankedTensorType::get({sequences, seq, e}, type.getElementType()),
          mapping.lookup(affinity)));
      if (type.getElementType() != f32)
        s = tag(builder.create<nn::CastOp>(loc, bse, s));
      if (router.sigmoid) {
        Value sum = tag(builder.create<nn::ReduceSumOp>(loc, s, builder.getDenseI64ArrayAttr({2}),
                                                        builder.getUnitAttr()));
        s = tag(builder.create<nn::DivOp>(loc, bse, s, sum));
      } else if (router.logits) {
        s = tag(builder.create<nn::SoftmaxOp>(loc, bse, s, builder.getI64IntegerAttr(2)));
      }
      Value p = tag(builder.create<nn::ReduceSumOp>(loc, s, builder.getDenseI64ArrayAttr({1}),
                                                    UnitAttr()));
      Value idx = tag(builder.create<nn::ReshapeOp>(
          loc, RankedTensorType::get({sequences, seq * k, 1}, i64), mapping.lookup(router.choices)));
      Value ones = oneHotExperts(builder, loc, idx, e, tag);
      Value counts = tag(builder.create<nn::ReduceSumOp>(loc, ones, builder.getDenseI64ArrayAttr({1}),
                                                         UnitAttr()));
      Value products = tag(builder.create<nn::MulOp>(loc, counts, p));
      Value sum = tag(builder.create<nn::ReduceSumOp>(loc, products,
                                                      builder.getDenseI64ArrayAttr({0, 1}), UnitAttr()));
      // f_i P_i = (e / (k seq)) counts_i x (1 / seq) sum_t s'_it; mean over sequences.
      Value layer = tag(builder.create<nn::MulOp>(
          loc, sum,
          scalarConstant(builder, loc,
                         double(e) / (double(k) * double(seq) * double(seq) * double(sequences)))));
      total = total ? tag(builder.create<nn::AddOp>(loc, total, layer)) : layer;
    }
    return total;
  }

  /// Expert capacity in the forward: for each MoE layer (the grouped GEMMs
  /// that share one offsets value), a row whose position in its expert's
  /// group is at or past C = ceil(factor x rows / experts) is dropped: the
  /// layer's last grouped GEMM (the experts' output) gives it zero. Returns
  /// each layer's dropped count (an i64 scalar), in program order.
  FailureOr<SmallVector<Value>> applyCapacity(Block &fwdBody, double factor) {
    llvm::MapVector<Value, nn::GroupedMatmulOp> last;
    for (Operation &op : fwdBody)
      if (auto g = dyn_cast<nn::GroupedMatmulOp>(op))
        last[g.getOffsets()] = g;
    if (last.empty())
      return emitError(fwdBody.getParentOp()->getLoc(),
                       "--moe-capacity-factor: the model has no mixture-of-experts layer (a "
                       "grouped GEMM of its experts)");
    SmallVector<Value> dropped;
    OpBuilder b(fwdBody.getParentOp()->getContext());
    for (auto &[offsets, gmm] : last) {
      Location loc = gmm.getLoc();
      b.setInsertionPointAfter(gmm);
      Type i64 = b.getI64Type();
      auto outType = gmm.getType();
      int64_t rows = outType.getDimSize(0);
      int64_t experts = cast<RankedTensorType>(offsets.getType()).getDimSize(0);
      int64_t capacity = int64_t(std::ceil(factor * double(rows) / double(experts)));
      auto cmp = [&](nn::ComparePredicate p, Value x, Value y) {
        return b.create<nn::CompareOp>(loc, nn::ComparePredicateAttr::get(b.getContext(), p), x, y)
            .getResult();
      };
      auto toI64 = [&](Value v) {
        auto t = cast<RankedTensorType>(v.getType());
        return b.create<nn::CastOp>(loc, RankedTensorType::get(t.getShape(), i64), v).getResult();
      };
      Value ends = b.create<nn::ReshapeOp>(loc, RankedTensorType::get({1, experts}, i64),
                                           toI64(offsets));
      Value starts = b.create<nn::ConstantOp>(
          loc, DenseElementsAttr::get(RankedTensorType::get({1, 1}, i64),
                                      b.getI64IntegerAttr(0).getValue()));
      if (experts > 1) {
        Value head = b.create<nn::SliceOp>(loc, ends, b.getDenseI64ArrayAttr({0, 0}),
                                           b.getDenseI64ArrayAttr({1, experts - 1}),
                                           b.getDenseI64ArrayAttr({1, 1}));
        starts = b.create<nn::ConcatOp>(loc, ValueRange{starts, head}, b.getI64IntegerAttr(1));
      }
      Value row = b.create<nn::IotaOp>(loc, RankedTensorType::get({rows, 1}, i64),
                                       b.getI64IntegerAttr(0), b.getF64FloatAttr(0),
                                       b.getF64FloatAttr(1));
      Value inGroup = b.create<nn::MulOp>(loc, toI64(cmp(nn::ComparePredicate::ge, row, starts)),
                                          toI64(cmp(nn::ComparePredicate::lt, row, ends)));
      Value groupStart = b.create<nn::ReduceSumOp>(
          loc, b.create<nn::MulOp>(loc, inGroup, starts), b.getDenseI64ArrayAttr({1}), UnitAttr());
      Value rowFlat = b.create<nn::ReshapeOp>(loc, RankedTensorType::get({rows}, i64), row);
      Value position = b.create<nn::SubOp>(loc, rowFlat, groupStart);
      Value limit = b.create<nn::ConstantOp>(
          loc, DenseElementsAttr::get(RankedTensorType::get({}, i64),
                                      b.getI64IntegerAttr(capacity).getValue()));
      Value kept = cmp(nn::ComparePredicate::lt, position, limit);
      Value keep = b.create<nn::CastOp>(
          loc, RankedTensorType::get({rows, 1}, outType.getElementType()),
          b.create<nn::ReshapeOp>(loc, RankedTensorType::get({rows, 1}, b.getI1Type()), kept));
      auto out = b.create<nn::MulOp>(loc, gmm.getResult(), keep);
      gmm.getResult().replaceAllUsesExcept(out.getResult(), out);
      // Dropped: rows of some group that are not kept.
      Value inAny = b.create<nn::ReduceSumOp>(loc, inGroup, b.getDenseI64ArrayAttr({1}), UnitAttr());
      Value one = b.create<nn::ConstantOp>(
          loc, DenseElementsAttr::get(RankedTensorType::get({}, i64), b.getI64IntegerAttr(1).getValue()));
      Value notKept = b.create<nn::SubOp>(loc, one, toI64(kept));
      dropped.push_back(b.create<nn::ReduceSumOp>(loc, b.create<nn::MulOp>(loc, inAny, notKept),
                                                  b.getDenseI64ArrayAttr({0}), UnitAttr()));
    }
    return dropped;
  }

  /// Routers with a correction bias (DeepSeek-V3's e_score_correction_bias):
  /// a buffer (a parameter not trained) of one value per expert that the
  /// scores add before the router's top-k, found by following its uses.
  static SmallVector<std::pair<nn::ParameterOp, Value>> correctionBiases(Block &fwdBody) {
    SmallVector<std::pair<nn::ParameterOp, Value>> found;
    for (Operation &op : fwdBody) {
      auto param = dyn_cast<nn::ParameterOp>(op);
      if (!param || param.isTrainable() || param.getType().getRank() != 1)
        continue;
      int64_t experts = param.getType().getDimSize(0);
      // A router's own bias.
      if (auto router = llvm::find_if(param->getUsers(), [&](Operation *u) {
            auto r = dyn_cast<nn::RouterOp>(u);
            return r && r.getBias() == param.getResult();
          });
          router != param->getUsers().end()) {
        found.push_back({param, cast<nn::RouterOp>(*router).getIds()});
        continue;
      }
      bool added = llvm::any_of(param->getUsers(), [](Operation *u) { return isa<nn::AddOp>(u); });
      if (!added)
        continue;
      // Forward through the uses to the first sorted top-k over the experts.
      SmallVector<Value> work{param.getResult()};
      llvm::DenseSet<Value> seen;
      nn::TopkOp router;
      for (size_t i = 0; i < work.size() && i < 256 && !router; ++i)
        for (Operation *user : work[i].getUsers()) {
          if (auto topk = dyn_cast<nn::TopkOp>(user);
              topk && topk.getInput().getType().getShape().back() == experts &&
              choicesAreSorted(topk)) {
            router = topk;
            break;
          }
          for (Value r : user->getResults())
            if (seen.insert(r).second)
              work.push_back(r);
        }
      if (router)
        found.push_back({param, router.getIndices()});
    }
    return found;
  }

  /// bias += rate * sign(mean load - load), the load of each expert being
  /// the choices of all microbatches (DeepSeek-V3's auxiliary-loss-free
  /// balancing), assigned when the step ends.
  void updateCorrectionBias(OpBuilder &builder, Location loc, nn::ParameterOp bias,
                            ArrayRef<Value> choices) {
    Type f32 = builder.getF32Type(), i64 = builder.getI64Type();
    int64_t experts = bias.getType().getDimSize(0);
    Value load;
    for (Value idx : choices) {
      auto t = cast<RankedTensorType>(idx.getType());
      int64_t n = t.getNumElements();
      Value flat = builder.create<nn::ReshapeOp>(loc, RankedTensorType::get({n, 1}, i64), idx);
      Value iota = builder.create<nn::IotaOp>(loc, RankedTensorType::get({1, experts}, i64),
                                              builder.getI64IntegerAttr(1),
                                              builder.getF64FloatAttr(0), builder.getF64FloatAttr(1));
      Value hit = builder.create<nn::CompareOp>(
          loc, nn::ComparePredicateAttr::get(builder.getContext(), nn::ComparePredicate::eq), flat,
          iota);
      Value ones = builder.create<nn::CastOp>(loc, RankedTensorType::get({n, experts}, f32), hit);
      Value c = builder.create<nn::ReduceSumOp>(loc, ones, builder.getDenseI64ArrayAttr({0}),
                                                UnitAttr());
      load = load ? builder.create<nn::AddOp>(loc, load, c).getResult() : c;
    }
    Value total = builder.create<nn::ReduceSumOp>(loc, load, builder.getDenseI64ArrayAttr({0}),
                                                  UnitAttr());
    Value mean = builder.create<nn::MulOp>(loc, total, scalarConstant(builder, loc, 1.0 / experts));
    auto row = RankedTensorType::get({experts}, f32);
    auto mask = RankedTensorType::get({experts}, builder.getI1Type());
    auto pred = [&](nn::ComparePredicate p) {
      Value cmp = builder.create<nn::CompareOp>(
          loc, mask, nn::ComparePredicateAttr::get(builder.getContext(), p), load, mean);
      return builder.create<nn::CastOp>(loc, row, cmp).getResult();
    };
    Value sign = builder.create<nn::SubOp>(loc, pred(nn::ComparePredicate::lt),
                                           pred(nn::ComparePredicate::gt));
    Value step = builder.create<nn::MulOp>(loc, sign, scalarConstant(builder, loc, moeBiasUpdateRate));
    Value current = bias.getResult();
    if (bias.getType().getElementType() != f32)
      step = builder.create<nn::CastOp>(loc, bias.getType(), step);
    Value next = builder.create<nn::AddOp>(loc, current, step);
    builder.create<nn::AssignOp>(loc, current, next);
  }

  /// The tokens each expert of each mixture-of-experts layer received in
  /// the step, [layers, experts] i64: the differences of the running counts
  /// (offsets) its grouped GEMMs read, summed over the microbatches. Null
  /// without such layers or with layers of different expert counts. In a
  /// pipelined step each layer's row is placed in a [layers, experts] block
  /// of zeros on its own stage and the blocks are added: a sum whose terms
  /// live on several ranks, which the pipeline split reduces over them.
  static Value expertTokenCounts(OpBuilder &builder, Location loc, Block &body) {
    std::map<int64_t, SmallVector<Value>> perMicrobatch; // offsets, first use order
    llvm::DenseSet<Value> seen;
    bool staged = false;
    for (Operation &op : body) {
      auto gmm = dyn_cast<nn::GroupedMatmulOp>(op);
      if (!gmm || loom::isBackward(&op) || !seen.insert(gmm.getOffsets()).second)
        continue;
      staged |= op.hasAttr(pipe::kStageAttr);
      perMicrobatch[loom::getMicrobatch(&op).value_or(0)].push_back(gmm.getOffsets());
    }
    if (perMicrobatch.empty())
      return {};
    const SmallVector<Value> &first = perMicrobatch.begin()->second;
    int64_t layers = first.size();
    int64_t experts = cast<RankedTensorType>(first.front().getType()).getDimSize(0);
    for (auto &[mb, list] : perMicrobatch)
      for (Value v : list)
        if (int64_t(list.size()) != layers ||
            cast<RankedTensorType>(v.getType()).getDimSize(0) != experts)
          return {};
    auto i64 = builder.getI64Type();
    auto row = RankedTensorType::get({experts}, i64);
    SmallVector<Value> rows;
    for (int64_t l = 0; l < layers; ++l) {
      Value total;
      for (auto &[mb, list] : perMicrobatch) {
        Value offsets = list[l];
        if (cast<RankedTensorType>(offsets.getType()).getElementType() != i64)
          offsets = builder.create<nn::CastOp>(loc, row, offsets);
        // counts[e] = offsets[e] - offsets[e - 1], offsets[-1] = 0.
        Value zero = builder.create<nn::ConstantOp>(
            loc, DenseElementsAttr::get(RankedTensorType::get({1}, i64),
                                        builder.getI64IntegerAttr(0).getValue()));
        Value before = zero;
        if (experts > 1) {
          Value head = builder.create<nn::SliceOp>(
              loc, offsets, builder.getDenseI64ArrayAttr({0}),
              builder.getDenseI64ArrayAttr({experts - 1}), builder.getDenseI64ArrayAttr({1}));
          before = builder.create<nn::ConcatOp>(loc, ValueRange{zero, head},
                                                builder.getI64IntegerAttr(0));
        }
        Value counts = builder.create<nn::SubOp>(loc, offsets, before);
        total = total ? builder.create<nn::AddOp>(loc, total, counts).getResult() : counts;
      }
      rows.push_back(builder.create<nn::ReshapeOp>(
          loc, RankedTensorType::get({1, experts}, i64), total));
    }
    return stackLayerRows(builder, loc, rows, staged);
  }

  /// Whether the step's forward is split over pipeline stages.
  static bool isPipelined(Block &body) {
    return llvm::any_of(body, [](Operation &op) { return op.hasAttr(pipe::kStageAttr); });
  }

  /// Per-layer rows [1, ...] (i64) stacked into [layers, ...]. In a
  /// pipelined step the layers' rows live on their own stages: each row is
  /// placed in a [layers, ...] block of zeros and the blocks are added, a
  /// sum whose terms live on several ranks, which the pipeline split
  /// reduces over them.
  static Value stackLayerRows(OpBuilder &builder, Location loc, ArrayRef<Value> rows,
                              bool staged) {
    if (rows.size() == 1)
      return rows.front();
    if (!staged)
      return builder.create<nn::ConcatOp>(loc, rows, builder.getI64IntegerAttr(0));
    const int64_t layers = int64_t(rows.size());
    auto rowType = cast<RankedTensorType>(rows.front().getType());
    Value sum;
    for (int64_t l = 0; l < layers; ++l) {
      SmallVector<Value> parts;
      auto zeros = [&](int64_t n) {
        SmallVector<int64_t> shape(rowType.getShape());
        shape[0] = n;
        auto type = RankedTensorType::get(shape, rowType.getElementType());
        return builder.create<nn::ConstantOp>(
            loc, DenseElementsAttr::get(type, builder.getI64IntegerAttr(0).getValue()));
      };
      if (l > 0)
        parts.push_back(zeros(l));
      parts.push_back(rows[l]);
      if (l + 1 < layers)
        parts.push_back(zeros(layers - l - 1));
      Value block = builder.create<nn::ConcatOp>(loc, parts, builder.getI64IntegerAttr(0));
      sum = sum ? builder.create<nn::AddOp>(loc, sum, block).getResult() : block;
    }
    return sum;
  }

  /// Ends a gradients-only step: returns the loss and each gradient.
  LogicalResult finishWithGradients(OpBuilder &builder, Location loc, func::FuncOp forward,
                                    func::FuncOp step, Value loss,
                                    ArrayRef<std::pair<nn::ParameterOp, Value>> grads) {
    auto f32Scalar = RankedTensorType::get({}, builder.getF32Type());
    if (tensorType(loss).getElementType() != builder.getF32Type())
      loss = builder.create<nn::CastOp>(loc, f32Scalar, loss);
    SmallVector<Value> results{loss};
    SmallVector<Type> types{loss.getType()};
    for (auto [p, g] : grads) {
      results.push_back(g);
      types.push_back(g.getType());
    }
    builder.create<func::ReturnOp>(loc, results);
    runMicrobatchesInTurn(*step.getBody().begin());
    step.setFunctionType(builder.getFunctionType(step.getArgumentTypes(), types));
    loom::setResultName(step, 0, "loss");
    for (auto [i, entry] : llvm::enumerate(grads))
      loom::setResultName(step, i + 1, "grad." + nn::ParameterOp(entry.first).getName().str());
    forward.erase();
    step.setName("main");
    return success();
  }

  /// Each op's key: the largest of its microbatch (loom.microbatch) and its
  /// operands' keys; -1 for ops that read no microbatch (parameters,
  /// constants, the token slices). An op never has a key below its
  /// operands'.
  static llvm::DenseMap<Operation *, int64_t> microbatchKeys(Block &body) {
    llvm::DenseMap<Operation *, int64_t> key;
    for (Operation &op : body) {
      int64_t k = -1;
      for (Value operand : op.getOperands())
        if (Operation *def = operand.getDefiningOp(); def && def->getBlock() == &body)
          k = std::max(k, key.lookup(def));
      if (std::optional<int64_t> mb = loom::getMicrobatch(&op))
        k = std::max(k, *mb);
      key[&op] = k;
    }
    return key;
  }

  /// Orders the step so that each microbatch's forward and backward run
  /// before the next microbatch's forward (gradient accumulation in bounded
  /// memory) rather than every forward first. A stable sort by key keeps
  /// program order within a key, so the new order is still topological.
  static void runMicrobatchesInTurn(Block &body) {
    Operation *terminator = body.getTerminator();
    llvm::DenseMap<Operation *, int64_t> key = microbatchKeys(body);
    // An op of no microbatch whose users all belong to one (the token slices
    // of microbatch m) moves down to it, rather than living from the start.
    for (Operation &op : llvm::reverse(body)) {
      if (&op == terminator || key.lookup(&op) >= 0 || op.use_empty())
        continue;
      std::optional<int64_t> only;
      bool one = true;
      for (Operation *user : op.getUsers()) {
        int64_t k = user->getBlock() == &body ? key.lookup(user) : -1;
        if (k < 0 || (only && *only != k)) {
          one = false;
          break;
        }
        only = k;
      }
      if (one && only)
        key[&op] = *only;
    }
    llvm::SmallVector<std::pair<int64_t, Operation *>> ops;
    for (Operation &op : body)
      if (&op != terminator)
        ops.push_back({key.lookup(&op), &op});
    llvm::stable_sort(ops, [](const auto &a, const auto &b) { return a.first < b.first; });
    for (auto &entry : ops)
      entry.second->moveBefore(terminator);
  }

  /// Builds the adjoints of every value on a path from a trainable parameter
  /// to a loss, at the end of `body`, seeding each loss with `seed`.
  LogicalResult differentiate(OpBuilder &builder, Block *body, ArrayRef<Value> losses,
                              double seed, llvm::DenseMap<Value, Value> &adjoint) {
    SmallVector<Operation *> forwardOps;
    for (Operation &op : *body)
      forwardOps.push_back(&op);

    // Values that depend on a trainable parameter need gradients.
    llvm::DenseSet<Value> active;
    for (Operation *op : forwardOps) {
      if (auto p = dyn_cast<nn::ParameterOp>(op)) {
        if (p.isTrainable())
          active.insert(p.getResult());
        continue;
      }
      // torch's no_grad and detach: constants to autodiff.
      if (isa<nn::StopGradientOp>(op))
        continue;
      if (llvm::any_of(op->getOperands(), [&](Value v) { return active.contains(v); }))
        for (Value r : op->getResults())
          if (isa<FloatType>(tensorType(r).getElementType()))
            active.insert(r);
    }

    for (Value loss : losses)
      adjoint[loss] = scalarConstant(builder, loss.getLoc(), seed);

    CreatedOps created;
    builder.setListener(&created);
    auto accumulate = [&](Value target, Value grad, loom::BackwardKind kind) {
      size_t first = created.ops.size();
      Value &slot = adjoint[target];
      slot = slot ? builder.create<nn::AddOp>(grad.getLoc(), slot, grad).getResult() : grad;
      for (size_t i = first; i < created.ops.size(); ++i)
        loom::setBackwardKind(created.ops[i], kind);
    };
    // Microbatch by microbatch (each one's ops in reverse), then the ops no
    // microbatch owns: a microbatch's backward needs only its own forward,
    // and each parameter's gradient sums the microbatches in order 0..M-1,
    // so a microbatch's activations and gradient terms die before the next
    // microbatch starts (runMicrobatchesInTurn). Where an op that a loss
    // depends on reads two microbatches, all ops in reverse, as written.
    llvm::DenseMap<Operation *, int64_t> key = microbatchKeys(*body);
    llvm::DenseSet<Operation *> needed;
    SmallVector<Operation *> stack;
    for (Value loss : losses)
      if (Operation *def = loss.getDefiningOp())
        stack.push_back(def);
    while (!stack.empty()) {
      Operation *op = stack.pop_back_val();
      if (!needed.insert(op).second)
        continue;
      for (Value operand : op->getOperands())
        if (Operation *def = operand.getDefiningOp(); def && def->getBlock() == body)
          stack.push_back(def);
    }
    bool separable = llvm::all_of(needed, [&](Operation *op) {
      int64_t k = key.lookup(op);
      return k < 0 || llvm::all_of(op->getOperands(), [&](Value operand) {
               Operation *def = operand.getDefiningOp();
               int64_t d = def && def->getBlock() == body ? key.lookup(def) : -1;
               return d < 0 || d == k;
             });
    });
    SmallVector<Operation *> order;
    if (separable) {
      std::map<int64_t, SmallVector<Operation *>> byKey;
      for (Operation *op : forwardOps)
        byKey[key.lookup(op)].push_back(op);
      for (auto &[k, ops] : byKey)
        if (k >= 0)
          llvm::append_range(order, llvm::reverse(ops));
      if (byKey.count(-1))
        llvm::append_range(order, llvm::reverse(byKey[-1]));
    } else {
      llvm::append_range(order, llvm::reverse(forwardOps));
    }

    for (Operation *op : order) {
      SmallVector<Value> resultGrads;
      bool any = false;
      for (Value r : op->getResults()) {
        Value g = adjoint.lookup(r);
        resultGrads.push_back(g);
        any |= static_cast<bool>(g);
      }
      if (!any)
        continue;
      for (auto [index, operand] : llvm::enumerate(op->getOperands())) {
        if (!active.contains(operand))
          continue;
        auto rule = dyn_cast<nn::GradientOpInterface>(op);
        if (!rule) {
          builder.setListener(nullptr);
          return op->emitOpError("has no gradient rule, but a parameter gradient flows through it");
        }
        size_t first = created.ops.size();
        FailureOr<Value> grad = rule.buildOperandGradient(builder, index, resultGrads);
        if (failed(grad)) {
          builder.setListener(nullptr);
          return op->emitOpError("gradient rule failed for operand ") << index;
        }
        loom::BackwardKind kind =
            isWeight(operand) ? loom::BackwardKind::Weight : loom::BackwardKind::Input;
        for (size_t i = first; i < created.ops.size(); ++i) {
          loom::setBackwardKind(created.ops[i], kind);
          if (std::optional<int64_t> mb = loom::getMicrobatch(op))
            loom::setMicrobatch(created.ops[i], *mb);
          // A pipeline stage (--loom-pipeline-partition) goes with its gradient.
          if (std::optional<int64_t> stage = pipe::getStage(op))
            pipe::setStage(created.ops[i], *stage);
        }
        if (*grad)
          accumulate(operand, *grad, kind);
      }
    }
    builder.setListener(nullptr);
    return success();
  }
};

} // namespace

void loom::stripStopGradients(Operation *root) {
  SmallVector<nn::StopGradientOp> stops;
  root->walk([&](nn::StopGradientOp op) { stops.push_back(op); });
  for (nn::StopGradientOp op : stops) {
    op.getResult().replaceAllUsesWith(op.getInput());
    op->erase();
  }
}

namespace {
struct StripStopGradientsPass
    : public loom::impl::StripStopGradientsBase<StripStopGradientsPass> {
  void runOnOperation() override { loom::stripStopGradients(getOperation()); }
};
} // namespace
