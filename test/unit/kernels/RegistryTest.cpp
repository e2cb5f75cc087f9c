// Dispatch, arity and attribute handling shared by every kernel.

#include "KernelTestSupport.h"

#include <set>

using namespace loom;
using namespace loom::cpu;
using namespace loom::cpu::test;

namespace {

TEST(KernelRegistryTest, EveryKernelOfTheContractIsImplemented) {
  std::vector<std::string_view> contract = {
#define LOOM_KERNEL(NAME, MIN_INPUTS, MAX_INPUTS, NUM_OUTPUTS) NAME,
#include "runtime/abi/Kernels.def"
#undef LOOM_KERNEL
  };
  for (std::string_view name : contract)
    EXPECT_TRUE(hasKernel(name)) << name;
  EXPECT_EQ(kernelNames(), contract);
  EXPECT_FALSE(hasKernel("nn.reshape"));
}

TEST(KernelRegistryTest, UnknownKernelIsAnError) {
  OwnedTensor x(DType::F32, {2});
  EXPECT_KERNEL_ERROR(run("nn.frobnicate", {x}, {x}), "unknown kernel 'nn.frobnicate'");
}

TEST(KernelRegistryTest, ArityIsChecked) {
  OwnedTensor x(DType::F32, {2}), y(DType::F32, {2});
  EXPECT_KERNEL_ERROR(run("nn.add", {x}, {y}), "nn.add: takes 2 inputs, got 1");
  EXPECT_KERNEL_ERROR(run("nn.neg", {x}, {x, y}), "produces 1 outputs, got 2");
  EXPECT_KERNEL_ERROR(run("nn.layer_norm", {x, x, x, x}, {y}), "1 to 3 inputs");
  EXPECT_KERNEL_ERROR(run("nn.split", {x}, {}), "1 or more outputs");
  EXPECT_KERNEL_ERROR(run("nn.iota", {x}, {y}, KernelAttrs().set("dim", int64_t(0))),
                      "takes 0 inputs");
}

TEST(KernelRegistryTest, MalformedTensorsAreErrors) {
  OwnedTensor good(DType::F32, {2});
  Tensor negative = good.t();
  negative.shape = {-1, 2};
  EXPECT_KERNEL_ERROR(run("nn.neg", {negative}, {good}), "negative dim");
  Tensor missing = good.t();
  missing.data = nullptr;
  EXPECT_KERNEL_ERROR(run("nn.neg", {good}, {missing}), "output 0: output has no data");
  Tensor huge = good.t();
  huge.shape = {int64_t(1) << 40, int64_t(1) << 40};
  EXPECT_KERNEL_ERROR(run("nn.neg", {huge}, {good}), "too large");
}

TEST(KernelAttrsTest, TypedLookups) {
  KernelAttrs attrs({{"dim", int64_t(2)},
                     {"eps", 1e-5},
                     {"mode", std::string("tanh")},
                     {"perm", std::vector<int64_t>{1, 0}}});
  EXPECT_EQ(*attrs.getInt("dim"), 2);
  EXPECT_EQ(*attrs.getF64("eps"), 1e-5);
  EXPECT_EQ(*attrs.getF64("dim"), 2.0); // ints widen to f64
  EXPECT_EQ(*attrs.getStr("mode"), "tanh");
  EXPECT_EQ(*attrs.getInts("perm"), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(*attrs.getInt("absent", 7), 7);
  EXPECT_EQ(errorMessage(attrs.getInt("absent").takeError()),
            "missing attribute 'absent'");
  EXPECT_EQ(errorMessage(attrs.getInt("eps").takeError()),
            "attribute 'eps' is f64, expected int");
  EXPECT_EQ(errorMessage(attrs.getBool("dim").takeError()),
            "attribute 'dim' is 2, expected 0 or 1");
  attrs.set("dim", int64_t(1));
  EXPECT_EQ(*attrs.getBool("dim"), true);
  EXPECT_TRUE(attrs.has("perm"));
  EXPECT_FALSE(attrs.has("nope"));
}

TEST(KernelRegistryTest, BadAttributeNamesTheKernel) {
  OwnedTensor x(DType::F32, {2, 3}), y(DType::F32, {2, 3});
  EXPECT_KERNEL_ERROR(run("nn.softmax", {x}, {y}, KernelAttrs().set("dim", 1.5)),
                      "nn.softmax: attribute 'dim' is f64, expected int");
  EXPECT_KERNEL_ERROR(run("nn.softmax", {x}, {y}), "nn.softmax: missing attribute 'dim'");
}

} // namespace
