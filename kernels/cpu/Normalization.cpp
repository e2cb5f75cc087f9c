// layer_norm and rms_norm over the last dim; statistics in double.

#include "kernels/cpu/KernelSupport.h"

#include <cmath>

namespace loom::cpu::detail {

namespace {

/// Checks an optional per-feature parameter: shape [D], the input's dtype.
llvm::Error checkFeatureParam(const Tensor &param, const char *role, const Tensor &x,
                              int64_t features) {
  LOOM_RETURN_IF_ERROR(checkSameDType(param, role, x, "input"));
  if (param.shape != std::vector<int64_t>{features})
    return kernelError(llvm::Twine(role) + " shape " + shapeToString(param.shape) +
                       " should be [" + llvm::Twine(features) + "]");
  return llvm::Error::success();
}

/// Shared checks; returns D, the normalized (last) dim.
llvm::Expected<int64_t> checkNormInput(const KernelCall &call) {
  const Tensor &x = call.inputs[0], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameShape(x, "input", out, "output"));
  LOOM_RETURN_IF_ERROR(checkSameDType(x, "input", out, "output"));
  if (x.shape.empty())
    return kernelError("input must have rank >= 1");
  return x.shape.back();
}

} // namespace

llvm::Error runLayerNorm(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(int64_t features, checkNormInput(call));
  const size_t numInputs = call.inputs.size();
  LOOM_ASSIGN_OR_RETURN(bool hasWeight, call.attrs.getBool("has_weight", numInputs >= 2));
  LOOM_ASSIGN_OR_RETURN(bool hasBias, call.attrs.getBool("has_bias", numInputs == 3));
  LOOM_ASSIGN_OR_RETURN(double epsilon, call.attrs.getF64("epsilon", 1e-5));
  if (size_t(1) + hasWeight + hasBias != numInputs)
    return kernelError("has_weight=" + llvm::Twine(hasWeight) + " and has_bias=" +
                       llvm::Twine(hasBias) + " disagree with " +
                       llvm::Twine(numInputs) + " inputs");
  const Tensor &x = call.inputs[0], &out = call.outputs[0];
  const Tensor *weight = hasWeight ? &call.inputs[1] : nullptr;
  const Tensor *bias = hasBias ? &call.inputs[hasWeight ? 2 : 1] : nullptr;
  if (weight)
    LOOM_RETURN_IF_ERROR(checkFeatureParam(*weight, "weight", x, features));
  if (bias)
    LOOM_RETURN_IF_ERROR(checkFeatureParam(*bias, "bias", x, features));
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
  LOOM_ASSIGN_OR_RETURN(int64_t features, checkNormInput(call));
  const size_t numInputs = call.inputs.size();
  LOOM_ASSIGN_OR_RETURN(bool hasWeight, call.attrs.getBool("has_weight", numInputs == 2));
  LOOM_ASSIGN_OR_RETURN(double epsilon, call.attrs.getF64("epsilon", 1e-6));
  if (size_t(1) + hasWeight != numInputs)
    return kernelError("has_weight=" + llvm::Twine(hasWeight) + " disagrees with " +
                       llvm::Twine(numInputs) + " inputs");
  const Tensor &x = call.inputs[0], &out = call.outputs[0];
  const Tensor *weight = hasWeight ? &call.inputs[1] : nullptr;
  if (weight)
    LOOM_RETURN_IF_ERROR(checkFeatureParam(*weight, "weight", x, features));
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

} // namespace loom::cpu::detail
