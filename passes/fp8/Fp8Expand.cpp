// --loom-fp8-expand: each GEMM under an FP8 recipe becomes an FP8 GEMM on
// explicitly quantized operands (see Passes.td).

#include "passes/fp8/Passes.h"

#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeDialect.h"
#include "runtime/abi/Fp8Tiling.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <map>
#include <tuple>

namespace loom {
#define GEN_PASS_DEF_FP8EXPAND
#include "passes/fp8/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

RankedTensorType tensorType(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A tensor seen as rows: [product of all dims but the last, last].
SmallVector<int64_t, 2> rowsOf(RankedTensorType t) {
  int64_t rows = 1;
  for (int64_t d : t.getShape().drop_back())
    rows *= d;
  return {rows, t.getShape().back()};
}

/// The value `v` is a reshape of: reshapes keep the order of elements, so
/// every view of a tensor with the same rows reads one quantization.
Value reshapeRoot(Value v) {
  while (auto r = v.getDefiningOp<nn::ReshapeOp>())
    v = r.getInput();
  return v;
}

/// One tensor quantized to one format, and which layouts the GEMMs read.
struct Quantized {
  bool direct = false, transposed = false;
  Operation *firstReader = nullptr; // its attributes tag the new ops
  Value q, qT, scale, scaleT;       // scaleT: the transposed copy's (tiled recipes)
};

/// The tiles a recipe scales a [rows, cols] tensor by, cols being the dim
/// its GEMMs contract: one scale (tensorwise), one per row (rowwise), or
/// DeepSeek-V3's 128 x 128 blocks of weights and 1 x 128 tiles of anything
/// else (blockwise). Empty: one scale.
SmallVector<int64_t, 2> tilesFor(nn::Fp8Recipe recipe, bool weight, int64_t rows, int64_t cols) {
  switch (recipe) {
  case nn::Fp8Recipe::rowwise:
    return {rows, 1};
  case nn::Fp8Recipe::blockwise:
    return {weight ? fp8Tiles(rows, kFp8Block) : rows, fp8Tiles(cols, kFp8Block)};
  default:
    return {};
  }
}

/// A tensor as rows [R, C] of one format: what one nn.quantize makes. Under
/// a pipeline a value no microbatch makes (a master weight) is quantized
/// per microbatch that reads it (`microbatch`; -1 otherwise): DualPipe runs
/// its two directions' microbatches on different model copies.
struct QuantKey {
  Value root;
  int64_t rows, cols;
  Type format;
  int64_t microbatch = -1;
  auto tie() const {
    return std::make_tuple(root.getAsOpaquePointer(), rows, cols, format.getAsOpaquePointer(),
                           microbatch);
  }
  bool operator<(const QuantKey &o) const { return tie() < o.tie(); }
};

struct GemmPlan {
  nn::MatmulOp gemm;
  QuantKey lhs, rhs;
  bool lhsTransposed, rhsTransposed; // read from the transposed copy
};

/// The original op's discardable attributes (stage, microbatch), less the
/// policy and any layout.
void tagLike(Operation *made, Operation *from) {
  for (NamedAttribute a : from->getDiscardableAttrs())
    if (a.getName() != nn::kFp8PolicyAttrName)
      made->setAttr(a.getName(), a.getValue());
}

/// tensorwise-delayed (TransformerEngine's delayed scaling): the scale of
/// `rows` from the largest amax of the last `history` steps, kept in a
/// program-state parameter ("fp8.amax_history.<index>", checkpointed like
/// the optimizer's moments), which this step's amax then enters (the
/// newest first, the oldest dropping out). Before any step has recorded
/// one (the history all zero), this step's amax serves. Under TP and DP
/// the amax of a split tensor is all-reduced (max) like any nn.amax, so
/// every rank keeps the same history.
template <typename Tag>
Value delayedScale(OpBuilder &b, Location loc, Value rows, StringAttr format,
                   nn::Fp8PolicyAttr policy, int64_t index, Tag &&tag, Value &current) {
  MLIRContext *ctx = b.getContext();
  auto f32 = Float32Type::get(ctx);
  auto scalar = RankedTensorType::get({}, f32);
  const int64_t n = policy.getHistory();
  auto historyType = RankedTensorType::get({n}, f32);
  Value history;
  {
    OpBuilder::InsertionGuard guard(b);
    auto fn = rows.getParentRegion()->getParentOfType<func::FuncOp>();
    b.setInsertionPointToStart(&fn.getBody().front());
    history = b.create<nn::ParameterOp>(
                   loc, historyType,
                   b.getStringAttr("fp8.amax_history." + std::to_string(index)), b.getUnitAttr(),
                   nn::InitKindAttr::get(ctx, nn::InitKind::zeros), b.getF64FloatAttr(0.0),
                   ElementsAttr())
                  .getResult();
  }
  // The history lives on the pipeline stage of the GEMMs that read it.
  Operation *probe = tag(b.create<nn::AmaxOp>(loc, scalar, rows));
  if (Attribute stage = probe->getAttr(pipe::kStageAttr))
    history.getDefiningOp()->setAttr(pipe::kStageAttr, stage);
  Value amax = probe->getResult(0);
  current = amax;
  Value past = tag(b.create<nn::ReduceMaxOp>(loc, scalar, history, b.getDenseI64ArrayAttr({0}),
                                             /*keepdim=*/false))
                   ->getResult(0);
  Value zero = tag(b.create<nn::ConstantOp>(loc, DenseElementsAttr::get(scalar, 0.0f)))
                   ->getResult(0);
  Value none = tag(b.create<nn::CompareOp>(loc, RankedTensorType::get({}, b.getI1Type()),
                                           nn::ComparePredicate::eq, past, zero))
                   ->getResult(0);
  Value used = tag(b.create<nn::WhereOp>(loc, scalar, none, amax, past))->getResult(0);
  Value scale = tag(b.create<nn::Fp8ScaleOp>(loc, scalar, used, format,
                                             b.getI64IntegerAttr(policy.getMargin())))
                    ->getResult(0);
  // The history, this step's amax first.
  Value next = tag(b.create<nn::ReshapeOp>(loc, RankedTensorType::get({1}, f32), amax))
                   ->getResult(0);
  if (n > 1) {
    Value kept = tag(b.create<nn::SliceOp>(loc, RankedTensorType::get({n - 1}, f32), history,
                                           b.getDenseI64ArrayAttr({0}),
                                           b.getDenseI64ArrayAttr({n - 1}),
                                           b.getDenseI64ArrayAttr({1})))
                     ->getResult(0);
    next = tag(b.create<nn::ConcatOp>(loc, historyType, ValueRange{next, kept},
                                      b.getI64IntegerAttr(0)))
               ->getResult(0);
  }
  tag(b.create<nn::AssignOp>(loc, history, next));
  return scale;
}

/// 1 if quantizing a tensor of these tiles' `amax` with `scale` clips it
/// (some tile's amax / scale, in f32 as nn.quantize divides, past the
/// point where it would round beyond the format's largest value: 464 for
/// e4m3, whose largest is 448, and 59392 for e5m2's 57344; or not a
/// number: an overflow), else 0: an f32 scalar.
template <typename Tag>
Value clipFlag(OpBuilder &b, Location loc, Value amax, Value scale, bool e5m2, Tag &&tag) {
  auto f32 = b.getF32Type();
  auto scalar = RankedTensorType::get({}, f32);
  auto type = cast<RankedTensorType>(amax.getType());
  auto constant = [&](float v) {
    return tag(b.create<nn::ConstantOp>(loc, DenseElementsAttr::get(scalar, v)))->getResult(0);
  };
  Value ratio = tag(b.create<nn::DivOp>(loc, type, amax, scale))->getResult(0);
  Value within = tag(b.create<nn::CompareOp>(loc, RankedTensorType::get(type.getShape(), b.getI1Type()),
                                             nn::ComparePredicate::le, ratio,
                                             constant(e5m2 ? 59392.0f : 464.0f)))
                     ->getResult(0);
  Value flag = tag(b.create<nn::WhereOp>(loc, type, within, constant(0.0f), constant(1.0f)))
                   ->getResult(0);
  if (type.getRank() == 0)
    return flag;
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d < type.getRank(); ++d)
    dims.push_back(d);
  return tag(b.create<nn::ReduceMaxOp>(loc, scalar, flag, b.getDenseI64ArrayAttr(dims),
                                       /*keepdim=*/false))
      ->getResult(0);
}

/// Returns, beside a training step's loss and grad_norm, `fp8_overflows`:
/// how many quantizations this step clipped (their flags summed).
void addOverflowResult(ArrayRef<Value> flags) {
  if (flags.empty())
    return;
  auto fn = Value(flags.front()).getParentRegion()->getParentOfType<func::FuncOp>();
  bool step = false;
  for (unsigned i = 0; i < fn.getNumResults(); ++i)
    if (StringAttr name = loom::getResultName(fn, i); name && name.getValue() == "grad_norm")
      step = true;
  if (!step)
    return;
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  OpBuilder b(ret);
  // In a pipelined step the flags live on several stages: each stage's are
  // summed there (over its microbatches), then the stages' sums, a sum
  // shared by the ranks (pipe.stage -1, as the gradient norm's), which the
  // pipeline split reduces over the pipeline.
  std::map<int64_t, SmallVector<Value>> byStage;
  for (Value flag : flags) {
    auto s = flag.getDefiningOp()->getAttrOfType<IntegerAttr>(pipe::kStageAttr);
    byStage[s ? s.getInt() : -1].push_back(flag);
  }
  const bool staged = byStage.size() > 1 || !byStage.count(-1);
  auto sum = [&](ArrayRef<Value> terms, std::optional<int64_t> stage) {
    Value total = terms.front();
    for (Value term : terms.drop_front()) {
      auto add = b.create<nn::AddOp>(ret.getLoc(), total, term);
      if (stage)
        add->setAttr(pipe::kStageAttr, b.getI64IntegerAttr(*stage));
      total = add;
    }
    return total;
  };
  Value total;
  if (!staged) {
    total = sum(flags, std::nullopt);
  } else {
    SmallVector<Value> perStage;
    for (auto &[stage, terms] : byStage) {
      // The first add combines two microbatches, so every add of the sum
      // runs once its terms exist, not inside one microbatch's forward or
      // backward (a forward flag and a backward one of one microbatch).
      auto mb = [](Value v) { return loom::getMicrobatch(v.getDefiningOp()); };
      for (size_t i = 1; i < terms.size(); ++i)
        if (mb(terms[i]) != mb(terms[0])) {
          std::swap(terms[1], terms[i]);
          break;
        }
      perStage.push_back(sum(terms, stage));
    }
    total = sum(perStage, int64_t(-1));
  }
  ret->insertOperands(ret->getNumOperands(), total);
  SmallVector<Type> results(fn.getResultTypes());
  SmallVector<DictionaryAttr> resultAttrs;
  fn.getAllResultAttrs(resultAttrs);
  results.push_back(total.getType());
  resultAttrs.resize(results.size(), b.getDictionaryAttr({}));
  fn.setFunctionType(b.getFunctionType(fn.getArgumentTypes(), results));
  fn.setAllResultAttrs(resultAttrs);
  loom::setResultName(fn, results.size() - 1, "fp8_overflows");
}

struct Fp8ExpandPass : public loom::impl::Fp8ExpandBase<Fp8ExpandPass> {
  using Fp8ExpandBase::Fp8ExpandBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    Type e4m3 = Float8E4M3FNType::get(ctx), e5m2 = Float8E5M2Type::get(ctx);

    // weights-once: the microbatches' casts of one master weight (a value
    // no microbatch makes) read the first cast's quantization. Not under a
    // pipeline (a stage's microbatches need not run in order) nor for
    // delayed scaling (each quantization enters the amax history).
    const bool anyStage = module
                              .walk([](Operation *op) {
                                return op->hasAttr(pipe::kStageAttr) ? WalkResult::interrupt()
                                                                 : WalkResult::advance();
                              })
                              .wasInterrupted();
    llvm::DenseMap<std::pair<Value, Type>, Value> firstCast;
    auto shared = [&](Value root, nn::Fp8Recipe recipe) -> Value {
      auto castOp = root.getDefiningOp<nn::CastOp>();
      if (!weightsOnce || anyStage || recipe == nn::Fp8Recipe::tensorwise_delayed || !castOp ||
          !castOp->hasAttr("loom.microbatch"))
        return root;
      Value master = castOp.getInput();
      Operation *def = master.getDefiningOp();
      if (def && def->hasAttr("loom.microbatch"))
        return root; // made per microbatch: not a master weight
      return firstCast.try_emplace({master, root.getType()}, root).first->second;
    };

    SmallVector<GemmPlan> plans;
    std::map<QuantKey, Quantized> quantized;
    SmallVector<QuantKey> order; // in first-use order
    llvm::DenseSet<Value> weights;
    bool failedAny = false;
    module.walk([&](nn::MatmulOp gemm) {
      auto policy = gemm->getAttrOfType<nn::Fp8PolicyAttr>(nn::kFp8PolicyAttrName);
      if (!policy)
        return;
      auto lhs = tensorType(gemm.getLhs()), rhs = tensorType(gemm.getRhs());
      if (rhs.getRank() != 2 || lhs.getRank() < 2 || (gemm.getTransposeLhs() && lhs.getRank() != 2)) {
        gemm.emitRemark("stays in ") << lhs.getElementType()
                                     << ": an FP8 GEMM takes a 2-D weight and unbatched rows";
        gemm->removeAttr(nn::kFp8PolicyAttrName);
        return;
      }
      // The target's FP8 GEMM: K and N multiples of the alignment, and for
      // 1 x 128 tiles (blockwise) rows in fours.
      const int64_t k = gemm.getTransposeRhs() ? rhs.getDimSize(1) : rhs.getDimSize(0);
      const int64_t n = gemm.getTransposeRhs() ? rhs.getDimSize(0) : rhs.getDimSize(1);
      const int64_t mt = gemm.getTransposeLhs() ? lhs.getDimSize(1) : rowsOf(lhs)[0];
      // Per rank: the data (and sequence) ranks split the token dim, M or,
      // for a weight gradient (dy^T x, tagged by autodiff), K; the tensor
      // ranks split features.
      const int64_t align = gemmAlignment;
      const bool blockwise = policy.getRecipe() == nn::Fp8Recipe::blockwise;
      const bool weightGradient =
          loom::getBackwardKind(gemm) == loom::BackwardKind::Weight;
      const int64_t kRanks = weightGradient ? tokenRanks : featureRanks;
      const int64_t mRanks = weightGradient ? featureRanks : tokenRanks;
      const int64_t nRanks = featureRanks;
      if (align > 1 && (k % (align * kRanks) || n % (align * nRanks) ||
                        (blockwise && mt % (4 * mRanks)))) {
        auto dim = [](int64_t size, int64_t ranks) {
          return ranks > 1 && size % ranks == 0 ? std::to_string(size / ranks) + " a rank"
                 : ranks > 1 ? std::to_string(size) + " over " + std::to_string(ranks) + " ranks"
                             : std::to_string(size);
        };
        gemm.emitRemark("stays in ")
            << lhs.getElementType() << ": the target's FP8 GEMM needs K and N to be multiples of "
            << align << (blockwise ? " and M of 4" : "") << ", got M = " << dim(mt, mRanks)
            << ", N = " << dim(n, nRanks) << ", K = " << dim(k, kRanks);
        gemm->removeAttr(nn::kFp8PolicyAttrName);
        return;
      }
      auto formatOf = [&](int64_t operand) {
        return policy.getFormat() == nn::Fp8Format::hybrid && policy.getGradient() == operand ? e5m2
                                                                                              : e4m3;
      };
      // Every view of a tensor with the same rows reads one quantization:
      // an operand is [M, K] or [N, K] from its rows, or from their
      // transposed copy.
      // Under a pipeline, a master weight's quantization per microbatch.
      // Under delayed scaling each has its own history, all of them seeing
      // the same weight: the same scales as one shared quantization.
      auto mbAttr = gemm->getAttrOfType<IntegerAttr>("loom.microbatch");
      auto microbatchOf = [&](Value root) -> int64_t {
        if (!anyStage || !mbAttr)
          return -1;
        Operation *def = root.getDefiningOp();
        return def && def->hasAttr("loom.microbatch") ? -1 : mbAttr.getInt();
      };
      auto keyOf = [&](Value operand, int64_t index) {
        SmallVector<int64_t, 2> rc = rowsOf(tensorType(operand));
        Value root = shared(reshapeRoot(operand), policy.getRecipe());
        return QuantKey{root, rc[0], rc[1], formatOf(index), microbatchOf(root)};
      };
      GemmPlan plan{gemm, keyOf(gemm.getLhs(), 0), keyOf(gemm.getRhs(), 1),
                    /*lhsTransposed=*/gemm.getTransposeLhs(),
                    /*rhsTransposed=*/!gemm.getTransposeRhs()};
      for (auto [key, transposed] : {std::pair{plan.lhs, plan.lhsTransposed},
                                     std::pair{plan.rhs, plan.rhsTransposed}}) {
        auto [it, inserted] = quantized.try_emplace(key);
        if (inserted) {
          it->second.firstReader = gemm;
          order.push_back(key);
        }
        (transposed ? it->second.transposed : it->second.direct) = true;
      }
      // A forward GEMM's right operand is a weight (blockwise scales it by
      // 128 x 128 blocks, whichever GEMM reads it).
      if (policy.getGradient() < 0)
        weights.insert(plan.rhs.root);
      plans.push_back(plan);
    });
    if (failedAny)
      return signalPassFailure();

    // Quantize each tensor once per format, right after it is made.
    OpBuilder b(ctx);
    llvm::DenseMap<Block *, Operation *> argumentOps;
    int64_t historyIndex = 0;
    // Delayed scaling's clips, one flag per quantization. Current scaling
    // maps each amax onto the format's largest value, so it can only clip
    // a non-finite amax, whose NaN scale makes the step's loss NaN (an
    // error of the training loop, after the step's metrics are written).
    SmallVector<Value> clipFlags;
    for (const QuantKey &key : order) {
      Quantized &qz = quantized[key];
      Value root = key.root;
      Type format = key.format;
      // After its producer; an argument's at the top of its block, after
      // those of earlier arguments.
      Block *argBlock = nullptr;
      if (Operation *def = root.getDefiningOp()) {
        b.setInsertionPointAfter(def);
      } else {
        argBlock = cast<BlockArgument>(root).getOwner();
        if (Operation *last = argumentOps.lookup(argBlock))
          b.setInsertionPointAfter(last);
        else
          b.setInsertionPointToStart(argBlock);
      }
      Location loc = root.getLoc();
      auto type = tensorType(root);
      Value rows = root;
      SmallVector<int64_t, 2> shape{key.rows, key.cols};
      auto tag = [&](Operation *op) {
        tagLike(op, qz.firstReader);
        return op;
      };
      if (type.getShape() != ArrayRef<int64_t>(shape))
        rows = tag(b.create<nn::ReshapeOp>(loc, RankedTensorType::get(shape, type.getElementType()),
                                           root))
                   ->getResult(0);
      auto policy = qz.firstReader->getAttrOfType<nn::Fp8PolicyAttr>(nn::kFp8PolicyAttrName);
      const nn::Fp8Recipe recipe = policy.getRecipe();
      const bool weight = weights.contains(root);
      StringAttr formatName = b.getStringAttr(format == e5m2 ? "e5m2" : "e4m3");
      auto f32 = Float32Type::get(ctx);
      // The scales of `rows` tiled by `tiles` (of [R, C], or of [C, R] for
      // the transposed copy: its amax runs over x's tiles, then the scales
      // are laid out as the copy's).
      auto scalesOf = [&](ArrayRef<int64_t> tiles, bool forCopy) -> Value {
        SmallVector<int64_t, 2> ofX(tiles);
        if (forCopy && !tiles.empty())
          ofX = {tiles[1], tiles[0]};
        Value amax = tag(b.create<nn::AmaxOp>(loc, RankedTensorType::get(ofX, f32), rows))
                         ->getResult(0);
        Value scale = tag(b.create<nn::Fp8ScaleOp>(loc, amax.getType(), amax, formatName,
                                                   b.getI64IntegerAttr(policy.getMargin())))
                          ->getResult(0);
        if (!forCopy || tiles.empty() || ofX == SmallVector<int64_t, 2>(tiles))
          return scale;
        auto type = RankedTensorType::get(tiles, f32);
        if (ofX[0] == 1 || ofX[1] == 1) // one row or column of scales: the same order
          return tag(b.create<nn::ReshapeOp>(loc, type, scale))->getResult(0);
        return tag(b.create<nn::TransposeOp>(loc, type, scale, b.getDenseI64ArrayAttr({1, 0})))
            ->getResult(0);
      };
      if (recipe == nn::Fp8Recipe::tensorwise_delayed) {
        Value current;
        qz.scale = delayedScale(b, loc, rows, formatName, policy, historyIndex++, tag, current);
        clipFlags.push_back(clipFlag(b, loc, current, qz.scale, format == e5m2, tag));
      } else
        qz.scale = scalesOf(tilesFor(recipe, weight, key.rows, key.cols), false);
      SmallVector<Value, 3> operands{rows, qz.scale};
      // One scale per tensor (tensorwise, current or delayed): the copy is
      // the same values transposed, under the same scale. Tiled recipes
      // scale the copy by its own tiles.
      const bool oneScale =
          recipe == nn::Fp8Recipe::tensorwise || recipe == nn::Fp8Recipe::tensorwise_delayed;
      if (qz.transposed && !oneScale) {
        SmallVector<int64_t, 2> tilesT = tilesFor(recipe, weight, key.cols, key.rows);
        // A weight's 128 x 128 blocks are the same blocks transposed.
        qz.scaleT = weight && recipe == nn::Fp8Recipe::blockwise
                        ? tag(b.create<nn::TransposeOp>(loc, RankedTensorType::get(tilesT, f32),
                                                        qz.scale, b.getDenseI64ArrayAttr({1, 0})))
                              ->getResult(0)
                        : scalesOf(tilesT, true);
        operands.push_back(qz.scaleT);
      }
      SmallVector<Type, 2> results{RankedTensorType::get(shape, format)};
      if (qz.transposed)
        results.push_back(RankedTensorType::get({shape[1], shape[0]}, format));
      Operation *q = tag(b.create<nn::QuantizeOp>(loc, results, operands));
      qz.q = q->getResult(0);
      if (qz.transposed)
        qz.qT = q->getResult(1);
      if (argBlock)
        argumentOps[argBlock] = q;
    }

    // Each GEMM reads its operands' FP8 values: [M, K] and [N, K].
    for (GemmPlan &plan : plans) {
      nn::MatmulOp gemm = plan.gemm;
      Quantized &a = quantized[plan.lhs];
      Quantized &w = quantized[plan.rhs];
      Value lhs = plan.lhsTransposed ? a.qT : a.q;
      Value rhs = plan.rhsTransposed ? w.qT : w.q;
      Value lhsScale = plan.lhsTransposed && a.scaleT ? a.scaleT : a.scale;
      Value rhsScale = plan.rhsTransposed && w.scaleT ? w.scaleT : w.scale;
      b.setInsertionPoint(gemm);
      Location loc = gemm.getLoc();
      auto out = tensorType(gemm.getResult());
      auto product = RankedTensorType::get({tensorType(lhs).getDimSize(0), tensorType(rhs).getDimSize(0)},
                                           out.getElementType());
      Operation *mm = b.create<nn::ScaledMatmulOp>(loc, product, lhs, rhs, lhsScale, rhsScale);
      tagLike(mm, gemm);
      Value result = mm->getResult(0);
      if (product != out) {
        Operation *back = b.create<nn::ReshapeOp>(loc, out, result);
        tagLike(back, gemm);
        result = back->getResult(0);
      }
      gemm.getResult().replaceAllUsesWith(result);
      gemm.erase();
    }
    addOverflowResult(clipFlags);
  }
};

} // namespace
