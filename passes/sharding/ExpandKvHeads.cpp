// --loom-expand-kv-heads (see Passes.td).

#include "passes/sharding/Passes.h"

#include "dialects/nn/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace loom {
#define GEN_PASS_DEF_EXPANDKVHEADS
#include "passes/sharding/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

struct ExpandKvHeadsPass : public loom::impl::ExpandKvHeadsBase<ExpandKvHeadsPass> {
  using ExpandKvHeadsBase::ExpandKvHeadsBase;

  void runOnOperation() override {
    if (ranks <= 1)
      return;
    OpBuilder b(&getContext());
    getOperation().walk([&](nn::AttentionOp attention) {
      auto q = cast<RankedTensorType>(attention.getQuery().getType());
      auto k = cast<RankedTensorType>(attention.getKey().getType());
      if (q.getRank() != 4 || k.getRank() != 4)
        return;
      const int64_t heads = q.getDimSize(1), kvHeads = k.getDimSize(1);
      if (kvHeads % ranks == 0 || heads % ranks != 0 || heads % kvHeads != 0)
        return;
      // Query head h reads key/value head h / (heads / kvHeads).
      const int64_t group = heads / kvHeads;
      SmallVector<int64_t> which;
      for (int64_t h = 0; h < heads; ++h)
        which.push_back(h / group);
      b.setInsertionPoint(attention);
      Location loc = attention.getLoc();
      auto indexType = RankedTensorType::get({heads}, b.getI64Type());
      Value index = b.create<nn::ConstantOp>(
          loc, DenseElementsAttr::get(indexType, ArrayRef<int64_t>(which)));
      for (OpOperand *operand : {&attention.getKeyMutable(), &attention.getValueMutable()}) {
        auto type = cast<RankedTensorType>(operand->get().getType());
        SmallVector<int64_t> shape(type.getShape());
        shape[1] = heads;
        Value expanded = b.create<nn::GatherOp>(loc, RankedTensorType::get(shape, type.getElementType()),
                                                operand->get(), index, b.getI64IntegerAttr(1));
        operand->set(expanded);
      }
    });
  }
};

} // namespace
