// --loom-raise-router (see Passes.td): a mixture-of-experts router's
// scores, choice and weights, as an import spells them, become one
// nn.router.

#include "frontend/raising/Passes.h"
#include "frontend/raising/PatternMatchers.h"

#include "dialects/nn/NNOps.h"
#include "frontend/common/ConstantEvaluator.h"

#include "mlir/IR/Builders.h"

#include "llvm/ADT/DenseMap.h"

namespace loom {
#define GEN_PASS_DEF_RAISEROUTER
#include "frontend/raising/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;
using namespace loom::raising;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The value of `target` when the values in `given` take theirs: the nn ops
/// between are run by the CPU kernels, their other operands must be
/// constants. Failure when something else is reached (an input, a
/// parameter, more than `limit` ops).
FailureOr<DenseElementsAttr> evaluateGiven(Value target,
                                           llvm::DenseMap<Value, DenseElementsAttr> given,
                                           int limit = 48) {
  int ops = 0;
  std::function<FailureOr<DenseElementsAttr>(Value)> eval =
      [&](Value v) -> FailureOr<DenseElementsAttr> {
    if (auto it = given.find(v); it != given.end())
      return it->second;
    Operation *def = v.getDefiningOp();
    if (!def || isa<nn::ParameterOp>(def) || !def->getDialect() ||
        def->getDialect()->getNamespace() != "nn" || ++ops > limit)
      return failure();
    if (auto constant = dyn_cast<nn::ConstantOp>(def)) {
      auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
      if (!dense)
        return failure();
      return dense;
    }
    SmallVector<DenseElementsAttr> operands;
    for (Value operand : def->getOperands()) {
      FailureOr<DenseElementsAttr> value = eval(operand);
      if (failed(value))
        return failure();
      operands.push_back(*value);
    }
    FailureOr<SmallVector<DenseElementsAttr>> results = evaluateOp(def, operands);
    if (failed(results))
      return failure();
    for (auto [result, value] : llvm::zip(def->getResults(), *results))
      given[result] = value;
    return given.lookup(v);
  };
  return eval(target);
}

/// What a router's choice reads: the affinities (a softmax or a sigmoid of
/// the logits), the optional bias added to them, the optional group mask.
struct Router {
  Value logits, scores, bias;
  bool sigmoid = false;
  int64_t groups = 1, groupK = 1, groupTop = 2;
  double groupFill = 0;
};

/// s = softmax(logits) along the last dim, or sigmoid(logits).
bool matchAffinities(Value s, Router &r) {
  if (auto softmax = s.getDefiningOp<nn::SoftmaxOp>()) {
    if (softmax.getDim() != typeOf(s).getRank() - 1)
      return false;
    r.logits = softmax.getInput();
  } else if (auto sigmoid = s.getDefiningOp<nn::SigmoidOp>()) {
    r.logits = sigmoid.getInput();
    r.sigmoid = true;
  } else {
    return false;
  }
  r.scores = s;
  return true;
}

/// c = s + bias, bias [E] (either side), or c = s.
bool matchChoiceScores(Value c, Router &r) {
  if (matchAffinities(c, r))
    return true;
  auto add = c.getDefiningOp<nn::AddOp>();
  if (!add)
    return false;
  const int64_t experts = typeOf(c).getShape().back();
  for (auto [s, bias] : {std::pair{add.getLhs(), add.getRhs()},
                         std::pair{add.getRhs(), add.getLhs()}}) {
    auto biasType = typeOf(bias);
    if (typeOf(s) != typeOf(c) || biasType.getRank() != 1 || biasType.getDimSize(0) != experts ||
        biasType.getElementType() != typeOf(c).getElementType())
      continue;
    Router candidate = r;
    if (!matchAffinities(s, candidate))
      continue;
    r = candidate;
    r.bias = bias;
    return true;
  }
  return false;
}

/// The group mask of DeepSeek-V3's group-limited choice: x = where(masked,
/// fill, c) (or where(kept, c, fill)), where the mask comes from the
/// indices of the top group_k of the groups' scores, each group scoring
/// the sum of its group_top best c. The mask's ops are checked by running
/// them: for indices chosen per row, the masked experts must be exactly
/// those of the groups not chosen.
bool matchGroupMask(Value x, Router &r) {
  auto where = x.getDefiningOp<nn::WhereOp>();
  if (!where)
    return false;
  auto type = typeOf(x);
  const int64_t experts = type.getShape().back();
  for (bool fillFirst : {true, false}) {
    Value fill = fillFirst ? where.getLhs() : where.getRhs();
    Value c = fillFirst ? where.getRhs() : where.getLhs();
    std::optional<double> fillValue = splatValue(fill);
    if (!fillValue || c.getType() != x.getType())
      continue;
    Router candidate = r;
    if (!matchChoiceScores(c, candidate))
      continue;
    // The group top-k among the mask's producers.
    nn::TopkOp groupChoice;
    SmallVector<Value> work{where.getCondition()};
    for (size_t i = 0; i < work.size() && i < 48 && !groupChoice; ++i)
      if (Operation *def = work[i].getDefiningOp()) {
        if (auto topk = dyn_cast<nn::TopkOp>(def))
          groupChoice = topk;
        else
          llvm::append_range(work, def->getOperands());
      }
    if (!groupChoice || groupChoice.getSmallest())
      continue;
    auto sum = groupChoice.getInput().getDefiningOp<nn::ReduceSumOp>();
    auto best = sum ? sum.getInput().getDefiningOp<nn::TopkOp>() : nn::TopkOp();
    auto grouped = best ? best.getInput().getDefiningOp<nn::ReshapeOp>() : nn::ReshapeOp();
    if (!grouped || best.getSmallest() || sum.getInput() != best.getValues() ||
        grouped.getInput() != c)
      continue;
    auto groupedShape = typeOf(grouped.getResult()).getShape();
    const int64_t rank = type.getRank();
    if (int64_t(groupedShape.size()) != rank + 1 ||
        groupedShape.drop_back(2) != type.getShape().drop_back() ||
        groupedShape[rank - 1] * groupedShape[rank] != experts ||
        sum.getDims().size() != 1 || sum.getDims()[0] != rank || sum.getKeepdim())
      continue;
    const int64_t groups = groupedShape[rank - 1], groupK = int64_t(groupChoice.getK());
    // Run the mask for chosen groups (j * step + row) mod groups, j < group_k.
    auto idsType = typeOf(groupChoice.getIndices());
    const int64_t rows = idsType.getNumElements() / groupK;
    SmallVector<int64_t> chosen(idsType.getNumElements());
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t j = 0; j < groupK; ++j)
        chosen[t * groupK + j] = (t + j * (1 + t % 3)) % groups;
    bool distinct = true;
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t j = 0; j < groupK; ++j)
        for (int64_t i = 0; i < j; ++i)
          distinct &= chosen[t * groupK + i] != chosen[t * groupK + j];
    if (!distinct) // a step of the pattern cycles: choose the first groups
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t j = 0; j < groupK; ++j)
          chosen[t * groupK + j] = (t + j) % groups;
    llvm::DenseMap<Value, DenseElementsAttr> given;
    given[groupChoice.getIndices()] =
        DenseElementsAttr::get(idsType, ArrayRef<int64_t>(chosen));
    FailureOr<DenseElementsAttr> mask = evaluateGiven(where.getCondition(), given);
    if (failed(mask) || mask->getType().getShape() != type.getShape() ||
        !mask->getElementType().isInteger(1))
      continue;
    SmallVector<bool> bits(mask->getValues<bool>());
    const int64_t size = experts / groups;
    bool exact = true;
    for (int64_t t = 0; t < rows && exact; ++t)
      for (int64_t e = 0; e < experts && exact; ++e) {
        bool kept = false;
        for (int64_t j = 0; j < groupK; ++j)
          kept |= chosen[t * groupK + j] == e / size;
        exact = bits[t * experts + e] == (fillFirst ? !kept : kept);
      }
    if (!exact)
      continue;
    r = candidate;
    r.groups = groups;
    r.groupK = groupK;
    r.groupTop = int64_t(best.getK());
    r.groupFill = *fillValue;
    return true;
  }
  return false;
}

/// A constant [..., E] (any leading ones) holding 0 .. E-1 along its last dim.
bool isPositions(Value v, int64_t experts) {
  FailureOr<DenseElementsAttr> value = evaluateConstant(v);
  if (failed(value) || value->getType().getShape().empty() ||
      value->getType().getShape().back() != experts ||
      value->getType().getNumElements() != experts || !value->getElementType().isInteger(64))
    return false;
  int64_t e = 0;
  for (int64_t p : value->getValues<int64_t>())
    if (p != e++)
      return false;
  return true;
}

/// v = s[ids] along the last dim, as transformers' gather of the chosen
/// experts' affinities exports: the sum over the experts of a one-hot of
/// the ids times (or where'd with) the broadcast affinities.
bool isGatherOfChosen(Value v, Value ids, Value s) {
  auto sum = v.getDefiningOp<nn::ReduceSumOp>();
  auto vType = typeOf(v), sType = typeOf(s);
  const int64_t rank = sType.getRank(), experts = sType.getShape().back();
  if (!sum || sum.getKeepdim() || sum.getDims().size() != 1 || sum.getDims()[0] != rank ||
      vType.getShape() != typeOf(ids).getShape())
    return false;
  Value picked = sum.getInput();
  auto isOneHot = [&](Value hit) {
    if (auto cast = hit.getDefiningOp<nn::CastOp>())
      hit = cast.getInput();
    auto eq = hit.getDefiningOp<nn::CompareOp>();
    if (!eq || eq.getPredicate() != nn::ComparePredicate::eq)
      return false;
    for (auto [a, b] : {std::pair{eq.getLhs(), eq.getRhs()}, std::pair{eq.getRhs(), eq.getLhs()}}) {
      auto column = a.getDefiningOp<nn::ReshapeOp>();
      if (column && column.getInput() == ids &&
          typeOf(a).getShape() == ArrayRef<int64_t>(llvm::to_vector(
                                      llvm::concat<const int64_t>(typeOf(ids).getShape(),
                                                                  ArrayRef<int64_t>{1}))) &&
          isPositions(b, experts))
        return true;
    }
    return false;
  };
  auto isRowOfScores = [&](Value row) {
    if (auto broadcast = row.getDefiningOp<nn::BroadcastOp>())
      row = broadcast.getInput();
    auto reshape = row.getDefiningOp<nn::ReshapeOp>();
    if (!reshape || reshape.getInput() != s)
      return false;
    SmallVector<int64_t> shape(sType.getShape());
    shape.insert(shape.end() - 1, 1);
    return typeOf(row).getShape() == ArrayRef<int64_t>(shape);
  };
  if (auto where = picked.getDefiningOp<nn::WhereOp>())
    return isOneHot(where.getCondition()) && isRowOfScores(where.getLhs()) &&
           isSplat(where.getRhs(), 0.0, 0.0);
  Value hot, row;
  if (auto mul = picked.getDefiningOp<nn::MulOp>())
    for (auto [a, b] : {std::pair{mul.getLhs(), mul.getRhs()}, std::pair{mul.getRhs(), mul.getLhs()}})
      if (isOneHot(a) && isRowOfScores(b))
        return true;
  return false;
}

/// The single user of `v` that is an `Op`, if `v` has exactly one user.
template <typename Op> Op onlyUser(Value v) {
  return v.hasOneUse() ? dyn_cast<Op>(*v.getUsers().begin()) : Op();
}

struct Weights {
  Value value; // the last value of the weights' chain
  bool normalize = false;
  double epsilon = 0, scale = 1;
};

/// From v = s[ids]: v / (sum(v) + epsilon), then times a constant scale,
/// each optional.
Weights matchWeights(Value v) {
  Weights w{v};
  const int64_t last = typeOf(v).getRank() - 1;
  for (Operation *user : v.getUsers()) {
    auto sum = dyn_cast<nn::ReduceSumOp>(user);
    if (!sum || !sum.getKeepdim() || sum.getDims().size() != 1 || sum.getDims()[0] != last)
      continue;
    Value divisor = sum.getResult();
    double epsilon = 0;
    if (auto add = onlyUser<nn::AddOp>(divisor)) {
      Value other = add.getLhs() == divisor ? add.getRhs() : add.getLhs();
      std::optional<double> e = splatValue(other);
      if (!e || add.getType() != divisor.getType())
        continue;
      epsilon = *e;
      divisor = add.getResult();
    }
    for (Operation *divUser : divisor.getUsers())
      if (auto div = dyn_cast<nn::DivOp>(divUser);
          div && div.getLhs() == v && div.getRhs() == divisor && div.getType() == v.getType()) {
        w = {div.getResult(), true, epsilon, 1};
        break;
      }
    if (w.normalize)
      break;
  }
  if (auto mul = onlyUser<nn::MulOp>(w.value); mul && mul.getType() == w.value.getType()) {
    Value other = mul.getLhs() == w.value ? mul.getRhs() : mul.getLhs();
    if (std::optional<double> scale = splatValue(other)) {
      w.scale = *scale;
      w.value = mul.getResult();
    }
  }
  return w;
}

void raise(nn::TopkOp choice) {
  if (choice.getSmallest())
    return;
  Value x = choice.getInput();
  Router r;
  if (!matchChoiceScores(x, r) && !matchGroupMask(x, r))
    return;
  // The chosen experts' affinities: the top-k's values when they are the
  // affinities themselves, else a gather of them by the ids.
  Value v;
  if (x == r.scores) {
    v = choice.getValues();
  } else {
    // Forward from the ids, a few ops, to the sum that gathers.
    SmallVector<Value> work{choice.getIndices()};
    for (size_t i = 0; i < work.size() && i < 32 && !v; ++i)
      for (Operation *user : work[i].getUsers()) {
        if (isa<nn::ReduceSumOp>(user) &&
            isGatherOfChosen(user->getResult(0), choice.getIndices(), r.scores)) {
          v = user->getResult(0);
          break;
        }
        llvm::append_range(work, user->getResults());
      }
  }
  if (!v)
    return;
  Weights w = matchWeights(v);
  // Where the choice was: its operands' producers come before it, every
  // replaced use after it.
  OpBuilder b(choice);
  auto router = b.create<nn::RouterOp>(
      choice.getLoc(), r.logits, r.bias, b.getI64IntegerAttr(choice.getK()),
      r.sigmoid ? b.getUnitAttr() : UnitAttr(), w.normalize ? b.getUnitAttr() : UnitAttr(),
      b.getI64IntegerAttr(r.groups), b.getI64IntegerAttr(r.groupK),
      b.getI64IntegerAttr(r.groupTop), b.getF64FloatAttr(r.groupFill),
      b.getF64FloatAttr(w.epsilon), b.getF64FloatAttr(w.scale));
  w.value.replaceAllUsesWith(router.getWeights());
  choice.getIndices().replaceAllUsesWith(router.getIds());
  r.scores.replaceUsesWithIf(router.getScores(), [&](OpOperand &use) {
    Operation *user = use.getOwner();
    return user->getBlock() == router->getBlock() && router->isBeforeInBlock(user);
  });
}

struct RaiseRouterPass : public loom::impl::RaiseRouterBase<RaiseRouterPass> {
  void runOnOperation() override {
    SmallVector<nn::TopkOp> choices;
    getOperation().walk([&](nn::TopkOp topk) { choices.push_back(topk); });
    for (nn::TopkOp choice : choices)
      raise(choice);
  }
};

} // namespace
