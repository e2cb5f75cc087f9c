#include "KernelTestSupport.h"

#include <cmath>
#include <limits>

using namespace loom;
using namespace loom::cpu;
using namespace loom::cpu::test;

namespace {

struct AttentionShape {
  int64_t batch, qHeads, kvHeads, seq, kvSeq, dim, valueDim;
};

/// Reference: the full score matrix with -inf where the causal mask hides a
/// key, then a row softmax and the product with V. A row with every key
/// hidden yields zeros (the kernel's documented choice).
std::vector<double> referenceAttention(const AttentionShape &s, const std::vector<double> &q,
                                       const std::vector<double> &k,
                                       const std::vector<double> &v, bool causal,
                                       double scale) {
  std::vector<double> out(s.batch * s.qHeads * s.seq * s.valueDim, 0.0);
  const double negInf = -std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.qHeads; ++h) {
      const int64_t kvh = h / (s.qHeads / s.kvHeads);
      for (int64_t i = 0; i < s.seq; ++i) {
        std::vector<double> scores(s.kvSeq);
        for (int64_t j = 0; j < s.kvSeq; ++j) {
          const bool hidden = causal && j > i + (s.kvSeq - s.seq);
          double dot = 0;
          for (int64_t d = 0; d < s.dim; ++d)
            dot += q[((b * s.qHeads + h) * s.seq + i) * s.dim + d] *
                   k[((b * s.kvHeads + kvh) * s.kvSeq + j) * s.dim + d];
          scores[j] = hidden ? negInf : dot * scale;
        }
        double total = 0;
        for (double score : scores)
          total += std::exp(score); // exp(-inf) = 0
        if (total == 0)
          continue;
        for (int64_t j = 0; j < s.kvSeq; ++j)
          for (int64_t d = 0; d < s.valueDim; ++d)
            out[((b * s.qHeads + h) * s.seq + i) * s.valueDim + d] +=
                std::exp(scores[j]) / total *
                v[((b * s.kvHeads + kvh) * s.kvSeq + j) * s.valueDim + d];
      }
    }
  }
  return out;
}

void checkAttention(const AttentionShape &s, bool causal, std::optional<double> scale,
                    DType dtype, int threads = 1) {
  std::vector<double> qs = roundAll(dtype, randomValues(s.batch * s.qHeads * s.seq * s.dim, -1, 1, 81));
  std::vector<double> ks = roundAll(dtype, randomValues(s.batch * s.kvHeads * s.kvSeq * s.dim, -1, 1, 82));
  std::vector<double> vs =
      roundAll(dtype, randomValues(s.batch * s.kvHeads * s.kvSeq * s.valueDim, -1, 1, 83));
  OwnedTensor q(dtype, {s.batch, s.qHeads, s.seq, s.dim}, qs);
  OwnedTensor k(dtype, {s.batch, s.kvHeads, s.kvSeq, s.dim}, ks);
  OwnedTensor v(dtype, {s.batch, s.kvHeads, s.kvSeq, s.valueDim}, vs);
  OwnedTensor out(dtype, {s.batch, s.qHeads, s.seq, s.valueDim});
  KernelAttrs attrs;
  attrs.set("causal", int64_t(causal));
  if (scale)
    attrs.set("scale", *scale);
  ASSERT_KERNEL_OK(run("nn.attention", {q, k, v}, {out}, attrs, threads));
  const double tol = dtype == DType::BF16 ? 1.0 / 128 : dtype == DType::F32 ? 1e-6 : 1e-13;
  expectClose(out.values(),
              referenceAttention(s, qs, ks, vs, causal, scale.value_or(1 / std::sqrt(double(s.dim)))),
              tol, tol, "attention");
}

TEST(AttentionKernelTest, MultiHeadNonCausal) {
  checkAttention({2, 3, 3, 5, 7, 8, 8}, false, std::nullopt, DType::F32);
  checkAttention({1, 2, 2, 4, 4, 16, 16}, false, 0.3, DType::F64);
}

TEST(AttentionKernelTest, CausalSquare) {
  checkAttention({2, 4, 4, 9, 9, 8, 8}, true, std::nullopt, DType::F32);
}

TEST(AttentionKernelTest, GroupedQueryCausalWithLongerKeys) {
  // Hq = 4 queries share Hkv = 2 KV heads; the 3 queries are the last of 7
  // positions (a decode step with a KV cache), with Dv != D.
  checkAttention({2, 4, 2, 3, 7, 8, 6}, true, std::nullopt, DType::F32);
  checkAttention({1, 6, 1, 1, 5, 4, 4}, true, 0.7, DType::F64);
}

TEST(AttentionKernelTest, CausalWithMoreQueriesThanKeys) {
  // Query i sees keys j <= i - 2: the first two rows see nothing and are zero.
  checkAttention({1, 2, 2, 5, 3, 4, 4}, true, std::nullopt, DType::F32);
}

TEST(AttentionKernelTest, Bf16) {
  checkAttention({1, 4, 2, 6, 6, 16, 16}, true, std::nullopt, DType::BF16);
}

TEST(AttentionKernelTest, ThreadCountDoesNotChangeBits) {
  const AttentionShape s{2, 4, 2, 64, 64, 32, 32};
  std::vector<double> qs = randomValues(2 * 4 * 64 * 32, -1, 1, 84);
  std::vector<double> kvs = randomValues(2 * 2 * 64 * 32, -1, 1, 85);
  OwnedTensor q(DType::F32, {2, 4, 64, 32}, qs), k(DType::F32, {2, 2, 64, 32}, kvs);
  OwnedTensor one(DType::F32, {2, 4, 64, 32}), many(DType::F32, {2, 4, 64, 32});
  KernelAttrs attrs = KernelAttrs().set("causal", int64_t(1));
  ASSERT_KERNEL_OK(run("nn.attention", {q, k, k}, {one}, attrs, 1));
  ASSERT_KERNEL_OK(run("nn.attention", {q, k, k}, {many}, attrs, 4));
  EXPECT_EQ(one.bytes(), many.bytes());
  checkAttention(s, true, std::nullopt, DType::F32, 3);
}

TEST(AttentionKernelTest, Errors) {
  OwnedTensor q(DType::F32, {1, 3, 4, 8}), k(DType::F32, {1, 2, 4, 8}), v(DType::F32, {1, 2, 4, 8});
  OwnedTensor out(DType::F32, {1, 3, 4, 8});
  EXPECT_KERNEL_ERROR(run("nn.attention", {q, k, v}, {out}), "multiple of key/value heads");
  OwnedTensor q4(DType::F32, {1, 4, 4, 8}), out4(DType::F32, {1, 4, 4, 8});
  OwnedTensor kBad(DType::F32, {1, 2, 4, 6});
  EXPECT_KERNEL_ERROR(run("nn.attention", {q4, kBad, v}, {out4}), "does not match query");
  OwnedTensor vBad(DType::F32, {1, 2, 5, 8});
  EXPECT_KERNEL_ERROR(run("nn.attention", {q4, k, vBad}, {out4}), "does not match key");
  EXPECT_KERNEL_ERROR(run("nn.attention", {q4, k, v}, {out}), "should be [1, 4, 4, 8]");
  OwnedTensor flat(DType::F32, {4, 8});
  EXPECT_KERNEL_ERROR(run("nn.attention", {flat, k, v}, {out4}), "query must have rank 4");
}

/// Reference rope from the definitions: halves: x*cos + rotate_half(x)*sin
/// with rotate_half(x) = [-x2, x1]; interleaved: pairs (x[2i], x[2i+1])
/// rotated by the angle whose cos/sin sit at column 2i.
std::vector<double> referenceRope(const std::vector<double> &x, const std::vector<double> &c,
                                  const std::vector<double> &s, int64_t seq, int64_t dim,
                                  bool interleaved) {
  std::vector<double> out(x.size());
  for (size_t row = 0; row < x.size() / dim; ++row) {
    const int64_t pos = row % seq;
    const double *in = x.data() + row * dim;
    const double *cr = c.data() + pos * dim;
    const double *sr = s.data() + pos * dim;
    double *o = out.data() + row * dim;
    if (!interleaved) {
      std::vector<double> rotated(dim);
      for (int64_t d = 0; d < dim / 2; ++d) {
        rotated[d] = -in[d + dim / 2];
        rotated[d + dim / 2] = in[d];
      }
      for (int64_t d = 0; d < dim; ++d)
        o[d] = in[d] * cr[d] + rotated[d] * sr[d];
    } else {
      for (int64_t i = 0; i < dim / 2; ++i) {
        const double cosA = cr[2 * i], sinA = sr[2 * i];
        o[2 * i] = in[2 * i] * cosA - in[2 * i + 1] * sinA;
        o[2 * i + 1] = in[2 * i] * sinA + in[2 * i + 1] * cosA;
      }
    }
  }
  return out;
}

TEST(RopeKernelTest, HalvesAndInterleaved) {
  const int64_t seq = 5, dim = 8;
  std::vector<double> cosTable, sinTable;
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t d = 0; d < dim; ++d) {
      const double angle = p * std::pow(10000.0, -2.0 * (d % (dim / 2)) / dim) + 0.1 * d;
      cosTable.push_back(std::cos(angle));
      sinTable.push_back(std::sin(angle));
    }
  }
  for (DType dtype : {DType::F32, DType::F64, DType::BF16}) {
    std::vector<double> xs = roundAll(dtype, randomValues(2 * 3 * seq * dim, -2, 2, 91));
    std::vector<double> cs = roundAll(dtype, cosTable), ss = roundAll(dtype, sinTable);
    OwnedTensor x(dtype, {2, 3, seq, dim}, xs), c(dtype, {seq, dim}, cs), s(dtype, {seq, dim}, ss);
    OwnedTensor out(dtype, {2, 3, seq, dim});
    const double tol = dtype == DType::BF16 ? 1.0 / 128 : dtype == DType::F32 ? 1e-6 : 1e-14;
    for (bool interleaved : {false, true}) {
      ASSERT_KERNEL_OK(run("nn.rope", {x, c, s}, {out},
                           KernelAttrs().set("interleaved", int64_t(interleaved))));
      expectClose(out.values(), referenceRope(xs, cs, ss, seq, dim, interleaved), tol, tol,
                  interleaved ? "interleaved" : "halves");
    }
    // In place: the output may be the input.
    ASSERT_KERNEL_OK(run("nn.rope", {x, c, s}, {x}));
    expectClose(x.values(), referenceRope(xs, cs, ss, seq, dim, false), tol, tol, "in place");
  }
}

TEST(RopeKernelTest, Errors) {
  OwnedTensor x(DType::F32, {1, 2, 4, 6}), c(DType::F32, {4, 6}), s(DType::F32, {4, 6});
  OwnedTensor out(DType::F32, {1, 2, 4, 6});
  OwnedTensor odd(DType::F32, {1, 2, 4, 5}), oddTable(DType::F32, {4, 5});
  EXPECT_KERNEL_ERROR(run("nn.rope", {odd, oddTable, oddTable}, {odd}), "must be even");
  OwnedTensor shortTable(DType::F32, {3, 6});
  EXPECT_KERNEL_ERROR(run("nn.rope", {x, shortTable, s}, {out}), "must both be [4, 6]");
  OwnedTensor f64Table(DType::F64, {4, 6});
  EXPECT_KERNEL_ERROR(run("nn.rope", {x, c, f64Table}, {out}), "sin dtype f64 differs");
}

} // namespace

namespace {

// nn.attention_with_stats and nn.attention_grad_with_stats on the CPU: the
// same bits as nn.attention and nn.attention_grad (a training step gives
// the same losses with and without --loom-attention-stats), and lse the
// natural logsumexp of each row's scaled visible scores.
TEST(AttentionStatsKernelTest, SameBitsAsWithoutStatsAndLogsumexpPerRow) {
  // Grouped heads, causal with more queries than keys: the first row sees
  // no key (lse -inf, zero output and gradients).
  const int64_t B = 2, Hq = 4, Hkv = 2, S = 5, Skv = 4, D = 8;
  const double scale = 0.3;
  std::vector<double> qs = randomValues(B * Hq * S * D, -1, 1, 91);
  std::vector<double> ks = randomValues(B * Hkv * Skv * D, -1, 1, 92);
  std::vector<double> vs = randomValues(B * Hkv * Skv * D, -1, 1, 93);
  std::vector<double> ds = randomValues(B * Hq * S * D, -1, 1, 94);
  OwnedTensor q(DType::F32, {B, Hq, S, D}, qs), k(DType::F32, {B, Hkv, Skv, D}, ks);
  OwnedTensor v(DType::F32, {B, Hkv, Skv, D}, vs), dOut(DType::F32, {B, Hq, S, D}, ds);
  KernelAttrs attrs = KernelAttrs().set("causal", int64_t(1)).set("scale", scale);
  OwnedTensor plain(DType::F32, {B, Hq, S, D}), out(DType::F32, {B, Hq, S, D});
  OwnedTensor lse(DType::F32, {B, Hq, S});
  ASSERT_KERNEL_OK(run("nn.attention", {q, k, v}, {plain}, attrs, 1));
  ASSERT_KERNEL_OK(run("nn.attention_with_stats", {q, k, v}, {out, lse}, attrs, 3));
  EXPECT_EQ(out.bytes(), plain.bytes());
  std::vector<double> l = lse.values();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t row = (b * Hq + h) * S + i, kvh = h / (Hq / Hkv);
        double total = 0;
        for (int64_t j = 0; j <= i + (Skv - S); ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += qs[row * D + d] * ks[((b * Hkv + kvh) * Skv + j) * D + d];
          total += std::exp(dot * scale);
        }
        if (i + (Skv - S) < 0)
          EXPECT_EQ(l[row], -std::numeric_limits<double>::infinity()) << "row " << row;
        else
          EXPECT_NEAR(l[row], std::log(total), 1e-6) << "row " << row;
      }

  OwnedTensor dq(DType::F32, {B, Hq, S, D}), dk(DType::F32, {B, Hkv, Skv, D});
  OwnedTensor dv(DType::F32, {B, Hkv, Skv, D});
  OwnedTensor dqs(DType::F32, {B, Hq, S, D}), dks(DType::F32, {B, Hkv, Skv, D});
  OwnedTensor dvs(DType::F32, {B, Hkv, Skv, D});
  ASSERT_KERNEL_OK(run("nn.attention_grad", {q, k, v, dOut}, {dq, dk, dv}, attrs, 1));
  ASSERT_KERNEL_OK(run("nn.attention_grad_with_stats", {q, k, v, out, lse, dOut},
                       {dqs, dks, dvs}, attrs, 2));
  EXPECT_EQ(dqs.bytes(), dq.bytes());
  EXPECT_EQ(dks.bytes(), dk.bytes());
  EXPECT_EQ(dvs.bytes(), dv.bytes());
}

TEST(AttentionStatsKernelTest, Errors) {
  OwnedTensor q(DType::F32, {1, 4, 3, 8}), k(DType::F32, {1, 2, 3, 8});
  OwnedTensor out(DType::F32, {1, 4, 3, 8}), lse(DType::F32, {1, 4, 3});
  OwnedTensor lse16(DType::F16, {1, 4, 3}), lseWide(DType::F32, {1, 4, 3, 1});
  EXPECT_KERNEL_ERROR(run("nn.attention_with_stats", {q, k, k}, {out, lse16}),
                      "lse dtype is f16, expected f32");
  EXPECT_KERNEL_ERROR(run("nn.attention_with_stats", {q, k, k}, {out, lseWide}),
                      "lse shape [1, 4, 3, 1] should be [1, 4, 3]");
  OwnedTensor dq(DType::F32, {1, 4, 3, 8}), dk(DType::F32, {1, 2, 3, 8});
  OwnedTensor dv(DType::F32, {1, 2, 3, 8}), outBad(DType::F32, {1, 4, 3, 4});
  EXPECT_KERNEL_ERROR(
      run("nn.attention_grad_with_stats", {q, k, k, outBad, lse, out}, {dq, dk, dv}),
      "output shape [1, 4, 3, 4] should be [1, 4, 3, 8]");
  EXPECT_KERNEL_ERROR(
      run("nn.attention_grad_with_stats", {q, k, k, out, lseWide, out}, {dq, dk, dv}),
      "lse shape [1, 4, 3, 1] should be [1, 4, 3]");
  EXPECT_KERNEL_ERROR(run("nn.attention_grad_with_stats", {q, k, k, out, lse}, {dq, dk, dv}),
                      "takes 6 inputs");
}

} // namespace
