// The ranges of integer tensors' values (IntegerRangeOpInterface), and the
// canonicalization they decide: an nn.where whose condition the ranges
// settle (a comparison true, or false, for every value its operands can
// hold) becomes the operand it selects.

#include "dialects/nn/NNOps.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using namespace loom::nn;

namespace {

using Ranges = ArrayRef<std::optional<IntegerRange>>;

std::optional<IntegerRange> rangeOf(Value value, int depth,
                                    llvm::DenseMap<Value, std::optional<IntegerRange>> &seen) {
  Type element = getElementTypeOrSelf(value.getType());
  if (!element.isSignlessInteger())
    return std::nullopt;
  // An i1 is 0 or 1 whatever computed it.
  const std::optional<IntegerRange> fallback =
      element.isInteger(1) ? std::optional<IntegerRange>(IntegerRange{0, 1}) : std::nullopt;
  auto result = dyn_cast<OpResult>(value);
  auto op = result ? dyn_cast<IntegerRangeOpInterface>(result.getOwner()) : nullptr;
  if (!op || depth <= 0)
    return fallback;
  if (auto it = seen.find(value); it != seen.end())
    return it->second;
  SmallVector<std::optional<IntegerRange>> operands;
  for (Value operand : op->getOperands())
    operands.push_back(rangeOf(operand, depth - 1, seen));
  std::optional<IntegerRange> range = op.inferIntegerRange(result.getResultNumber(), operands);
  if (!range)
    range = fallback;
  seen[value] = range;
  return range;
}

/// [0, n - 1]: positions along a dim of n.
std::optional<IntegerRange> positionsAlong(int64_t n) {
  if (ShapedType::isDynamic(n) || n <= 0)
    return std::nullopt;
  return IntegerRange{0, n - 1};
}

/// The range of f over the corners of a and b; std::nullopt if any
/// overflows int64.
template <typename F>
std::optional<IntegerRange> corners(IntegerRange a, IntegerRange b, F f) {
  std::optional<IntegerRange> range;
  for (int64_t x : {a.lo, a.hi})
    for (int64_t y : {b.lo, b.hi}) {
      int64_t v;
      if (!f(x, y, v))
        return std::nullopt;
      range = range ? range->join({v, v}) : IntegerRange{v, v};
    }
  return range;
}

/// Both operands known and of the result's element type (an integer).
bool integerOperands(Operation *op, Ranges operands) {
  return getElementTypeOrSelf(op->getResult(0).getType()).isSignlessInteger() &&
         operands.size() == 2 && operands[0] && operands[1];
}

/// Whether `predicate` holds for every pair of values from a and b (true),
/// for none (false), or for some (std::nullopt).
std::optional<bool> decide(ComparePredicate predicate, IntegerRange a, IntegerRange b) {
  auto settle = [](bool always, bool never) -> std::optional<bool> {
    if (always)
      return true;
    if (never)
      return false;
    return std::nullopt;
  };
  const bool single = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
  const bool disjoint = a.hi < b.lo || b.hi < a.lo;
  switch (predicate) {
  case ComparePredicate::eq:
    return settle(single, disjoint);
  case ComparePredicate::ne:
    return settle(disjoint, single);
  case ComparePredicate::lt:
    return settle(a.hi < b.lo, a.lo >= b.hi);
  case ComparePredicate::le:
    return settle(a.hi <= b.lo, a.lo > b.hi);
  case ComparePredicate::gt:
    return settle(a.lo > b.hi, a.hi <= b.lo);
  case ComparePredicate::ge:
    return settle(a.lo >= b.hi, a.hi < b.lo);
  }
  return std::nullopt;
}

std::optional<bool> decideCompare(CompareOp op) {
  std::optional<IntegerRange> lhs = integerRange(op.getLhs()), rhs = integerRange(op.getRhs());
  if (!lhs || !rhs)
    return std::nullopt;
  return decide(op.getPredicate(), *lhs, *rhs);
}

/// nn.where on a condition whose range settles it (a comparison the
/// ranges decide, everywhere true or everywhere false): the operand it
/// selects, where that has the result's type. No constant takes the
/// condition's place: its shape may hold the batch, which a constant would
/// freeze (loom-compile --batch rebatches a static export).
struct WhereOfSettledCondition : OpRewritePattern<WhereOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(WhereOp op, PatternRewriter &rewriter) const override {
    std::optional<IntegerRange> condition = integerRange(op.getCondition());
    if (!condition || condition->lo != condition->hi)
      return failure();
    Value chosen = condition->lo != 0 ? op.getLhs() : op.getRhs();
    if (chosen.getType() != op.getType())
      return failure();
    rewriter.replaceOp(op, chosen);
    return success();
  }
};

/// x + z, z + x or x - z where z's range is {0}: x, where x has the
/// result's type (a zero that broadcasts x to a larger shape stays).
template <typename OpT>
struct AddOfSettledZero : OpRewritePattern<OpT> {
  using OpRewritePattern<OpT>::OpRewritePattern;
  LogicalResult matchAndRewrite(OpT op, PatternRewriter &rewriter) const override {
    auto zero = [](Value v) {
      std::optional<IntegerRange> range = integerRange(v);
      return range && range->lo == 0 && range->hi == 0;
    };
    Value kept;
    if (zero(op.getRhs()))
      kept = op.getLhs();
    else if (std::is_same_v<OpT, AddOp> && zero(op.getLhs()))
      kept = op.getRhs();
    if (!kept || kept.getType() != op.getType())
      return failure();
    rewriter.replaceOp(op, kept);
    return success();
  }
};

} // namespace

std::optional<IntegerRange> loom::nn::integerRange(Value value, int depth) {
  llvm::DenseMap<Value, std::optional<IntegerRange>> seen;
  return rangeOf(value, depth, seen);
}

std::optional<IntegerRange> ConstantOp::inferIntegerRange(unsigned, Ranges) {
  auto dense = dyn_cast<DenseIntElementsAttr>(getValue());
  // A large constant is not worth a pass over its elements here.
  if (!dense || dense.getNumElements() == 0 || dense.getNumElements() > (1 << 16))
    return std::nullopt;
  const bool boolean = dense.getElementType().isInteger(1);
  std::optional<IntegerRange> range;
  for (const APInt &v : dense.getValues<APInt>()) {
    const int64_t x = boolean ? int64_t(v.getZExtValue()) : v.getSExtValue();
    range = range ? range->join({x, x}) : IntegerRange{x, x};
  }
  return range;
}

std::optional<IntegerRange> AddOp::inferIntegerRange(unsigned, Ranges operands) {
  if (!integerOperands(*this, operands))
    return std::nullopt;
  return corners(*operands[0], *operands[1],
                 [](int64_t x, int64_t y, int64_t &v) { return !__builtin_add_overflow(x, y, &v); });
}

/// c > 0 if `value` is `x / c * c` or `c * (x / c)` for this `x` and a
/// settled c (the truncated multiple that a remainder subtracts).
std::optional<int64_t> truncatedMultipleOf(Value x, Value value) {
  auto mul = value.getDefiningOp<MulOp>();
  if (!mul)
    return std::nullopt;
  for (auto [quotient, factor] : {std::pair(mul.getLhs(), mul.getRhs()),
                                  std::pair(mul.getRhs(), mul.getLhs())}) {
    auto div = quotient.getDefiningOp<DivOp>();
    if (!div || div.getLhs() != x)
      continue;
    std::optional<IntegerRange> c = integerRange(factor), d = integerRange(div.getRhs());
    if (c && d && c->lo == c->hi && d->lo == d->hi && c->lo == d->lo && c->lo > 0)
      return c->lo;
  }
  return std::nullopt;
}

std::optional<IntegerRange> SubOp::inferIntegerRange(unsigned, Ranges operands) {
  if (!integerOperands(*this, operands))
    return std::nullopt;
  const IntegerRange a = *operands[0], b = *operands[1];
  int64_t lo, hi;
  if (__builtin_sub_overflow(a.lo, b.hi, &lo) || __builtin_sub_overflow(a.hi, b.lo, &hi))
    return std::nullopt;
  // x - x / c * c, the remainder of a truncating division, has x's sign and
  // magnitude below c (how an exported floor division or modulo starts).
  if (std::optional<int64_t> c = truncatedMultipleOf(getLhs(), getRhs())) {
    lo = std::max(lo, a.lo >= 0 ? int64_t(0) : 1 - *c);
    hi = std::min(hi, a.hi <= 0 ? int64_t(0) : *c - 1);
  }
  return IntegerRange{lo, hi};
}

std::optional<IntegerRange> MulOp::inferIntegerRange(unsigned, Ranges operands) {
  if (!integerOperands(*this, operands))
    return std::nullopt;
  return corners(*operands[0], *operands[1],
                 [](int64_t x, int64_t y, int64_t &v) { return !__builtin_mul_overflow(x, y, &v); });
}

std::optional<IntegerRange> DivOp::inferIntegerRange(unsigned, Ranges operands) {
  // Integer division truncates; with a divisor of one sign it is monotonic
  // in each operand, so the corners bound it.
  if (!integerOperands(*this, operands) || (operands[1]->lo <= 0 && operands[1]->hi >= 0))
    return std::nullopt;
  return corners(*operands[0], *operands[1], [](int64_t x, int64_t y, int64_t &v) {
    if (x == INT64_MIN && y == -1)
      return false;
    v = x / y;
    return true;
  });
}

std::optional<IntegerRange> CompareOp::inferIntegerRange(unsigned, Ranges) {
  if (std::optional<bool> decided = decideCompare(*this))
    return IntegerRange{*decided, *decided};
  return IntegerRange{0, 1};
}

std::optional<IntegerRange> CastOp::inferIntegerRange(unsigned, Ranges operands) {
  Type to = getElementTypeOrSelf(getType());
  if (!operands[0] || !to.isSignlessInteger())
    return std::nullopt;
  const IntegerRange r = *operands[0];
  if (to.isInteger(1)) // nonzero is true
    return r.lo == 0 && r.hi == 0 ? IntegerRange{0, 0}
           : (r.lo > 0 || r.hi < 0) ? IntegerRange{1, 1}
                                    : IntegerRange{0, 1};
  const unsigned width = to.getIntOrFloatBitWidth();
  if (width >= 64)
    return r;
  const int64_t max = (int64_t(1) << (width - 1)) - 1, min = -max - 1;
  if (r.lo < min || r.hi > max) // it would wrap
    return std::nullopt;
  return r;
}

std::optional<IntegerRange> GatherOp::inferIntegerRange(unsigned, Ranges operands) {
  return operands[0]; // values of the data
}

std::optional<IntegerRange> TopkOp::inferIntegerRange(unsigned index, Ranges) {
  if (index != 1)
    return std::nullopt; // the values are floats
  return positionsAlong(getInput().getType().getShape().back());
}

std::optional<IntegerRange> RouterOp::inferIntegerRange(unsigned index, Ranges) {
  if (index != 1)
    return std::nullopt; // the weights and scores are floats
  return positionsAlong(getLogits().getType().getShape().back());
}

std::optional<IntegerRange> SortOp::inferIntegerRange(unsigned index, Ranges operands) {
  if (index == 0)
    return operands[0];
  return positionsAlong(getInput().getType().getShape().back());
}

std::optional<IntegerRange> WhereOp::inferIntegerRange(unsigned, Ranges operands) {
  // The branch a settled condition selects, else either.
  if (std::optional<IntegerRange> condition = operands[0];
      condition && condition->lo == condition->hi)
    return operands[condition->lo != 0 ? 1 : 2];
  if (!operands[1] || !operands[2])
    return std::nullopt;
  return operands[1]->join(*operands[2]);
}

void WhereOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *context) {
  patterns.add<WhereOfSettledCondition>(context);
}

void AddOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *context) {
  patterns.add<AddOfSettledZero<AddOp>>(context);
}

void SubOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *context) {
  patterns.add<AddOfSettledZero<SubOp>>(context);
}
