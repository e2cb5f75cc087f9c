// Sharding rules of the nn ops (ShardingRuleOpInterface): which operand and
// result dims are the same index space, which are contracted, which must
// stay whole. passes/sharding reads only these.

#include "dialects/nn/NNOps.h"

#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace loom::nn;

namespace {

using Dims = SmallVector<SmallVector<int>>;

ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }

/// Builds a rule from per-operand and per-result dims.
struct RuleBuilder {
  ShardingRule rule;
  explicit RuleBuilder(Operation *op) {
    for (Value v : op->getOperands())
      rule.operandDims.push_back(Dims(shapeOf(v).size()));
    for (Value v : op->getResults())
      rule.resultDims.push_back(Dims(shapeOf(v).size()));
  }
  int factor(FactorKind kind, int64_t size, bool meanScaled = false) {
    return rule.addFactor(kind, size, meanScaled);
  }
  void operand(unsigned i, int64_t d, int f) {
    if (i < rule.operandDims.size() && d >= 0 && d < int64_t(rule.operandDims[i].size()))
      rule.operandDims[i][d].push_back(f);
  }
  void result(unsigned i, int64_t d, int f) {
    if (i < rule.resultDims.size() && d >= 0 && d < int64_t(rule.resultDims[i].size()))
      rule.resultDims[i][d].push_back(f);
  }
  /// Every operand and result dim aligned from the right with `shape`
  /// (NumPy broadcasting): dims of size 1 where `shape` is larger get none.
  void broadcastAll(Operation *op, ArrayRef<int64_t> shape, ArrayRef<int> factors) {
    auto align = [&](Dims &dims, ArrayRef<int64_t> s) {
      int64_t offset = int64_t(shape.size()) - int64_t(s.size());
      for (int64_t d = 0; d < int64_t(s.size()); ++d) {
        int64_t full = d + offset;
        if (full < 0 || factors[full] < 0)
          continue;
        if (s[d] == shape[full])
          dims[d].push_back(factors[full]);
      }
    };
    for (auto [i, v] : llvm::enumerate(op->getOperands()))
      align(rule.operandDims[i], shapeOf(v));
    for (auto [i, v] : llvm::enumerate(op->getResults()))
      align(rule.resultDims[i], shapeOf(v));
  }
};

/// The largest shape among operands and results (the broadcast shape).
SmallVector<int64_t> broadcastShape(Operation *op) {
  SmallVector<int64_t> shape;
  auto merge = [&](ArrayRef<int64_t> s) {
    if (s.size() > shape.size())
      shape.insert(shape.begin(), s.size() - shape.size(), 1);
    int64_t offset = int64_t(shape.size()) - int64_t(s.size());
    for (int64_t d = 0; d < int64_t(s.size()); ++d)
      shape[d + offset] = std::max(shape[d + offset], s[d]);
  };
  for (Value v : op->getOperands())
    if (isa<RankedTensorType>(v.getType()))
      merge(shapeOf(v));
  for (Value v : op->getResults())
    merge(shapeOf(v));
  return shape;
}

/// Elementwise over the broadcast shape, with `blocked` dims (of that shape)
/// kept whole.
ShardingRule elementwise(Operation *op, ArrayRef<int64_t> blocked = {}) {
  RuleBuilder b(op);
  SmallVector<int64_t> shape = broadcastShape(op);
  SmallVector<int> factors;
  for (auto [d, size] : llvm::enumerate(shape))
    factors.push_back(size == 1 ? -1
                                : b.factor(llvm::is_contained(blocked, int64_t(d))
                                               ? FactorKind::Blocked
                                               : FactorKind::Parallel,
                                           size));
  b.broadcastAll(op, shape, factors);
  return b.rule;
}

/// A rule whose every dim is blocked (ops that must see whole tensors).
ShardingRule allBlocked(Operation *op) {
  SmallVector<int64_t> all;
  for (int64_t d = 0, e = broadcastShape(op).size(); d < e; ++d)
    all.push_back(d);
  return elementwise(op, all);
}

/// Normalizations over the last dim of operand 0 (shared by [D] weights).
ShardingRule lastDimWhole(Operation *op) {
  int64_t rank = shapeOf(op->getOperand(0)).size();
  return elementwise(op, {rank - 1});
}

} // namespace

ShardingRule loom::nn::elementwiseShardingRule(Operation *op, bool linear) {
  ShardingRule rule = elementwise(op);
  rule.linear = linear;
  return rule;
}

ShardingRule loom::nn::binaryShardingRule(Operation *op) {
  ShardingRule rule = elementwise(op);
  rule.additive = isa<AddOp, SubOp>(op);
  rule.linear = isa<MulOp>(op);
  return rule;
}

ShardingRule loom::nn::reductionShardingRule(Operation *op) {
  RuleBuilder b(op);
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  auto dims = op->getAttrOfType<DenseI64ArrayAttr>("dims").asArrayRef();
  bool keepdim = op->hasAttr("keepdim");
  // Sums split into partial sums; a mean into partial sums scaled by 1/g;
  // a max needs the whole dim.
  bool isMax = isa<ReduceMaxOp>(op), isMean = isa<ReduceMeanOp>(op);
  int64_t out = 0;
  for (int64_t d = 0; d < int64_t(in.size()); ++d) {
    bool reduced = llvm::is_contained(dims, d) || llvm::is_contained(dims, d - int64_t(in.size()));
    if (reduced) {
      if (in[d] != 1)
        b.operand(0, d, b.factor(isMax ? FactorKind::Blocked : FactorKind::Reduction, in[d],
                                 isMean));
      if (keepdim)
        ++out;
      continue;
    }
    if (in[d] != 1) {
      int f = b.factor(FactorKind::Parallel, in[d]);
      b.operand(0, d, f);
      b.result(0, out, f);
    }
    ++out;
  }
  ShardingRule rule = b.rule;
  rule.linear = !isMax;
  return rule;
}

ShardingRule loom::nn::wholeDimShardingRule(Operation *op, int64_t dim) {
  int64_t rank = shapeOf(op->getOperand(0)).size();
  return elementwise(op, {dim < 0 ? dim + rank : dim});
}

//===----------------------------------------------------------------------===//
// Ops with their own rule
//===----------------------------------------------------------------------===//

ShardingRule ConstantOp::getShardingRule() {
  // Only a splat has the same value in every block.
  auto dense = dyn_cast<DenseElementsAttr>(getValue());
  return dense && dense.isSplat() ? elementwise(*this) : allBlocked(*this);
}
ShardingRule ParameterOp::getShardingRule() {
  // Weights carried in the executable are cut by the runtime at load time.
  return elementwise(*this);
}
ShardingRule IotaOp::getShardingRule() { return elementwise(*this, {int64_t(getDim())}); }
ShardingRule GeluOp::getShardingRule() { return elementwise(*this); }
ShardingRule CompareOp::getShardingRule() { return elementwise(*this); }
ShardingRule WhereOp::getShardingRule() {
  ShardingRule rule = elementwise(*this);
  // where(c, 0, x) and where(c, x, 0) are linear in x: a partial sum passes
  // through, the zeros summing to zero (the masks of the experts' rows).
  auto zero = [](Value v) {
    DenseElementsAttr a;
    if (!matchPattern(v, m_Constant(&a)) || !a.isSplat())
      return false;
    if (isa<FloatType>(a.getElementType()))
      return a.getSplatValue<APFloat>().isZero();
    return false;
  };
  rule.linear = zero(getLhs()) || zero(getRhs());
  return rule;
}
ShardingRule CastOp::getShardingRule() { return elementwise(*this); }
ShardingRule DropoutOp::getShardingRule() {
  // The mask hashes the global element index: a block would draw another.
  return allBlocked(*this);
}
ShardingRule GeluGradOp::getShardingRule() { return elementwise(*this); }
ShardingRule SiluGradOp::getShardingRule() { return elementwise(*this); }
ShardingRule LayerNormOp::getShardingRule() { return lastDimWhole(*this); }
ShardingRule RmsNormOp::getShardingRule() { return lastDimWhole(*this); }
ShardingRule LayerNormGradOp::getShardingRule() { return lastDimWhole(*this); }
ShardingRule RmsNormGradOp::getShardingRule() { return lastDimWhole(*this); }
ShardingRule AssignOp::getShardingRule() { return elementwise(*this); }
ShardingRule OffloadOp::getShardingRule() { return elementwise(*this); }
ShardingRule ReloadOp::getShardingRule() { return elementwise(*this); }

// A fusion group is formed after sharding (--loom-fuse): conservatively,
// no dim of its inputs or results may be split (no factors at all).
ShardingRule FusedOp::getShardingRule() { return RuleBuilder(*this).rule; }
ShardingRule YieldOp::getShardingRule() { return RuleBuilder(*this).rule; }

ShardingRule AdamWOp::getShardingRule() {
  ShardingRule rule = elementwise(*this);
  rule.optimizerUpdate = true;
  return rule;
}

ShardingRule RopeOp::getShardingRule() {
  // x [..., S, D], cos/sin [S, D]: positions split with x; the rotation
  // pairs elements across D.
  int64_t rank = getType().getRank();
  if (getTranspose() == RopeTranspose::none)
    return elementwise(*this, {rank - 1});
  // Dims -3 and -2 swap between x and the result; the tables follow the
  // positions, wherever they are.
  RuleBuilder b(*this);
  ArrayRef<int64_t> out = getType().getShape();
  int64_t posDim = getTranspose() == RopeTranspose::input ? rank - 2 : rank - 3;
  for (int64_t d = 0; d < rank; ++d) {
    int f = out[d] == 1 ? -1
                        : b.factor(d == rank - 1 ? FactorKind::Blocked : FactorKind::Parallel,
                                   out[d]);
    if (f < 0)
      continue;
    int64_t inDim = d == rank - 3 ? rank - 2 : d == rank - 2 ? rank - 3 : d;
    b.result(0, d, f);
    b.operand(0, inDim, f);
    if (d == posDim || d == rank - 1) {
      b.operand(1, d == posDim ? 0 : 1, f);
      b.operand(2, d == posDim ? 0 : 1, f);
    }
  }
  return b.rule;
}

ShardingRule MatmulOp::getShardingRule() {
  RuleBuilder b(*this);
  ArrayRef<int64_t> lhs = shapeOf(getLhs()), rhs = shapeOf(getRhs()), out = getType().getShape();
  int64_t lr = lhs.size(), rr = rhs.size(), orank = out.size();
  int64_t mDim = getTransposeLhs() ? lr - 1 : lr - 2, kLhs = getTransposeLhs() ? lr - 2 : lr - 1;
  int64_t kRhs = getTransposeRhs() ? rr - 1 : rr - 2, nDim = getTransposeRhs() ? rr - 2 : rr - 1;
  int m = b.factor(FactorKind::Parallel, out[orank - 2]);
  int n = b.factor(FactorKind::Parallel, out[orank - 1]);
  int k = b.factor(FactorKind::Reduction, lhs[kLhs]);
  b.operand(0, mDim, m);
  b.operand(0, kLhs, k);
  b.operand(1, kRhs, k);
  b.operand(1, nDim, n);
  b.result(0, orank - 2, m);
  b.result(0, orank - 1, n);
  // Batch dims broadcast, aligned from the right.
  for (int64_t d = 0; d < orank - 2; ++d) {
    if (out[d] == 1)
      continue;
    int f = b.factor(FactorKind::Parallel, out[d]);
    b.result(0, d, f);
    int64_t dl = d - (orank - lr), dr = d - (orank - rr);
    if (dl >= 0 && lhs[dl] == out[d])
      b.operand(0, dl, f);
    if (dr >= 0 && rhs[dr] == out[d])
      b.operand(1, dr, f);
  }
  ShardingRule rule = b.rule;
  rule.linear = true;
  return rule;
}

/// q [B, Hq, S, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv]: batch and heads
/// split (grouped heads stay with their KV head when both divide); the
/// sequence and head dims are whole (softmax over keys, causal offsets).
static ShardingRule attentionRule(Operation *op, unsigned numInputs) {
  RuleBuilder b(op);
  // seq_major bit i: the op's tensor i (operands, then results) is stored
  // [B, S, H, D], its heads in dim 2.
  const int64_t mask = cast<IntegerAttr>(op->getAttr("seq_major")).getInt();
  ArrayRef<int64_t> q = shapeOf(op->getOperand(0)), k = shapeOf(op->getOperand(1));
  int batch = b.factor(FactorKind::Parallel, q[0]);
  int heads = b.factor(FactorKind::Parallel, k[mask & 2 ? 2 : 1]);
  auto each = [&](auto &&fn) {
    for (unsigned i = 0; i < numInputs; ++i)
      fn(true, i);
    for (unsigned i = 0; i < op->getNumResults(); ++i)
      fn(false, i);
  };
  each([&](bool isOperand, unsigned i) {
    Value v = isOperand ? op->getOperand(i) : op->getResult(i);
    ArrayRef<int64_t> s = shapeOf(v);
    auto add = [&](int64_t d, int f) { isOperand ? b.operand(i, d, f) : b.result(i, d, f); };
    const unsigned position = isOperand ? i : op->getNumOperands() + i;
    const bool seqMajor = mask >> position & 1;
    if (s[0] == q[0])
      add(0, batch);
    add(seqMajor ? 2 : 1, heads);
    // Sequence and head dims; the statistics [B, H, S] have no head dim.
    for (int64_t d = 1; d < int64_t(s.size()); ++d)
      if (d != (seqMajor ? 2 : 1))
        add(d, b.factor(FactorKind::Blocked, s[d]));
  });
  return b.rule;
}
ShardingRule AttentionOp::getShardingRule() { return attentionRule(*this, 3); }
ShardingRule AttentionGradOp::getShardingRule() { return attentionRule(*this, 4); }
ShardingRule AttentionWithStatsOp::getShardingRule() { return attentionRule(*this, 3); }
ShardingRule AttentionGradWithStatsOp::getShardingRule() { return attentionRule(*this, 6); }

/// FP8: a tensor and its tiling (a scale or an amax, `tiling` the operand or
/// result index it is at; `tilingIsResult` for nn.amax). A dim the tiling
/// matches element for element splits both; a dim with one tile splits the
/// tensor (for amax, a max over it: each rank's amax is partial, settled by
/// an all-reduce max); any other dim stays whole. A rank-0 tiling is one
/// value: replicated. nn.quantize's transposed copy has the input's dims
/// with the last two swapped, and its own tiling where it has one.
static ShardingRule fp8Rule(Operation *op, unsigned tiling, bool tilingIsResult) {
  RuleBuilder b(op);
  Value x = op->getOperand(0);
  Value t = tilingIsResult ? op->getResult(tiling) : op->getOperand(tiling);
  ArrayRef<int64_t> xs = shapeOf(x), ts = shapeOf(t);
  const bool reduces = tilingIsResult;
  const bool transposedCopy = !tilingIsResult && op->getNumResults() == 2;
  const bool copyTiling = transposedCopy && op->getNumOperands() == 3;
  ArrayRef<int64_t> cs = copyTiling ? shapeOf(op->getOperand(2)) : ArrayRef<int64_t>();
  const int64_t rank = xs.size();
  auto swapped = [&](int64_t d) { return d == rank - 1 ? rank - 2 : d == rank - 2 ? rank - 1 : d; };
  for (int64_t d = 0; d < rank; ++d) {
    if (xs[d] == 1)
      continue;
    const bool scalar = ts.empty();
    const bool matches = !scalar && ts[d] == xs[d];
    bool oneTile = scalar || ts[d] == 1;
    // The copy's tiling: matching or one tile, or the dim stays whole.
    const bool copyMatches = copyTiling && !cs.empty() && cs[swapped(d)] == xs[d];
    const bool copyWhole = copyTiling && !cs.empty() && !copyMatches && cs[swapped(d)] != 1;
    FactorKind kind = copyWhole                                  ? FactorKind::Blocked
                      : matches || (oneTile && !reduces)         ? FactorKind::Parallel
                      : oneTile                                  ? FactorKind::Reduction
                                                                 : FactorKind::Blocked;
    int f = b.factor(kind, xs[d]);
    b.operand(0, d, f);
    if (!tilingIsResult)
      b.result(0, d, f);
    if (transposedCopy)
      b.result(1, swapped(d), f);
    if (matches && kind != FactorKind::Blocked)
      tilingIsResult ? b.result(tiling, d, f) : b.operand(tiling, d, f);
    if (copyMatches && kind != FactorKind::Blocked)
      b.operand(2, swapped(d), f);
  }
  ShardingRule rule = b.rule;
  rule.reducesByMax = reduces;
  return rule;
}
ShardingRule QuantizeOp::getShardingRule() { return fp8Rule(*this, 1, false); }
ShardingRule DequantizeOp::getShardingRule() { return fp8Rule(*this, 1, false); }
ShardingRule AmaxOp::getShardingRule() { return fp8Rule(*this, 0, true); }
ShardingRule Fp8ScaleOp::getShardingRule() { return elementwise(*this); }
ShardingRule ScaledMatmulOp::getShardingRule() {
  // [M, K] x [N, K] -> [M, N]: rows and columns split, with the scales of
  // one per row; K is contracted (a split leaves partial sums, which scales
  // of one tile along K keep linear). A dim the scales cut into tiles of
  // more than one element stays whole.
  RuleBuilder b(*this);
  ArrayRef<int64_t> lhs = shapeOf(getLhs()), rhs = shapeOf(getRhs());
  ArrayRef<int64_t> sa = shapeOf(getLhsScale()), sb = shapeOf(getRhsScale());
  auto rowKind = [](ArrayRef<int64_t> scale, int64_t rows) {
    return scale.empty() || scale[0] == 1 || scale[0] == rows ? FactorKind::Parallel
                                                               : FactorKind::Blocked;
  };
  const bool kTiled = (!sa.empty() && sa[1] != 1) || (!sb.empty() && sb[1] != 1);
  int m = b.factor(rowKind(sa, lhs[0]), lhs[0]);
  int n = b.factor(rowKind(sb, rhs[0]), rhs[0]);
  int k = b.factor(kTiled ? FactorKind::Blocked : FactorKind::Reduction, lhs[1]);
  b.operand(0, 0, m);
  b.operand(0, 1, k);
  b.operand(1, 0, n);
  b.operand(1, 1, k);
  if (!sa.empty() && sa[0] == lhs[0] && lhs[0] != 1)
    b.operand(2, 0, m);
  if (!sb.empty() && sb[0] == rhs[0] && rhs[0] != 1)
    b.operand(3, 0, n);
  b.result(0, 0, m);
  b.result(0, 1, n);
  ShardingRule rule = b.rule;
  rule.linear = !kTiled;
  return rule;
}

ShardingRule EmbeddingOp::getShardingRule() {
  // table [V, D], ids [...] -> [..., D]: onehot(ids) @ table, so the
  // vocabulary is contracted. A block of rows (vocab_start, set by the
  // partitioner) gives zero rows for other blocks' ids: partial sums.
  RuleBuilder b(*this);
  ArrayRef<int64_t> ids = shapeOf(getIds());
  b.operand(0, 0, b.factor(FactorKind::Reduction, shapeOf(getTable())[0]));
  int d = b.factor(FactorKind::Parallel, shapeOf(getTable())[1]);
  b.operand(0, 1, d);
  b.result(0, ids.size(), d);
  for (int64_t i = 0; i < int64_t(ids.size()); ++i) {
    if (ids[i] == 1)
      continue;
    int f = b.factor(FactorKind::Parallel, ids[i]);
    b.operand(1, i, f);
    b.result(0, i, f);
  }
  return b.rule;
}

ShardingRule EmbeddingGradOp::getShardingRule() {
  // ids [...], grad [..., D] -> [V, D]: positions are summed over; a block
  // of the table's rows (vocab_start) adds up its own ids only.
  RuleBuilder b(*this);
  ArrayRef<int64_t> ids = shapeOf(getIds());
  b.result(0, 0, b.factor(FactorKind::Parallel, getNumEmbeddings()));
  int d = b.factor(FactorKind::Parallel, getType().getDimSize(1));
  b.operand(1, ids.size(), d);
  b.result(0, 1, d);
  for (int64_t i = 0; i < int64_t(ids.size()); ++i) {
    if (ids[i] == 1)
      continue;
    int f = b.factor(FactorKind::Reduction, ids[i]);
    b.operand(0, i, f);
    b.operand(1, i, f);
  }
  return b.rule;
}

/// The rows factor of a loss: split rows make a mean's partial sums scaled
/// by 1/g (exact when every rank has as many counted rows).
static int lossRows(RuleBuilder &b, int64_t rows, LossReduction reduction, bool inResult) {
  bool none = reduction == LossReduction::none;
  return b.factor(none || inResult ? FactorKind::Parallel : FactorKind::Reduction, rows,
                  reduction == LossReduction::mean);
}

/// A loss of operand 0 [N, C] (logits, or the blocks' statistics) against
/// labels [N]: rows as the reduction says, the columns split as `columns`.
static void lossRule(RuleBuilder &b, Value input, LossReduction reduction, FactorKind columns) {
  int n = lossRows(b, shapeOf(input)[0], reduction, false);
  b.operand(0, 0, n);
  b.operand(1, 0, n);
  if (reduction == LossReduction::none)
    b.result(0, 0, n);
  b.operand(0, 1, b.factor(columns, shapeOf(input)[1]));
}

ShardingRule CrossEntropyOp::getShardingRule() {
  // logits [N, C], labels [N]. The classes are summed over (in the
  // softmax's normalizer); split, the partitioner computes the loss the
  // vocabulary-parallel way (stats of each block, gathered, combined).
  RuleBuilder b(*this);
  lossRule(b, getLogits(), getReduction(), FactorKind::Reduction);
  return b.rule;
}

/// The logits gradient of a cross-entropy: row r's gradient divides by the
/// counted rows of the whole batch; the classes split as `classes` says.
/// Returns the rows factor.
static int lossGradRule(RuleBuilder &b, Value logits, Value grad, LossReduction reduction,
                        FactorKind classes) {
  int n = lossRows(b, shapeOf(logits)[0], reduction, true);
  b.operand(0, 0, n);
  b.operand(1, 0, n);
  if (shapeOf(grad).size() == 1)
    b.operand(2, 0, n);
  b.result(0, 0, n);
  int c = b.factor(classes, shapeOf(logits)[1]);
  b.operand(0, 1, c);
  b.result(0, 1, c);
  return n;
}

ShardingRule CrossEntropyGradOp::getShardingRule() {
  // Split classes: each block's gradient (nn.cross_entropy_block_grad).
  RuleBuilder b(*this);
  lossGradRule(b, getLogits(), getGrad(), getReduction(), FactorKind::Parallel);
  return b.rule;
}

ShardingRule LinearCrossEntropyOp::getShardingRule() {
  // x [N, H], w [V, H], labels [N], dloss [] -> loss [], dx [N, H], dw [V, H]:
  // made after sharding (--loom-fuse-linear-cross-entropy), from one rank's
  // whole LM head. Nothing of it may be split.
  RuleBuilder b(*this);
  int n = b.factor(FactorKind::Blocked, shapeOf(getInput())[0]);
  int h = b.factor(FactorKind::Blocked, shapeOf(getInput())[1]);
  int v = b.factor(FactorKind::Blocked, shapeOf(getWeight())[0]);
  b.operand(0, 0, n);
  b.operand(0, 1, h);
  b.operand(1, 0, v);
  b.operand(1, 1, h);
  b.operand(2, 0, n);
  b.result(1, 0, n);
  b.result(1, 1, h);
  b.result(2, 0, v);
  b.result(2, 1, h);
  return b.rule;
}

ShardingRule CrossEntropyStatsOp::getShardingRule() {
  // Per row: rows split alike; the block of classes stays whole.
  RuleBuilder b(*this);
  int n = b.factor(FactorKind::Parallel, shapeOf(getLogits())[0]);
  b.operand(0, 0, n);
  b.operand(1, 0, n);
  b.result(0, 0, n);
  b.operand(0, 1, b.factor(FactorKind::Blocked, shapeOf(getLogits())[1]));
  b.result(0, 1, b.factor(FactorKind::Blocked, 3));
  return b.rule;
}

ShardingRule CrossEntropyCombineOp::getShardingRule() {
  // Every block's statistics, whole.
  RuleBuilder b(*this);
  lossRule(b, getStats(), getReduction(), FactorKind::Blocked);
  return b.rule;
}

ShardingRule CrossEntropyBlockGradOp::getShardingRule() {
  // A block already: its classes stay whole; the statistics of all blocks too.
  RuleBuilder b(*this);
  int n = lossGradRule(b, getLogits(), getGrad(), getReduction(), FactorKind::Blocked);
  b.operand(3, 0, n);
  b.operand(3, 1, b.factor(FactorKind::Blocked, shapeOf(getStats())[1]));
  return b.rule;
}

ShardingRule ReshapeOp::getShardingRule() {
  // Groups of dims with equal products; within a group, the side with one
  // dim is made of the other side's dims as factors (major first).
  RuleBuilder b(*this);
  ArrayRef<int64_t> in = shapeOf(getInput()), out = getType().getShape();
  SmallVector<int64_t> inDims, outDims;
  for (int64_t d = 0; d < int64_t(in.size()); ++d)
    if (in[d] != 1)
      inDims.push_back(d);
  for (int64_t d = 0; d < int64_t(out.size()); ++d)
    if (out[d] != 1)
      outDims.push_back(d);
  size_t i = 0, j = 0;
  while (i < inDims.size() && j < outDims.size()) {
    SmallVector<int64_t> gi{inDims[i]}, gj{outDims[j]};
    int64_t pi = in[inDims[i++]], pj = out[outDims[j++]];
    while (pi != pj) {
      if (pi < pj && i < inDims.size()) {
        gi.push_back(inDims[i]);
        pi *= in[inDims[i++]];
      } else if (pj < pi && j < outDims.size()) {
        gj.push_back(outDims[j]);
        pj *= out[outDims[j++]];
      } else {
        break;
      }
    }
    if (gi.size() == 1) {
      for (int64_t d : gj) {
        int f = b.factor(gj.size() == 1 ? FactorKind::Parallel : FactorKind::Parallel, out[d]);
        b.result(0, d, f);
        b.operand(0, gi[0], f);
      }
    } else if (gj.size() == 1) {
      for (int64_t d : gi) {
        int f = b.factor(FactorKind::Parallel, in[d]);
        b.operand(0, d, f);
        b.result(0, gj[0], f);
      }
    } else {
      int f = b.factor(FactorKind::Blocked, pi);
      for (int64_t d : gi)
        b.operand(0, d, f);
      for (int64_t d : gj)
        b.result(0, d, f);
    }
  }
  ShardingRule rule = b.rule;
  rule.linear = true;
  return rule;
}

ShardingRule TransposeOp::getShardingRule() {
  RuleBuilder b(*this);
  ArrayRef<int64_t> in = shapeOf(getInput());
  for (auto [d, from] : llvm::enumerate(getPermutation())) {
    if (in[from] == 1)
      continue;
    int f = b.factor(FactorKind::Parallel, in[from]);
    b.operand(0, from, f);
    b.result(0, d, f);
  }
  ShardingRule rule = b.rule;
  rule.linear = true;
  return rule;
}

ShardingRule BroadcastOp::getShardingRule() { return elementwise(*this); }

ShardingRule SliceOp::getShardingRule() {
  // Only dims taken whole may be split.
  ArrayRef<int64_t> in = shapeOf(getInput());
  SmallVector<int64_t> cut;
  for (int64_t d = 0; d < int64_t(in.size()); ++d)
    if (getStarts()[d] != 0 || getLimits()[d] != in[d] || getStrides()[d] != 1)
      cut.push_back(d);
  return elementwise(*this, cut);
}

ShardingRule PadOp::getShardingRule() {
  SmallVector<int64_t> padded;
  for (int64_t d = 0; d < getType().getRank(); ++d)
    if (getLow()[d] || getHigh()[d] || getInterior()[d])
      padded.push_back(d);
  return elementwise(*this, padded);
}

ShardingRule ConcatOp::getShardingRule() {
  int64_t rank = getType().getRank();
  // getDim() is unsigned (I64Attr): compare its signed value.
  int64_t dim = static_cast<int64_t>(getDim());
  return elementwise(*this, {dim < 0 ? dim + rank : dim});
}

ShardingRule SplitOp::getShardingRule() {
  int64_t rank = shapeOf(getInput()).size();
  // getDim() is unsigned (I64Attr): compare its signed value.
  int64_t dim = static_cast<int64_t>(getDim());
  return elementwise(*this, {dim < 0 ? dim + rank : dim});
}

ShardingRule GatherOp::getShardingRule() {
  // data [P..., A, Q...], indices [I...] -> [P..., I..., Q...].
  RuleBuilder b(*this);
  ArrayRef<int64_t> data = shapeOf(getData()), idx = shapeOf(getIndices());
  int64_t axis = getAxis() < 0 ? getAxis() + int64_t(data.size()) : getAxis();
  int64_t r = 0;
  for (int64_t d = 0; d < int64_t(data.size()); ++d) {
    if (d == axis) {
      b.operand(0, d, b.factor(FactorKind::Blocked, data[d]));
      for (int64_t i = 0; i < int64_t(idx.size()); ++i, ++r) {
        if (idx[i] == 1)
          continue;
        int f = b.factor(FactorKind::Parallel, idx[i]);
        b.operand(1, i, f);
        b.result(0, r, f);
      }
      continue;
    }
    if (data[d] != 1) {
      int f = b.factor(FactorKind::Parallel, data[d]);
      b.operand(0, d, f);
      b.result(0, r, f);
    }
    ++r;
  }
  // Linear in data: gathering rows of partial sums gives partial sums.
  b.rule.linear = true;
  return b.rule;
}

ShardingRule GatherGradOp::getShardingRule() {
  // indices [I...], grad [P..., I..., Q...] -> [P..., A, Q...].
  RuleBuilder b(*this);
  ArrayRef<int64_t> idx = shapeOf(getIndices()), grad = shapeOf(getGrad());
  ArrayRef<int64_t> out = getType().getShape();
  int64_t axis = getAxis() < 0 ? getAxis() + int64_t(out.size()) : getAxis();
  int64_t g = 0;
  for (int64_t d = 0; d < int64_t(out.size()); ++d) {
    if (d == axis) {
      b.result(0, d, b.factor(FactorKind::Blocked, out[d]));
      for (int64_t i = 0; i < int64_t(idx.size()); ++i, ++g) {
        if (idx[i] == 1)
          continue;
        int f = b.factor(FactorKind::Reduction, idx[i]);
        b.operand(0, i, f);
        b.operand(1, g, f);
      }
      continue;
    }
    if (out[d] != 1 && grad[g] == out[d]) {
      int f = b.factor(FactorKind::Parallel, out[d]);
      b.operand(1, g, f);
      b.result(0, d, f);
    }
    ++g;
  }
  // Linear in grad: scattering partial sums adds partial sums.
  b.rule.linear = true;
  b.rule.partialResultCosted = true;
  return b.rule;
}

// Mixture of experts. topk and sort split over their rows and keep the
// last dim whole. The grouped GEMMs split by groups (expert parallelism,
// --ep: a block of the experts' weights, group_start set by the
// partitioner), by their contracted and output features, never by their
// rows: the offsets speak of all rows.

static ShardingRule rowSelectionRule(Operation *op) {
  RuleBuilder b(op);
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  for (int64_t d = 0; d + 1 < int64_t(in.size()); ++d) {
    if (in[d] == 1)
      continue;
    int f = b.factor(FactorKind::Parallel, in[d]);
    b.operand(0, d, f);
    b.result(0, d, f);
    b.result(1, d, f);
  }
  int64_t last = int64_t(in.size()) - 1;
  if (last >= 0)
    b.operand(0, last, b.factor(FactorKind::Blocked, in[last]));
  return b.rule;
}

ShardingRule TopkOp::getShardingRule() { return rowSelectionRule(*this); }
ShardingRule RouterOp::getShardingRule() {
  // Rows are independent; the experts of a row are not (the softmax and
  // the choice read them all), nor the bias beside them.
  RuleBuilder b(*this);
  ArrayRef<int64_t> in = shapeOf(getLogits());
  const int64_t last = int64_t(in.size()) - 1;
  for (int64_t d = 0; d < last; ++d) {
    if (in[d] == 1)
      continue;
    int f = b.factor(FactorKind::Parallel, in[d]);
    b.operand(0, d, f);
    for (unsigned r = 0; r < 3; ++r)
      b.result(r, d, f);
  }
  int experts = b.factor(FactorKind::Blocked, in[last]);
  b.operand(0, last, experts);
  if (getBias())
    b.operand(1, 0, experts);
  b.result(2, last, experts);
  return b.rule;
}
ShardingRule SortOp::getShardingRule() { return rowSelectionRule(*this); }
ShardingRule GroupedMatmulOp::getShardingRule() {
  // input [S, K], weight [E, K, N] ([E, N, K] transposed) -> [S, N]: a
  // block of the groups gives zero rows for the others' groups, so the
  // groups are summed over.
  RuleBuilder b(*this);
  ArrayRef<int64_t> w = shapeOf(getWeight());
  const unsigned kDim = getWeightContractedDim(), nDim = getWeightFeatureDim();
  b.operand(1, 0, b.factor(FactorKind::Reduction, w[0]));
  int k = b.factor(FactorKind::Reduction, w[kDim]);
  b.operand(0, 1, k);
  b.operand(1, kDim, k);
  int n = b.factor(FactorKind::Parallel, w[nDim]);
  b.operand(1, nDim, n);
  b.result(0, 1, n);
  return b.rule;
}

ShardingRule GroupedMatmulWeightGradOp::getShardingRule() {
  // input [S, K], grad [S, N] -> [E, K, N]: a block of the groups is the
  // gradient of their weights alone.
  RuleBuilder b(*this);
  ArrayRef<int64_t> out = getType().getShape();
  b.result(0, 0, b.factor(FactorKind::Parallel, out[0]));
  int k = b.factor(FactorKind::Parallel, out[1]);
  b.operand(0, 1, k);
  b.result(0, 1, k);
  int n = b.factor(FactorKind::Parallel, out[2]);
  b.operand(1, 1, n);
  b.result(0, 2, n);
  return b.rule;
}
