// --loom-raise-attention (see Passes.td).

#include "frontend/raising/Passes.h"
#include "frontend/raising/PatternMatchers.h"

#include "frontend/common/ConstantEvaluator.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>
#include <limits>

namespace loom {
#define GEN_PASS_DEF_RAISEATTENTION
#include "frontend/raising/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;
using namespace loom::raising;

namespace {

/// Scores this low vanish under softmax in every float type Loom computes in.
constexpr double kMaskedScore = -1e4;

enum class MaskKind { None, Causal, Other };

/// A mask's value: constants evaluate; an imported tensor (a parameter with
/// a stored value) is read as the constant it holds.
FailureOr<DenseElementsAttr> maskValue(Value m) {
  if (auto param = m.getDefiningOp<nn::ParameterOp>()) {
    if (auto value = param.getValue())
      if (auto dense = dyn_cast<DenseElementsAttr>(*value))
        return dense;
    return failure();
  }
  return evaluateConstant(m);
}

/// A mask's kind, and for a causal one its sliding window (0: none).
struct MaskClass {
  MaskKind kind = MaskKind::Other;
  int64_t window = 0;
};

/// Classifies a mask broadcast over scores [..., S, Skv]. Causal needs the
/// mask's own last two dims to be [S, Skv]: a mask broadcast along them
/// (say [S, 1]) hides whole rows or columns, whatever its values look like.
/// A causal mask that also hides the keys W or more before each query's
/// last (Mistral's, Gemma's, EXAONE's sliding windows) is causal with
/// window W.
MaskClass classifyMask(DenseElementsAttr mask, bool additive, ArrayRef<int64_t> scoresShape) {
  auto type = cast<RankedTensorType>(mask.getType());
  if (type.getRank() < 2)
    return {};
  int64_t s = type.getDimSize(type.getRank() - 2), skv = type.getShape().back();
  std::vector<char> allowed;
  allowed.reserve(mask.getNumElements());
  if (additive) {
    if (!isa<FloatType>(type.getElementType()))
      return {};
    for (APFloat v : mask.getValues<APFloat>()) {
      double d = v.convertToDouble();
      if (d != 0.0 && !(d <= kMaskedScore))
        return {};
      allowed.push_back(d == 0.0);
    }
  } else {
    if (!type.getElementType().isInteger(1))
      return {};
    for (bool v : mask.getValues<bool>())
      allowed.push_back(v);
  }
  if (llvm::all_of(allowed, [](char a) { return a; }))
    return {MaskKind::None, 0};
  if (type.getShape().take_back(2) != scoresShape.take_back(2) || s == 0 || skv < s)
    return {};
  // The window, if any, from the last query's row: it sees its last W keys.
  int64_t window = llvm::count(ArrayRef<char>(allowed).slice((s - 1) * skv, skv), 1);
  if (window == skv)
    window = 0;
  for (int64_t index = 0, n = int64_t(allowed.size()); index < n; ++index) {
    int64_t j = index % skv, i = (index / skv) % s;
    int64_t last = i + (skv - s);
    bool expected = j <= last && (window == 0 || j > last - window);
    if (bool(allowed[index]) != expected)
      return {};
  }
  return {MaskKind::Causal, window};
}

/// Peels multiplications and divisions by splat constants, accumulating them.
Value peelScale(Value v, double &scale) {
  while (true) {
    if (auto mul = v.getDefiningOp<nn::MulOp>()) {
      if (std::optional<double> c = splatValue(mul.getRhs()); c && mul.getLhs().getType() == mul.getType()) {
        scale *= *c;
        v = mul.getLhs();
        continue;
      }
      if (std::optional<double> c = splatValue(mul.getLhs()); c && mul.getRhs().getType() == mul.getType()) {
        scale *= *c;
        v = mul.getRhs();
        continue;
      }
    }
    if (auto div = v.getDefiningOp<nn::DivOp>())
      if (std::optional<double> c = splatValue(div.getRhs());
          c && *c != 0 && div.getLhs().getType() == div.getType()) {
        scale /= *c;
        v = div.getLhs();
        continue;
      }
    return v;
  }
}

/// If `b` is the broadcast that repeats grouped-query KV heads,
/// [B, Hkv, 1, S, D] -> [B, Hkv, r, S, D], of a reshaped [B, Hkv, S, D]
/// tensor, returns that tensor.
Value repeatedHeadsSource(Value b) {
  auto broadcast = b.getDefiningOp<nn::BroadcastOp>();
  if (!broadcast)
    return {};
  auto inner = broadcast.getInput().getDefiningOp<nn::ReshapeOp>();
  if (!inner)
    return {};
  auto k = inner.getInput().getType().getShape();
  auto expanded = broadcast.getType().getShape();
  if (k.size() != 4 || expanded.size() != 5 ||
      inner.getType().getShape() != ArrayRef<int64_t>{k[0], k[1], 1, k[2], k[3]} ||
      expanded != ArrayRef<int64_t>{k[0], k[1], expanded[2], k[2], k[3]})
    return {};
  return inner.getInput();
}

/// Grouped-query heads repeated for the matmul ([B, Hkv, S, D] reshaped,
/// broadcast and reshaped to [B, Hkv*r, S, D]) are read back as the
/// [B, Hkv, S, D] tensor; anything else is returned as it is.
Value stripHeadRepeat(Value v) {
  auto outer = v.getDefiningOp<nn::ReshapeOp>();
  if (!outer || outer.getType().getRank() != 4)
    return v;
  Value source = repeatedHeadsSource(outer.getInput());
  if (!source)
    return v;
  auto k = cast<RankedTensorType>(source.getType()).getShape();
  auto expanded = outer.getInput().getType().getShape();
  if (outer.getType().getShape() != ArrayRef<int64_t>{k[0], k[1] * expanded[2], k[2], k[3]})
    return v;
  return source;
}

/// If `kt` is k^T over the last two dims of a 4-D k (by a transpose, or by
/// a reshape to 3-D [B*H, S, D], a transpose and a reshape back), returns k
/// (with repeated KV heads stripped), peeling scales.
Value transposedKey(Value kt, double &scale) {
  kt = peelScale(kt, scale);
  if (auto t = kt.getDefiningOp<nn::TransposeOp>()) {
    if (t.getPermutation() == ArrayRef<int64_t>{0, 1, 3, 2})
      return stripHeadRepeat(peelScale(t.getInput(), scale));
    return {};
  }
  auto back = kt.getDefiningOp<nn::ReshapeOp>();
  if (!back || back.getType().getRank() != 4)
    return {};
  auto t = back.getInput().getDefiningOp<nn::TransposeOp>();
  if (!t || t.getPermutation() != ArrayRef<int64_t>{0, 2, 1})
    return {};
  auto flat = t.getInput().getDefiningOp<nn::ReshapeOp>();
  if (!flat)
    return {};
  auto bhds = back.getType().getShape(); // [B, H, D, S]
  if (flat.getType().getShape() != ArrayRef<int64_t>{bhds[0] * bhds[1], bhds[3], bhds[2]})
    return {};
  // The flattened tensor: k itself ([B, H, S, D]), or, once reshapes have
  // folded together, the broadcast that repeats KV heads.
  Value source = peelScale(flat.getInput(), scale);
  auto shape = cast<RankedTensorType>(source.getType()).getShape();
  if (shape == ArrayRef<int64_t>{bhds[0], bhds[1], bhds[3], bhds[2]})
    return stripHeadRepeat(source);
  if (Value k = repeatedHeadsSource(source)) {
    auto ks = cast<RankedTensorType>(k.getType()).getShape();
    if (ks[0] == bhds[0] && ks[1] * shape[2] == bhds[1] && ks[2] == bhds[3] && ks[3] == bhds[2])
      return k;
  }
  return {};
}

/// One row of a tensor (its last dim) as the set of values it holds: a
/// known number, or some finite number (nullopt).
using RowValue = std::optional<double>;
using RowSet = SmallVector<RowValue, 2>;

void addRowValue(RowSet &set, RowValue v) {
  if (!llvm::is_contained(set, v))
    set.push_back(v);
}

/// `a pred b` where at most one side is "some finite number"; nullopt when
/// that depends on which finite number it is.
std::optional<bool> compareRowValues(nn::ComparePredicate pred, RowValue a, RowValue b) {
  if (!a && !b)
    return std::nullopt;
  if (a && b) {
    switch (pred) {
    case nn::ComparePredicate::eq: return *a == *b;
    case nn::ComparePredicate::ne: return *a != *b;
    case nn::ComparePredicate::lt: return *a < *b;
    case nn::ComparePredicate::le: return *a <= *b;
    case nn::ComparePredicate::gt: return *a > *b;
    case nn::ComparePredicate::ge: return *a >= *b;
    }
    return std::nullopt;
  }
  // One side finite and unknown: decided only against an infinity or NaN.
  double known = a ? *a : *b;
  bool finiteOnLeft = !a;
  if (std::isnan(known))
    return pred == nn::ComparePredicate::ne;
  if (!std::isinf(known))
    return std::nullopt;
  bool knownIsPlus = known > 0;
  // The finite side's relation to the infinity: finite < +inf, finite > -inf.
  bool finiteBelow = knownIsPlus;
  switch (pred) {
  case nn::ComparePredicate::eq: return false;
  case nn::ComparePredicate::ne: return true;
  case nn::ComparePredicate::lt:
  case nn::ComparePredicate::le: return finiteOnLeft ? finiteBelow : !finiteBelow;
  case nn::ComparePredicate::gt:
  case nn::ComparePredicate::ge: return finiteOnLeft ? !finiteBelow : finiteBelow;
  }
  return std::nullopt;
}

/// Evaluates `v`, computed from `root` (whose last dim is a row) by
/// comparisons and casts against splat constants and a max over the row,
/// for a row of `root` holding the values `rootRow`. `perRow` is set once a
/// reduction makes every element of the row's result one value. Fails on
/// anything else: the evaluation is exact, never a guess.
FailureOr<RowSet> evaluateOverRow(Value v, Value root, const RowSet &rootRow, bool &perRow,
                                  int depth = 0) {
  if (v == root) {
    perRow = false;
    return rootRow;
  }
  Operation *op = v.getDefiningOp();
  if (!op || depth > 16)
    return failure();
  auto rootRank = cast<RankedTensorType>(root.getType()).getRank();
  if (auto cmp = dyn_cast<nn::CompareOp>(op)) {
    for (int side = 0; side < 2; ++side) {
      Value tensor = side == 0 ? cmp.getLhs() : cmp.getRhs();
      std::optional<double> c = splatValue(side == 0 ? cmp.getRhs() : cmp.getLhs());
      if (!c || cast<RankedTensorType>(tensor.getType()).getShape() !=
                    cast<RankedTensorType>(cmp.getType()).getShape())
        continue;
      FailureOr<RowSet> in = evaluateOverRow(tensor, root, rootRow, perRow, depth + 1);
      if (failed(in))
        return failure();
      RowSet out;
      for (RowValue x : *in) {
        std::optional<bool> r = side == 0 ? compareRowValues(cmp.getPredicate(), x, *c)
                                          : compareRowValues(cmp.getPredicate(), *c, x);
        if (!r)
          return failure();
        addRowValue(out, *r ? 1.0 : 0.0);
      }
      return out;
    }
    return failure();
  }
  if (auto castOp = dyn_cast<nn::CastOp>(op)) {
    FailureOr<RowSet> in = evaluateOverRow(castOp.getInput(), root, rootRow, perRow, depth + 1);
    if (failed(in))
      return failure();
    Type to = getElementTypeOrSelf(castOp.getType());
    RowSet out;
    for (RowValue x : *in) {
      if (!x && !isa<FloatType>(to))
        return failure();
      if (x && to.isInteger(1))
        x = *x != 0 ? 1.0 : 0.0;
      else if (x && isa<IntegerType>(to) && *x != std::trunc(*x))
        return failure();
      addRowValue(out, x);
    }
    return out;
  }
  if (auto max = dyn_cast<nn::ReduceMaxOp>(op)) {
    auto inType = cast<RankedTensorType>(max.getInput().getType());
    if (inType.getRank() != rootRank || max.getDims() != ArrayRef<int64_t>{rootRank - 1})
      return failure();
    FailureOr<RowSet> in = evaluateOverRow(max.getInput(), root, rootRow, perRow, depth + 1);
    if (failed(in) || perRow || in->empty())
      return failure();
    double best = -std::numeric_limits<double>::infinity();
    for (RowValue x : *in) {
      if (!x)
        return failure();
      best = std::max(best, *x);
    }
    perRow = true;
    return RowSet{best};
  }
  return failure();
}

/// Whether `guard` = where(c, softmax, other) or where(c, other, softmax)
/// takes the softmax in every row that can occur: rows of finite scores,
/// some of them masked to -inf. SDPA's "safe softmax" (zero for a row
/// that is -inf throughout) is this guard: a causal or absent mask leaves
/// a finite score in every row.
bool guardKeepsSoftmax(nn::WhereOp guard, nn::SoftmaxOp softmax) {
  bool softmaxWhenTrue = guard.getLhs() == softmax.getResult();
  if (!softmaxWhenTrue && guard.getRhs() != softmax.getResult())
    return false;
  Value root = softmax.getInput();
  if (softmax.getDim() != cast<RankedTensorType>(root.getType()).getRank() - 1)
    return false;
  const double negInf = -std::numeric_limits<double>::infinity();
  for (const RowSet &row : {RowSet{std::nullopt}, RowSet{std::nullopt, negInf}}) {
    bool perRow = false;
    FailureOr<RowSet> c = evaluateOverRow(guard.getCondition(), root, row, perRow);
    if (failed(c) || c->size() != 1 || !(*c)[0] || (*(*c)[0] != 0) != softmaxWhenTrue)
      return false;
  }
  return true;
}

struct AttentionFromSoftmax : OpRewritePattern<nn::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::MatmulOp out, PatternRewriter &rewriter) const override {
    if (out.getTransposeLhs() || out.getTransposeRhs() || out.getType().getRank() != 4)
      return failure();
    Value p = out.getLhs();
    // A low-precision model's softmax in f32 (transformers' eager
    // attention: softmax(s, dtype=float32).to(s.dtype)): the casts around it
    // are what fused attention does inside, with f32 statistics.
    nn::CastOp narrowed = p.getDefiningOp<nn::CastOp>();
    if (narrowed)
      p = narrowed.getInput();
    // where(isnan(p), 0, p): a guard for rows that see no key.
    if (auto guard = p.getDefiningOp<nn::WhereOp>()) {
      auto isNan = guard.getCondition().getDefiningOp<nn::CompareOp>();
      if (isNan && isNan.getPredicate() == nn::ComparePredicate::ne &&
          isNan.getLhs() == guard.getRhs() && isNan.getRhs() == guard.getRhs() &&
          isSplat(guard.getLhs(), 0.0))
        p = guard.getRhs();
      else
        for (Value branch : {guard.getLhs(), guard.getRhs()})
          if (auto softmax = branch.getDefiningOp<nn::SoftmaxOp>();
              softmax && guardKeepsSoftmax(guard, softmax))
            p = branch;
    }
    auto softmax = p.getDefiningOp<nn::SoftmaxOp>();
    if (!softmax || softmax.getDim() != 3)
      return failure();

    Value scores = softmax.getInput();
    if (narrowed) {
      auto widened = scores.getDefiningOp<nn::CastOp>();
      Type low = getElementTypeOrSelf(narrowed.getType());
      auto wide = dyn_cast<FloatType>(getElementTypeOrSelf(scores.getType()));
      if (!widened || !isa<FloatType>(low) || !wide ||
          getElementTypeOrSelf(widened.getInput().getType()) != low ||
          wide.getWidth() <= cast<FloatType>(low).getWidth())
        return failure();
      scores = widened.getInput();
    }
    MaskClass mask{MaskKind::None, 0};
    if (auto add = scores.getDefiningOp<nn::AddOp>()) {
      for (auto [s, m] : {std::pair{add.getLhs(), add.getRhs()},
                          std::pair{add.getRhs(), add.getLhs()}}) {
        if (s.getType() != add.getType())
          continue;
        FailureOr<DenseElementsAttr> value = maskValue(m);
        if (failed(value))
          continue;
        mask = classifyMask(*value, /*additive=*/true, add.getType().getShape());
        scores = s;
        break;
      }
    } else if (auto where = scores.getDefiningOp<nn::WhereOp>()) {
      std::optional<double> fill = splatValue(where.getRhs());
      FailureOr<DenseElementsAttr> value = maskValue(where.getCondition());
      if (!fill || !(*fill <= kMaskedScore) || failed(value) ||
          where.getLhs().getType() != where.getType())
        return failure();
      mask = classifyMask(*value, /*additive=*/false, where.getType().getShape());
      scores = where.getLhs();
    }
    if (mask.kind == MaskKind::Other)
      return failure();

    double scale = 1.0;
    scores = peelScale(scores, scale);
    auto qk = scores.getDefiningOp<nn::MatmulOp>();
    if (!qk || qk.getTransposeLhs())
      return failure();
    Value q = peelScale(qk.getLhs(), scale);
    // k^T as one transpose of another layout (GPT-2's [B, S, H, D] keys
    // transposed by [0, 2, 3, 1]: the head split and k^T composed) is k
    // transposed by that permutation with its last two entries swapped.
    Value k, keySource;
    SmallVector<int64_t> keyPermutation;
    double keyScale = scale;
    if (auto t = peelScale(qk.getRhs(), keyScale).getDefiningOp<nn::TransposeOp>();
        t && !qk.getTransposeRhs() && t.getPermutation().size() == 4 &&
        t.getPermutation() != ArrayRef<int64_t>{0, 1, 3, 2}) {
      scale = keyScale;
      keyPermutation.assign(t.getPermutation().begin(), t.getPermutation().end());
      std::swap(keyPermutation[2], keyPermutation[3]);
      keySource = t.getInput();
    } else {
      k = qk.getTransposeRhs() ? stripHeadRepeat(peelScale(qk.getRhs(), scale))
                               : transposedKey(qk.getRhs(), scale);
      if (!k)
        return failure();
    }
    Value v = stripHeadRepeat(out.getRhs());

    auto qs = cast<RankedTensorType>(q.getType()).getShape();
    SmallVector<int64_t> ks(cast<RankedTensorType>((k ? k : keySource).getType()).getShape());
    if (keySource)
      for (auto [i, from] : llvm::enumerate(keyPermutation))
        ks[i] = cast<RankedTensorType>(keySource.getType()).getDimSize(from);
    auto vs = cast<RankedTensorType>(v.getType()).getShape();
    if (qs.size() != 4 || ks.size() != 4 || vs.size() != 4 || ks[1] != vs[1] ||
        ks[1] == 0 || qs[1] % ks[1] != 0 || qs[3] != ks[3] || ks[2] != vs[2] ||
        !(scale > 0) ||
        out.getType().getShape() != ArrayRef<int64_t>{qs[0], qs[1], qs[2], vs[3]})
      return failure();
    if (mask.kind == MaskKind::Causal && ks[2] < qs[2])
      return failure();
    if (keySource) {
      auto sourceType = cast<RankedTensorType>(keySource.getType());
      k = keyPermutation == ArrayRef<int64_t>{0, 1, 2, 3}
              ? keySource
              : rewriter.create<nn::TransposeOp>(out.getLoc(), sourceType.clone(ks), keySource,
                                                 rewriter.getDenseI64ArrayAttr(keyPermutation));
    }
    auto attention = rewriter.create<nn::AttentionOp>(
        out.getLoc(), out.getType(), q, k, v, mask.kind == MaskKind::Causal,
        rewriter.getF64FloatAttr(scale), /*seq_major=*/0,
        mask.window ? rewriter.getI64IntegerAttr(mask.window) : IntegerAttr());
    rewriter.replaceOp(out, attention.getResult());
    return success();
  }
};

/// nn.attention reading KV heads repeated for grouped-query attention
/// (transformers' repeat_kv before SDPA) reads the grouped heads directly.
struct AttentionOfRepeatedHeads : OpRewritePattern<nn::AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::AttentionOp op, PatternRewriter &rewriter) const override {
    // A repeat of heads is along dim 1 of a head-major key and value.
    if (op.getSeqMajor() & 0b110)
      return failure();
    Value k = stripHeadRepeat(op.getKey()), v = stripHeadRepeat(op.getValue());
    if (k == op.getKey() || v == op.getValue() || k.getType() != v.getType())
      return failure();
    rewriter.modifyOpInPlace(op, [&] {
      op.getKeyMutable().assign(k);
      op.getValueMutable().assign(v);
    });
    return success();
  }
};

struct RaiseAttentionPass : public loom::impl::RaiseAttentionBase<RaiseAttentionPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<AttentionFromSoftmax, AttentionOfRepeatedHeads>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
