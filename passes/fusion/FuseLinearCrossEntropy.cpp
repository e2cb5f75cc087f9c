// --loom-fuse-linear-cross-entropy: the LM head's GEMM, the cross-entropy
// and their gradients become one nn.linear_cross_entropy, run chunk by chunk
// of rows so that the [N, V] logits never exist whole. See Passes.td.

#include "passes/fusion/Passes.h"

#include "dialects/nn/NNOps.h"
#include "runtime/abi/LinearCrossEntropy.h"

#include "mlir/IR/Builders.h"

#include "llvm/ADT/DenseMap.h"

namespace loom {
#define GEN_PASS_DEF_FUSELINEARCROSSENTROPY
#include "passes/fusion/Passes.h.inc"
} // namespace loom

using namespace mlir;

namespace loom {
namespace {

/// `v` with the reshapes that made it looked through.
Value throughReshapes(Value v) {
  while (auto reshape = v.getDefiningOp<nn::ReshapeOp>())
    v = reshape.getInput();
  return v;
}

/// The ops reading `v`, looking through reshapes (which go to `reshapes`).
void readersThroughReshapes(Value v, SmallVectorImpl<Operation *> &readers,
                            SmallVectorImpl<Operation *> &reshapes) {
  for (Operation *user : v.getUsers()) {
    if (auto reshape = dyn_cast<nn::ReshapeOp>(user)) {
      reshapes.push_back(reshape);
      readersThroughReshapes(reshape.getResult(), readers, reshapes);
    } else {
      readers.push_back(user);
    }
  }
}

RankedTensorType tensorType(Value v) { return dyn_cast<RankedTensorType>(v.getType()); }

/// The five ops of one LM head and its loss, as the training step has them.
struct Match {
  nn::MatmulOp head;       // logits = x w^T
  nn::CrossEntropyOp loss; // of the logits
  nn::CrossEntropyGradOp lossGrad;
  nn::MatmulOp inputGrad;  // g w
  nn::MatmulOp weightGrad; // g^T x
  Value x, w;              // x as the head reads it ([..., H])
  SmallVector<Operation *> reshapes;
};

/// Ops' positions in their blocks, numbered before any rewrite (MLIR's own
/// order is renumbered after each insertion: quadratic over thousands of
/// microbatches).
using Order = llvm::DenseMap<Operation *, int64_t>;

std::optional<Match> match(nn::CrossEntropyGradOp lossGrad, const Order &order) {
  Match m;
  m.lossGrad = lossGrad;
  if (lossGrad.getReduction() == nn::LossReduction::none)
    return std::nullopt;
  m.head = throughReshapes(lossGrad.getLogits()).getDefiningOp<nn::MatmulOp>();
  if (!m.head || m.head.getTransposeLhs() || !m.head.getTransposeRhs())
    return std::nullopt;
  m.x = m.head.getLhs();
  m.w = m.head.getRhs();
  RankedTensorType x = tensorType(m.x), w = tensorType(m.w);
  RankedTensorType logits = tensorType(m.head.getResult());
  if (!x || !w || !logits || !x.hasStaticShape() || !w.hasStaticShape() || w.getRank() != 2 ||
      x.getRank() < 2 || x.getElementType() != w.getElementType())
    return std::nullopt;
  // The logits in f32 (--loom-widen-results folded the cast), the gradient
  // in the compute type.
  if (!logits.getElementType().isF32() ||
      tensorType(lossGrad.getResult()).getElementType() != x.getElementType())
    return std::nullopt;

  // The logits feed the loss and its gradient only.
  SmallVector<Operation *> readers;
  readersThroughReshapes(m.head.getResult(), readers, m.reshapes);
  for (Operation *reader : readers) {
    if (reader == lossGrad)
      continue;
    auto loss = dyn_cast<nn::CrossEntropyOp>(reader);
    if (!loss || m.loss || loss.getLogits() != lossGrad.getLogits() ||
        loss.getLabels() != lossGrad.getLabels() ||
        loss.getReduction() != lossGrad.getReduction() ||
        loss.getIgnoreIndex() != lossGrad.getIgnoreIndex())
      return std::nullopt;
    m.loss = loss;
  }
  if (!m.loss || m.loss->getBlock() != lossGrad->getBlock())
    return std::nullopt;

  // The gradient feeds g w and g^T x only.
  readers.clear();
  readersThroughReshapes(lossGrad.getResult(), readers, m.reshapes);
  for (Operation *reader : readers) {
    auto gemm = dyn_cast<nn::MatmulOp>(reader);
    if (!gemm)
      return std::nullopt;
    if (!gemm.getTransposeLhs() && !gemm.getTransposeRhs() && gemm.getRhs() == m.w &&
        !m.inputGrad && gemm.getResult().getType() == x)
      m.inputGrad = gemm;
    else if (gemm.getTransposeLhs() && !gemm.getTransposeRhs() && !m.weightGrad &&
             throughReshapes(gemm.getRhs()) == throughReshapes(m.x) &&
             tensorType(gemm.getRhs()).getRank() == 2 &&
             tensorType(gemm.getResult()).getShape() == w.getShape())
      m.weightGrad = gemm;
    else
      return std::nullopt;
  }
  if (!m.inputGrad || !m.weightGrad)
    return std::nullopt;
  // The fused op stands where the loss was: the loss gradient's seed must
  // already exist there.
  Value seed = lossGrad.getGrad();
  if (Operation *def = seed.getDefiningOp())
    if (def->getBlock() != m.loss->getBlock() || order.lookup(def) >= order.lookup(m.loss))
      return std::nullopt;
  return m;
}

struct FuseLinearCrossEntropyPass
    : impl::FuseLinearCrossEntropyBase<FuseLinearCrossEntropyPass> {
  using FuseLinearCrossEntropyBase::FuseLinearCrossEntropyBase;

  void runOnOperation() override {
    if (chunk < 0) {
      getOperation().emitError("--loom-fuse-linear-cross-entropy: chunk must be 0 (automatic) or "
                               "a positive number of rows, got ")
          << int64_t(chunk);
      return signalPassFailure();
    }
    SmallVector<nn::CrossEntropyGradOp> grads;
    getOperation()->walk([&](nn::CrossEntropyGradOp g) { grads.push_back(g); });
    Order order;
    getOperation()->walk([&](Block *block) {
      int64_t i = 0;
      for (Operation &op : *block)
        order[&op] = i++;
    });
    for (nn::CrossEntropyGradOp g : grads)
      if (std::optional<Match> m = match(g, order))
        rewrite(*m);
  }

  void rewrite(Match &m) {
    RankedTensorType x = tensorType(m.x), w = tensorType(m.w);
    const int64_t h = x.getShape().back(), v = w.getDimSize(0);
    const int64_t n = x.getNumElements() / h;
    const int64_t gradBytes = x.getElementType().getIntOrFloatBitWidth() / 8;
    const int64_t rows = chunk > 0 ? std::min<int64_t>(chunk, n)
                                   : linearCrossEntropyDefaultChunk(n, v, gradBytes);
    OpBuilder b(m.loss);
    Location loc = m.loss.getLoc();
    auto x2Type = RankedTensorType::get({n, h}, x.getElementType());
    Value x2 = m.x;
    if (x != x2Type)
      x2 = b.create<nn::ReshapeOp>(loc, x2Type, m.x);
    auto fused = b.create<nn::LinearCrossEntropyOp>(
        loc,
        TypeRange{m.loss.getType(), x2Type, m.weightGrad.getResult().getType()},
        x2, m.w, m.lossGrad.getLabels(), m.lossGrad.getGrad(), m.lossGrad.getIgnoreIndex(),
        m.lossGrad.getReduction(), rows);
    // The loss's bookkeeping (its microbatch) goes along.
    for (NamedAttribute attr : m.loss->getDiscardableAttrs())
      fused->setAttr(attr.getName(), attr.getValue());
    m.loss.getResult().replaceAllUsesWith(fused.getLoss());
    m.weightGrad.getResult().replaceAllUsesWith(fused.getWeightGrad());
    Value dx = fused.getInputGrad();
    if (dx.getType() != m.inputGrad.getType()) {
      OpBuilder after(m.inputGrad);
      dx = after.create<nn::ReshapeOp>(m.inputGrad.getLoc(), m.inputGrad.getType(), dx);
    }
    m.inputGrad.getResult().replaceAllUsesWith(dx);
    // What made the logits and the gradient is dead now.
    Operation *xReshape = m.weightGrad.getRhs().getDefiningOp<nn::ReshapeOp>();
    SmallVector<Operation *> dead{m.weightGrad, m.inputGrad, m.lossGrad, m.loss};
    for (Operation *reshape : llvm::reverse(m.reshapes))
      dead.push_back(reshape);
    dead.push_back(m.head);
    if (xReshape)
      dead.push_back(xReshape);
    bool erased = true;
    while (erased) {
      erased = false;
      for (Operation *&op : dead)
        if (op && op->use_empty()) {
          op->erase();
          op = nullptr;
          erased = true;
        }
    }
  }
};

} // namespace
} // namespace loom
