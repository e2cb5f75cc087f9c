#include "KernelTestSupport.h"

#include <cmath>

using namespace loom;
using namespace loom::cpu;
using namespace loom::cpu::test;

namespace {

struct MatmulCase {
  std::vector<int64_t> aShape, bShape, outShape;
  bool transA = false, transB = false;
};

/// Naive reference: out[..., i, j] = sum_k A[..., i, k] B[..., k, j] in
/// double, with the stored (possibly transposed) operands indexed directly.
/// Also returns sum_k |A||B| per element, which bounds the f32 rounding error.
void referenceMatmul(const MatmulCase &c, const std::vector<double> &a,
                     const std::vector<double> &b, std::vector<double> &out,
                     std::vector<double> &magnitude) {
  const size_t ar = c.aShape.size(), orank = c.outShape.size();
  const int64_t m = c.outShape[orank - 2], n = c.outShape[orank - 1];
  const int64_t k = c.transA ? c.aShape[ar - 2] : c.aShape[ar - 1];
  std::vector<int64_t> batchShape(c.outShape.begin(), c.outShape.end() - 2);
  std::vector<int64_t> aBatch(c.aShape.begin(), c.aShape.end() - 2);
  std::vector<int64_t> bBatch(c.bShape.begin(), c.bShape.end() - 2);
  const int64_t batches = numElementsOf(batchShape);
  out.assign(batches * m * n, 0.0);
  magnitude.assign(batches * m * n, 0.0);
  for (int64_t batch = 0; batch < batches; ++batch) {
    std::vector<int64_t> index = unravel(batch, batchShape);
    const int64_t aMat = aBatch.empty() ? 0 : broadcastSource(index, aBatch);
    const int64_t bMat = bBatch.empty() ? 0 : broadcastSource(index, bBatch);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, mag = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double x = c.transA ? a[aMat * m * k + kk * m + i] : a[aMat * m * k + i * k + kk];
          const double y = c.transB ? b[bMat * k * n + j * k + kk] : b[bMat * k * n + kk * n + j];
          sum += x * y;
          mag += std::fabs(x * y);
        }
        out[(batch * m + i) * n + j] = sum;
        magnitude[(batch * m + i) * n + j] = mag;
      }
    }
  }
}

void checkMatmul(const MatmulCase &c, DType dtype, int threads = 1) {
  std::vector<double> as = roundAll(dtype, randomValues(numElementsOf(c.aShape), -1, 1, 31));
  std::vector<double> bs = roundAll(dtype, randomValues(numElementsOf(c.bShape), -1, 1, 32));
  OwnedTensor a(dtype, c.aShape, as), b(dtype, c.bShape, bs), out(dtype, c.outShape);
  KernelAttrs attrs;
  attrs.set("transpose_lhs", int64_t(c.transA)).set("transpose_rhs", int64_t(c.transB));
  ASSERT_KERNEL_OK(run("nn.matmul", {a, b}, {out}, attrs, threads));
  std::vector<double> expected, magnitude;
  referenceMatmul(c, as, bs, expected, magnitude);
  // f32 accumulation error is bounded by ~K ulps of the magnitude sum; a
  // narrow output adds its own rounding of the result.
  const double accumulation = dtype == DType::F64 ? 1e-15 : 1.2e-7;
  const double k = c.transA ? c.aShape[c.aShape.size() - 2] : c.aShape.back();
  const double outputUlp = dtype == DType::BF16 ? 1.0 / 256 : dtype == DType::F16 ? 1.0 / 2048 : 0;
  std::vector<double> actual = out.values();
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    const double tol = accumulation * k * magnitude[i] + outputUlp * std::fabs(expected[i]);
    ASSERT_LE(std::fabs(actual[i] - expected[i]), tol)
        << "element " << i << " of " << dtypeName(dtype) << " matmul: got " << actual[i]
        << ", expected " << expected[i];
  }
}

TEST(MatmulKernelTest, PlainShapesIncludingTileEdges) {
  const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {4, 16, 16}, {17, 33, 65},
                              {70, 130, 90}, {1, 600, 3}};
  for (const auto &s : sizes)
    checkMatmul({{s[0], s[1]}, {s[1], s[2]}, {s[0], s[2]}}, DType::F32);
}

TEST(MatmulKernelTest, Transposes) {
  for (bool transA : {false, true}) {
    for (bool transB : {false, true}) {
      const int64_t m = 19, k = 23, n = 37;
      MatmulCase c;
      c.aShape = transA ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k};
      c.bShape = transB ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
      c.outShape = {m, n};
      c.transA = transA;
      c.transB = transB;
      checkMatmul(c, DType::F32);
      checkMatmul(c, DType::F64);
    }
  }
}

TEST(MatmulKernelTest, BatchDimsBroadcast) {
  checkMatmul({{2, 1, 5, 6}, {3, 6, 4}, {2, 3, 5, 4}}, DType::F32);
  checkMatmul({{5, 6}, {4, 6, 7}, {4, 5, 7}}, DType::F32);
  // A linear layer: x [B, S, K] times W^T with W [N, K].
  MatmulCase linear{{2, 9, 24}, {40, 24}, {2, 9, 40}, false, true};
  checkMatmul(linear, DType::F32);
  checkMatmul({{3, 1, 2, 4}, {1, 2, 2, 5}, {3, 2, 4, 5}, true, false}, DType::F64);
}

TEST(MatmulKernelTest, NarrowTypesAccumulateInF32) {
  checkMatmul({{2, 33, 70}, {70, 18}, {2, 33, 18}}, DType::BF16);
  checkMatmul({{33, 70}, {18, 70}, {33, 18}, false, true}, DType::F16);
  // f8 inputs in range: exact products, so the f32 sum rounds once to f8.
  std::vector<double> as = {1, 2, -0.5, 0.25}, bs = {4, 8, -1, 2};
  OwnedTensor a(DType::F8E4M3FN, {2, 2}, as), b(DType::F8E4M3FN, {2, 2}, bs);
  OwnedTensor out(DType::F8E4M3FN, {2, 2});
  ASSERT_KERNEL_OK(run("nn.matmul", {a, b}, {out}));
  EXPECT_EQ(out.values(), (std::vector<double>{2, 12, -2.25, -3.5}));
}

TEST(MatmulKernelTest, ThreadCountDoesNotChangeBits) {
  const std::vector<int64_t> aShape = {3, 130, 257}, bShape = {257, 190};
  std::vector<double> as = randomValues(numElementsOf(aShape), -1, 1, 41);
  std::vector<double> bs = randomValues(numElementsOf(bShape), -1, 1, 42);
  OwnedTensor a(DType::F32, aShape, as), b(DType::F32, bShape, bs);
  std::vector<uint8_t> first;
  for (int threads : {1, 2, 3, 8}) {
    OwnedTensor out(DType::F32, {3, 130, 190});
    ASSERT_KERNEL_OK(run("nn.matmul", {a, b}, {out}, {}, threads));
    if (first.empty())
      first = out.bytes();
    else
      EXPECT_EQ(out.bytes(), first) << threads << " threads";
  }
  checkMatmul({aShape, bShape, {3, 130, 190}}, DType::F32, 3);
}

TEST(MatmulKernelTest, AcceptsTheOpsAttributeNames) {
  std::vector<double> as = {1, 2, 3, 4, 5, 6}; // [2, 3]
  OwnedTensor a(DType::F32, {2, 3}, as), out(DType::F32, {3, 3});
  // a^T a via transpose_lhs.
  ASSERT_KERNEL_OK(run("nn.matmul", {a, a}, {out},
                       KernelAttrs().set("transpose_lhs", int64_t(1))));
  EXPECT_EQ(out.values(), (std::vector<double>{17, 22, 27, 22, 29, 36, 27, 36, 45}));
}

TEST(MatmulKernelTest, Errors) {
  OwnedTensor a(DType::F32, {2, 3}), b(DType::F32, {4, 5}), out(DType::F32, {2, 5});
  EXPECT_KERNEL_ERROR(run("nn.matmul", {a, b}, {out}), "contraction sizes differ");
  OwnedTensor b2(DType::F32, {3, 5}), wrongOut(DType::F32, {2, 4});
  EXPECT_KERNEL_ERROR(run("nn.matmul", {a, b2}, {wrongOut}),
                      "output shape [2, 4] should be [2, 5]");
  OwnedTensor vec(DType::F32, {3});
  EXPECT_KERNEL_ERROR(run("nn.matmul", {vec, b2}, {out}), "rank >= 2");
  OwnedTensor ba(DType::F32, {2, 2, 3}), bb(DType::F32, {3, 3, 5}), bo(DType::F32, {3, 2, 5});
  EXPECT_KERNEL_ERROR(run("nn.matmul", {ba, bb}, {bo}), "do not broadcast");
  OwnedTensor ia(DType::I32, {2, 3}), ib(DType::I32, {3, 5}), io(DType::I32, {2, 5});
  EXPECT_KERNEL_ERROR(run("nn.matmul", {ia, ib}, {io}), "unsupported dtype i32");
  OwnedTensor db(DType::F64, {3, 5});
  EXPECT_KERNEL_ERROR(run("nn.matmul", {a, db}, {out}), "lhs dtype f32 differs from rhs dtype f64");
  // An f32 result of bf16 operands is the unrounded accumulation; no other
  // result type differs from the operands'.
  OwnedTensor ha(DType::BF16, {2, 3}), hb(DType::BF16, {3, 5}), ho(DType::F16, {2, 5});
  EXPECT_KERNEL_ERROR(run("nn.matmul", {ha, hb}, {ho}),
                      "output dtype f16 must be the operands' (bf16) or f32");
  OwnedTensor fo(DType::F64, {2, 5});
  EXPECT_KERNEL_ERROR(run("nn.matmul", {a, b2}, {fo}), "output dtype f64 must be the operands' (f32)");
  EXPECT_KERNEL_ERROR(run("nn.matmul", {a, b2}, {out},
                          KernelAttrs().set("transpose_lhs", int64_t(2))),
                      "expected 0 or 1");
}

} // namespace

namespace {

TEST(MatmulEpilogue, BiasThenTanhGeluEqualsTheUnfusedKernels) {
  const std::vector<double> av = randomValues(2 * 3 * 4, -1, 1, 301);
  const std::vector<double> bv = randomValues(4 * 5, -1, 1, 302);
  const std::vector<double> biasv = randomValues(5, -1, 1, 303);
  OwnedTensor a(DType::BF16, {2, 3, 4}, av), b(DType::BF16, {4, 5}, bv),
      bias(DType::BF16, {5}, biasv);
  OwnedTensor fused(DType::BF16, {2, 3, 5}), plain(DType::BF16, {2, 3, 5}),
      biased(DType::BF16, {2, 3, 5}), reference(DType::BF16, {2, 3, 5});
  KernelAttrs epilogue;
  epilogue.set("epilogue", std::string("bias_gelu"));
  ASSERT_KERNEL_OK(run("nn.matmul", {a, b, bias}, {fused}, epilogue));
  ASSERT_KERNEL_OK(run("nn.matmul", {a, b}, {plain}));
  ASSERT_KERNEL_OK(run("nn.add", {plain, bias}, {biased}));
  KernelAttrs tanh;
  tanh.set("approximate", std::string("tanh"));
  ASSERT_KERNEL_OK(run("nn.gelu", {biased}, {reference}, tanh));
  EXPECT_EQ(fused.bytes(), reference.bytes());
  EXPECT_NE(fused.bytes(), plain.bytes());
}

TEST(MatmulWidened, AnF32ResultIsTheAccumulationTheBf16ResultRounds) {
  const std::vector<double> av = randomValues(3 * 37, -1, 1, 311);
  const std::vector<double> bv = randomValues(37 * 5, -1, 1, 312);
  OwnedTensor a(DType::BF16, {3, 37}, av), b(DType::BF16, {37, 5}, bv);
  OwnedTensor narrow(DType::BF16, {3, 5}), wide(DType::F32, {3, 5}), rounded(DType::BF16, {3, 5});
  ASSERT_KERNEL_OK(run("nn.matmul", {a, b}, {narrow}));
  ASSERT_KERNEL_OK(run("nn.matmul", {a, b}, {wide}));
  ASSERT_KERNEL_OK(run("nn.cast", {wide}, {rounded}));
  // Rounding the f32 result gives the bf16 one bit for bit, and the f32
  // result is not itself on the bf16 grid (it kept the bits bf16 drops).
  EXPECT_EQ(rounded.bytes(), narrow.bytes());
  OwnedTensor back(DType::F32, {3, 5});
  ASSERT_KERNEL_OK(run("nn.cast", {narrow}, {back}));
  EXPECT_NE(back.bytes(), wide.bytes());
}

TEST(MatmulEpilogue, RejectsABiasWithoutItsEpilogueAndAMisshapenBias) {
  OwnedTensor a(DType::F32, {2, 4}), b(DType::F32, {4, 3}), bias(DType::F32, {4}),
      out(DType::F32, {2, 3});
  EXPECT_NE(errorMessage(run("nn.matmul", {a, b, bias}, {out})).find("needs a bias or add epilogue"),
            std::string::npos);
  KernelAttrs attrs;
  attrs.set("epilogue", std::string("bias"));
  EXPECT_NE(errorMessage(run("nn.matmul", {a, b, bias}, {out}, attrs)).find("should be [3]"),
            std::string::npos);
  attrs.set("epilogue", std::string("relu"));
  EXPECT_NE(errorMessage(run("nn.matmul", {a, b}, {out}, attrs)).find("unknown epilogue"),
            std::string::npos);
  // "add" takes a tensor of the result's shape and dtype, and needs it.
  attrs.set("epilogue", std::string("add"));
  EXPECT_NE(errorMessage(run("nn.matmul", {a, b}, {out}, attrs)).find("needs the operand to add"),
            std::string::npos);
  EXPECT_NE(errorMessage(run("nn.matmul", {a, b, bias}, {out}, attrs)).find("addend shape"),
            std::string::npos);
  OwnedTensor narrow(DType::BF16, {2, 3});
  EXPECT_NE(errorMessage(run("nn.matmul", {a, b, narrow}, {out}, attrs)).find("addend"),
            std::string::npos);
}

TEST(ScaledMatmul, Fp8OperandsWithPerTensorScales) {
  const int64_t m = 3, n = 4, k = 5;
  // Values exactly representable in f8E4M3FN / f8E5M2, so the reference is exact.
  std::vector<double> av, bv;
  for (int64_t i = 0; i < m * k; ++i)
    av.push_back(roundTo(DType::F8E4M3FN, std::sin(0.7 * i + 0.3) * 3));
  for (int64_t i = 0; i < n * k; ++i)
    bv.push_back(roundTo(DType::F8E5M2, std::cos(0.9 * i) * 2));
  OwnedTensor a(DType::F8E4M3FN, {m, k}, av), b(DType::F8E5M2, {n, k}, bv);
  OwnedTensor sa(DType::F32, {}, {0.5}), sb(DType::F32, {}, {3.0}), out(DType::F32, {m, n});
  ASSERT_KERNEL_OK(run("nn.scaled_matmul", {a, b, sa, sb}, {out}));
  std::vector<double> expected;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t t = 0; t < k; ++t)
        sum += av[i * k + t] * bv[j * k + t];
      expected.push_back(sum * 1.5);
    }
  expectClose(out.values(), expected, 1e-6, 1e-6, "scaled_matmul");

  OwnedTensor both(DType::F8E5M2, {m, k}, av);
  EXPECT_NE(errorMessage(run("nn.scaled_matmul", {both, b, sa, sb}, {out})).find("at most one"),
            std::string::npos);
  OwnedTensor wrong(DType::F32, {n, k});
  EXPECT_NE(errorMessage(run("nn.scaled_matmul", {a, wrong, sa, sb}, {out})).find("f8E4M3FN"),
            std::string::npos);
}

} // namespace
