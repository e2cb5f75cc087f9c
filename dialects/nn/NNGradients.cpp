// The gradient rules of the nn ops (GradientOpInterface, NNInterfaces.td).
//
// Each rule builds, at the builder's insertion point, the gradient of one
// operand out of nn ops: existing ops where they say it well, the fused
// backward ops (nn.*_grad, nn.pad) where a composition would be long or
// would lose precision. A rule returns a null Value when the operand has no
// gradient (integer or bool operands, or no incoming gradient at all) and
// failure when it is asked for an operand the op does not have. Rules tag
// nothing: the autodiff driver decides what the new ops are.
//
// Operands that an op broadcast (elementwise ops, matmul batch dims) get
// their gradient summed back to their own shape by reduceToShape.
//
// The three gradients of an nn.attention are three results of one
// nn.attention_grad; the rule builds one such op per call, and CSE merges
// the identical ops the three calls leave (they are Pure).

#include "dialects/nn/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include <cmath>
#include <numeric>

using namespace mlir;
using namespace loom::nn;

namespace {

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

bool isFloatTensor(Value v) {
  return isa<FloatType>(tensorType(v).getElementType());
}

/// The gradient flowing into operand `index` of `op` through its result
/// `resultIndex`. Failure when the index or the gradient list does not fit
/// the op; null when there is nothing to propagate (the result has no
/// gradient, or the operand is not a float tensor and so has none).
FailureOr<Value> incomingGradient(Operation *op, unsigned index,
                                  ArrayRef<Value> resultGradients,
                                  unsigned resultIndex = 0) {
  if (index >= op->getNumOperands() ||
      resultGradients.size() != op->getNumResults())
    return failure();
  Value grad = resultGradients[resultIndex];
  if (!grad || !isFloatTensor(op->getOperand(index)))
    return Value();
  return grad;
}

/// A rank-0 constant of `elementType`; binary ops broadcast it.
Value scalar(OpBuilder &b, Location loc, Type elementType, double value) {
  auto type = RankedTensorType::get({}, elementType);
  Attribute element = b.getFloatAttr(elementType, value);
  return b.create<ConstantOp>(loc, DenseElementsAttr::get(type, element));
}

Value scalarLike(OpBuilder &b, Location loc, Value like, double value) {
  return scalar(b, loc, tensorType(like).getElementType(), value);
}

Value zeros(OpBuilder &b, Location loc, RankedTensorType type) {
  Attribute zero = b.getFloatAttr(type.getElementType(), 0.0);
  return b.create<ConstantOp>(loc, DenseElementsAttr::get(type, zero));
}

template <typename OpT>
Value binary(OpBuilder &b, Location loc, Value lhs, Value rhs) {
  return b.create<OpT>(loc, lhs, rhs).getResult();
}
Value add(OpBuilder &b, Location loc, Value x, Value y) {
  return binary<AddOp>(b, loc, x, y);
}
Value sub(OpBuilder &b, Location loc, Value x, Value y) {
  return binary<SubOp>(b, loc, x, y);
}
Value mul(OpBuilder &b, Location loc, Value x, Value y) {
  return binary<MulOp>(b, loc, x, y);
}
Value div(OpBuilder &b, Location loc, Value x, Value y) {
  return binary<DivOp>(b, loc, x, y);
}
Value neg(OpBuilder &b, Location loc, Value x) {
  return b.create<NegOp>(loc, x.getType(), x);
}

Value compare(OpBuilder &b, Location loc, ComparePredicate predicate, Value x,
              Value y) {
  return b.create<CompareOp>(
      loc, ComparePredicateAttr::get(b.getContext(), predicate), x, y);
}

Value select(OpBuilder &b, Location loc, Value condition, Value x, Value y) {
  return b.create<WhereOp>(loc, condition, x, y);
}

Value reduceSum(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> dims,
                bool keepdim) {
  if (dims.empty())
    return x;
  return b.create<ReduceSumOp>(loc, x, b.getDenseI64ArrayAttr(dims),
                               keepdim ? b.getUnitAttr() : UnitAttr());
}

Value reshape(OpBuilder &b, Location loc, Value x, ArrayRef<int64_t> shape) {
  auto type = RankedTensorType::get(shape, tensorType(x).getElementType());
  if (type == x.getType())
    return x;
  return b.create<ReshapeOp>(loc, type, x);
}

/// x[..., start : start + count * stride : stride] along `dim`.
Value sliceDim(OpBuilder &b, Location loc, Value x, int64_t dim, int64_t start,
               int64_t count, int64_t stride = 1) {
  auto type = tensorType(x);
  SmallVector<int64_t> starts(type.getRank(), 0), limits(type.getShape()),
      strides(type.getRank(), 1);
  starts[dim] = start;
  limits[dim] = start + (count - 1) * stride + 1;
  strides[dim] = stride;
  return b.create<SliceOp>(loc, x, b.getDenseI64ArrayAttr(starts),
                           b.getDenseI64ArrayAttr(limits),
                           b.getDenseI64ArrayAttr(strides));
}

Value concat(OpBuilder &b, Location loc, ValueRange pieces, int64_t dim) {
  return b.create<ConcatOp>(loc, pieces, b.getI64IntegerAttr(dim));
}

/// Sums `grad` over the dims NumPy broadcasting added or stretched to turn
/// `target`'s shape into grad's, then reshapes to `target`: the gradient of
/// an operand that was broadcast.
Value reduceToShape(OpBuilder &b, Location loc, Value grad,
                    RankedTensorType target) {
  auto type = tensorType(grad);
  if (type.getShape() == target.getShape())
    return grad;
  int64_t lead = type.getRank() - target.getRank();
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (d < lead ||
        (target.getDimSize(d - lead) == 1 && type.getDimSize(d) != 1))
      dims.push_back(d);
  return reshape(b, loc, reduceSum(b, loc, grad, dims, /*keepdim=*/false),
                 target.getShape());
}

/// Dims 0 .. rank-2: what a norm's weight and bias gradients sum over.
SmallVector<int64_t> leadingDims(Value x) {
  SmallVector<int64_t> dims(tensorType(x).getRank() - 1);
  std::iota(dims.begin(), dims.end(), 0);
  return dims;
}

/// The reduced result of a reduction (or its gradient) with the reduced
/// dims put back as size 1, so it broadcasts against the input.
Value withKeptDims(OpBuilder &b, Location loc, Value reduced,
                   RankedTensorType input, ArrayRef<int64_t> dims) {
  SmallVector<int64_t> shape(input.getShape());
  for (int64_t d : dims)
    shape[d] = 1;
  return reshape(b, loc, reduced, shape);
}

Value broadcastTo(OpBuilder &b, Location loc, Value x, RankedTensorType type) {
  if (x.getType() == type)
    return x;
  return b.create<BroadcastOp>(loc, type, x);
}

} // namespace

//===----------------------------------------------------------------------===//
// Unary elementwise
//===----------------------------------------------------------------------===//

FailureOr<Value> NegOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                             ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  return neg(b, getLoc(), *dy);
}

FailureOr<Value> AbsOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                             ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // sign(x) * dy, with sign(0) = 0 (the subgradient PyTorch picks).
  Location loc = getLoc();
  Value x = getInput(), zero = scalarLike(b, loc, x, 0.0);
  Value negative = select(b, loc, compare(b, loc, ComparePredicate::lt, x, zero),
                          neg(b, loc, *dy), zero);
  return select(b, loc, compare(b, loc, ComparePredicate::gt, x, zero), *dy,
                negative);
}

FailureOr<Value> ExpOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                             ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  return mul(b, getLoc(), *dy, getResult());
}

FailureOr<Value> LogOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                             ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  return div(b, getLoc(), *dy, getInput());
}

FailureOr<Value> SqrtOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                              ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // d sqrt(x) = 1 / (2 sqrt(x)): reuses the result.
  Location loc = getLoc();
  return div(b, loc, mul(b, loc, *dy, scalarLike(b, loc, *dy, 0.5)), getResult());
}

FailureOr<Value> RsqrtOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                               ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // d x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3.
  Location loc = getLoc();
  Value y = getResult();
  Value cube = mul(b, loc, mul(b, loc, y, y), y);
  return mul(b, loc, mul(b, loc, *dy, scalarLike(b, loc, y, -0.5)), cube);
}

FailureOr<Value>
ReciprocalOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                   ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // d (1/x) = -1/x^2 = -y^2.
  Location loc = getLoc();
  Value y = getResult();
  return neg(b, loc, mul(b, loc, *dy, mul(b, loc, y, y)));
}

FailureOr<Value> TanhOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                              ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  Location loc = getLoc();
  Value y = getResult();
  return mul(b, loc, *dy,
             sub(b, loc, scalarLike(b, loc, y, 1.0), mul(b, loc, y, y)));
}

FailureOr<Value> ErfOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                             ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // d erf(x) = 2/sqrt(pi) exp(-x^2).
  Location loc = getLoc();
  Value x = getInput();
  Value gaussian =
      b.create<ExpOp>(loc, x.getType(), neg(b, loc, mul(b, loc, x, x)));
  constexpr double kTwoOverSqrtPi = 1.1283791670955126;
  return mul(b, loc, mul(b, loc, *dy, scalarLike(b, loc, x, kTwoOverSqrtPi)),
             gaussian);
}

FailureOr<Value> SigmoidOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                                 ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  Location loc = getLoc();
  Value y = getResult();
  return mul(b, loc, mul(b, loc, *dy, y),
             sub(b, loc, scalarLike(b, loc, y, 1.0), y));
}

FailureOr<Value> SiluOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                              ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  return b.create<SiluGradOp>(getLoc(), getInput().getType(), getInput(), *dy)
      .getResult();
}

FailureOr<Value> ReluOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                              ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // The gradient at 0 is 0, as in PyTorch.
  Location loc = getLoc();
  Value x = getInput(), zero = scalarLike(b, loc, x, 0.0);
  return select(b, loc, compare(b, loc, ComparePredicate::gt, x, zero), *dy,
                zero);
}

FailureOr<Value> GeluOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                              ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  return b
      .create<GeluGradOp>(getLoc(), getInput().getType(), getInput(), *dy,
                          getApproximateAttr())
      .getResult();
}

//===----------------------------------------------------------------------===//
// Binary elementwise
//===----------------------------------------------------------------------===//

/// The shared shape of the binary rules: `rule(dy)` is operand `index`'s
/// gradient at the result's (broadcast) shape, summed back to the operand's.
template <typename OpT, typename Rule>
static FailureOr<Value> binaryGradient(OpT op, OpBuilder &b, unsigned index,
                                       ArrayRef<Value> resultGradients,
                                       Rule rule) {
  FailureOr<Value> dy = incomingGradient(op, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  Value grad = rule(*dy);
  return reduceToShape(b, op.getLoc(), grad,
                       tensorType(op->getOperand(index)));
}

FailureOr<Value> AddOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                             ArrayRef<Value> resultGradients) {
  return binaryGradient(*this, b, index, resultGradients,
                        [](Value dy) { return dy; });
}

FailureOr<Value> SubOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                             ArrayRef<Value> resultGradients) {
  return binaryGradient(*this, b, index, resultGradients, [&](Value dy) {
    return index == 0 ? dy : neg(b, getLoc(), dy);
  });
}

FailureOr<Value> MulOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                             ArrayRef<Value> resultGradients) {
  return binaryGradient(*this, b, index, resultGradients, [&](Value dy) {
    return mul(b, getLoc(), dy, index == 0 ? getRhs() : getLhs());
  });
}

FailureOr<Value> DivOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                             ArrayRef<Value> resultGradients) {
  return binaryGradient(*this, b, index, resultGradients, [&](Value dy) {
    Location loc = getLoc();
    if (index == 0)
      return div(b, loc, dy, getRhs());
    // d(a/b)/db = -a/b^2 = -(a/b)/b.
    return neg(b, loc, div(b, loc, mul(b, loc, dy, getResult()), getRhs()));
  });
}

FailureOr<Value> PowOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                             ArrayRef<Value> resultGradients) {
  return binaryGradient(*this, b, index, resultGradients, [&](Value dy) {
    Location loc = getLoc();
    Value base = getLhs(), exponent = getRhs();
    if (index == 0) {
      // d(a^b)/da = b a^(b-1).
      Value lowered =
          b.create<PowOp>(loc, base,
                          sub(b, loc, exponent, scalarLike(b, loc, base, 1.0)));
      return mul(b, loc, mul(b, loc, dy, exponent), lowered);
    }
    // d(a^b)/db = a^b log(a); where a = 0 the limit (b > 0) is 0, while
    // the formula would give 0 * -inf = NaN.
    Value zero = scalarLike(b, loc, base, 0.0);
    Value logBase = b.create<LogOp>(loc, base.getType(), base);
    Value grad = mul(b, loc, mul(b, loc, dy, getResult()), logBase);
    return select(b, loc, compare(b, loc, ComparePredicate::eq, base, zero), zero,
                  grad);
  });
}

/// maximum/minimum: the gradient goes to the operand that was picked; on a
/// tie, to the lhs.
template <typename OpT>
static FailureOr<Value> selectionGradient(OpT op, OpBuilder &b, unsigned index,
                                          ArrayRef<Value> resultGradients,
                                          ComparePredicate lhsWins) {
  return binaryGradient(op, b, index, resultGradients, [&](Value dy) {
    Location loc = op.getLoc();
    Value picked = compare(b, loc, lhsWins, op.getLhs(), op.getRhs());
    Value zero = scalarLike(b, loc, dy, 0.0);
    return index == 0 ? select(b, loc, picked, dy, zero)
                      : select(b, loc, picked, zero, dy);
  });
}

FailureOr<Value>
MaximumOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                ArrayRef<Value> resultGradients) {
  return selectionGradient(*this, b, index, resultGradients,
                           ComparePredicate::ge);
}

FailureOr<Value>
MinimumOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                ArrayRef<Value> resultGradients) {
  return selectionGradient(*this, b, index, resultGradients,
                           ComparePredicate::le);
}

FailureOr<Value>
CompareOp::buildOperandGradient(OpBuilder &, unsigned index,
                                ArrayRef<Value> resultGradients) {
  // A comparison is piecewise constant: no operand gets a gradient.
  if (index >= getOperation()->getNumOperands() || resultGradients.size() != 1)
    return failure();
  return Value();
}

FailureOr<Value> WhereOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                               ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy || index == 0) // the condition is i1: no gradient
    return dy;
  Location loc = getLoc();
  Value zero = scalarLike(b, loc, *dy, 0.0);
  Value grad = index == 1 ? select(b, loc, getCondition(), *dy, zero)
                          : select(b, loc, getCondition(), zero, *dy);
  return reduceToShape(b, loc, grad, tensorType(getOperand(index)));
}

FailureOr<Value> CastOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                              ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // A cast to an integer type is piecewise constant.
  if (!isFloatTensor(getResult()))
    return Value();
  Type operandType = getInput().getType();
  if (dy->getType() == operandType)
    return *dy;
  return b.create<CastOp>(getLoc(), operandType, *dy).getResult();
}

//===----------------------------------------------------------------------===//
// Contractions and reductions
//===----------------------------------------------------------------------===//

FailureOr<Value> MatmulOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                                ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // With C = op(A) op(B) (op: the optional transpose), dC flows back as
  // dop(A) = dC op(B)^T and dop(B) = op(A)^T dC; an operand stored
  // transposed gets the transpose of that, which is again one matmul.
  Location loc = getLoc();
  Value lhs = getLhs(), rhs = getRhs();
  bool tl = getTransposeLhs(), tr = getTransposeRhs();
  // An FP8 GEMM's gradient GEMMs are FP8 under the same recipe, told which
  // operand is the incoming gradient (the one `hybrid` keeps in e5m2).
  auto fp8 = (*this)->getAttrOfType<Fp8PolicyAttr>(kFp8PolicyAttrName);
  auto matmul = [&](Value x, Value y, bool transposeX, bool transposeY) {
    auto product = b.create<MatmulOp>(loc, x, y, transposeX ? b.getUnitAttr() : UnitAttr(),
                                      transposeY ? b.getUnitAttr() : UnitAttr());
    if (fp8) {
      Value g = *dy;
      auto rootOf = [](Value v) {
        while (auto r = v.getDefiningOp<ReshapeOp>())
          v = r.getInput();
        return v;
      };
      int64_t gradient = rootOf(x) == rootOf(g) ? 0 : rootOf(y) == rootOf(g) ? 1 : -1;
      product->setAttr(kFp8PolicyAttrName,
                       Fp8PolicyAttr::get(b.getContext(), fp8.getRecipe(), fp8.getFormat(),
                                          fp8.getMargin(), fp8.getHistory(), gradient));
    }
    return product.getResult();
  };
  // A weight shared by every batch (x @ W with x [..., M, K], W 2-D): the
  // batch is more rows of one product, so dW is a single matmul over the
  // flattened rows, not a batched one followed by a sum over the batch.
  auto lhsType = tensorType(lhs), dyType = tensorType(*dy);
  if (index == 1 && !tl && lhsType.getRank() > 2 && tensorType(rhs).getRank() == 2) {
    int64_t rows = 1;
    for (int64_t d : lhsType.getShape().drop_back())
      rows *= d;
    Value x = b.create<ReshapeOp>(
        loc, RankedTensorType::get({rows, lhsType.getShape().back()}, lhsType.getElementType()),
        lhs);
    Value g = b.create<ReshapeOp>(
        loc, RankedTensorType::get({rows, dyType.getShape().back()}, dyType.getElementType()),
        *dy);
    return tr ? matmul(g, x, true, false)  // dW [N, K] = dY^T X
              : matmul(x, g, true, false); // dW [K, N] = X^T dY
  }
  Value grad;
  if (index == 0)
    grad = tl ? matmul(rhs, *dy, tr, true)   // dA [K, M] = op(B) dC^T
              : matmul(*dy, rhs, false, !tr); // dA [M, K] = dC op(B)^T
  else
    grad = tr ? matmul(*dy, lhs, true, tl)   // dB [N, K] = dC^T op(A)
              : matmul(lhs, *dy, !tl, false); // dB [K, N] = op(A)^T dC
  // Batch dims the operand broadcast are summed away.
  return reduceToShape(b, loc, grad, tensorType(getOperand(index)));
}

/// The reduction's result gradient, put back to the input's rank with the
/// reduced dims of size 1.
template <typename OpT>
static Value keptDimsGradient(OpT op, OpBuilder &b, Value dy) {
  return withKeptDims(b, op.getLoc(), dy, op.getInput().getType(),
                      op.getDims());
}

FailureOr<Value>
ReduceSumOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                  ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  return broadcastTo(b, getLoc(), keptDimsGradient(*this, b, *dy),
                     getInput().getType());
}

FailureOr<Value>
ReduceMeanOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                   ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  Location loc = getLoc();
  int64_t count = 1;
  for (int64_t d : getDims())
    count *= getInput().getType().getDimSize(d);
  Value scaled = mul(b, loc, keptDimsGradient(*this, b, *dy),
                     scalarLike(b, loc, *dy, 1.0 / static_cast<double>(count)));
  return broadcastTo(b, loc, scaled, getInput().getType());
}

FailureOr<Value>
ReduceMaxOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                  ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // The gradient goes to the elements equal to the maximum, split evenly
  // among ties (as in PyTorch's amax).
  Location loc = getLoc();
  Value x = getInput();
  Value isMax = compare(b, loc, ComparePredicate::eq, x,
                        keptDimsGradient(*this, b, getResult()));
  Value maxMask = select(b, loc, isMax, scalarLike(b, loc, x, 1.0),
                         scalarLike(b, loc, x, 0.0));
  Value ties = reduceSum(b, loc, maxMask, getDims(), /*keepdim=*/true);
  Value share = div(b, loc, keptDimsGradient(*this, b, *dy), ties);
  return mul(b, loc, maxMask, share);
}

FailureOr<Value> SoftmaxOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                                 ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // dx = y * (dy - sum(dy * y)) along dim.
  Location loc = getLoc();
  Value y = getResult();
  int64_t dim = getDim();
  Value weighted = reduceSum(b, loc, mul(b, loc, *dy, y), {dim}, true);
  return mul(b, loc, y, sub(b, loc, *dy, weighted));
}

FailureOr<Value>
LogSoftmaxOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                   ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // dx = dy - softmax(x) * sum(dy) along dim.
  Location loc = getLoc();
  Value probabilities = b.create<SoftmaxOp>(loc, getInput().getType(),
                                            getInput(), getDimAttr());
  int64_t dim = getDim();
  Value total = reduceSum(b, loc, *dy, {dim}, true);
  return sub(b, loc, *dy, mul(b, loc, probabilities, total));
}

//===----------------------------------------------------------------------===//
// Transformer layers
//===----------------------------------------------------------------------===//

/// Which operand of a norm `index` is: the input, the weight or the bias.
enum class NormOperand { Input, Weight, Bias };

FailureOr<Value>
LayerNormOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                  ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  Location loc = getLoc();
  NormOperand which = index == 0 ? NormOperand::Input
                      : getWeight() && index == getODSOperandIndexAndLength(1).first
                          ? NormOperand::Weight
                          : NormOperand::Bias;
  Value x = getInput();
  switch (which) {
  case NormOperand::Input:
    return b
        .create<LayerNormGradOp>(loc, x.getType(), x, *dy, getWeight(),
                                 getEpsilonAttr())
        .getResult();
  case NormOperand::Weight: {
    // dW = sum over rows of dy * xhat, xhat the unscaled normalized input.
    Value normalized = b.create<LayerNormOp>(loc, x.getType(), x, Value(),
                                             Value(), getEpsilonAttr());
    return reduceSum(b, loc, mul(b, loc, *dy, normalized), leadingDims(x), false);
  }
  case NormOperand::Bias:
    return reduceSum(b, loc, *dy, leadingDims(x), false);
  }
  return failure();
}

FailureOr<Value> RmsNormOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                                 ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  Location loc = getLoc();
  Value x = getInput();
  if (index == 0)
    return b
        .create<RmsNormGradOp>(loc, x.getType(), x, *dy, getWeight(),
                               getEpsilonAttr())
        .getResult();
  Value normalized =
      b.create<RmsNormOp>(loc, x.getType(), x, Value(), getEpsilonAttr());
  return reduceSum(b, loc, mul(b, loc, *dy, normalized), leadingDims(x), false);
}

FailureOr<Value> RopeOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                              ArrayRef<Value> resultGradients) {
  if (getTranspose() != RopeTranspose::none)
    return emitOpError("has no gradient rule with transpose = ")
           << stringifyRopeTranspose(getTranspose())
           << " (--loom-fold-transposes runs after the backward is built)";
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  Location loc = getLoc();
  Value x = getInput(), sin = getSin();
  auto inputType = getInput().getType();
  int64_t last = inputType.getRank() - 1;
  int64_t dim = inputType.getShape().back(), half = dim / 2;
  bool interleaved = getInterleaved();

  if (index == 0) {
    // The rotation's transpose is the rotation by -angle. Pairs (i, i+D/2)
    // read sin[i] for one element and sin[i+D/2] for the other, so the
    // transpose reads them crosswise: rope with the halves of sin swapped
    // (a no-op for the usual tables, whose halves are equal). Interleaved
    // pairs read one sin entry for both and need no swap.
    Value sinForGrad = sin;
    if (!interleaved) {
      int64_t tableLast = tensorType(sin).getRank() - 1;
      sinForGrad = concat(b, loc,
                          {sliceDim(b, loc, sin, tableLast, half, half),
                           sliceDim(b, loc, sin, tableLast, 0, half)},
                          tableLast);
    }
    return b
        .create<RopeOp>(loc, inputType, *dy, getCos(), neg(b, loc, sinForGrad),
                        getInterleavedAttr())
        .getResult();
  }

  // The tables' gradients sum over every batch and head dim.
  auto tableType = tensorType(getOperand(index));
  bool isCos = index == 1;
  if (!interleaved) {
    // y = x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1].
    Value factor = x;
    if (!isCos)
      factor = concat(b, loc,
                      {neg(b, loc, sliceDim(b, loc, x, last, half, half)),
                       sliceDim(b, loc, x, last, 0, half)},
                      last);
    return reduceToShape(b, loc, mul(b, loc, *dy, factor), tableType);
  }
  // Interleaved: y0 = x0 cos - x1 sin and y1 = x1 cos + x0 sin, with cos
  // and sin read at the even position of each pair; odd entries are unused
  // and get zero.
  Value x0 = sliceDim(b, loc, x, last, 0, half, 2);
  Value x1 = sliceDim(b, loc, x, last, 1, half, 2);
  Value dy0 = sliceDim(b, loc, *dy, last, 0, half, 2);
  Value dy1 = sliceDim(b, loc, *dy, last, 1, half, 2);
  Value perPair = isCos ? add(b, loc, mul(b, loc, dy0, x0), mul(b, loc, dy1, x1))
                        : sub(b, loc, mul(b, loc, dy1, x0), mul(b, loc, dy0, x1));
  Value evenEntries = reduceToShape(
      b, loc, perPair,
      RankedTensorType::get({tableType.getDimSize(0), half},
                            tableType.getElementType()));
  return b
      .create<PadOp>(loc, evenEntries, b.getDenseI64ArrayAttr({0, 0}),
                     b.getDenseI64ArrayAttr({0, 1}),
                     b.getDenseI64ArrayAttr({0, 1}), b.getF64FloatAttr(0.0))
      .getResult();
}

FailureOr<Value>
AttentionOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                  ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // The gradient keeps the forward's layouts: dy is laid out as the result,
  // dq, dk and dv as q, k and v.
  const int64_t mask = getSeqMajor();
  auto grads = b.create<AttentionGradOp>(getLoc(), getQuery(), getKey(),
                                         getValue(), *dy, getCausalAttr(),
                                         getScaleAttr(),
                                         b.getI64IntegerAttr((mask & 0b1111) | (mask & 0b111) << 4),
                                         getWindowAttr());
  return grads->getResult(index);
}

FailureOr<Value>
EmbeddingOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                  ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy) // the ids are integers: no gradient
    return dy;
  return b
      .create<EmbeddingGradOp>(
          getLoc(), getIds(), *dy,
          b.getI64IntegerAttr(getTable().getType().getDimSize(0)), getVocabStartAttr(),
          getVocabSizeAttr())
      .getResult();
}

FailureOr<Value>
CrossEntropyOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                     ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy) // the labels are integers: no gradient
    return dy;
  return b
      .create<CrossEntropyGradOp>(getLoc(), getLogits(), getLabels(), *dy,
                                  getIgnoreIndexAttr(), getReductionAttr())
      .getResult();
}

FailureOr<Value> DropoutOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                                 ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // The mask depends only on the seed and the element index, so the same
  // dropout of dy keeps and scales exactly the elements the forward kept.
  return b
      .create<DropoutOp>(getLoc(), dy->getType(), *dy, getPAttr(), getSeedAttr())
      .getResult();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

FailureOr<Value> ReshapeOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                                 ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  return reshape(b, getLoc(), *dy, getInput().getType().getShape());
}

FailureOr<Value>
TransposeOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                  ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  ArrayRef<int64_t> permutation = getPermutation();
  SmallVector<int64_t> inverse(permutation.size());
  for (auto [i, p] : llvm::enumerate(permutation))
    inverse[p] = i;
  return b.create<TransposeOp>(getLoc(), *dy, b.getDenseI64ArrayAttr(inverse))
      .getResult();
}

FailureOr<Value>
BroadcastOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                  ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  return reduceToShape(b, getLoc(), *dy, getInput().getType());
}

FailureOr<Value> SliceOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                               ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // dy goes back to the positions the slice read, zeros elsewhere: low
  // padding up to the start, stride - 1 between elements, the rest after.
  auto input = getInput().getType();
  auto result = getType();
  SmallVector<int64_t> low, high, interior;
  for (int64_t d = 0; d < input.getRank(); ++d) {
    int64_t n = result.getDimSize(d), size = input.getDimSize(d);
    if (n == 0) {
      low.push_back(0);
      high.push_back(size);
      interior.push_back(0);
      continue;
    }
    int64_t start = getStarts()[d], stride = getStrides()[d];
    int64_t lastRead = start + (n - 1) * stride;
    low.push_back(start);
    interior.push_back(stride - 1);
    high.push_back(size - 1 - lastRead);
  }
  return b
      .create<PadOp>(getLoc(), *dy, b.getDenseI64ArrayAttr(low),
                     b.getDenseI64ArrayAttr(high),
                     b.getDenseI64ArrayAttr(interior), b.getF64FloatAttr(0.0))
      .getResult();
}

FailureOr<Value> StopGradientOp::buildOperandGradient(OpBuilder &, unsigned,
                                                     ArrayRef<Value>) {
  return Value(); // none, whatever reaches the result
}

FailureOr<Value> PadOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                             ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  // The input's elements sit at low + i * (interior + 1): a strided slice
  // of dy reads their gradients back (the padding's value has none).
  auto input = getInput().getType();
  SmallVector<int64_t> starts, limits, strides;
  for (int64_t d = 0; d < input.getRank(); ++d) {
    int64_t n = input.getDimSize(d), stride = getInterior()[d] + 1;
    starts.push_back(getLow()[d]);
    limits.push_back(n ? getLow()[d] + (n - 1) * stride + 1 : getLow()[d]);
    strides.push_back(stride);
  }
  return b
      .create<SliceOp>(getLoc(), input.clone(cast<RankedTensorType>((*dy).getType()).getElementType()),
                       *dy, b.getDenseI64ArrayAttr(starts), b.getDenseI64ArrayAttr(limits),
                       b.getDenseI64ArrayAttr(strides))
      .getResult();
}

FailureOr<Value> ConcatOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                                ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  int64_t dim = getDim(), offset = 0;
  for (unsigned i = 0; i < index; ++i)
    offset += tensorType(getInputs()[i]).getDimSize(dim);
  int64_t size = tensorType(getInputs()[index]).getDimSize(dim);
  if (size == 0)
    return zeros(b, getLoc(), tensorType(getInputs()[index]));
  return sliceDim(b, getLoc(), *dy, dim, offset, size);
}

FailureOr<Value> SplitOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                               ArrayRef<Value> resultGradients) {
  if (index != 0 || resultGradients.size() != getNumResults())
    return failure();
  if (!isFloatTensor(getInput()) ||
      llvm::all_of(resultGradients, [](Value g) { return !g; }))
    return Value();
  // The pieces' gradients joined again; a piece without one contributes
  // zeros.
  Location loc = getLoc();
  SmallVector<Value> pieces;
  for (auto [result, grad] : llvm::zip(getResults(), resultGradients))
    pieces.push_back(grad ? grad : zeros(b, loc, tensorType(result)));
  return concat(b, loc, pieces, getDim());
}

FailureOr<Value> GatherOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                                ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy) // the indices are integers: no gradient
    return dy;
  auto data = tensorType(getData());
  return b
      .create<GatherGradOp>(getLoc(), getIndices(), *dy, getAxisAttr(),
                            b.getI64IntegerAttr(data.getDimSize(getAxis())))
      .getResult();
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

namespace {

/// The gradient of a row-wise selection `values = input[..., indices]`
/// along the last dim: each value's gradient goes back to its position.
/// Built as a one-hot of the indices ([..., k, N]) times the gradient,
/// summed over k: routing rows are short (N experts, k chosen).
/// The one-hot of row-wise positions `indices` [..., k] over `n`: [..., k,
/// n] of `elementType`.
Value oneHotRows(OpBuilder &b, Location loc, Value indices, int64_t n, Type elementType) {
  auto idxType = tensorType(indices);
  int64_t rank = idxType.getRank();
  SmallVector<int64_t> column(idxType.getShape());
  column.push_back(1);
  Value idx = reshape(b, loc, indices, column);
  SmallVector<int64_t> row(rank + 1, 1);
  row.back() = n;
  Type i64 = b.getI64Type();
  Value positions = b.create<IotaOp>(loc, RankedTensorType::get(row, i64),
                                     b.getI64IntegerAttr(rank), b.getF64FloatAttr(0),
                                     b.getF64FloatAttr(1));
  Value hit = compare(b, loc, ComparePredicate::eq, idx, positions);
  SmallVector<int64_t> full(idxType.getShape());
  full.push_back(n);
  return b.create<CastOp>(loc, RankedTensorType::get(full, elementType), hit);
}

Value scatterRows(OpBuilder &b, Location loc, Value indices, Value grad,
                  RankedTensorType inputType) {
  auto idxType = tensorType(indices);
  int64_t rank = idxType.getRank(), n = inputType.getShape().back();
  Value oneHot = oneHotRows(b, loc, indices, n, inputType.getElementType());
  SmallVector<int64_t> column(idxType.getShape());
  column.push_back(1);
  Value g = reshape(b, loc, grad, column);
  return reduceSum(b, loc, mul(b, loc, oneHot, g), {rank - 1}, /*keepdim=*/false);
}

/// `input[..., indices]` along the last dim (the inverse of scatterRows).
Value gatherRows(OpBuilder &b, Location loc, Value indices, Value input) {
  auto inputType = tensorType(input);
  int64_t rank = inputType.getRank(), n = inputType.getShape().back();
  Value oneHot = oneHotRows(b, loc, indices, n, inputType.getElementType());
  SmallVector<int64_t> row(inputType.getShape());
  row.insert(row.end() - 1, 1);
  return reduceSum(b, loc, mul(b, loc, oneHot, reshape(b, loc, input, row)), {rank},
                   /*keepdim=*/false);
}

} // namespace

FailureOr<Value> TopkOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                              ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  return scatterRows(b, getLoc(), getIndices(), *dy, getInput().getType());
}

FailureOr<Value> RouterOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                                ArrayRef<Value> resultGradients) {
  if (index >= getNumOperands() || resultGradients.size() != getNumResults())
    return failure();
  Value dw = resultGradients[0], ds = resultGradients[2];
  if (index != 0 || (!dw && !ds))
    return Value(); // the bias and the ids steer the choice alone
  Location loc = getLoc();
  Value s = getScores();
  const int64_t last = tensorType(s).getRank() - 1;
  Value gradScores = ds;
  if (dw) {
    // w = scale * v / (sum(v) + epsilon), v = s[ids]: dv = (d - sum(d *
    // v / D)) / D with d = scale * dw and D the divisor.
    Value d = dw;
    if (getScale().convertToDouble() != 1.0)
      d = mul(b, loc, d, scalarLike(b, loc, d, getScale().convertToDouble()));
    if (getNormalize()) {
      Value v = gatherRows(b, loc, getIds(), s);
      Value divisor = reduceSum(b, loc, v, {last}, /*keepdim=*/true);
      if (getEpsilon().convertToDouble() != 0.0)
        divisor = add(b, loc, divisor, scalarLike(b, loc, divisor, getEpsilon().convertToDouble()));
      Value share = reduceSum(b, loc, mul(b, loc, d, div(b, loc, v, divisor)), {last},
                              /*keepdim=*/true);
      d = div(b, loc, sub(b, loc, d, share), divisor);
    }
    Value chosen = scatterRows(b, loc, getIds(), d, tensorType(s));
    gradScores = gradScores ? add(b, loc, gradScores, chosen) : chosen;
  }
  if (getSigmoid())
    return mul(b, loc, mul(b, loc, gradScores, s), sub(b, loc, scalarLike(b, loc, s, 1.0), s));
  Value weighted = reduceSum(b, loc, mul(b, loc, gradScores, s), {last}, /*keepdim=*/true);
  return mul(b, loc, s, sub(b, loc, gradScores, weighted));
}

FailureOr<Value> SortOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                              ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy)
    return dy;
  return scatterRows(b, getLoc(), getIndices(), *dy, getInput().getType());
}

FailureOr<Value> GroupedMatmulOp::buildOperandGradient(OpBuilder &b, unsigned index,
                                                       ArrayRef<Value> resultGradients) {
  FailureOr<Value> dy = incomingGradient(*this, index, resultGradients);
  if (failed(dy) || !*dy) // the offsets are integers: no gradient
    return dy;
  Location loc = getLoc();
  if (index == 0) {
    // dx = dy times each group's weight transposed: the same weight, read
    // the other way.
    auto grad = b.create<GroupedMatmulOp>(loc, getInput().getType(), *dy, getWeight(),
                                          getOffsets(), getGroupStartAttr());
    grad.setTransposeWeight(!getTransposeWeight());
    return grad.getResult();
  }
  // [E, K, N]: x^T dy per group; transposed, [E, N, K]: dy^T x.
  Value rowsK = getInput(), rowsN = *dy;
  if (getTransposeWeight())
    std::swap(rowsK, rowsN);
  return b
      .create<GroupedMatmulWeightGradOp>(loc, getWeight().getType(), rowsK, rowsN, getOffsets(),
                                         getGroupStartAttr())
      .getResult();
}
