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

// nn.linear_cross_entropy: the LM head's GEMM and the loss, forward and
// backward, chunk by chunk of rows. Each part is the kernel the unfused
// program runs, on the chunk's rows: every logit, loss, gradient and input
// gradient element is computed exactly as there. The weight gradient
// continues one f32 sum per element across chunks, in row order, as the
// unfused GEMM's (which accumulates in increasing k from zero), so it too is
// bitwise the same.
namespace loom::cpu::detail {

llvm::Error runLinearCrossEntropy(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(LinearCrossEntropyShape s,
                        checkLinearCrossEntropy(call.inputs, call.outputs, call.attrs));
  const Tensor &x = call.inputs[0], &w = call.inputs[1], &labels = call.inputs[2];
  const Tensor &lossGrad = call.inputs[3];
  const Tensor &loss = call.outputs[0], &dx = call.outputs[1], &dw = call.outputs[2];
  const int64_t rows = s.ce.rows, classes = s.ce.classes, features = s.features;
  const int64_t ignoreIndex = s.ce.ignoreIndex;
  LOOM_ASSIGN_OR_RETURN(int64_t counted, countLabels(labels, rows, classes, ignoreIndex));
  const std::string reduction = lossReductionName(s.ce.reduction);
  const LossRowWeight rowWeight{static_cast<const float *>(lossGrad.data), reduction, counted};
  const double weight = rowWeight(0);

  float *scratch = static_cast<float *>(call.outputs[3].data);
  auto rowsOf = [](const Tensor &t, int64_t first, int64_t count, int64_t cols, void *base) {
    Tensor view;
    view.dtype = t.dtype;
    view.shape = {count, cols};
    view.data = static_cast<char *>(base) + first * cols * dtypeSize(t.dtype);
    return view;
  };
  // dw's running f32 sums: dw itself when it is f32, else the scratch's.
  float *sums = dw.dtype == DType::F32 ? static_cast<float *>(dw.data) : scratch + s.scratch.sums;
  std::fill(sums, sums + classes * features, 0.0f);
  std::vector<double> losses(rows, 0.0);
  KernelAttrs transposeRhs;
  transposeRhs.set("transpose_rhs", int64_t(1));
  for (int64_t first = 0; first < rows; first += s.chunk) {
    const int64_t count = std::min(s.chunk, rows - first);
    Tensor xc = rowsOf(x, first, count, features, x.data);
    Tensor logits{scratch + s.scratch.logits, DType::F32, {count, classes}};
    LOOM_RETURN_IF_ERROR(runKernel(KernelId::Matmul, {xc, w}, {logits}, transposeRhs, call.ctx));
    Tensor grad{scratch + s.scratch.grad, x.dtype, {count, classes}};
    const float *ls = static_cast<const float *>(logits.data);
    parallelFor(call.ctx, count, classes * 25, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t r = first + i;
        const int64_t label = loadInt(labels.data, labels.dtype, r);
        const float *row = ls + i * classes;
        if (label == ignoreIndex) {
          for (int64_t c = 0; c < classes; ++c)
            storeFromDouble(grad.data, grad.dtype, i * classes + c, 0.0);
          continue;
        }
        const RowLogSumExp lse = rowLogSumExp(row, classes);
        losses[r] = lse.max + std::log(lse.sum) - static_cast<double>(row[label]);
        for (int64_t c = 0; c < classes; ++c) {
          const double p = std::exp(static_cast<double>(row[c]) - lse.max) / lse.sum;
          storeFromDouble(grad.data, grad.dtype, i * classes + c,
                          weight * (p - (c == label ? 1.0 : 0.0)));
        }
      }
    });
    Tensor dxc = rowsOf(dx, first, count, features, dx.data);
    LOOM_RETURN_IF_ERROR(runKernel(KernelId::Matmul, {grad, w}, {dxc}, KernelAttrs(), call.ctx));
    // dw[v, k] += sum over the chunk's rows r, in order, of g[r, v] x[r, k].
    InputArray<float> g(grad), xs(xc);
    parallelFor(call.ctx, classes, count * features * 2, [&](int64_t begin, int64_t end) {
      for (int64_t v = begin; v < end; ++v) {
        float *out = sums + v * features;
        for (int64_t i = 0; i < count; ++i) {
          const float a = g[i * classes + v];
          const float *xr = xs.data() + i * features;
          for (int64_t k = 0; k < features; ++k)
            out[k] += a * xr[k];
        }
      }
    });
  }
  if (dw.dtype != DType::F32)
    storeFloats(dw.data, dw.dtype, 0, classes * features, sums);

  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) // serial, in row order, as nn.cross_entropy
    if (loadInt(labels.data, labels.dtype, r) != ignoreIndex)
      total += losses[r];
  if (s.ce.reduction == LossReduction::Mean)
    total = counted == 0 ? 0.0 : total / static_cast<double>(counted);
  static_cast<float *>(loss.data)[0] = static_cast<float>(total);
  return llvm::Error::success();
}

} // namespace loom::cpu::detail
