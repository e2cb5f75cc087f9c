#include "dialects/nn/NNDialect.h"
#include "dialects/nn/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace loom::nn;

#include "dialects/nn/NNDialect.cpp.inc"
#include "dialects/nn/NNEnums.cpp.inc"
#include "dialects/nn/NNInterfaces.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/nn/NNAttrs.cpp.inc"

void NNDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/nn/NNAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/nn/NNOps.cpp.inc"
      >();
}

Operation *NNDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                          Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, elements);
}
