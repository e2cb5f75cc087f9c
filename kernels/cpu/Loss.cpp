// nn.cross_entropy: softmax cross-entropy against integer labels, with a
// stable logsumexp in double.

#include "kernels/cpu/KernelSupport.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::cpu::detail {

llvm::Error runCrossEntropy(const KernelCall &call) {
  const Tensor &logits = call.inputs[0], &labels = call.inputs[1];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(CrossEntropyShape s, checkCrossEntropy(logits, labels, out, call.attrs));
  const int64_t rows = s.rows, classes = s.classes, ignoreIndex = s.ignoreIndex;
  const std::string reduction = lossReductionName(s.reduction);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t label = loadInt(labels.data, labels.dtype, r);
    if (label != ignoreIndex && (label < 0 || label >= classes))
      return kernelError("label " + llvm::Twine(label) + " of row " + llvm::Twine(r) +
                         " is outside [0, " + llvm::Twine(classes) +
                         ") and is not ignore_index " + llvm::Twine(ignoreIndex));
  }

  std::vector<double> losses(rows, 0.0);
  LOOM_RETURN_IF_ERROR(dispatchFloat(logits.dtype, "logits", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> xs(logits);
    parallelFor(call.ctx, rows, classes * 25, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t label = loadInt(labels.data, labels.dtype, r);
        if (label == ignoreIndex)
          continue;
        const T *row = xs.data() + r * classes;
        const RowLogSumExp lse = rowLogSumExp(row, classes);
        losses[r] = lse.max + std::log(lse.sum) - static_cast<double>(row[label]);
      }
    });
    return llvm::Error::success();
  }));

  float *result = static_cast<float *>(out.data);
  if (reduction == "none") {
    for (int64_t r = 0; r < rows; ++r)
      result[r] = static_cast<float>(losses[r]);
    return llvm::Error::success();
  }
  double total = 0.0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) { // serial, in row order: deterministic
    if (loadInt(labels.data, labels.dtype, r) == ignoreIndex)
      continue;
    total += losses[r];
    ++counted;
  }
  if (reduction == "mean")
    total = counted == 0 ? 0.0 : total / static_cast<double>(counted);
  result[0] = static_cast<float>(total);
  return llvm::Error::success();
}

} // namespace loom::cpu::detail
