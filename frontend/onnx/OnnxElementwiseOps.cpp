// Elementwise ONNX operators: arithmetic, comparisons, logic, activations,
// Where, Cast, Clip, and the identities (Identity, Dropout at inference).

#include "frontend/onnx/OnnxNodeImporter.h"

#include <cmath>

using namespace mlir;

namespace loom::onnx_import {
namespace {

template <typename OpTy>
LogicalResult importBinary(NodeImporter &n) {
  FailureOr<Value> lhs = n.input(0), rhs = n.input(1);
  if (failed(lhs) || failed(rhs) || failed(n.requireSameElementType(*lhs, *rhs)))
    return failure();
  FailureOr<Value> result = n.inferred<OpTy>(*lhs, *rhs);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// Sum, Max, Min: a left fold of the binary op over all inputs.
template <typename OpTy>
FailureOr<Value> foldInputs(NodeImporter &n) {
  FailureOr<Value> acc = n.input(0);
  if (failed(acc))
    return failure();
  for (int i = 1; i < n.numInputs(); ++i) {
    FailureOr<Value> next = n.input(i);
    if (failed(next) || failed(n.requireSameElementType(*acc, *next)))
      return failure();
    acc = n.inferred<OpTy>(*acc, *next);
    if (failed(acc))
      return failure();
  }
  return acc;
}

template <typename OpTy>
LogicalResult importVariadic(NodeImporter &n) {
  FailureOr<Value> result = foldInputs<OpTy>(n);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

LogicalResult importMean(NodeImporter &n) {
  FailureOr<Value> sum = foldInputs<nn::AddOp>(n);
  if (failed(sum))
    return failure();
  Value count = n.scalar(NodeImporter::typeOf(*sum).getElementType(), n.numInputs());
  FailureOr<Value> mean = n.inferred<nn::DivOp>(*sum, count);
  if (failed(mean))
    return failure();
  return n.setOutput(0, *mean);
}

/// Pow: an exponent of another element type (Pow(f32, i64) is legal ONNX)
/// is converted when it is a constant.
LogicalResult importPow(NodeImporter &n) {
  FailureOr<Value> base = n.input(0), exponent = n.input(1);
  if (failed(base) || failed(exponent))
    return failure();
  RankedTensorType baseType = NodeImporter::typeOf(*base);
  if (NodeImporter::typeOf(*exponent).getElementType() != baseType.getElementType()) {
    FailureOr<DenseElementsAttr> value = n.constantInput(1, "exponent of another type");
    if (failed(value))
      return failure();
    auto type = RankedTensorType::get(value->getType().getShape(), baseType.getElementType());
    exponent = n.constant(elementsFromDoubles(type, elementsAsDoubles(*value)));
  }
  FailureOr<Value> result = n.inferred<nn::PowOp>(*base, *exponent);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

template <typename OpTy>
LogicalResult importUnary(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  if (failed(x))
    return failure();
  return n.setOutput(0, n.b.create<OpTy>(n.loc, x->getType(), *x).getResult());
}

/// Softplus(x) = ln(exp(x) + 1): x itself past 20 (where the two agree in
/// f32), and the exponent clamped there so the branch not taken stays
/// finite, its gradient zero.
LogicalResult importSoftplus(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  if (failed(x))
    return failure();
  Type type = x->getType();
  Type element = NodeImporter::typeOf(*x).getElementType();
  if (!isa<FloatType>(element))
    return n.fail("Softplus of a non-float tensor");
  Value limit = n.scalar(element, 20.0);
  Value capped = n.b.create<nn::MinimumOp>(n.loc, type, *x, limit);
  Value e = n.b.create<nn::ExpOp>(n.loc, type, capped);
  Value onePlus = n.b.create<nn::AddOp>(n.loc, type, e, n.scalar(element, 1.0));
  Value soft = n.b.create<nn::LogOp>(n.loc, type, onePlus);
  Value linear = n.b.create<nn::CompareOp>(
      n.loc, NodeImporter::typeOf(*x).clone(n.b.getI1Type()),
      nn::ComparePredicateAttr::get(n.b.getContext(), nn::ComparePredicate::gt), *x, limit);
  return n.setOutput(0, n.b.create<nn::WhereOp>(n.loc, type, linear, *x, soft).getResult());
}

LogicalResult importGelu(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  FailureOr<std::string> approximate = n.stringAttr("approximate", "none");
  if (failed(x) || failed(approximate))
    return failure();
  if (n.opset < 20)
    return n.fail("Gelu is an operator of opset 20 and later");
  nn::GeluApproximation kind;
  if (*approximate == "none")
    kind = nn::GeluApproximation::none;
  else if (*approximate == "tanh")
    kind = nn::GeluApproximation::tanh;
  else
    return n.fail("unsupported approximate = '" + *approximate + "'");
  return n.setOutput(0, n.b.create<nn::GeluOp>(n.loc, x->getType(), *x, kind).getResult());
}

/// Identity. Of a weight of one repeated value, a weight of its own: the
/// TorchScript exporter keeps one of several initializers with equal values
/// (a fresh model's norms, all ones; biases, all zeros) and names each of
/// the others by an Identity of it (`model.layers.1.input_layernorm.weight =
/// Identity(model.layers.0...)`); they were apart in the model and train
/// apart. (Tied weights are one initializer read twice; any other value is
/// passed through, so a tie can never be undone here.)
LogicalResult importIdentity(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  if (failed(x))
    return failure();
  auto param = x->getDefiningOp<nn::ParameterOp>();
  auto value = param && param.getValue() ? dyn_cast<DenseElementsAttr>(*param.getValue())
                                         : DenseElementsAttr();
  if (!value || !value.isSplat() || param.getFrozen())
    return n.setOutput(0, *x);
  auto copy = n.b.create<nn::ParameterOp>(
      n.loc, param.getType(), n.b.getStringAttr(n.node.output(0)), param.getFrozenAttr(),
      param.getInitAttr(), param.getInitScaleAttr(), *param.getValue());
  return n.setOutput(0, copy.getResult());
}

/// Dropout at inference is the identity; its mask output is all true.
LogicalResult importDropout(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  if (failed(x))
    return failure();
  if (n.hasInput(2)) {
    FailureOr<DenseElementsAttr> training = n.constantInput(2, "training_mode");
    if (failed(training))
      return failure();
    if (llvm::any_of(elementsAsInts(*training), [](int64_t v) { return v != 0; }))
      return n.fail("training_mode = true is unsupported: the importer builds "
                    "the inference graph");
  }
  if (n.wantsOutput(1)) {
    auto maskType = RankedTensorType::get(NodeImporter::typeOf(*x).getShape(),
                                          n.b.getI1Type());
    (void)n.setOutput(1, n.constant(DenseElementsAttr::get(maskType, true)));
  }
  return n.setOutput(0, *x);
}

template <nn::ComparePredicate predicate>
LogicalResult importCompare(NodeImporter &n) {
  FailureOr<Value> lhs = n.input(0), rhs = n.input(1);
  if (failed(lhs) || failed(rhs) || failed(n.requireSameElementType(*lhs, *rhs)))
    return failure();
  FailureOr<Value> result = n.inferred<nn::CompareOp>(predicate, *lhs, *rhs);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// IsNaN(x) is x != x.
LogicalResult importIsNaN(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  if (failed(x))
    return failure();
  FailureOr<Value> result = n.inferred<nn::CompareOp>(nn::ComparePredicate::ne, *x, *x);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

FailureOr<Value> boolInput(NodeImporter &n, int index) {
  FailureOr<Value> x = n.input(index);
  if (failed(x))
    return failure();
  if (!NodeImporter::typeOf(*x).getElementType().isInteger(1))
    return n.fail("input '" + n.node.input(index) + "' must be a bool tensor");
  return x;
}

/// Not(x) is x == false.
LogicalResult importNot(NodeImporter &n) {
  FailureOr<Value> x = boolInput(n, 0);
  if (failed(x))
    return failure();
  FailureOr<Value> result = n.inferred<nn::CompareOp>(
      nn::ComparePredicate::eq, *x, n.scalar(n.b.getI1Type(), 0));
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

/// And(a, b) is where(a, b, false); Or(a, b) is where(a, true, b);
/// Xor(a, b) is a != b.
LogicalResult importLogical(NodeImporter &n) {
  FailureOr<Value> a = boolInput(n, 0), b = boolInput(n, 1);
  if (failed(a) || failed(b))
    return failure();
  StringRef op = n.node.op_type();
  FailureOr<Value> result;
  if (op == "And")
    result = n.inferred<nn::WhereOp>(*a, *b, n.scalar(n.b.getI1Type(), 0));
  else if (op == "Or")
    result = n.inferred<nn::WhereOp>(*a, n.scalar(n.b.getI1Type(), 1), *b);
  else
    result = n.inferred<nn::CompareOp>(nn::ComparePredicate::ne, *a, *b);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

LogicalResult importWhere(NodeImporter &n) {
  FailureOr<Value> cond = boolInput(n, 0), lhs = n.input(1), rhs = n.input(2);
  if (failed(cond) || failed(lhs) || failed(rhs) ||
      failed(n.requireSameElementType(*lhs, *rhs)))
    return failure();
  FailureOr<Value> result = n.inferred<nn::WhereOp>(*cond, *lhs, *rhs);
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

LogicalResult importCast(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  FailureOr<int64_t> to = n.intAttr("to", -1);
  if (failed(x) || failed(to))
    return failure();
  Type elementType = elementTypeOf(n.b.getContext(), *to);
  if (!elementType)
    return n.fail("unsupported target type " + dataTypeName(*to));
  RankedTensorType type = NodeImporter::typeOf(*x);
  if (type.getElementType() == elementType)
    return n.setOutput(0, *x);
  auto resultType = RankedTensorType::get(type.getShape(), elementType);
  return n.setOutput(0, n.b.create<nn::CastOp>(n.loc, resultType, *x).getResult());
}

/// Clip(x, min, max) is minimum(maximum(x, min), max); both bounds optional.
LogicalResult importClip(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  if (failed(x))
    return failure();
  Value result = *x;
  if (n.hasInput(1)) {
    FailureOr<Value> low = n.input(1);
    if (failed(low) || failed(n.requireSameElementType(result, *low)))
      return failure();
    FailureOr<Value> clipped = n.inferred<nn::MaximumOp>(result, *low);
    if (failed(clipped))
      return failure();
    result = *clipped;
  }
  if (n.hasInput(2)) {
    FailureOr<Value> high = n.input(2);
    if (failed(high) || failed(n.requireSameElementType(result, *high)))
      return failure();
    FailureOr<Value> clipped = n.inferred<nn::MinimumOp>(result, *high);
    if (failed(clipped))
      return failure();
    result = *clipped;
  }
  return n.setOutput(0, result);
}

/// Mod(A, B; fmod) of integers: the remainder of truncated division, C's
/// fmod (fmod = 1: the sign of A), or of floored division, Python's %
/// (fmod = 0: the sign of B), which is the first plus B where the two are
/// nonzero and of opposite signs.
LogicalResult importMod(NodeImporter &n) {
  FailureOr<Value> a = n.input(0), b = n.input(1);
  FailureOr<int64_t> fmod = n.intAttr("fmod", 0);
  if (failed(a) || failed(b) || failed(fmod) || failed(n.requireSameElementType(*a, *b)))
    return failure();
  Type elementType = NodeImporter::typeOf(*a).getElementType();
  if (!isa<IntegerType>(elementType) || elementType.isInteger(1))
    return n.fail("only integer operands are supported");
  FailureOr<Value> quotient = n.inferred<nn::DivOp>(*a, *b);
  FailureOr<Value> multiple = failed(quotient) ? quotient : n.inferred<nn::MulOp>(*quotient, *b);
  FailureOr<Value> result = failed(multiple) ? multiple : n.inferred<nn::SubOp>(*a, *multiple);
  if (failed(result))
    return failure();
  if (*fmod == 0) {
    // Opposite signs, both nonzero: the product is negative.
    FailureOr<Value> product = n.inferred<nn::MulOp>(*result, *b);
    FailureOr<Value> opposite =
        failed(product) ? product
                        : n.inferred<nn::CompareOp>(nn::ComparePredicate::lt, *product,
                                                    n.scalar(elementType, 0));
    FailureOr<Value> shifted = failed(opposite) ? opposite : n.inferred<nn::AddOp>(*result, *b);
    result = failed(shifted) ? shifted : n.inferred<nn::WhereOp>(*opposite, *shifted, *result);
    if (failed(result))
      return failure();
  }
  return n.setOutput(0, *result);
}

} // namespace

namespace {

/// A unary operator Loom has no op for, of a constant: evaluated here (the
/// rotary tables an export computes from positions: Cos, Sin; Floor, Ceil).
template <double (*Function)(double)>
LogicalResult importHostUnary(NodeImporter &n) {
  FailureOr<DenseElementsAttr> x =
      n.constantInput(0, "Loom has no op for it, so it is evaluated at import time");
  if (failed(x))
    return failure();
  auto type = cast<RankedTensorType>(x->getType());
  if (!isa<FloatType>(type.getElementType()))
    return n.fail("expects a float input");
  std::vector<double> values = elementsAsDoubles(*x);
  for (double &v : values)
    v = Function(v);
  return n.setOutput(0, n.constant(elementsFromDoubles(type, values)));
}

double cosOf(double x) { return std::cos(x); }
double sinOf(double x) { return std::sin(x); }
double floorOf(double x) { return std::floor(x); }
double ceilOf(double x) { return std::ceil(x); }

} // namespace

void addElementwiseOps(OpTable &table) {
  table["Cos"] = importHostUnary<cosOf>;
  table["Sin"] = importHostUnary<sinOf>;
  table["Floor"] = importHostUnary<floorOf>;
  table["Ceil"] = importHostUnary<ceilOf>;
  table["Add"] = importBinary<nn::AddOp>;
  table["Sub"] = importBinary<nn::SubOp>;
  table["Mul"] = importBinary<nn::MulOp>;
  table["Div"] = importBinary<nn::DivOp>;
  table["Pow"] = importPow;
  table["Mod"] = importMod;
  table["Sum"] = importVariadic<nn::AddOp>;
  table["Max"] = importVariadic<nn::MaximumOp>;
  table["Min"] = importVariadic<nn::MinimumOp>;
  table["Mean"] = importMean;
  table["Neg"] = importUnary<nn::NegOp>;
  table["Abs"] = importUnary<nn::AbsOp>;
  table["Exp"] = importUnary<nn::ExpOp>;
  table["Softplus"] = importSoftplus;
  table["Log"] = importUnary<nn::LogOp>;
  table["Sqrt"] = importUnary<nn::SqrtOp>;
  table["Reciprocal"] = importUnary<nn::ReciprocalOp>;
  table["Tanh"] = importUnary<nn::TanhOp>;
  table["Erf"] = importUnary<nn::ErfOp>;
  table["Sigmoid"] = importUnary<nn::SigmoidOp>;
  table["Relu"] = importUnary<nn::ReluOp>;
  table["Gelu"] = importGelu;
  table["Identity"] = importIdentity;
  table["Dropout"] = importDropout;
  table["Equal"] = importCompare<nn::ComparePredicate::eq>;
  table["Less"] = importCompare<nn::ComparePredicate::lt>;
  table["LessOrEqual"] = importCompare<nn::ComparePredicate::le>;
  table["Greater"] = importCompare<nn::ComparePredicate::gt>;
  table["GreaterOrEqual"] = importCompare<nn::ComparePredicate::ge>;
  table["IsNaN"] = importIsNaN;
  table["Not"] = importNot;
  table["And"] = importLogical;
  table["Or"] = importLogical;
  table["Xor"] = importLogical;
  table["Where"] = importWhere;
  table["Cast"] = importCast;
  table["Clip"] = importClip;
}

} // namespace loom::onnx_import
