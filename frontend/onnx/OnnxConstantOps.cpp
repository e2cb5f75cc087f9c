// ONNX operators Loom evaluates at import time because their results depend
// only on constants and static shapes: Constant, Shape, Size,
// ConstantOfShape, Range, CumSum (a running sum of a value known only at run
// time is built from nn ops instead). Trilu on a constant is computed here too;
// on a variable it masks with nn.where.

#include "frontend/common/Compositions.h"
#include "frontend/onnx/OnnxNodeImporter.h"

#include "dialects/nn/NNOps.h"

#include <cmath>

using namespace mlir;

namespace loom::onnx_import {
namespace {

LogicalResult importConstant(NodeImporter &n) {
  if (n.node.attribute_size() != 1)
    return n.fail("needs exactly one value attribute");
  const onnx::AttributeProto &attr = n.node.attribute(0);
  MLIRContext *context = n.b.getContext();
  auto vectorType = [&](Type element, int64_t size) {
    return RankedTensorType::get({size}, element);
  };
  DenseElementsAttr value;
  if (attr.name() == "value" && attr.type() == onnx::AttributeProto::TENSOR) {
    FailureOr<DenseElementsAttr> tensor = n.readTensor(attr.t(), "the value");
    if (failed(tensor))
      return failure();
    value = *tensor;
  } else if (attr.name() == "value_float" && attr.type() == onnx::AttributeProto::FLOAT) {
    value = elementsFromDoubles(RankedTensorType::get({}, Float32Type::get(context)), {attr.f()});
  } else if (attr.name() == "value_floats" && attr.type() == onnx::AttributeProto::FLOATS) {
    std::vector<double> floats(attr.floats().begin(), attr.floats().end());
    value = elementsFromDoubles(vectorType(Float32Type::get(context), floats.size()), floats);
  } else if (attr.name() == "value_int" && attr.type() == onnx::AttributeProto::INT) {
    value = elementsFromInts(RankedTensorType::get({}, IntegerType::get(context, 64)), {attr.i()});
  } else if (attr.name() == "value_ints" && attr.type() == onnx::AttributeProto::INTS) {
    std::vector<int64_t> ints(attr.ints().begin(), attr.ints().end());
    value = elementsFromInts(vectorType(IntegerType::get(context, 64), ints.size()), ints);
  } else {
    return n.fail("unsupported value attribute '" + attr.name() + "'");
  }
  return n.setOutput(0, n.constant(value));
}

LogicalResult importShape(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> shape = NodeImporter::typeOf(*x).getShape();
  int64_t rank = shape.size();
  FailureOr<int64_t> start = n.intAttr("start", 0), end = n.intAttr("end", rank);
  if (failed(start) || failed(end))
    return failure();
  // start and end clamp to [0, rank] after counting negatives from the end.
  auto clamp = [rank](int64_t i) {
    if (i < 0)
      i += rank;
    return std::clamp<int64_t>(i, 0, rank);
  };
  int64_t lo = clamp(*start), hi = std::max(lo, clamp(*end));
  std::vector<int64_t> dims(shape.begin() + lo, shape.begin() + hi);
  auto type = RankedTensorType::get({hi - lo}, n.b.getI64Type());
  return n.setOutput(0, n.constant(elementsFromInts(type, dims)));
}

LogicalResult importSize(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  if (failed(x))
    return failure();
  auto type = RankedTensorType::get({}, n.b.getI64Type());
  return n.setOutput(
      0, n.constant(elementsFromInts(type, {NodeImporter::typeOf(*x).getNumElements()})));
}

LogicalResult importConstantOfShape(NodeImporter &n) {
  FailureOr<std::vector<int64_t>> shape = n.constantInts(0, "shape");
  if (failed(shape))
    return failure();
  for (int64_t d : *shape)
    if (d < 0)
      return n.fail("shape entry " + Twine(d) + " is negative");
  // The fill value defaults to a float32 zero.
  DenseElementsAttr fillValue =
      elementsFromDoubles(RankedTensorType::get({}, n.b.getF32Type()), {0.0});
  if (const onnx::AttributeProto *attr = n.attribute("value")) {
    if (attr->type() != onnx::AttributeProto::TENSOR)
      return n.fail("attribute 'value' must be a tensor");
    FailureOr<DenseElementsAttr> value = n.readTensor(attr->t(), "the value");
    if (failed(value))
      return failure();
    if (value->getNumElements() != 1)
      return n.fail("attribute 'value' must hold one element");
    fillValue = *value;
  }
  auto type = RankedTensorType::get(*shape, fillValue.getElementType());
  if (type.getNumElements() > (int64_t(1) << 28))
    return n.fail("the result has too many elements to build at import time");
  return n.setOutput(0, n.constant(DenseElementsAttr::get(
                            type, fillValue.getValues<Attribute>()[0])));
}

LogicalResult importRange(NodeImporter &n) {
  FailureOr<DenseElementsAttr> start = n.constantInput(0, "start");
  FailureOr<DenseElementsAttr> limit = n.constantInput(1, "limit");
  FailureOr<DenseElementsAttr> delta = n.constantInput(2, "delta");
  if (failed(start) || failed(limit) || failed(delta))
    return failure();
  if (start->getNumElements() != 1 || limit->getNumElements() != 1 ||
      delta->getNumElements() != 1)
    return n.fail("start, limit and delta must be scalars");
  Type elementType = start->getElementType();
  if (elementType.isInteger(1))
    return n.fail("unsupported element type bool");
  if (isa<IntegerType>(elementType)) {
    int64_t first = elementsAsInts(*start)[0], last = elementsAsInts(*limit)[0],
            step = elementsAsInts(*delta)[0];
    if (step == 0)
      return n.fail("delta is 0");
    int64_t count = std::max<int64_t>(0, (last - first + step + (step > 0 ? -1 : 1)) / step);
    if (count > (int64_t(1) << 28))
      return n.fail("the range is too long to build at import time");
    std::vector<int64_t> values;
    for (int64_t i = 0; i < count; ++i)
      values.push_back(first + i * step);
    return n.setOutput(0, n.constant(elementsFromInts(
                              RankedTensorType::get({count}, elementType), values)));
  }
  double first = elementsAsDoubles(*start)[0], last = elementsAsDoubles(*limit)[0],
         step = elementsAsDoubles(*delta)[0];
  if (step == 0 || !std::isfinite(first) || !std::isfinite(last) || !std::isfinite(step))
    return n.fail("start, limit and delta must be finite and delta nonzero");
  double steps = std::ceil((last - first) / step);
  if (steps > double(int64_t(1) << 28))
    return n.fail("the range is too long to build at import time");
  int64_t count = std::max<int64_t>(0, static_cast<int64_t>(steps));
  std::vector<double> values;
  for (int64_t i = 0; i < count; ++i)
    values.push_back(first + i * step);
  return n.setOutput(0, n.constant(elementsFromDoubles(
                            RankedTensorType::get({count}, elementType), values)));
}

/// CumSum: of a constant, computed here; of a value known at run time, the
/// composition both importers share (buildCumSum: a matmul with a triangle
/// of ones, integers summed in i64 and cast back).
LogicalResult importCumSum(NodeImporter &n) {
  FailureOr<std::vector<int64_t>> axisValue = n.constantInts(1, "axis");
  FailureOr<int64_t> exclusive = n.intAttr("exclusive", 0), reverse = n.intAttr("reverse", 0);
  if (failed(axisValue) || failed(exclusive) || failed(reverse))
    return failure();
  if (axisValue->size() != 1)
    return n.fail("axis must be a scalar");
  if (!n.isConstantInput(0)) {
    FailureOr<Value> input = n.input(0);
    if (failed(input))
      return failure();
    auto type = cast<RankedTensorType>(input->getType());
    if (type.getElementType().isInteger(1))
      return n.fail("unsupported element type bool");
    FailureOr<int64_t> axis = n.normalizeAxis((*axisValue)[0], type.getRank(), "axis");
    if (failed(axis))
      return failure();
    std::string why;
    FailureOr<Value> sums =
        buildCumSum(n.b, n.loc, *input, *axis, *exclusive != 0, *reverse != 0, why);
    if (failed(sums))
      return n.fail(why);
    Value result = *sums;
    if (cast<RankedTensorType>(result.getType()).getElementType() != type.getElementType())
      result = n.b.create<nn::CastOp>(n.loc, type, result);
    return n.setOutput(0, result);
  }
  FailureOr<DenseElementsAttr> x = n.constantInput(0, "x");
  if (failed(x))
    return failure();
  auto type = cast<RankedTensorType>(x->getType());
  FailureOr<int64_t> axis = n.normalizeAxis((*axisValue)[0], type.getRank(), "axis");
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> shape = type.getShape();
  int64_t dim = shape[*axis], inner = 1;
  for (int64_t d = *axis + 1; d < type.getRank(); ++d)
    inner *= shape[d];
  int64_t outer = dim == 0 || inner == 0 ? 0 : type.getNumElements() / (dim * inner);
  // Sums along the axis of a row-major [outer, dim, inner] view.
  auto scan = [&](auto values) {
    auto result = values;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        typename decltype(values)::value_type sum = 0;
        for (int64_t step = 0; step < dim; ++step) {
          int64_t k = *reverse ? dim - 1 - step : step;
          int64_t at = (o * dim + k) * inner + i;
          if (*exclusive) {
            result[at] = sum;
            sum += values[at];
          } else {
            sum += values[at];
            result[at] = sum;
          }
        }
      }
    return result;
  };
  if (isa<FloatType>(type.getElementType()))
    return n.setOutput(0, n.constant(elementsFromDoubles(type, scan(elementsAsDoubles(*x)))));
  if (type.getElementType().isInteger(1))
    return n.fail("unsupported element type bool");
  return n.setOutput(0, n.constant(elementsFromInts(type, scan(elementsAsInts(*x)))));
}

/// Trilu keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the
/// last two dims and zeroes the rest.
LogicalResult importTrilu(NodeImporter &n) {
  FailureOr<Value> x = n.input(0);
  FailureOr<int64_t> upper = n.intAttr("upper", 1);
  if (failed(x) || failed(upper))
    return failure();
  int64_t k = 0;
  if (n.hasInput(1)) {
    FailureOr<std::vector<int64_t>> given = n.constantInts(1, "k");
    if (failed(given))
      return failure();
    if (given->size() != 1)
      return n.fail("k must be a scalar");
    k = (*given)[0];
  }
  RankedTensorType type = NodeImporter::typeOf(*x);
  if (type.getRank() < 2)
    return n.fail("the input must have rank >= 2");
  int64_t rows = type.getDimSize(type.getRank() - 2), cols = type.getDimSize(type.getRank() - 1);
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      keep.push_back(*upper ? j - i >= k : j - i <= k);
  auto maskType = RankedTensorType::get({rows, cols}, n.b.getI1Type());
  DenseElementsAttr mask = elementsFromInts(maskType, keep);

  if (n.isConstantInput(0)) {
    FailureOr<DenseElementsAttr> value = n.constantInput(0, "input");
    if (failed(value))
      return failure();
    bool isFloat = isa<FloatType>(type.getElementType());
    std::vector<double> doubles = isFloat ? elementsAsDoubles(*value) : std::vector<double>();
    std::vector<int64_t> ints = isFloat ? std::vector<int64_t>() : elementsAsInts(*value);
    for (int64_t at = 0, total = type.getNumElements(); at < total; ++at)
      if (!keep[at % (rows * cols)]) {
        if (isFloat)
          doubles[at] = 0;
        else
          ints[at] = 0;
      }
    return n.setOutput(0, n.constant(isFloat ? elementsFromDoubles(type, doubles)
                                             : elementsFromInts(type, ints)));
  }
  FailureOr<Value> result = n.inferred<nn::WhereOp>(
      n.constant(mask), *x, n.scalar(type.getElementType(), 0));
  if (failed(result))
    return failure();
  return n.setOutput(0, *result);
}

} // namespace

void addConstantOps(OpTable &table) {
  table["Constant"] = importConstant;
  table["Shape"] = importShape;
  table["Size"] = importSize;
  table["ConstantOfShape"] = importConstantOfShape;
  table["Range"] = importRange;
  table["CumSum"] = importCumSum;
  table["Trilu"] = importTrilu;
}

} // namespace loom::onnx_import
