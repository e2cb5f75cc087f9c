// --loom-share-casts: one nn.cast per value and type in a block. A training
// step unrolled over microbatches casts every master weight to the compute
// type once per microbatch (each copy tagged with its microbatch, so CSE
// keeps them apart); the casts after the first read the same f32 weights
// and write the same bf16 values. See Passes.td.

#include "passes/fusion/Passes.h"

#include "dialects/nn/NNOps.h"

#include "llvm/ADT/DenseMap.h"

namespace loom {
#define GEN_PASS_DEF_SHARECASTS
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

struct ShareCastsPass : impl::ShareCastsBase<ShareCastsPass> {
  void runOnOperation() override {
    SmallVector<Block *> blocks;
    getOperation()->walk([&](Block *block) { blocks.push_back(block); });
    for (Block *block : blocks) {
      llvm::DenseMap<std::pair<Value, Type>, nn::CastOp> first;
      for (Operation &op : llvm::make_early_inc_range(*block)) {
        auto cast = dyn_cast<nn::CastOp>(op);
        if (!cast)
          continue;
        auto [it, fresh] = first.try_emplace({cast.getInput(), cast.getType()}, cast);
        if (fresh)
          continue;
        cast.getResult().replaceAllUsesWith(it->second.getResult());
        cast->erase();
      }
    }
  }
};

} // namespace
} // namespace loom
