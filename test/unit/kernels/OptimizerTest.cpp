// nn.adamw_multi against what it replaces: nn.mul of each gradient by the
// clipping scale, then nn.adamw per parameter. The fusion must not change a
// single bit of the parameters or moments.

#include "KernelTestSupport.h"

#include <cstring>

using namespace loom;
using namespace loom::cpu;
using namespace loom::cpu::test;

namespace {

OwnedTensor scalar(double v) { return OwnedTensor(DType::F32, {}, {v}); }

TEST(AdamWMulti, MatchesScaledGradientsThenAdamWBitForBit) {
  const std::vector<std::vector<int64_t>> shapes = {{4, 3}, {37}, {5, 2, 3}};
  const std::vector<double> decays = {0.1, 0.0, 0.02};
  OwnedTensor lr = scalar(3e-3), step = scalar(4), scale = scalar(0.61);
  std::vector<OwnedTensor> p, g, m, v, pRef, mRef, vRef;
  std::vector<std::vector<double>> initial;
  uint64_t seed = 1;
  for (const auto &shape : shapes) {
    size_t n = numElementsOf(shape);
    auto values = [&](double lo) { return randomValues(n, lo, 1.5, seed++); };
    std::vector<double> pv = values(-1.5), gv = values(-1.5), mv = values(-1.5),
                        vv = values(0.05);
    p.emplace_back(DType::F32, shape, pv);
    initial.push_back(p.back().values());
    g.emplace_back(DType::F32, shape, gv);
    m.emplace_back(DType::F32, shape, mv);
    v.emplace_back(DType::F32, shape, vv);
    pRef.emplace_back(DType::F32, shape, pv);
    mRef.emplace_back(DType::F32, shape, mv);
    vRef.emplace_back(DType::F32, shape, vv);
  }
  KernelAttrs common;
  common.set("beta1", 0.9).set("beta2", 0.95).set("epsilon", 1e-8);

  // Reference: the unfused sequence, in place as the runtime runs it.
  for (size_t i = 0; i < shapes.size(); ++i) {
    OwnedTensor scaled(DType::F32, shapes[i]);
    ASSERT_KERNEL_OK(run("nn.mul", {g[i], scale}, {scaled}));
    KernelAttrs attrs = common;
    attrs.set("weight_decay", decays[i]);
    ASSERT_KERNEL_OK(run("nn.adamw", {pRef[i], scaled, mRef[i], vRef[i], lr, step},
                         {pRef[i], mRef[i], vRef[i]}, attrs));
  }

  std::vector<Tensor> inputs{lr, step, scale}, outputs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    inputs.insert(inputs.end(), {p[i], g[i], m[i], v[i]});
    outputs.insert(outputs.end(), {p[i], m[i], v[i]});
  }
  KernelAttrs attrs = common;
  attrs.set("has_scale", int64_t(1)).set("weight_decays", decays);
  ASSERT_KERNEL_OK(runKernel("nn.adamw_multi", inputs, outputs, attrs));
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(p[i].bytes(), pRef[i].bytes()) << "parameter " << i;
    EXPECT_EQ(m[i].bytes(), mRef[i].bytes()) << "exp_avg " << i;
    EXPECT_EQ(v[i].bytes(), vRef[i].bytes()) << "exp_avg_sq " << i;
    EXPECT_NE(p[i].values(), initial[i]) << "parameter " << i << " was not updated";
  }
}

TEST(AdamWMulti, RejectsMalformedGroups) {
  OwnedTensor lr = scalar(1e-3), step = scalar(1), a(DType::F32, {3}), b(DType::F32, {3});
  KernelAttrs attrs;
  attrs.set("beta1", 0.9).set("beta2", 0.95).set("epsilon", 1e-8).set("has_scale", int64_t(0));
  attrs.set("weight_decays", std::vector<double>{0.0});
  // Three of a parameter's four inputs.
  std::string message =
      errorMessage(runKernel("nn.adamw_multi", {lr, step, a, b, a, b, a}, {a, a, a}, attrs));
  EXPECT_NE(message.find("4 inputs"), std::string::npos) << message;
  // A weight decay per parameter.
  attrs.set("weight_decays", std::vector<double>{0.0, 0.1});
  EXPECT_NE(errorMessage(runKernel("nn.adamw_multi", {lr, step, a, b, a, b}, {a, a, a}, attrs))
                .find("weight_decays has 2 entries for 1 parameters"),
            std::string::npos);
}

} // namespace
