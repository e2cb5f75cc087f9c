// --loom-bind-training-inputs: the inputs beside the token ids that a
// training step gives their no-padding values (see Passes.td).

#include "passes/training/Passes.h"

#include "dialects/loom/LoomDialect.h"
#include "dialects/nn/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/BitVector.h"

namespace loom {
#define GEN_PASS_DEF_BINDTRAININGINPUTS
#include "passes/training/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

/// What a bound input holds at every position of a packed batch.
enum class Binding { Ones, Zeros, Positions };

std::optional<Binding> bindingFor(StringRef name) {
  if (name == "attention_mask")
    return Binding::Ones;
  if (name == "token_type_ids")
    return Binding::Zeros;
  if (name == "position_ids")
    return Binding::Positions;
  return std::nullopt;
}

/// The value `binding` gives an input of `type` (shape [B, S], or [1, S]
/// for positions), or null when the type does not fit.
Value boundValue(OpBuilder &b, Location loc, Binding binding, RankedTensorType type,
                 int64_t seq) {
  Type elem = type.getElementType();
  if (!type.hasStaticShape() || type.getRank() != 2 || type.getDimSize(1) != seq)
    return {};
  if (binding == Binding::Positions) {
    if (!isa<IntegerType>(elem) || elem.isInteger(1))
      return {};
    return b.create<nn::IotaOp>(loc, type, b.getI64IntegerAttr(1), b.getF64FloatAttr(0),
                                b.getF64FloatAttr(1));
  }
  Attribute one, zero;
  if (auto f = dyn_cast<FloatType>(elem)) {
    one = FloatAttr::get(f, 1.0);
    zero = FloatAttr::get(f, 0.0);
  } else if (auto i = dyn_cast<IntegerType>(elem)) {
    one = IntegerAttr::get(i, 1);
    zero = IntegerAttr::get(i, 0);
  } else {
    return {};
  }
  auto splat = DenseElementsAttr::get(type, binding == Binding::Ones ? one : zero);
  return b.create<nn::ConstantOp>(loc, type, splat);
}

struct BindTrainingInputsPass
    : public loom::impl::BindTrainingInputsBase<BindTrainingInputsPass> {
  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func || func.isExternal() || func.getNumArguments() < 2)
      return;
    auto ids = dyn_cast<RankedTensorType>(func.getArgument(0).getType());
    if (!ids || ids.getRank() != 2 || !ids.hasStaticShape())
      return; // BuildTrainingStep names what is wrong with the ids.
    OpBuilder b = OpBuilder::atBlockBegin(&func.getBody().front());
    llvm::BitVector bound(func.getNumArguments());
    for (unsigned i = 1; i < func.getNumArguments(); ++i) {
      auto name = func.getArgAttrOfType<StringAttr>(i, kNameAttr);
      std::optional<Binding> binding = name ? bindingFor(name.getValue()) : std::nullopt;
      if (!binding)
        continue; // BuildTrainingStep refuses it, naming it.
      BlockArgument arg = func.getArgument(i);
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      Value value = type ? boundValue(b, arg.getLoc(), *binding, type, ids.getDimSize(1)) : Value();
      // A value implies [rows, seq]; the rows must be the batch's.
      bool batchFits = value && (type.getDimSize(0) == ids.getDimSize(0) ||
                                 (*binding == Binding::Positions && type.getDimSize(0) == 1));
      if (!batchFits) {
        if (value)
          value.getDefiningOp()->erase();
        func.emitError("training binds input '")
            << name.getValue() << "' to its value for unpadded sequences, which needs "
            << (*binding == Binding::Positions ? "integers [batch or 1, " : "[batch, ")
            << ids.getDimSize(1) << "] like the token ids; it is " << arg.getType();
        return signalPassFailure();
      }
      arg.replaceAllUsesWith(value);
      bound.set(i);
    }
    func.eraseArguments(bound);
  }
};

} // namespace
