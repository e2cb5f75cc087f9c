// --loom-widen-results: a widening nn.cast of a result that its op can
// write wider (WidenableResultOpInterface) is folded into the op.

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
      auto result = dyn_cast<OpResult>(cast.getInput());
      if (!result || !result.hasOneUse())
        continue;
      auto widenable = dyn_cast<nn::WidenableResultOpInterface>(result.getOwner());
      auto from = dyn_cast<RankedTensorType>(result.getType());
      auto to = dyn_cast<RankedTensorType>(cast.getType());
      if (!widenable || !from || !to || from.getShape() != to.getShape() ||
          !widens(from.getElementType(), to.getElementType()) ||
          !widenable.canWidenResult(result.getResultNumber(), to.getElementType()))
        continue;
      result.setType(to);
      cast.getResult().replaceAllUsesWith(result);
      cast->erase();
    }
  }
};

} // namespace
} // namespace loom
