#include "dialects/dist/DistDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace loom::dist;

#include "dialects/dist/DistDialect.cpp.inc"
#include "dialects/dist/DistEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/dist/DistAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/dist/DistOps.cpp.inc"

void DistDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/dist/DistAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/dist/DistOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// MeshAttr: #dist.mesh<["dp"=2, "tp"=4]>
//===----------------------------------------------------------------------===//

Attribute MeshAttr::parse(AsmParser &parser, Type) {
  SmallVector<StringAttr> names;
  SmallVector<int64_t> sizes;
  auto parseAxis = [&]() -> ParseResult {
    std::string name;
    int64_t size;
    if (parser.parseString(&name) || parser.parseEqual() || parser.parseInteger(size))
      return failure();
    names.push_back(parser.getBuilder().getStringAttr(name));
    sizes.push_back(size);
    return success();
  };
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseAxis) ||
      parser.parseGreater())
    return {};
  return parser.getChecked<MeshAttr>(parser.getContext(), names, sizes);
}

void MeshAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  for (auto [i, name] : llvm::enumerate(getNames())) {
    if (i)
      printer << ", ";
    printer << '"' << name.getValue() << "\"=" << getSizes()[i];
  }
  printer << "]>";
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<StringAttr> names, ArrayRef<int64_t> sizes) {
  if (names.size() != sizes.size())
    return emitError() << "mesh has " << names.size() << " axis names but " << sizes.size()
                       << " sizes";
  llvm::StringSet<> seen;
  for (auto [name, size] : llvm::zip(names, sizes)) {
    if (name.getValue().empty())
      return emitError() << "mesh axis names must not be empty";
    if (!seen.insert(name.getValue()).second)
      return emitError() << "mesh axis '" << name.getValue() << "' appears twice";
    if (size <= 0)
      return emitError() << "mesh axis '" << name.getValue() << "' has size " << size
                         << "; sizes must be positive";
  }
  return success();
}

std::optional<int64_t> MeshAttr::axisSize(StringRef name) const {
  for (auto [n, size] : llvm::zip(getNames(), getSizes()))
    if (n.getValue() == name)
      return size;
  return std::nullopt;
}

int64_t MeshAttr::groupSize(ArrayRef<StringRef> axes) const {
  int64_t n = 1;
  for (StringRef axis : axes)
    n *= axisSize(axis).value_or(1);
  return n;
}

int64_t MeshAttr::numRanks() const {
  int64_t n = 1;
  for (int64_t s : getSizes())
    n *= s;
  return n;
}

//===----------------------------------------------------------------------===//
// ShardingAttr: #dist.sharding<[["tp"], []], partial = ["dp"]>
//===----------------------------------------------------------------------===//

static ParseResult parseAxisList(AsmParser &parser, SmallVectorImpl<Attribute> &axes) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
    std::string name;
    if (parser.parseString(&name))
      return failure();
    axes.push_back(parser.getBuilder().getStringAttr(name));
    return success();
  });
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  SmallVector<ArrayAttr> dims;
  SmallVector<StringAttr> partial;
  if (parser.parseLess())
    return {};
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
        SmallVector<Attribute> axes;
        if (parseAxisList(parser, axes))
          return failure();
        dims.push_back(parser.getBuilder().getArrayAttr(axes));
        return success();
      }))
    return {};
  if (succeeded(parser.parseOptionalComma())) {
    SmallVector<Attribute> axes;
    if (parser.parseKeyword("partial") || parser.parseEqual() || parseAxisList(parser, axes))
      return {};
    for (Attribute a : axes)
      partial.push_back(llvm::cast<StringAttr>(a));
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<ShardingAttr>(parser.getContext(), dims, partial);
}

static void printAxisList(AsmPrinter &printer, ArrayRef<Attribute> axes) {
  printer << '[';
  for (auto [i, a] : llvm::enumerate(axes)) {
    if (i)
      printer << ", ";
    printer << '"' << llvm::cast<StringAttr>(a).getValue() << '"';
  }
  printer << ']';
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  for (auto [i, dim] : llvm::enumerate(getDims())) {
    if (i)
      printer << ", ";
    printAxisList(printer, dim.getValue());
  }
  printer << ']';
  if (!getPartial().empty()) {
    printer << ", partial = ";
    SmallVector<Attribute> partial(getPartial().begin(), getPartial().end());
    printAxisList(printer, partial);
  }
  printer << '>';
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   ArrayRef<ArrayAttr> dims, ArrayRef<StringAttr> partial) {
  llvm::StringSet<> seen;
  auto use = [&](Attribute a) -> LogicalResult {
    auto name = llvm::dyn_cast<StringAttr>(a);
    if (!name)
      return emitError() << "sharding axes must be strings";
    if (!seen.insert(name.getValue()).second)
      return emitError() << "mesh axis '" << name.getValue()
                         << "' is used twice in one sharding";
    return success();
  };
  for (ArrayAttr dim : dims)
    for (Attribute a : dim)
      if (failed(use(a)))
        return failure();
  for (StringAttr a : partial)
    if (failed(use(a)))
      return failure();
  return success();
}

SmallVector<StringRef> ShardingAttr::dimAxes(unsigned d) const {
  SmallVector<StringRef> axes;
  for (Attribute a : getDims()[d])
    axes.push_back(llvm::cast<StringAttr>(a).getValue());
  return axes;
}

SmallVector<StringRef> ShardingAttr::partialAxes() const {
  SmallVector<StringRef> axes;
  for (StringAttr a : getPartial())
    axes.push_back(a.getValue());
  return axes;
}

bool ShardingAttr::isReplicated() const {
  return getPartial().empty() &&
         llvm::all_of(getDims(), [](ArrayAttr d) { return d.empty(); });
}

ShardingAttr ShardingAttr::get(MLIRContext *ctx, ArrayRef<SmallVector<StringRef>> dims,
                               ArrayRef<StringRef> partial) {
  Builder b(ctx);
  SmallVector<ArrayAttr> dimAttrs;
  for (const auto &axes : dims) {
    SmallVector<Attribute> names;
    for (StringRef a : axes)
      names.push_back(b.getStringAttr(a));
    dimAttrs.push_back(b.getArrayAttr(names));
  }
  SmallVector<StringAttr> partialAttrs;
  for (StringRef a : partial)
    partialAttrs.push_back(b.getStringAttr(a));
  return get(ctx, dimAttrs, partialAttrs);
}

ShardingAttr ShardingAttr::replicated(MLIRContext *ctx, unsigned rank) {
  SmallVector<SmallVector<StringRef>> dims(rank);
  return get(ctx, dims, {});
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

MeshAttr loom::dist::lookupMesh(Operation *op) {
  for (Operation *p = op; p; p = p->getParentOp())
    if (auto mesh = p->getAttrOfType<MeshAttr>(kMeshAttrName))
      return mesh;
  return {};
}

FailureOr<RankedTensorType> loom::dist::localType(RankedTensorType global, ShardingAttr sharding,
                                                  MeshAttr mesh, std::string *error) {
  SmallVector<int64_t> shape(global.getShape());
  if (sharding.getDims().size() != shape.size()) {
    if (error)
      *error = "sharding has " + std::to_string(sharding.getDims().size()) +
               " dims but the tensor has rank " + std::to_string(shape.size());
    return failure();
  }
  for (unsigned d = 0; d < shape.size(); ++d) {
    SmallVector<StringRef> axes = sharding.dimAxes(d);
    int64_t n = mesh.groupSize(axes);
    if (shape[d] % n != 0) {
      if (error) {
        std::string names;
        for (StringRef a : axes)
          names += (names.empty() ? "" : ",") + a.str();
        *error = "dim " + std::to_string(d) + " of size " + std::to_string(shape[d]) +
                 " is not divisible by " + std::to_string(n) + " (mesh axes " + names + ")";
      }
      return failure();
    }
    shape[d] /= n;
  }
  return RankedTensorType::get(shape, global.getElementType());
}

bool loom::dist::isZero1(ModuleOp module) { return module->hasAttrOfType<UnitAttr>(kZero1AttrName); }

void loom::dist::setZero1(ModuleOp module) {
  module->setAttr(kZero1AttrName, UnitAttr::get(module.getContext()));
}

void loom::dist::setMesh(ModuleOp module, MeshAttr mesh) {
  module->setAttr(kMeshAttrName, mesh);
}

ArrayAttr loom::dist::getResultShardings(Operation *op) {
  return op->getAttrOfType<ArrayAttr>(kShardingAttrName);
}

void loom::dist::setResultShardings(Operation *op, ArrayRef<Attribute> shardings) {
  op->setAttr(kShardingAttrName, ArrayAttr::get(op->getContext(), shardings));
}

ShardingAttr loom::dist::getArgSharding(FunctionOpInterface fn, unsigned i) {
  return fn.getArgAttrOfType<ShardingAttr>(i, kShardingAttrName);
}

void loom::dist::setArgSharding(FunctionOpInterface fn, unsigned i, ShardingAttr sharding) {
  fn.setArgAttr(i, kShardingAttrName, sharding);
}

TypeAttr loom::dist::getGlobalType(Operation *op) {
  return op->getAttrOfType<TypeAttr>(kGlobalTypeAttrName);
}

void loom::dist::setGlobalType(Operation *op, Type type) {
  op->setAttr(kGlobalTypeAttrName, TypeAttr::get(type));
}

TypeAttr loom::dist::getArgGlobalType(FunctionOpInterface fn, unsigned i) {
  return fn.getArgAttrOfType<TypeAttr>(i, kGlobalTypeAttrName);
}

void loom::dist::setArgGlobalType(FunctionOpInterface fn, unsigned i, Type type) {
  fn.setArgAttr(i, kGlobalTypeAttrName, TypeAttr::get(type));
}

void loom::dist::addRankOffset(Operation *op, StringRef attr, int64_t element,
                               ArrayRef<StringRef> axes, int64_t stride) {
  Builder b(op->getContext());
  SmallVector<Attribute> entries;
  if (auto existing = op->getAttrOfType<ArrayAttr>(kRankOffsetsAttrName))
    entries.append(existing.begin(), existing.end());
  entries.push_back(b.getDictionaryAttr({
      b.getNamedAttr("attr", b.getStringAttr(attr)),
      b.getNamedAttr("axes", b.getStrArrayAttr(axes)),
      b.getNamedAttr("element", b.getI64IntegerAttr(element)),
      b.getNamedAttr("stride", b.getI64IntegerAttr(stride)),
  }));
  op->setAttr(kRankOffsetsAttrName, b.getArrayAttr(entries));
}

FailureOr<SmallVector<RankOffset>> loom::dist::getRankOffsets(Operation *op) {
  SmallVector<RankOffset> out;
  Attribute raw = op->getAttr(kRankOffsetsAttrName);
  if (!raw)
    return out;
  auto malformed = [&]() {
    return op->emitOpError("has a malformed '")
           << kRankOffsetsAttrName
           << "': expected an array of {attr, axes, element, stride} dictionaries";
  };
  auto list = dyn_cast<ArrayAttr>(raw);
  if (!list)
    return malformed();
  for (Attribute a : list) {
    auto dict = dyn_cast<DictionaryAttr>(a);
    if (!dict)
      return malformed();
    auto attr = dict.getAs<StringAttr>("attr");
    auto axes = dict.getAs<ArrayAttr>("axes");
    auto element = dict.getAs<IntegerAttr>("element");
    auto stride = dict.getAs<IntegerAttr>("stride");
    if (!attr || !axes || !element || !stride || axes.empty())
      return malformed();
    RankOffset o;
    o.attr = attr.str();
    o.element = element.getInt();
    o.stride = stride.getInt();
    for (Attribute axis : axes) {
      auto name = dyn_cast<StringAttr>(axis);
      if (!name)
        return malformed();
      o.axes.push_back(name.str());
    }
    out.push_back(std::move(o));
  }
  return out;
}

LogicalResult
loom::dist::applyRankOffsets(Operation *op,
                             function_ref<int64_t(ArrayRef<std::string>)> groupIndex) {
  FailureOr<SmallVector<RankOffset>> offsets = getRankOffsets(op);
  if (failed(offsets))
    return failure();
  Builder b(op->getContext());
  for (const RankOffset &o : *offsets) {
    int64_t delta = groupIndex(o.axes) * o.stride;
    Attribute current = op->getAttr(o.attr);
    // An integer attribute left at its default (0) is not printed.
    if (!current && o.element < 0) {
      op->setAttr(o.attr, b.getI64IntegerAttr(delta));
      continue;
    }
    if (auto i = dyn_cast_if_present<IntegerAttr>(current); i && o.element < 0) {
      op->setAttr(o.attr, b.getIntegerAttr(i.getType(), i.getInt() + delta));
      continue;
    }
    if (auto array = dyn_cast_if_present<DenseI64ArrayAttr>(current);
        array && o.element >= 0 && o.element < int64_t(array.size())) {
      SmallVector<int64_t> values(array.asArrayRef());
      values[o.element] += delta;
      op->setAttr(o.attr, b.getDenseI64ArrayAttr(values));
      continue;
    }
    return op->emitOpError("has a rank offset for '")
           << o.attr << "' (element " << o.element << "), but has no i64 attribute (or array element) of that name";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Discardable attributes
//===----------------------------------------------------------------------===//

static LogicalResult verifyGlobalType(Operation *op, NamedAttribute attr) {
  auto type = dyn_cast<TypeAttr>(attr.getValue());
  if (!type || !isa<RankedTensorType>(type.getValue()))
    return op->emitOpError("'") << attr.getName().getValue()
                                << "' must be a ranked tensor type, got " << attr.getValue();
  return success();
}

LogicalResult DistDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute value = attr.getValue();
  if (name == kMeshAttrName) {
    if (!isa<ModuleOp>(op))
      return op->emitOpError("'") << name << "' belongs on the module";
    if (!isa<MeshAttr>(value))
      return op->emitOpError("'") << name << "' must be a #dist.mesh, got " << value;
    return success();
  }
  if (name == kShardingAttrName) {
    auto list = dyn_cast<ArrayAttr>(value);
    // A unit entry is a result whose sharding propagation has not decided yet.
    if (!list || !llvm::all_of(list, [](Attribute a) { return isa<ShardingAttr, UnitAttr>(a); }))
      return op->emitOpError("'") << name
                                  << "' must be an array of #dist.sharding (or unit: undecided), "
                                     "one per result, got "
                                  << value;
    if (list.size() != op->getNumResults())
      return op->emitOpError("'") << name << "' has " << list.size() << " shardings for "
                                  << op->getNumResults() << " results";
    return success();
  }
  if (name == kZero1AttrName) {
    if (!isa<ModuleOp>(op))
      return op->emitOpError("'") << name << "' belongs on the module";
    if (!isa<UnitAttr>(value))
      return op->emitOpError("'") << name << "' must be a unit attribute, got " << value;
    return success();
  }
  if (name == kGlobalTypeAttrName)
    return verifyGlobalType(op, attr);
  if (name == kRankOffsetsAttrName)
    return getRankOffsets(op);
  return op->emitOpError("has an unknown dist attribute '") << name << "'";
}

/// dist.sharding and dist.global_type of a function argument or result.
static LogicalResult verifyValueAttribute(Operation *op, StringRef what, unsigned index,
                                          NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kShardingAttrName) {
    if (!isa<ShardingAttr>(attr.getValue()))
      return op->emitOpError() << what << " " << index << ": '" << name
                               << "' must be a #dist.sharding, got " << attr.getValue();
    return success();
  }
  if (name == kGlobalTypeAttrName)
    return verifyGlobalType(op, attr);
  return op->emitOpError() << what << " " << index << " has '" << name
                           << "', which is not a dist attribute of a function " << what
                           << " (dist.sharding and dist.global_type are)";
}

LogicalResult DistDialect::verifyRegionArgAttribute(Operation *op, unsigned, unsigned argIndex,
                                                    NamedAttribute attr) {
  return verifyValueAttribute(op, "argument", argIndex, attr);
}

LogicalResult DistDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                       unsigned resultIndex,
                                                       NamedAttribute attr) {
  return verifyValueAttribute(op, "result", resultIndex, attr);
}

//===----------------------------------------------------------------------===//
// Collective verifiers
//===----------------------------------------------------------------------===//

/// Checks `axes` against the enclosing mesh (if any) and returns the group
/// size, or 0 when no mesh is known.
static FailureOr<int64_t> verifyAxes(Operation *op, ArrayAttr axes) {
  if (axes.empty())
    return op->emitOpError("needs at least one mesh axis");
  llvm::StringSet<> seen;
  SmallVector<StringRef> names;
  for (Attribute a : axes) {
    StringRef name = llvm::cast<StringAttr>(a).getValue();
    if (!seen.insert(name).second)
      return op->emitOpError("names mesh axis '") << name << "' twice";
    names.push_back(name);
  }
  MeshAttr mesh = lookupMesh(op);
  if (!mesh)
    return int64_t(0);
  for (StringRef name : names)
    if (!mesh.axisSize(name))
      return op->emitOpError("mesh axis '") << name << "' is not in the module's mesh "
                                            << mesh;
  return mesh.groupSize(names);
}

static LogicalResult verifyDim(Operation *op, StringRef what, int64_t dim, int64_t rank) {
  if (dim < 0 || dim >= rank)
    return op->emitOpError() << what << " " << dim << " is out of range for rank " << rank;
  return success();
}

/// Result type equals input type except dim `dim`, which is `expect`
/// (skipped when the group size is unknown).
static LogicalResult verifyResizedDim(Operation *op, RankedTensorType in, RankedTensorType out,
                                      int64_t dim, std::optional<int64_t> expect) {
  if (in.getElementType() != out.getElementType() || in.getRank() != out.getRank())
    return op->emitOpError("result ") << out << " must have the input's rank and element type ("
                                      << in << ")";
  for (int64_t d = 0; d < in.getRank(); ++d) {
    if (d == dim) {
      if (expect && out.getDimSize(d) != *expect)
        return op->emitOpError("result dim ")
               << d << " must be " << *expect << " (input " << in.getDimSize(d)
               << " and the group size), got " << out.getDimSize(d);
      continue;
    }
    if (in.getDimSize(d) != out.getDimSize(d))
      return op->emitOpError("result dim ") << d << " must equal the input's ("
                                            << in.getDimSize(d) << "), got " << out.getDimSize(d);
  }
  return success();
}

/// A bucketed collective: as many results as inputs, at least one.
static LogicalResult verifyBucket(Operation *op) {
  if (op->getNumOperands() == 0)
    return op->emitOpError("needs at least one input");
  if (op->getNumOperands() != op->getNumResults())
    return op->emitOpError("has ") << op->getNumOperands() << " inputs but "
                                   << op->getNumResults() << " results";
  return success();
}

LogicalResult AllReduceOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                            AllReduceOp::Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  for (Value input : adaptor.getInputs())
    inferred.push_back(input.getType());
  return success();
}

LogicalResult AllReduceOp::verify() {
  if (failed(verifyAxes(*this, getAxes())) || failed(verifyBucket(*this)))
    return failure();
  for (auto [i, pair] : llvm::enumerate(llvm::zip(getInputs(), getResults())))
    if (std::get<0>(pair).getType() != std::get<1>(pair).getType())
      return emitOpError("result ") << i << " must have input " << i << "'s type ("
                                    << std::get<0>(pair).getType() << ")";
  return success();
}

LogicalResult AllGatherOp::verify() {
  FailureOr<int64_t> n = verifyAxes(*this, getAxes());
  if (failed(n))
    return failure();
  auto in = getInput().getType(), out = getResult().getType();
  if (failed(verifyDim(*this, "dim", getDim(), in.getRank())))
    return failure();
  std::optional<int64_t> expect;
  if (*n)
    expect = in.getDimSize(getDim()) * *n;
  else if (out.getDimSize(getDim()) % std::max<int64_t>(in.getDimSize(getDim()), 1) != 0)
    return emitOpError("result dim ") << getDim() << " must be a multiple of the input's";
  return verifyResizedDim(*this, in, out, getDim(), expect);
}

LogicalResult ReduceScatterOp::verify() {
  FailureOr<int64_t> n = verifyAxes(*this, getAxes());
  if (failed(n) || failed(verifyBucket(*this)))
    return failure();
  for (auto [input, result] : llvm::zip(getInputs(), getResults())) {
    auto in = cast<RankedTensorType>(input.getType());
    auto out = cast<RankedTensorType>(result.getType());
    if (failed(verifyDim(*this, "dim", getDim(), in.getRank())))
      return failure();
    std::optional<int64_t> expect;
    if (*n) {
      if (in.getDimSize(getDim()) % *n != 0)
        return emitOpError("dim ") << getDim() << " of size " << in.getDimSize(getDim())
                                   << " is not divisible by the group size " << *n;
      expect = in.getDimSize(getDim()) / *n;
    }
    if (failed(verifyResizedDim(*this, in, out, getDim(), expect)))
      return failure();
  }
  return success();
}

LogicalResult AllToAllOp::verify() {
  FailureOr<int64_t> n = verifyAxes(*this, getAxes());
  if (failed(n))
    return failure();
  auto in = getInput().getType(), out = getResult().getType();
  int64_t split = getSplitDim(), concat = getConcatDim();
  if (failed(verifyDim(*this, "split_dim", split, in.getRank())) ||
      failed(verifyDim(*this, "concat_dim", concat, in.getRank())))
    return failure();
  if (in.getElementType() != out.getElementType() || in.getRank() != out.getRank())
    return emitOpError("result ") << out << " must have the input's rank and element type ("
                                  << in << ")";
  if (!*n)
    return success();
  if (in.getDimSize(split) % *n != 0)
    return emitOpError("split_dim ") << split << " of size " << in.getDimSize(split)
                                     << " is not divisible by the group size " << *n;
  SmallVector<int64_t> expect(in.getShape());
  expect[split] /= *n;
  expect[concat] *= *n;
  if (ArrayRef<int64_t>(expect) != out.getShape())
    return emitOpError("result must be ")
           << RankedTensorType::get(expect, in.getElementType()) << " (group size " << *n
           << "), got " << out;
  return success();
}

/// The indices of gather_rows and scatter_rows: i32 or i64 rows and ranges,
/// the ranges one [first, end) per member of a group of `n` (0: unknown).
static LogicalResult verifyRowIndices(Operation *op, RankedTensorType rows, RankedTensorType ranges,
                               int64_t n) {
  for (RankedTensorType index : {rows, ranges})
    if (!index.getElementType().isSignlessInteger(32) && !index.getElementType().isSignlessInteger(64))
      return op->emitOpError("rows and ranges must be i32 or i64, got ") << index;
  if (ranges.getRank() != 2 || ranges.getDimSize(1) != 2 || (n && ranges.getDimSize(0) != n))
    return op->emitOpError(
               "ranges must be [group size x 2] (each member's first and end row), got ")
           << ranges;
  return success();
}

LogicalResult GatherRowsOp::verify() {
  FailureOr<int64_t> n = verifyAxes(*this, getAxes());
  if (failed(n))
    return failure();
  auto x = cast<RankedTensorType>(getX().getType()), rows = cast<RankedTensorType>(getRows().getType()),
       ranges = cast<RankedTensorType>(getRanges().getType()),
       out = cast<RankedTensorType>(getResult().getType());
  if (failed(verifyRowIndices(*this, rows, ranges, *n)))
    return failure();
  if (x.getRank() < 1 || rows.getRank() != 1)
    return emitOpError("takes rows of x ([n, ...]) by a 1-D index, got ") << x << " and " << rows;
  SmallVector<int64_t> expect(x.getShape());
  expect[0] = rows.getDimSize(0);
  if (out.getElementType() != x.getElementType() || ArrayRef<int64_t>(expect) != out.getShape())
    return emitOpError("result must be ") << RankedTensorType::get(expect, x.getElementType())
                                          << ", got " << out;
  return success();
}

LogicalResult ScatterRowsOp::verify() {
  FailureOr<int64_t> n = verifyAxes(*this, getAxes());
  if (failed(n))
    return failure();
  auto y = cast<RankedTensorType>(getY().getType()), rows = cast<RankedTensorType>(getRows().getType()),
       ranges = cast<RankedTensorType>(getRanges().getType()),
       out = cast<RankedTensorType>(getResult().getType());
  if (failed(verifyRowIndices(*this, rows, ranges, *n)))
    return failure();
  if (y.getRank() < 1 || rows.getRank() != 1 || y.getDimSize(0) != rows.getDimSize(0))
    return emitOpError("takes a row of y for each index, got ") << y << " and " << rows;
  if (out.getElementType() != y.getElementType() || out.getRank() != y.getRank() ||
      out.getShape().drop_front() != y.getShape().drop_front())
    return emitOpError("result must be rows of y's (") << y << "), got " << out;
  return success();
}

LogicalResult BroadcastOp::verify() {
  FailureOr<int64_t> n = verifyAxes(*this, getAxes());
  if (failed(n))
    return failure();
  if (getRoot() < 0 || (*n && getRoot() >= *n))
    return emitOpError("root ") << getRoot() << " is not a rank of the group (size " << *n
                                << ")";
  return success();
}

static LogicalResult verifyPeer(Operation *op, int64_t peer) {
  if (peer < 0)
    return op->emitOpError("peer ") << peer << " must be a non-negative rank";
  if (MeshAttr mesh = lookupMesh(op); mesh && peer >= mesh.numRanks())
    return op->emitOpError("peer ") << peer << " is not a rank of the mesh ("
                                    << mesh.numRanks() << " ranks)";
  return success();
}

LogicalResult SendOp::verify() { return verifyPeer(*this, getPeer()); }
LogicalResult RecvOp::verify() { return verifyPeer(*this, getPeer()); }

LogicalResult ExchangeOp::verify() {
  FailureOr<int64_t> n = verifyAxes(*this, getAxes());
  if (failed(n))
    return failure();
  if (getSendPeers().size() != getInputs().size())
    return emitOpError("has ") << getInputs().size() << " inputs but "
                               << getSendPeers().size() << " send_peers";
  if (getRecvPeers().size() != getResults().size())
    return emitOpError("has ") << getResults().size() << " results but "
                               << getRecvPeers().size() << " recv_peers";
  if (getInputs().empty() && getResults().empty())
    return emitOpError("transfers nothing");
  for (ArrayRef<int64_t> peers : {getSendPeers(), getRecvPeers()})
    for (int64_t peer : peers)
      if (peer < 0 || (*n && peer >= *n))
        return emitOpError("peer ") << peer << " is not an index in the group"
                                    << (*n ? " (size " + std::to_string(*n) + ")" : std::string());
  return success();
}
