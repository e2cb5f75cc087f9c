// FLOP counts of the nn ops (FlopCountOpInterface, NNInterfaces.td): what
// pipeline partitioning balances stages by. GEMMs and attention dominate;
// every other op counts one per result element.

#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace loom::nn;

namespace {

int64_t elements(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t && t.hasStaticShape() ? t.getNumElements() : 0;
}

} // namespace

int64_t FlopCountOpInterface::flopsOf(Operation *op) {
  if (auto counted = dyn_cast<FlopCountOpInterface>(op))
    return counted.getFlops();
  return op->getNumResults() == 0 ? 0 : elements(op->getResult(0).getType());
}

int64_t LinearCrossEntropyOp::getFlops() {
  // Three GEMMs of N x V x H (logits, dx, dw) and the loss's few per logit.
  auto x = cast<RankedTensorType>(getInput().getType());
  auto w = cast<RankedTensorType>(getWeight().getType());
  if (!x.hasStaticShape() || !w.hasStaticShape())
    return 0;
  const int64_t n = x.getDimSize(0), h = x.getDimSize(1), v = w.getDimSize(0);
  return 6 * n * v * h + 5 * n * v;
}

int64_t MatmulOp::getFlops() {
  // A multiply and an add per output element and contracted index.
  auto lhs = getLhs().getType();
  int64_t k = lhs.getDimSize(lhs.getRank() - (getTransposeLhs() ? 2 : 1));
  return 2 * elements(getType()) * k;
}

/// The keys each query sees, on average: the key length (dim 2 of the key,
/// or dim 1 when it is stored sequence-major: seq_major bit 1), half of it
/// under a causal mask over a square score matrix (the kernels skip the
/// masked blocks), at most the window under a sliding window.
static int64_t attentionKeys(Operation *op) {
  auto key = cast<RankedTensorType>(op->getOperand(1).getType());
  int64_t mask = cast<IntegerAttr>(op->getAttr("seq_major")).getInt();
  int64_t keys = key.getDimSize(mask & 2 ? 1 : 2);
  auto windowAttr = dyn_cast_or_null<IntegerAttr>(op->getAttr("window"));
  int64_t window = windowAttr ? windowAttr.getInt() : 0;
  if (window > 0 && window < keys)
    // Rows 0..W-1 see 1..W keys, the rest W each.
    return (window * (window + 1) / 2 + (keys - window) * window) / keys;
  return op->hasAttr("causal") ? (keys + 1) / 2 : keys;
}

int64_t ScaledMatmulOp::getFlops() {
  // A multiply and an add per output element and contracted index.
  return 2 * elements(getType()) * getLhs().getType().getDimSize(1);
}

int64_t AttentionOp::getFlops() {
  // Two GEMMs (q k^T and p v) over every key.
  return 4 * elements(getType()) * attentionKeys(*this);
}

int64_t AttentionWithStatsOp::getFlops() {
  // nn.attention's GEMMs; the statistics are a by-product of its softmax.
  return 4 * elements(getResult().getType()) * attentionKeys(*this);
}

int64_t AttentionGradWithStatsOp::getFlops() {
  // As nn.attention_grad: the saved statistics spare a forward's softmax
  // pass, not the scores (q k^T is formed again), so the count is the same.
  return 10 * elements(getQueryGrad().getType()) * attentionKeys(*this);
}

int64_t AttentionGradOp::getFlops() {
  // The backward recomputes the scores and forms four products: about 2.5
  // forwards (as FlashAttention counts it), of the forward's output
  // (shaped like dq).
  return 10 * elements(getQueryGrad().getType()) * attentionKeys(*this);
}

// A multiply and an add per output element and contracted index, as if
// every row had an expert (rows past the last offset do none).
int64_t GroupedMatmulOp::getFlops() {
  return 2 * elements(getType()) * getInput().getType().getDimSize(1);
}

int64_t GroupedMatmulWeightGradOp::getFlops() {
  auto input = getInput().getType();
  return 2 * input.getDimSize(0) * input.getDimSize(1) * getGrad().getType().getDimSize(1);
}
