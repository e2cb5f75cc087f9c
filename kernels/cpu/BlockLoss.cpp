// The vocabulary-parallel cross-entropy: each rank's block of classes gives
// per-row statistics (cross_entropy_stats); the blocks' statistics, side by
// side, give the loss (cross_entropy_combine) and each block's gradient
// (cross_entropy_block_grad). The loss is nn.cross_entropy's up to the
// rounding of the statistics to f32.

#include "kernels/cpu/KernelSupport.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::cpu::detail {

namespace {

/// A row's whole softmax from its blocks' statistics: the largest logit M
/// and the normalizer S = sum of exp(x - M); `target` the label's logit.
struct RowSoftmax {
  double max, sum, target;
};

RowSoftmax combineRow(const float *row, int64_t blocks) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < blocks; ++b)
    m = std::max(m, static_cast<double>(row[3 * b]));
  RowSoftmax out{m, 0.0, 0.0};
  for (int64_t b = 0; b < blocks; ++b) {
    out.sum += static_cast<double>(row[3 * b + 1]) * std::exp(row[3 * b] - m);
    out.target += row[3 * b + 2];
  }
  return out;
}

} // namespace

llvm::Error runCrossEntropyStats(const KernelCall &call) {
  const Tensor &logits = call.inputs[0], &labels = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(BlockLossShape b, checkCrossEntropyStats(logits, labels, out, call.attrs));
  const int64_t rows = b.ce.rows, classes = b.ce.classes;
  const int64_t start = b.vocabStart, ignoreIndex = b.ce.ignoreIndex;
  float *result = static_cast<float *>(out.data);
  return dispatchFloat(logits.dtype, "logits", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> xs(logits);
    parallelFor(call.ctx, rows, classes * 25, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T *row = xs.data() + r * classes;
        const RowLogSumExp lse = rowLogSumExp(row, classes);
        const int64_t label = loadInt(labels.data, labels.dtype, r);
        const int64_t local = label - start;
        const bool here = label != ignoreIndex && local >= 0 && local < classes;
        result[3 * r] = static_cast<float>(lse.max);
        result[3 * r + 1] = static_cast<float>(lse.sum);
        result[3 * r + 2] = here ? static_cast<float>(row[local]) : 0.0f;
      }
    });
    return llvm::Error::success();
  });
}

llvm::Error runCrossEntropyCombine(const KernelCall &call) {
  const Tensor &stats = call.inputs[0], &labels = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(BlockLossShape b, checkCrossEntropyCombine(stats, labels, out, call.attrs));
  const int64_t rows = b.ce.rows, ignoreIndex = b.ce.ignoreIndex, classes = b.numClasses;
  const std::string reduction = lossReductionName(b.ce.reduction);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t label = loadInt(labels.data, labels.dtype, r);
    if (label != ignoreIndex && (label < 0 || label >= classes))
      return kernelError("label " + llvm::Twine(label) + " of row " + llvm::Twine(r) +
                         " is outside [0, " + llvm::Twine(classes) +
                         ") and is not ignore_index " + llvm::Twine(ignoreIndex));
  }
  const int64_t blocks = b.blocks;
  const float *s = static_cast<const float *>(stats.data);
  float *result = static_cast<float *>(out.data);
  double total = 0.0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) { // in row order: deterministic
    const bool ignored = loadInt(labels.data, labels.dtype, r) == ignoreIndex;
    double loss = 0.0;
    if (!ignored) {
      RowSoftmax row = combineRow(s + r * 3 * blocks, blocks);
      loss = row.max + std::log(row.sum) - row.target;
      total += loss;
      ++counted;
    }
    if (reduction == "none")
      result[r] = static_cast<float>(loss);
  }
  if (reduction == "mean")
    total = counted == 0 ? 0.0 : total / static_cast<double>(counted);
  if (reduction != "none")
    result[0] = static_cast<float>(total);
  return llvm::Error::success();
}

llvm::Error runCrossEntropyBlockGrad(const KernelCall &call) {
  const Tensor &logits = call.inputs[0], &labels = call.inputs[1];
  const Tensor &lossGrad = call.inputs[2], &stats = call.inputs[3], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(BlockLossShape b, checkCrossEntropyBlockGrad(logits, labels, lossGrad,
                                                                    stats, out, call.attrs));
  const int64_t rows = b.ce.rows, classes = b.ce.classes;
  const int64_t start = b.vocabStart, ignoreIndex = b.ce.ignoreIndex;
  const std::string reduction = lossReductionName(b.ce.reduction);
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r)
    counted += loadInt(labels.data, labels.dtype, r) != ignoreIndex;
  const LossRowWeight rowWeight{static_cast<const float *>(lossGrad.data), reduction, counted};
  const int64_t blocks = b.blocks;
  const float *s = static_cast<const float *>(stats.data);
  return dispatchFloat(logits.dtype, "logits", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> xs(logits);
    parallelFor(call.ctx, rows, classes * 25, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t label = loadInt(labels.data, labels.dtype, r);
        if (label == ignoreIndex) {
          for (int64_t c = 0; c < classes; ++c)
            storeFromDouble(out.data, out.dtype, r * classes + c, 0.0);
          continue;
        }
        const T *row = xs.data() + r * classes;
        RowSoftmax softmax = combineRow(s + r * 3 * blocks, blocks);
        const double weight = rowWeight(r);
        for (int64_t c = 0; c < classes; ++c) {
          const double p = std::exp(static_cast<double>(row[c]) - softmax.max) / softmax.sum;
          storeFromDouble(out.data, out.dtype, r * classes + c,
                          weight * (p - (c + start == label ? 1.0 : 0.0)));
        }
      }
    });
    return llvm::Error::success();
  });
}

} // namespace loom::cpu::detail
