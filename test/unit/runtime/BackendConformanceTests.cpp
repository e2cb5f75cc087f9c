// The backend conformance suite, written once and instantiated per backend:
// memory, copies, streams and events, every kernel of Kernels.def against the
// CPU kernels on random (never zero) inputs (for backends other than the
// CPU's: the CPU backend runs those very kernels), and whole programs.
// The kernels themselves, the CPU's included, are checked against NumPy
// references in test/unit/conformance (LoomConformanceTests).
// The CUDA backend joins `Backends` below when it is built; on a machine
// without a GPU its instantiation reports itself skipped.

#include "runtime/backends/Backend.h"
#include "runtime/backends/ProgramExecutor.h"
#include "test/unit/runtime/BackendFactories.h"
#include "runtime/support/FloatTypes.h"

#include "runtime/abi/FusedBody.h"
#ifdef LOOM_HAVE_CUDA_BACKEND
#include "kernels/cuda/CudaKernels.h"
#endif

#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FileSystem.h"

#include "gtest/gtest.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <type_traits>

using namespace loom;

namespace {

using test::CpuBackendFactory;
#ifdef LOOM_HAVE_CUDA_BACKEND
using test::CudaBackendFactory;
#endif

template <typename Factory> class BackendConformance : public ::testing::Test {
protected:
  void SetUp() override {
    backend = Factory::create();
    if (!backend)
      GTEST_SKIP() << "the " << Factory::kName
                   << " conformance tests need a GPU, and there is none here: "
                   << Factory::unavailableReason();
  }
  std::unique_ptr<Backend> backend;
};

#ifdef LOOM_HAVE_CUDA_BACKEND
using Backends = ::testing::Types<CpuBackendFactory, CudaBackendFactory>;
#else
using Backends = ::testing::Types<CpuBackendFactory>;
#endif
TYPED_TEST_SUITE(BackendConformance, Backends);

int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// A host tensor with seeded random contents: floats in [-2, -0.1] u [0.1, 2]
/// (never zero), integers in [0, indexBound), booleans 0/1.
HostTensor randomTensor(DType dtype, std::vector<int64_t> shape, uint32_t seed,
                        int64_t indexBound = 4) {
  std::mt19937 rng(seed);
  HostTensor t{"", dtype, shape, {}};
  int64_t n = count(shape);
  t.data.resize(n * dtypeSize(dtype));
  std::uniform_real_distribution<double> mag(0.1, 2.0);
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (dtype == DType::I1)
      v = rng() % 2;
    else if (!isFloat(dtype))
      v = rng() % indexBound;
    else
      v = (rng() % 2 ? 1 : -1) * mag(rng);
    storeFromDouble(t.data.data(), dtype, i, v);
  }
  return t;
}

struct KernelCase {
  std::string kernel;
  std::vector<HostTensor> inputs;
  std::vector<std::pair<DType, std::vector<int64_t>>> outputs;
  std::vector<NamedAttr> attrs;
  /// Per output: the input whose buffer it is (an in-place kernel), or -1.
  std::vector<int> aliases = {};
  /// Multiplies the backend's tolerance (bf16 attention gradients: sums of
  /// products rounded to bf16 on the way, by cuDNN's fused kernels too).
  double toleranceScale = 1;
};

/// One case per kernel, shaped to exercise what the kernel must get right
/// (broadcasting, transposes, grouped heads, ignored labels, ...).
std::vector<KernelCase> kernelCases() {
  using S = std::vector<int64_t>;
  auto f32 = [](S shape, uint32_t seed) { return randomTensor(DType::F32, shape, seed); };
  std::vector<KernelCase> cases;
  for (const char *unary : {"nn.neg", "nn.abs", "nn.exp", "nn.tanh", "nn.erf",
                            "nn.sigmoid", "nn.silu", "nn.relu", "nn.reciprocal"})
    cases.push_back({unary, {f32({3, 5}, 1)}, {{DType::F32, {3, 5}}}, {}});
  HostTensor positive = f32({3, 5}, 2);
  for (size_t i = 0; i < positive.data.size() / 4; ++i)
    reinterpret_cast<float *>(positive.data.data())[i] =
        std::fabs(reinterpret_cast<float *>(positive.data.data())[i]);
  for (const char *k : {"nn.log", "nn.sqrt", "nn.rsqrt"})
    cases.push_back({k, {positive}, {{DType::F32, {3, 5}}}, {}});
  cases.push_back({"nn.gelu", {f32({4, 6}, 3)}, {{DType::F32, {4, 6}}}, {{"approximate", std::string("tanh")}}});
  cases.push_back({"nn.gelu", {f32({4, 6}, 4)}, {{DType::F32, {4, 6}}}, {{"approximate", std::string("none")}}});
  for (const char *binary : {"nn.add", "nn.sub", "nn.mul", "nn.div", "nn.maximum", "nn.minimum"})
    cases.push_back({binary, {f32({2, 3, 4}, 5), f32({3, 1}, 6)}, {{DType::F32, {2, 3, 4}}}, {}});
  cases.push_back({"nn.pow", {positive, f32({5}, 7)}, {{DType::F32, {3, 5}}}, {}});
  cases.push_back({"nn.compare", {f32({3, 4}, 8), f32({4}, 9)}, {{DType::I1, {3, 4}}}, {{"predicate", std::string("lt")}}});
  cases.push_back({"nn.where", {randomTensor(DType::I1, {3, 4}, 10), f32({3, 4}, 11), f32({1, 4}, 12)}, {{DType::F32, {3, 4}}}, {}});
  cases.push_back({"nn.cast", {f32({7, 3}, 13)}, {{DType::BF16, {7, 3}}}, {}});
  cases.push_back({"nn.cast", {f32({7, 3}, 14)}, {{DType::F8E4M3FN, {7, 3}}}, {}});
  cases.push_back({"nn.matmul", {f32({2, 5, 7}, 15), f32({6, 7}, 16)}, {{DType::F32, {2, 5, 6}}},
                   {{"transpose_lhs", int64_t(0)}, {"transpose_rhs", int64_t(1)}}});
  cases.push_back({"nn.matmul", {f32({7, 5}, 17), f32({7, 3}, 18)}, {{DType::F32, {5, 3}}},
                   {{"transpose_lhs", int64_t(1)}, {"transpose_rhs", int64_t(0)}}});
  cases.push_back({"nn.matmul", {randomTensor(DType::BF16, {4, 8}, 19), randomTensor(DType::BF16, {8, 3}, 20)},
                   {{DType::BF16, {4, 3}}}, {{"transpose_lhs", int64_t(0)}, {"transpose_rhs", int64_t(0)}}});
  // Epilogues: bias (f32), bias then tanh-GELU (bf16, a weight shared by a batch).
  cases.push_back({"nn.matmul", {f32({5, 7}, 120), f32({7, 3}, 121), f32({3}, 122)},
                   {{DType::F32, {5, 3}}}, {{"epilogue", std::string("bias")}}});
  cases.push_back({"nn.matmul",
                   {randomTensor(DType::BF16, {2, 6, 16}, 123), randomTensor(DType::BF16, {24, 16}, 124),
                    randomTensor(DType::BF16, {24}, 125)},
                   {{DType::BF16, {2, 6, 24}}},
                   {{"transpose_rhs", int64_t(1)}, {"epilogue", std::string("bias_gelu")}}});
  // FP8 with per-tensor scales: e4m3 x e4m3 into bf16, e4m3 x e5m2 into f32.
  {
    HostTensor scaleA{"", DType::F32, {}, std::vector<uint8_t>(4)};
    HostTensor scaleB{"", DType::F32, {}, std::vector<uint8_t>(4)};
    *reinterpret_cast<float *>(scaleA.data.data()) = 0.75f;
    *reinterpret_cast<float *>(scaleB.data.data()) = 1.5f;
    cases.push_back({"nn.scaled_matmul",
                     {randomTensor(DType::F8E4M3FN, {8, 32}, 126),
                      randomTensor(DType::F8E4M3FN, {16, 32}, 127), scaleA, scaleB},
                     {{DType::BF16, {8, 16}}}, {}});
    cases.push_back({"nn.scaled_matmul",
                     {randomTensor(DType::F8E4M3FN, {24, 48}, 128),
                      randomTensor(DType::F8E5M2, {32, 48}, 129), scaleA, scaleB},
                     {{DType::F32, {24, 32}}}, {}});
  }
  // FP8 quantization: amax over 1 x 128 tiles, the scales, a quantization
  // with its transposed copy under one scale, a dequantization, and
  // blockwise's and tensorwise's whole chains in one call each
  // (--loom-fuse-fp8-quantize).
  {
    HostTensor scale{"", DType::F32, {}, std::vector<uint8_t>(4)};
    *reinterpret_cast<float *>(scale.data.data()) = 0.0625f;
    cases.push_back({"nn.amax", {randomTensor(DType::BF16, {8, 256}, 130)}, {{DType::F32, {8, 2}}},
                     {}});
    cases.push_back({"nn.fp8_scale", {positive}, {{DType::F32, {3, 5}}},
                     {{"format", std::string("e4m3")}}});
    cases.push_back({"nn.quantize", {randomTensor(DType::BF16, {32, 48}, 131), scale},
                     {{DType::F8E4M3FN, {32, 48}}, {DType::F8E4M3FN, {48, 32}}}, {}});
    cases.push_back({"nn.dequantize", {randomTensor(DType::F8E4M3FN, {16, 32}, 132), scale},
                     {{DType::BF16, {16, 32}}}, {}});
    cases.push_back({"nn.quantize_tiles", {randomTensor(DType::BF16, {256, 192}, 133)},
                     {{DType::F8E4M3FN, {256, 192}},
                      {DType::F8E4M3FN, {192, 256}},
                      {DType::F32, {256, 2}},
                      {DType::F32, {192, 2}}},
                     {{"format", std::string("e4m3")}}});
    cases.push_back({"nn.quantize_tensor", {randomTensor(DType::BF16, {256, 192}, 134)},
                     {{DType::F8E4M3FN, {256, 192}}, {DType::F8E4M3FN, {192, 256}}, {DType::F32, {}}},
                     {{"format", std::string("e4m3")}}});
    // More whole-tensor amaxes on the same stream: each finishes through
    // the stream's counters, which the one before must have left zero.
    cases.push_back({"nn.amax", {randomTensor(DType::BF16, {64, 96}, 135)}, {{DType::F32, {}}}, {}});
    cases.push_back({"nn.quantize_tensor", {randomTensor(DType::F32, {128, 64}, 136)},
                     {{DType::F8E5M2, {128, 64}}, {DType::F8E5M2, {64, 128}}, {DType::F32, {}}},
                     {{"format", std::string("e5m2")}, {"margin", int64_t(1)}}});
  }
  for (const char *reduce : {"nn.reduce_sum", "nn.reduce_mean", "nn.reduce_max"})
    cases.push_back({reduce, {f32({3, 4, 5}, 21)}, {{DType::F32, {3, 1, 5}}},
                     {{"dims", std::vector<int64_t>{1}}, {"keepdim", int64_t(1)}}});
  cases.push_back({"nn.softmax", {f32({3, 9}, 22)}, {{DType::F32, {3, 9}}}, {{"dim", int64_t(1)}}});
  cases.push_back({"nn.log_softmax", {f32({3, 9}, 23)}, {{DType::F32, {3, 9}}}, {{"dim", int64_t(0)}}});
  cases.push_back({"nn.layer_norm", {f32({2, 3, 8}, 24), f32({8}, 25), f32({8}, 26)}, {{DType::F32, {2, 3, 8}}},
                   {{"epsilon", 1e-5}, {"has_weight", int64_t(1)}, {"has_bias", int64_t(1)}}});
  cases.push_back({"nn.rms_norm", {f32({2, 3, 8}, 27), f32({8}, 28)}, {{DType::F32, {2, 3, 8}}},
                   {{"epsilon", 1e-6}, {"has_weight", int64_t(1)}}});
  cases.push_back({"nn.rope", {f32({1, 2, 4, 6}, 29), f32({4, 6}, 30), f32({4, 6}, 31)}, {{DType::F32, {1, 2, 4, 6}}},
                   {{"interleaved", int64_t(0)}}});
  cases.push_back({"nn.attention", {f32({1, 4, 5, 8}, 32), f32({1, 2, 7, 8}, 33), f32({1, 2, 7, 8}, 34)},
                   {{DType::F32, {1, 4, 5, 8}}}, {{"causal", int64_t(1)}, {"scale", 0.35}}});
  // bf16 attention: the tensor-core paths (cuDNN's fused attention where
  // libcudnn loads, else Loom's FlashAttention.cu); grouped heads, odd
  // lengths, causal (aligned to the end when the keys are longer) or not.
  auto bf16 = [](S shape, uint32_t seed) { return randomTensor(DType::BF16, shape, seed); };
  cases.push_back({"nn.attention", {bf16({1, 4, 67, 64}, 130), bf16({1, 2, 67, 64}, 131), bf16({1, 2, 67, 64}, 132)},
                   {{DType::BF16, {1, 4, 67, 64}}}, {{"causal", int64_t(1)}, {"scale", 0.125}}});
  cases.push_back({"nn.attention", {bf16({2, 4, 33, 64}, 133), bf16({2, 1, 80, 64}, 134), bf16({2, 1, 80, 64}, 135)},
                   {{DType::BF16, {2, 4, 33, 64}}}, {{"causal", int64_t(1)}, {"scale", 0.125}}});
  cases.push_back({"nn.attention", {bf16({2, 4, 33, 64}, 136), bf16({2, 2, 80, 64}, 137), bf16({2, 2, 80, 64}, 138)},
                   {{DType::BF16, {2, 4, 33, 64}}}, {{"causal", int64_t(0)}, {"scale", 0.125}}});
  cases.push_back({"nn.attention_grad",
                   {bf16({1, 4, 67, 64}, 139), bf16({1, 2, 67, 64}, 140), bf16({1, 2, 67, 64}, 141), bf16({1, 4, 67, 64}, 142)},
                   {{DType::BF16, {1, 4, 67, 64}}, {DType::BF16, {1, 2, 67, 64}}, {DType::BF16, {1, 2, 67, 64}}},
                   {{"causal", int64_t(1)}, {"scale", 0.125}}, {}, 3});
  cases.push_back({"nn.attention_grad",
                   {bf16({1, 4, 40, 128}, 143), bf16({1, 4, 40, 128}, 144), bf16({1, 4, 40, 128}, 145), bf16({1, 4, 40, 128}, 146)},
                   {{DType::BF16, {1, 4, 40, 128}}, {DType::BF16, {1, 4, 40, 128}}, {DType::BF16, {1, 4, 40, 128}}},
                   {{"causal", int64_t(0)}, {"scale", 0.088}}, {}, 3});
  // The forward with statistics, and the backward from them. The backward's
  // out and lse are the forward's (made by the CPU kernel from the same q,
  // k, v, as a training step makes them), so that a backend that reads them
  // in place of recomputing the forward computes the same gradients: f32
  // (the SIMT kernels) with grouped heads and more keys than queries, bf16
  // with head dims 64 and 128 (cuDNN, else the tensor-core kernels).
  {
    struct StatsCase {
      HostTensor q, k, v, dOut;
      std::vector<NamedAttr> attrs;
    };
    std::vector<StatsCase> statsCases;
    statsCases.push_back({f32({1, 4, 5, 8}, 150), f32({1, 2, 7, 8}, 151), f32({1, 2, 7, 8}, 152),
                          f32({1, 4, 5, 8}, 153), {{"causal", int64_t(1)}, {"scale", 0.35}}});
    statsCases.push_back({bf16({1, 4, 67, 64}, 154), bf16({1, 2, 67, 64}, 155),
                          bf16({1, 2, 67, 64}, 156), bf16({1, 4, 67, 64}, 157),
                          {{"causal", int64_t(1)}, {"scale", 0.125}}});
    statsCases.push_back({bf16({2, 4, 33, 128}, 158), bf16({2, 1, 80, 128}, 159),
                          bf16({2, 1, 80, 128}, 160), bf16({2, 4, 33, 128}, 161),
                          {{"causal", int64_t(0)}, {"scale", 0.088}}});
    for (StatsCase &c : statsCases) {
      const std::vector<int64_t> &qs = c.q.shape;
      const DType dtype = c.q.dtype;
      HostTensor out{"", dtype, qs, std::vector<uint8_t>(count(qs) * dtypeSize(dtype))};
      const std::vector<int64_t> rows = {qs[0], qs[1], qs[2]};
      HostTensor lse{"", DType::F32, rows, std::vector<uint8_t>(count(rows) * 4)};
      llvm::Error made = cpu::runKernel(
          "nn.attention_with_stats",
          {{c.q.data.data(), dtype, qs}, {c.k.data.data(), dtype, c.k.shape},
           {c.v.data.data(), dtype, c.v.shape}},
          {{out.data.data(), dtype, qs}, {lse.data.data(), DType::F32, rows}},
          KernelAttrs(c.attrs));
      if (made)
        llvm::report_fatal_error(llvm::Twine("the CPU attention_with_stats failed: ") +
                                 llvm::toString(std::move(made)));
      const double scale = dtype == DType::BF16 ? 3 : 1;
      cases.push_back({"nn.attention_with_stats", {c.q, c.k, c.v},
                       {{dtype, qs}, {DType::F32, rows}}, c.attrs, {}, scale});
      cases.push_back({"nn.attention_grad_with_stats", {c.q, c.k, c.v, out, lse, c.dOut},
                       {{dtype, qs}, {dtype, c.k.shape}, {dtype, c.v.shape}}, c.attrs, {}, scale});
    }
  }
  cases.push_back({"nn.embedding", {f32({10, 4}, 35), randomTensor(DType::I64, {2, 3}, 36, 10)},
                   {{DType::F32, {2, 3, 4}}}, {}});
  // A vocabulary-parallel block: rows 4..7 of a table of 10 (ids elsewhere
  // give zeros).
  cases.push_back({"nn.embedding", {f32({4, 4}, 35), randomTensor(DType::I64, {2, 5}, 36, 10)},
                   {{DType::F32, {2, 5, 4}}}, {{"vocab_start", int64_t(4)}}});
  cases.push_back({"nn.transpose", {f32({2, 3, 4}, 37)}, {{DType::F32, {4, 2, 3}}},
                   {{"permutation", std::vector<int64_t>{2, 0, 1}}}});
  cases.push_back({"nn.broadcast", {f32({3, 1}, 38)}, {{DType::F32, {2, 3, 4}}}, {}});
  cases.push_back({"nn.slice", {f32({6, 5}, 39)}, {{DType::F32, {2, 3}}},
                   {{"starts", std::vector<int64_t>{1, 0}}, {"limits", std::vector<int64_t>{5, 5}},
                    {"strides", std::vector<int64_t>{2, 2}}}});
  cases.push_back({"nn.concat", {f32({2, 3}, 40), f32({2, 1}, 41), f32({2, 2}, 42)}, {{DType::F32, {2, 6}}},
                   {{"dim", int64_t(1)}}});
  cases.push_back({"nn.split", {f32({5, 2}, 43)}, {{DType::F32, {2, 2}}, {DType::F32, {3, 2}}},
                   {{"dim", int64_t(0)}}});
  cases.push_back({"nn.gather", {f32({3, 6}, 44), randomTensor(DType::I32, {4}, 45, 6)}, {{DType::F32, {3, 4}}},
                   {{"axis", int64_t(1)}}});
  HostTensor labels = randomTensor(DType::I64, {6}, 46, 7);
  reinterpret_cast<int64_t *>(labels.data.data())[2] = -100;
  cases.push_back({"nn.cross_entropy", {f32({6, 7}, 47), labels}, {{DType::F32, {}}},
                   {{"ignore_index", int64_t(-100)}, {"reduction", std::string("mean")}}});
  cases.push_back({"nn.dropout", {f32({8, 8}, 48)}, {{DType::F32, {8, 8}}}, {{"p", 0.25}, {"seed", int64_t(3)}}});
  cases.push_back({"nn.iota", {}, {{DType::I64, {3, 4}}}, {{"dim", int64_t(1)}, {"start", 2.0}, {"step", 3.0}}});
  // Training: the optimizer and the backward kernels.
  HostTensor secondMoment = f32({4, 3}, 49);
  for (size_t i = 0; i < secondMoment.data.size() / 4; ++i)
    reinterpret_cast<float *>(secondMoment.data.data())[i] =
        std::fabs(reinterpret_cast<float *>(secondMoment.data.data())[i]);
  HostTensor lr{"lr", DType::F32, {}, std::vector<uint8_t>(4)};
  HostTensor step{"step", DType::F32, {}, std::vector<uint8_t>(4)};
  *reinterpret_cast<float *>(lr.data.data()) = 0.01f;
  *reinterpret_cast<float *>(step.data.data()) = 3.0f;
  cases.push_back({"nn.adamw", {f32({4, 3}, 50), f32({4, 3}, 51), f32({4, 3}, 52), secondMoment, lr, step},
                   {{DType::F32, {4, 3}}, {DType::F32, {4, 3}}, {DType::F32, {4, 3}}},
                   {{"beta1", 0.9}, {"beta2", 0.95}, {"epsilon", 1e-8}, {"weight_decay", 0.1}}});
  {
    // Three parameters (one spanning several of the CUDA kernel's chunks,
    // one with a tail past its vectors), updated in place with a gradient
    // scale, as --loom-fuse-adamw emits them.
    HostTensor scale{"scale", DType::F32, {}, std::vector<uint8_t>(4)};
    *reinterpret_cast<float *>(scale.data.data()) = 0.37f;
    std::vector<HostTensor> in{lr, step, scale};
    std::vector<std::pair<DType, S>> outs;
    std::vector<int> aliases;
    uint32_t seed = 200;
    for (S shape : {S{4, 3}, S{37}, S{16500}}) {
      HostTensor moment = f32(shape, seed + 3);
      for (size_t i = 0; i < moment.data.size() / 4; ++i)
        reinterpret_cast<float *>(moment.data.data())[i] =
            std::fabs(reinterpret_cast<float *>(moment.data.data())[i]);
      const int base = static_cast<int>(in.size());
      in.insert(in.end(), {f32(shape, seed), f32(shape, seed + 1), f32(shape, seed + 2), moment});
      for (int k : {0, 2, 3}) {
        outs.push_back({DType::F32, shape});
        aliases.push_back(base + k);
      }
      seed += 4;
    }
    cases.push_back({"nn.adamw_multi", in, outs,
                     {{"beta1", 0.9}, {"beta2", 0.95}, {"epsilon", 1e-8},
                      {"has_scale", int64_t(1)},
                      {"weight_decays", std::vector<double>{0.1, 0.0, 0.05}}},
                     aliases});
  }
  // The master weights' casts in one call (--loom-fuse-casts): a tensor
  // past one chunk with a tail, one shorter than a vector.
  cases.push_back({"nn.cast_multi", {f32({4, 3}, 220), f32({16390}, 221), f32({3}, 222)},
                   {{DType::BF16, {4, 3}}, {DType::BF16, {16390}}, {DType::BF16, {3}}}, {}});
  // The gradient norm's sums of squares (--loom-fuse-sum-squares): a tensor
  // spanning two 32768-element chunks, one with a tail past its vectors, a
  // bf16 one (a launch of its own on CUDA); per tensor, then the total. The
  // f64 scratch (partials, then each tensor's sum) is compared too.
  for (int64_t total : {0, 1}) {
    std::vector<HostTensor> in{f32({4, 3}, 210), f32({37}, 211), f32({200, 200}, 212),
                               randomTensor(DType::BF16, {10, 10}, 213)};
    std::vector<std::pair<DType, S>> outs(total ? 1 : in.size(), {DType::F32, S{}});
    outs.push_back({DType::F64, S{9}});
    cases.push_back({"nn.sum_squares_multi", in, outs, {{"total", total}}});
  }
  // A norm's weight gradient (--loom-fuse-norm-weight-grad): rms_norm's from
  // bf16 to f32 over three blocks of rows with a tail, layer_norm's in f32
  // with a feature count the 16-byte vectors do not divide.
  cases.push_back({"nn.norm_weight_grad", {bf16({3, 25, 24}, 214), bf16({3, 25, 24}, 215)},
                   {{DType::F32, {24}}, {DType::F32, {2 * 75 + 3 * 24}}}, {{"epsilon", 1e-5}}});
  cases.push_back({"nn.norm_weight_grad", {f32({70, 13}, 216), f32({70, 13}, 217)},
                   {{DType::F32, {13}}, {DType::F32, {2 * 70 + 3 * 13}}},
                   {{"epsilon", 1e-5}, {"centered", int64_t(1)}}});
  cases.push_back({"nn.gelu_grad", {f32({3, 5}, 53), f32({3, 5}, 54)}, {{DType::F32, {3, 5}}},
                   {{"approximate", std::string("tanh")}}});
  cases.push_back({"nn.silu_grad", {f32({3, 5}, 55), f32({3, 5}, 56)}, {{DType::F32, {3, 5}}}, {}});
  cases.push_back({"nn.layer_norm_grad", {f32({2, 3, 8}, 57), f32({2, 3, 8}, 58), f32({8}, 59)},
                   {{DType::F32, {2, 3, 8}}}, {{"epsilon", 1e-5}, {"has_weight", int64_t(1)}}});
  cases.push_back({"nn.rms_norm_grad", {f32({2, 3, 8}, 60), f32({2, 3, 8}, 61), f32({8}, 62)},
                   {{DType::F32, {2, 3, 8}}}, {{"epsilon", 1e-6}, {"has_weight", int64_t(1)}}});
  cases.push_back({"nn.attention_grad",
                   {f32({1, 4, 5, 8}, 63), f32({1, 2, 7, 8}, 64), f32({1, 2, 7, 8}, 65), f32({1, 4, 5, 8}, 66)},
                   {{DType::F32, {1, 4, 5, 8}}, {DType::F32, {1, 2, 7, 8}}, {DType::F32, {1, 2, 7, 8}}},
                   {{"causal", int64_t(1)}, {"scale", 0.35}}});
  cases.push_back({"nn.embedding_grad", {randomTensor(DType::I64, {2, 3}, 67, 10), f32({2, 3, 4}, 68)},
                   {{DType::F32, {10, 4}}}, {{"num_embeddings", int64_t(10)}}});
  cases.push_back({"nn.embedding_grad", {randomTensor(DType::I64, {3, 5}, 67, 10), f32({3, 5, 4}, 68)},
                   {{DType::F32, {3, 4}}}, {{"num_embeddings", int64_t(3)}, {"vocab_start", int64_t(6)}}});
  cases.push_back({"nn.gather_grad", {randomTensor(DType::I32, {4}, 69, 6), f32({3, 4}, 70)},
                   {{DType::F32, {3, 6}}}, {{"axis", int64_t(1)}, {"axis_size", int64_t(6)}}});
  HostTensor dLoss{"dloss", DType::F32, {}, std::vector<uint8_t>(4)};
  *reinterpret_cast<float *>(dLoss.data.data()) = 0.5f;
  // The loss gradient written in bf16 from f32 logits (--loom-widen-results
  // folds its cast).
  cases.push_back({"nn.cross_entropy_grad",
                   {f32({6, 300}, 218), randomTensor(DType::I64, {6}, 219, 300), dLoss},
                   {{DType::BF16, {6, 300}}},
                   {{"ignore_index", int64_t(-100)}, {"reduction", std::string("mean")}}});
  cases.push_back({"nn.cross_entropy_grad", {f32({6, 7}, 71), labels, dLoss}, {{DType::F32, {6, 7}}},
                   {{"ignore_index", int64_t(-100)}, {"reduction", std::string("mean")}}});
  // The vocabulary-parallel loss: a block of classes [4, 8) of 8 (and a
  // long block, [1500, 3000), for the wide-row kernels); statistics with
  // positive sums, as the stats kernel makes them.
  for (int64_t classes : {int64_t(4), int64_t(1500)}) {
    HostTensor blockLabels = randomTensor(DType::I64, {6}, 81, 2 * classes);
    reinterpret_cast<int64_t *>(blockLabels.data.data())[1] = -100;
    HostTensor stats = f32({6, 6}, 82);
    for (size_t i = 0; i < stats.data.size() / 4; ++i)
      reinterpret_cast<float *>(stats.data.data())[i] =
          std::fabs(reinterpret_cast<float *>(stats.data.data())[i]) + 0.5f;
    cases.push_back({"nn.cross_entropy_stats", {f32({6, classes}, 83), blockLabels},
                     {{DType::F32, {6, 3}}},
                     {{"vocab_start", classes}, {"ignore_index", int64_t(-100)}}});
    cases.push_back({"nn.cross_entropy_block_grad", {f32({6, classes}, 84), blockLabels, dLoss, stats},
                     {{DType::F32, {6, classes}}},
                     {{"vocab_start", classes}, {"ignore_index", int64_t(-100)},
                      {"reduction", std::string("mean")}}});
    if (classes == 4)
      for (const char *reduction : {"mean", "sum"})
        cases.push_back({"nn.cross_entropy_combine", {stats, blockLabels}, {{DType::F32, {}}},
                         {{"ignore_index", int64_t(-100)}, {"reduction", std::string(reduction)}}});
  }
  // A fusion group: on CUDA one generated kernel (FusedKernelsMatch... below
  // covers shapes, broadcasts and alignments).
  cases.push_back({"nn.fused", {bf16({3, 37}, 73), bf16({37}, 74)},
                   {{DType::BF16, {3, 37}}, {DType::BF16, {3, 37}}},
                   {{"body", std::string("(bf16[3,37], bf16[37]) { %0 = nn.silu(%i0) : bf16[3,37]; "
                                         "%1 = nn.mul(%0, %i1) : bf16[3,37]; yield %0, %1 }")}}});
  cases.push_back({"nn.pad", {f32({2, 3}, 72)}, {{DType::F32, {4, 7}}},
                   {{"low", std::vector<int64_t>{1, 0}}, {"high", std::vector<int64_t>{1, 2}},
                    {"interior", std::vector<int64_t>{0, 1}}, {"value", 0.0}}});
  return cases;
}

TYPED_TEST(BackendConformance, AllocationIsZeroedAndAligned) {
  auto ptr = this->backend->allocate(1000);
  ASSERT_TRUE(static_cast<bool>(ptr)) << llvm::toString(ptr.takeError());
  std::vector<uint8_t> host(1000, 0xAB);
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToHost(host.data(), *ptr, host.size())));
  for (uint8_t b : host)
    ASSERT_EQ(b, 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*ptr) % 256, 0u);
  this->backend->deallocate(*ptr);
}

TYPED_TEST(BackendConformance, CopiesRoundTripAndMoveBytesOnAStream) {
  std::vector<uint8_t> source(4096);
  std::mt19937 rng(1);
  for (uint8_t &b : source)
    b = rng();
  void *a = cantFail(this->backend->allocate(source.size()));
  void *b = cantFail(this->backend->allocate(source.size()));
  ASSERT_FALSE(static_cast<bool>(this->backend->createStreams(2, 1)));
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToDevice(a, source.data(), source.size())));
  ASSERT_FALSE(static_cast<bool>(this->backend->copy(b, a, source.size(), /*stream=*/1)));
  ASSERT_FALSE(static_cast<bool>(this->backend->recordEvent(0, 1)));
  ASSERT_FALSE(static_cast<bool>(this->backend->waitEvent(0, 0)));
  ASSERT_FALSE(static_cast<bool>(this->backend->synchronize()));
  std::vector<uint8_t> back(source.size());
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToHost(back.data(), b, back.size())));
  EXPECT_EQ(back, source);
  this->backend->deallocate(a);
  this->backend->deallocate(b);
}

TYPED_TEST(BackendConformance, PreparingAGemmInPlaceThenRunningItIsExact) {
  // With outputsHoldNothing (the scratch arena before the first step) the
  // warm-up writes the output itself, and the GEMM then runs as usual.
  const int64_t m = 8, k = 16, n = 4;
  std::vector<float> a(m * k), b(k * n);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float &x : a)
    x = dist(rng);
  for (float &x : b)
    x = dist(rng);
  void *da = cantFail(this->backend->allocate(a.size() * 4));
  void *db = cantFail(this->backend->allocate(b.size() * 4));
  void *dc = cantFail(this->backend->allocate(m * n * 4));
  ASSERT_FALSE(static_cast<bool>(this->backend->createStreams(1, 0)));
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToDevice(da, a.data(), a.size() * 4)));
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToDevice(db, b.data(), b.size() * 4)));
  DeviceTensor ta, tb, tc;
  ta.data = da, ta.dtype = DType::F32, ta.shape = {m, k};
  tb.data = db, tb.dtype = DType::F32, tb.shape = {k, n};
  tc.data = dc, tc.dtype = DType::F32, tc.shape = {m, n};
  ASSERT_EQ(llvm::toString(this->backend->prepareKernel(*findKernel("nn.matmul"), {ta, tb}, {tc},
                                                        KernelAttrs(), 0,
                                                        /*outputsHoldNothing=*/true)),
            "");
  ASSERT_EQ(llvm::toString(this->backend->finishPreparing()), "");
  ASSERT_EQ(llvm::toString(this->backend->launch("nn.matmul", {ta, tb}, {tc}, KernelAttrs(), 0)),
            "");
  ASSERT_FALSE(static_cast<bool>(this->backend->synchronize()));
  std::vector<float> after(m * n);
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToHost(after.data(), dc, after.size() * 4)));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t p = 0; p < k; ++p)
        want += double(a[i * k + p]) * b[p * n + j];
      EXPECT_NEAR(after[i * n + j], want, 1e-3) << i << "," << j;
    }
  this->backend->deallocate(da);
  this->backend->deallocate(db);
  this->backend->deallocate(dc);
}

TYPED_TEST(BackendConformance, PreparingAGemmLeavesItsOutputAlone) {
  // prepareKernel runs a GEMM once before any step (on CUDA, so that
  // cuBLASLt loads its kernel then, not mid-step); the program's buffers
  // keep their contents, and the GEMM then runs as usual.
  const int64_t m = 8, k = 16, n = 4;
  std::vector<float> a(m * k), b(k * n), before(m * n, 7.5f);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float &x : a)
    x = dist(rng);
  for (float &x : b)
    x = dist(rng);
  void *da = cantFail(this->backend->allocate(a.size() * 4));
  void *db = cantFail(this->backend->allocate(b.size() * 4));
  void *dc = cantFail(this->backend->allocate(before.size() * 4));
  ASSERT_FALSE(static_cast<bool>(this->backend->createStreams(1, 0)));
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToDevice(da, a.data(), a.size() * 4)));
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToDevice(db, b.data(), b.size() * 4)));
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToDevice(dc, before.data(), before.size() * 4)));
  DeviceTensor ta, tb, tc;
  ta.data = da, ta.dtype = DType::F32, ta.shape = {m, k};
  tb.data = db, tb.dtype = DType::F32, tb.shape = {k, n};
  tc.data = dc, tc.dtype = DType::F32, tc.shape = {m, n};
  ASSERT_EQ(llvm::toString(this->backend->prepareKernel(*findKernel("nn.matmul"), {ta, tb}, {tc},
                                                        KernelAttrs(), 0)),
            "");
  ASSERT_EQ(llvm::toString(this->backend->finishPreparing()), "");
  std::vector<float> after(before.size());
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToHost(after.data(), dc, after.size() * 4)));
  EXPECT_EQ(after, before);
  ASSERT_EQ(llvm::toString(this->backend->launch("nn.matmul", {ta, tb}, {tc}, KernelAttrs(), 0)),
            "");
  ASSERT_FALSE(static_cast<bool>(this->backend->synchronize()));
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToHost(after.data(), dc, after.size() * 4)));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t p = 0; p < k; ++p)
        want += double(a[i * k + p]) * b[p * n + j];
      EXPECT_NEAR(after[i * n + j], want, 1e-3) << i << "," << j;
    }
  for (void *p : {da, db, dc})
    this->backend->deallocate(p);
}

TYPED_TEST(BackendConformance, HostArenaCopiesRoundTrip) {
  // An offloaded activation: device -> host arena on one stream, then back
  // to another device buffer after an event (the host arena is pinned
  // memory on CUDA; copies find their direction from the addresses).
  const size_t n = 1 << 20;
  std::vector<float> source(n), back(n, 0.0f);
  for (size_t i = 0; i < n; ++i)
    source[i] = float(i % 977) * 0.5f - 3.0f;
  void *device = cantFail(this->backend->allocate(n * 4));
  void *host = cantFail(this->backend->allocateHost(n * 4));
  void *again = cantFail(this->backend->allocate(n * 4));
  ASSERT_FALSE(static_cast<bool>(this->backend->createStreams(2, 1)));
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToDevice(device, source.data(), n * 4)));
  ASSERT_EQ(llvm::toString(this->backend->copy(host, device, n * 4, 0)), "");
  ASSERT_EQ(llvm::toString(this->backend->recordEvent(0, 0)), "");
  ASSERT_EQ(llvm::toString(this->backend->waitEvent(0, 1)), "");
  ASSERT_EQ(llvm::toString(this->backend->copy(again, host, n * 4, 1)), "");
  ASSERT_FALSE(static_cast<bool>(this->backend->synchronize()));
  ASSERT_FALSE(static_cast<bool>(this->backend->copyToHost(back.data(), again, n * 4)));
  EXPECT_EQ(back, source);
  // The host arena is host memory: its bytes read directly.
  EXPECT_EQ(static_cast<const float *>(host)[977], source[977]);
  this->backend->deallocate(device);
  this->backend->deallocate(again);
  this->backend->deallocateHost(host);
}

TYPED_TEST(BackendConformance, GemmsOnTwoStreamsAtOnceAreEachExact) {
  // DualPipe's overlapped F&B runs GEMMs on two streams at once. A long K
  // and a small M x N is where a GEMM splits K and keeps partial sums in
  // its workspace: two of them in flight must not share one (on CUDA each
  // stream that launches kernels has its own cuBLASLt workspace).
  const int64_t m = 32, k = 32768, n = 32;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> a[2], b[2];
  void *da[2], *db[2], *dc[2];
  DeviceTensor ta[2], tb[2], tc[2];
  ASSERT_FALSE(static_cast<bool>(this->backend->createStreams(2, 0)));
  for (int s = 0; s < 2; ++s) {
    a[s].resize(m * k);
    b[s].resize(k * n);
    for (float &x : a[s])
      x = dist(rng);
    for (float &x : b[s])
      x = dist(rng);
    da[s] = cantFail(this->backend->allocate(a[s].size() * 4));
    db[s] = cantFail(this->backend->allocate(b[s].size() * 4));
    dc[s] = cantFail(this->backend->allocate(m * n * 4));
    ASSERT_FALSE(static_cast<bool>(this->backend->copyToDevice(da[s], a[s].data(), a[s].size() * 4)));
    ASSERT_FALSE(static_cast<bool>(this->backend->copyToDevice(db[s], b[s].data(), b[s].size() * 4)));
    ta[s].data = da[s], ta[s].dtype = DType::F32, ta[s].shape = {m, k};
    tb[s].data = db[s], tb[s].dtype = DType::F32, tb[s].shape = {k, n};
    tc[s].data = dc[s], tc[s].dtype = DType::F32, tc[s].shape = {m, n};
    ASSERT_EQ(llvm::toString(this->backend->prepareKernel(*findKernel("nn.matmul"), {ta[s], tb[s]},
                                                          {tc[s]}, KernelAttrs(), s)),
              "");
  }
  ASSERT_EQ(llvm::toString(this->backend->finishPreparing()), "");
  for (int round = 0; round < 20; ++round)
    for (int s = 0; s < 2; ++s)
      ASSERT_EQ(llvm::toString(this->backend->launch("nn.matmul", {ta[s], tb[s]}, {tc[s]},
                                                     KernelAttrs(), s)),
                "");
  ASSERT_FALSE(static_cast<bool>(this->backend->synchronize()));
  for (int s = 0; s < 2; ++s) {
    std::vector<float> got(m * n);
    ASSERT_FALSE(static_cast<bool>(this->backend->copyToHost(got.data(), dc[s], got.size() * 4)));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t p = 0; p < k; ++p)
          want += double(a[s][i * k + p]) * b[s][p * n + j];
        ASSERT_NEAR(got[i * n + j], want, 1e-2) << "stream " << s << " at " << i << "," << j;
      }
    for (void *p : {da[s], db[s], dc[s]})
      this->backend->deallocate(p);
  }
}

TYPED_TEST(BackendConformance, RejectsUnknownKernelsAndStreams) {
  ASSERT_FALSE(static_cast<bool>(this->backend->createStreams(1, 0)));
  llvm::Error err = this->backend->launch("nn.no_such_kernel", {}, {}, KernelAttrs(), 0);
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("nn.no_such_kernel"), std::string::npos);
  llvm::Error streamErr = this->backend->launch("nn.iota", {}, {}, KernelAttrs(), 5);
  EXPECT_TRUE(static_cast<bool>(streamErr));
  llvm::consumeError(std::move(streamErr));
}

TYPED_TEST(BackendConformance, EveryKernelMatchesTheCpuKernelsOnRandomInputs) {
  if (std::is_same_v<TypeParam, CpuBackendFactory>)
    GTEST_SKIP() << "the cpu backend runs the CPU kernels themselves, so comparing it with "
                    "them proves nothing; LoomConformanceTests checks them against NumPy";
  std::vector<KernelCase> cases = kernelCases();
  // Every kernel the format knows has a case here.
  std::set<std::string> covered;
  for (const KernelCase &c : cases)
    covered.insert(c.kernel);
#define LOOM_KERNEL(NAME, MIN_IN, MAX_IN, NUM_OUT) \
  EXPECT_TRUE(covered.count(NAME)) << "no conformance case for " << NAME;
#include "runtime/abi/Kernels.def"
#undef LOOM_KERNEL

  ASSERT_FALSE(static_cast<bool>(this->backend->createStreams(1, 0)));
  for (const KernelCase &c : cases) {
    SCOPED_TRACE(c.kernel);
    // Reference: the CPU kernels on host memory.
    std::vector<cpu::Tensor> refIn, refOut;
    std::vector<std::vector<uint8_t>> refOutData;
    for (const HostTensor &t : c.inputs)
      refIn.push_back({const_cast<uint8_t *>(t.data.data()), t.dtype, t.shape});
    for (size_t o = 0; o < c.outputs.size(); ++o) {
      const auto &[dtype, shape] = c.outputs[o];
      if (o < c.aliases.size() && c.aliases[o] >= 0)
        refOutData.push_back(c.inputs[c.aliases[o]].data);
      else
        refOutData.emplace_back(count(shape) * dtypeSize(dtype));
    }
    for (size_t o = 0; o < c.aliases.size(); ++o)
      if (c.aliases[o] >= 0)
        refIn[c.aliases[o]].data = refOutData[o].data();
    for (size_t i = 0; i < c.outputs.size(); ++i)
      refOut.push_back({refOutData[i].data(), c.outputs[i].first, c.outputs[i].second});
    ASSERT_FALSE(static_cast<bool>(cpu::runKernel(c.kernel, refIn, refOut, KernelAttrs(c.attrs))));

    // The backend under test, through device memory.
    std::vector<void *> allocations;
    std::vector<DeviceTensor> in, out;
    for (const HostTensor &t : c.inputs) {
      void *p = cantFail(this->backend->allocate(t.data.size()));
      ASSERT_FALSE(static_cast<bool>(this->backend->copyToDevice(p, t.data.data(), t.data.size())));
      allocations.push_back(p);
      in.push_back({p, t.dtype, t.shape});
    }
    for (size_t o = 0; o < c.outputs.size(); ++o) {
      const auto &[dtype, shape] = c.outputs[o];
      if (o < c.aliases.size() && c.aliases[o] >= 0) {
        out.push_back({in[c.aliases[o]].data, dtype, shape});
        continue;
      }
      void *p = cantFail(this->backend->allocate(count(shape) * dtypeSize(dtype)));
      allocations.push_back(p);
      out.push_back({p, dtype, shape});
    }
    // Every kernel is tried and every mismatch reported, not just the first.
    llvm::Error err = this->backend->launch(c.kernel, in, out, KernelAttrs(c.attrs), 0);
    if (!err)
      err = this->backend->synchronize();
    EXPECT_FALSE(static_cast<bool>(err)) << llvm::toString(std::move(err));
    for (size_t o = 0; o < out.size(); ++o) {
      std::vector<uint8_t> got(refOutData[o].size());
      ASSERT_FALSE(static_cast<bool>(this->backend->copyToHost(got.data(), out[o].data, got.size())));
      DType dtype = out[o].dtype;
      double tol = TypeParam::tolerance(dtype) * c.toleranceScale;
      bool anyNonZero = false;
      int64_t mismatches = 0, firstBad = -1;
      double badWant = 0, badHave = 0;
      for (int64_t i = 0; i < count(out[o].shape); ++i) {
        double want = loadAsDouble(refOutData[o].data(), dtype, i);
        double have = loadAsDouble(got.data(), dtype, i);
        anyNonZero |= want != 0;
        bool same = (std::isnan(want) && std::isnan(have)) ||
                    std::fabs(have - want) <= tol * (1 + std::fabs(want));
        if (!same && mismatches++ == 0) {
          firstBad = i;
          badWant = want;
          badHave = have;
        }
      }
      EXPECT_EQ(mismatches, 0) << "output " << o << ": " << mismatches << " of "
                               << count(out[o].shape) << " elements differ; first at " << firstBad
                               << ": got " << badHave << ", expected " << badWant;
      // A reference of all zeros would make the comparison vacuous.
      if (c.kernel != "nn.compare")
        EXPECT_TRUE(anyNonZero) << "output " << o << " is all zeros";
    }
    for (void *p : allocations)
      this->backend->deallocate(p);
  }
}

/// y = relu(x @ w^T) + b, hand-built, so its output can be derived by hand.
Executable handBuiltProgram() {
  Executable exe;
  exe.modelName = "hand";
  exe.mode = "infer";
  ParameterDesc w{"w", DType::F32, {2, 3}, true, InitKind::Data, 0, {}};
  std::vector<float> wv = {1, -1, 2, 0.5f, 0.5f, -3};
  w.data.assign(reinterpret_cast<uint8_t *>(wv.data()), reinterpret_cast<uint8_t *>(wv.data()) + 24);
  ParameterDesc b{"b", DType::F32, {2}, true, InitKind::Ones, 0, {}};
  exe.parameters = {w, b};
  RankProgram r;
  r.arenaSize[0] = 512;
  r.arenaSize[1] = 768;
  r.streams = {"compute"};
  r.buffers = {{"x", ArenaKind::Scratch, 0, DType::F32, {1, 3}},
               {"w", ArenaKind::Persistent, 0, DType::F32, {2, 3}},
               {"b", ArenaKind::Persistent, 256, DType::F32, {2}},
               {"", ArenaKind::Scratch, 256, DType::F32, {1, 2}},
               {"", ArenaKind::Scratch, 512, DType::F32, {1, 2}},
               {"y", ArenaKind::Scratch, 0, DType::F32, {1, 2}}};
  r.params = {{0, 1}, {1, 2}};
  r.inputs = {{"x", 0}};
  r.outputs = {{"y", 5}};
  Instruction mm{InstrKind::Kernel, "nn.matmul", 0, 0, {0, 1}, {3},
                 {{"transpose_lhs", int64_t(0)}, {"transpose_rhs", int64_t(1)}}, ""};
  Instruction relu{InstrKind::Kernel, "nn.relu", 0, 0, {3}, {4}, {}, ""};
  Instruction add{InstrKind::Kernel, "nn.add", 0, 0, {4, 2}, {5}, {}, ""};
  r.instructions = {mm, relu, add};
  exe.ranks = {r};
  return exe;
}

TYPED_TEST(BackendConformance, RunsAProgramWithReusedScratchMemory) {
  Executable exe = handBuiltProgram();
  ASSERT_FALSE(static_cast<bool>(verifyExecutable(exe)));
  auto executor = ProgramExecutor::create(exe, 0, *this->backend, /*seed=*/0);
  ASSERT_TRUE(static_cast<bool>(executor)) << llvm::toString(executor.takeError());
  std::vector<float> x = {1, 2, 3};
  HostTensor input{"x", DType::F32, {1, 3}, {}};
  input.data.assign(reinterpret_cast<uint8_t *>(x.data()), reinterpret_cast<uint8_t *>(x.data()) + 12);
  ASSERT_FALSE(static_cast<bool>((*executor)->setInput("x", input)));
  for (int step = 0; step < 2; ++step) { // a second step sees the same result
    ASSERT_FALSE(static_cast<bool>((*executor)->run()));
    HostTensor y = cantFail((*executor)->getOutput("y"));
    const float *yv = reinterpret_cast<const float *>(y.data.data());
    // x@w^T = [1-2+6, 0.5+1-9] = [5, -7.5]; relu -> [5, 0]; +1 -> [6, 1].
    EXPECT_FLOAT_EQ(yv[0], 6.0f);
    EXPECT_FLOAT_EQ(yv[1], 1.0f);
    ASSERT_FALSE(static_cast<bool>((*executor)->setInput("x", input)));
  }
}

// With step capture on, later runs replay a recording (a CUDA Graph): they
// must see new inputs and give the eager run's results. A backend that
// cannot capture runs every step eagerly.
TYPED_TEST(BackendConformance, CapturedStepsReplayWithNewInputs) {
  Executable exe = handBuiltProgram();
  auto executor = cantFail(ProgramExecutor::create(exe, 0, *this->backend, 0));
  executor->setStepCapture(true);
  for (int step = 0; step < 4; ++step) {
    std::vector<float> x = {1.0f + step, 2, 3};
    HostTensor input{"x", DType::F32, {1, 3}, {}};
    input.data.assign(reinterpret_cast<uint8_t *>(x.data()),
                      reinterpret_cast<uint8_t *>(x.data()) + 12);
    ASSERT_FALSE(static_cast<bool>(executor->setInput("x", input)));
    ASSERT_FALSE(static_cast<bool>(executor->run()));
    HostTensor y = cantFail(executor->getOutput("y"));
    const float *yv = reinterpret_cast<const float *>(y.data.data());
    // x@w^T = [x0 - 2 + 6, 0.5 x0 + 1 - 9]; relu; + 1.
    EXPECT_FLOAT_EQ(yv[0], x[0] + 4 + 1) << "step " << step;
    EXPECT_FLOAT_EQ(yv[1], std::max(0.5f * x[0] - 8, 0.0f) + 1) << "step " << step;
  }
  if (this->backend->canCapture())
    EXPECT_EQ(executor->captureStatus(), "captured as one graph");
  else
    EXPECT_EQ(executor->captureStatus(), "not captured");
}

// An asynchronous snapshot holds the buffers as they were when it was
// taken, although the next steps run at once and overwrite them: the
// buffers are copied in the order the step first writes them, and each
// first writer waits until its buffers have been read, eagerly and in a
// captured step. Here the step writes w1 (on one stream) before w0 (on
// another), while the snapshot is asked for w0 then w1. The buffers are
// large, so that a copy still running when the step writes would be caught.
TYPED_TEST(BackendConformance, SnapshotsHoldTheValuesOfTheirStepBoundary) {
  constexpr int64_t n = 16 << 20; // 64 MB of f32
  constexpr uint64_t bytes = uint64_t(n) * 4;
  Executable exe;
  exe.modelName = "snapshot";
  exe.mode = "infer";
  exe.parameters = {{"w0", DType::F32, {n}, true, InitKind::Zeros, 0, {}},
                    {"w1", DType::F32, {n}, true, InitKind::Zeros, 0, {}}};
  RankProgram r;
  r.arenaSize[0] = 2 * bytes; // persistent
  r.arenaSize[1] = bytes;     // scratch
  r.streams = {"compute", "other"};
  r.numEvents = 1;
  r.buffers = {{"x", ArenaKind::Scratch, 0, DType::F32, {n}},
               {"w0", ArenaKind::Persistent, 0, DType::F32, {n}},
               {"w1", ArenaKind::Persistent, bytes, DType::F32, {n}}};
  r.params = {{0, 1}, {1, 2}};
  r.inputs = {{"x", 0}};
  // w1 += x on the second stream, then w0 += 2x on the first.
  r.instructions = {{InstrKind::Kernel, "nn.add", 1, 0, {2, 0}, {2}, {}, ""},
                    {InstrKind::RecordEvent, "", 1, 0, {}, {}, {}, ""},
                    {InstrKind::WaitEvent, "", 0, 0, {}, {}, {}, ""},
                    {InstrKind::Kernel, "nn.add", 0, 0, {1, 0}, {1}, {}, ""},
                    {InstrKind::Kernel, "nn.add", 0, 0, {1, 0}, {1}, {}, ""}};
  exe.ranks = {r};
  if (llvm::Error err = verifyExecutable(exe))
    FAIL() << llvm::toString(std::move(err));
  auto executor = cantFail(ProgramExecutor::create(exe, 0, *this->backend, 0));
  executor->setStepCapture(true);
  HostTensor ones{"x", DType::F32, {n}, std::vector<uint8_t>(size_t(bytes))};
  for (int64_t i = 0; i < n; ++i)
    reinterpret_cast<float *>(ones.data.data())[i] = 1.0f;
  for (int step = 1; step <= 5; ++step) {
    // w0 holds 2 (step - 1) and w1 step - 1 here; the snapshot must say so.
    auto pending = executor->copyBuffersToHostAsync({1, 2});
    ASSERT_TRUE(static_cast<bool>(pending)) << llvm::toString(pending.takeError());
    ASSERT_FALSE(static_cast<bool>(executor->setInput("x", ones)));
    ASSERT_FALSE(static_cast<bool>(executor->run()));
    ASSERT_FALSE(static_cast<bool>((*pending)->wait()));
    for (int w = 0; w < 2; ++w) {
      const float *snapshot = reinterpret_cast<const float *>((*pending)->region(w));
      const float expected = float((w == 0 ? 2 : 1) * (step - 1));
      int64_t wrong = 0;
      for (int64_t i = 0; i < n; ++i)
        wrong += snapshot[i] != expected;
      EXPECT_EQ(wrong, 0) << "w" << w << ", step " << step;
    }
    HostTensor w0 = cantFail(executor->readBuffer(1));
    EXPECT_EQ(reinterpret_cast<const float *>(w0.data.data())[n - 1], float(2 * step));
  }
  if (this->backend->canCapture())
    EXPECT_EQ(executor->captureStatus(), "captured as one graph");
}

// Profiles from device timestamps (where the backend has them) name every
// kernel with a non-negative duration, in issue order on the one stream.
TYPED_TEST(BackendConformance, ProfilesTimeEveryKernel) {
  Executable exe = handBuiltProgram();
  auto executor = cantFail(ProgramExecutor::create(exe, 0, *this->backend, 0));
  executor->setProfiling(true);
  std::vector<float> x = {1, 2, 3};
  HostTensor input{"x", DType::F32, {1, 3}, {}};
  input.data.assign(reinterpret_cast<uint8_t *>(x.data()), reinterpret_cast<uint8_t *>(x.data()) + 12);
  for (int step = 0; step < 2; ++step) {
    ASSERT_FALSE(static_cast<bool>(executor->setInput("x", input)));
    ASSERT_FALSE(static_cast<bool>(executor->run()));
  }
  const auto &trace = executor->traceEvents();
  ASSERT_EQ(trace.size(), 6u);
  const char *names[] = {"nn.matmul", "nn.relu", "nn.add"};
  for (size_t i = 0; i < trace.size(); ++i) {
    EXPECT_EQ(trace[i].name, names[i % 3]);
    EXPECT_GE(trace[i].durationSeconds, 0.0);
    if (i > 0)
      EXPECT_GE(trace[i].startSeconds, trace[i - 1].startSeconds);
  }
  EXPECT_EQ(executor->profile().size(), 3u);
}

// Profiling and step capture together: where the backend stamps times on
// the device (cuda), the stamps are recorded in the graph, so the steps
// after the captured one are timed as replays, give the eager results, and
// still name every kernel in issue order. Elsewhere every step is eager.
TYPED_TEST(BackendConformance, ProfiledStepsAreCapturedAndTimedInTheReplay) {
  Executable exe = handBuiltProgram();
  auto executor = cantFail(ProgramExecutor::create(exe, 0, *this->backend, 0));
  executor->setProfiling(true);
  executor->setStepCapture(true);
  const int steps = 4;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> x = {1.0f + step, 2, 3};
    HostTensor input{"x", DType::F32, {1, 3}, {}};
    input.data.assign(reinterpret_cast<uint8_t *>(x.data()),
                      reinterpret_cast<uint8_t *>(x.data()) + 12);
    ASSERT_FALSE(static_cast<bool>(executor->setInput("x", input)));
    ASSERT_FALSE(static_cast<bool>(executor->run()));
    HostTensor y = cantFail(executor->getOutput("y"));
    const float *yv = reinterpret_cast<const float *>(y.data.data());
    EXPECT_FLOAT_EQ(yv[0], x[0] + 4 + 1) << "step " << step;
  }
  const bool replays = this->backend->canCapture() && this->backend->canTimestamp();
  EXPECT_EQ(executor->captureStatus(), replays ? "captured as one graph" : "not captured");
  const auto &trace = executor->traceEvents();
  ASSERT_EQ(trace.size(), size_t(3 * steps));
  const char *names[] = {"nn.matmul", "nn.relu", "nn.add"};
  for (size_t i = 0; i < trace.size(); ++i) {
    EXPECT_EQ(trace[i].name, names[i % 3]) << i;
    EXPECT_EQ(trace[i].run, int64_t(i / 3 + 1)) << i;
    // The first step is eager; the second is captured, then replayed.
    EXPECT_EQ(trace[i].replayed, replays && i >= 3) << i;
    EXPECT_GE(trace[i].durationSeconds, 0.0) << i;
    if (i % 3 > 0)
      EXPECT_GE(trace[i].startSeconds, trace[i - 1].startSeconds + trace[i - 1].durationSeconds -
                                           1e-6)
          << "kernel " << i << " began before the one before it ended";
    if (i >= 3 && i % 3 == 0)
      EXPECT_GT(trace[i].startSeconds, trace[i - 1].startSeconds) << "run " << trace[i].run;
  }
}

TYPED_TEST(BackendConformance, ChecksInputsAgainstTheSignature) {
  Executable exe = handBuiltProgram();
  auto executor = cantFail(ProgramExecutor::create(exe, 0, *this->backend, 0));
  HostTensor wrong{"x", DType::F32, {3, 1}, std::vector<uint8_t>(12)};
  llvm::Error err = executor->setInput("x", wrong);
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("must be f32 [1x3], got f32 [3x1]"), std::string::npos);
  llvm::Error missing = executor->setInput("nope", wrong);
  ASSERT_TRUE(static_cast<bool>(missing));
  llvm::consumeError(std::move(missing));
}

/// Two ranks (pp = 2) that trade x f32[2, 3] and k i64[2] in one exchange
/// and output what they received.
Executable exchangeProgram() {
  Executable exe;
  exe.modelName = "exchange";
  exe.mode = "infer";
  exe.mesh = {{"pp"}, {2}};
  for (uint32_t rank = 0; rank < 2; ++rank) {
    RankProgram r;
    r.rank = rank;
    r.arenaSize[1] = 128;
    r.streams = {"pp_comm"};
    r.buffers = {{"x", ArenaKind::Scratch, 0, DType::F32, {2, 3}},
                 {"k", ArenaKind::Scratch, 32, DType::I64, {2}},
                 {"got_x", ArenaKind::Scratch, 64, DType::F32, {2, 3}},
                 {"got_k", ArenaKind::Scratch, 96, DType::I64, {2}}};
    r.inputs = {{"x", 0}, {"k", 1}};
    r.outputs = {{"got_x", 2}, {"got_k", 3}};
    Instruction exchange{InstrKind::Collective, "", 0, 0, {0, 1}, {2, 3}, {}, "exchange.mlir:3:5"};
    int64_t partner = 1 - int64_t(rank);
    exchange.collective.kind = CollectiveKind::Exchange;
    exchange.collective.axes = {"pp"};
    exchange.collective.sendPeers = {partner, partner};
    exchange.collective.recvPeers = {partner, partner};
    r.instructions = {exchange};
    exe.ranks.push_back(std::move(r));
  }
  return exe;
}

// An exchange instruction runs through ProgramExecutor and the backend's
// exchange (host pointers on the CPU, staged through the host for a GPU with
// thread communicators), with and without profiling (traced as "exchange").
TYPED_TEST(BackendConformance, RunsAnExchangeBetweenTwoRanks) {
  Executable exe = exchangeProgram();
  ASSERT_EQ(llvm::toString(verifyExecutable(exe)), "");
  std::unique_ptr<Backend> other = TypeParam::create();
  ASSERT_NE(other, nullptr);
  Backend *backends[2] = {this->backend.get(), other.get()};
  auto comms = createThreadCommunicators(exe.mesh, std::chrono::seconds(20));
  auto xOf = [](uint32_t rank) {
    return std::vector<float>{1.5f + rank, -2, 0.25f, -0.5f * rank, 3, -1};
  };
  auto kOf = [](uint32_t rank) { return std::vector<int64_t>{int64_t(rank) << 40, -7}; };
  std::vector<std::string> errors(2);
  std::vector<std::vector<float>> gotX(2);
  std::vector<std::vector<int64_t>> gotK(2);
  std::vector<std::vector<std::string>> traced(2);
  std::vector<std::optional<double>> collectiveSeconds(2);
  std::vector<std::thread> threads;
  for (uint32_t rank = 0; rank < 2; ++rank)
    threads.emplace_back([&, rank] {
      backends[rank]->attachCommunicator(comms[rank].get());
      auto run = [&]() -> llvm::Error {
        auto executor = ProgramExecutor::create(exe, rank, *backends[rank], 0);
        if (!executor)
          return executor.takeError();
        std::vector<float> x = xOf(rank);
        std::vector<int64_t> k = kOf(rank);
        HostTensor xt{"x", DType::F32, {2, 3}, {}}, kt{"k", DType::I64, {2}, {}};
        auto *xb = reinterpret_cast<uint8_t *>(x.data());
        auto *kb = reinterpret_cast<uint8_t *>(k.data());
        xt.data.assign(xb, xb + 24);
        kt.data.assign(kb, kb + 16);
        // Collective timing (device timestamps) adds nothing to the trace.
        (*executor)->setCollectiveTiming(true);
        for (bool profiling : {false, true}) {
          (*executor)->setProfiling(profiling);
          if (auto err = (*executor)->setInput("x", xt))
            return err;
          if (auto err = (*executor)->setInput("k", kt))
            return err;
          if (auto err = (*executor)->run())
            return err;
        }
        for (const auto &event : (*executor)->traceEvents())
          traced[rank].push_back(event.name);
        collectiveSeconds[rank] = (*executor)->lastCollectiveSeconds();
        auto gx = (*executor)->getOutput("got_x");
        if (!gx)
          return gx.takeError();
        auto gk = (*executor)->getOutput("got_k");
        if (!gk)
          return gk.takeError();
        gotX[rank].resize(6);
        gotK[rank].resize(2);
        std::memcpy(gotX[rank].data(), gx->data.data(), 24);
        std::memcpy(gotK[rank].data(), gk->data.data(), 16);
        return llvm::Error::success();
      };
      if (llvm::Error err = run()) {
        errors[rank] = llvm::toString(std::move(err));
        comms[rank]->abort(errors[rank]);
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (uint32_t rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    EXPECT_EQ(gotX[rank], xOf(1 - rank)) << "rank " << rank;
    EXPECT_EQ(gotK[rank], kOf(1 - rank)) << "rank " << rank;
    EXPECT_EQ(traced[rank], std::vector<std::string>{"exchange"}) << "rank " << rank;
    // Timed on the device where there are device timestamps; elsewhere
    // the host's communicator times its collectives.
    EXPECT_EQ(collectiveSeconds[rank].has_value(), backends[rank]->canTimestamp());
    if (collectiveSeconds[rank])
      EXPECT_GE(*collectiveSeconds[rank], 0.0);
  }
}

// gather_rows and scatter_rows (expert parallelism's all-to-all) through
// the backend: each rank receives the rows its range names from the rank
// holding them, zeros elsewhere; scattering those rows back adds each to
// its holder, so every row named once comes home. Two ranks as threads
// (the CUDA backend stages through the host with thread communicators).
TYPED_TEST(BackendConformance, MovesRowsByIndex) {
  Mesh mesh{{"ep"}, {2}};
  std::unique_ptr<Backend> other = TypeParam::create();
  ASSERT_NE(other, nullptr);
  Backend *backends[2] = {this->backend.get(), other.get()};
  auto comms = createThreadCommunicators(mesh, std::chrono::seconds(20));
  // The whole is [6, 2]: rank r holds rows 3r..3r+2, row j = (j, -j/2).
  auto xOf = [](int64_t rank) {
    std::vector<float> x;
    for (int64_t j = 3 * rank; j < 3 * rank + 3; ++j)
      x.insert(x.end(), {float(j), -0.5f * float(j)});
    return x;
  };
  const std::vector<int64_t> rows{4, 0, 5, 1, 3, 2};
  const std::vector<int32_t> ranges{0, 2, 2, 6};
  std::vector<std::string> errors(2);
  std::vector<std::vector<float>> gathered(2), back(2);
  std::vector<std::thread> threads;
  for (int64_t rank = 0; rank < 2; ++rank)
    threads.emplace_back([&, rank] {
      Backend &b = *backends[rank];
      b.attachCommunicator(comms[rank].get());
      auto run = [&]() -> llvm::Error {
        if (auto err = b.createStreams(1, 0))
          return err;
        auto place = [&](const void *host, size_t bytes) -> llvm::Expected<void *> {
          auto p = b.allocate(bytes);
          if (!p)
            return p.takeError();
          if (auto err = b.copyToDevice(*p, host, bytes))
            return std::move(err);
          return *p;
        };
        std::vector<float> x = xOf(rank);
        auto xd = place(x.data(), x.size() * 4);
        auto rd = place(rows.data(), rows.size() * 8);
        auto gd = place(ranges.data(), ranges.size() * 4);
        auto od = b.allocate(6 * 2 * 4);
        auto bd = b.allocate(3 * 2 * 4);
        for (auto *e : {&xd, &rd, &gd, &od, &bd})
          if (!*e)
            return e->takeError();
        CollectiveDesc gather;
        gather.kind = CollectiveKind::GatherRows;
        gather.axes = {"ep"};
        DeviceTensor rowsT{*rd, DType::I64, {6}}, rangesT{*gd, DType::I32, {2, 2}};
        DeviceTensor out{*od, DType::F32, {6, 2}};
        if (auto err = b.moveRows(gather, {*xd, DType::F32, {3, 2}}, rowsT, rangesT, out, 0))
          return err;
        CollectiveDesc scatter = gather;
        scatter.kind = CollectiveKind::ScatterRows;
        if (auto err = b.moveRows(scatter, out, rowsT, rangesT, {*bd, DType::F32, {3, 2}}, 0))
          return err;
        if (auto err = b.synchronize())
          return err;
        gathered[rank].resize(12);
        back[rank].resize(6);
        if (auto err = b.copyToHost(gathered[rank].data(), *od, 48))
          return err;
        if (auto err = b.copyToHost(back[rank].data(), *bd, 24))
          return err;
        for (void *p : {*xd, *rd, *gd, *od, *bd})
          b.deallocate(p);
        return llvm::Error::success();
      };
      if (llvm::Error err = run()) {
        errors[rank] = llvm::toString(std::move(err));
        comms[rank]->abort(errors[rank]);
      }
    });
  for (std::thread &t : threads)
    t.join();
  auto row = [](int64_t j) { return std::vector<float>{float(j), -0.5f * float(j)}; };
  for (int64_t rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(errors[rank], "") << "rank " << rank;
    std::vector<float> expected;
    for (int64_t i = 0; i < 6; ++i) {
      const bool mine = i >= ranges[2 * rank] && i < ranges[2 * rank + 1];
      std::vector<float> r = mine ? row(rows[i]) : std::vector<float>{0, 0};
      expected.insert(expected.end(), r.begin(), r.end());
    }
    EXPECT_EQ(gathered[rank], expected) << "rank " << rank;
    EXPECT_EQ(back[rank], xOf(rank)) << "rank " << rank;
  }
}

//===----------------------------------------------------------------------===//
// Fusion groups (nn.fused): on CUDA, generated kernels
//===----------------------------------------------------------------------===//

std::string typeText(DType dtype, const std::vector<int64_t> &shape) {
  std::string text = std::string(dtypeName(dtype)) + "[";
  for (size_t d = 0; d < shape.size(); ++d)
    text += (d ? "," : "") + std::to_string(shape[d]);
  return text + "]";
}

/// Bodies over odd and even sizes, broadcasts, bf16, f16 and f32: the
/// training step's groups and the generator's corners.
std::vector<std::string> fusedBodies() {
  std::vector<std::string> bodies;
  for (std::vector<int64_t> shape : {std::vector<int64_t>{1}, {7}, {8}, {9}, {3, 37}, {4099},
                                     {1, 64, 512}, {2, 1000, 13}}) {
    std::string t = typeText(DType::BF16, shape);
    bodies.push_back("(" + t + ", " + t + ") { %0 = nn.silu(%i0) : " + t +
                     "; %1 = nn.mul(%0, %i1) : " + t + "; yield %0, %1 }");
    bodies.push_back("(" + t + ", " + t + ", " + t + ") { %0 = nn.mul(%i0, %i1) : " + t +
                     "; %1 = nn.silu_grad(%i2, %0) : " + t + "; yield %1 }");
  }
  bodies.push_back("(f32[5,333], f32[333], f32[5,1]) { %0 = nn.add(%i0, %i1) : f32[5,333]; "
                   "%1 = nn.gelu(%0) {approximate = tanh} : f32[5,333]; "
                   "%2 = nn.mul(%1, %i2) : f32[5,333]; %3 = nn.cast(%2) : bf16[5,333]; "
                   "yield %3, %1 }");
  bodies.push_back("(f16[3,1,250], f32[250]) { %0 = nn.cast(%i0) : f32[3,1,250]; "
                   "%1 = nn.sub(%0, %i1) : f32[3,1,250]; %2 = nn.broadcast(%1) : f32[3,4,250]; "
                   "%3 = nn.gelu_grad(%2, %2) {approximate = none} : f32[3,4,250]; "
                   "%4 = nn.cast(%3) : f16[3,4,250]; %5 = nn.exp(%i1) : f32[250]; "
                   "yield %4, %1, %5 }");
  bodies.push_back("(f32[], bf16[77]) { %0 = nn.cast(%i1) : f32[77]; "
                   "%1 = nn.maximum(%0, %i0) : f32[77]; %2 = nn.tanh(%1) : f32[77]; "
                   "%3 = nn.cast(%2) : bf16[77]; yield %3 }");
  bodies.push_back("(f32[0,5]) { %0 = nn.exp(%i0) : f32[0,5]; yield %0 }");
  bodies.push_back("(bf16[5,67], bf16[67], i1[5,67]) { %0 = nn.compare(%i0, %i1) "
                   "{predicate = ge} : i1[5,67]; %1 = nn.where(%0, %i0, %i1) : bf16[5,67]; "
                   "%2 = nn.where(%i2, %1, %i0) : bf16[5,67]; yield %2, %0 }");
  return bodies;
}

/// Runs `body` through the backend, each tensor `misalign` elements past a
/// 256-byte boundary (so 1 breaks the 16-byte vector path), and through
/// the CPU kernels of its members one by one; returns the outputs of both.
void runFusedBoth(Backend &backend, const std::string &text, int misalign, uint32_t seed,
                  std::vector<HostTensor> &got, std::vector<HostTensor> &want) {
  llvm::Expected<FusedBody> body = parseFusedBody(text);
  ASSERT_TRUE(static_cast<bool>(body)) << llvm::toString(body.takeError());
  std::vector<HostTensor> inputs;
  for (size_t k = 0; k < body->inputs.size(); ++k)
    inputs.push_back(randomTensor(body->inputs[k].dtype, body->inputs[k].shape, seed + k));
  // Reference: every member through its CPU kernel, every value stored.
  std::vector<HostTensor> values;
  for (const FusedStep &step : body->steps) {
    HostTensor out{"", step.result.dtype, step.result.shape, {}};
    out.data.resize(count(step.result.shape) * dtypeSize(step.result.dtype));
    values.push_back(std::move(out));
  }
  for (size_t j = 0; j < body->steps.size(); ++j) {
    const FusedStep &step = body->steps[j];
    std::vector<cpu::Tensor> operands;
    for (const FusedRef &r : step.operands) {
      HostTensor &t = r.isInput ? inputs[r.index] : values[r.index];
      operands.push_back({t.data.data(), t.dtype, t.shape});
    }
    cpu::Tensor out{values[j].data.data(), values[j].dtype, values[j].shape};
    ASSERT_EQ(llvm::toString(cpu::runKernel(step.kernel, operands, {out},
                                            KernelAttrs(step.attrs))),
              "");
  }
  want.clear();
  for (uint32_t y : body->yields)
    want.push_back(values[y]);

  std::vector<void *> allocations;
  auto place = [&](const HostTensor &t) -> DeviceTensor {
    size_t offset = misalign * dtypeSize(t.dtype);
    void *p = cantFail(backend.allocate(t.data.size() + offset + 16));
    allocations.push_back(p);
    return {static_cast<char *>(p) + offset, t.dtype, t.shape};
  };
  std::vector<DeviceTensor> in, out;
  for (const HostTensor &t : inputs) {
    in.push_back(place(t));
    ASSERT_FALSE(static_cast<bool>(backend.copyToDevice(in.back().data, t.data.data(),
                                                        t.data.size())));
  }
  for (const HostTensor &t : want)
    out.push_back(place(t));
  KernelAttrs attrs;
  attrs.set("body", text);
  ASSERT_EQ(llvm::toString(backend.launch("nn.fused", in, out, attrs, 0)), "");
  ASSERT_EQ(llvm::toString(backend.synchronize()), "");
  got.clear();
  for (size_t o = 0; o < out.size(); ++o) {
    HostTensor t = want[o];
    ASSERT_FALSE(static_cast<bool>(backend.copyToHost(t.data.data(), out[o].data, t.data.size())));
    got.push_back(std::move(t));
  }
  for (void *p : allocations)
    backend.deallocate(p);
}

// A fusion group gives what its members give run one by one through the CPU
// kernels: on the CPU bit for bit (it runs them so), on CUDA within the
// backend's tolerance, from one generated kernel, on sizes that are and are
// not multiples of its vector width, with broadcasts, outputs smaller than
// the group, f32, bf16 and f16, with 16-byte aligned pointers (vector loads)
// and without (the scalar loop).
TYPED_TEST(BackendConformance, FusedKernelsMatchTheirMembersRunOneByOne) {
  ASSERT_FALSE(static_cast<bool>(this->backend->createStreams(1, 0)));
  uint32_t seed = 300;
  for (const std::string &text : fusedBodies())
    for (int misalign : {0, 1}) {
      SCOPED_TRACE(text + (misalign ? " (unaligned)" : " (aligned)"));
      std::vector<HostTensor> got, want;
      runFusedBoth(*this->backend, text, misalign, seed += 7, got, want);
      ASSERT_EQ(got.size(), want.size());
      for (size_t o = 0; o < got.size(); ++o) {
        const double tol = TypeParam::tolerance(want[o].dtype);
        int64_t mismatches = 0, first = -1;
        for (int64_t i = 0; i < count(want[o].shape); ++i) {
          double w = loadAsDouble(want[o].data.data(), want[o].dtype, i);
          double h = loadAsDouble(got[o].data.data(), got[o].dtype, i);
          bool same = (std::isnan(w) && std::isnan(h)) || std::fabs(h - w) <= tol * (1 + std::fabs(w));
          if (!same && mismatches++ == 0)
            first = i;
        }
        EXPECT_EQ(mismatches, 0) << "output " << o << ": first at " << first << ": got "
                                 << loadAsDouble(got[o].data.data(), got[o].dtype, first)
                                 << ", expected "
                                 << loadAsDouble(want[o].data.data(), want[o].dtype, first);
      }
    }
}

/// One nn.fused call in a program: y = silu(x * w) (w a parameter), z = x * w.
Executable fusedProgram() {
  Executable exe;
  exe.modelName = "fused";
  exe.mode = "infer";
  ParameterDesc w{"w", DType::BF16, {37}, true, InitKind::Normal, 0.5, {}};
  exe.parameters = {w};
  RankProgram r;
  r.arenaSize[0] = 256;
  r.arenaSize[1] = 3 * 512;
  r.streams = {"compute"};
  r.buffers = {{"x", ArenaKind::Scratch, 0, DType::BF16, {3, 37}},
               {"w", ArenaKind::Persistent, 0, DType::BF16, {37}},
               {"y", ArenaKind::Scratch, 512, DType::BF16, {3, 37}},
               {"z", ArenaKind::Scratch, 1024, DType::BF16, {3, 37}}};
  r.params = {{0, 1}};
  r.inputs = {{"x", 0}};
  r.outputs = {{"y", 2}, {"z", 3}};
  Instruction call{InstrKind::Kernel, "nn.fused", 0, 0, {0, 1}, {2, 3},
                   {{"body", std::string("(bf16[3,37], bf16[37]) { %0 = nn.mul(%i0, %i1) : "
                                         "bf16[3,37]; %1 = nn.silu(%0) : bf16[3,37]; "
                                         "yield %1, %0 }")}},
                   "fused.mlir:1:1"};
  r.instructions = {call};
  exe.ranks = {r};
  return exe;
}

// A program's fusion groups are readied before the first step (compiled and
// loaded on CUDA) and run in captured steps (a CUDA Graph) with new inputs.
TYPED_TEST(BackendConformance, FusedKernelsRunInCapturedSteps) {
  Executable exe = fusedProgram();
  ASSERT_EQ(llvm::toString(verifyExecutable(exe)), "");
  auto executor = cantFail(ProgramExecutor::create(exe, 0, *this->backend, /*seed=*/5));
  executor->setStepCapture(true);
  HostTensor w = cantFail(executor->readBuffer(1));
  for (int step = 0; step < 4; ++step) {
    HostTensor x = randomTensor(DType::BF16, {3, 37}, 400 + step);
    ASSERT_FALSE(static_cast<bool>(executor->setInput("x", x)));
    ASSERT_EQ(llvm::toString(executor->run()), "");
    HostTensor y = cantFail(executor->getOutput("y")), z = cantFail(executor->getOutput("z"));
    for (int64_t i = 0; i < 3 * 37; ++i) {
      // The CPU's bf16 arithmetic: each op in f32, rounded to bf16.
      auto roundToBf16 = [](float v) { return bf16ToFloat(floatToBf16(v)); };
      float prod = roundToBf16(static_cast<float>(loadAsDouble(x.data.data(), DType::BF16, i)) *
                               static_cast<float>(loadAsDouble(w.data.data(), DType::BF16, i % 37)));
      float silu = roundToBf16(prod / (1.0f + std::exp(-prod)));
      double tol = TypeParam::tolerance(DType::BF16);
      EXPECT_NEAR(loadAsDouble(z.data.data(), DType::BF16, i), prod, tol * (1 + std::fabs(prod)))
          << "step " << step << ", element " << i;
      EXPECT_NEAR(loadAsDouble(y.data.data(), DType::BF16, i), silu,
                  tol * (1 + std::fabs(silu)) + 1e-2 * std::fabs(silu))
          << "step " << step << ", element " << i;
    }
  }
  if (this->backend->canCapture())
    EXPECT_EQ(executor->captureStatus(), "captured as one graph");
}

// A bad body is an error naming what is wrong, on every backend.
TYPED_TEST(BackendConformance, RejectsABadFusedBody) {
  ASSERT_FALSE(static_cast<bool>(this->backend->createStreams(1, 0)));
  void *p = cantFail(this->backend->allocate(64));
  DeviceTensor t{p, DType::F32, {4}};
  KernelAttrs attrs;
  attrs.set("body", std::string("(f32[4]) { %0 = nn.exp(%i0) : f32[4]; yield %7 }"));
  std::string error = llvm::toString(this->backend->launch("nn.fused", {t}, {t}, attrs, 0));
  EXPECT_NE(error.find("yield of %7, which is not a member"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  this->backend->deallocate(p);
}

#ifdef LOOM_HAVE_CUDA_BACKEND
// A generated kernel is compiled once: a later process (here: the cache in
// memory forgotten) reads it from the disk cache; a damaged cache file is
// compiled again, not loaded.
TYPED_TEST(BackendConformance, FusedKernelsAreCompiledOnceThenReadFromTheDiskCache) {
  if (!std::is_same_v<TypeParam, CudaBackendFactory>)
    GTEST_SKIP() << "only the CUDA backend compiles fusion kernels";
  std::string dir = ::testing::TempDir() + "loom-kernel-cache-" + std::to_string(::getpid());
  const char *previous = std::getenv("LOOM_CACHE_DIR");
  std::string saved = previous ? previous : "";
  ::setenv("LOOM_CACHE_DIR", dir.c_str(), 1);
  ASSERT_FALSE(static_cast<bool>(this->backend->createStreams(1, 0)));
  // A body no other test uses, so nothing has it in memory yet.
  const std::string text = "(f32[3,29]) { %0 = nn.exp(%i0) : f32[3,29]; "
                           "%1 = nn.reciprocal(%0) : f32[3,29]; yield %1 }";
  auto run = [&] {
    std::vector<HostTensor> got, want;
    runFusedBoth(*this->backend, text, 0, 77, got, want);
  };
  cuda::forgetFusedKernels();
  cuda::FusedKernelStats before = cuda::fusedKernelStats();
  run();
  cuda::FusedKernelStats compiled = cuda::fusedKernelStats();
  EXPECT_EQ(compiled.compiled, before.compiled + 1);
  run(); // in memory now: nothing compiled, nothing read
  EXPECT_EQ(cuda::fusedKernelStats().compiled, compiled.compiled);
  EXPECT_EQ(cuda::fusedKernelStats().diskHits, compiled.diskHits);
  cuda::forgetFusedKernels();
  run();
  cuda::FusedKernelStats cached = cuda::fusedKernelStats();
  EXPECT_EQ(cached.compiled, compiled.compiled);
  EXPECT_EQ(cached.diskHits, compiled.diskHits + 1);
  // Damage the cached file, in its key (the source) and then in its code:
  // each time the kernel is compiled again (and the file rewritten).
  int64_t compiledSoFar = cached.compiled;
  for (bool inTheCode : {false, true}) {
    std::error_code ec;
    int files = 0;
    for (llvm::sys::fs::directory_iterator it(dir + "/kernels", ec), end; !ec && it != end;
         it.increment(ec)) {
      ++files;
      std::FILE *f = std::fopen(it->path().c_str(), "r+b");
      ASSERT_NE(f, nullptr);
      std::fseek(f, 0, SEEK_END);
      long size = std::ftell(f);
      std::fseek(f, inTheCode ? size - 100 : 40, SEEK_SET);
      int byte = std::fgetc(f);
      std::fseek(f, inTheCode ? size - 100 : 40, SEEK_SET);
      std::fputc(byte ^ 0x5A, f);
      std::fclose(f);
    }
    EXPECT_EQ(files, 1);
    cuda::forgetFusedKernels();
    run();
    EXPECT_EQ(cuda::fusedKernelStats().compiled, ++compiledSoFar)
        << (inTheCode ? "damaged code" : "damaged key");
  }
  if (previous)
    ::setenv("LOOM_CACHE_DIR", saved.c_str(), 1);
  else
    ::unsetenv("LOOM_CACHE_DIR");
  llvm::sys::fs::remove_directories(dir);
}
#endif

} // namespace

TEST(SeededInitializers, DependOnSeedAndNameAndHaveTheRequestedScale) {
  ParameterDesc p{"layer.weight", DType::F32, {256, 64}, true, InitKind::Normal, 0.02, {}};
  std::vector<double> a = initialValues(p, 1), b = initialValues(p, 1), c = initialValues(p, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  ParameterDesc q = p;
  q.name = "other.weight";
  EXPECT_NE(initialValues(q, 1), a);
  double sum = 0, sumSq = 0;
  for (double v : a) {
    sum += v;
    sumSq += v * v;
  }
  double mean = sum / a.size(), stddev = std::sqrt(sumSq / a.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(stddev, 0.02, 0.001);
  ParameterDesc u{"u", DType::F32, {1000}, true, InitKind::Uniform, 0.5, {}};
  for (double v : initialValues(u, 3))
    ASSERT_TRUE(v >= -0.5 && v <= 0.5);
}

TEST(CpuBackend, WaitingOnAnUnrecordedEventIsAnError) {
  auto backend = createCpuBackend(1);
  ASSERT_FALSE(static_cast<bool>(backend->createStreams(2, 1)));
  llvm::Error err = backend->waitEvent(0, 1);
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("never recorded"), std::string::npos);
}

TEST(Backends, CudaIsCreatedOrReportedUnavailableByName) {
  auto backend = createBackend("cuda", 1);
  if (backend) {
    EXPECT_NE((*backend)->name().find("cuda"), std::string::npos);
    return;
  }
  EXPECT_NE(llvm::toString(backend.takeError()).find("CUDA"), std::string::npos);
}

#ifdef LOOM_HAVE_CUDA_BACKEND
// The CUDA backend's NCCL path of gather_rows and scatter_rows on one GPU:
// a group of one rank (no transfer), so what it checks is the device work
// around the exchange: the lists read on the host, the rows packed by a
// gather, this rank's own rows moved into place, and the placing (or
// adding) scatter. The transfers between GPUs need two.
TEST(CudaBackend, MovesRowsByIndexOverNccl) {
  auto created = CudaBackendFactory::create();
  if (!created || !haveNccl())
    GTEST_SKIP() << "needs a GPU and NCCL: "
                 << (created ? std::string("this build has no NCCL")
                             : CudaBackendFactory::unavailableReason());
  Backend &b = *created;
  Mesh mesh{{"ep"}, {1}};
  auto hosts = createThreadCommunicators(mesh);
  std::vector<Communicator *> hostPointers{hosts[0].get()};
  auto nccl = createNcclCommunicators(mesh, {0}, {{"ep"}}, {{}}, hostPointers);
  ASSERT_TRUE(bool(nccl)) << llvm::toString(nccl.takeError());
  b.attachCommunicator((*nccl)[0].get());
  ASSERT_EQ(llvm::toString(b.createStreams(1, 0)), "");
  // x [4, 3] bf16 rows j = (j, j + 0.5, -j); rows name 3, 0, 3, 2, 1; the
  // range [1, 4) takes 0, 3, 2.
  std::vector<float> xf;
  for (int j = 0; j < 4; ++j)
    xf.insert(xf.end(), {float(j), float(j) + 0.5f, -float(j)});
  std::vector<uint8_t> x(xf.size() * 2);
  storeFloats(x.data(), DType::BF16, 0, int64_t(xf.size()), xf.data());
  const std::vector<int64_t> rows{3, 0, 3, 2, 1};
  const std::vector<int64_t> ranges{1, 4};
  auto place = [&](const void *host, size_t bytes) {
    void *p = llvm::cantFail(b.allocate(bytes));
    llvm::cantFail(b.copyToDevice(p, host, bytes));
    return p;
  };
  void *xd = place(x.data(), x.size()), *rd = place(rows.data(), 40),
       *gd = place(ranges.data(), 16);
  void *od = llvm::cantFail(b.allocate(5 * 3 * 2)), *sd = llvm::cantFail(b.allocate(4 * 3 * 2));
  CollectiveDesc gather;
  gather.kind = CollectiveKind::GatherRows;
  gather.axes = {"ep"};
  DeviceTensor rowsT{rd, DType::I64, {5}}, rangesT{gd, DType::I64, {1, 2}};
  DeviceTensor out{od, DType::BF16, {5, 3}}, back{sd, DType::BF16, {4, 3}};
  ASSERT_EQ(llvm::toString(b.moveRows(gather, {xd, DType::BF16, {4, 3}}, rowsT, rangesT, out, 0)),
            "");
  CollectiveDesc scatter = gather;
  scatter.kind = CollectiveKind::ScatterRows;
  ASSERT_EQ(llvm::toString(b.moveRows(scatter, out, rowsT, rangesT, back, 0)), "");
  ASSERT_EQ(llvm::toString(b.synchronize()), "");
  std::vector<uint8_t> outHost(30), backHost(24);
  llvm::cantFail(b.copyToHost(outHost.data(), od, 30));
  llvm::cantFail(b.copyToHost(backHost.data(), sd, 24));
  std::vector<float> got(15), returned(12);
  loadFloats(outHost.data(), DType::BF16, 0, 15, got.data());
  loadFloats(backHost.data(), DType::BF16, 0, 12, returned.data());
  std::vector<float> expected;
  for (int i = 0; i < 5; ++i) {
    const int j = int(rows[i]);
    if (i >= 1 && i < 4)
      expected.insert(expected.end(), {float(j), float(j) + 0.5f, -float(j)});
    else
      expected.insert(expected.end(), {0, 0, 0});
  }
  EXPECT_EQ(got, expected);
  // Rows 0, 2 and 3 come home once each; row 1 is named outside the range.
  std::vector<float> home = xf;
  home[3] = home[4] = home[5] = 0;
  EXPECT_EQ(returned, home);
  for (void *p : {xd, rd, gd, od, sd})
    b.deallocate(p);
}
#endif
