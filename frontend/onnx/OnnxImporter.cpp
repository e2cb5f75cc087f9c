// The ONNX importer's driver: parses the protobuf, turns the graph's inputs,
// initializers and outputs into `func.func @main`, and hands each node to the
// import function registered for its operator (Onnx*Ops.cpp).

#include "frontend/onnx/OnnxImporter.h"
#include "dialects/loom/LoomDialect.h"

#include "frontend/common/ConstantEvaluator.h"
#include "frontend/onnx/OnnxNodeImporter.h"
#include "runtime/support/UserFile.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <climits>
#include <cstring>

#include <google/protobuf/unknown_field_set.h>

using namespace mlir;

namespace loom {
namespace {

/// A node's metadata_props (key, value). Field 9 of NodeProto is newer than
/// some installed onnx.proto files; those keep it among the unknown fields.
template <typename Node>
auto declaredMetadata(const Node &node, int)
    -> decltype(node.metadata_props(), std::vector<std::pair<std::string, std::string>>()) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto &entry : node.metadata_props())
    out.push_back({entry.key(), entry.value()});
  return out;
}
template <typename Node>
std::vector<std::pair<std::string, std::string>> declaredMetadata(const Node &, long) {
  return {};
}
std::vector<std::pair<std::string, std::string>> nodeMetadata(const onnx::NodeProto &node) {
  std::vector<std::pair<std::string, std::string>> out = declaredMetadata(node, 0);
  const google::protobuf::UnknownFieldSet &unknown = node.GetReflection()->GetUnknownFields(node);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField &field = unknown.field(i);
    onnx::StringStringEntryProto entry;
    if (field.number() == 9 && field.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED &&
        entry.ParseFromString(field.length_delimited()))
      out.push_back({entry.key(), entry.value()});
  }
  return out;
}

/// The path of the model module a node was exported from: the innermost
/// module of torch.onnx's `pkg.torch.onnx.name_scopes` metadata (`['',
/// 'model', 'model.layers.0', 'model.layers.0.mlp', 'mul_2']`, the node's own
/// name last), else the scope of a TorchScript-style node name
/// (`/model/layers.0/mlp/MatMul` -> `model.layers.0.mlp`); empty for the
/// root module, none when the node says neither.
std::optional<std::string> moduleScope(const onnx::NodeProto &node) {
  for (const auto &[key, value] : nodeMetadata(node)) {
    if (key != "pkg.torch.onnx.name_scopes")
      continue;
    // A Python list of quoted strings.
    llvm::SmallVector<std::string> scopes;
    StringRef rest = value;
    while (true) {
      size_t open = rest.find_first_of("'\"");
      if (open == StringRef::npos)
        break;
      size_t close = rest.find(rest[open], open + 1);
      if (close == StringRef::npos)
        break;
      scopes.push_back(rest.slice(open + 1, close).str());
      rest = rest.drop_front(close + 1);
    }
    if (scopes.size() < 2)
      return std::nullopt;
    return scopes[scopes.size() - 2];
  }
  StringRef name = node.name();
  if (!name.consume_front("/"))
    return std::nullopt;
  llvm::SmallVector<StringRef> parts;
  name.split(parts, '/');
  parts.pop_back(); // the node itself
  return llvm::join(parts, ".");
}

using namespace onnx_import;

// From 13 (Softmax over one axis, Squeeze/Unsqueeze/ReduceSum axes as
// inputs: the TorchScript exporter's and Optimum's usual 14) to 23
// (RMSNormalization, Attention) and 24; an operator whose meaning changed in between is
// imported by its node's opset.
constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 24;
// Larger tensors than this (elements) are certainly a corrupt header.
constexpr int64_t kMaxTensorElements = int64_t(1) << 40;

bool isDefaultDomain(const std::string &domain) {
  return domain.empty() || domain == "ai.onnx";
}

bool isBatchLikeName(StringRef name) {
  std::string lower = name.lower();
  StringRef n(lower);
  return n == "n" || n == "b" || n == "bs" || n.starts_with("batch");
}

bool isSequenceLikeName(StringRef name) {
  std::string lower = name.lower();
  StringRef n(lower);
  return n == "s" || n == "t" || n == "l" || n.starts_with("seq") ||
         n.starts_with("sequence") || n == "length" || n == "len" ||
         n == "num_tokens" || n == "tokens";
}

class GraphImporter {
public:
  GraphImporter(MLIRContext *context, StringRef path, const ImportOptions &options)
      : context(context), path(path.str()), options(options),
        fileLoc(FileLineColLoc::get(context, path, 0, 0)) {
    addElementwiseOps(opTable);
    addShapeOps(opTable);
    addMathOps(opTable);
    addRoutingOps(opTable);
    addConstantOps(opTable);
  }

  OwningOpRef<ModuleOp> run();

private:
  LogicalResult error(const Twine &message) {
    emitError(fileLoc) << message;
    return failure();
  }
  LogicalResult readModel(onnx::ModelProto &model);
  LogicalResult readOpsets(const onnx::ModelProto &model);
  FailureOr<RankedTensorType> inputType(const onnx::ValueInfoProto &info);
  FailureOr<DenseElementsAttr> tensorValue(const onnx::TensorProto &tensor,
                                           StringRef what);
  FailureOr<ArrayRef<char>> externalBytes(const onnx::TensorProto &tensor,
                                          StringRef what, int64_t byteCount);
  LogicalResult importInitializer(OpBuilder &b, const onnx::TensorProto &tensor);
  void retieFoldedTransposes(OpBuilder &b);
  void recordModulePaths(const onnx::NodeProto &node);
  LogicalResult importNode(OpBuilder &b, const onnx::NodeProto &node);
  std::string nodeLabel(const onnx::NodeProto &node, int64_t opset) const;

  MLIRContext *context;
  std::string path;
  const ImportOptions &options;
  Location fileLoc;
  int64_t opset = 0;
  std::map<std::string, int64_t> otherDomainOpsets;
  OpTable opTable;
  llvm::StringMap<Value> values;
  llvm::StringMap<std::unique_ptr<llvm::MemoryBuffer>> externalFiles;
};

LogicalResult GraphImporter::readModel(onnx::ModelProto &model) {
  auto file = loom::openRegularFile(path);
  if (!file)
    return error("cannot read " + llvm::toString(file.takeError()));
  StringRef bytes = (*file)->getBuffer();
  if (bytes.empty())
    return error("'" + path + "' is not a valid ONNX model (the file is empty)");
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    return error("'" + path + "' is larger than 2 GiB: store the weights as "
                 "external data");
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return error("'" + path + "' is not a valid ONNX model (protobuf parse failed)");
  if (!model.has_graph())
    return error("'" + path + "' is not a valid ONNX model (it has no graph)");
  return success();
}

LogicalResult GraphImporter::readOpsets(const onnx::ModelProto &model) {
  bool found = false;
  for (const onnx::OperatorSetIdProto &set : model.opset_import()) {
    if (isDefaultDomain(set.domain())) {
      opset = set.version();
      found = true;
    } else {
      otherDomainOpsets[set.domain()] = set.version();
    }
  }
  if (!found)
    return error("'" + path + "' imports no opset of the default ONNX domain");
  if (opset < kMinOpset || opset > kMaxOpset)
    return error("'" + path + "' uses ONNX opset " + Twine(opset) +
                 ": Loom imports opsets " + Twine(kMinOpset) + " to " +
                 Twine(kMaxOpset) + " (convert it with onnx.version_converter)");
  return success();
}

FailureOr<RankedTensorType> GraphImporter::inputType(const onnx::ValueInfoProto &info) {
  const std::string &name = info.name();
  if (!info.has_type() || !info.type().has_tensor_type())
    return error("input '" + name + "' is not a tensor");
  const onnx::TypeProto::Tensor &tensor = info.type().tensor_type();
  Type elementType = elementTypeOf(context, tensor.elem_type());
  if (!elementType)
    return error("input '" + name + "' has unsupported element type " +
                 dataTypeName(tensor.elem_type()));
  if (!tensor.has_shape())
    return error("input '" + name + "' has no shape: Loom compiles static shapes");
  SmallVector<int64_t> shape;
  for (const auto &[i, dim] : llvm::enumerate(tensor.shape().dim())) {
    if (dim.has_dim_value()) {
      if (dim.dim_value() < 0)
        return error("input '" + name + "' has negative dimension " +
                     Twine(dim.dim_value()));
      shape.push_back(dim.dim_value());
      continue;
    }
    if (!dim.has_dim_param() || dim.dim_param().empty())
      return error("input '" + name + "' dimension " + Twine(i) +
                   " has neither a size nor a name: Loom compiles static shapes");
    const std::string &param = dim.dim_param();
    auto byName = options.dims.find(param);
    if (byName != options.dims.end()) {
      shape.push_back(byName->second);
      if (options.usage)
        options.usage->dims.insert(param);
    } else if (options.batch && isBatchLikeName(param)) {
      shape.push_back(*options.batch);
    } else if (options.seq && isSequenceLikeName(param)) {
      shape.push_back(*options.seq);
      if (options.usage)
        options.usage->seq = true;
    } else {
      std::string hint = "--dim " + param + "=VALUE";
      if (isBatchLikeName(param))
        hint += " or --batch";
      else if (isSequenceLikeName(param))
        hint += " or --seq";
      return error("input '" + name + "' has symbolic dimension '" + param +
                   "': fix it with " + hint);
    }
  }
  return RankedTensorType::get(shape, elementType);
}

FailureOr<ArrayRef<char>> GraphImporter::externalBytes(const onnx::TensorProto &tensor,
                                                       StringRef what,
                                                       int64_t byteCount) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const onnx::StringStringEntryProto &entry : tensor.external_data()) {
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset" || entry.key() == "length") {
      long long parsed = 0;
      if (StringRef(entry.value()).getAsInteger(10, parsed) || parsed < 0)
        return error(what + ": external data " + entry.key() + " '" +
                     entry.value() + "' is not a non-negative integer");
      (entry.key() == "offset" ? offset : length) = parsed;
    }
  }
  if (location.empty())
    return error(what + ": external data has no location");
  if (llvm::sys::path::is_absolute(location))
    return error(what + ": external data location '" + location +
                 "' must be relative to the model's directory");
  SmallString<256> filePath(llvm::sys::path::parent_path(path));
  llvm::sys::path::append(filePath, location);
  auto &file = externalFiles[filePath];
  if (!file) {
    // The data must lie inside the model's directory once `..` and symlinks
    // are resolved: a model must not read /etc/passwd or ../../secrets.
    SmallString<256> modelDir(llvm::sys::path::parent_path(path));
    if (modelDir.empty())
      modelDir = ".";
    SmallString<256> realDir, realFile;
    if (std::error_code ec = llvm::sys::fs::real_path(modelDir, realDir))
      return error(what + ": cannot resolve the model's directory '" + modelDir +
                   "': " + ec.message());
    if (std::error_code ec = llvm::sys::fs::real_path(filePath, realFile))
      return error(what + ": cannot read external data file '" + filePath +
                   "': " + ec.message());
    std::string inside = realDir.str().str();
    if (!StringRef(inside).ends_with("/"))
      inside += "/";
    if (!StringRef(realFile).starts_with(inside))
      return error(what + ": external data location '" + location +
                   "' resolves to '" + realFile +
                   "', outside the model's directory '" + realDir + "'");
    auto opened = loom::openRegularFile(realFile.str().str());
    if (!opened)
      return error(what + ": cannot read external data file " +
                   llvm::toString(opened.takeError()));
    file = std::move(*opened);
  }
  int64_t fileSize = file->getBufferSize();
  if (length < 0)
    length = byteCount;
  if (length != byteCount)
    return error(what + ": external data length " + Twine(length) +
                 " does not match the tensor's " + Twine(byteCount) + " bytes");
  if (offset > fileSize || length > fileSize - offset)
    return error(what + ": external data [" + Twine(offset) + ", " +
                 Twine(offset + length) + ") lies outside '" + filePath + "' (" +
                 Twine(fileSize) + " bytes)");
  return ArrayRef<char>(file->getBufferStart() + offset, length);
}

FailureOr<DenseElementsAttr> GraphImporter::tensorValue(const onnx::TensorProto &tensor,
                                                        StringRef what) {
  Type elementType = elementTypeOf(context, tensor.data_type());
  if (!elementType)
    return error(what + " has unsupported data type " + dataTypeName(tensor.data_type()));
  SmallVector<int64_t> shape;
  int64_t count = 1;
  for (int64_t d : tensor.dims()) {
    if (d < 0 || (d > 0 && count > kMaxTensorElements / d))
      return error(what + " has an invalid shape");
    shape.push_back(d);
    count *= d;
  }
  auto type = RankedTensorType::get(shape, elementType);
  int64_t elementBytes = elementType.isInteger(1)
                             ? 1
                             : (elementType.getIntOrFloatBitWidth() + 7) / 8;
  int64_t byteCount = count * elementBytes;

  auto fromBytes = [&](ArrayRef<char> bytes) -> FailureOr<DenseElementsAttr> {
    if (static_cast<int64_t>(bytes.size()) != byteCount)
      return error(what + " holds " + Twine(bytes.size()) + " bytes, its shape needs " +
                   Twine(byteCount));
    // MLIR packs i1 as bits; ONNX stores one byte per bool.
    if (elementType.isInteger(1)) {
      SmallVector<bool> bits(bytes.begin(), bytes.end());
      return DenseElementsAttr::get(type, ArrayRef<bool>(bits));
    }
    return DenseElementsAttr::getFromRawBuffer(type, bytes);
  };

  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
    FailureOr<ArrayRef<char>> bytes = externalBytes(tensor, what, byteCount);
    if (failed(bytes))
      return failure();
    return fromBytes(*bytes);
  }
  if (tensor.has_raw_data())
    return fromBytes(ArrayRef<char>(tensor.raw_data().data(), tensor.raw_data().size()));

  auto checkCount = [&](int64_t n) -> LogicalResult {
    if (n != count)
      return error(what + " holds " + Twine(n) + " values, its shape needs " +
                   Twine(count));
    return success();
  };
  switch (tensor.data_type()) {
  case onnx::TensorProto::FLOAT: {
    if (failed(checkCount(tensor.float_data_size())))
      return failure();
    return DenseElementsAttr::get(
        type, ArrayRef<float>(tensor.float_data().data(), tensor.float_data_size()));
  }
  case onnx::TensorProto::DOUBLE: {
    if (failed(checkCount(tensor.double_data_size())))
      return failure();
    return DenseElementsAttr::get(
        type, ArrayRef<double>(tensor.double_data().data(), tensor.double_data_size()));
  }
  case onnx::TensorProto::INT64: {
    if (failed(checkCount(tensor.int64_data_size())))
      return failure();
    return DenseElementsAttr::get(
        type, ArrayRef<int64_t>(tensor.int64_data().data(), tensor.int64_data_size()));
  }
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::BOOL: {
    if (failed(checkCount(tensor.int32_data_size())))
      return failure();
    std::vector<int64_t> ints(tensor.int32_data().begin(), tensor.int32_data().end());
    return elementsFromInts(type, ints);
  }
  default: {
    // FLOAT16, BFLOAT16 and FLOAT8 store their bit patterns in int32_data.
    if (failed(checkCount(tensor.int32_data_size())))
      return failure();
    SmallVector<APInt> bits;
    unsigned width = elementType.getIntOrFloatBitWidth();
    for (int32_t v : tensor.int32_data())
      bits.emplace_back(width, static_cast<uint64_t>(v) & ((uint64_t(1) << width) - 1));
    std::vector<char> raw;
    for (const APInt &v : bits)
      for (unsigned byte = 0; byte < width / 8; ++byte)
        raw.push_back(static_cast<char>(v.getZExtValue() >> (8 * byte)));
    return fromBytes(raw);
  }
  }
}

/// A weight belongs to the innermost module that holds every node reading
/// it (its name may say nothing: a folded transpose is `val_358`; a rotary
/// table every layer reads belongs to the model, not to its first layer).
void GraphImporter::recordModulePaths(const onnx::NodeProto &node) {
  std::optional<std::string> scope = moduleScope(node);
  if (!scope)
    return;
  for (const std::string &input : node.input()) {
    auto it = values.find(input);
    auto param = it == values.end() ? nn::ParameterOp() : it->second.getDefiningOp<nn::ParameterOp>();
    if (!param)
      continue;
    std::optional<StringRef> known = param.getModulePath();
    if (!known) {
      param.setModulePath(*scope);
      continue;
    }
    // The longest common prefix of whole path components.
    llvm::SmallVector<StringRef> a, b, common;
    known->split(a, '.');
    StringRef(*scope).split(b, '.');
    for (size_t i = 0; i < std::min(a.size(), b.size()) && a[i] == b[i]; ++i)
      common.push_back(a[i]);
    std::string path = llvm::join(common, ".");
    if (path != *known)
      param.setModulePath(path);
  }
}

/// Whether `name` is an exporter's own (`onnx::MatMul_512`, `val_93`)
/// rather than a module's parameter (`model.embed_tokens.weight`).
static bool isFoldedName(StringRef name) {
  return name.contains("::") || !name.contains('.');
}

/// Whether `b` [n, m] is `a` [m, n] transposed, element for element.
static bool isTransposeOf(DenseElementsAttr a, DenseElementsAttr b) {
  auto aType = cast<RankedTensorType>(a.getType()), bType = cast<RankedTensorType>(b.getType());
  if (aType.getElementType() != bType.getElementType() || a.isSplat() || b.isSplat())
    return false;
  int64_t m = aType.getDimSize(0), n = aType.getDimSize(1);
  if (bType.getDimSize(0) != n || bType.getDimSize(1) != m)
    return false;
  unsigned bytes = aType.getElementTypeBitWidth() / 8;
  ArrayRef<char> aRaw = a.getRawData(), bRaw = b.getRawData();
  if (bytes == 0 || aRaw.size() != size_t(m * n * bytes) || bRaw.size() != aRaw.size())
    return false;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      if (std::memcmp(aRaw.data() + (i * n + j) * bytes, bRaw.data() + (j * m + i) * bytes,
                      bytes) != 0)
        return false;
  return true;
}

/// A tied weight read transposed (a tied LM head, `embed.weight.t()`): the
/// exporters fold the transpose into an initializer of their own
/// (`onnx::MatMul_600`), a copy that would train apart from the weight. An
/// initializer of such a name that is another, module-named one transposed
/// becomes that transpose again, so the two stay one weight.
void GraphImporter::retieFoldedTransposes(OpBuilder &b) {
  SmallVector<nn::ParameterOp> named, folded;
  for (auto &entry : values) {
    auto param = entry.second.getDefiningOp<nn::ParameterOp>();
    auto type = param ? dyn_cast<RankedTensorType>(param.getType()) : nullptr;
    if (!type || type.getRank() != 2 || !param.getValue() || entry.getKey() != param.getName())
      continue;
    (isFoldedName(param.getName()) ? folded : named).push_back(param);
  }
  llvm::sort(named, [](nn::ParameterOp x, nn::ParameterOp y) { return x.getName() < y.getName(); });
  for (nn::ParameterOp copy : folded) {
    auto copyValue = cast<DenseElementsAttr>(*copy.getValue());
    for (nn::ParameterOp weight : named) {
      if (!isTransposeOf(cast<DenseElementsAttr>(*weight.getValue()), copyValue))
        continue;
      // After every initializer, before any node reads one.
      Value tied = b.create<nn::TransposeOp>(copy.getLoc(), copy.getType(), weight.getResult(),
                                             b.getDenseI64ArrayAttr({1, 0}));
      values[copy.getName()] = tied;
      copy.erase();
      break;
    }
  }
}

LogicalResult GraphImporter::importInitializer(OpBuilder &b,
                                               const onnx::TensorProto &tensor) {
  std::string what = "initializer '" + tensor.name() + "'";
  if (tensor.name().empty())
    return error("an initializer has no name");
  FailureOr<DenseElementsAttr> value = tensorValue(tensor, what);
  if (failed(value))
    return failure();
  Location loc = NameLoc::get(b.getStringAttr(tensor.name()), fileLoc);
  // Float tensors are weights (named parameters); integers and scalars are
  // shape data and constants the compiler folds.
  bool isWeight = isa<FloatType>(value->getElementType()) && value->getNumElements() >= 2;
  Value result;
  if (isWeight)
    result = b.create<nn::ParameterOp>(
        loc, value->getType(), b.getStringAttr(tensor.name()), /*frozen=*/UnitAttr(),
        nn::InitKindAttr::get(context, nn::InitKind::zeros), b.getF64FloatAttr(0.0),
        *value);
  else
    result = b.create<nn::ConstantOp>(loc, value->getType(), *value);
  values[tensor.name()] = result;
  return success();
}

std::string GraphImporter::nodeLabel(const onnx::NodeProto &node, int64_t nodeOpset) const {
  std::string name = node.name();
  if (name.empty() && node.output_size() > 0)
    name = node.output(0);
  std::string opType = node.op_type();
  if (!isDefaultDomain(node.domain()))
    opType = node.domain() + "." + opType;
  return "node '" + name + "' (" + opType + ", opset " + std::to_string(nodeOpset) + ")";
}

LogicalResult GraphImporter::importNode(OpBuilder &b, const onnx::NodeProto &node) {
  if (!isDefaultDomain(node.domain())) {
    auto it = otherDomainOpsets.find(node.domain());
    int64_t domainOpset = it == otherDomainOpsets.end() ? 0 : it->second;
    return error(nodeLabel(node, domainOpset) + ": unsupported operator domain '" +
                 node.domain() + "' (Loom imports the default ONNX domain)");
  }
  std::string label = nodeLabel(node, opset);
  auto fn = opTable.find(node.op_type());
  if (fn == opTable.end())
    return error(label + ": unsupported operator");

  Location loc = NameLoc::get(b.getStringAttr(node.name().empty() && node.output_size()
                                                  ? node.output(0)
                                                  : node.name()),
                              fileLoc);
  Block *block = b.getInsertionBlock();
  Operation *lastBefore = block->empty() ? nullptr : &block->back();
  auto readTensor = [this](const onnx::TensorProto &tensor, StringRef what) {
    return tensorValue(tensor, what);
  };
  NodeImporter importer(b, loc, node, opset, values, readTensor);

  // Diagnostics raised while building (type inference, verifiers) become the
  // node's one message.
  std::string captured;
  LogicalResult result = success();
  {
    ScopedDiagnosticHandler capture(context, [&](Diagnostic &diag) {
      if (captured.empty() && diag.getSeverity() == DiagnosticSeverity::Error)
        captured = diag.str();
      return success();
    });
    result = fn->second(importer);
    if (succeeded(result)) {
      Operation *first = lastBefore ? lastBefore->getNextNode()
                                    : (block->empty() ? nullptr : &block->front());
      for (Operation *op = first; op; op = op->getNextNode())
        if (failed(verify(op))) {
          result = failure();
          break;
        }
    }
    for (int i = 0; succeeded(result) && i < node.output_size(); ++i)
      if (!node.output(i).empty() && !values.count(node.output(i)))
        result = importer.fail("output " + Twine(i) + " ('" + node.output(i) +
                               "') is not supported");
  }
  if (failed(result)) {
    std::string message = !captured.empty() ? captured : importer.error;
    if (message.empty())
      message = "cannot be imported";
    return error(label + ": " + message);
  }

  // Outputs computed from constants alone become constants now, so that shape
  // arithmetic downstream (Reshape shapes, Slice bounds) sees values.
  bool allConstant = true;
  for (int i = 0; i < node.input_size(); ++i)
    if (!node.input(i).empty() && !importer.isConstantInput(i))
      allConstant = false;
  if (!allConstant)
    return success();
  for (const std::string &output : node.output()) {
    if (output.empty())
      continue;
    Value value = values[output];
    if (value.getDefiningOp<nn::ConstantOp>())
      continue;
    FailureOr<DenseElementsAttr> folded = evaluateConstant(value);
    if (succeeded(folded))
      values[output] = b.create<nn::ConstantOp>(loc, folded->getType(), *folded);
  }
  return success();
}

OwningOpRef<ModuleOp> GraphImporter::run() {
  onnx::ModelProto model;
  if (failed(readModel(model)) || failed(readOpsets(model)))
    return nullptr;
  const onnx::GraphProto &graph = model.graph();

  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  OpBuilder b(context);
  b.setInsertionPointToEnd(module->getBody());

  llvm::StringSet<> initializerNames;
  for (const onnx::TensorProto &tensor : graph.initializer())
    initializerNames.insert(tensor.name());
  if (graph.sparse_initializer_size() > 0)
    return (void)error("'" + path + "' has sparse initializers, which Loom does not import"), nullptr;

  SmallVector<Type> argTypes;
  SmallVector<std::string> argNames;
  for (const onnx::ValueInfoProto &info : graph.input()) {
    if (initializerNames.contains(info.name()))
      continue;
    FailureOr<RankedTensorType> type = inputType(info);
    if (failed(type))
      return nullptr;
    argTypes.push_back(*type);
    argNames.push_back(info.name());
  }

  auto func = b.create<func::FuncOp>(fileLoc, "main", b.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  for (auto [i, name] : llvm::enumerate(argNames)) {
    loom::setArgName(func, i, name);
    values[name] = entry->getArgument(i);
  }
  b.setInsertionPointToEnd(entry);

  for (const onnx::TensorProto &tensor : graph.initializer())
    if (failed(importInitializer(b, tensor)))
      return nullptr;
  retieFoldedTransposes(b);
  for (const onnx::NodeProto &node : graph.node()) {
    if (failed(importNode(b, node)))
      return nullptr;
    recordModulePaths(node);
  }

  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (const onnx::ValueInfoProto &info : graph.output()) {
    auto it = values.find(info.name());
    if (it == values.end())
      return (void)error("graph output '" + info.name() + "' is not computed by the graph"), nullptr;
    results.push_back(it->second);
    resultTypes.push_back(it->second.getType());
  }
  if (results.empty())
    return (void)error("'" + path + "' has no graph outputs"), nullptr;
  b.create<func::ReturnOp>(fileLoc, results);
  func.setFunctionType(b.getFunctionType(argTypes, resultTypes));
  for (auto [i, info] : llvm::enumerate(graph.output()))
    loom::setResultName(func, i, info.name());

  // Drop what nothing uses: unused initializers, shape arithmetic that was
  // folded into constants.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*entry)))
    if (!isa<func::ReturnOp>(op) && op.use_empty())
      op.erase();

  if (failed(verify(*module)))
    return nullptr;
  return module;
}

} // namespace

OwningOpRef<ModuleOp> importOnnxModel(MLIRContext *context, StringRef path,
                                      const ImportOptions &options) {
  context->loadDialect<nn::NNDialect, loom::LoomDialect, func::FuncDialect>();
  return GraphImporter(context, path, options).run();
}

} // namespace loom
