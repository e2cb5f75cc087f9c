#include "frontend/torch_export/GraphImporter.h"

#include "dialects/nn/NNOps.h"
#include "frontend/common/ConstantEvaluator.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"

#include <functional>
#include <numeric>
#include <variant>
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace loom::torch_export {

namespace {

/// The single key of a serialized union ({"as_int": 3} -> "as_int").
llvm::StringRef unionKind(const llvm::json::Object &object) {
  return object.size() == 1 ? llvm::StringRef(object.begin()->first) : llvm::StringRef();
}

/// The tensor name of a TensorArgument ({"name": "x"}).
std::optional<llvm::StringRef> tensorName(const llvm::json::Value *tensorArgument) {
  const llvm::json::Object *object = tensorArgument ? tensorArgument->getAsObject() : nullptr;
  return object ? object->getString("name") : std::nullopt;
}

} // namespace

//===----------------------------------------------------------------------===//
// NodeContext
//===----------------------------------------------------------------------===//

NodeContext::NodeContext(GraphImporter &importer, const llvm::json::Object &node)
    : importer_(importer), node_(node) {
  target_ = node.getString("target").value_or("").str();
  inputsJson_ = node.getArray("inputs");
  if (const llvm::json::Array *outputs = node.getArray("outputs")) {
    for (const llvm::json::Value &output : *outputs) {
      const llvm::json::Object *object = output.getAsObject();
      if (!object)
        continue;
      llvm::StringRef kind = unionKind(*object);
      const llvm::json::Value *payload = object->get(kind);
      if (kind == "as_tensor") {
        results_.push_back({Result::Tensor, tensorName(payload).value_or("").str()});
      } else if (kind == "as_tensors" || kind == "as_optional_tensors") {
        const llvm::json::Array *list = payload ? payload->getAsArray() : nullptr;
        for (const llvm::json::Value &element : list ? *list : llvm::json::Array()) {
          const llvm::json::Object *entry = element.getAsObject();
          if (kind == "as_optional_tensors")
            entry = entry ? entry->getObject("as_tensor") : nullptr;
          std::optional<llvm::StringRef> name =
              entry ? entry->getString("name") : std::nullopt;
          results_.push_back(name ? Result{Result::Tensor, name->str()} : Result{});
        }
      } else if (kind == "as_sym_int" || kind == "as_sym_bool") {
        const llvm::json::Object *sym = payload ? payload->getAsObject() : nullptr;
        std::optional<llvm::StringRef> name = sym ? sym->getString("as_name") : std::nullopt;
        Result::Kind resultKind = kind == "as_sym_int" ? Result::SymInt : Result::SymBool;
        results_.push_back(name ? Result{resultKind, name->str()} : Result{});
      } else {
        results_.push_back({});
      }
    }
  }
}

OpBuilder &NodeContext::builder() { return importer_.builder(); }
Location NodeContext::loc() const { return importer_.loc(); }

const llvm::json::Object *NodeContext::arg(llvm::StringRef name, int position) const {
  if (!inputsJson_)
    return nullptr;
  for (const llvm::json::Value &input : *inputsJson_) {
    const llvm::json::Object *named = input.getAsObject();
    if (named && !name.empty() && named->getString("name") == name)
      return named->getObject("arg");
  }
  // By position: an unnamed argument, or any argument when the caller asks
  // by position alone (Python operators: torch 2.11 names them "a", "b").
  if (position >= 0 && size_t(position) < inputsJson_->size()) {
    const llvm::json::Object *named = (*inputsJson_)[position].getAsObject();
    if (named && (name.empty() || named->getString("name").value_or("").empty()))
      return named->getObject("arg");
  }
  return nullptr;
}

bool NodeContext::has(llvm::StringRef name, int position) const {
  const llvm::json::Object *argument = arg(name, position);
  return argument && unionKind(*argument) != "as_none";
}

bool NodeContext::isNumber(llvm::StringRef name, int position) const {
  const llvm::json::Object *argument = arg(name, position);
  if (!argument)
    return false;
  llvm::StringRef kind = unionKind(*argument);
  return kind == "as_int" || kind == "as_float" || kind == "as_bool" ||
         kind == "as_sym_int" || kind == "as_sym_float";
}

llvm::Error NodeContext::argumentError(llvm::StringRef name, int position,
                                       llvm::StringRef expected) const {
  const llvm::json::Object *argument = arg(name, position);
  std::string what = name.empty() ? "argument " + std::to_string(position)
                                  : "argument '" + name.str() + "'";
  if (!argument)
    return importError("missing " + what);
  return importError(what + " is " +
                     (unionKind(*argument).empty() ? llvm::StringRef("malformed")
                                                   : unionKind(*argument)) +
                     ", expected " + expected);
}

llvm::Expected<Value> NodeContext::lookup(llvm::StringRef name) {
  if (llvm::Error err = importer_.refresh(name))
    return std::move(err);
  GraphScope &scope = importer_.scope();
  auto it = scope.tensors.find(name);
  if (it == scope.tensors.end()) {
    auto reason = scope.unavailable.find(name);
    if (reason != scope.unavailable.end())
      return importError("uses '" + name + "', " + reason->second);
    return importError("uses '" + name + "', which no earlier node defines");
  }
  Value value = it->second;
  if (!value.getDefiningOp<nn::ConstantOp>())
    inputsConstant_ = false;
  return value;
}

llvm::Expected<Value> NodeContext::tensor(llvm::StringRef name, int position) {
  const llvm::json::Object *argument = arg(name, position);
  std::optional<llvm::StringRef> tensor =
      argument ? tensorName(argument->get("as_tensor")) : std::nullopt;
  if (!tensor)
    return argumentError(name, position, "a tensor");
  return lookup(*tensor);
}

llvm::Expected<std::optional<Value>> NodeContext::optionalTensor(llvm::StringRef name,
                                                                int position) {
  if (!has(name, position))
    return std::optional<Value>();
  const llvm::json::Object *argument = arg(name, position);
  // Optional tensors serialize as as_tensor or as_optional_tensor.
  if (const llvm::json::Object *optional = argument->getObject("as_optional_tensor")) {
    if (optional->get("as_none"))
      return std::optional<Value>();
    std::optional<llvm::StringRef> tensor = tensorName(optional->get("as_tensor"));
    if (!tensor)
      return argumentError(name, position, "an optional tensor");
    auto value = lookup(*tensor);
    if (!value)
      return value.takeError();
    return std::optional<Value>(*value);
  }
  auto value = this->tensor(name, position);
  if (!value)
    return value.takeError();
  return std::optional<Value>(*value);
}

llvm::Expected<llvm::SmallVector<std::optional<Value>>>
NodeContext::tensorList(llvm::StringRef name, int position) {
  const llvm::json::Object *argument = arg(name, position);
  const llvm::json::Array *list = nullptr;
  bool optional = false;
  if (argument) {
    list = argument->getArray("as_tensors");
    if (!list) {
      list = argument->getArray("as_optional_tensors");
      optional = true;
    }
  }
  if (!list)
    return argumentError(name, position, "a list of tensors");
  llvm::SmallVector<std::optional<Value>> values;
  for (const llvm::json::Value &element : *list) {
    const llvm::json::Value *tensorArgument = &element;
    if (optional) {
      const llvm::json::Object *entry = element.getAsObject();
      if (entry && entry->get("as_none")) {
        values.push_back(std::nullopt);
        continue;
      }
      tensorArgument = entry ? entry->get("as_tensor") : nullptr;
    }
    std::optional<llvm::StringRef> tensor = tensorName(tensorArgument);
    if (!tensor)
      return argumentError(name, position, "a list of tensors");
    auto value = lookup(*tensor);
    if (!value)
      return value.takeError();
    values.push_back(*value);
  }
  return values;
}

llvm::Expected<int64_t> NodeContext::symInt(const llvm::json::Value &argument) const {
  const llvm::json::Object *object = argument.getAsObject();
  if (object) {
    if (std::optional<int64_t> value = object->getInteger("as_int"))
      return *value;
    if (std::optional<llvm::StringRef> name = object->getString("as_name")) {
      GraphScope &scope = importer_.scope();
      auto it = scope.symInts.find(*name);
      if (it != scope.symInts.end())
        return it->second;
      // A symbol the graph describes only by its expression.
      if (scope.symIntValues)
        if (const llvm::json::Value *expr = scope.symIntValues->get(*name))
          return symIntValue(*expr, importer_.symbols());
      return importError("uses the symbolic int '" + *name + "', which no earlier node defines");
    }
  }
  return importError("malformed symbolic int argument");
}

llvm::Expected<int64_t> NodeContext::integer(llvm::StringRef name, int position,
                                             std::optional<int64_t> fallback) const {
  const llvm::json::Object *argument = arg(name, position);
  if (!argument || unionKind(*argument) == "as_none") {
    if (fallback)
      return *fallback;
    return argumentError(name, position, "an int");
  }
  if (std::optional<int64_t> value = argument->getInteger("as_int"))
    return *value;
  if (std::optional<bool> value = argument->getBoolean("as_bool"))
    return int64_t(*value);
  if (const llvm::json::Value *sym = argument->get("as_sym_int"))
    return symInt(*sym);
  return argumentError(name, position, "an int");
}

llvm::Expected<std::optional<int64_t>> NodeContext::optionalInteger(llvm::StringRef name,
                                                                   int position) const {
  if (!has(name, position))
    return std::optional<int64_t>();
  auto value = integer(name, position);
  if (!value)
    return value.takeError();
  return std::optional<int64_t>(*value);
}

llvm::Expected<double> NodeContext::number(llvm::StringRef name, int position,
                                           std::optional<double> fallback) const {
  const llvm::json::Object *argument = arg(name, position);
  if (!argument || unionKind(*argument) == "as_none") {
    if (fallback)
      return *fallback;
    return argumentError(name, position, "a number");
  }
  if (std::optional<double> value = argument->getNumber("as_float"))
    return *value;
  // Floats too large for JSON numbers are written as strings ("inf", "-inf", "nan").
  if (std::optional<llvm::StringRef> text = argument->getString("as_float")) {
    if (*text == "inf" || *text == "Infinity")
      return std::numeric_limits<double>::infinity();
    if (*text == "-inf" || *text == "-Infinity")
      return -std::numeric_limits<double>::infinity();
    if (*text == "nan" || *text == "NaN")
      return std::numeric_limits<double>::quiet_NaN();
  }
  if (const llvm::json::Object *sym = argument->getObject("as_sym_float"))
    if (std::optional<double> value = sym->getNumber("as_float"))
      return *value;
  auto value = integer(name, position);
  if (!value) {
    llvm::consumeError(value.takeError());
    return argumentError(name, position, "a number");
  }
  return double(*value);
}

llvm::Expected<std::optional<double>> NodeContext::optionalNumber(llvm::StringRef name,
                                                                 int position) const {
  if (!has(name, position))
    return std::optional<double>();
  auto value = number(name, position);
  if (!value)
    return value.takeError();
  return std::optional<double>(*value);
}

llvm::Expected<bool> NodeContext::boolean(llvm::StringRef name, int position,
                                          std::optional<bool> fallback) const {
  const llvm::json::Object *argument = arg(name, position);
  if (!argument || unionKind(*argument) == "as_none") {
    if (fallback)
      return *fallback;
    return argumentError(name, position, "a bool");
  }
  if (std::optional<bool> value = argument->getBoolean("as_bool"))
    return *value;
  if (const llvm::json::Object *sym = argument->getObject("as_sym_bool")) {
    if (std::optional<bool> value = sym->getBoolean("as_bool"))
      return *value;
    if (std::optional<llvm::StringRef> symName = sym->getString("as_name")) {
      auto it = importer_.scope().symBools.find(*symName);
      if (it != importer_.scope().symBools.end())
        return it->second;
    }
  }
  return argumentError(name, position, "a bool");
}

llvm::Expected<llvm::SmallVector<int64_t>> NodeContext::integers(llvm::StringRef name,
                                                                int position) const {
  const llvm::json::Object *argument = arg(name, position);
  llvm::SmallVector<int64_t> values;
  if (argument) {
    if (const llvm::json::Array *list = argument->getArray("as_ints")) {
      for (const llvm::json::Value &element : *list) {
        std::optional<int64_t> value = element.getAsInteger();
        if (!value)
          return argumentError(name, position, "a list of ints");
        values.push_back(*value);
      }
      return values;
    }
    if (const llvm::json::Array *list = argument->getArray("as_sym_ints")) {
      for (const llvm::json::Value &element : *list) {
        auto value = symInt(element);
        if (!value)
          return value.takeError();
        values.push_back(*value);
      }
      return values;
    }
    // A single int where a list is expected (dim=-1 for dim: int[1]).
    if (argument->get("as_int") || argument->get("as_sym_int")) {
      auto value = integer(name, position);
      if (!value)
        return value.takeError();
      values.push_back(*value);
      return values;
    }
  }
  return argumentError(name, position, "a list of ints");
}

llvm::Expected<std::string> NodeContext::string(llvm::StringRef name, int position,
                                                std::optional<std::string> fallback) const {
  const llvm::json::Object *argument = arg(name, position);
  if (!argument || unionKind(*argument) == "as_none") {
    if (fallback)
      return *fallback;
    return argumentError(name, position, "a string");
  }
  if (std::optional<llvm::StringRef> value = argument->getString("as_string"))
    return value->str();
  return argumentError(name, position, "a string");
}

llvm::Expected<Value> NodeContext::tensorOrNumber(llvm::StringRef name, int position,
                                                  Type elementType) {
  if (isNumber(name, position)) {
    auto value = number(name, position);
    if (!value)
      return value.takeError();
    return importer_.scalar(elementType, *value);
  }
  return tensor(name, position);
}

llvm::Expected<RankedTensorType> NodeContext::resultType(size_t index) const {
  if (index >= results_.size() || results_[index].kind != Result::Tensor)
    return importError("has no tensor result " + llvm::Twine(index));
  return importer_.typeOf(results_[index].name);
}

llvm::Error NodeContext::setResult(size_t index, Value value) {
  auto expected = resultType(index);
  if (!expected)
    return expected.takeError();
  // Replaying a view chain on an index tensor keeps the shapes, not the dtype.
  bool matches = importer_.replaying_
                     ? cast<RankedTensorType>(value.getType()).getShape() == expected->getShape()
                     : value.getType() == *expected;
  if (!matches)
    return importError("converted to a value of type " + typeString(value.getType()) +
                       " but the graph says " + typeString(*expected));
  importer_.scope().tensors[results_[index].name] = value;
  return llvm::Error::success();
}

llvm::Error NodeContext::setSymIntResult(size_t index, int64_t value) {
  if (index >= results_.size() || results_[index].kind != Result::SymInt)
    return importError("has no symbolic int result " + llvm::Twine(index));
  importer_.scope().symInts[results_[index].name] = value;
  return llvm::Error::success();
}

llvm::Error NodeContext::setSymBoolResult(size_t index, bool value) {
  if (index >= results_.size() || results_[index].kind != Result::SymBool)
    return importError("has no symbolic bool result " + llvm::Twine(index));
  importer_.scope().symBools[results_[index].name] = value;
  return llvm::Error::success();
}

void NodeContext::setUnavailable(size_t index, const llvm::Twine &reason) {
  if (index < results_.size() && !results_[index].name.empty())
    importer_.scope().unavailable[results_[index].name] = reason.str();
}

//===----------------------------------------------------------------------===//
// GraphImporter
//===----------------------------------------------------------------------===//

void GraphImporter::pushScope(const llvm::json::Object &graph) {
  GraphScope scope;
  scope.tensorValues = graph.getObject("tensor_values");
  scope.symIntValues = graph.getObject("sym_int_values");
  scopes_.push_back(std::move(scope));
}

llvm::Expected<RankedTensorType> GraphImporter::typeOf(llvm::StringRef name) const {
  const GraphScope &scope = scopes_.back();
  const llvm::json::Value *meta = scope.tensorValues ? scope.tensorValues->get(name) : nullptr;
  if (!meta)
    return importError("tensor '" + name + "' has no entry in tensor_values");
  auto type = tensorTypeOf(context(), *meta, symbols_);
  if (!type)
    return importError("tensor '" + name + "': " + llvm::toString(type.takeError()));
  return type;
}

Value GraphImporter::constant(DenseElementsAttr value) {
  return builder_.create<nn::ConstantOp>(loc_, value);
}

namespace {
Attribute elementAttr(Type elementType, double value) {
  if (auto floatType = dyn_cast<FloatType>(elementType)) {
    bool lost = false;
    llvm::APFloat converted(value);
    converted.convert(floatType.getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven, &lost);
    return FloatAttr::get(floatType, converted);
  }
  if (elementType.isInteger(1))
    return IntegerAttr::get(elementType, llvm::APInt(1, value != 0));
  return IntegerAttr::get(elementType,
                          llvm::APInt(elementType.getIntOrFloatBitWidth(), int64_t(value),
                                      /*isSigned=*/true));
}
} // namespace

Value GraphImporter::splat(RankedTensorType type, double value) {
  return constant(DenseElementsAttr::get(type, elementAttr(type.getElementType(), value)));
}

Value GraphImporter::scalar(Type elementType, double value) {
  return splat(RankedTensorType::get({}, elementType), value);
}

llvm::Error GraphImporter::verify(Operation *op) {
  std::string message;
  LogicalResult result = success();
  {
    ScopedDiagnosticHandler capture(context(), [&](Diagnostic &diagnostic) {
      if (message.empty())
        message = diagnostic.str();
      return success();
    });
    result = mlir::verify(op, /*verifyRecursively=*/false);
  }
  if (succeeded(result))
    return llvm::Error::success();
  return importError("invalid " + op->getName().getStringRef() + ": " + message);
}

llvm::Expected<Value> GraphImporter::castTo(Value value, Type elementType) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getElementType() == elementType)
    return value;
  return create<nn::CastOp>(type.clone(elementType), value);
}

llvm::Expected<Value> GraphImporter::reshapeTo(Value value, llvm::ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getShape() == shape)
    return value;
  return create<nn::ReshapeOp>(type.clone(shape), value);
}

llvm::Expected<Value> GraphImporter::broadcastTo(Value value, llvm::ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getShape() == shape)
    return value;
  return create<nn::BroadcastOp>(type.clone(shape), value);
}

llvm::Expected<Value> GraphImporter::rowsAlong(Value value, int64_t axis, int64_t begin,
                                               int64_t end) {
  auto type = cast<RankedTensorType>(value.getType());
  if (begin == 0 && end == type.getDimSize(axis))
    return value;
  llvm::SmallVector<int64_t> lo(type.getRank(), 0), hi(type.getShape()), step(type.getRank(), 1),
      shape(type.getShape());
  lo[axis] = begin;
  hi[axis] = end;
  shape[axis] = end - begin;
  return create<nn::SliceOp>(type.clone(shape), value, builder_.getDenseI64ArrayAttr(lo),
                             builder_.getDenseI64ArrayAttr(hi),
                             builder_.getDenseI64ArrayAttr(step));
}

llvm::Expected<Value> GraphImporter::placeAlong(Value base, Value rows, int64_t axis,
                                                int64_t begin, int64_t limit) {
  auto type = cast<RankedTensorType>(base.getType());
  int64_t size = type.getDimSize(axis);
  llvm::SmallVector<Value> parts;
  if (begin > 0) {
    auto before = rowsAlong(base, axis, 0, begin);
    if (!before)
      return before.takeError();
    parts.push_back(*before);
  }
  if (limit > begin)
    parts.push_back(rows);
  if (limit < size) {
    auto after = rowsAlong(base, axis, limit, size);
    if (!after)
      return after.takeError();
    parts.push_back(*after);
  }
  if (parts.empty())
    return base;
  if (parts.size() == 1)
    return parts.front();
  return create<nn::ConcatOp>(type, parts, builder_.getI64IntegerAttr(axis));
}

std::optional<DenseElementsAttr> GraphImporter::constantValue(Value value) const {
  if (auto constantOp = value.getDefiningOp<nn::ConstantOp>())
    if (auto dense = dyn_cast<DenseElementsAttr>(constantOp.getValue()))
      return dense;
  FailureOr<DenseElementsAttr> folded = evaluateConstant(value);
  if (failed(folded))
    return std::nullopt;
  return *folded;
}

llvm::Expected<llvm::SmallVector<Value>> GraphImporter::importGraph(const llvm::json::Object &graph) {
  const llvm::json::Array *nodes = graph.getArray("nodes");
  const llvm::json::Array *outputs = graph.getArray("outputs");
  if (!nodes || !outputs)
    return importError("malformed graph: no 'nodes' or 'outputs' list");
  for (const llvm::json::Value &node : *nodes) {
    const llvm::json::Object *object = node.getAsObject();
    if (!object)
      return importError("malformed graph: a node is not an object");
    if (llvm::Error err = convertNode(*object))
      return std::move(err);
  }
  llvm::SmallVector<Value> values;
  for (const llvm::json::Value &output : *outputs) {
    const llvm::json::Object *object = output.getAsObject();
    std::optional<llvm::StringRef> name =
        object ? tensorName(object->get("as_tensor")) : std::nullopt;
    if (!name)
      return importError("a graph output is not a tensor; only tensor outputs are supported");
    if (!scope().tensors.count(*name)) {
      auto reason = scope().unavailable.find(*name);
      if (reason != scope().unavailable.end())
        return importError("graph output '" + *name + "' is " + reason->second);
      return importError("graph output '" + *name + "' is not defined by any node");
    }
    auto value = valueOf(*name);
    if (!value)
      return value.takeError();
    values.push_back(*value);
  }
  return values;
}

llvm::Error GraphImporter::convertHigherOrderWrap(NodeContext &node, int graphPosition) {
  const llvm::json::Object *argument = node.arg("", graphPosition);
  const llvm::json::Object *graphArgument = argument ? argument->getObject("as_graph") : nullptr;
  const llvm::json::Object *graph = graphArgument ? graphArgument->getObject("graph") : nullptr;
  const llvm::json::Array *graphInputs = graph ? graph->getArray("inputs") : nullptr;
  if (!graphInputs)
    return importError("argument " + llvm::Twine(graphPosition) + " is not a graph");
  // The operands after the graph are its inputs, in order: tensors, or
  // symbolic ints (sizes the subgraph computes with).
  llvm::SmallVector<std::variant<Value, int64_t>> operands;
  for (size_t i = 0; i < graphInputs->size(); ++i) {
    const llvm::json::Object *input = (*graphInputs)[i].getAsObject();
    int position = graphPosition + 1 + int(i);
    if (input && input->get("as_sym_int")) {
      auto value = node.integer("", position);
      if (!value)
        return value.takeError();
      operands.push_back(*value);
      continue;
    }
    auto value = node.tensor("", position);
    if (!value)
      return value.takeError();
    operands.push_back(*value);
  }
  pushScope(*graph);
  for (auto [input, value] : llvm::zip(*graphInputs, operands)) {
    const llvm::json::Object *object = input.getAsObject();
    if (const int64_t *size = std::get_if<int64_t>(&value)) {
      const llvm::json::Object *sym = object->getObject("as_sym_int");
      std::optional<llvm::StringRef> name = sym ? sym->getString("as_name") : std::nullopt;
      if (!name) {
        popScope();
        return importError("a subgraph's symbolic int input has no name");
      }
      scope().symInts[*name] = *size;
      continue;
    }
    std::optional<llvm::StringRef> name =
        object ? tensorName(object->get("as_tensor")) : std::nullopt;
    if (!name) {
      popScope();
      return importError("a subgraph input is neither a tensor nor a symbolic int");
    }
    scope().tensors[*name] = std::get<Value>(value);
  }
  // Under wrap_with_set_grad_enabled(False, ...) (torch's no_grad) no
  // gradient leaves the subgraph: each float result goes through an
  // nn.stop_gradient, whatever computed it (even a subgraph input).
  bool noGrad = false;
  if (graphPosition == 1) {
    auto enabled = node.boolean("", 0);
    if (!enabled) {
      popScope();
      return enabled.takeError();
    }
    noGrad = !*enabled;
  }
  auto results = importGraph(*graph);
  popScope();
  if (!results)
    return results.takeError();
  if (noGrad)
    for (Value &value : *results)
      if (auto type = dyn_cast<RankedTensorType>(value.getType());
          type && isa<FloatType>(type.getElementType())) {
        auto stopped = create<nn::StopGradientOp>(value);
        if (!stopped)
          return stopped.takeError();
        value = *stopped;
      }
  if (results->size() != node.numResults())
    return importError("the subgraph returns " + llvm::Twine(results->size()) +
                       " values for " + llvm::Twine(node.numResults()) + " results");
  for (auto [index, value] : llvm::enumerate(*results))
    if (llvm::Error err = node.setResult(index, value))
      return err;
  return llvm::Error::success();
}

llvm::Error GraphImporter::convertSymbolicOperator(NodeContext &node, llvm::StringRef op) {
  if (op == "getitem") {
    const llvm::json::Object *list = node.arg("", 0);
    auto index = node.integer("", 1);
    if (!index)
      return index.takeError();
    auto values = node.tensorList("", 0);
    if (!list || !values) {
      if (!values)
        llvm::consumeError(values.takeError());
      return importError("getitem on something other than a list of tensors");
    }
    int64_t i = *index < 0 ? *index + int64_t(values->size()) : *index;
    if (i < 0 || i >= int64_t(values->size()) || !(*values)[i])
      return importError("getitem index " + llvm::Twine(*index) + " out of range");
    return node.setResult(0, *(*values)[i]);
  }
  auto lhs = node.integer("", 0);
  if (!lhs)
    return lhs.takeError();
  if (op == "neg")
    return node.setSymIntResult(0, -*lhs);
  auto rhs = node.integer("", 1);
  if (!rhs)
    return rhs.takeError();
  int64_t a = *lhs, b = *rhs;
  auto floorDiv = [](int64_t x, int64_t y) {
    int64_t q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
  };
  if ((op == "floordiv" || op == "mod") && b == 0)
    return importError("symbolic division by zero");
  if (op == "add") return node.setSymIntResult(0, a + b);
  if (op == "sub") return node.setSymIntResult(0, a - b);
  if (op == "mul") return node.setSymIntResult(0, a * b);
  if (op == "floordiv") return node.setSymIntResult(0, floorDiv(a, b));
  if (op == "mod") return node.setSymIntResult(0, a - floorDiv(a, b) * b);
  if (op == "sym_max") return node.setSymIntResult(0, std::max(a, b));
  if (op == "sym_min") return node.setSymIntResult(0, std::min(a, b));
  if (op == "eq") return node.setSymBoolResult(0, a == b);
  if (op == "ne") return node.setSymBoolResult(0, a != b);
  if (op == "lt") return node.setSymBoolResult(0, a < b);
  if (op == "le") return node.setSymBoolResult(0, a <= b);
  if (op == "gt") return node.setSymBoolResult(0, a > b);
  if (op == "ge") return node.setSymBoolResult(0, a >= b);
  return importError("unsupported operator");
}

llvm::Error GraphImporter::foldConstantResults(NodeContext &node) {
  if (!node.inputsAreConstant())
    return llvm::Error::success();
  // Constant chains collapse node by node, so evaluation never reaches far back.
  GraphScope &scope = this->scope();
  for (const NodeContext::Result &result : node.results_) {
    if (result.kind != NodeContext::Result::Tensor)
      continue;
    auto it = scope.tensors.find(result.name);
    if (it == scope.tensors.end() || it->second.getDefiningOp<nn::ConstantOp>())
      continue;
    FailureOr<DenseElementsAttr> folded = evaluateConstant(it->second);
    if (succeeded(folded))
      it->second = constant(*folded);
  }
  return llvm::Error::success();
}

bool GraphImporter::isComplex(llvm::StringRef name) const {
  const GraphScope &scope = scopes_.back();
  const llvm::json::Value *meta = scope.tensorValues ? scope.tensorValues->get(name) : nullptr;
  if (!meta)
    return false;
  auto dtype = scalarTypeOfMeta(*meta);
  if (!dtype) {
    llvm::consumeError(dtype.takeError());
    return false;
  }
  return isComplexScalarType(*dtype);
}

/// Whether a node reads or makes a complex tensor.
bool GraphImporter::touchesComplex(const llvm::json::Object &object) const {
  auto named = [&](const llvm::json::Value *value) {
    std::optional<llvm::StringRef> name = tensorName(value);
    return name && isComplex(*name);
  };
  if (const llvm::json::Array *outputs = object.getArray("outputs"))
    for (const llvm::json::Value &output : *outputs)
      if (const llvm::json::Object *o = output.getAsObject(); o && named(o->get("as_tensor")))
        return true;
  if (const llvm::json::Array *inputs = object.getArray("inputs"))
    for (const llvm::json::Value &input : *inputs) {
      const llvm::json::Object *i = input.getAsObject();
      const llvm::json::Object *arg = i ? i->getObject("arg") : nullptr;
      if (!arg)
        continue;
      if (named(arg->get("as_tensor")))
        return true;
      if (const llvm::json::Array *list = arg->getArray("as_tensors"))
        for (const llvm::json::Value &t : *list)
          if (const llvm::json::Object *o = t.getAsObject())
            if (std::optional<llvm::StringRef> n = o->getString("name"); n && isComplex(*n))
              return true;
    }
  return false;
}

llvm::Error GraphImporter::convertNode(const llvm::json::Object &object) {
  NodeContext node(*this, object);
  llvm::StringRef target = node.target();
  std::string name = object.getString("name").value_or("").str();
  if (name.empty() && !node.results_.empty())
    name = node.results_.front().name;

  // Ops carry the node's name, so later errors can say which node made them.
  Location outerLoc = loc_;
  loc_ = name.empty() ? fileLoc_ : Location(NameLoc::get(builder_.getStringAttr(name), fileLoc_));
  llvm::Error err = llvm::Error::success();
  if (target == "torch.ops.higher_order.wrap_with_set_grad_enabled") {
    // Gradient mode does not change forward values: inline the subgraph.
    err = convertHigherOrderWrap(node, 1);
  } else if (target.consume_front("_operator.") || target.consume_front("torch.")) {
    if (node.target().starts_with("torch.ops.")) {
      if (touchesComplex(object)) {
        err = convertComplexNode(node);
      } else if (std::optional<std::string> functional = functionalCounterpart(node.target())) {
        err = convertInPlace(node, object, *functional);
      } else {
        OperatorConverter converter = findOperatorConverter(node.target());
        err = converter ? converter(node) : importError("unsupported operator");
        if (!err)
          recordAliases(node, object);
      }
    } else {
      err = convertSymbolicOperator(node, target);
    }
  } else {
    err = importError("unsupported operator");
  }
  if (!err)
    err = foldConstantResults(node);
  loc_ = outerLoc;
  if (!err) {
    for (const NodeContext::Result &result : node.results_)
      if (!result.name.empty())
        scope().stale.erase(result.name);
    return llvm::Error::success();
  }
  std::string message = llvm::toString(std::move(err));
  if (llvm::StringRef(message).starts_with("node '"))
    return importError(message);
  return importError("node '" + name + "' (" + node.target() + "): " + message);
}

//===----------------------------------------------------------------------===//
// In-place operators and aliasing views
//===----------------------------------------------------------------------===//

std::optional<std::string> functionalCounterpart(llvm::StringRef target) {
  llvm::SmallVector<llvm::StringRef> parts;
  target.split(parts, '.');
  // torch.ops.NAMESPACE.NAME[.OVERLOAD]
  if (parts.size() < 4 || parts[0] != "torch" || parts[1] != "ops")
    return std::nullopt;
  llvm::StringRef name = parts[3];
  std::string functional;
  if (name.size() > 5 && name.starts_with("__i") && name.ends_with("__"))
    functional = "__" + name.drop_front(3).str(); // __iand__ -> __and__
  else if (name.size() > 1 && name.ends_with("_") && !name.ends_with("__"))
    functional = name.drop_back().str(); // add_ -> add
  else
    return std::nullopt;
  std::string result;
  for (auto [i, part] : llvm::enumerate(parts)) {
    if (i)
      result += '.';
    result += i == 3 ? llvm::StringRef(functional) : part;
  }
  return result;
}

namespace {

enum class AliasKind {
  None,      // a new tensor
  SameValue, // its input under another name
  View,      // a view of its input's storage
  /// A view when the input is contiguous, else a copy (reshape, contiguous).
  ViewIfContiguous,
  SameValueIfSameType, // to, type_as: the input itself when nothing changes
};

/// How ATen's view operators alias their `self` (native_functions.yaml's
/// `Tensor(a)` results).
AliasKind aliasKindOf(llvm::StringRef target) {
  if (!target.consume_front("torch.ops.aten."))
    return AliasKind::None;
  llvm::StringRef name = target.split('.').first;
  return llvm::StringSwitch<AliasKind>(name)
      .Cases("alias", "detach", "lift_fresh", AliasKind::SameValue)
      .Cases("to", "type_as", AliasKind::SameValueIfSameType)
      .Cases("reshape", "reshape_as", "flatten", "contiguous", AliasKind::ViewIfContiguous)
      .Cases("view", "_unsafe_view", "view_as", "unflatten", "squeeze", "unsqueeze",
             AliasKind::View)
      .Cases("expand", "expand_as", "broadcast_to", "transpose", "swapaxes", "t", "permute",
             AliasKind::View)
      .Cases("slice", "narrow", "select", "split", "split_with_sizes", "chunk", "unbind",
             AliasKind::View)
      .Cases("movedim", "diagonal", "as_strided", "unfold", "_reshape_alias", "numpy_T",
             AliasKind::View)
      .Default(AliasKind::None);
}

/// The largest tensor whose mutation through a view is resolved (the
/// inverse index map is a compile-time constant of this many elements).
constexpr int64_t kMaxMutatedViewBase = int64_t(1) << 26;

} // namespace

bool GraphImporter::isContiguous(llvm::StringRef name) const {
  const GraphScope &scope = scopes_.back();
  const llvm::json::Object *meta =
      scope.tensorValues ? scope.tensorValues->getObject(name) : nullptr;
  const llvm::json::Array *sizes = meta ? meta->getArray("sizes") : nullptr;
  const llvm::json::Array *strides = meta ? meta->getArray("strides") : nullptr;
  if (!sizes || !strides || sizes->size() != strides->size())
    return true; // no layout recorded: the common case
  int64_t expected = 1;
  for (size_t i = sizes->size(); i-- > 0;) {
    auto size = symIntValue((*sizes)[i], symbols_);
    auto stride = symIntValue((*strides)[i], symbols_);
    if (!size || !stride) {
      llvm::consumeError(size.takeError());
      llvm::consumeError(stride.takeError());
      return true;
    }
    if (*size != 1 && *stride != expected)
      return false;
    expected *= *size;
  }
  return true;
}

void GraphImporter::recordAliases(NodeContext &node, const llvm::json::Object &object) {
  AliasKind kind = aliasKindOf(node.target());
  if (kind == AliasKind::None)
    return;
  const llvm::json::Object *selfArgument = node.arg("self", 0);
  std::optional<llvm::StringRef> self =
      selfArgument ? tensorName(selfArgument->get("as_tensor")) : std::nullopt;
  if (!self)
    return;
  GraphScope &scope = this->scope();
  if (kind == AliasKind::ViewIfContiguous) {
    if (!isContiguous(*self))
      return;
    kind = node.target().contains(".contiguous") ? AliasKind::SameValue : AliasKind::View;
  }
  for (const NodeContext::Result &result : node.results_) {
    if (result.kind != NodeContext::Result::Tensor || result.name.empty() ||
        result.name == *self)
      continue;
    if (kind == AliasKind::SameValueIfSameType) {
      auto it = scope.tensors.find(result.name), in = scope.tensors.find(*self);
      if (it == scope.tensors.end() || in == scope.tensors.end() || it->second != in->second)
        continue; // a cast: a new tensor
    }
    scope.aliases[result.name] = {self->str(), kind == AliasKind::View ? &object : nullptr};
  }
}

llvm::Error GraphImporter::convertInPlace(NodeContext &node, const llvm::json::Object &object,
                                          llvm::StringRef functional) {
  OperatorConverter converter = findOperatorConverter(functional);
  if (!converter)
    return importError("in-place operator whose functional form (" +
                       functional.drop_front(strlen("torch.ops.")) +
                       ") Loom does not convert");
  const llvm::json::Object *selfArgument = node.arg("self", 0);
  std::optional<llvm::StringRef> self =
      selfArgument ? tensorName(selfArgument->get("as_tensor")) : std::nullopt;
  if (!self)
    return importError("in-place operator whose first argument is not a tensor");
  if (node.results_.size() != 1 || node.results_[0].kind != NodeContext::Result::Tensor)
    return importError("in-place operator without exactly one tensor result");
  // The functional converter computes the new value of `self`; the node's
  // result type (tensor_values) is self's, so dtypes stay as in-place ops keep them.
  std::string inPlaceTarget = node.target_;
  node.target_ = functional.str();
  llvm::Error err = converter(node);
  node.target_ = inPlaceTarget;
  if (err)
    return err;
  std::string resultName = node.results_[0].name;
  Value updated = scope().tensors.lookup(resultName);
  auto selfType = typeOf(*self);
  if (!selfType)
    return selfType.takeError();
  if (!updated || updated.getType() != *selfType)
    return importError("the new value of '" + *self + "' has type " +
                       (updated ? typeString(updated.getType()) : std::string("none")) +
                       ", not its type " + typeString(*selfType));
  std::string selfName = self->str();
  if (llvm::Error err = mutate(selfName, updated))
    return err;
  // The result is `self` under another name: later mutations of either reach both.
  if (resultName != selfName)
    scope().aliases[resultName] = {selfName, nullptr};
  (void)object;
  return llvm::Error::success();
}

llvm::Error GraphImporter::mutate(llvm::StringRef name, Value value) {
  // The chain of aliases from `name` up to the tensor that owns the storage.
  llvm::SmallVector<std::string> chain{name.str()};
  bool throughView = false;
  for (auto it = scope().aliases.find(chain.back()); it != scope().aliases.end();
       it = scope().aliases.find(chain.back())) {
    throughView |= it->second.node != nullptr;
    chain.push_back(it->second.parent);
    if (chain.size() > scope().aliases.size() + 1)
      return importError("the aliases of '" + name + "' form a cycle");
  }
  std::string root = chain.back();
  Value rootValue = value;
  if (throughView) {
    auto merged = scatterIntoBase(chain, value);
    if (!merged)
      return merged.takeError();
    rootValue = *merged;
  }

  // Every other name of the same storage is recomputed when next read.
  GraphScope &scope = this->scope();
  llvm::StringMap<std::string> roots;
  std::function<llvm::StringRef(llvm::StringRef)> rootOf = [&](llvm::StringRef n) -> llvm::StringRef {
    llvm::SmallVector<llvm::StringRef> path;
    llvm::StringRef current = n;
    while (true) {
      if (auto known = roots.find(current); known != roots.end()) {
        current = known->second;
        break;
      }
      auto it = scope.aliases.find(current);
      if (it == scope.aliases.end() || path.size() > scope.aliases.size())
        break;
      path.push_back(current);
      current = it->second.parent;
    }
    for (llvm::StringRef p : path)
      roots[p] = current.str();
    return roots.count(n) ? llvm::StringRef(roots[n]) : n;
  };
  for (const auto &entry : scope.aliases)
    if (entry.first() != name && rootOf(entry.first()) == root)
      scope.stale.insert(entry.first());
  scope.tensors[root] = rootValue;
  scope.stale.erase(root);
  scope.tensors[name] = value;
  scope.stale.erase(name);
  return llvm::Error::success();
}

llvm::Expected<Value> GraphImporter::scatterIntoBase(llvm::ArrayRef<std::string> chain,
                                                     Value value) {
  llvm::StringRef name = chain.front(), root = chain.back();
  auto rootValue = valueOf(root);
  if (!rootValue)
    return rootValue.takeError();
  auto rootType = cast<RankedTensorType>(rootValue->getType());
  int64_t n = rootType.getNumElements();
  if (n > kMaxMutatedViewBase)
    return importError("mutates a view of '" + root + "' (" + typeString(rootType) +
                       "), too large to resolve the view at compile time");
  // Replay the chain of views on the base's flat element indices: the
  // view's elements then say which base element each one is.
  auto indexType = RankedTensorType::get(rootType.getShape(), builder_.getI64Type());
  llvm::SmallVector<int64_t> iota(n);
  std::iota(iota.begin(), iota.end(), 0);
  GraphScope saved = scope();
  scope().stale.clear();
  scope().tensors[root] = constant(DenseElementsAttr::get(indexType, llvm::ArrayRef(iota)));
  replaying_ = true;
  llvm::Error err = llvm::Error::success();
  for (size_t i = chain.size() - 1; i-- > 0 && !err;) {
    const GraphScope::Alias alias = scope().aliases.lookup(chain[i]);
    if (!alias.node)
      scope().tensors[chain[i]] = scope().tensors.lookup(alias.parent);
    else
      err = convertNode(*alias.node);
  }
  replaying_ = false;
  Value indexView = err ? Value() : scope().tensors.lookup(name);
  scope() = std::move(saved);
  if (err)
    return std::move(err);
  std::optional<DenseElementsAttr> indices = indexView ? constantValue(indexView) : std::nullopt;
  if (!indices)
    return importError("mutates '" + name + "', a view of '" + root +
                       "' that Loom cannot map back onto it");

  // A block of the base (a slice assignment such as `t[..., a:b] = v`, or
  // `t[:, 1:, :4] = v` cut along several dims): along each cut dim in turn,
  // the base's parts around the block joined with the block placed along
  // the later dims. Slices and concats keep every uncut dim whole, so a new
  // batch re-infers them (a flat gather's table would carry the batch).
  // The view may drop dims of one element (`t[..., i, :i] = v`, a select
  // then a slice: the gated delta rule's row by row updates): the block's
  // extent in the base is from its first element to its last.
  auto viewType = cast<RankedTensorType>(value.getType());
  if (viewType.getNumElements() > 0 && rootType.getRank() > 0) {
    llvm::ArrayRef<int64_t> shape = rootType.getShape();
    auto coordinates = [&](int64_t flat) {
      llvm::SmallVector<int64_t> at(shape.size(), 0);
      for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
        at[d] = shape[d] ? flat % shape[d] : 0;
        flat = shape[d] ? flat / shape[d] : 0;
      }
      return at;
    };
    auto values = indices->getValues<llvm::APInt>();
    llvm::SmallVector<int64_t> starts = coordinates((*values.begin()).getSExtValue());
    llvm::SmallVector<int64_t> lasts =
        coordinates((*(values.begin() + (indices->getNumElements() - 1))).getSExtValue());
    llvm::SmallVector<int64_t> sizes(shape.size());
    llvm::SmallVector<int64_t> cut;
    bool block = true;
    int64_t blockElements = 1;
    for (size_t d = 0; d < shape.size() && block; ++d) {
      sizes[d] = lasts[d] - starts[d] + 1;
      block = sizes[d] > 0 && starts[d] + sizes[d] <= shape[d];
      blockElements *= std::max<int64_t>(sizes[d], 0);
      if (sizes[d] != shape[d])
        cut.push_back(int64_t(d));
    }
    block = block && blockElements == viewType.getNumElements();
    // Every view element is the base element of its position in the block.
    llvm::SmallVector<int64_t> pos(shape.size(), 0);
    for (const llvm::APInt &index : indices->getValues<llvm::APInt>()) {
      if (!block)
        break;
      int64_t flat = 0;
      for (size_t d = 0; d < shape.size(); ++d)
        flat = flat * shape[d] + starts[d] + pos[d];
      block = index.getSExtValue() == flat;
      for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
        if (++pos[d] < sizes[d])
          break;
        pos[d] = 0;
      }
    }
    if (block) {
      auto reshaped = reshapeTo(value, sizes);
      if (!reshaped)
        return reshaped.takeError();
      auto blockValues = castTo(*reshaped, rootType.getElementType());
      if (!blockValues)
        return blockValues.takeError();
      // Nested along each cut dim: the block's rows of `within` along dim
      // cut[i] replaced by the block placed along the later cuts.
      std::function<llvm::Expected<Value>(Value, size_t)> place =
          [&](Value within, size_t i) -> llvm::Expected<Value> {
        if (i == cut.size())
          return *blockValues;
        int64_t d = cut[i];
        auto middle = rowsAlong(within, d, starts[d], starts[d] + sizes[d]);
        if (!middle)
          return middle.takeError();
        auto inner = place(*middle, i + 1);
        if (!inner)
          return inner.takeError();
        return placeAlong(within, *inner, d, starts[d], starts[d] + sizes[d]);
      };
      return place(*rootValue, 0);
    }
  }

  // Invert it: base element j takes the view's element inverse[j].
  llvm::SmallVector<int64_t> inverse(n, 0);
  llvm::SmallVector<bool> covered(n, false);
  int64_t k = 0, count = 0;
  for (const llvm::APInt &index : indices->getValues<llvm::APInt>()) {
    int64_t j = index.getSExtValue();
    if (j < 0 || j >= n)
      return importError("mutates '" + name + "', a view of '" + root +
                         "' that Loom cannot map back onto it");
    if (covered[j])
      return importError("mutates '" + name + "', a view of '" + root +
                         "' in which one element appears more than once (an expanded view)");
    covered[j] = true;
    inverse[j] = k++;
    ++count;
  }
  auto flatView = reshapeTo(value, {viewType.getNumElements()});
  if (!flatView)
    return flatView.takeError();
  auto cast = castTo(*flatView, rootType.getElementType());
  if (!cast)
    return cast.takeError();
  auto flatType = RankedTensorType::get({n}, rootType.getElementType());
  auto inverseType = RankedTensorType::get({n}, builder_.getI64Type());
  auto gathered = create<nn::GatherOp>(flatType, *cast,
                                       constant(DenseElementsAttr::get(inverseType,
                                                                       llvm::ArrayRef(inverse))),
                                       builder_.getI64IntegerAttr(0));
  if (!gathered)
    return gathered.takeError();
  Value merged = *gathered;
  if (count != n) {
    auto flatBase = reshapeTo(*rootValue, {n});
    if (!flatBase)
      return flatBase.takeError();
    auto maskType = RankedTensorType::get({n}, builder_.getI1Type());
    auto where = create<nn::WhereOp>(
        flatType, constant(DenseElementsAttr::get(maskType, llvm::ArrayRef(covered))), merged,
        *flatBase);
    if (!where)
      return where.takeError();
    merged = *where;
  }
  return reshapeTo(merged, rootType.getShape());
}

llvm::Expected<Value> GraphImporter::valueOf(llvm::StringRef name) {
  if (llvm::Error err = refresh(name))
    return std::move(err);
  auto it = scope().tensors.find(name);
  if (it == scope().tensors.end())
    return importError("uses '" + name + "', which no earlier node defines");
  return it->second;
}

llvm::Error GraphImporter::refresh(llvm::StringRef name) {
  if (!scope().stale.contains(name))
    return llvm::Error::success();
  // Stale ancestors first, outermost first (iteratively: chains can be long).
  llvm::SmallVector<std::string> path{name.str()};
  while (true) {
    auto it = scope().aliases.find(path.back());
    if (it == scope().aliases.end() || !scope().stale.contains(it->second.parent))
      break;
    path.push_back(it->second.parent);
    if (path.size() > scope().aliases.size() + 1)
      return importError("the aliases of '" + name + "' form a cycle");
  }
  for (const std::string &current : llvm::reverse(path)) {
    if (!scope().stale.contains(current))
      continue; // recomputed with a sibling
    const GraphScope::Alias alias = scope().aliases.lookup(current);
    if (alias.node) {
      if (llvm::Error err = convertNode(*alias.node))
        return err;
    } else {
      scope().tensors[current] = scope().tensors.lookup(alias.parent);
    }
    scope().stale.erase(current);
  }
  return llvm::Error::success();
}

} // namespace loom::torch_export
