#include "dialects/rt/RtDialect.h"

#include "runtime/abi/FusedBody.h"
#include "runtime/abi/KernelList.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace loom::rt;

#include "dialects/rt/RtDialect.cpp.inc"
#include "dialects/rt/RtEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/rt/RtAttrs.cpp.inc"

void RtDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/rt/RtAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/rt/RtOps.cpp.inc"
      >();
}

int64_t loom::rt::bufferBytes(MemRefType type) {
  int64_t bits = type.getElementTypeBitWidth();
  int64_t bytesPerElement = bits <= 8 ? 1 : bits / 8; // i1 is stored as a byte
  return type.getNumElements() * bytesPerElement;
}

std::optional<KernelArity> loom::rt::lookupKernel(StringRef name) {
  std::optional<KernelId> id = findKernel(std::string_view(name.data(), name.size()));
  if (!id)
    return std::nullopt;
  const KernelInfo &k = kernelInfo(*id);
  return KernelArity{k.minInputs, k.maxInputs, k.numOutputs};
}

Value loom::rt::rootBuffer(Value buffer) {
  while (auto alias = buffer.getDefiningOp<AliasOp>())
    buffer = alias.getSource();
  return buffer;
}

bool loom::rt::isHost(Value root) {
  if (auto alloc = root.getDefiningOp<AllocOp>())
    return alloc.getHost();
  return false;
}

bool loom::rt::isPersistent(Value root) {
  if (auto alloc = root.getDefiningOp<AllocOp>())
    return alloc.getPersistent();
  return root.getDefiningOp<ParamOp>() != nullptr;
}

std::optional<int64_t> loom::rt::plannedOffset(Value root) {
  Operation *def = root.getDefiningOp();
  if (!def)
    return std::nullopt;
  if (auto offset = def->getAttrOfType<IntegerAttr>("offset"))
    return offset.getInt();
  return std::nullopt;
}

void loom::rt::setPlannedOffset(Value root, int64_t offset) {
  Operation *def = root.getDefiningOp();
  def->setAttr("offset", IntegerAttr::get(IntegerType::get(def->getContext(), 64), offset));
}

std::optional<loom::Mesh> loom::rt::moduleMesh(Operation *op) {
  auto module = isa<ModuleOp>(op) ? cast<ModuleOp>(op) : op->getParentOfType<ModuleOp>();
  if (!module)
    return std::nullopt;
  auto axes = module->getAttrOfType<ArrayAttr>(kMeshAxesAttr);
  auto shape = module->getAttrOfType<DenseI64ArrayAttr>(kMeshShapeAttr);
  if (!axes || !shape || axes.size() != shape.size())
    return std::nullopt;
  loom::Mesh mesh;
  for (Attribute a : axes) {
    auto name = dyn_cast<StringAttr>(a);
    if (!name)
      return std::nullopt;
    mesh.axes.push_back(name.str());
  }
  for (int64_t d : shape.asArrayRef()) {
    if (d < 1)
      return std::nullopt;
    mesh.shape.push_back(d);
  }
  return mesh;
}

void loom::rt::setModuleMesh(Operation *module, ArrayRef<StringRef> axes,
                             ArrayRef<int64_t> shape) {
  Builder b(module->getContext());
  module->setAttr(kMeshAxesAttr, b.getStrArrayAttr(axes));
  module->setAttr(kMeshShapeAttr, b.getDenseI64ArrayAttr(shape));
}

bool loom::rt::hasModuleMesh(Operation *module) {
  return module->hasAttr(kMeshAxesAttr) || module->hasAttr(kMeshShapeAttr);
}

StringAttr loom::rt::getScheduleCsv(Operation *module) {
  return module->getAttrOfType<StringAttr>(kScheduleCsvAttr);
}

void loom::rt::setScheduleCsv(Operation *module, StringAttr csv) {
  module->setAttr(kScheduleCsvAttr, csv);
}

std::optional<loom::Sharding> loom::rt::parseSharding(Attribute attr) {
  auto dims = dyn_cast_or_null<ArrayAttr>(attr);
  if (!dims)
    return std::nullopt;
  loom::Sharding sharding;
  for (Attribute dim : dims) {
    auto axes = dyn_cast<ArrayAttr>(dim);
    if (!axes)
      return std::nullopt;
    std::vector<std::string> names;
    for (Attribute a : axes) {
      auto name = dyn_cast<StringAttr>(a);
      if (!name)
        return std::nullopt;
      names.push_back(name.str());
    }
    sharding.push_back(std::move(names));
  }
  return sharding;
}

// The IR's enums keep the runtime's values and spellings.
#define LOOM_SAME_COLLECTIVE(name)                                                          \
  static_assert(int(CollectiveKind::name) == int(loom::CollectiveKind::name));
LOOM_SAME_COLLECTIVE(AllReduce)
LOOM_SAME_COLLECTIVE(AllGather)
LOOM_SAME_COLLECTIVE(ReduceScatter)
LOOM_SAME_COLLECTIVE(AllToAll)
LOOM_SAME_COLLECTIVE(Broadcast)
LOOM_SAME_COLLECTIVE(Send)
LOOM_SAME_COLLECTIVE(Recv)
LOOM_SAME_COLLECTIVE(Exchange)
LOOM_SAME_COLLECTIVE(GatherRows)
LOOM_SAME_COLLECTIVE(ScatterRows)
#undef LOOM_SAME_COLLECTIVE
static_assert(getMaxEnumValForCollectiveKind() + 1 == loom::kNumCollectiveKinds);
static_assert(int(ReduceKind::Sum) == int(loom::ReduceOp::Sum) &&
              int(ReduceKind::Max) == int(loom::ReduceOp::Max) &&
              int(ReduceKind::Avg) == int(loom::ReduceOp::Avg) &&
              getMaxEnumValForReduceKind() + 1 == loom::kNumReduceOps);

loom::CollectiveKind loom::rt::toRuntime(CollectiveKind kind) {
  return static_cast<loom::CollectiveKind>(kind);
}

loom::ReduceOp loom::rt::toRuntime(ReduceKind reduce) {
  return static_cast<loom::ReduceOp>(reduce);
}

loom::CollectiveDesc loom::rt::collectiveDesc(CollectiveOp op) {
  loom::CollectiveDesc desc;
  desc.kind = toRuntime(op.getKind());
  if (std::optional<ArrayAttr> axes = op.getAxes())
    for (Attribute a : *axes)
      desc.axes.push_back(cast<StringAttr>(a).str());
  if (std::optional<ReduceKind> reduce = op.getReduce())
    desc.reduce = toRuntime(*reduce);
  auto get = [](IntegerAttr a) { return a ? a.getInt() : int64_t(0); };
  desc.dim = get(op.getDimAttr());
  desc.splitDim = get(op.getSplitDimAttr());
  desc.concatDim = get(op.getConcatDimAttr());
  desc.root = get(op.getRootAttr());
  desc.peer = get(op.getPeerAttr());
  if (std::optional<ArrayRef<int64_t>> peers = op.getSendPeers())
    desc.sendPeers.assign(peers->begin(), peers->end());
  if (std::optional<ArrayRef<int64_t>> peers = op.getRecvPeers())
    desc.recvPeers.assign(peers->begin(), peers->end());
  return desc;
}

LogicalResult RtDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name != kMeshAxesAttr && name != kMeshShapeAttr && name != kScheduleCsvAttr)
    return op->emitError("unknown rt attribute '") << name << "'";
  if (!isa<ModuleOp>(op))
    return op->emitError("'") << name << "' belongs on the module";
  // The pipeline schedule's CSV; loom-inspect parses and verifies it.
  if (name == kScheduleCsvAttr) {
    if (!isa<StringAttr>(attr.getValue()))
      return op->emitError("rt.schedule_csv must be a string");
    return success();
  }
  auto axes = op->getAttr(kMeshAxesAttr);
  auto shape = op->getAttr(kMeshShapeAttr);
  if (!axes || !shape)
    return op->emitError("rt.mesh_axes and rt.mesh_shape go together");
  auto axisArray = dyn_cast<ArrayAttr>(axes);
  auto shapeArray = dyn_cast<DenseI64ArrayAttr>(shape);
  if (!axisArray || !llvm::all_of(axisArray, [](Attribute a) { return isa<StringAttr>(a); }))
    return op->emitError("rt.mesh_axes must be an array of strings");
  if (!shapeArray)
    return op->emitError("rt.mesh_shape must be an array<i64: ...>");
  if (axisArray.size() != shapeArray.size())
    return op->emitError("rt.mesh_axes names ")
           << axisArray.size() << " axes but rt.mesh_shape has " << shapeArray.size()
           << " sizes";
  llvm::StringSet<> seen;
  for (auto [a, size] : llvm::zip(axisArray, shapeArray.asArrayRef())) {
    StringRef axis = cast<StringAttr>(a).getValue();
    if (axis.empty() || !seen.insert(axis).second)
      return op->emitError("mesh axis '") << axis << "' is empty or repeated";
    if (size < 1)
      return op->emitError("mesh axis '") << axis << "' has size " << size
                                          << "; sizes must be positive";
  }
  return success();
}

namespace {

/// The runtime element type of a buffer, for a fusion group's body.
std::optional<loom::DType> fusedDType(Type type) {
  if (type.isF32())
    return loom::DType::F32;
  if (type.isBF16())
    return loom::DType::BF16;
  if (type.isF16())
    return loom::DType::F16;
  if (type.isF64())
    return loom::DType::F64;
  if (type.isFloat8E4M3FN())
    return loom::DType::F8E4M3FN;
  if (type.isFloat8E5M2())
    return loom::DType::F8E5M2;
  if (type.isInteger(64))
    return loom::DType::I64;
  if (type.isInteger(32))
    return loom::DType::I32;
  if (type.isInteger(1))
    return loom::DType::I1;
  return std::nullopt;
}

/// The runtime element type for the verifier's messages (types collectives
/// do not move map to one that is refused).
loom::DType elementDType(Type type) {
  std::optional<loom::DType> dtype = fusedDType(type);
  if (!dtype || *dtype == loom::DType::F8E5M2)
    return loom::DType::F8E4M3FN;
  return *dtype;
}

/// The rank a program op runs as, when the verifier can tell.
int64_t programRank(Operation *op) {
  if (auto program = op->getParentOfType<ProgramOp>())
    return program.getRankAttr().getInt();
  return 0;
}

/// Checks `sharding`/`global_shape` of an rt.input or rt.param whose buffer
/// is `type`.
LogicalResult verifySharding(Operation *op, ArrayAttr shardingAttr,
                             DenseI64ArrayAttr globalShapeAttr, MemRefType type) {
  if (!shardingAttr && !globalShapeAttr)
    return success();
  if (!globalShapeAttr)
    return op->emitOpError("has a sharding but no global_shape");
  ArrayRef<int64_t> global = globalShapeAttr.asArrayRef();
  if (static_cast<int64_t>(global.size()) != type.getRank())
    return op->emitOpError("global_shape has ")
           << global.size() << " dimensions but the buffer " << type << " has "
           << type.getRank();
  loom::Sharding sharding;
  if (shardingAttr) {
    std::optional<loom::Sharding> parsed = parseSharding(shardingAttr);
    if (!parsed)
      return op->emitOpError("sharding must list, per dimension, an array of mesh "
                             "axis names, got ")
             << shardingAttr;
    sharding = std::move(*parsed);
    if (sharding.size() != global.size())
      return op->emitOpError("sharding lists ")
             << sharding.size() << " dimensions for a global shape of " << global.size();
  }
  std::optional<loom::Mesh> mesh = moduleMesh(op);
  if (!mesh) {
    if (!loom::isReplicated(sharding))
      return op->emitOpError("is sharded but the module has no mesh (rt.mesh_axes, "
                             "rt.mesh_shape)");
    if (type.getShape() != global)
      return op->emitOpError("buffer ") << type << " differs from its global_shape "
                                        << "without a sharding";
    return success();
  }
  int64_t rank = std::min(programRank(op), mesh->numRanks() - 1);
  auto block = loom::shardBlock(*mesh, rank, sharding, global);
  if (!block) {
    std::string problem = llvm::toString(block.takeError());
    return op->emitOpError("sharding: ") << problem;
  }
  if (ArrayRef<int64_t>(block->shape) != type.getShape()) {
    auto diag = op->emitOpError("buffer ") << type << " is not this rank's block of the global shape [";
    llvm::interleaveComma(global, diag);
    diag << "], which is [";
    llvm::interleaveComma(block->shape, diag);
    return diag << "]";
  }
  return success();
}

} // namespace

LogicalResult InputOp::verify() {
  return verifySharding(*this, getShardingAttr(), getGlobalShapeAttr(), getType());
}

LogicalResult CollectiveOp::verify() {
  std::optional<loom::CollectiveKind> kind = toRuntime(getKind());
  bool pointToPoint = *kind == loom::CollectiveKind::Send || *kind == loom::CollectiveKind::Recv;
  bool reduces = *kind == loom::CollectiveKind::AllReduce ||
                 *kind == loom::CollectiveKind::ReduceScatter;
  bool hasDim = *kind == loom::CollectiveKind::AllGather ||
                *kind == loom::CollectiveKind::ReduceScatter;
  bool allToAll = *kind == loom::CollectiveKind::AllToAll;
  bool isBroadcast = *kind == loom::CollectiveKind::Broadcast;
  bool isExchange = *kind == loom::CollectiveKind::Exchange;
  // Each kind takes exactly its own attributes.
  struct Expect {
    const char *name;
    bool present, wanted;
  } expects[] = {
      {"axes", bool(getAxes()), !pointToPoint},
      {"reduce", bool(getReduce()), reduces},
      {"dim", bool(getDimAttr()), hasDim},
      {"split_dim", bool(getSplitDimAttr()), allToAll},
      {"concat_dim", bool(getConcatDimAttr()), allToAll},
      {"root", bool(getRootAttr()), isBroadcast},
      {"peer", bool(getPeerAttr()), pointToPoint},
      {"send_peers", bool(getSendPeersAttr()), isExchange},
      {"recv_peers", bool(getRecvPeersAttr()), isExchange},
  };
  for (const Expect &e : expects) {
    if (e.wanted && !e.present)
      return emitOpError("'") << stringifyCollectiveKind(getKind()) << "' needs the attribute '" << e.name << "'";
    if (!e.wanted && e.present)
      return emitOpError("'") << stringifyCollectiveKind(getKind()) << "' takes no attribute '" << e.name << "'";
  }
  loom::CollectiveDesc desc = collectiveDesc(*this);
  std::optional<loom::Mesh> mesh = moduleMesh(*this);
  int64_t groupSize = 0;
  if (pointToPoint) {
    if (desc.peer < 0)
      return emitOpError("peer ") << desc.peer << " is negative";
    if (mesh) {
      if (desc.peer >= mesh->numRanks())
        return emitOpError("peer ") << desc.peer << " is outside the mesh of "
                                    << mesh->numRanks() << " ranks";
      if (desc.peer == programRank(*this) &&
          llvm::count_if(getOperation()->getParentOfType<ModuleOp>().getOps<ProgramOp>(),
                         [](ProgramOp) { return true; }) > 1)
        return emitOpError("peer ") << desc.peer << " is this program's own rank";
    }
  } else if (desc.axes.empty()) {
    return emitOpError("needs at least one mesh axis in 'axes'");
  } else if (mesh) {
    auto group = loom::groupOf(*mesh, 0, desc.axes);
    if (!group) {
      std::string problem = llvm::toString(group.takeError());
      return emitOpError(problem);
    }
    groupSize = group->size();
  }
  if (isExchange) {
    std::vector<loom::DType> sendTypes, recvTypes;
    for (Value v : getInputs())
      sendTypes.push_back(elementDType(cast<MemRefType>(v.getType()).getElementType()));
    for (Value v : getOutputs())
      recvTypes.push_back(elementDType(cast<MemRefType>(v.getType()).getElementType()));
    std::string problem = loom::checkExchange(desc, groupSize, sendTypes, recvTypes);
    if (!problem.empty())
      return emitOpError(problem);
    return success();
  }
  if (*kind == loom::CollectiveKind::GatherRows || *kind == loom::CollectiveKind::ScatterRows) {
    if (getInputs().size() != 3 || getOutputs().size() != 1)
      return emitOpError("'") << stringifyCollectiveKind(getKind())
                              << "' takes three inputs (rows of data, their indices, ranges) "
                                 "and one output";
    auto type = [](Value v) {
      auto t = cast<MemRefType>(v.getType());
      return loom::OperandType{elementDType(t.getElementType()),
                               std::vector<int64_t>(t.getShape().begin(), t.getShape().end())};
    };
    std::string problem =
        loom::checkGatherRows(desc, groupSize, type(getInputs()[0]), type(getInputs()[1]),
                              type(getInputs()[2]), type(getOutputs()[0]));
    if (!problem.empty())
      return emitOpError(problem);
    return success();
  }
  // A bucket (all_reduce, reduce_scatter): input i pairs with output i.
  size_t pairs = std::max(getInputs().size(), getOutputs().size());
  if (pairs > 1) {
    if (!loom::isBucketable(*kind))
      return emitOpError("takes at most one input and one output (only all_reduce and "
                         "reduce_scatter take a bucket of several)");
    if (getInputs().size() != getOutputs().size())
      return emitOpError("a bucket needs one output per input, has ")
             << getInputs().size() << " inputs and " << getOutputs().size() << " outputs";
  }
  for (size_t i = 0; i < std::max<size_t>(pairs, 1); ++i) {
    std::optional<loom::DType> inType, outType;
    std::optional<std::vector<int64_t>> inShape, outShape;
    if (i < getInputs().size()) {
      auto type = cast<MemRefType>(getInputs()[i].getType());
      inType = elementDType(type.getElementType());
      inShape = std::vector<int64_t>(type.getShape().begin(), type.getShape().end());
    }
    if (i < getOutputs().size()) {
      auto type = cast<MemRefType>(getOutputs()[i].getType());
      outType = elementDType(type.getElementType());
      outShape = std::vector<int64_t>(type.getShape().begin(), type.getShape().end());
    }
    std::string problem = loom::checkCollectiveTypes(
        desc, groupSize, inType ? &*inType : nullptr, inShape ? &*inShape : nullptr,
        outType ? &*outType : nullptr, outShape ? &*outShape : nullptr);
    if (!problem.empty()) {
      if (pairs > 1)
        return emitOpError("bucket entry ") << i << ": " << problem;
      return emitOpError(problem);
    }
  }
  return success();
}

LogicalResult ProgramOp::verify() {
  if (getStreams().empty())
    return emitOpError("needs at least one stream");
  // getRank() is unsigned (I64Attr): read the attribute's signed value.
  if (getRankAttr().getInt() < 0)
    return emitOpError("rank must be non-negative");
  if (std::optional<ArrayRef<int64_t>> sizes = getArenaSizes())
    if (sizes->size() != 2 && sizes->size() != 3)
      return emitOpError("arena_sizes holds [persistent, scratch] or [persistent, scratch, "
                         "host], got ")
             << sizes->size() << " entries";
  llvm::StringSet<> streams;
  for (Attribute s : getStreams())
    if (!streams.insert(cast<StringAttr>(s).getValue()).second)
      return emitOpError("stream '")
             << cast<StringAttr>(s).getValue() << "' is listed twice";
  // Work must name a listed stream.
  auto checkStream = [&](Operation *op, std::optional<StringRef> stream) {
    if (stream && !streams.contains(*stream))
      return op->emitOpError("runs on stream '")
             << *stream << "', which the program does not list", failure();
    return success();
  };
  for (Operation &op : getBlock()) {
    LogicalResult ok = success();
    if (auto k = dyn_cast<KernelOp>(op))
      ok = checkStream(k, k.getStream());
    else if (auto c = dyn_cast<CopyOp>(op))
      ok = checkStream(c, c.getStream());
    else if (auto c = dyn_cast<CollectiveOp>(op))
      ok = checkStream(c, c.getStream());
    else if (auto r = dyn_cast<RecordEventOp>(op))
      ok = checkStream(r, r.getStream());
    else if (auto w = dyn_cast<WaitEventOp>(op))
      ok = checkStream(w, w.getStream());
    if (failed(ok))
      return failure();
  }
  return success();
}

LogicalResult ParamOp::verify() {
  if (getName().empty())
    return emitOpError("needs a non-empty name");
  static const char *const kInits[] = {"zeros", "ones", "normal", "uniform"};
  if (!llvm::is_contained(kInits, getInit()))
    return emitOpError("unknown initializer '") << getInit() << "'";
  if (failed(verifySharding(*this, getShardingAttr(), getGlobalShapeAttr(), getType())))
    return failure();
  if (std::optional<ElementsAttr> value = getValue()) {
    auto type = getType();
    ArrayRef<int64_t> expected =
        getGlobalShape() ? *getGlobalShape() : type.getShape();
    if (value->getShapedType().getShape() != expected ||
        value->getElementType() != type.getElementType())
      return emitOpError("value of type ")
             << value->getType() << " does not match the buffer " << type;
  }
  return success();
}

LogicalResult AliasOp::verify() {
  if (bufferBytes(getSource().getType()) != bufferBytes(getType()))
    return emitOpError("aliases ")
           << bufferBytes(getSource().getType()) << " bytes as "
           << bufferBytes(getType()) << " bytes";
  return success();
}

LogicalResult KernelOp::verify() {
  std::optional<KernelArity> arity = lookupKernel(getKernel());
  if (!arity)
    return emitOpError("unknown kernel '") << getKernel() << "'";
  int64_t numInputs = getInputs().size(), numOutputs = getOutputs().size();
  // The FP8 scale epilogue (KernelList.h): one rank-0 f32 output per entry
  // of fp8_scale_of, after the kernel's own.
  if (auto scaleOf = getAttrs().getAs<DenseI64ArrayAttr>(kFp8ScaleOfAttr)) {
    const int64_t extra = scaleOf.size();
    if (extra == 0 || extra >= numOutputs)
      return emitOpError("fp8_scale_of lists ")
             << extra << " outputs of a kernel with " << numOutputs << " outputs in all";
    for (int64_t i : scaleOf.asArrayRef())
      if (i < 0 || i >= numOutputs - extra)
        return emitOpError("fp8_scale_of names output ")
               << i << ", not one of the kernel's " << numOutputs - extra;
    for (Value v : getOutputs().take_back(extra)) {
      auto t = dyn_cast<MemRefType>(v.getType());
      if (!t || t.getRank() != 0 || !t.getElementType().isF32())
        return emitOpError("an FP8 scale epilogue output must be memref<f32>, got ") << v.getType();
    }
    if (!getAttrs().getAs<StringAttr>(kFp8FormatAttr))
      return emitOpError("fp8_scale_of needs fp8_format");
    numOutputs -= extra;
  }
  if (numInputs < arity->minInputs ||
      (arity->maxInputs >= 0 && numInputs > arity->maxInputs))
    return emitOpError("kernel '")
           << getKernel() << "' takes " << arity->minInputs << " to "
           << (arity->maxInputs < 0 ? std::string("any number of")
                                    : std::to_string(arity->maxInputs))
           << " inputs, got " << numInputs;
  if ((arity->numOutputs >= 0 && numOutputs != arity->numOutputs) ||
      numOutputs == 0)
    return emitOpError("kernel '")
           << getKernel() << "' writes "
           << (arity->numOutputs < 0 ? std::string("one or more")
                                     : std::to_string(arity->numOutputs))
           << " outputs, got " << numOutputs;
  std::vector<std::pair<std::string_view, AttrKind>> kinds;
  for (NamedAttribute attr : getAttrs()) {
    Attribute v = attr.getValue();
    std::optional<AttrKind> kind =
        isa<IntegerAttr>(v)          ? std::optional(AttrKind::Int)
        : isa<FloatAttr>(v)          ? std::optional(AttrKind::F64)
        : isa<StringAttr>(v)         ? std::optional(AttrKind::Str)
        : isa<DenseI64ArrayAttr>(v)  ? std::optional(AttrKind::Ints)
        : isa<DenseF64ArrayAttr>(v)  ? std::optional(AttrKind::F64s)
                                     : std::nullopt;
    if (!kind)
      return emitOpError("kernel attribute '")
             << attr.getName().getValue()
             << "' must be an integer, float, string or i64/f64 array, got "
             << v;
    kinds.emplace_back(attr.getName().strref(), *kind);
  }
  // The kernel's attribute schema (its contract in the nn dialect's ODS).
  std::string problem = checkKernelAttrs(*findKernel(getKernel().str()), kinds);
  if (!problem.empty())
    return emitOpError("kernel '") << getKernel() << "': " << problem;
  if (getKernelId() == KernelId::Fused)
    return verifyFusedBody();
  return success();
}

/// A fusion group's call: its body parses, and the call's buffers are the
/// types the body reads and yields.
LogicalResult KernelOp::verifyFusedBody() {
  auto text = dyn_cast_or_null<StringAttr>(getAttrs().get("body"));
  if (!text)
    return emitOpError("kernel 'nn.fused' needs its body (string attribute 'body')");
  llvm::Expected<FusedBody> body = parseFusedBody(text.getValue());
  if (!body)
    return emitOpError("kernel 'nn.fused': body: ") << llvm::toString(body.takeError());
  auto typesOf = [&](ValueRange buffers, std::vector<FusedTensorType> &types) -> LogicalResult {
    for (Value buffer : buffers) {
      auto memref = cast<MemRefType>(buffer.getType());
      std::optional<DType> dtype = fusedDType(memref.getElementType());
      if (!dtype)
        return emitOpError("kernel 'nn.fused': buffer of ")
               << memref << " has an element type the runtime has not";
      types.push_back({*dtype, std::vector<int64_t>(memref.getShape().begin(),
                                                    memref.getShape().end())});
    }
    return success();
  };
  std::vector<FusedTensorType> inputs, outputs;
  if (failed(typesOf(getInputs(), inputs)) || failed(typesOf(getOutputs(), outputs)))
    return failure();
  if (std::string problem = checkFusedCall(*body, inputs, outputs); !problem.empty())
    return emitOpError("kernel 'nn.fused': ") << problem;
  return success();
}

LogicalResult CopyOp::verify() {
  if (bufferBytes(getSource().getType()) != bufferBytes(getTarget().getType()))
    return emitOpError("copies ")
           << bufferBytes(getSource().getType()) << " bytes into a buffer of "
           << bufferBytes(getTarget().getType()) << " bytes";
  return success();
}

#define GET_OP_CLASSES
#include "dialects/rt/RtOps.cpp.inc"
