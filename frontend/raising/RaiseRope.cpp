// --loom-raise-rope (see Passes.td).

#include "frontend/raising/Passes.h"
#include "frontend/raising/PatternMatchers.h"

#include "frontend/common/ConstantEvaluator.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace loom {
#define GEN_PASS_DEF_RAISEROPE
#include "frontend/raising/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;
using namespace loom::raising;

namespace {

/// Whether `v` is x[..., begin:end] (a unit-stride slice of the last dim).
bool isLastDimSlice(Value v, Value x, int64_t begin, int64_t end) {
  auto slice = v.getDefiningOp<nn::SliceOp>();
  if (!slice || slice.getInput() != x)
    return false;
  auto shape = slice.getInput().getType().getShape();
  int64_t rank = shape.size();
  for (int64_t i = 0; i < rank; ++i) {
    bool last = i == rank - 1;
    if (slice.getStrides()[i] != 1 || slice.getStarts()[i] != (last ? begin : 0) ||
        slice.getLimits()[i] != (last ? end : shape[i]))
      return false;
  }
  return true;
}

/// Whether `r` is rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]).
bool isRotateHalf(Value r, Value x) {
  auto concat = r.getDefiningOp<nn::ConcatOp>();
  auto type = cast<RankedTensorType>(x.getType());
  int64_t d = type.getShape().back();
  if (!concat || concat.getInputs().size() != 2 || d % 2 != 0 ||
      concat.getDim() != type.getRank() - 1)
    return false;
  auto neg = concat.getInputs()[0].getDefiningOp<nn::NegOp>();
  return neg && isLastDimSlice(neg.getInput(), x, d / 2, d) &&
         isLastDimSlice(concat.getInputs()[1], x, 0, d / 2);
}

/// How a cos/sin table broadcast against x [..., S, D] reads as an [S, D]
/// value: as it is, reshaped (leading unit dims dropped), or, for a constant
/// whose leading dims repeat one [S, D] table, as that table.
struct Table {
  mlir::Value value;
  DenseElementsAttr folded; // the [S, D] table when the leading dims repeat
};

/// Checks `t` without touching the IR: a pattern that creates ops and then
/// fails leaves the greedy driver without a fixpoint.
std::optional<Table> matchTable(Value t, RankedTensorType xType) {
  auto type = cast<RankedTensorType>(t.getType());
  int64_t rank = xType.getRank();
  if (rank < 2 || type.getRank() < 2 || type.getElementType() != xType.getElementType())
    return std::nullopt;
  int64_t s = xType.getDimSize(rank - 2), d = xType.getDimSize(rank - 1);
  if (type.getShape().take_back(2) != ArrayRef<int64_t>{s, d} ||
      !isBroadcastableShape(type.getShape(), xType.getShape()))
    return std::nullopt;
  if (llvm::all_of(type.getShape().drop_back(2), [](int64_t n) { return n == 1; }))
    return Table{t, {}};
  FailureOr<DenseElementsAttr> value = evaluateConstant(t);
  if (failed(value))
    return std::nullopt;
  SmallVector<Attribute> all(value->getValues<Attribute>());
  size_t tableSize = s * d;
  for (size_t i = tableSize; i < all.size(); ++i)
    if (all[i] != all[i % tableSize])
      return std::nullopt;
  auto tableType = RankedTensorType::get({s, d}, type.getElementType());
  return Table{t, DenseElementsAttr::get(tableType, ArrayRef<Attribute>(all).take_front(tableSize))};
}

/// The [S, D] value of a matched table.
Value buildTable(PatternRewriter &rewriter, Location loc, const Table &table,
                 RankedTensorType xType) {
  if (table.folded)
    return rewriter.create<nn::ConstantOp>(loc, table.folded);
  auto type = cast<RankedTensorType>(table.value.getType());
  if (type.getRank() == 2)
    return table.value;
  int64_t rank = xType.getRank();
  auto tableType = RankedTensorType::get(
      {xType.getDimSize(rank - 2), xType.getDimSize(rank - 1)}, type.getElementType());
  return rewriter.create<nn::ReshapeOp>(loc, tableType, table.value);
}

struct RopeFromRotateHalf : OpRewritePattern<nn::AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(nn::AddOp add, PatternRewriter &rewriter) const override {
    for (auto [a, b] : {std::pair{add.getLhs(), add.getRhs()},
                        std::pair{add.getRhs(), add.getLhs()}}) {
      auto cosMul = a.getDefiningOp<nn::MulOp>();
      auto sinMul = b.getDefiningOp<nn::MulOp>();
      if (!cosMul || !sinMul)
        continue;
      for (auto [rot, sin] : {std::pair{sinMul.getLhs(), sinMul.getRhs()},
                              std::pair{sinMul.getRhs(), sinMul.getLhs()}}) {
        for (auto [x, cos] : {std::pair{cosMul.getLhs(), cosMul.getRhs()},
                              std::pair{cosMul.getRhs(), cosMul.getLhs()}}) {
          auto xType = cast<RankedTensorType>(x.getType());
          if (xType != add.getType() || !isRotateHalf(rot, x))
            continue;
          std::optional<Table> cosTable = matchTable(cos, xType);
          std::optional<Table> sinTable = cosTable ? matchTable(sin, xType) : std::nullopt;
          if (!cosTable || !sinTable)
            continue;
          Value c = buildTable(rewriter, add.getLoc(), *cosTable, xType);
          Value s = buildTable(rewriter, add.getLoc(), *sinTable, xType);
          rewriter.replaceOpWithNewOp<nn::RopeOp>(add, xType, x, c, s, /*interleaved=*/false);
          return success();
        }
      }
    }
    return failure();
  }
};

struct RaiseRopePass : public loom::impl::RaiseRopeBase<RaiseRopePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<RopeFromRotateHalf>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
