// --loom-widen-results: a widening nn.cast of a result that its op can
// write wider (WidenableResultOpInterface) is folded into the op, and so is
// a narrowing one its op can write narrower (a loss gradient in bf16).

#include "passes/fusion/Passes.h"

#include "dialects/nn/NNOps.h"

namespace loom {
#define GEN_PASS_DEF_WIDENRESULTS
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

/// Whether `to` is a float type strictly wider than `from`.
bool widens(Type from, Type to) {
  auto f = dyn_cast<FloatType>(from), t = dyn_cast<FloatType>(to);
  return f && t && t.getWidth() > f.getWidth();
}

struct WidenResultsPass : impl::WidenResultsBase<WidenResultsPass> {
  void runOnOperation() override {
    SmallVector<nn::CastOp> casts;
    getOperation()->walk([&](nn::CastOp cast) { casts.push_back(cast); });
    for (nn::CastOp cast : casts) {
      // The cast's input, through single-use reshapes, to the op making it.
      SmallVector<nn::ReshapeOp> reshapes;
      Value input = cast.getInput();
      while (auto reshape = input.getDefiningOp<nn::ReshapeOp>()) {
        if (!input.hasOneUse())
          break;
        reshapes.push_back(reshape);
        input = reshape.getInput();
      }
      auto result = dyn_cast<OpResult>(input);
      if (!result || !result.hasOneUse())
        continue;
      auto widenable = dyn_cast<nn::WidenableResultOpInterface>(result.getOwner());
      auto from = dyn_cast<RankedTensorType>(result.getType());
      auto to = dyn_cast<RankedTensorType>(cast.getType());
      if (!widenable || !from || !to)
        continue;
      Type elementType = to.getElementType();
      bool fold = widens(from.getElementType(), elementType)
                      ? widenable.canWidenResult(result.getResultNumber(), elementType)
                      : widens(elementType, from.getElementType()) &&
                            widenable.canNarrowResult(result.getResultNumber(), elementType);
      if (!fold)
        continue;
      result.setType(from.clone(elementType));
      for (nn::ReshapeOp reshape : llvm::reverse(reshapes))
        reshape.getResult().setType(
            llvm::cast<RankedTensorType>(reshape.getType()).clone(elementType));
      cast.getResult().replaceAllUsesWith(cast.getInput());
      cast->erase();
    }
  }
};

} // namespace
} // namespace loom
