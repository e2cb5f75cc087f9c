// layer_norm and rms_norm over the last dim; statistics in double.

#include "kernels/cpu/KernelSupport.h"
#include "runtime/abi/NormWeightGrad.h"

#include <cmath>

namespace loom::cpu::detail {

llvm::Error runLayerNorm(const KernelCall &call) {
  const Tensor &x = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(NormPlan plan, checkNorm(call.id, call.inputs, out, call.attrs));
  const int64_t features = plan.features;
  const double epsilon = plan.epsilon;
  const Tensor *weight = plan.weight, *bias = plan.bias;
  return dispatchFloat(x.dtype, "input", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> xs(x);
    std::optional<InputArray<T>> ws, bs;
    if (weight)
      ws.emplace(*weight);
    if (bias)
      bs.emplace(*bias);
    const int64_t rows = features == 0 ? 0 : x.numElements() / features;
    parallelFor(call.ctx, rows, features * 8, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T *in = xs.data() + row * features;
        double sum = 0.0;
        for (int64_t d = 0; d < features; ++d)
          sum += in[d];
        const double mean = sum / static_cast<double>(features);
        double squares = 0.0;
        for (int64_t d = 0; d < features; ++d) {
          const double centered = in[d] - mean;
          squares += centered * centered;
        }
        const double variance = squares / static_cast<double>(features); // biased
        const double invStd = 1.0 / std::sqrt(variance + epsilon);
        for (int64_t d = 0; d < features; ++d) {
          double y = (in[d] - mean) * invStd;
          if (ws)
            y *= static_cast<double>((*ws)[d]);
          if (bs)
            y += static_cast<double>((*bs)[d]);
          storeFromDouble(out.data, out.dtype, row * features + d, y);
        }
      }
    });
    return llvm::Error::success();
  });
}

llvm::Error runRmsNorm(const KernelCall &call) {
  const Tensor &x = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(NormPlan plan, checkNorm(call.id, call.inputs, out, call.attrs));
  const int64_t features = plan.features;
  const double epsilon = plan.epsilon;
  const Tensor *weight = plan.weight;
  return dispatchFloat(x.dtype, "input", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> xs(x);
    std::optional<InputArray<T>> ws;
    if (weight)
      ws.emplace(*weight);
    const int64_t rows = features == 0 ? 0 : x.numElements() / features;
    parallelFor(call.ctx, rows, features * 6, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T *in = xs.data() + row * features;
        double squares = 0.0;
        for (int64_t d = 0; d < features; ++d)
          squares += static_cast<double>(in[d]) * in[d];
        const double invRms =
            1.0 / std::sqrt(squares / static_cast<double>(features) + epsilon);
        for (int64_t d = 0; d < features; ++d) {
          double y = in[d] * invRms;
          if (ws)
            y *= static_cast<double>((*ws)[d]);
          storeFromDouble(out.data, out.dtype, row * features + d, y);
        }
      }
    });
    return llvm::Error::success();
  });
}

llvm::Error runNormWeightGrad(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(NormPlan plan,
                        checkNormWeightGrad(call.inputs, call.outputs, call.attrs));
  const Tensor &x = call.inputs[0], &dy = call.inputs[1], &dw = call.outputs[0];
  float *rstd = static_cast<float *>(call.outputs[1].data);
  float *means = rstd + plan.rows, *partials = means + plan.rows;
  const int64_t cols = plan.features, blocks = normWeightGradBlocks(plan.rows);
  // Each row's mean and inverse deviation (f64, rounded to f32), then per
  // block of rows the column sums of dy * xhat (f32 products, rows in order).
  parallelFor(call.ctx, plan.rows, cols * 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      double sum = 0, squares = 0;
      for (int64_t c = 0; c < cols; ++c)
        sum += loadAsDouble(x.data, x.dtype, r * cols + c);
      const double mean = plan.layerNorm ? sum / double(cols) : 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const double d = loadAsDouble(x.data, x.dtype, r * cols + c) - mean;
        squares += d * d;
      }
      means[r] = float(mean);
      rstd[r] = float(1.0 / std::sqrt(squares / double(cols) + plan.epsilon));
    }
  });
  parallelFor(call.ctx, blocks, kNormWeightGradRows * cols * 2, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      float *out = partials + b * cols;
      std::fill(out, out + cols, 0.f);
      const int64_t last = std::min(plan.rows, (b + 1) * kNormWeightGradRows);
      for (int64_t r = b * kNormWeightGradRows; r < last; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const float xhat = (loadAsFloat(x.data, x.dtype, r * cols + c) - means[r]) * rstd[r];
          out[c] += loadAsFloat(dy.data, dy.dtype, r * cols + c) * xhat;
        }
    }
  });
  for (int64_t c = 0; c < cols; ++c) {
    double sum = 0;
    for (int64_t b = 0; b < blocks; ++b)
      sum += partials[b * cols + c];
    storeFromDouble(dw.data, dw.dtype, c, sum);
  }
  return llvm::Error::success();
}

} // namespace loom::cpu::detail
