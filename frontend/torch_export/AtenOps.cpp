// The ATen operators Loom imports, each mapped to the nn ops that compute it.
// Operators that are already high-level (layer_norm, silu, gelu, softmax,
// linear, embedding, scaled_dot_product_attention) map to their nn op;
// everything else maps op for op, leaving pattern raising to the raising
// passes. Operators without an nn counterpart (cumsum, cos, sin) are computed
// here when their input is a compile-time constant.

#include "frontend/torch_export/GraphImporter.h"

#include "dialects/nn/NNOps.h"
#include "frontend/common/Compositions.h"

#include "llvm/ADT/StringMap.h"

#include <cmath>
#include <functional>

using namespace mlir;

namespace loom::torch_export {

// AtenRoutingOps.cpp: mixture-of-experts routing.
void addRoutingConverters(llvm::StringMap<OperatorConverter> &table);
llvm::Error convertIndexPutIntegers(NodeContext &node, mlir::Value self, mlir::Value index,
                                    mlir::Value values, bool accumulate);
llvm::Error convertCumsumAtRunTime(NodeContext &node, mlir::Value self, int64_t dim);

namespace {

using llvm::Error;
using llvm::Expected;

Expected<int64_t> normalizeDim(int64_t dim, int64_t rank) {
  int64_t extent = std::max<int64_t>(rank, 1);
  if (dim < -extent || dim >= extent)
    return importError("dim " + llvm::Twine(dim) + " is out of range for rank " +
                       llvm::Twine(rank));
  return dim < 0 ? dim + extent : dim;
}

RankedTensorType tensorType(Value value) { return cast<RankedTensorType>(value.getType()); }

bool isFloat(Type type) { return isa<FloatType>(type); }

/// NumPy broadcasting of two shapes; nullopt when they do not broadcast.
std::optional<llvm::SmallVector<int64_t>> broadcastShapes(llvm::ArrayRef<int64_t> a,
                                                          llvm::ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  llvm::SmallVector<int64_t> shape(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x != y && x != 1 && y != 1)
      return std::nullopt;
    shape[i] = x == 1 ? y : x;
  }
  return shape;
}

/// The element type torch computes a binary op on two types in.
Type promote(Type a, Type b) {
  if (a == b)
    return a;
  if (isFloat(a) != isFloat(b))
    return isFloat(a) ? a : b;
  if (a.isInteger(1) || b.isInteger(1))
    return a.isInteger(1) ? b : a;
  return a.getIntOrFloatBitWidth() >= b.getIntOrFloatBitWidth() ? a : b;
}

/// Element values as doubles (integers and bools exactly up to 2^53).
std::vector<double> toDoubles(DenseElementsAttr attr) {
  std::vector<double> values;
  values.reserve(attr.getNumElements());
  Type element = attr.getElementType();
  if (isFloat(element)) {
    for (const llvm::APFloat &v : attr.getValues<llvm::APFloat>())
      values.push_back(v.convertToDouble() /* exact for every Loom float type */);
  } else if (element.isInteger(1)) {
    for (bool v : attr.getValues<bool>())
      values.push_back(v);
  } else {
    for (const llvm::APInt &v : attr.getValues<llvm::APInt>())
      values.push_back(double(v.getSExtValue()));
  }
  return values;
}

DenseElementsAttr fromDoubles(RankedTensorType type, llvm::ArrayRef<double> values) {
  Type element = type.getElementType();
  if (auto floatType = dyn_cast<FloatType>(element)) {
    llvm::SmallVector<llvm::APFloat> converted;
    for (double v : values) {
      llvm::APFloat f(v);
      bool lost = false;
      f.convert(floatType.getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven, &lost);
      converted.push_back(f);
    }
    return DenseElementsAttr::get(type, converted);
  }
  if (element.isInteger(1)) {
    llvm::SmallVector<bool> converted;
    for (double v : values)
      converted.push_back(v != 0);
    return DenseElementsAttr::get(type, llvm::ArrayRef<bool>(converted));
  }
  llvm::SmallVector<llvm::APInt> converted;
  for (double v : values)
    converted.push_back(llvm::APInt(element.getIntOrFloatBitWidth(), int64_t(v), true));
  return DenseElementsAttr::get(type, converted);
}

/// The constant value of an operand an operator without an nn counterpart needs.
Expected<DenseElementsAttr> requireConstant(NodeContext &node, Value value) {
  if (std::optional<DenseElementsAttr> constant = node.importer().constantValue(value))
    return *constant;
  return importError("unsupported operator: Loom has no op for it, and its input is not a "
                     "compile-time constant");
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// Arithmetic on `self` and `other` (tensor or number) in the result's dtype.
template <typename OpT>
Error convertArithmeticOn(NodeContext &node, llvm::StringRef lhsName, llvm::StringRef rhsName) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  Type element = type->getElementType();
  GraphImporter &g = node.importer();
  auto lhs = node.tensorOrNumber(lhsName, 0, element);
  if (!lhs)
    return lhs.takeError();
  auto rhs = node.tensorOrNumber(rhsName, 1, element);
  if (!rhs)
    return rhs.takeError();
  auto lhsCast = g.castTo(*lhs, element);
  if (!lhsCast)
    return lhsCast.takeError();
  auto rhsCast = g.castTo(*rhs, element);
  if (!rhsCast)
    return rhsCast.takeError();
  Value rhsValue = *rhsCast;
  // add/sub take `alpha`, a multiplier of `other`.
  if (node.has("alpha", 2)) {
    auto alpha = node.number("alpha", 2);
    if (!alpha)
      return alpha.takeError();
    if (*alpha != 1) {
      auto scaled = g.create<nn::MulOp>(tensorType(rhsValue), rhsValue, g.scalar(element, *alpha));
      if (!scaled)
        return scaled.takeError();
      rhsValue = *scaled;
    }
  }
  auto result = g.create<OpT>(*type, *lhsCast, rhsValue);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

template <typename OpT>
Error convertArithmetic(NodeContext &node) {
  return convertArithmeticOn<OpT>(node, "self", "other");
}

Error convertReverseSub(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  Type element = type->getElementType();
  GraphImporter &g = node.importer();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto selfCast = g.castTo(*self, element);
  if (!selfCast)
    return selfCast.takeError();
  auto other = node.tensorOrNumber("other", 1, element);
  if (!other)
    return other.takeError();
  auto otherCast = g.castTo(*other, element);
  if (!otherCast)
    return otherCast.takeError();
  auto alpha = node.number("alpha", 2, 1.0);
  if (!alpha)
    return alpha.takeError();
  Value scaled = *selfCast;
  if (*alpha != 1) {
    auto mul = g.create<nn::MulOp>(tensorType(scaled), scaled, g.scalar(element, *alpha));
    if (!mul)
      return mul.takeError();
    scaled = *mul;
  }
  auto result = g.create<nn::SubOp>(*type, *otherCast, scaled);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Error convertDiv(NodeContext &node) {
  auto mode = node.string("rounding_mode", 2, std::string());
  if (!mode)
    return mode.takeError();
  if (!mode->empty())
    return convertRoundedDivide(node, *mode);
  return convertArithmetic<nn::DivOp>(node);
}

Error convertPow(NodeContext &node) {
  return convertArithmeticOn<nn::PowOp>(node, "self", "exponent");
}

template <nn::ComparePredicate Predicate>
Error convertCompare(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  Type element = tensorType(*self).getElementType();
  GraphImporter &g = node.importer();
  Value other;
  if (node.isNumber("other", 1)) {
    const llvm::json::Object *argument = node.arg("other", 1);
    bool floatScalar = argument && argument->get("as_float");
    if (floatScalar && !isFloat(element))
      element = Float32Type::get(g.context());
    else if (element.isInteger(1) && !argument->get("as_bool"))
      element = IntegerType::get(g.context(), 64);
    auto number = node.number("other", 1);
    if (!number)
      return number.takeError();
    other = g.scalar(element, *number);
  } else {
    auto tensor = node.tensor("other", 1);
    if (!tensor)
      return tensor.takeError();
    other = *tensor;
    element = promote(element, tensorType(other).getElementType());
  }
  auto lhs = g.castTo(*self, element);
  if (!lhs)
    return lhs.takeError();
  auto rhs = g.castTo(other, element);
  if (!rhs)
    return rhs.takeError();
  auto result = g.create<nn::CompareOp>(
      *type, nn::ComparePredicateAttr::get(g.context(), Predicate), *lhs, *rhs);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// `value` as i1: itself when boolean, else value != 0.
Expected<Value> truthOf(GraphImporter &g, Value value) {
  RankedTensorType type = tensorType(value);
  if (type.getElementType().isInteger(1))
    return value;
  return g.create<nn::CompareOp>(
      type.clone(IntegerType::get(g.context(), 1)),
      nn::ComparePredicateAttr::get(g.context(), nn::ComparePredicate::ne), value,
      g.scalar(type.getElementType(), 0));
}

enum class Logic { And, Or, Xor, Not };

/// Boolean logic; `bitwise` ones accept only bool tensors (bit operations on
/// integers have no nn op), `logical` ones test against zero first.
template <Logic Kind, bool Bitwise>
Error convertLogic(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  GraphImporter &g = node.importer();
  Type i1 = IntegerType::get(g.context(), 1);
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  if (Bitwise && !tensorType(*self).getElementType().isInteger(1))
    return importError("bitwise operations are supported on bool tensors only, got " +
                       typeString(tensorType(*self)));
  auto lhs = truthOf(g, *self);
  if (!lhs)
    return lhs.takeError();
  Expected<Value> result = Value();
  if (Kind == Logic::Not) {
    result = g.create<nn::CompareOp>(
        *type, nn::ComparePredicateAttr::get(g.context(), nn::ComparePredicate::eq), *lhs,
        g.scalar(i1, 0));
  } else {
    Value other;
    if (node.isNumber("other", 1)) {
      auto number = node.number("other", 1);
      if (!number)
        return number.takeError();
      other = g.scalar(i1, *number);
    } else {
      auto tensor = node.tensor("other", 1);
      if (!tensor)
        return tensor.takeError();
      if (Bitwise && !tensorType(*tensor).getElementType().isInteger(1))
        return importError("bitwise operations are supported on bool tensors only, got " +
                           typeString(tensorType(*tensor)));
      auto truth = truthOf(g, *tensor);
      if (!truth)
        return truth.takeError();
      other = *truth;
    }
    if (Kind == Logic::And)
      result = g.create<nn::WhereOp>(*type, *lhs, other, g.scalar(i1, 0));
    else if (Kind == Logic::Or)
      result = g.create<nn::WhereOp>(*type, *lhs, g.scalar(i1, 1), other);
    else
      result = g.create<nn::CompareOp>(
          *type, nn::ComparePredicateAttr::get(g.context(), nn::ComparePredicate::ne), *lhs,
          other);
  }
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// A unary nn op on `self` converted to the result's dtype.
template <typename OpT>
Error convertUnary(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto input = node.importer().castTo(*self, type->getElementType());
  if (!input)
    return input.takeError();
  auto result = node.importer().create<OpT>(*type, *input);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// An elementwise function with no nn op, computed on a constant input.
Error convertHostUnary(NodeContext &node, double (*function)(double)) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto value = requireConstant(node, *self);
  if (!value)
    return value.takeError();
  std::vector<double> values = toDoubles(*value);
  for (double &v : values)
    v = function(v);
  if (int64_t(values.size()) != type->getNumElements())
    return importError("the result's size differs from the input's");
  return node.setResult(0, node.importer().constant(fromDoubles(*type, values)));
}

Error convertGelu(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto approximate = node.string("approximate", 1, std::string("none"));
  if (!approximate)
    return approximate.takeError();
  if (*approximate != "none" && *approximate != "tanh")
    return importError("gelu approximation '" + *approximate + "' is not supported");
  auto kind = *approximate == "tanh" ? nn::GeluApproximation::tanh : nn::GeluApproximation::none;
  auto result = node.importer().create<nn::GeluOp>(
      *type, *self, nn::GeluApproximationAttr::get(node.importer().context(), kind));
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// Ops that return their input's value: views, copies, metadata-only moves.
Error convertIdentity(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  return node.setResult(0, *self);
}

/// detach: the value, through which no gradient flows (a constant, as the
/// causal masks' detach_ reads, stays itself).
Error convertDetach(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  GraphImporter &g = node.importer();
  if (!isa<FloatType>(tensorType(*self).getElementType()) || g.constantValue(*self))
    return node.setResult(0, *self);
  auto stopped = g.create<nn::StopGradientOp>(*self);
  if (!stopped)
    return stopped.takeError();
  return node.setResult(0, *stopped);
}

/// to.dtype, to.dtype_layout, to.device, _to_copy, type_as: a cast to the result dtype.
Error convertCast(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto result = node.importer().castTo(*self, type->getElementType());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Error convertDropout(NodeContext &node) {
  auto input = node.tensor("input", 0);
  if (!input)
    return input.takeError();
  auto p = node.number("p", 1, 0.0);
  if (!p)
    return p.takeError();
  auto train = node.boolean("train", 2, true);
  if (!train)
    return train.takeError();
  if (!*train || *p == 0)
    return node.setResult(0, *input);
  GraphImporter &g = node.importer();
  auto result = g.create<nn::DropoutOp>(tensorType(*input), *input,
                                        g.builder().getF64FloatAttr(*p),
                                        g.builder().getI64IntegerAttr(0));
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Error convertWhere(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  Type element = type->getElementType();
  GraphImporter &g = node.importer();
  auto condition = node.tensor("condition", 0);
  if (!condition)
    return condition.takeError();
  auto truth = truthOf(g, *condition);
  if (!truth)
    return truth.takeError();
  auto lhs = node.tensorOrNumber("self", 1, element);
  if (!lhs)
    return lhs.takeError();
  auto rhs = node.tensorOrNumber("other", 2, element);
  if (!rhs)
    return rhs.takeError();
  auto lhsCast = g.castTo(*lhs, element);
  if (!lhsCast)
    return lhsCast.takeError();
  auto rhsCast = g.castTo(*rhs, element);
  if (!rhsCast)
    return rhsCast.takeError();
  auto result = g.create<nn::WhereOp>(*type, *truth, *lhsCast, *rhsCast);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Error convertMaskedFill(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  Type element = type->getElementType();
  GraphImporter &g = node.importer();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto mask = node.tensor("mask", 1);
  if (!mask)
    return mask.takeError();
  auto truth = truthOf(g, *mask);
  if (!truth)
    return truth.takeError();
  auto value = node.tensorOrNumber("value", 2, element);
  if (!value)
    return value.takeError();
  auto valueCast = g.castTo(*value, element);
  if (!valueCast)
    return valueCast.takeError();
  auto result = g.create<nn::WhereOp>(*type, *truth, *valueCast, *self);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// The functional forms of copy_, fill_ and zero_: `self`'s type, new values.
Error convertCopy(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  GraphImporter &g = node.importer();
  auto source = node.tensor("src", 1);
  if (!source)
    return source.takeError();
  auto shape = broadcastShapes(tensorType(*source).getShape(), type->getShape());
  if (!shape || llvm::ArrayRef<int64_t>(*shape) != type->getShape())
    return importError("copies a " + typeString(tensorType(*source)) + " into a " +
                       typeString(*type) + ": the shapes do not broadcast");
  auto cast = g.castTo(*source, type->getElementType());
  if (!cast)
    return cast.takeError();
  auto result = g.broadcastTo(*cast, type->getShape());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Error convertFillValue(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  if (node.isNumber("value", 1)) {
    auto value = node.number("value", 1);
    if (!value)
      return value.takeError();
    return node.setResult(0, node.importer().splat(*type, *value));
  }
  auto value = node.tensor("value", 1);
  if (!value)
    return value.takeError();
  if (tensorType(*value).getRank() != 0)
    return importError("fill with a tensor that is not a scalar");
  auto cast = node.importer().castTo(*value, type->getElementType());
  if (!cast)
    return cast.takeError();
  auto result = node.importer().broadcastTo(*cast, type->getShape());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// index_put with one boolean mask (`x[mask] = v`): a where. Integer indices
/// would need a scatter, which Loom does not have.
Error convertIndexPut(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  GraphImporter &g = node.importer();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto indices = node.tensorList("indices", 1);
  if (!indices)
    return indices.takeError();
  if (indices->size() == 1 && indices->front() &&
      isa<IntegerType>(tensorType(*indices->front()).getElementType()) &&
      !tensorType(*indices->front()).getElementType().isInteger(1)) {
    auto values = node.tensor("values", 2);
    if (!values)
      return values.takeError();
    auto accumulate = node.boolean("accumulate", 3, false);
    if (!accumulate)
      return accumulate.takeError();
    return convertIndexPutIntegers(node, *self, *indices->front(), *values, *accumulate);
  }
  if (indices->size() != 1 || !indices->front() ||
      !tensorType(*indices->front()).getElementType().isInteger(1))
    return importError("index_put with several indices is not supported; only a boolean mask "
                       "or one integer index into dim 0");
  Value mask = *indices->front();
  RankedTensorType maskType = tensorType(mask);
  if (maskType.getRank() > type->getRank() ||
      maskType.getShape() != type->getShape().take_front(maskType.getRank()))
    return importError("index_put's mask " + typeString(maskType) + " does not match " +
                       typeString(*type));
  auto values = node.tensor("values", 2);
  if (!values)
    return values.takeError();
  llvm::ArrayRef<int64_t> trailing = type->getShape().drop_front(maskType.getRank());
  RankedTensorType valuesType = tensorType(*values);
  // Values for each selected element: a scalar or one trailing slice.
  bool perSlice = valuesType.getNumElements() == 1 ||
                  valuesType.getShape() == trailing ||
                  (valuesType.getRank() == int64_t(trailing.size()) + 1 &&
                   valuesType.getDimSize(0) == 1 && valuesType.getShape().drop_front() == trailing);
  if (!perSlice)
    return importError("index_put's values " + typeString(valuesType) +
                       " depend on how many elements the mask selects; only a scalar or one "
                       "slice per selected element is supported");
  auto accumulate = node.boolean("accumulate", 3, false);
  if (!accumulate)
    return accumulate.takeError();
  llvm::SmallVector<int64_t> maskShape(maskType.getShape());
  maskShape.append(trailing.size(), 1);
  auto maskFull = g.reshapeTo(mask, maskShape);
  if (!maskFull)
    return maskFull.takeError();
  auto broadcastMask = g.broadcastTo(*maskFull, type->getShape());
  if (!broadcastMask)
    return broadcastMask.takeError();
  auto cast = g.castTo(*values, type->getElementType());
  if (!cast)
    return cast.takeError();
  auto flatValues = g.reshapeTo(*cast, valuesType.getNumElements() == 1
                                           ? llvm::SmallVector<int64_t>()
                                           : llvm::SmallVector<int64_t>(trailing));
  if (!flatValues)
    return flatValues.takeError();
  auto spread = g.broadcastTo(*flatValues, type->getShape());
  if (!spread)
    return spread.takeError();
  Value replacement = *spread;
  if (*accumulate) {
    auto sum = g.create<nn::AddOp>(*type, *self, *spread);
    if (!sum)
      return sum.takeError();
    replacement = *sum;
  }
  auto result = g.create<nn::WhereOp>(*type, *broadcastMask, replacement, *self);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// square(x) = x * x.
Error convertSquare(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto input = node.importer().castTo(*self, type->getElementType());
  if (!input)
    return input.takeError();
  auto result = node.importer().create<nn::MulOp>(*type, *input, *input);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// A float op's result type and its `self` operand cast to that type.
Expected<std::pair<RankedTensorType, Value>> floatOperand(NodeContext &node,
                                                         llvm::StringRef what) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  if (!isa<FloatType>(type->getElementType()))
    return importError(what + llvm::Twine(" of a non-float tensor"));
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto x = node.importer().castTo(*self, type->getElementType());
  if (!x)
    return x.takeError();
  return std::pair{*type, *x};
}

/// expm1(x) = exp(x) - 1 (without log1p's care for tiny x: an absolute
/// error of an ulp of 1 there).
Error convertExpm1(NodeContext &node) {
  auto operand = floatOperand(node, "expm1");
  if (!operand)
    return operand.takeError();
  auto [type, x] = *operand;
  Type element = type.getElementType();
  GraphImporter &g = node.importer();
  auto e = g.create<nn::ExpOp>(type, x);
  if (!e)
    return e.takeError();
  auto result = g.create<nn::SubOp>(type, *e, g.scalar(element, 1.0));
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// log(1 + x), as log1p, softplus and log_sigmoid need it (an absolute
/// error of an ulp of 1 for tiny x, as expm1 above).
Expected<Value> logOnePlus(GraphImporter &g, RankedTensorType type, Value x) {
  auto onePlus = g.create<nn::AddOp>(type, x, g.scalar(type.getElementType(), 1.0));
  if (!onePlus)
    return onePlus.takeError();
  return g.create<nn::LogOp>(type, *onePlus);
}

/// log_sigmoid(x) = min(x, 0) - log(1 + exp(-|x|)): exp never overflows,
/// and a large |x| gives x (or 0) rather than log of 0.
Error convertLogSigmoid(NodeContext &node) {
  auto operand = floatOperand(node, "log_sigmoid");
  if (!operand)
    return operand.takeError();
  auto [type, x] = *operand;
  Type element = type.getElementType();
  GraphImporter &g = node.importer();
  auto low = g.create<nn::MinimumOp>(type, x, g.scalar(element, 0.0));
  if (!low)
    return low.takeError();
  auto magnitude = g.create<nn::AbsOp>(type, x);
  if (!magnitude)
    return magnitude.takeError();
  auto negated = g.create<nn::NegOp>(type, *magnitude);
  if (!negated)
    return negated.takeError();
  auto e = g.create<nn::ExpOp>(type, *negated);
  if (!e)
    return e.takeError();
  auto log = logOnePlus(g, type, *e);
  if (!log)
    return log.takeError();
  auto result = g.create<nn::SubOp>(type, *low, *log);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// log1p (core ATen's softplus and Mamba's decay come here).
Error convertLog1p(NodeContext &node) {
  auto operand = floatOperand(node, "log1p");
  if (!operand)
    return operand.takeError();
  auto [type, x] = *operand;
  auto result = logOnePlus(node.importer(), type, x);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// softplus(x, beta, threshold) = log(1 + exp(beta x)) / beta, and x where
/// beta x > threshold (torch's linear regime). The exponent is clamped to
/// the threshold first, so the branch not taken is finite and its
/// gradient zero, never NaN.
Error convertSoftplus(NodeContext &node) {
  auto operand = floatOperand(node, "softplus");
  if (!operand)
    return operand.takeError();
  auto [type, x] = *operand;
  Type element = type.getElementType();
  GraphImporter &g = node.importer();
  auto beta = node.number("beta", 1, 1.0);
  if (!beta)
    return beta.takeError();
  auto threshold = node.number("threshold", 2, 20.0);
  if (!threshold)
    return threshold.takeError();
  if (*beta == 0)
    return importError("softplus with beta = 0 divides by zero");
  Value scaled = x;
  if (*beta != 1) {
    auto product = g.create<nn::MulOp>(type, x, g.scalar(element, *beta));
    if (!product)
      return product.takeError();
    scaled = *product;
  }
  auto capped = g.create<nn::MinimumOp>(type, scaled, g.scalar(element, *threshold));
  if (!capped)
    return capped.takeError();
  auto e = g.create<nn::ExpOp>(type, *capped);
  if (!e)
    return e.takeError();
  auto soft = logOnePlus(g, type, *e);
  if (!soft)
    return soft.takeError();
  Value softValue = *soft;
  if (*beta != 1) {
    auto quotient = g.create<nn::DivOp>(type, softValue, g.scalar(element, *beta));
    if (!quotient)
      return quotient.takeError();
    softValue = *quotient;
  }
  auto linear = g.create<nn::CompareOp>(
      type.clone(IntegerType::get(g.context(), 1)),
      nn::ComparePredicateAttr::get(g.context(), nn::ComparePredicate::gt), scaled,
      g.scalar(element, *threshold));
  if (!linear)
    return linear.takeError();
  auto result = g.create<nn::WhereOp>(type, *linear, x, softValue);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Error convertClamp(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  Type element = type->getElementType();
  GraphImporter &g = node.importer();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto value = g.castTo(*self, element);
  if (!value)
    return value.takeError();
  Value result = *value;
  llvm::StringRef target = node.target();
  bool hasMin = target.contains("clamp_min") || (!target.contains("clamp_max") && node.has("min", 1));
  bool hasMax = target.contains("clamp_max") ? true
                : target.contains("clamp_min") ? false
                                               : node.has("max", 2);
  if (hasMin) {
    auto bound = node.tensorOrNumber("min", 1, element);
    if (!bound)
      return bound.takeError();
    auto boundCast = g.castTo(*bound, element);
    if (!boundCast)
      return boundCast.takeError();
    auto clamped = g.create<nn::MaximumOp>(*type, result, *boundCast);
    if (!clamped)
      return clamped.takeError();
    result = *clamped;
  }
  if (hasMax) {
    auto bound = node.tensorOrNumber("max", target.contains("clamp_max") ? 1 : 2, element);
    if (!bound)
      return bound.takeError();
    auto boundCast = g.castTo(*bound, element);
    if (!boundCast)
      return boundCast.takeError();
    auto clamped = g.create<nn::MinimumOp>(*type, result, *boundCast);
    if (!clamped)
      return clamped.takeError();
    result = *clamped;
  }
  return node.setResult(0, result);
}

//===----------------------------------------------------------------------===//
// Tensor creation
//===----------------------------------------------------------------------===//

// floor: the positions of Llama 4's and Ministral 3's attention
// temperature; erfinv: the constants torch.distributions.Normal computes
// (Gemma 3n's activation sparsity takes a normal quantile). Both of
// constants only (convertHostUnary).
double floorOf(double x) { return std::floor(x); }

/// The inverse of erf on (-1, 1), ±inf at ±1, NaN outside: a first guess
/// from the logistic-like bound, then Newton steps on erf in double.
double erfinvOf(double y) {
  if (std::isnan(y) || y < -1 || y > 1)
    return std::nan("");
  if (y == 1 || y == -1)
    return y * std::numeric_limits<double>::infinity();
  double w = -std::log((1 - y) * (1 + y));
  double x = std::copysign(std::sqrt(std::max(0.0, std::sqrt(w * w / 4 + 2 * w / 0.147 +
                                                             4 / (M_PI * 0.147 * M_PI * 0.147)) -
                                                   (2 / (M_PI * 0.147) + w / 2))),
                           y);
  for (int i = 0; i < 4; ++i)
    x -= (std::erf(x) - y) / (2 / std::sqrt(M_PI) * std::exp(-x * x));
  return x;
}

/// _is_all_true: whether every element is true, a 0-d bool (torch's
/// argument checks, e.g. torch.distributions'). 1 - max(1 - x) over all
/// elements, compared with 1.
Error convertIsAllTrue(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  GraphImporter &g = node.importer();
  Type f32 = Float32Type::get(g.context());
  auto x = g.castTo(*self, f32);
  if (!x)
    return x.takeError();
  RankedTensorType floatType = tensorType(*x);
  auto falseness = g.create<nn::SubOp>(floatType, g.scalar(f32, 1.0), *x);
  if (!falseness)
    return falseness.takeError();
  Value flat = *falseness;
  if (floatType.getRank() != 1) {
    auto reshaped = g.reshapeTo(flat, {floatType.getNumElements()});
    if (!reshaped)
      return reshaped.takeError();
    flat = *reshaped;
  }
  if (floatType.getNumElements() == 0)
    return node.setResult(0, g.constant(fromDoubles(*type, {1.0})));
  auto anyFalse = g.create<nn::ReduceMaxOp>(RankedTensorType::get({}, f32), flat,
                                            g.builder().getDenseI64ArrayAttr({0}), UnitAttr());
  if (!anyFalse)
    return anyFalse.takeError();
  auto all = g.create<nn::CompareOp>(
      type->clone(g.builder().getI1Type()),
      nn::ComparePredicateAttr::get(g.context(), nn::ComparePredicate::eq), *anyFalse,
      g.scalar(f32, 0.0));
  if (!all)
    return all.takeError();
  auto result = g.castTo(*all, type->getElementType());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// aten.eye(n, m): the identity, a constant of the result's type.
Error convertEye(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  if (type->getRank() != 2)
    return importError("eye must give a 2-D tensor, not " + typeString(*type));
  int64_t rows = type->getDimSize(0), cols = type->getDimSize(1);
  if (rows < 0 || cols < 0 || (rows > 0 && cols > (int64_t(1) << 26) / rows))
    return importError("eye of " + llvm::Twine(rows) + " x " + llvm::Twine(cols) +
                       " is too large for a constant");
  std::vector<double> values(rows * cols, 0.0);
  for (int64_t i = 0; i < std::min(rows, cols); ++i)
    values[i * cols + i] = 1.0;
  return node.setResult(0, node.importer().constant(fromDoubles(*type, values)));
}

Error convertArange(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  bool hasStart = node.has("start", -1);
  auto start = node.number("start", -1, 0.0);
  if (!start)
    return start.takeError();
  auto step = node.number("step", -1, 1.0);
  if (!step)
    return step.takeError();
  if (!hasStart && !node.has("end", 0))
    return importError("missing argument 'end'");
  if (*step == 0)
    return importError("arange step is zero");
  if (type->getRank() != 1)
    return importError("arange must give a 1-D tensor");
  GraphImporter &g = node.importer();
  auto result = g.create<nn::IotaOp>(*type, g.builder().getI64IntegerAttr(0),
                                     g.builder().getF64FloatAttr(*start),
                                     g.builder().getF64FloatAttr(*step));
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// full, zeros, ones and their new_/_like forms: a splat of the result type.
Error convertFill(NodeContext &node, std::optional<double> fixed, llvm::StringRef valueName,
                  int valuePosition) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  double value = 0;
  if (fixed) {
    value = *fixed;
  } else {
    auto number = node.number(valueName, valuePosition);
    if (!number)
      return number.takeError();
    value = *number;
  }
  return node.setResult(0, node.importer().splat(*type, value));
}

//===----------------------------------------------------------------------===//
// Shapes and data movement
//===----------------------------------------------------------------------===//

/// view, reshape, squeeze, unsqueeze, flatten...: the result's shape.
Error convertReshape(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  if (tensorType(*self).getNumElements() != type->getNumElements())
    return importError("cannot reshape " + typeString(tensorType(*self)) + " to " +
                       typeString(*type));
  auto result = node.importer().reshapeTo(*self, type->getShape());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Error convertExpand(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto result = node.importer().broadcastTo(*self, type->getShape());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Expected<Value> transpose(GraphImporter &g, Value input, llvm::ArrayRef<int64_t> permutation) {
  RankedTensorType type = tensorType(input);
  if (llvm::equal(permutation, llvm::seq<int64_t>(0, permutation.size())))
    return input;
  llvm::SmallVector<int64_t> shape;
  for (int64_t d : permutation)
    shape.push_back(type.getDimSize(d));
  return g.create<nn::TransposeOp>(type.clone(shape), input,
                                   g.builder().getDenseI64ArrayAttr(permutation));
}

Error convertTranspose(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  int64_t rank = tensorType(*self).getRank();
  llvm::SmallVector<int64_t> permutation = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  if (node.target().contains(".t.") || node.target().ends_with(".t")) {
    if (rank > 2)
      return importError("t() expects a tensor of rank <= 2");
    if (rank == 2)
      permutation = {1, 0};
  } else {
    auto dim0 = node.integer("dim0", 1);
    if (!dim0)
      return dim0.takeError();
    auto dim1 = node.integer("dim1", 2);
    if (!dim1)
      return dim1.takeError();
    auto a = normalizeDim(*dim0, rank);
    if (!a)
      return a.takeError();
    auto b = normalizeDim(*dim1, rank);
    if (!b)
      return b.takeError();
    if (rank > 0)
      std::swap(permutation[*a], permutation[*b]);
  }
  auto result = transpose(node.importer(), *self, permutation);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// broadcast_tensors: each tensor of the list expanded to their common
/// shape (each result's, from the export).
Error convertBroadcastTensors(NodeContext &node) {
  auto tensors = node.tensorList("tensors", 0);
  if (!tensors)
    return tensors.takeError();
  if (tensors->size() != node.numResults())
    return importError("broadcast_tensors of " + llvm::Twine(tensors->size()) + " tensors has " +
                       llvm::Twine(node.numResults()) + " results");
  for (auto [i, tensor] : llvm::enumerate(*tensors)) {
    if (!tensor)
      return importError("broadcast_tensors of a None tensor");
    auto type = node.resultType(i);
    if (!type)
      return type.takeError();
    if (!broadcastShapes(tensorType(*tensor).getShape(), type->getShape()))
      return importError("broadcast_tensors cannot expand " + typeString(tensorType(*tensor)) +
                         " to " + typeString(*type));
    auto result = node.importer().broadcastTo(*tensor, type->getShape());
    if (!result)
      return result.takeError();
    if (Error err = node.setResult(i, *result))
      return err;
  }
  return Error::success();
}

/// numpy_T (`x.T`): every dim reversed.
Error convertNumpyT(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  int64_t rank = tensorType(*self).getRank();
  llvm::SmallVector<int64_t> permutation;
  for (int64_t d = rank - 1; d >= 0; --d)
    permutation.push_back(d);
  auto result = transpose(node.importer(), *self, permutation);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Error convertPermute(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto dims = node.integers("dims", 1);
  if (!dims)
    return dims.takeError();
  int64_t rank = tensorType(*self).getRank();
  if (int64_t(dims->size()) != rank)
    return importError("permute needs " + llvm::Twine(rank) + " dims");
  llvm::SmallVector<int64_t> permutation;
  llvm::SmallVector<bool> seen(rank, false);
  for (int64_t d : *dims) {
    auto dim = normalizeDim(d, rank);
    if (!dim)
      return dim.takeError();
    if (seen[*dim])
      return importError("permute repeats dim " + llvm::Twine(*dim));
    seen[*dim] = true;
    permutation.push_back(*dim);
  }
  auto result = transpose(node.importer(), *self, permutation);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// [start, end) along a dim of `size`, clamped as Python clamps slice bounds.
std::pair<int64_t, int64_t> clampSliceBounds(int64_t size, std::optional<int64_t> start,
                                             std::optional<int64_t> end) {
  auto clampBound = [&](std::optional<int64_t> bound, int64_t fallback) {
    if (!bound)
      return fallback;
    int64_t v = *bound < 0 ? *bound + size : *bound;
    return std::clamp<int64_t>(v, 0, size);
  };
  int64_t begin = clampBound(start, 0);
  return {begin, std::max(begin, clampBound(end, size))};
}

/// input[start:end:step] along `dim`, with Python's clamping of the bounds.
Expected<Value> sliceAlong(GraphImporter &g, Value input, int64_t dim, std::optional<int64_t> start,
                           std::optional<int64_t> end, int64_t step) {
  RankedTensorType type = tensorType(input);
  int64_t size = type.getDimSize(dim);
  if (step <= 0)
    return importError("slice step must be positive, got " + llvm::Twine(step));
  auto [begin, limit] = clampSliceBounds(size, start, end);
  if (begin == 0 && limit == size && step == 1)
    return input;
  llvm::SmallVector<int64_t> starts(type.getRank(), 0), limits(type.getShape()),
      strides(type.getRank(), 1);
  starts[dim] = begin;
  limits[dim] = limit;
  strides[dim] = step;
  llvm::SmallVector<int64_t> shape(type.getShape());
  shape[dim] = (limit - begin + step - 1) / step;
  return g.create<nn::SliceOp>(type.clone(shape), input, g.builder().getDenseI64ArrayAttr(starts),
                               g.builder().getDenseI64ArrayAttr(limits),
                               g.builder().getDenseI64ArrayAttr(strides));
}

Error convertSlice(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto dim = node.integer("dim", 1, 0);
  if (!dim)
    return dim.takeError();
  auto axis = normalizeDim(*dim, tensorType(*self).getRank());
  if (!axis)
    return axis.takeError();
  auto start = node.optionalInteger("start", 2);
  if (!start)
    return start.takeError();
  auto end = node.optionalInteger("end", 3);
  if (!end)
    return end.takeError();
  auto step = node.integer("step", 4, 1);
  if (!step)
    return step.takeError();
  auto result = sliceAlong(node.importer(), *self, *axis, *start, *end, *step);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// slice_scatter(self, src, dim, start, end, step): self with
/// self[start:end:step] along dim replaced by src (what functionalization
/// makes of an in-place slice assignment): the slices before and after,
/// joined around src. Steps other than 1 are refused.
Error convertSliceScatter(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto src = node.tensor("src", 1);
  if (!src)
    return src.takeError();
  auto dim = node.integer("dim", 2, 0);
  if (!dim)
    return dim.takeError();
  RankedTensorType selfType = tensorType(*self);
  auto axis = normalizeDim(*dim, selfType.getRank());
  if (!axis)
    return axis.takeError();
  auto start = node.optionalInteger("start", 3);
  if (!start)
    return start.takeError();
  auto end = node.optionalInteger("end", 4);
  if (!end)
    return end.takeError();
  auto step = node.integer("step", 5, 1);
  if (!step)
    return step.takeError();
  GraphImporter &g = node.importer();
  int64_t size = selfType.getDimSize(*axis);
  auto [begin, limit] = clampSliceBounds(size, *start, *end);
  auto value = g.castTo(*src, selfType.getElementType());
  if (!value)
    return value.takeError();
  RankedTensorType srcType = tensorType(*value);
  if (srcType.getRank() != selfType.getRank())
    return importError("slice_scatter: src has rank " + llvm::Twine(srcType.getRank()) +
                       ", self " + llvm::Twine(selfType.getRank()));
  if (*step != 1 && limit - begin > 1)
    return importError("slice_scatter with step " + llvm::Twine(*step) +
                       " is not supported (only contiguous slices)");
  if (srcType.getDimSize(*axis) != limit - begin)
    return importError("slice_scatter: src has " + llvm::Twine(srcType.getDimSize(*axis)) +
                       " elements along dim " + llvm::Twine(*axis) + " for a slice of " +
                       llvm::Twine(limit - begin));
  auto placed = g.placeAlong(*self, *value, *axis, begin, limit);
  if (!placed)
    return placed.takeError();
  return node.setResult(0, *placed);
}

/// select_scatter(self, src, dim, index): self with its slice at `index`
/// along `dim` replaced by src (which lacks that dim).
Error convertSelectScatter(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto src = node.tensor("src", 1);
  if (!src)
    return src.takeError();
  auto dim = node.integer("dim", 2);
  if (!dim)
    return dim.takeError();
  auto index = node.integer("index", 3);
  if (!index)
    return index.takeError();
  RankedTensorType selfType = tensorType(*self);
  auto axis = normalizeDim(*dim, selfType.getRank());
  if (!axis)
    return axis.takeError();
  int64_t size = selfType.getDimSize(*axis);
  int64_t at = *index < 0 ? *index + size : *index;
  if (at < 0 || at >= size)
    return importError("select_scatter index " + llvm::Twine(*index) + " out of range for " +
                       llvm::Twine(size) + " elements along dim " + llvm::Twine(*axis));
  GraphImporter &g = node.importer();
  auto value = g.castTo(*src, selfType.getElementType());
  if (!value)
    return value.takeError();
  llvm::SmallVector<int64_t> shape(tensorType(*value).getShape());
  if (int64_t(shape.size()) + 1 != selfType.getRank())
    return importError("select_scatter: src has rank " + llvm::Twine(shape.size()) + ", self " +
                       llvm::Twine(selfType.getRank()));
  shape.insert(shape.begin() + *axis, 1);
  llvm::SmallVector<int64_t> expected(selfType.getShape());
  expected[*axis] = 1;
  if (shape != expected)
    return importError("select_scatter: src " + typeString(tensorType(*value)) +
                       " does not fit a slice of " + typeString(selfType));
  auto slab = g.reshapeTo(*value, shape);
  if (!slab)
    return slab.takeError();
  auto placed = g.placeAlong(*self, *slab, *axis, at, at + 1);
  if (!placed)
    return placed.takeError();
  return node.setResult(0, *placed);
}

Error convertNarrow(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto dim = node.integer("dim", 1);
  if (!dim)
    return dim.takeError();
  auto axis = normalizeDim(*dim, tensorType(*self).getRank());
  if (!axis)
    return axis.takeError();
  auto start = node.integer("start", 2);
  if (!start)
    return start.takeError();
  auto length = node.integer("length", 3);
  if (!length)
    return length.takeError();
  int64_t begin = *start < 0 ? *start + tensorType(*self).getDimSize(*axis) : *start;
  auto result = sliceAlong(node.importer(), *self, *axis, begin, begin + *length, 1);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Error convertSelect(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto dim = node.integer("dim", 1);
  if (!dim)
    return dim.takeError();
  int64_t rank = tensorType(*self).getRank();
  auto axis = normalizeDim(*dim, rank);
  if (!axis)
    return axis.takeError();
  auto index = node.integer("index", 2);
  if (!index)
    return index.takeError();
  int64_t size = tensorType(*self).getDimSize(*axis);
  int64_t i = *index < 0 ? *index + size : *index;
  if (i < 0 || i >= size)
    return importError("index " + llvm::Twine(*index) + " is out of range for size " +
                       llvm::Twine(size));
  auto sliced = sliceAlong(node.importer(), *self, *axis, i, i + 1, 1);
  if (!sliced)
    return sliced.takeError();
  auto result = node.importer().reshapeTo(*sliced, type->getShape());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// cat and stack along `dim` of the result: stack first gives each tensor a
/// dim of 1 there.
Error convertJoin(NodeContext &node, bool stack) {
  llvm::StringRef op = stack ? "stack" : "cat";
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto tensors = node.tensorList("tensors", 0);
  if (!tensors)
    return tensors.takeError();
  auto dim = node.integer("dim", 1, 0);
  if (!dim)
    return dim.takeError();
  auto axis = normalizeDim(*dim, type->getRank());
  if (!axis)
    return axis.takeError();
  llvm::SmallVector<Value> inputs;
  for (std::optional<Value> tensor : *tensors) {
    if (!tensor)
      return importError(op + " of a None tensor");
    RankedTensorType inputType = tensorType(*tensor);
    // torch skips legacy empty 1-D tensors in cat.
    if (!stack && inputType.getRank() == 1 && inputType.getDimSize(0) == 0 &&
        type->getRank() != 1)
      continue;
    auto cast = node.importer().castTo(*tensor, type->getElementType());
    if (!cast)
      return cast.takeError();
    if (stack) {
      llvm::SmallVector<int64_t> shape(inputType.getShape());
      if (int64_t(shape.size()) + 1 != type->getRank())
        return importError("stack of a rank-" + llvm::Twine(shape.size()) + " tensor into rank " +
                           llvm::Twine(type->getRank()));
      shape.insert(shape.begin() + *axis, 1);
      cast = node.importer().reshapeTo(*cast, shape);
      if (!cast)
        return cast.takeError();
    }
    inputs.push_back(*cast);
  }
  if (inputs.empty())
    return importError(op + " of no tensors");
  if (inputs.size() == 1)
    return node.setResult(0, inputs.front());
  auto result = node.importer().create<nn::ConcatOp>(
      *type, inputs, node.builder().getI64IntegerAttr(*axis));
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Error convertCat(NodeContext &node) { return convertJoin(node, false); }
Error convertStack(NodeContext &node) { return convertJoin(node, true); }

/// split, split_with_sizes, chunk, unbind: the pieces' shapes come from the
/// results; unbind's pieces lose the split dim.
Error convertSplit(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  RankedTensorType inputType = tensorType(*self);
  auto dim = node.integer("dim", node.target().contains("unbind") ? 1 : 2, 0);
  if (!dim)
    return dim.takeError();
  auto axis = normalizeDim(*dim, inputType.getRank());
  if (!axis)
    return axis.takeError();
  llvm::SmallVector<Type> pieceTypes;
  llvm::SmallVector<RankedTensorType> resultTypes;
  for (size_t i = 0; i < node.numResults(); ++i) {
    auto type = node.resultType(i);
    if (!type)
      return type.takeError();
    resultTypes.push_back(*type);
    if (type->getRank() == inputType.getRank()) {
      pieceTypes.push_back(*type);
    } else {
      llvm::SmallVector<int64_t> shape(type->getShape());
      shape.insert(shape.begin() + *axis, 1);
      pieceTypes.push_back(type->clone(shape));
    }
  }
  if (pieceTypes.empty())
    return importError("split has no results");
  SmallVector<Value> pieces;
  if (pieceTypes.size() == 1 && pieceTypes.front() == inputType) {
    pieces.push_back(*self);
  } else {
    auto split = node.builder().create<nn::SplitOp>(node.loc(), pieceTypes, *self,
                                                    node.builder().getI64IntegerAttr(*axis));
    if (Error err = node.importer().verify(split))
      return err;
    pieces.append(split.getResults().begin(), split.getResults().end());
  }
  for (auto [i, piece] : llvm::enumerate(pieces)) {
    auto result = node.importer().reshapeTo(piece, resultTypes[i].getShape());
    if (!result)
      return result.takeError();
    if (Error err = node.setResult(i, *result))
      return err;
  }
  return Error::success();
}

/// Indices made non-negative: i < 0 ? i + size : i, as i64.
Expected<Value> wrapIndices(GraphImporter &g, Value indices, int64_t size) {
  auto index = g.castTo(indices, IntegerType::get(g.context(), 64));
  if (!index)
    return index;
  if (std::optional<DenseElementsAttr> constant = g.constantValue(*index)) {
    bool negative = llvm::any_of(constant->getValues<int64_t>(), [](int64_t v) { return v < 0; });
    if (!negative)
      return *index;
  }
  RankedTensorType type = tensorType(*index);
  Type i64 = type.getElementType();
  auto isNegative = g.create<nn::CompareOp>(
      type.clone(IntegerType::get(g.context(), 1)),
      nn::ComparePredicateAttr::get(g.context(), nn::ComparePredicate::lt), *index,
      g.scalar(i64, 0));
  if (!isNegative)
    return isNegative;
  auto shifted = g.create<nn::AddOp>(type, *index, g.scalar(i64, double(size)));
  if (!shifted)
    return shifted;
  return g.create<nn::WhereOp>(type, *isNegative, *shifted, *index);
}

Error convertIndexSelect(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto dim = node.integer("dim", 1);
  if (!dim)
    return dim.takeError();
  auto axis = normalizeDim(*dim, tensorType(*self).getRank());
  if (!axis)
    return axis.takeError();
  auto index = node.tensor("index", 2);
  if (!index)
    return index.takeError();
  GraphImporter &g = node.importer();
  auto wrapped = wrapIndices(g, *index, tensorType(*self).getDimSize(*axis));
  if (!wrapped)
    return wrapped.takeError();
  auto result = g.create<nn::GatherOp>(*type, *self, *wrapped, g.builder().getI64IntegerAttr(*axis));
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// Advanced indexing self[..., i0, i1, ...] with adjacent integer index
/// tensors: the indexed dims are flattened into one and gathered with the
/// linearized (broadcast) indices.
Error convertIndex(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto indices = node.tensorList("indices", 1);
  if (!indices)
    return indices.takeError();
  RankedTensorType selfType = tensorType(*self);
  int64_t first = 0;
  while (first < int64_t(indices->size()) && !(*indices)[first])
    ++first;
  int64_t count = 0;
  while (first + count < int64_t(indices->size()) && (*indices)[first + count])
    ++count;
  for (int64_t i = first + count; i < int64_t(indices->size()); ++i)
    if ((*indices)[i])
      return importError("indexing with non-adjacent index tensors is not supported");
  if (count == 0)
    return node.setResult(0, *self);
  if (first + count > selfType.getRank())
    return importError("too many indices for a tensor of rank " +
                       llvm::Twine(selfType.getRank()));
  GraphImporter &g = node.importer();
  llvm::SmallVector<int64_t> indexShape;
  for (int64_t i = 0; i < count; ++i) {
    RankedTensorType indexType = tensorType(*(*indices)[first + i]);
    if (!isa<IntegerType>(indexType.getElementType()) || indexType.getElementType().isInteger(1))
      return importError("indexing with " + typeString(indexType) +
                         " is not supported (integer indices only)");
    auto shape = broadcastShapes(indexShape, indexType.getShape());
    if (!shape)
      return importError("index tensors do not broadcast together");
    indexShape = *shape;
  }
  // linear = sum_i index_i * (product of the indexed sizes after i)
  Value linear;
  int64_t stride = 1;
  for (int64_t i = count - 1; i >= 0; --i) {
    int64_t size = selfType.getDimSize(first + i);
    auto wrapped = wrapIndices(g, *(*indices)[first + i], size);
    if (!wrapped)
      return wrapped.takeError();
    auto broadcast = g.broadcastTo(*wrapped, indexShape);
    if (!broadcast)
      return broadcast.takeError();
    Value term = *broadcast;
    RankedTensorType termType = tensorType(term);
    if (stride != 1) {
      auto scaled = g.create<nn::MulOp>(termType, term, g.scalar(termType.getElementType(), double(stride)));
      if (!scaled)
        return scaled.takeError();
      term = *scaled;
    }
    if (linear) {
      auto sum = g.create<nn::AddOp>(termType, linear, term);
      if (!sum)
        return sum.takeError();
      term = *sum;
    }
    linear = term;
    stride *= size;
  }
  llvm::SmallVector<int64_t> flatShape(selfType.getShape().take_front(first));
  flatShape.push_back(stride);
  llvm::append_range(flatShape, selfType.getShape().drop_front(first + count));
  auto flat = g.reshapeTo(*self, flatShape);
  if (!flat)
    return flat.takeError();
  auto result = g.create<nn::GatherOp>(*type, *flat, linear, g.builder().getI64IntegerAttr(first));
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Error convertEmbedding(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto weight = node.tensor("weight", 0);
  if (!weight)
    return weight.takeError();
  auto indices = node.tensor("indices", 1);
  if (!indices)
    return indices.takeError();
  auto result = node.importer().create<nn::EmbeddingOp>(*type, *weight, *indices, mlir::IntegerAttr(), mlir::IntegerAttr());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// The first `n` - 1 differences along `dim`, prepend/append joined first.
/// repeat_interleave(self, repeats: int, dim=None): each element (slice
/// along dim; of the flattened tensor without dim) repeated `repeats` times
/// in place: a broadcast along a new dim after it, merged into it. Repeats
/// given as a tensor make a data-dependent shape: refused.
Error convertRepeatInterleave(NodeContext &node) {
  if (!node.target().contains("self_int"))
    return importError("repeat_interleave with per-element repeats (a tensor) gives a "
                       "data-dependent shape; only a constant repeat count is supported");
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto repeats = node.integer("repeats", 1);
  if (!repeats)
    return repeats.takeError();
  if (*repeats < 0)
    return importError("repeat_interleave: repeats must be >= 0, got " +
                       std::to_string(*repeats));
  auto dim = node.optionalInteger("dim", 2);
  if (!dim)
    return dim.takeError();
  GraphImporter &g = node.importer();
  Value input = *self;
  RankedTensorType type = tensorType(input);
  if (!*dim) {
    auto flat = g.reshapeTo(input, {type.getNumElements()});
    if (!flat)
      return flat.takeError();
    input = *flat;
    type = tensorType(input);
  }
  auto axis = normalizeDim(dim->value_or(0), type.getRank());
  if (!axis)
    return axis.takeError();
  llvm::SmallVector<int64_t> expanded(type.getShape());
  expanded.insert(expanded.begin() + *axis + 1, 1);
  auto unsqueezed = g.reshapeTo(input, expanded);
  if (!unsqueezed)
    return unsqueezed.takeError();
  expanded[*axis + 1] = *repeats;
  auto broadcast = g.broadcastTo(*unsqueezed, expanded);
  if (!broadcast)
    return broadcast.takeError();
  llvm::SmallVector<int64_t> shape(type.getShape());
  shape[*axis] *= *repeats;
  auto result = g.reshapeTo(*broadcast, shape);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// aten.pad(self, pad, mode="constant", value) and aten.constant_pad_nd:
/// `pad` lists (before, after) pairs from the last dim backwards, as
/// torch.nn.functional.pad; negative amounts crop.
Error convertConstantPad(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto pad = node.integers("pad", 1);
  if (!pad)
    return pad.takeError();
  bool padOp = node.target().contains("aten.pad.");
  if (padOp) {
    auto mode = node.string("mode", 2, std::string("constant"));
    if (!mode)
      return mode.takeError();
    if (*mode != "constant")
      return importError("pad mode '" + *mode + "' is not supported (only constant)");
  }
  auto value = node.optionalNumber("value", padOp ? 3 : 2);
  if (!value)
    return value.takeError();
  GraphImporter &g = node.importer();
  const int64_t rank = tensorType(*self).getRank();
  if (pad->size() % 2 || int64_t(pad->size()) > 2 * rank)
    return importError("pad of " + llvm::Twine(pad->size()) + " amounts for a rank-" +
                       llvm::Twine(rank) + " tensor");
  SmallVector<int64_t> before(rank, 0), after(rank, 0);
  for (size_t i = 0; i < pad->size() / 2; ++i) {
    before[rank - 1 - int64_t(i)] = (*pad)[2 * i];
    after[rank - 1 - int64_t(i)] = (*pad)[2 * i + 1];
  }
  std::string why;
  FailureOr<Value> padded = buildConstantPad(g.builder(), g.loc(), *self, before, after,
                                             value->value_or(0.0), why);
  if (failed(padded))
    return importError(why);
  return node.setResult(0, *padded);
}

/// aten.conv1d(input [B, C, T] or [C, T], weight [O, C / groups, K], bias,
/// stride, padding, dilation, groups), and aten.convolution (core ATen's,
/// not transposed) over one dim, for groups 1 (a matmul per tap) and
/// depthwise (groups = C = O: a product per tap; the short causal
/// convolutions of Mamba and linear-attention layers): the sum over the K
/// taps of the weight's tap times the padded input's strided window.
Error convertConv1d(NodeContext &node) {
  auto input = node.tensor("input", 0);
  if (!input)
    return input.takeError();
  auto weight = node.tensor("weight", 1);
  if (!weight)
    return weight.takeError();
  auto bias = node.optionalTensor("bias", 2);
  if (!bias)
    return bias.takeError();
  // conv1d's stride, padding and dilation have defaults, which an export
  // leaves out.
  auto ints = [&](llvm::StringRef name, int position,
                  int64_t fallback) -> Expected<SmallVector<int64_t>> {
    if (!node.has(name, position))
      return SmallVector<int64_t>{fallback};
    return node.integers(name, position);
  };
  auto stride = ints("stride", 3, 1);
  if (!stride)
    return stride.takeError();
  if (node.arg("padding", 4) && node.arg("padding", 4)->get("as_string"))
    return importError("conv1d with a padding string is not supported (give the amount)");
  auto padding = ints("padding", 4, 0);
  if (!padding)
    return padding.takeError();
  auto dilation = ints("dilation", 5, 1);
  if (!dilation)
    return dilation.takeError();
  // aten.convolution (core ATen's form) has transposed and output_padding
  // before groups.
  const bool core = node.target().contains("aten.convolution");
  if (core) {
    auto transposed = node.boolean("transposed", 6, false);
    if (!transposed)
      return transposed.takeError();
    if (*transposed)
      return importError("transposed convolution is not supported");
  }
  auto groups = node.integer("groups", core ? 8 : 6, 1);
  if (!groups)
    return groups.takeError();
  if (stride->size() != 1 || padding->size() != 1 || dilation->size() != 1)
    return importError("only 1-D convolutions are supported (one stride, padding and "
                       "dilation)");
  Conv1dShape shape;
  shape.stride = (*stride)[0];
  shape.padLow = shape.padHigh = (*padding)[0];
  shape.dilation = (*dilation)[0];
  shape.groups = *groups;
  GraphImporter &g = node.importer();
  std::string why;
  FailureOr<Value> out = buildConv1d(g.builder(), g.loc(), *input, *weight,
                                     *bias ? **bias : Value(), shape, why);
  if (failed(out))
    return importError(why);
  return node.setResult(0, *out);
}

/// repeat(self, repeats): the tensor tiled repeats[i] times along dim i
/// (more repeats than dims add leading dims): each dim d of size n becomes
/// [r, n] (the copy outer), broadcast from [1, n], then merged.
Error convertRepeat(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto repeats = node.integers("repeats", 1);
  if (!repeats)
    return repeats.takeError();
  RankedTensorType type = tensorType(*self);
  const int64_t rank = type.getRank(), n = int64_t(repeats->size());
  if (n < rank)
    return importError("repeat: " + std::to_string(n) + " repeat counts for a tensor of rank " +
                       std::to_string(rank));
  llvm::SmallVector<int64_t> padded(n - rank, 1), split, tiled, result;
  padded.append(type.getShape().begin(), type.getShape().end());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = (*repeats)[i];
    if (r < 0)
      return importError("repeat: repeat counts must be >= 0, got " + std::to_string(r));
    split.append({1, padded[i]});
    tiled.append({r, padded[i]});
    result.push_back(r * padded[i]);
  }
  GraphImporter &g = node.importer();
  auto unsqueezed = g.reshapeTo(*self, split);
  if (!unsqueezed)
    return unsqueezed.takeError();
  auto broadcast = g.broadcastTo(*unsqueezed, tiled);
  if (!broadcast)
    return broadcast.takeError();
  auto merged = g.reshapeTo(*broadcast, result);
  if (!merged)
    return merged.takeError();
  return node.setResult(0, *merged);
}

Error convertDiff(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto n = node.integer("n", 1, 1);
  if (!n)
    return n.takeError();
  auto dim = node.integer("dim", 2, -1);
  if (!dim)
    return dim.takeError();
  auto axis = normalizeDim(*dim, tensorType(*self).getRank());
  if (!axis)
    return axis.takeError();
  auto prepend = node.optionalTensor("prepend", 3);
  if (!prepend)
    return prepend.takeError();
  auto append = node.optionalTensor("append", 4);
  if (!append)
    return append.takeError();
  GraphImporter &g = node.importer();
  llvm::SmallVector<Value> parts;
  if (*prepend)
    parts.push_back(**prepend);
  parts.push_back(*self);
  if (*append)
    parts.push_back(**append);
  Value value = *self;
  if (parts.size() > 1) {
    RankedTensorType selfType = tensorType(*self);
    llvm::SmallVector<int64_t> shape(selfType.getShape());
    shape[*axis] = 0;
    for (Value part : parts)
      shape[*axis] += tensorType(part).getDimSize(*axis);
    auto joined = g.create<nn::ConcatOp>(selfType.clone(shape), parts,
                                         g.builder().getI64IntegerAttr(*axis));
    if (!joined)
      return joined.takeError();
    value = *joined;
  }
  for (int64_t step = 0; step < *n; ++step) {
    int64_t size = tensorType(value).getDimSize(*axis);
    if (size == 0)
      break;
    auto later = sliceAlong(g, value, *axis, 1, size, 1);
    if (!later)
      return later.takeError();
    auto earlier = sliceAlong(g, value, *axis, 0, size - 1, 1);
    if (!earlier)
      return earlier.takeError();
    RankedTensorType differenceType = tensorType(*later);
    Expected<Value> difference =
        differenceType.getElementType().isInteger(1)
            ? g.create<nn::CompareOp>(differenceType,
                                      nn::ComparePredicateAttr::get(g.context(), nn::ComparePredicate::ne),
                                      *later, *earlier)
            : g.create<nn::SubOp>(differenceType, *later, *earlier);
    if (!difference)
      return difference.takeError();
    value = *difference;
  }
  return node.setResult(0, value);
}

/// Running sums along `dim`; no nn op, so the input must be constant.
Error convertCumsum(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto dim = node.integer("dim", 1);
  if (!dim)
    return dim.takeError();
  RankedTensorType inputType = tensorType(*self);
  auto axis = normalizeDim(*dim, inputType.getRank());
  if (!axis)
    return axis.takeError();
  if (type->getShape() != inputType.getShape())
    return importError("cumsum changes the shape");
  if (!node.importer().constantValue(*self))
    return convertCumsumAtRunTime(node, *self, *dim);
  auto value = requireConstant(node, *self);
  if (!value)
    return value.takeError();
  std::vector<double> values = toDoubles(*value);
  int64_t size = inputType.getRank() ? inputType.getDimSize(*axis) : 1;
  int64_t inner = 1;
  for (int64_t d = *axis + 1; d < inputType.getRank(); ++d)
    inner *= inputType.getDimSize(d);
  int64_t outer = size * inner == 0 ? 0 : int64_t(values.size()) / (size * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      for (int64_t k = 1; k < size; ++k)
        values[(o * size + k) * inner + i] += values[(o * size + k - 1) * inner + i];
  return node.setResult(0, node.importer().constant(fromDoubles(*type, values)));
}

/// triu/tril: elements off the kept triangle become zero.
template <bool Upper>
Error convertTriangle(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto diagonal = node.integer("diagonal", 1, 0);
  if (!diagonal)
    return diagonal.takeError();
  RankedTensorType inputType = tensorType(*self);
  if (inputType.getRank() < 2)
    return importError("triu/tril need a tensor of rank >= 2");
  GraphImporter &g = node.importer();
  Type i64 = IntegerType::get(g.context(), 64);
  auto grid = RankedTensorType::get(inputType.getShape().take_back(2), i64);
  auto rows = g.create<nn::IotaOp>(grid, g.builder().getI64IntegerAttr(0),
                                   g.builder().getF64FloatAttr(0), g.builder().getF64FloatAttr(1));
  if (!rows)
    return rows.takeError();
  auto cols = g.create<nn::IotaOp>(grid, g.builder().getI64IntegerAttr(1),
                                   g.builder().getF64FloatAttr(0), g.builder().getF64FloatAttr(1));
  if (!cols)
    return cols.takeError();
  auto offset = g.create<nn::SubOp>(grid, *cols, *rows);
  if (!offset)
    return offset.takeError();
  auto keep = g.create<nn::CompareOp>(
      grid.clone(IntegerType::get(g.context(), 1)),
      nn::ComparePredicateAttr::get(g.context(),
                                    Upper ? nn::ComparePredicate::ge : nn::ComparePredicate::le),
      *offset, g.scalar(i64, double(*diagonal)));
  if (!keep)
    return keep.takeError();
  auto result = g.create<nn::WhereOp>(*type, *keep, *self,
                                      g.scalar(inputType.getElementType(), 0));
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

/// The shape nn.matmul gives [..., M, K] x [..., K, N] (rhs [N, K] when transposed).
std::optional<llvm::SmallVector<int64_t>> matmulShape(llvm::ArrayRef<int64_t> lhs,
                                                      llvm::ArrayRef<int64_t> rhs,
                                                      bool transposeRhs) {
  if (lhs.size() < 2 || rhs.size() < 2)
    return std::nullopt;
  auto batch = broadcastShapes(lhs.drop_back(2), rhs.drop_back(2));
  if (!batch)
    return std::nullopt;
  batch->push_back(lhs[lhs.size() - 2]);
  batch->push_back(transposeRhs ? rhs[rhs.size() - 2] : rhs.back());
  return batch;
}

Expected<Value> matmul(GraphImporter &g, Value lhs, Value rhs, bool transposeRhs) {
  RankedTensorType lhsType = tensorType(lhs);
  auto shape = matmulShape(lhsType.getShape(), tensorType(rhs).getShape(), transposeRhs);
  if (!shape)
    return importError("cannot multiply " + typeString(lhsType) + " by " +
                       typeString(rhs.getType()));
  return g.create<nn::MatmulOp>(lhsType.clone(*shape), lhs, rhs, UnitAttr(),
                                transposeRhs ? g.builder().getUnitAttr() : UnitAttr());
}

/// torch.matmul, mm and bmm, with 1-D operands promoted to matrices and back.
Error convertMatmul(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto other = node.tensor("other", 1);
  if (!other)
    other = node.tensor("mat2", 1);
  if (!other)
    return other.takeError();
  GraphImporter &g = node.importer();
  Value lhs = *self, rhs = *other;
  if (tensorType(lhs).getRank() == 1) {
    auto row = g.reshapeTo(lhs, {1, tensorType(lhs).getDimSize(0)});
    if (!row)
      return row.takeError();
    lhs = *row;
  }
  if (tensorType(rhs).getRank() == 1) {
    auto column = g.reshapeTo(rhs, {tensorType(rhs).getDimSize(0), 1});
    if (!column)
      return column.takeError();
    rhs = *column;
  }
  auto product = matmul(g, lhs, rhs, false);
  if (!product)
    return product.takeError();
  auto result = g.reshapeTo(*product, type->getShape());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Expected<Value> addBias(GraphImporter &g, Value value, Value bias) {
  return g.create<nn::AddOp>(value.getType(), value, bias);
}

/// linear: x W^T (+ b), the matmul's rhs transposed.
Error convertLinear(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto input = node.tensor("input", 0);
  if (!input)
    return input.takeError();
  auto weight = node.tensor("weight", 1);
  if (!weight)
    return weight.takeError();
  auto bias = node.optionalTensor("bias", 2);
  if (!bias)
    return bias.takeError();
  GraphImporter &g = node.importer();
  if (tensorType(*weight).getRank() != 2 || tensorType(*input).getRank() < 2)
    return importError("linear needs a 2-D weight and an input of rank >= 2");
  auto product = matmul(g, *input, *weight, true);
  if (!product)
    return product.takeError();
  Value result = *product;
  if (*bias) {
    auto sum = addBias(g, result, **bias);
    if (!sum)
      return sum.takeError();
    result = *sum;
  }
  return node.setResult(0, result);
}

/// addmm: beta * self + alpha * (mat1 @ mat2); baddbmm the same with
/// batched products (batch1 @ batch2), self broadcast. A beta of 0 ignores
/// self (its NaNs too), as torch does.
Error convertAddmm(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto bias = node.tensor("self", 0);
  if (!bias)
    return bias.takeError();
  const bool batched = node.target().contains("baddbmm");
  auto mat1 = node.tensor(batched ? "batch1" : "mat1", 1);
  if (!mat1)
    return mat1.takeError();
  auto mat2 = node.tensor(batched ? "batch2" : "mat2", 2);
  if (!mat2)
    return mat2.takeError();
  auto beta = node.number("beta", 3, 1.0);
  if (!beta)
    return beta.takeError();
  auto alpha = node.number("alpha", 4, 1.0);
  if (!alpha)
    return alpha.takeError();
  GraphImporter &g = node.importer();
  Type element = type->getElementType();
  auto product = matmul(g, *mat1, *mat2, false);
  if (!product)
    return product.takeError();
  Value scaledProduct = *product;
  if (*alpha != 1) {
    auto scaled = g.create<nn::MulOp>(*type, scaledProduct, g.scalar(element, *alpha));
    if (!scaled)
      return scaled.takeError();
    scaledProduct = *scaled;
  }
  if (*beta == 0)
    return node.setResult(0, scaledProduct);
  Value scaledBias = *bias;
  if (*beta != 1) {
    auto scaled = g.create<nn::MulOp>(tensorType(*bias), scaledBias, g.scalar(element, *beta));
    if (!scaled)
      return scaled.takeError();
    scaledBias = *scaled;
  }
  auto result = g.create<nn::AddOp>(*type, scaledProduct, scaledBias);
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

//===----------------------------------------------------------------------===//
// Reductions and normalization
//===----------------------------------------------------------------------===//

} // namespace

Expected<llvm::SmallVector<int64_t>> reductionDims(NodeContext &node, int64_t rank) {
  llvm::SmallVector<int64_t> dims;
  if (node.has("dim", 1)) {
    auto given = node.integers("dim", 1);
    if (!given)
      return given.takeError();
    for (int64_t d : *given) {
      auto axis = normalizeDim(d, rank);
      if (!axis)
        return axis.takeError();
      if (!llvm::is_contained(dims, *axis))
        dims.push_back(*axis);
    }
  }
  if (dims.empty())
    dims = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  llvm::sort(dims);
  return dims;
}

namespace {

/// mean/sum/amax/max over `dim` (all dims when absent or empty).
template <typename OpT>
Error convertReduceWith(NodeContext &node, bool withIndices) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  int64_t rank = tensorType(*self).getRank();
  auto reduced = reductionDims(node, rank);
  if (!reduced)
    return reduced.takeError();
  llvm::SmallVector<int64_t> dims = std::move(*reduced);
  auto keepdim = node.boolean("keepdim", 2, false);
  if (!keepdim)
    return keepdim.takeError();
  GraphImporter &g = node.importer();
  auto input = g.castTo(*self, type->getElementType());
  if (!input)
    return input.takeError();
  Value result = *input;
  if (rank > 0) {
    auto reduced = g.create<OpT>(*type, *input, g.builder().getDenseI64ArrayAttr(dims),
                                 *keepdim ? g.builder().getUnitAttr() : UnitAttr());
    if (!reduced)
      return reduced.takeError();
    result = *reduced;
  }
  if (withIndices)
    node.setUnavailable(1, "the indices of a max, which Loom does not compute (no argmax op)");
  return node.setResult(0, result);
}

template <typename OpT>
Error convertReduce(NodeContext &node) {
  return convertReduceWith<OpT>(node, false);
}

/// var and std over `dim` (all dims when absent): the mean of the squared
/// deviations from the mean, over N - correction (`unbiased` is a
/// correction of 1, torch's default), and its square root for std.
Error convertVariance(NodeContext &node, bool root) {
  llvm::StringRef what = root ? "std" : "var";
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  if (!isa<FloatType>(type->getElementType()))
    return importError(what + llvm::Twine(" of a non-float tensor"));
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  int64_t rank = tensorType(*self).getRank();
  auto reduced = reductionDims(node, rank);
  if (!reduced)
    return reduced.takeError();
  llvm::SmallVector<int64_t> dims = std::move(*reduced);
  double correction = 1;
  if (node.has("correction", -1)) {
    auto given = node.number("correction", -1);
    if (!given)
      return given.takeError();
    correction = *given;
  } else if (node.has("unbiased", -1)) {
    auto unbiased = node.boolean("unbiased", -1);
    if (!unbiased)
      return unbiased.takeError();
    correction = *unbiased ? 1 : 0;
  }
  auto keepdim = node.boolean("keepdim", -1, false);
  if (!keepdim)
    return keepdim.takeError();
  GraphImporter &g = node.importer();
  Type element = type->getElementType();
  auto x = g.castTo(*self, element);
  if (!x)
    return x.takeError();
  RankedTensorType inputType = tensorType(*x);
  int64_t count = 1;
  llvm::SmallVector<int64_t> keptShape(inputType.getShape());
  for (int64_t d : dims) {
    count *= inputType.getDimSize(d);
    keptShape[d] = 1;
  }
  Value result;
  if (rank == 0) {
    result = g.scalar(element, 0.0);
  } else {
    auto dimsAttr = g.builder().getDenseI64ArrayAttr(dims);
    auto mean = g.create<nn::ReduceMeanOp>(inputType.clone(keptShape), *x, dimsAttr,
                                           g.builder().getUnitAttr());
    if (!mean)
      return mean.takeError();
    auto deviation = g.create<nn::SubOp>(inputType, *x, *mean);
    if (!deviation)
      return deviation.takeError();
    auto square = g.create<nn::MulOp>(inputType, *deviation, *deviation);
    if (!square)
      return square.takeError();
    auto sum = g.create<nn::ReduceSumOp>(*type, *square, dimsAttr,
                                         *keepdim ? g.builder().getUnitAttr() : UnitAttr());
    if (!sum)
      return sum.takeError();
    result = *sum;
  }
  // torch divides by max(0, N - correction): a zero divisor gives inf or NaN.
  double divisor = std::max(0.0, double(count) - correction);
  auto quotient = g.create<nn::DivOp>(*type, result, g.scalar(element, divisor));
  if (!quotient)
    return quotient.takeError();
  if (!root)
    return node.setResult(0, *quotient);
  auto sqrt = g.create<nn::SqrtOp>(*type, *quotient);
  if (!sqrt)
    return sqrt.takeError();
  return node.setResult(0, *sqrt);
}

/// logsumexp(self, dim, keepdim): m + log(sum(exp(self - m))) with m the
/// maximum over the dims (zero where it is not finite, so a row of -inf
/// gives -inf rather than NaN).
Error convertLogsumexp(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  if (!isa<FloatType>(tensorType(*self).getElementType()))
    return importError("logsumexp of " + typeString(tensorType(*self)) + " (floats only)");
  auto dims = reductionDims(node, tensorType(*self).getRank());
  if (!dims)
    return dims.takeError();
  auto keepdim = node.boolean("keepdim", 2, false);
  if (!keepdim)
    return keepdim.takeError();
  if (tensorType(*self).getRank() == 0) // of one value: that value
    return node.setResult(0, *self);
  GraphImporter &g = node.importer();
  return node.setResult(0, buildLogSumExp(g.builder(), g.loc(), *self, *dims, *keepdim));
}

/// max.dim (values and indices): a top-1 along the dim (moved last and back
/// when it is not), whose ties go to the first position as torch's do and
/// whose gradient goes to the chosen positions as max's does.
Error convertMaxWithIndices(NodeContext &node) {
  auto values = node.resultType(0);
  if (!values)
    return values.takeError();
  auto indices = node.resultType(1);
  if (!indices)
    return indices.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto dim = node.integer("dim", 1);
  if (!dim)
    return dim.takeError();
  int64_t rank = tensorType(*self).getRank();
  if (rank == 0)
    return importError("max.dim of a scalar");
  auto axis = normalizeDim(*dim, rank);
  if (!axis)
    return axis.takeError();
  GraphImporter &g = node.importer();
  auto input = g.castTo(*self, values->getElementType());
  if (!input)
    return input.takeError();
  llvm::SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(perm[*axis], perm[rank - 1]);
  auto moved = transpose(g, *input, perm);
  if (!moved)
    return moved.takeError();
  llvm::SmallVector<int64_t> shape(tensorType(*moved).getShape());
  shape.back() = 1;
  RankedTensorType movedType = tensorType(*moved);
  auto topk = g.create<nn::TopkOp>(
      TypeRange{movedType.clone(shape),
                RankedTensorType::get(shape, g.builder().getI64Type())},
      *moved, g.builder().getI64IntegerAttr(1), UnitAttr());
  if (!topk)
    return topk.takeError();
  Operation *op = topk->getDefiningOp();
  auto finish = [&](Value v, RankedTensorType type) -> Expected<Value> {
    auto back = transpose(g, v, perm);
    if (!back)
      return back.takeError();
    auto cast = g.castTo(*back, type.getElementType());
    if (!cast)
      return cast.takeError();
    return g.reshapeTo(*cast, type.getShape());
  };
  auto v = finish(op->getResult(0), *values);
  if (!v)
    return v.takeError();
  auto i = finish(op->getResult(1), *indices);
  if (!i)
    return i.takeError();
  if (Error err = node.setResult(1, *i))
    return err;
  return node.setResult(0, *v);
}

Error convertMax(NodeContext &node) {
  if (node.has("other", 1))
    return convertArithmetic<nn::MaximumOp>(node);
  if (node.numResults() > 1 && node.has("dim", 1))
    return convertMaxWithIndices(node);
  return convertReduceWith<nn::ReduceMaxOp>(node, node.numResults() > 1);
}

Error convertMin(NodeContext &node) {
  if (node.has("other", 1))
    return convertArithmetic<nn::MinimumOp>(node);
  return importError("min reductions are not supported");
}

template <typename OpT>
Error convertSoftmax(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  auto dim = node.integer("dim", 1);
  if (!dim)
    return dim.takeError();
  auto axis = normalizeDim(*dim, tensorType(*self).getRank());
  if (!axis)
    return axis.takeError();
  GraphImporter &g = node.importer();
  auto input = g.castTo(*self, type->getElementType());
  if (!input)
    return input.takeError();
  auto result = g.create<OpT>(*type, *input, g.builder().getI64IntegerAttr(*axis));
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

Error checkLastDimNormalized(NodeContext &node, RankedTensorType inputType) {
  auto shape = node.integers("normalized_shape", 1);
  if (!shape)
    return shape.takeError();
  if (shape->size() != 1 || inputType.getRank() == 0 ||
      (*shape)[0] != inputType.getShape().back())
    return importError("normalization over more than the last dimension is not supported");
  return Error::success();
}

Error convertLayerNorm(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto input = node.tensor("input", 0);
  if (!input)
    return input.takeError();
  if (Error err = checkLastDimNormalized(node, tensorType(*input)))
    return err;
  auto weight = node.optionalTensor("weight", 2);
  if (!weight)
    return weight.takeError();
  auto bias = node.optionalTensor("bias", 3);
  if (!bias)
    return bias.takeError();
  auto eps = node.number("eps", 4, 1e-5);
  if (!eps)
    return eps.takeError();
  GraphImporter &g = node.importer();
  auto result = g.create<nn::LayerNormOp>(*type, *input, weight->value_or(Value()),
                                          bias->value_or(Value()), g.builder().getF64FloatAttr(*eps));
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// native_layer_norm (core ATen): layer_norm's arguments, and the mean and
/// reciprocal standard deviation, which only a decomposed backward reads.
Error convertNativeLayerNorm(NodeContext &node) {
  if (Error err = convertLayerNorm(node))
    return err;
  node.setUnavailable(1, "native_layer_norm's mean, which Loom does not compute");
  node.setUnavailable(2, "native_layer_norm's reciprocal standard deviation, which Loom does "
                         "not compute");
  return Error::success();
}

Error convertRmsNorm(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto input = node.tensor("input", 0);
  if (!input)
    return input.takeError();
  if (Error err = checkLastDimNormalized(node, tensorType(*input)))
    return err;
  auto weight = node.optionalTensor("weight", 2);
  if (!weight)
    return weight.takeError();
  // torch's default epsilon is the machine epsilon of the dtype.
  Type element = type->getElementType();
  double machineEpsilon = element.isF64() ? 2.220446049250313e-16
                          : element.isBF16() ? 0.0078125
                          : element.isF16() ? 0.0009765625
                                            : 1.1920928955078125e-07;
  auto eps = node.number("eps", 3, machineEpsilon);
  if (!eps)
    return eps.takeError();
  GraphImporter &g = node.importer();
  auto result = g.create<nn::RmsNormOp>(*type, *input, weight->value_or(Value()),
                                        g.builder().getF64FloatAttr(*eps));
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// Whether a constant mask (bool: true attends; float: 0 attends, -inf or
/// the dtype's lowest value blocks) is the causal pattern for [S, Skv],
/// broadcast over every batch and head. `allOpen` tells an all-attending mask.
Expected<bool> isCausalMask(DenseElementsAttr mask, int64_t queries, int64_t keys, bool &allOpen) {
  auto type = cast<RankedTensorType>(mask.getType());
  if (type.getRank() > 4)
    return importError("attention masks other than causal are not supported");
  llvm::SmallVector<int64_t> shape(type.getShape());
  while (shape.size() < 2)
    shape.insert(shape.begin(), 1);
  int64_t maskRows = shape[shape.size() - 2], maskCols = shape.back();
  if ((maskRows != 1 && maskRows != queries) || (maskCols != 1 && maskCols != keys))
    return importError("attention masks other than causal are not supported");
  Type element = type.getElementType();
  std::vector<double> values = toDoubles(mask);
  double lowest = -std::numeric_limits<double>::infinity();
  if (auto floatType = dyn_cast<FloatType>(element))
    lowest = llvm::APFloat::getLargest(floatType.getFloatSemantics(), true).convertToDouble();
  bool causal = true;
  allOpen = true;
  int64_t planes = int64_t(values.size()) / std::max<int64_t>(maskRows * maskCols, 1);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < queries; ++i) {
      for (int64_t j = 0; j < keys; ++j) {
        int64_t r = maskRows == 1 ? 0 : i, c = maskCols == 1 ? 0 : j;
        double v = values[(p * maskRows + r) * maskCols + c];
        bool attends;
        if (element.isInteger(1))
          attends = v != 0;
        else if (v == 0)
          attends = true;
        else if (v <= lowest)
          attends = false;
        else
          return importError("attention masks other than causal are not supported");
        allOpen &= attends;
        causal &= attends == (j <= i + keys - queries);
      }
    }
  }
  return causal;
}

/// Attention under a mask that is neither causal nor open (a sliding
/// window, which --loom-raise-attention raises back to nn.attention with
/// its window; a padding mask computed at run time; any pattern): the
/// product, the scale, the mask (a float
/// mask added, a bool one choosing -inf where it is false), softmax and the
/// product with the values, as torch's math backend computes it; fewer
/// key/value heads than query heads (enable_gqa) are repeated to them.
Error convertMaskedAttention(NodeContext &node, RankedTensorType type, Value query, Value key,
                             Value value, Value mask, std::optional<double> scale) {
  GraphImporter &g = node.importer();
  std::string why;
  FailureOr<Value> result =
      buildMaskedAttention(g.builder(), g.loc(), query, key, value, mask, scale, why);
  if (failed(result))
    return importError(why);
  if (tensorType(*result) != type)
    return importError("attention's result is " + typeString(tensorType(*result)) +
                       ", the export's " + typeString(type));
  return node.setResult(0, *result);
}

Error convertAttention(NodeContext &node) {
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  auto query = node.tensor("query", 0);
  if (!query)
    return query.takeError();
  auto key = node.tensor("key", 1);
  if (!key)
    return key.takeError();
  auto value = node.tensor("value", 2);
  if (!value)
    return value.takeError();
  auto mask = node.optionalTensor("attn_mask", 3);
  if (!mask)
    return mask.takeError();
  auto dropout = node.number("dropout_p", 4, 0.0);
  if (!dropout)
    return dropout.takeError();
  if (*dropout != 0)
    return importError("attention dropout (dropout_p = " + std::to_string(*dropout) +
                       ") is not supported");
  auto isCausal = node.boolean("is_causal", 5, false);
  if (!isCausal)
    return isCausal.takeError();
  auto scale = node.optionalNumber("scale", 6);
  if (!scale)
    return scale.takeError();
  RankedTensorType queryType = tensorType(*query), keyType = tensorType(*key);
  if (queryType.getRank() != 4 || keyType.getRank() != 4)
    return importError("attention needs rank-4 [batch, heads, seq, head_dim] query and key");
  int64_t queries = queryType.getDimSize(2), keys = keyType.getDimSize(2);
  bool causal = *isCausal;
  if (causal && queries != keys)
    // torch aligns is_causal to the top left; nn.attention to the bottom right.
    return importError("is_causal with differing query and key lengths is not supported");
  GraphImporter &g = node.importer();
  if (*mask) {
    if (causal)
      return importError("attention with both is_causal and attn_mask");
    std::optional<DenseElementsAttr> maskValue = g.constantValue(**mask);
    if (!maskValue) // a mask computed at run time (from a padding mask input)
      return convertMaskedAttention(node, *type, *query, *key, *value, **mask, *scale);
    auto maskKey = std::make_tuple(maskValue->getAsOpaquePointer(), queries, keys);
    auto known = g.maskKinds.find(maskKey);
    if (known == g.maskKinds.end()) {
      bool allOpen = false;
      auto matches = isCausalMask(*maskValue, queries, keys, allOpen);
      if (!matches)
        return matches.takeError();
      known = g.maskKinds.emplace(maskKey, std::make_pair(*matches, allOpen)).first;
    }
    auto [matches, allOpen] = known->second;
    if (!matches && !allOpen)
      return convertMaskedAttention(node, *type, *query, *key, *value, **mask, *scale);
    causal = matches && !allOpen;
  }
  auto result = g.create<nn::AttentionOp>(*type, *query, *key, *value,
                                          causal ? g.builder().getUnitAttr() : UnitAttr(),
                                          *scale ? g.builder().getF64FloatAttr(**scale) : FloatAttr(),
                                          g.builder().getI64IntegerAttr(0), IntegerAttr());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

//===----------------------------------------------------------------------===//
// Symbolic sizes and no-ops
//===----------------------------------------------------------------------===//

Error convertSymSize(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  RankedTensorType type = tensorType(*self);
  if (node.target().contains("sym_numel"))
    return node.setSymIntResult(0, type.getNumElements());
  auto dim = node.integer("dim", 1);
  if (!dim)
    return dim.takeError();
  auto axis = normalizeDim(*dim, type.getRank());
  if (!axis)
    return axis.takeError();
  return node.setSymIntResult(0, type.getDimSize(*axis));
}

/// item() of a one-element integer tensor: its value, where the importer
/// knows it (a constant). A value computed from the inputs would size later
/// tensors by data (JetMoE splits its tokens by their counts per expert),
/// which a program of static shapes cannot hold.
Error convertItem(NodeContext &node) {
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  RankedTensorType type = tensorType(*self);
  if (type.getNumElements() != 1)
    return importError("item() of " + typeString(type) + " (one element expected)");
  if (!isa<IntegerType>(type.getElementType()))
    return importError("item() of a float tensor used as a number is not supported");
  std::optional<DenseElementsAttr> constant = node.importer().constantValue(*self);
  if (!constant)
    return importError("item() of a tensor computed from the inputs: the export's later "
                       "shapes depend on data, which Loom's static shapes cannot hold (for "
                       "a mixture of experts, export with an experts implementation of "
                       "static shapes, such as grouped_mm or batched_mm, where the model "
                       "has one)");
  return node.setSymIntResult(0, (*constant->getValues<APInt>().begin()).getSExtValue());
}

/// Runtime checks torch.export records; shapes here are static and checked.
Error skipAssertion(NodeContext &) { return Error::success(); }

double cosine(double x) { return std::cos(x); }
double sine(double x) { return std::sin(x); }

const llvm::StringMap<OperatorConverter> &converters() {
  static const llvm::StringMap<OperatorConverter> table = [] {
    llvm::StringMap<OperatorConverter> t;
    // Elementwise arithmetic and comparisons.
    t["aten.add"] = convertArithmetic<nn::AddOp>;
    t["aten.sub"] = convertArithmetic<nn::SubOp>;
    t["aten.rsub"] = convertReverseSub;
    t["aten.mul"] = convertArithmetic<nn::MulOp>;
    t["aten.div"] = convertDiv;
    t["aten.true_divide"] = convertDiv;
    t["aten.pow"] = convertPow;
    t["aten.maximum"] = convertArithmetic<nn::MaximumOp>;
    t["aten.minimum"] = convertArithmetic<nn::MinimumOp>;
    t["aten.eq"] = convertCompare<nn::ComparePredicate::eq>;
    t["aten.ne"] = convertCompare<nn::ComparePredicate::ne>;
    t["aten.lt"] = convertCompare<nn::ComparePredicate::lt>;
    t["aten.le"] = convertCompare<nn::ComparePredicate::le>;
    t["aten.gt"] = convertCompare<nn::ComparePredicate::gt>;
    t["aten.ge"] = convertCompare<nn::ComparePredicate::ge>;
    t["aten.__and__"] = convertLogic<Logic::And, true>;
    t["aten.bitwise_and"] = convertLogic<Logic::And, true>;
    t["aten.logical_and"] = convertLogic<Logic::And, false>;
    t["aten.__or__"] = convertLogic<Logic::Or, true>;
    t["aten.bitwise_or"] = convertLogic<Logic::Or, true>;
    t["aten.logical_or"] = convertLogic<Logic::Or, false>;
    t["aten.__xor__"] = convertLogic<Logic::Xor, true>;
    t["aten.bitwise_xor"] = convertLogic<Logic::Xor, true>;
    t["aten.logical_xor"] = convertLogic<Logic::Xor, false>;
    t["aten.bitwise_not"] = convertLogic<Logic::Not, true>;
    t["aten.logical_not"] = convertLogic<Logic::Not, false>;
    t["aten.where"] = convertWhere;
    t["aten.masked_fill"] = convertMaskedFill;
    // The functional forms of in-place operators without one of their own.
    t["aten.copy"] = convertCopy;
    t["aten.fill"] = convertFillValue;
    t["aten.zero"] = [](NodeContext &n) { return convertFill(n, 0.0, "", 0); };
    t["aten.index_put"] = convertIndexPut;
    t["aten.clamp"] = convertClamp;
    t["aten.clamp_min"] = convertClamp;
    t["aten.clamp_max"] = convertClamp;
    // Elementwise functions.
    t["aten.neg"] = convertUnary<nn::NegOp>;
    t["aten.abs"] = convertUnary<nn::AbsOp>;
    t["aten.exp"] = convertUnary<nn::ExpOp>;
    t["aten.log"] = convertUnary<nn::LogOp>;
    t["aten.sqrt"] = convertUnary<nn::SqrtOp>;
    t["aten.rsqrt"] = convertUnary<nn::RsqrtOp>;
    t["aten.square"] = convertSquare;
    t["aten.softplus"] = convertSoftplus;
    t["aten.log_sigmoid"] = convertLogSigmoid;
    t["aten.log_sigmoid_forward"] = convertLogSigmoid;
    t["aten.expm1"] = convertExpm1;
    t["aten.log1p"] = convertLog1p;
    t["aten.reciprocal"] = convertUnary<nn::ReciprocalOp>;
    t["aten.tanh"] = convertUnary<nn::TanhOp>;
    t["aten.erf"] = convertUnary<nn::ErfOp>;
    t["aten.sigmoid"] = convertUnary<nn::SigmoidOp>;
    t["aten.silu"] = convertUnary<nn::SiluOp>;
    t["aten.relu"] = convertUnary<nn::ReluOp>;
    t["aten.gelu"] = convertGelu;
    t["aten.cos"] = [](NodeContext &node) { return convertHostUnary(node, cosine); };
    t["aten.sin"] = [](NodeContext &node) { return convertHostUnary(node, sine); };
    // Values passed through or converted.
    for (const char *name : {"aten.alias", "aten.clone", "aten.contiguous",
                             "aten.lift_fresh_copy"})
      t[name] = convertIdentity;
    t["aten.detach"] = convertDetach;
    for (const char *name : {"aten.to", "aten._to_copy", "aten.type_as"})
      t[name] = convertCast;
    t["aten.dropout"] = convertDropout;
    // Creation.
    t["aten.arange"] = convertArange;
    t["aten.eye"] = convertEye;
    t["aten.floor"] = [](NodeContext &n) { return convertHostUnary(n, floorOf); };
    t["aten.erfinv"] = [](NodeContext &n) { return convertHostUnary(n, erfinvOf); };
    t["aten._is_all_true"] = convertIsAllTrue;
    t["aten.full"] = [](NodeContext &n) { return convertFill(n, std::nullopt, "fill_value", 1); };
    t["aten.full_like"] = [](NodeContext &n) { return convertFill(n, std::nullopt, "fill_value", 1); };
    t["aten.new_full"] = [](NodeContext &n) { return convertFill(n, std::nullopt, "fill_value", 2); };
    t["aten.scalar_tensor"] = [](NodeContext &n) { return convertFill(n, std::nullopt, "s", 0); };
    for (const char *name : {"aten.zeros", "aten.zeros_like", "aten.new_zeros", "aten.empty",
                             "aten.empty_like", "aten.new_empty", "aten.empty_permuted",
                             "aten.empty_strided"})
      t[name] = [](NodeContext &n) { return convertFill(n, 0.0, "", 0); };
    for (const char *name : {"aten.ones", "aten.ones_like", "aten.new_ones"})
      t[name] = [](NodeContext &n) { return convertFill(n, 1.0, "", 0); };
    // Shapes and data movement.
    for (const char *name : {"aten.view", "aten._unsafe_view", "aten.reshape", "aten.view_as",
                             "aten.reshape_as", "aten.flatten", "aten.unflatten",
                             "aten.squeeze", "aten.unsqueeze"})
      t[name] = convertReshape;
    for (const char *name : {"aten.expand", "aten.expand_as", "aten.broadcast_to"})
      t[name] = convertExpand;
    t["aten.broadcast_tensors"] = convertBroadcastTensors;
    t["aten.transpose"] = convertTranspose;
    t["aten.swapaxes"] = convertTranspose;
    t["aten.t"] = convertTranspose;
    t["aten.permute"] = convertPermute;
    t["aten.numpy_T"] = convertNumpyT;
    t["aten.slice"] = convertSlice;
    t["aten.slice_scatter"] = convertSliceScatter;
    t["aten.select_scatter"] = convertSelectScatter;
    t["aten.narrow"] = convertNarrow;
    t["aten.select"] = convertSelect;
    t["aten.cat"] = convertCat;
    t["aten.concat"] = convertCat;
    t["aten.stack"] = convertStack;
    for (const char *name : {"aten.split", "aten.split_with_sizes", "aten.chunk", "aten.unbind"})
      t[name] = convertSplit;
    t["aten.index_select"] = convertIndexSelect;
    t["aten.index"] = convertIndex;
    t["aten.embedding"] = convertEmbedding;
    t["aten.diff"] = convertDiff;
    t["aten.repeat_interleave"] = convertRepeatInterleave;
    t["aten.repeat"] = convertRepeat;
    t["aten.pad"] = convertConstantPad;
    t["aten.constant_pad_nd"] = convertConstantPad;
    t["aten.conv1d"] = convertConv1d;
    t["aten.convolution"] = convertConv1d;
    t["aten.cumsum"] = convertCumsum;
    t["aten.triu"] = convertTriangle<true>;
    t["aten.tril"] = convertTriangle<false>;
    // Contractions.
    t["aten.linear"] = convertLinear;
    t["aten.matmul"] = convertMatmul;
    t["aten.mm"] = convertMatmul;
    t["aten.bmm"] = convertMatmul;
    t["aten.addmm"] = convertAddmm;
    t["aten.baddbmm"] = convertAddmm;
    // Reductions and normalization.
    t["aten.mean"] = convertReduce<nn::ReduceMeanOp>;
    t["aten.var"] = [](NodeContext &n) { return convertVariance(n, false); };
    t["aten.std"] = [](NodeContext &n) { return convertVariance(n, true); };
    t["aten.sum"] = convertReduce<nn::ReduceSumOp>;
    t["aten.amax"] = convertReduce<nn::ReduceMaxOp>;
    t["aten.logsumexp"] = convertLogsumexp;
    t["aten.max"] = convertMax;
    t["aten.min"] = convertMin;
    t["aten.softmax"] = convertSoftmax<nn::SoftmaxOp>;
    t["aten._softmax"] = convertSoftmax<nn::SoftmaxOp>;
    t["aten.log_softmax"] = convertSoftmax<nn::LogSoftmaxOp>;
    t["aten._log_softmax"] = convertSoftmax<nn::LogSoftmaxOp>;
    t["aten.layer_norm"] = convertLayerNorm;
    t["aten.native_layer_norm"] = convertNativeLayerNorm;
    t["aten.rms_norm"] = convertRmsNorm;
    t["aten.scaled_dot_product_attention"] = convertAttention;
    // Symbolic sizes and runtime checks.
    t["aten.sym_size"] = convertSymSize;
    t["aten.item"] = convertItem;
    t["aten._local_scalar_dense"] = convertItem;
    t["aten.sym_numel"] = convertSymSize;
    for (const char *name : {"aten._assert_tensor_metadata", "aten._assert_scalar",
                             "aten._assert_async", "aten.sym_constrain_range",
                             "aten.sym_constrain_range_for_size"})
      t[name] = skipAssertion;
    addRoutingConverters(t);
    // torch's NumPy-style alias names of the same operators.
    for (auto [alias, name] : std::initializer_list<std::pair<const char *, const char *>>{
             {"aten.multiply", "aten.mul"}, {"aten.subtract", "aten.sub"},
             {"aten.divide", "aten.div"}, {"aten.greater", "aten.gt"},
             {"aten.greater_equal", "aten.ge"}, {"aten.less", "aten.lt"},
             {"aten.less_equal", "aten.le"}, {"aten.not_equal", "aten.ne"},
             {"aten.absolute", "aten.abs"}, {"aten.negative", "aten.neg"},
             {"aten.clip", "aten.clamp"}, {"aten.concatenate", "aten.cat"},
             {"aten.swapdims", "aten.transpose"}, {"aten.special_expit", "aten.sigmoid"}})
      if (t.count(name))
        t[alias] = t.lookup(name);
    return t;
  }();
  return table;
}

} // namespace

//===----------------------------------------------------------------------===//
// Complex tensors
//===----------------------------------------------------------------------===//

namespace {

/// The name of a node's tensor argument, when it is one.
std::optional<llvm::StringRef> tensorArgName(NodeContext &node, llvm::StringRef name,
                                             int position) {
  const llvm::json::Object *arg = node.arg(name, position);
  const llvm::json::Object *tensor = arg ? arg->getObject("as_tensor") : nullptr;
  return tensor ? tensor->getString("name") : std::nullopt;
}

/// The (real, imaginary) halves of a complex tensor's real view, each with
/// the trailing dim of 1.
Expected<std::pair<Value, Value>> complexParts(GraphImporter &g, Value z) {
  int64_t last = tensorType(z).getRank() - 1;
  auto re = sliceAlong(g, z, last, 0, 1, 1);
  if (!re)
    return re.takeError();
  auto im = sliceAlong(g, z, last, 1, 2, 1);
  if (!im)
    return im.takeError();
  return std::make_pair(*re, *im);
}

/// self * other where one or both are complex (their real views): the
/// complex product, or each half scaled by a real factor.
Error convertComplexMul(NodeContext &node, RankedTensorType type) {
  GraphImporter &g = node.importer();
  Type element = type.getElementType();
  llvm::SmallVector<int64_t> partShape(type.getShape());
  partShape.back() = 1;
  RankedTensorType part = type.clone(partShape);
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  std::optional<llvm::StringRef> selfName = tensorArgName(node, "self", 0);
  std::optional<llvm::StringRef> otherName = tensorArgName(node, "other", 1);
  bool selfComplex = selfName && g.isComplex(*selfName);
  bool otherComplex = otherName && g.isComplex(*otherName);
  if (!otherName) { // a number
    auto factor = node.number("other", 1);
    if (!factor)
      return factor.takeError();
    auto result = g.create<nn::MulOp>(type, *self, g.scalar(element, *factor));
    if (!result)
      return result.takeError();
    return node.setResult(0, *result);
  }
  auto other = node.tensor("other", 1);
  if (!other)
    return other.takeError();
  if (selfComplex != otherComplex) {
    // A real factor multiplies both halves: it gets the trailing dim of 1.
    Value z = selfComplex ? *self : *other, r = selfComplex ? *other : *self;
    llvm::SmallVector<int64_t> shape(tensorType(r).getShape());
    shape.push_back(1);
    auto cast = g.castTo(r, element);
    if (!cast)
      return cast.takeError();
    auto widened = g.reshapeTo(*cast, shape);
    if (!widened)
      return widened.takeError();
    auto result = g.create<nn::MulOp>(type, z, *widened);
    if (!result)
      return result.takeError();
    return node.setResult(0, *result);
  }
  auto x = complexParts(g, *self);
  if (!x)
    return x.takeError();
  auto y = complexParts(g, *other);
  if (!y)
    return y.takeError();
  auto [a, b] = *x;
  auto [c, d] = *y;
  // (a + bi)(c + di) = (ac - bd) + (ad + bc)i
  auto mul = [&](Value p, Value q) { return g.create<nn::MulOp>(part, p, q); };
  auto ac = mul(a, c), bd = mul(b, d), ad = mul(a, d), bc = mul(b, c);
  for (auto *v : {&ac, &bd, &ad, &bc})
    if (!*v)
      return v->takeError();
  auto re = g.create<nn::SubOp>(part, *ac, *bd);
  if (!re)
    return re.takeError();
  auto im = g.create<nn::AddOp>(part, *ad, *bc);
  if (!im)
    return im.takeError();
  auto result = g.create<nn::ConcatOp>(type, ValueRange{*re, *im},
                                       g.builder().getI64IntegerAttr(type.getRank() - 1));
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

/// polar(abs, angle) of compile-time constants: abs cos(angle) + i abs sin(angle).
Error convertPolar(NodeContext &node, RankedTensorType type) {
  auto abs = node.tensor("abs", 0);
  if (!abs)
    return abs.takeError();
  auto angle = node.tensor("angle", 1);
  if (!angle)
    return angle.takeError();
  auto absValue = requireConstant(node, *abs);
  if (!absValue)
    return absValue.takeError();
  auto angleValue = requireConstant(node, *angle);
  if (!angleValue)
    return angleValue.takeError();
  std::vector<double> r = toDoubles(*absValue), theta = toDoubles(*angleValue);
  if (r.size() != theta.size() || int64_t(2 * r.size()) != type.getNumElements())
    return importError("polar of differently shaped abs and angle is not supported");
  std::vector<double> values(2 * r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    values[2 * i] = r[i] * std::cos(theta[i]);
    values[2 * i + 1] = r[i] * std::sin(theta[i]);
  }
  return node.setResult(0, node.importer().constant(fromDoubles(type, values)));
}

} // namespace

/// A complex tensor is its real view (view_as_real's layout: a trailing dim
/// of 2 holding the real and imaginary parts), so view_as_complex and
/// view_as_real are the value itself, views that keep the trailing dim are
/// reshapes of the real view, and mul is the complex product. What else
/// would read the halves as independent numbers is refused, not guessed.
llvm::Error convertComplexNode(NodeContext &node) {
  llvm::StringRef target = node.target();
  llvm::StringRef name = target;
  if (!name.consume_front("torch.ops.aten."))
    return importError("an operator on complex tensors outside aten is not supported");
  name = name.split('.').first;
  if (name == "_assert_tensor_metadata")
    return Error::success(); // checks nothing Loom's types do not already say
  auto type = node.resultType(0);
  if (!type)
    return type.takeError();
  GraphImporter &g = node.importer();
  std::optional<llvm::StringRef> selfName = tensorArgName(node, "self", 0);
  bool resultComplex = g.isComplex(node.resultName(0));
  bool selfComplex = selfName && g.isComplex(*selfName);
  if (name == "polar")
    return convertPolar(node, *type);
  if (name == "mul")
    return convertComplexMul(node, *type);
  const bool same = name == "view_as_complex" || name == "view_as_real" ||
                    (selfComplex == resultComplex &&
                     llvm::is_contained({"alias", "detach", "clone", "contiguous",
                                         "lift_fresh_copy", "to", "_to_copy", "type_as"},
                                        name));
  const bool reshape = selfComplex && resultComplex &&
                       llvm::is_contained({"view", "reshape", "_unsafe_view", "unsqueeze",
                                           "squeeze", "flatten", "unflatten"},
                                          name);
  const bool broadcast =
      selfComplex && resultComplex && llvm::is_contained({"expand", "broadcast_to"}, name);
  if (!same && !reshape && !broadcast)
    return importError("complex tensors are imported through polar, view_as_complex, "
                       "view_as_real, mul and views; '" + name + "' of a complex tensor is not "
                       "supported");
  auto self = node.tensor("self", 0);
  if (!self)
    return self.takeError();
  // The value itself: the two views, and copies or casts that keep the dtype.
  if (same) {
    auto cast = g.castTo(*self, type->getElementType());
    if (!cast)
      return cast.takeError();
    return node.setResult(0, *cast);
  }
  auto result = reshape ? g.reshapeTo(*self, type->getShape())
                        : g.broadcastTo(*self, type->getShape());
  if (!result)
    return result.takeError();
  return node.setResult(0, *result);
}

OperatorConverter findOperatorConverter(llvm::StringRef target) {
  if (!target.consume_front("torch.ops."))
    return nullptr;
  const auto &table = converters();
  auto it = table.find(target);
  if (it != table.end())
    return it->second;
  // "aten.add.Tensor" -> "aten.add": most overloads share one converter.
  size_t lastDot = target.rfind('.');
  if (lastDot == llvm::StringRef::npos || lastDot == target.find('.'))
    return nullptr;
  it = table.find(target.substr(0, lastDot));
  return it != table.end() ? it->second : nullptr;
}

} // namespace loom::torch_export
