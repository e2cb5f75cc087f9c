// --loom-raise-silu (see Passes.td).

#include "frontend/raising/Passes.h"
#include "frontend/raising/PatternMatchers.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace loom {
#define GEN_PASS_DEF_RAISESILU
#include "frontend/raising/Passes.h.inc"
} // namespace loom

using namespace mlir;
using namespace loom;

namespace {

struct SiluFromSigmoid : OpRewritePattern<nn::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(nn::MulOp mul, PatternRewriter &rewriter) const override {
    for (auto [x, s] : {std::pair{mul.getLhs(), mul.getRhs()},
                        std::pair{mul.getRhs(), mul.getLhs()}}) {
      auto sigmoid = s.getDefiningOp<nn::SigmoidOp>();
      if (!sigmoid || sigmoid.getInput() != x || x.getType() != mul.getType())
        continue;
      rewriter.replaceOpWithNewOp<nn::SiluOp>(mul, x.getType(), x);
      return success();
    }
    return failure();
  }
};

struct RaiseSiluPass : public loom::impl::RaiseSiluBase<RaiseSiluPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<SiluFromSigmoid>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
