#include "dialects/loom/LoomDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace loom;

#include "dialects/loom/LoomDialect.cpp.inc"
#include "dialects/loom/LoomEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/loom/LoomAttrs.cpp.inc"

void LoomDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/loom/LoomAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

namespace {

LogicalResult verifyNonEmptyString(Operation *op, NamedAttribute attr) {
  auto s = dyn_cast<StringAttr>(attr.getValue());
  if (!s || s.getValue().empty())
    return op->emitOpError("'") << attr.getName().getValue()
                                << "' must be a non-empty string, got " << attr.getValue();
  return success();
}

} // namespace

/// `loom.row_groups`: a positive i64.
static LogicalResult verifyRowGroups(Operation *op, NamedAttribute attr) {
  auto groups = dyn_cast<IntegerAttr>(attr.getValue());
  if (!groups || !groups.getType().isSignlessInteger(64) || groups.getInt() < 1)
    return op->emitOpError("'") << attr.getName().getValue() << "' must be a positive i64, got "
                                << attr.getValue();
  return success();
}

LogicalResult LoomDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute value = attr.getValue();
  if (name == kMicrobatchAttr) {
    auto mb = dyn_cast<IntegerAttr>(value);
    if (!mb || !mb.getType().isSignlessInteger(64) || mb.getInt() < 0)
      return op->emitOpError("'") << name << "' must be a non-negative i64, got " << value;
    return success();
  }
  if (name == kBackwardAttr) {
    if (!isa<BackwardKindAttr>(value))
      return op->emitOpError("'") << name
                                  << "' must be #loom.backward<weight> or #loom.backward<input>, got "
                                  << value;
    return success();
  }
  if (name == kStreamAttr)
    return verifyNonEmptyString(op, attr);
  if (name == kHostCopyAttr) {
    if (!isa<UnitAttr>(value))
      return op->emitOpError("'") << name << "' must be a unit attribute, got " << value;
    return success();
  }
  if (name == kMemoryAttr) {
    auto text = dyn_cast<StringAttr>(value);
    if (!text || !llvm::is_contained(kMemoryCategories, text.getValue()))
      return op->emitOpError("'") << name << "' must name a memory category (activation, "
                                  << "activation_grad, weight_grad, workspace, communication, "
                                  << "step), got " << value;
    return success();
  }
  if (name == kRowGroupsAttrName)
    return verifyRowGroups(op, attr);
  if (name == kVocabSizeAttr) {
    auto vocab = dyn_cast<IntegerAttr>(value);
    if (!isa<mlir::ModuleOp>(op) || !vocab || !vocab.getType().isSignlessInteger(64) ||
        vocab.getInt() < 1)
      return op->emitOpError("'") << name << "' must be a positive i64 on a module, got " << value;
    return success();
  }
  if (name == kNameAttr || name == kUpdatesAttr)
    return op->emitOpError("'") << name
                                << "' belongs on a function's arguments or results, not on an op";
  return op->emitOpError("has an unknown loom attribute '") << name << "'";
}

LogicalResult LoomDialect::verifyRegionArgAttribute(Operation *op, unsigned, unsigned argIndex,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kNameAttr)
    return verifyNonEmptyString(op, attr);
  if (name == kRowGroupsAttrName)
    return verifyRowGroups(op, attr);
  return op->emitOpError("argument ") << argIndex << " has '" << name
                                      << "', which is not a loom argument attribute "
                                         "(only loom.name and loom.row_groups are)";
}

LogicalResult LoomDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                       unsigned resultIndex,
                                                       NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kNameAttr || name == kUpdatesAttr)
    return verifyNonEmptyString(op, attr);
  return op->emitOpError("result ") << resultIndex << " has '" << name
                                    << "', which is not a loom result attribute "
                                       "(only loom.name and loom.updates are)";
}

//===----------------------------------------------------------------------===//
// Accessors
//===----------------------------------------------------------------------===//

StringAttr loom::getArgName(FunctionOpInterface fn, unsigned i) {
  return fn.getArgAttrOfType<StringAttr>(i, kNameAttr);
}

StringAttr loom::getResultName(FunctionOpInterface fn, unsigned i) {
  return fn.getResultAttrOfType<StringAttr>(i, kNameAttr);
}

void loom::setArgName(FunctionOpInterface fn, unsigned i, StringRef name) {
  fn.setArgAttr(i, kNameAttr, StringAttr::get(fn->getContext(), name));
}

void loom::setResultName(FunctionOpInterface fn, unsigned i, StringRef name) {
  fn.setResultAttr(i, kNameAttr, StringAttr::get(fn->getContext(), name));
}

void loom::setResultUpdates(FunctionOpInterface fn, unsigned i, StringRef input) {
  fn.setResultAttr(i, kUpdatesAttr, StringAttr::get(fn->getContext(), input));
}

std::optional<int64_t> loom::getMicrobatch(Operation *op) {
  if (auto mb = op->getAttrOfType<IntegerAttr>(kMicrobatchAttr))
    return mb.getInt();
  return std::nullopt;
}

void loom::setMicrobatch(Operation *op, int64_t microbatch) {
  op->setAttr(kMicrobatchAttr, Builder(op->getContext()).getI64IntegerAttr(microbatch));
}

std::optional<BackwardKind> loom::getBackwardKind(Operation *op) {
  if (auto kind = op->getAttrOfType<BackwardKindAttr>(kBackwardAttr))
    return kind.getValue();
  return std::nullopt;
}

bool loom::isBackward(Operation *op) { return getBackwardKind(op).has_value(); }

void loom::setBackwardKind(Operation *op, BackwardKind kind) {
  op->setAttr(kBackwardAttr, BackwardKindAttr::get(op->getContext(), kind));
}

StringAttr loom::getStream(Operation *op) { return op->getAttrOfType<StringAttr>(kStreamAttr); }

void loom::setStream(Operation *op, StringRef stream) {
  op->setAttr(kStreamAttr, StringAttr::get(op->getContext(), stream));
}

bool loom::isHostCopy(Operation *op) { return op->hasAttrOfType<UnitAttr>(kHostCopyAttr); }
