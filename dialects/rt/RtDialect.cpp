#include "dialects/rt/RtDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace loom::rt;

#include "dialects/rt/RtDialect.cpp.inc"

void RtDialect::initialize() {
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
  static const llvm::StringMap<KernelArity> kernels = {
#define LOOM_KERNEL(NAME, MIN_IN, MAX_IN, NUM_OUT)                             \
  {NAME, KernelArity{MIN_IN, MAX_IN, NUM_OUT}},
#include "runtime/executable/Kernels.def"
#undef LOOM_KERNEL
  };
  auto it = kernels.find(name);
  if (it == kernels.end())
    return std::nullopt;
  return it->second;
}

Value loom::rt::rootBuffer(Value buffer) {
  while (auto alias = buffer.getDefiningOp<AliasOp>())
    buffer = alias.getSource();
  return buffer;
}

bool loom::rt::isPersistent(Value root) {
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

LogicalResult ProgramOp::verify() {
  if (getStreams().empty())
    return emitOpError("needs at least one stream");
  // getRank() is unsigned (I64Attr): read the attribute's signed value.
  if (getRankAttr().getInt() < 0)
    return emitOpError("rank must be non-negative");
  if (std::optional<ArrayRef<int64_t>> sizes = getArenaSizes())
    if (sizes->size() != 2)
      return emitOpError("arena_sizes holds [persistent, scratch], got ")
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
  if (std::optional<ElementsAttr> value = getValue()) {
    auto type = getType();
    if (value->getShapedType().getShape() != type.getShape() ||
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
  for (NamedAttribute attr : getAttrs()) {
    Attribute v = attr.getValue();
    bool ok = isa<IntegerAttr, FloatAttr, StringAttr, DenseI64ArrayAttr,
                  DenseF64ArrayAttr>(v);
    if (!ok)
      return emitOpError("kernel attribute '")
             << attr.getName().getValue()
             << "' must be an integer, float, string or i64/f64 array, got "
             << v;
  }
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
