#include "frontend/onnx/OnnxNodeImporter.h"

#include "frontend/common/ConstantEvaluator.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;

namespace loom::onnx_import {

// FLOAT8E4M3FN and FLOAT8E5M2 (ONNX 1.14) postdate Debian's ONNX 1.12 headers.
constexpr int kFloat8E4M3FN = 17;
constexpr int kFloat8E5M2 = 19;

Type elementTypeOf(MLIRContext *context, int onnxDataType) {
  Builder b(context);
  switch (onnxDataType) {
  case onnx::TensorProto::FLOAT: return b.getF32Type();
  case onnx::TensorProto::DOUBLE: return b.getF64Type();
  case onnx::TensorProto::FLOAT16: return b.getF16Type();
  case onnx::TensorProto::BFLOAT16: return b.getBF16Type();
  case kFloat8E4M3FN: return b.getFloat8E4M3FNType();
  case kFloat8E5M2: return b.getFloat8E5M2Type();
  case onnx::TensorProto::INT64: return b.getI64Type();
  case onnx::TensorProto::INT32: return b.getI32Type();
  case onnx::TensorProto::BOOL: return b.getI1Type();
  default: return {};
  }
}

std::string dataTypeName(int onnxDataType) {
  if (onnxDataType == kFloat8E4M3FN)
    return "FLOAT8E4M3FN";
  if (onnxDataType == kFloat8E5M2)
    return "FLOAT8E5M2";
  if (onnx::TensorProto::DataType_IsValid(onnxDataType))
    return onnx::TensorProto::DataType_Name(
        static_cast<onnx::TensorProto::DataType>(onnxDataType));
  return "data type " + std::to_string(onnxDataType);
}

std::vector<int64_t> elementsAsInts(DenseElementsAttr attr) {
  std::vector<int64_t> out;
  out.reserve(attr.getNumElements());
  Type elementType = attr.getElementType();
  if (elementType.isInteger(1)) {
    for (bool v : attr.getValues<bool>())
      out.push_back(v);
  } else if (isa<IntegerType>(elementType)) {
    for (const APInt &v : attr.getValues<APInt>())
      out.push_back(v.getSExtValue());
  } else {
    for (const APFloat &v : attr.getValues<APFloat>())
      out.push_back(static_cast<int64_t>(v.convertToDouble()));
  }
  return out;
}

std::vector<double> elementsAsDoubles(DenseElementsAttr attr) {
  std::vector<double> out;
  out.reserve(attr.getNumElements());
  Type elementType = attr.getElementType();
  if (isa<FloatType>(elementType)) {
    for (const APFloat &v : attr.getValues<APFloat>())
      out.push_back(v.convertToDouble());
  } else {
    for (int64_t v : elementsAsInts(attr))
      out.push_back(static_cast<double>(v));
  }
  return out;
}

DenseElementsAttr elementsFromInts(RankedTensorType type, ArrayRef<int64_t> values) {
  Type elementType = type.getElementType();
  if (elementType.isInteger(1)) {
    SmallVector<bool> bits;
    for (int64_t v : values)
      bits.push_back(v != 0);
    return DenseElementsAttr::get(type, ArrayRef<bool>(bits));
  }
  if (auto intType = dyn_cast<IntegerType>(elementType)) {
    SmallVector<APInt> ints;
    for (int64_t v : values)
      ints.emplace_back(intType.getWidth(), v, /*isSigned=*/true);
    return DenseElementsAttr::get(type, ints);
  }
  std::vector<double> doubles(values.begin(), values.end());
  return elementsFromDoubles(type, doubles);
}

DenseElementsAttr elementsFromDoubles(RankedTensorType type, ArrayRef<double> values) {
  auto floatType = dyn_cast<FloatType>(type.getElementType());
  if (!floatType) {
    std::vector<int64_t> ints;
    for (double v : values)
      ints.push_back(static_cast<int64_t>(v));
    return elementsFromInts(type, ints);
  }
  SmallVector<APFloat> floats;
  for (double v : values) {
    APFloat f(v);
    bool losesInfo = false;
    f.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven, &losesInfo);
    floats.push_back(f);
  }
  return DenseElementsAttr::get(type, floats);
}

FailureOr<Value> NodeImporter::input(int index) {
  if (!hasInput(index))
    return fail("input " + Twine(index) + " is missing");
  auto it = values.find(node.input(index));
  if (it == values.end())
    return fail("input '" + node.input(index) +
                "' is not defined before this node (a graph input, initializer "
                "or earlier node output)");
  return it->second;
}

/// Makes `v` a constant where it is computed only from constants and
/// initializers the importer took for weights: those initializers are
/// buffers (a rotary table's inverse frequencies, which the exporter lifted
/// to initializers), since their value is needed now. Each becomes an
/// nn.constant of its value, for every reader.
static void freezeBuffersUnder(Value v, llvm::StringMap<Value> &values) {
  SmallVector<nn::ParameterOp> params;
  llvm::DenseSet<Operation *> seen;
  SmallVector<Value> stack{v};
  while (!stack.empty()) {
    Operation *def = stack.pop_back_val().getDefiningOp();
    if (!def)
      return; // a graph input: not a constant at all
    if (!seen.insert(def).second || isa<nn::ConstantOp>(def))
      continue;
    if (auto param = dyn_cast<nn::ParameterOp>(def)) {
      if (!param.getValue() || !isa<DenseElementsAttr>(*param.getValue()))
        return;
      params.push_back(param);
      continue;
    }
    for (Value operand : def->getOperands())
      stack.push_back(operand);
  }
  for (nn::ParameterOp param : params) {
    OpBuilder at(param);
    Value constant = at.create<nn::ConstantOp>(param.getLoc(), param.getType(),
                                               cast<DenseElementsAttr>(*param.getValue()));
    for (auto &entry : values)
      if (entry.second == param.getResult())
        entry.second = constant;
    param.getResult().replaceAllUsesWith(constant);
    param.erase();
  }
}

FailureOr<DenseElementsAttr> NodeImporter::constantInput(int index, StringRef role) {
  FailureOr<Value> value = input(index);
  if (failed(value))
    return failure();
  FailureOr<DenseElementsAttr> attr = evaluateConstant(*value);
  if (failed(attr)) {
    freezeBuffersUnder(*value, values);
    value = input(index);
    if (succeeded(value))
      attr = evaluateConstant(*value);
  }
  if (failed(attr))
    return fail("input '" + node.input(index) + "' (" + role +
                ") must be a constant: Loom compiles static shapes");
  return attr;
}

FailureOr<std::vector<int64_t>> NodeImporter::constantInts(int index, StringRef role) {
  FailureOr<DenseElementsAttr> attr = constantInput(index, role);
  if (failed(attr))
    return failure();
  if (!isa<IntegerType>(attr->getElementType()) || attr->getElementType().isInteger(1))
    return fail("input '" + node.input(index) + "' (" + role +
                ") must hold integers");
  return elementsAsInts(*attr);
}

bool NodeImporter::isConstantInput(int index) {
  if (!hasInput(index))
    return false;
  auto it = values.find(node.input(index));
  return it != values.end() && it->second.getDefiningOp<nn::ConstantOp>();
}

LogicalResult NodeImporter::setOutput(int index, Value value) {
  if (!wantsOutput(index))
    return success();
  values[node.output(index)] = value;
  return success();
}

const onnx::AttributeProto *NodeImporter::attribute(StringRef name) const {
  for (const onnx::AttributeProto &attr : node.attribute())
    if (attr.name() == name)
      return &attr;
  return nullptr;
}

FailureOr<int64_t> NodeImporter::intAttr(StringRef name, int64_t defaultValue) {
  const onnx::AttributeProto *attr = attribute(name);
  if (!attr)
    return defaultValue;
  if (attr->type() != onnx::AttributeProto::INT)
    return fail("attribute '" + name + "' must be an integer");
  return attr->i();
}

FailureOr<float> NodeImporter::floatAttr(StringRef name, float defaultValue) {
  const onnx::AttributeProto *attr = attribute(name);
  if (!attr)
    return defaultValue;
  if (attr->type() != onnx::AttributeProto::FLOAT)
    return fail("attribute '" + name + "' must be a float");
  return attr->f();
}

FailureOr<std::string> NodeImporter::stringAttr(StringRef name, StringRef defaultValue) {
  const onnx::AttributeProto *attr = attribute(name);
  if (!attr)
    return defaultValue.str();
  if (attr->type() != onnx::AttributeProto::STRING)
    return fail("attribute '" + name + "' must be a string");
  return attr->s();
}

FailureOr<std::optional<std::vector<int64_t>>> NodeImporter::intsAttr(StringRef name) {
  const onnx::AttributeProto *attr = attribute(name);
  if (!attr)
    return std::optional<std::vector<int64_t>>();
  if (attr->type() != onnx::AttributeProto::INTS)
    return fail("attribute '" + name + "' must be a list of integers");
  return std::optional<std::vector<int64_t>>(
      std::vector<int64_t>(attr->ints().begin(), attr->ints().end()));
}

Value NodeImporter::constant(DenseElementsAttr value) {
  return b.create<nn::ConstantOp>(loc, value.getType(), value);
}

Value NodeImporter::scalar(Type elementType, double value) {
  auto type = RankedTensorType::get({}, elementType);
  return constant(elementsFromDoubles(type, {value}));
}

static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

FailureOr<Value> NodeImporter::reshape(Value value, ArrayRef<int64_t> shape) {
  RankedTensorType type = typeOf(value);
  if (type.getShape() == shape)
    return value;
  auto resultType = RankedTensorType::get(shape, type.getElementType());
  if (resultType.getNumElements() != type.getNumElements())
    return fail("cannot reshape " + shapeString(type.getShape()) + " to " +
                shapeString(shape));
  return b.create<nn::ReshapeOp>(loc, resultType, value).getResult();
}

FailureOr<Value> NodeImporter::broadcastTo(Value value, ArrayRef<int64_t> shape) {
  RankedTensorType type = typeOf(value);
  if (type.getShape() == shape)
    return value;
  if (!nn::isBroadcastableTo(type.getShape(), shape))
    return fail("cannot broadcast " + shapeString(type.getShape()) + " to " +
                shapeString(shape));
  auto resultType = RankedTensorType::get(shape, type.getElementType());
  return b.create<nn::BroadcastOp>(loc, resultType, value).getResult();
}

FailureOr<int64_t> NodeImporter::normalizeAxis(int64_t axis, int64_t rank,
                                               StringRef what, bool inclusiveEnd) {
  int64_t limit = inclusiveEnd ? rank + 1 : rank;
  if (axis < -limit || axis >= limit)
    return fail(what + " " + Twine(axis) + " is out of range for rank " + Twine(rank));
  return axis < 0 ? axis + limit : axis;
}

LogicalResult NodeImporter::requireSameElementType(Value a, Value b) {
  Type ta = typeOf(a).getElementType(), tb = typeOf(b).getElementType();
  if (ta == tb)
    return success();
  std::string sa, sb;
  llvm::raw_string_ostream osa(sa), osb(sb);
  osa << ta;
  osb << tb;
  return fail("operand element types differ: " + sa + " and " + sb);
}

} // namespace loom::onnx_import
