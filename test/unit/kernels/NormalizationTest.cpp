#include "KernelTestSupport.h"

#include <cmath>

using namespace loom;
using namespace loom::cpu;
using namespace loom::cpu::test;

namespace {

/// Reference layer norm of each last-dim row; empty weight/bias = absent.
std::vector<double> referenceLayerNorm(const std::vector<double> &x, int64_t features,
                                       const std::vector<double> &weight,
                                       const std::vector<double> &bias, double eps) {
  std::vector<double> out(x.size());
  for (size_t row = 0; row < x.size() / features; ++row) {
    const double *r = x.data() + row * features;
    double mean = 0;
    for (int64_t d = 0; d < features; ++d)
      mean += r[d] / features;
    double variance = 0;
    for (int64_t d = 0; d < features; ++d)
      variance += (r[d] - mean) * (r[d] - mean) / features;
    for (int64_t d = 0; d < features; ++d) {
      double y = (r[d] - mean) / std::sqrt(variance + eps);
      if (!weight.empty())
        y *= weight[d];
      if (!bias.empty())
        y += bias[d];
      out[row * features + d] = y;
    }
  }
  return out;
}

std::vector<double> referenceRmsNorm(const std::vector<double> &x, int64_t features,
                                     const std::vector<double> &weight, double eps) {
  std::vector<double> out(x.size());
  for (size_t row = 0; row < x.size() / features; ++row) {
    const double *r = x.data() + row * features;
    double meanSquare = 0;
    for (int64_t d = 0; d < features; ++d)
      meanSquare += r[d] * r[d] / features;
    for (int64_t d = 0; d < features; ++d)
      out[row * features + d] =
          r[d] / std::sqrt(meanSquare + eps) * (weight.empty() ? 1.0 : weight[d]);
  }
  return out;
}

TEST(LayerNormKernelTest, EveryCombinationOfOptionalInputs) {
  const std::vector<int64_t> shape = {2, 3, 16};
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    std::vector<double> xs = roundAll(dtype, randomValues(96, -3, 5, 71));
    std::vector<double> ws = roundAll(dtype, randomValues(16, 0.5, 1.5, 72));
    std::vector<double> bs = roundAll(dtype, randomValues(16, -1, 1, 73));
    OwnedTensor x(dtype, shape, xs), w(dtype, {16}, ws), b(dtype, {16}, bs);
    OwnedTensor out(dtype, shape);
    const double tol = dtype == DType::BF16 ? 1.0 / 128 : dtype == DType::F32 ? 1e-6 : 1e-13;
    for (bool hasWeight : {false, true}) {
      for (bool hasBias : {false, true}) {
        std::vector<Tensor> inputs = {x};
        if (hasWeight)
          inputs.push_back(w);
        if (hasBias)
          inputs.push_back(b);
        KernelAttrs attrs;
        attrs.set("has_weight", int64_t(hasWeight)).set("has_bias", int64_t(hasBias));
        attrs.set("epsilon", 1e-3);
        std::vector<Tensor> outputs = {out};
        ASSERT_KERNEL_OK(runKernel("nn.layer_norm", inputs, outputs, attrs));
        expectClose(out.values(),
                    referenceLayerNorm(xs, 16, hasWeight ? ws : std::vector<double>{},
                                       hasBias ? bs : std::vector<double>{}, 1e-3),
                    tol, tol, "layer_norm");
      }
    }
  }
}

TEST(LayerNormKernelTest, DefaultsFollowTheInputCount) {
  std::vector<double> xs = randomValues(8, -2, 2, 74), ws = randomValues(4, 0.5, 2, 75);
  OwnedTensor x(DType::F32, {2, 4}, xs), w(DType::F32, {4}, ws), out(DType::F32, {2, 4});
  ASSERT_KERNEL_OK(run("nn.layer_norm", {x, w}, {out}));
  expectClose(out.values(), referenceLayerNorm(xs, 4, ws, {}, 1e-5), 1e-6, 1e-6);
}

TEST(LayerNormKernelTest, Errors) {
  OwnedTensor x(DType::F32, {2, 4}), w(DType::F32, {3}), out(DType::F32, {2, 4});
  EXPECT_KERNEL_ERROR(run("nn.layer_norm", {x, w}, {out}), "weight shape [3] should be [4]");
  OwnedTensor w4(DType::F32, {4});
  EXPECT_KERNEL_ERROR(run("nn.layer_norm", {x, w4}, {out},
                          KernelAttrs().set("has_weight", int64_t(1)).set("has_bias", int64_t(1))),
                      "disagree with 2 inputs");
  OwnedTensor wf64(DType::F64, {4});
  EXPECT_KERNEL_ERROR(run("nn.layer_norm", {x, wf64}, {out}), "weight dtype f64 differs");
  OwnedTensor scalar(DType::F32, {});
  EXPECT_KERNEL_ERROR(run("nn.layer_norm", {scalar}, {scalar}), "rank >= 1");
}

TEST(RmsNormKernelTest, WithAndWithoutWeight) {
  const std::vector<int64_t> shape = {5, 32};
  for (DType dtype : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    std::vector<double> xs = roundAll(dtype, randomValues(160, -3, 3, 76));
    std::vector<double> ws = roundAll(dtype, randomValues(32, 0.5, 1.5, 77));
    OwnedTensor x(dtype, shape, xs), w(dtype, {32}, ws), out(dtype, shape);
    const double tol = dtype == DType::BF16 ? 1.0 / 128
                       : dtype == DType::F16 ? 1.0 / 1024
                       : dtype == DType::F32 ? 1e-6
                                             : 1e-13;
    ASSERT_KERNEL_OK(run("nn.rms_norm", {x, w}, {out},
                         KernelAttrs().set("has_weight", int64_t(1)).set("epsilon", 1e-6)));
    expectClose(out.values(), referenceRmsNorm(xs, 32, ws, 1e-6), tol, tol, "rms weight");
    ASSERT_KERNEL_OK(run("nn.rms_norm", {x}, {out}, KernelAttrs().set("epsilon", 0.5)));
    expectClose(out.values(), referenceRmsNorm(xs, 32, {}, 0.5), tol, tol, "rms");
  }
  OwnedTensor x(DType::F32, {2, 4}), out(DType::F32, {2, 4});
  EXPECT_KERNEL_ERROR(run("nn.rms_norm", {x}, {out}, KernelAttrs().set("has_weight", int64_t(1))),
                      "disagrees with 1 inputs");
}

TEST(RmsNormKernelTest, ThreadCountDoesNotChangeBits) {
  const std::vector<int64_t> shape = {512, 256};
  std::vector<double> xs = randomValues(numElementsOf(shape), -3, 3, 78);
  OwnedTensor x(DType::F32, shape, xs), one(DType::F32, shape), many(DType::F32, shape);
  ASSERT_KERNEL_OK(run("nn.rms_norm", {x}, {one}, {}, 1));
  ASSERT_KERNEL_OK(run("nn.rms_norm", {x}, {many}, {}, 3));
  EXPECT_EQ(one.bytes(), many.bytes());
}

} // namespace
