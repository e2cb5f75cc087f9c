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
  LOOM_RETURN_IF_ERROR(checkRank(logits, "logits", 2));
  LOOM_RETURN_IF_ERROR(checkRank(labels, "labels", 1));
  if (labels.dtype != DType::I32 && labels.dtype != DType::I64)
    return kernelError(llvm::Twine("labels dtype is ") + dtypeName(labels.dtype) +
                       ", expected i32 or i64");
  if (out.dtype != DType::F32)
    return kernelError(llvm::Twine("output dtype is ") + dtypeName(out.dtype) +
                       ", expected f32");
  const int64_t rows = logits.shape[0], classes = logits.shape[1];
  if (labels.shape[0] != rows)
    return kernelError("labels shape " + shapeToString(labels.shape) +
                       " does not match logits shape " + shapeToString(logits.shape));
  LOOM_ASSIGN_OR_RETURN(int64_t ignoreIndex, call.attrs.getInt("ignore_index", -100));
  LOOM_ASSIGN_OR_RETURN(std::string reduction,
                        call.attrs.getStr("reduction", std::string("mean")));
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return kernelError("attribute 'reduction' is '" + reduction +
                       "', expected mean, sum or none");
  const std::vector<int64_t> expected =
      reduction == "none" ? std::vector<int64_t>{rows} : std::vector<int64_t>{};
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected) + " for reduction '" + reduction + "'");
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
