// --loom-cast-compute: f32 activations become bf16/f16; parameters stay f32
// masters cast where read (see Passes.td).

#include "passes/training/Passes.h"

#include "dialects/nn/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

namespace loom {
#define GEN_PASS_DEF_CASTCOMPUTE
#define GEN_PASS_DEF_PROMOTEMASTERS
#include "passes/training/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

struct CastComputePass : public loom::impl::CastComputeBase<CastComputePass> {
  using CastComputeBase::CastComputeBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Builder b(module.getContext());
    Type narrow;
    if (type == "bf16")
      narrow = b.getBF16Type();
    else if (type == "f16")
      narrow = b.getF16Type();
    else {
      module.emitError("--loom-cast-compute type must be bf16 or f16, got '") << type << "'";
      return signalPassFailure();
    }
    auto func = module.lookupSymbol<func::FuncOp>("main");
    if (!func) {
      module.emitError("no function @main to cast");
      return signalPassFailure();
    }
    auto narrowed = [&](Type t) -> Type {
      auto tensor = dyn_cast<RankedTensorType>(t);
      if (!tensor || !tensor.getElementType().isF32())
        return {};
      return RankedTensorType::get(tensor.getShape(), narrow);
    };
    OpBuilder builder(module.getContext());
    Block &body = func.getBody().front();

    // Values that stay f32 (arguments, parameters, constants) are read
    // through one cast each.
    auto castUses = [&](Value v, Operation *after) {
      Type target = narrowed(v.getType());
      if (!target || v.use_empty())
        return;
      if (after)
        builder.setInsertionPointAfter(after);
      else
        builder.setInsertionPointToStart(&body);
      auto cast = builder.create<nn::CastOp>(v.getLoc(), target, v);
      v.replaceAllUsesExcept(cast.getResult(), cast);
    };
    for (BlockArgument arg : func.getArguments())
      castUses(arg, nullptr);
    SmallVector<Operation *> ops;
    for (Operation &op : body)
      ops.push_back(&op);
    for (Operation *op : ops) {
      if (isa<nn::ParameterOp, nn::ConstantOp>(op)) {
        castUses(op->getResult(0), op);
        continue;
      }
      // Ops whose result precision is their meaning (casts, losses and
      // their statistics) keep it; every other f32 result narrows.
      if (op->hasTrait<nn::OpTrait::KeepsResultPrecision>())
        continue;
      bool narrows = false;
      for (Value r : op->getResults())
        if (Type t = narrowed(r.getType())) {
          r.setType(t);
          narrows = true;
        }
      // An f32 operand that stays f32 (a value an op above kept, such as
      // an explicit cast to f32) is read through a cast where this op's
      // results narrow, so operands and results agree.
      if (!narrows || isa<nn::CastOp>(op))
        continue;
      for (OpOperand &operand : op->getOpOperands()) {
        Type t = narrowed(operand.get().getType());
        if (!t)
          continue;
        builder.setInsertionPoint(op);
        operand.set(builder.create<nn::CastOp>(op->getLoc(), t, operand.get()));
      }
    }
    // Casts the pass made of values that were already narrow fold away.
    for (Operation *op : ops)
      if (auto cast = dyn_cast<nn::CastOp>(op); cast && cast.getInput().getType() == cast.getType()) {
        cast.getResult().replaceAllUsesWith(cast.getInput());
        cast.erase();
      }
    // Results keep the function's declared types.
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    builder.setInsertionPoint(ret);
    for (OpOperand &operand : ret->getOpOperands()) {
      Type declared = func.getResultTypes()[operand.getOperandNumber()];
      if (operand.get().getType() != declared)
        operand.set(builder.create<nn::CastOp>(ret.getLoc(), declared, operand.get()));
    }
    if (failed(verify(func)))
      return signalPassFailure();
  }
};

struct PromoteMastersPass : public loom::impl::PromoteMastersBase<PromoteMastersPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("main");
    if (!func || func.isExternal())
      return;
    OpBuilder builder(module.getContext());
    Type f32 = builder.getF32Type();
    SmallVector<nn::ParameterOp> narrow;
    func.walk([&](nn::ParameterOp p) {
      auto type = dyn_cast<RankedTensorType>(p.getType());
      if (!p.getFrozen() && type && (type.getElementType().isBF16() || type.getElementType().isF16()))
        narrow.push_back(p);
    });
    for (nn::ParameterOp p : narrow) {
      auto type = cast<RankedTensorType>(p.getType());
      auto master = RankedTensorType::get(type.getShape(), f32);
      if (std::optional<ElementsAttr> value = p.getValue()) {
        auto dense = dyn_cast<DenseElementsAttr>(*value);
        if (!dense) {
          p.emitOpError("is ") << type.getElementType()
              << " with a value that cannot be widened to an f32 master weight (not dense "
                 "elements); compile the model in f32";
          return signalPassFailure();
        }
        // Every bf16 or f16 value is exactly an f32.
        p.setValueAttr(dense.mapValues(f32, [](const APFloat &x) {
          APFloat wide = x;
          bool lost = false;
          wide.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven, &lost);
          return wide.bitcastToAPInt();
        }));
      }
      p.getResult().setType(master);
      builder.setInsertionPointAfter(p);
      auto cast = builder.create<nn::CastOp>(p.getLoc(), type, p.getResult());
      p.getResult().replaceAllUsesExcept(cast.getResult(), cast);
    }
    if (failed(verify(func)))
      return signalPassFailure();
  }
};

} // namespace
