// Backward kernels of the activations, the norms and the loss: the fused ops
// the gradient rules build (dialects/nn/NNGradients.cpp). Activation
// derivatives compute in the compute type like the forward unary kernels;
// row statistics and row sums accumulate in double like the forward norms.

#include "kernels/cpu/KernelSupport.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::cpu::detail {

namespace {

/// d/dx of the activation at x.
template <typename T> T activationDerivative(Activation activation, T x) {
  switch (activation) {
  case Activation::GeluErf: {
    // gelu = x Phi(x): Phi(x) + x phi(x).
    const T kInvSqrt2 = T(0.70710678118654752440);
    const T kInvSqrt2Pi = T(0.39894228040143267794);
    const T cdf = T(0.5) * (T(1) + std::erf(x * kInvSqrt2));
    return cdf + x * kInvSqrt2Pi * std::exp(T(-0.5) * x * x);
  }
  case Activation::GeluTanh: {
    // gelu = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + c x^3).
    const T kSqrt2OverPi = T(0.79788456080286535588);
    const T kCubic = T(0.044715);
    const T t = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
    const T du = kSqrt2OverPi * (T(1) + T(3) * kCubic * x * x);
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
  }
  case Activation::Silu: {
    // silu = x s(x): s (1 + x (1 - s)). s split by sign so exp never overflows.
    const T s = x >= T(0) ? T(1) / (T(1) + std::exp(-x))
                          : std::exp(x) / (T(1) + std::exp(x));
    return s * (T(1) + x * (T(1) - s));
  }
  }
  return T(0);
}

} // namespace

llvm::Error runActivationGrad(const KernelCall &call) {
  const Tensor &x = call.inputs[0], &dy = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(Activation activation,
                        checkActivationGrad(call.id, x, dy, out, call.attrs));
  return dispatchFloat(x.dtype, "input", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> xs(x), dys(dy);
    OutputArray<T> dst(out);
    parallelFor(call.ctx, x.numElements(), 25, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        dst[i] = dys[i] * activationDerivative(activation, xs[i]);
    });
    dst.commit();
    return llvm::Error::success();
  });
}

llvm::Error runNormGrad(const KernelCall &call) {
  const Tensor &x = call.inputs[0], &dy = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(NormPlan plan, checkNormGrad(call.id, call.inputs, out, call.attrs));
  const bool layerNorm = plan.layerNorm;
  const int64_t features = plan.features;
  const double epsilon = plan.epsilon;
  const Tensor *weight = plan.weight;
  return dispatchFloat(x.dtype, "input", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> xs(x), dys(dy);
    std::optional<InputArray<T>> ws;
    if (weight)
      ws.emplace(*weight);
    const int64_t rows = features == 0 ? 0 : x.numElements() / features;
    const double n = static_cast<double>(features);
    parallelFor(call.ctx, rows, features * 12, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T *in = xs.data() + row * features;
        const T *grad = dys.data() + row * features;
        // Statistics of the forward pass.
        double mean = 0.0, invStd;
        if (layerNorm) {
          double sum = 0.0;
          for (int64_t d = 0; d < features; ++d)
            sum += in[d];
          mean = sum / n;
          double squares = 0.0;
          for (int64_t d = 0; d < features; ++d)
            squares += (in[d] - mean) * (in[d] - mean);
          invStd = 1.0 / std::sqrt(squares / n + epsilon);
        } else {
          double squares = 0.0;
          for (int64_t d = 0; d < features; ++d)
            squares += static_cast<double>(in[d]) * in[d];
          invStd = 1.0 / std::sqrt(squares / n + epsilon);
        }
        // g = dy * weight; dx = invStd (g - mean(g) - xhat mean(g xhat)),
        // without the mean(g) term for rms_norm (it does not center).
        auto scaledGrad = [&](int64_t d) {
          double g = grad[d];
          if (ws)
            g *= static_cast<double>((*ws)[d]);
          return g;
        };
        double sumG = 0.0, sumGXhat = 0.0;
        for (int64_t d = 0; d < features; ++d) {
          const double g = scaledGrad(d);
          sumG += g;
          sumGXhat += g * (in[d] - mean) * invStd;
        }
        const double meanG = layerNorm ? sumG / n : 0.0;
        const double meanGXhat = sumGXhat / n;
        for (int64_t d = 0; d < features; ++d) {
          const double xhat = (in[d] - mean) * invStd;
          const double dx = invStd * (scaledGrad(d) - meanG - xhat * meanGXhat);
          storeFromDouble(out.data, out.dtype, row * features + d, dx);
        }
      }
    });
    // The residual's gradient: the unfused add, in place on the result.
    if (plan.addend)
      return runKernel("nn.add", {out, *plan.addend}, {out}, {}, call.ctx);
    return llvm::Error(llvm::Error::success());
  });
}

llvm::Error runCrossEntropyGrad(const KernelCall &call) {
  const Tensor &logits = call.inputs[0], &labels = call.inputs[1];
  const Tensor &lossGrad = call.inputs[2], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(CrossEntropyShape s,
                        checkCrossEntropyGrad(logits, labels, lossGrad, out, call.attrs));
  const int64_t rows = s.rows, classes = s.classes, ignoreIndex = s.ignoreIndex;
  const std::string reduction = lossReductionName(s.reduction);
  LOOM_ASSIGN_OR_RETURN(int64_t counted, countLabels(labels, rows, classes, ignoreIndex));
  const LossRowWeight rowWeight{static_cast<const float *>(lossGrad.data), reduction, counted};
  return dispatchFloat(logits.dtype, "logits", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> xs(logits);
    parallelFor(call.ctx, rows, classes * 25, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t label = loadInt(labels.data, labels.dtype, r);
        const T *row = xs.data() + r * classes;
        if (label == ignoreIndex) {
          for (int64_t c = 0; c < classes; ++c)
            storeFromDouble(out.data, out.dtype, r * classes + c, 0.0);
          continue;
        }
        const RowLogSumExp lse = rowLogSumExp(row, classes);
        const double weight = rowWeight(r);
        for (int64_t c = 0; c < classes; ++c) {
          const double p = std::exp(static_cast<double>(row[c]) - lse.max) / lse.sum;
          storeFromDouble(out.data, out.dtype, r * classes + c,
                          weight * (p - (c == label ? 1.0 : 0.0)));
        }
      }
    });
    return llvm::Error::success();
  });
}

} // namespace loom::cpu::detail
