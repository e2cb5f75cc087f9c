// The backward kernels (Kernels.def's last section) against references
// written here: the derivative kernels against central differences of
// plainly written forward functions, the scatter kernels against naive
// loops. f64 is compared tightly, f32 to its precision, bf16 (inputs rounded
// first) to its precision; every threaded kernel is also checked bitwise
// across thread counts.

#include "KernelTestSupport.h"

#include <cmath>
#include <functional>

using namespace loom;
using namespace loom::cpu;
using namespace loom::cpu::test;

namespace {

struct DTypeTolerance {
  DType dtype;
  double rel, abs;
};
// The derivative references are central differences in double (error
// ~1e-9), so f64 is held to 1e-7.
const DTypeTolerance kFloatTypes[] = {
    {DType::F64, 1e-7, 1e-8}, {DType::F32, 1e-4, 1e-5}, {DType::BF16, 3e-2, 3e-2}};

/// sum_i dy_i d f_i / d x_j for every j, by central differences of f.
std::vector<double>
numericVjp(const std::function<std::vector<double>(const std::vector<double> &)> &f,
           const std::vector<double> &x, const std::vector<double> &dy,
           double step = 1e-6) {
  std::vector<double> result(x.size());
  for (size_t j = 0; j < x.size(); ++j) {
    std::vector<double> shifted = x;
    shifted[j] = x[j] + step;
    std::vector<double> plus = f(shifted);
    shifted[j] = x[j] - step;
    std::vector<double> minus = f(shifted);
    double total = 0.0;
    for (size_t i = 0; i < dy.size(); ++i)
      total += dy[i] * (plus[i] - minus[i]) / (2 * step);
    result[j] = total;
  }
  return result;
}

std::vector<Tensor> tensors(std::initializer_list<const OwnedTensor *> owned) {
  std::vector<Tensor> result;
  for (const OwnedTensor *t : owned)
    result.push_back(t->t());
  return result;
}

//===----------------------------------------------------------------------===//
// gelu_grad, silu_grad
//===----------------------------------------------------------------------===//

double geluErf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double geluTanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu(double x) { return x / (1 + std::exp(-x)); }

TEST(ActivationGradKernelTest, MatchesDifferencesOfTheForward) {
  struct Case {
    const char *kernel;
    const char *approximate;
    double (*forward)(double);
  };
  for (const Case &c : {Case{"nn.gelu_grad", "none", geluErf},
                        Case{"nn.gelu_grad", "tanh", geluTanh},
                        Case{"nn.silu_grad", nullptr, silu}}) {
    for (const DTypeTolerance &t : kFloatTypes) {
      SCOPED_TRACE(std::string(c.kernel) + " " + (c.approximate ? c.approximate : "") +
                   " " + std::string(dtypeName(t.dtype)));
      const int64_t n = 64;
      std::vector<double> x = roundAll(t.dtype, randomValues(n, -6, 6, 11));
      std::vector<double> dy = roundAll(t.dtype, randomValues(n, -2, 2, 12));
      std::vector<double> expected(n);
      for (int64_t i = 0; i < n; ++i)
        expected[i] =
            dy[i] * (c.forward(x[i] + 1e-6) - c.forward(x[i] - 1e-6)) / 2e-6;
      OwnedTensor xs(t.dtype, {n}, x), dys(t.dtype, {n}, dy), out(t.dtype, {n});
      KernelAttrs attrs;
      if (c.approximate)
        attrs.set("approximate", std::string(c.approximate));
      ASSERT_KERNEL_OK(run(c.kernel, {xs, dys}, {out}, attrs));
      expectClose(out.values(), expected, t.rel, t.abs);
      // The output may be the gradient's own buffer.
      ASSERT_KERNEL_OK(run(c.kernel, {xs, dys}, {dys}, attrs));
      EXPECT_EQ(dys.values(), out.values());
    }
  }
}

TEST(ActivationGradKernelTest, Errors) {
  OwnedTensor x(DType::F32, {4}), dy(DType::F32, {3}), out(DType::F32, {4});
  EXPECT_KERNEL_ERROR(run("nn.silu_grad", {x, dy}, {out}), "differs from grad shape");
  OwnedTensor ints(DType::I64, {4});
  EXPECT_KERNEL_ERROR(run("nn.silu_grad", {ints, ints}, {ints}), "a float type is required");
  EXPECT_KERNEL_ERROR(run("nn.gelu_grad", {x, x}, {out},
                          KernelAttrs().set("approximate", std::string("fast"))),
                      "'approximate' is 'fast'");
}

//===----------------------------------------------------------------------===//
// layer_norm_grad, rms_norm_grad
//===----------------------------------------------------------------------===//

/// The forward norms, row by row over the last dim.
std::vector<double> referenceNorm(bool layerNorm, const std::vector<double> &x,
                                  const std::vector<double> *weight, int64_t features,
                                  double epsilon) {
  std::vector<double> y(x.size());
  for (size_t row = 0; row * features < x.size(); ++row) {
    const double *in = x.data() + row * features;
    double mean = 0, meanSquare = 0;
    for (int64_t d = 0; d < features; ++d) {
      mean += in[d] / features;
      meanSquare += in[d] * in[d] / features;
    }
    const double denominator = layerNorm ? std::sqrt(meanSquare - mean * mean + epsilon)
                                         : std::sqrt(meanSquare + epsilon);
    for (int64_t d = 0; d < features; ++d)
      y[row * features + d] = ((layerNorm ? in[d] - mean : in[d]) / denominator) *
                              (weight ? (*weight)[d] : 1.0);
  }
  return y;
}

TEST(NormGradKernelTest, MatchesDifferencesOfTheForward) {
  const int64_t rows = 3, features = 7;
  for (bool layerNorm : {true, false}) {
    for (bool withWeight : {false, true}) {
      for (const DTypeTolerance &t : kFloatTypes) {
        const char *kernel = layerNorm ? "nn.layer_norm_grad" : "nn.rms_norm_grad";
        SCOPED_TRACE(std::string(kernel) + (withWeight ? " weight " : " ") +
                     std::string(dtypeName(t.dtype)));
        const double epsilon = 1e-3;
        std::vector<double> x = roundAll(t.dtype, randomValues(rows * features, -2, 2, 21));
        std::vector<double> dy = roundAll(t.dtype, randomValues(rows * features, -1, 1, 22));
        std::vector<double> w = roundAll(t.dtype, randomValues(features, 0.5, 1.5, 23));
        std::vector<double> expected = numericVjp(
            [&](const std::vector<double> &v) {
              return referenceNorm(layerNorm, v, withWeight ? &w : nullptr, features,
                                   epsilon);
            },
            x, dy);
        OwnedTensor xs(t.dtype, {rows, features}, x), dys(t.dtype, {rows, features}, dy),
            ws(t.dtype, {features}, w), out(t.dtype, {rows, features});
        std::vector<Tensor> inputs = withWeight ? tensors({&xs, &dys, &ws})
                                                : tensors({&xs, &dys});
        KernelAttrs attrs;
        attrs.set("epsilon", epsilon).set("has_weight", int64_t(withWeight));
        ASSERT_KERNEL_OK(runKernel(kernel, inputs, {out.t()}, attrs));
        expectClose(out.values(), expected, t.rel, t.abs);
      }
    }
  }
}

TEST(NormGradKernelTest, DeterministicAcrossThreads) {
  const int64_t rows = 512, features = 256;
  OwnedTensor x(DType::F32, {rows, features}, randomValues(rows * features, -2, 2, 31));
  OwnedTensor dy(DType::F32, {rows, features}, randomValues(rows * features, -1, 1, 32));
  OwnedTensor w(DType::F32, {features}, randomValues(features, 0.5, 1.5, 33));
  for (const char *kernel : {"nn.layer_norm_grad", "nn.rms_norm_grad"}) {
    OwnedTensor single(DType::F32, {rows, features}), many(DType::F32, {rows, features});
    ASSERT_KERNEL_OK(run(kernel, {x, dy, w}, {single}, {}, 1));
    ASSERT_KERNEL_OK(run(kernel, {x, dy, w}, {many}, {}, 8));
    EXPECT_EQ(single.bytes(), many.bytes()) << kernel;
  }
}

TEST(NormGradKernelTest, Errors) {
  OwnedTensor x(DType::F32, {2, 4}), dy(DType::F32, {2, 4}), out(DType::F32, {2, 4});
  OwnedTensor badWeight(DType::F32, {3});
  EXPECT_KERNEL_ERROR(run("nn.layer_norm_grad", {x, dy, badWeight}, {out}),
                      "weight shape [3] should be [4]");
  EXPECT_KERNEL_ERROR(run("nn.rms_norm_grad", {x, dy}, {out},
                          KernelAttrs().set("has_weight", int64_t(1))),
                      "has_weight=1 and has_addend=0 disagree with 2 inputs");
  // The residual's gradient (has_addend, --loom-fuse-matmul-epilogue): last,
  // the result's shape and dtype.
  EXPECT_KERNEL_ERROR(run("nn.rms_norm_grad", {x, dy}, {out},
                          KernelAttrs().set("has_addend", int64_t(1))),
                      "has_weight=0 and has_addend=1 disagree with 2 inputs");
  OwnedTensor narrowAddend(DType::BF16, {2, 4}), shortAddend(DType::F32, {2, 3});
  EXPECT_KERNEL_ERROR(run("nn.rms_norm_grad", {x, dy, narrowAddend}, {out},
                          KernelAttrs().set("has_addend", int64_t(1))),
                      "addend");
  EXPECT_KERNEL_ERROR(run("nn.rms_norm_grad", {x, dy, shortAddend}, {out},
                          KernelAttrs().set("has_addend", int64_t(1))),
                      "addend");
  OwnedTensor scalar(DType::F32, {});
  EXPECT_KERNEL_ERROR(run("nn.rms_norm_grad", {scalar, scalar}, {scalar}), "rank >= 1");
}

//===----------------------------------------------------------------------===//
// attention_grad
//===----------------------------------------------------------------------===//

struct AttentionShape {
  int64_t batch, qHeads, kvHeads, seq, kvSeq, headDim, valueDim;
  bool causal;
  double scale;
};

/// softmax(q k^T scale + causal mask) v, the plain way.
std::vector<double> referenceAttention(const AttentionShape &s, const std::vector<double> &q,
                                       const std::vector<double> &k,
                                       const std::vector<double> &v) {
  std::vector<double> out(s.batch * s.qHeads * s.seq * s.valueDim, 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.qHeads; ++h) {
      const int64_t kvh = h / (s.qHeads / s.kvHeads);
      for (int64_t i = 0; i < s.seq; ++i) {
        std::vector<double> weights(s.kvSeq, 0.0);
        double total = 0;
        for (int64_t j = 0; j < s.kvSeq; ++j) {
          if (s.causal && j > i + s.kvSeq - s.seq)
            continue;
          double dot = 0;
          for (int64_t d = 0; d < s.headDim; ++d)
            dot += q[ravel({b, h, i, d}, {s.batch, s.qHeads, s.seq, s.headDim})] *
                   k[ravel({b, kvh, j, d}, {s.batch, s.kvHeads, s.kvSeq, s.headDim})];
          weights[j] = std::exp(dot * s.scale);
          total += weights[j];
        }
        for (int64_t j = 0; j < s.kvSeq; ++j)
          for (int64_t d = 0; d < s.valueDim; ++d)
            out[ravel({b, h, i, d}, {s.batch, s.qHeads, s.seq, s.valueDim})] +=
                weights[j] / total *
                v[ravel({b, kvh, j, d}, {s.batch, s.kvHeads, s.kvSeq, s.valueDim})];
      }
    }
  return out;
}

TEST(AttentionGradKernelTest, MatchesDifferencesOfTheForward) {
  for (const AttentionShape &s :
       {AttentionShape{2, 2, 2, 3, 3, 4, 4, false, 0.5},
        AttentionShape{1, 4, 2, 3, 5, 4, 3, true, 0.4},
        AttentionShape{2, 3, 1, 4, 4, 2, 5, true, 1.0}}) {
    for (const DTypeTolerance &t : kFloatTypes) {
      SCOPED_TRACE(std::string(dtypeName(t.dtype)) + (s.causal ? " causal" : "") +
                   " heads " + std::to_string(s.qHeads) + "/" + std::to_string(s.kvHeads));
      const std::vector<int64_t> qShape = {s.batch, s.qHeads, s.seq, s.headDim},
                                 kShape = {s.batch, s.kvHeads, s.kvSeq, s.headDim},
                                 vShape = {s.batch, s.kvHeads, s.kvSeq, s.valueDim},
                                 oShape = {s.batch, s.qHeads, s.seq, s.valueDim};
      std::vector<double> q = roundAll(t.dtype, randomValues(numElementsOf(qShape), -1, 1, 41));
      std::vector<double> k = roundAll(t.dtype, randomValues(numElementsOf(kShape), -1, 1, 42));
      std::vector<double> v = roundAll(t.dtype, randomValues(numElementsOf(vShape), -1, 1, 43));
      std::vector<double> dOut =
          roundAll(t.dtype, randomValues(numElementsOf(oShape), -1, 1, 44));
      std::vector<double> dq = numericVjp(
          [&](const std::vector<double> &x) { return referenceAttention(s, x, k, v); }, q, dOut);
      std::vector<double> dk = numericVjp(
          [&](const std::vector<double> &x) { return referenceAttention(s, q, x, v); }, k, dOut);
      std::vector<double> dv = numericVjp(
          [&](const std::vector<double> &x) { return referenceAttention(s, q, k, x); }, v, dOut);
      OwnedTensor qs(t.dtype, qShape, q), ks(t.dtype, kShape, k), vs(t.dtype, vShape, v),
          dos(t.dtype, oShape, dOut);
      OwnedTensor dqs(t.dtype, qShape), dks(t.dtype, kShape), dvs(t.dtype, vShape);
      KernelAttrs attrs;
      attrs.set("causal", int64_t(s.causal)).set("scale", s.scale);
      ASSERT_KERNEL_OK(run("nn.attention_grad", {qs, ks, vs, dos}, {dqs, dks, dvs}, attrs));
      expectClose(dqs.values(), dq, t.rel, t.abs, "dq");
      expectClose(dks.values(), dk, t.rel, t.abs, "dk");
      expectClose(dvs.values(), dv, t.rel, t.abs, "dv");
    }
  }
}

TEST(AttentionGradKernelTest, DeterministicAcrossThreads) {
  const std::vector<int64_t> qShape = {2, 8, 32, 16}, kvShape = {2, 4, 32, 16};
  OwnedTensor q(DType::F32, qShape, randomValues(numElementsOf(qShape), -1, 1, 51));
  OwnedTensor k(DType::F32, kvShape, randomValues(numElementsOf(kvShape), -1, 1, 52));
  OwnedTensor v(DType::F32, kvShape, randomValues(numElementsOf(kvShape), -1, 1, 53));
  OwnedTensor dOut(DType::F32, qShape, randomValues(numElementsOf(qShape), -1, 1, 54));
  std::vector<std::vector<uint8_t>> first;
  for (int threads : {1, 3, 8}) {
    OwnedTensor dq(DType::F32, qShape), dk(DType::F32, kvShape), dv(DType::F32, kvShape);
    ASSERT_KERNEL_OK(run("nn.attention_grad", {q, k, v, dOut}, {dq, dk, dv},
                         KernelAttrs().set("causal", int64_t(1)), threads));
    std::vector<std::vector<uint8_t>> bytes = {dq.bytes(), dk.bytes(), dv.bytes()};
    if (first.empty())
      first = bytes;
    EXPECT_EQ(bytes, first) << threads << " threads";
  }
}

TEST(AttentionGradKernelTest, Errors) {
  OwnedTensor q(DType::F32, {1, 2, 3, 4}), k(DType::F32, {1, 2, 3, 4}),
      v(DType::F32, {1, 2, 3, 4}), badGrad(DType::F32, {1, 2, 3, 5});
  OwnedTensor dq(DType::F32, {1, 2, 3, 4}), dk(DType::F32, {1, 2, 3, 4}),
      dv(DType::F32, {1, 2, 3, 4});
  EXPECT_KERNEL_ERROR(run("nn.attention_grad", {q, k, v, badGrad}, {dq, dk, dv}),
                      "grad shape [1, 2, 3, 5] should be [1, 2, 3, 4]");
  OwnedTensor kvOdd(DType::F32, {1, 3, 3, 4});
  EXPECT_KERNEL_ERROR(run("nn.attention_grad", {q, kvOdd, kvOdd, q}, {dq, kvOdd, kvOdd}),
                      "must be a multiple of key/value heads");
  OwnedTensor f64Grad(DType::F64, {1, 2, 3, 4});
  EXPECT_KERNEL_ERROR(run("nn.attention_grad", {q, k, v, f64Grad}, {dq, dk, dv}),
                      "grad dtype f64 differs from query dtype f32");
}

//===----------------------------------------------------------------------===//
// embedding_grad, gather_grad
//===----------------------------------------------------------------------===//

TEST(EmbeddingGradKernelTest, AddsRowsById) {
  const std::vector<double> ids = {3, 0, 3, 1, 3, 0};
  const int64_t vocab = 5, width = 4;
  for (const DTypeTolerance &t : kFloatTypes) {
    for (DType idType : {DType::I32, DType::I64}) {
      SCOPED_TRACE(dtypeName(t.dtype));
      std::vector<double> dy = roundAll(t.dtype, randomValues(6 * width, -1, 1, 61));
      std::vector<double> expected(vocab * width, 0.0);
      for (size_t p = 0; p < ids.size(); ++p)
        for (int64_t d = 0; d < width; ++d)
          expected[static_cast<int64_t>(ids[p]) * width + d] += dy[p * width + d];
      OwnedTensor idTensor(idType, {2, 3}, ids), dys(t.dtype, {2, 3, width}, dy),
          out(t.dtype, {vocab, width});
      ASSERT_KERNEL_OK(run("nn.embedding_grad", {idTensor, dys}, {out},
                           KernelAttrs().set("num_embeddings", vocab)));
      // Sums of three bf16 values round once: one bf16 ulp.
      expectClose(out.values(), expected, t.dtype == DType::BF16 ? 1e-2 : 1e-6, 1e-6);
    }
  }
}

// A vocabulary-parallel block (vocab_start): each block adds up its own
// ids' rows; the blocks stacked are the whole table's gradient.
TEST(EmbeddingGradKernelTest, BlocksOfAVocabularyAddUpToTheWholeTable) {
  const std::vector<double> ids = {3, 0, 5, 1, 3, 4};
  const int64_t vocab = 6, width = 3, block = 2;
  std::vector<double> dy = randomValues(6 * width, -1, 1, 62);
  OwnedTensor idTensor(DType::I64, {2, 3}, ids), dys(DType::F32, {2, 3, width}, dy);
  OwnedTensor whole(DType::F32, {vocab, width});
  ASSERT_KERNEL_OK(run("nn.embedding_grad", {idTensor, dys}, {whole}));
  std::vector<double> stacked;
  for (int64_t start = 0; start < vocab; start += block) {
    OwnedTensor out(DType::F32, {block, width});
    ASSERT_KERNEL_OK(run("nn.embedding_grad", {idTensor, dys}, {out},
                         KernelAttrs().set("num_embeddings", block).set("vocab_start", start)));
    std::vector<double> v = out.values();
    stacked.insert(stacked.end(), v.begin(), v.end());
  }
  EXPECT_EQ(stacked, whole.values());
}

TEST(EmbeddingGradKernelTest, Errors) {
  OwnedTensor ids(DType::I64, {2}, {0, 5}), dy(DType::F32, {2, 3}), out(DType::F32, {5, 3});
  EXPECT_KERNEL_ERROR(run("nn.embedding_grad", {ids, dy}, {out}),
                      "id 5 at position 1 is outside the table's 5 rows");
  OwnedTensor good(DType::I64, {2}, {0, 1});
  EXPECT_KERNEL_ERROR(run("nn.embedding_grad", {good, dy}, {out},
                          KernelAttrs().set("num_embeddings", int64_t(6))),
                      "'num_embeddings' is 6, the output has 5 rows");
  OwnedTensor badDy(DType::F32, {2, 4});
  EXPECT_KERNEL_ERROR(run("nn.embedding_grad", {good, badDy}, {out}),
                      "grad shape [2, 4] should be [2, 3]");
}

TEST(GatherGradKernelTest, AddsSlicesByIndex) {
  // data [2, 5, 3] gathered along axis 1 by indices [2, 2] (negative ones
  // count from the end): grad is [2, 2, 2, 3].
  const std::vector<int64_t> dataShape = {2, 5, 3}, gradShape = {2, 2, 2, 3};
  const std::vector<double> indices = {4, -1, 0, 2};
  for (const DTypeTolerance &t : kFloatTypes) {
    SCOPED_TRACE(dtypeName(t.dtype));
    std::vector<double> dy = roundAll(t.dtype, randomValues(numElementsOf(gradShape), -1, 1, 71));
    std::vector<double> expected(numElementsOf(dataShape), 0.0);
    for (int64_t e = 0; e < numElementsOf(gradShape); ++e) {
      std::vector<int64_t> at = unravel(e, gradShape);
      int64_t index = static_cast<int64_t>(indices[at[1] * 2 + at[2]]);
      if (index < 0)
        index += dataShape[1];
      expected[ravel({at[0], index, at[3]}, dataShape)] += dy[e];
    }
    OwnedTensor idx(DType::I64, {2, 2}, indices), dys(t.dtype, gradShape, dy),
        out(t.dtype, dataShape);
    ASSERT_KERNEL_OK(run("nn.gather_grad", {idx, dys}, {out},
                         KernelAttrs().set("axis", int64_t(1)).set("axis_size", int64_t(5))));
    expectClose(out.values(), expected, t.dtype == DType::BF16 ? 1e-2 : 1e-6, 1e-6);
  }
}

TEST(GatherGradKernelTest, Errors) {
  OwnedTensor idx(DType::I64, {2}, {0, -4}), dy(DType::F32, {2, 2}), out(DType::F32, {3, 2});
  EXPECT_KERNEL_ERROR(run("nn.gather_grad", {idx, dy}, {out}),
                      "index -4 at position 1 is outside [-3, 3)");
  OwnedTensor good(DType::I64, {2}, {0, 1});
  EXPECT_KERNEL_ERROR(run("nn.gather_grad", {good, dy}, {out},
                          KernelAttrs().set("axis_size", int64_t(4))),
                      "'axis_size' is 4, the output has 3 along axis 0");
  OwnedTensor floatIdx(DType::F32, {2});
  EXPECT_KERNEL_ERROR(run("nn.gather_grad", {floatIdx, dy}, {out}), "expected i32 or i64");
}

TEST(ScatterGradKernelTest, DeterministicAcrossThreads) {
  const int64_t positions = 4096, vocab = 64, width = 64;
  OwnedTensor ids(DType::I32, {positions}, randomInts(positions, 0, vocab - 1, 81));
  OwnedTensor dy(DType::F32, {positions, width}, randomValues(positions * width, -1, 1, 82));
  std::vector<uint8_t> embedding, gather;
  for (int threads : {1, 2, 8}) {
    OwnedTensor table(DType::F32, {vocab, width}), data(DType::F32, {vocab, width});
    ASSERT_KERNEL_OK(run("nn.embedding_grad", {ids, dy}, {table}, {}, threads));
    ASSERT_KERNEL_OK(run("nn.gather_grad", {ids, dy}, {data}, {}, threads));
    if (embedding.empty()) {
      embedding = table.bytes();
      gather = data.bytes();
    }
    EXPECT_EQ(table.bytes(), embedding) << threads << " threads";
    EXPECT_EQ(data.bytes(), gather) << threads << " threads";
  }
  // Both are the same scatter-add here (axis 0, non-negative indices).
  EXPECT_EQ(embedding, gather);
}

//===----------------------------------------------------------------------===//
// cross_entropy_grad
//===----------------------------------------------------------------------===//

TEST(CrossEntropyGradKernelTest, SoftmaxMinusOneHot) {
  const int64_t rows = 5, classes = 6;
  const std::vector<double> labels = {2, -100, 0, 5, 1};
  for (const DTypeTolerance &t : kFloatTypes) {
    for (const char *reduction : {"mean", "sum", "none"}) {
      SCOPED_TRACE(std::string(dtypeName(t.dtype)) + " " + reduction);
      std::vector<double> logits = roundAll(t.dtype, randomValues(rows * classes, -3, 3, 91));
      const bool perRow = std::string(reduction) == "none";
      std::vector<double> upstream =
          roundAll(DType::F32, randomValues(perRow ? rows : 1, -2, 2, 92));
      std::vector<double> expected(rows * classes, 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        if (labels[r] == -100)
          continue;
        double weight = perRow ? upstream[r] : upstream[0];
        if (std::string(reduction) == "mean")
          weight /= 4; // four rows count
        double total = 0;
        for (int64_t c = 0; c < classes; ++c)
          total += std::exp(logits[r * classes + c]);
        for (int64_t c = 0; c < classes; ++c)
          expected[r * classes + c] =
              weight * (std::exp(logits[r * classes + c]) / total - (c == labels[r]));
      }
      OwnedTensor x(t.dtype, {rows, classes}, logits), y(DType::I64, {rows}, labels);
      OwnedTensor g(DType::F32, perRow ? std::vector<int64_t>{rows} : std::vector<int64_t>{},
                    upstream);
      OwnedTensor out(t.dtype, {rows, classes});
      ASSERT_KERNEL_OK(run("nn.cross_entropy_grad", {x, y, g}, {out},
                           KernelAttrs().set("reduction", std::string(reduction))));
      expectClose(out.values(), expected, t.dtype == DType::BF16 ? 1e-2 : 1e-6,
                  t.dtype == DType::BF16 ? 1e-3 : 1e-7);
    }
  }
}

// The vocabulary-parallel loss: the classes cut into 3 blocks, each
// block's statistics side by side give nn.cross_entropy's loss (every
// reduction), and each block's gradient from them is its columns of
// nn.cross_entropy_grad's.
TEST(CrossEntropyBlocksKernelTest, BlocksGiveTheWholeLossAndGradient) {
  const int64_t rows = 5, classes = 12, block = 4, blocks = classes / block;
  const std::vector<double> labels = {2, -100, 11, 5, 8};
  std::vector<double> logits = randomValues(rows * classes, -3, 3, 93);
  OwnedTensor x(DType::F32, {rows, classes}, logits), y(DType::I64, {rows}, labels);
  std::vector<double> stats(rows * 3 * blocks);
  std::vector<std::vector<double>> blockLogits(blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < block; ++c)
        blockLogits[b].push_back(logits[r * classes + b * block + c]);
    OwnedTensor xb(DType::F32, {rows, block}, blockLogits[b]), sb(DType::F32, {rows, 3});
    ASSERT_KERNEL_OK(run("nn.cross_entropy_stats", {xb, y}, {sb},
                         KernelAttrs().set("vocab_start", b * block)));
    std::vector<double> v = sb.values();
    for (int64_t r = 0; r < rows; ++r)
      for (int k = 0; k < 3; ++k)
        stats[r * 3 * blocks + 3 * b + k] = v[r * 3 + k];
  }
  OwnedTensor all(DType::F32, {rows, 3 * blocks}, stats);
  for (const char *reduction : {"mean", "sum", "none"}) {
    SCOPED_TRACE(reduction);
    const bool perRow = std::string(reduction) == "none";
    std::vector<int64_t> lossShape = perRow ? std::vector<int64_t>{rows} : std::vector<int64_t>{};
    OwnedTensor whole(DType::F32, lossShape), combined(DType::F32, lossShape);
    KernelAttrs attrs = KernelAttrs().set("reduction", std::string(reduction));
    ASSERT_KERNEL_OK(run("nn.cross_entropy", {x, y}, {whole}, attrs));
    ASSERT_KERNEL_OK(run("nn.cross_entropy_combine", {all, y}, {combined}, attrs));
    expectClose(combined.values(), whole.values(), 1e-6, 1e-7);

    OwnedTensor g(DType::F32, lossShape, roundAll(DType::F32, randomValues(perRow ? rows : 1, -2, 2, 94)));
    OwnedTensor dWhole(DType::F32, {rows, classes});
    ASSERT_KERNEL_OK(run("nn.cross_entropy_grad", {x, y, g}, {dWhole}, attrs));
    std::vector<double> expected = dWhole.values();
    for (int64_t b = 0; b < blocks; ++b) {
      OwnedTensor xb(DType::F32, {rows, block}, blockLogits[b]), db(DType::F32, {rows, block});
      ASSERT_KERNEL_OK(run("nn.cross_entropy_block_grad", {xb, y, g, all}, {db},
                           KernelAttrs()
                               .set("reduction", std::string(reduction))
                               .set("vocab_start", b * block)));
      std::vector<double> got = db.values(), want;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < block; ++c)
          want.push_back(expected[r * classes + b * block + c]);
      expectClose(got, want, 1e-5, 1e-7);
    }
  }
}

// A label outside every block (num_classes: the classes of all blocks) is
// an error, as in nn.cross_entropy, not a row whose label's logit is 0.
TEST(CrossEntropyBlocksKernelTest, CombineRejectsALabelOutsideTheClasses) {
  OwnedTensor stats(DType::F32, {2, 6}, {0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0});
  OwnedTensor labels(DType::I64, {2}, {3, 8}), loss(DType::F32, {});
  EXPECT_KERNEL_ERROR(run("nn.cross_entropy_combine", {stats, labels}, {loss},
                          KernelAttrs().set("num_classes", int64_t(8))),
                      "label 8 of row 1 is outside [0, 8)");
  OwnedTensor ignored(DType::I64, {2}, {3, -100});
  ASSERT_KERNEL_OK(run("nn.cross_entropy_combine", {stats, ignored}, {loss},
                       KernelAttrs().set("num_classes", int64_t(8))));
  // Two blocks of max 0 and sum 1: log 2 over the one counted row.
  EXPECT_NEAR(loss.values()[0], std::log(2.0), 1e-6);
}

TEST(CrossEntropyGradKernelTest, AllRowsIgnoredGivesZeros) {
  OwnedTensor x(DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6});
  OwnedTensor labels(DType::I32, {2}, {7, 7}), g(DType::F32, {}, {1.0});
  OwnedTensor out(DType::F32, {2, 3}, {9, 9, 9, 9, 9, 9});
  ASSERT_KERNEL_OK(run("nn.cross_entropy_grad", {x, labels, g}, {out},
                       KernelAttrs().set("ignore_index", int64_t(7))));
  EXPECT_EQ(out.values(), std::vector<double>(6, 0.0));
}

TEST(CrossEntropyGradKernelTest, DeterministicAcrossThreads) {
  const int64_t rows = 256, classes = 512;
  OwnedTensor x(DType::F32, {rows, classes}, randomValues(rows * classes, -3, 3, 93));
  OwnedTensor labels(DType::I64, {rows}, randomInts(rows, 0, classes - 1, 94));
  OwnedTensor g(DType::F32, {}, {1.0});
  OwnedTensor single(DType::F32, {rows, classes}), many(DType::F32, {rows, classes});
  ASSERT_KERNEL_OK(run("nn.cross_entropy_grad", {x, labels, g}, {single}, {}, 1));
  ASSERT_KERNEL_OK(run("nn.cross_entropy_grad", {x, labels, g}, {many}, {}, 8));
  EXPECT_EQ(single.bytes(), many.bytes());
}

TEST(CrossEntropyGradKernelTest, Errors) {
  OwnedTensor x(DType::F32, {2, 3}), labels(DType::I64, {2}, {0, 1}), out(DType::F32, {2, 3});
  OwnedTensor rowGrad(DType::F32, {2}), scalarGrad(DType::F32, {});
  EXPECT_KERNEL_ERROR(run("nn.cross_entropy_grad", {x, labels, rowGrad}, {out}),
                      "loss gradient shape [2] should be [] for reduction 'mean'");
  EXPECT_KERNEL_ERROR(run("nn.cross_entropy_grad", {x, labels, scalarGrad}, {out},
                          KernelAttrs().set("reduction", std::string("none"))),
                      "should be [2] for reduction 'none'");
  OwnedTensor bad(DType::I64, {2}, {0, 3});
  EXPECT_KERNEL_ERROR(run("nn.cross_entropy_grad", {x, bad, scalarGrad}, {out}),
                      "label 3 of row 1 is outside [0, 3)");
  OwnedTensor f64Grad(DType::F64, {});
  EXPECT_KERNEL_ERROR(run("nn.cross_entropy_grad", {x, labels, f64Grad}, {out}),
                      "expected f32");
}

//===----------------------------------------------------------------------===//
// pad
//===----------------------------------------------------------------------===//

TEST(PadKernelTest, PlacesTheInputAmongPadding) {
  const std::vector<int64_t> inShape = {2, 3}, low = {1, 0}, high = {0, 2},
                             interior = {1, 2};
  // Rows: 1 + 2 + 1 = 4; columns: 3 + 2 * 2 + 2 = 9.
  const std::vector<int64_t> outShape = {4, 9};
  for (DType dtype : {DType::F32, DType::F64, DType::BF16, DType::I64, DType::I32}) {
    SCOPED_TRACE(dtypeName(dtype));
    const double padValue = 7;
    std::vector<double> in = {1, 2, 3, 4, 5, 6};
    std::vector<double> expected(numElementsOf(outShape), padValue);
    for (int64_t e = 0; e < numElementsOf(inShape); ++e) {
      std::vector<int64_t> at = unravel(e, inShape);
      std::vector<int64_t> to = {low[0] + at[0] * (interior[0] + 1),
                                 low[1] + at[1] * (interior[1] + 1)};
      expected[ravel(to, outShape)] = in[e];
    }
    OwnedTensor x(dtype, inShape, in), out(dtype, outShape);
    ASSERT_KERNEL_OK(run("nn.pad", {x}, {out},
                         KernelAttrs()
                             .set("low", low)
                             .set("high", high)
                             .set("interior", interior)
                             .set("value", padValue)));
    EXPECT_EQ(out.values(), expected);
  }
}

TEST(PadKernelTest, EmptyInputIsAllPadding) {
  OwnedTensor x(DType::F32, {0, 2}), out(DType::F32, {3, 2}, {1, 1, 1, 1, 1, 1});
  ASSERT_KERNEL_OK(run("nn.pad", {x}, {out},
                       KernelAttrs()
                           .set("low", std::vector<int64_t>{1, 0})
                           .set("high", std::vector<int64_t>{2, 0})
                           .set("interior", std::vector<int64_t>{5, 0})));
  EXPECT_EQ(out.values(), std::vector<double>(6, 0.0));
}

TEST(PadKernelTest, Errors) {
  OwnedTensor x(DType::F32, {2}), out(DType::F32, {4});
  auto attrs = [](int64_t low, int64_t high) {
    return KernelAttrs()
        .set("low", std::vector<int64_t>{low})
        .set("high", std::vector<int64_t>{high})
        .set("interior", std::vector<int64_t>{0});
  };
  EXPECT_KERNEL_ERROR(run("nn.pad", {x}, {out}, attrs(1, 2)), "should be [5]");
  EXPECT_KERNEL_ERROR(run("nn.pad", {x}, {out}, attrs(-1, 3)), "must be non-negative");
  OwnedTensor other(DType::F64, {4});
  EXPECT_KERNEL_ERROR(run("nn.pad", {x}, {other}, attrs(1, 1)), "differs from output dtype");
}

} // namespace
