// Gradient rules of the transformer layers (norms, rope, attention,
// embedding, cross-entropy, dropout), checked against central finite
// differences in f64 unless said otherwise (tolerances: GradientCheck.h).

#include "GradientCheck.h"

using namespace mlir;
using namespace loom::nn;
using namespace loom::nn::test;

namespace {

TEST(NormGradientTest, LayerNormEveryAffineCombination) {
  for (bool withWeight : {false, true}) {
    for (bool withBias : {false, true}) {
      SCOPED_TRACE(std::string("weight=") + (withWeight ? "1" : "0") +
                   " bias=" + (withBias ? "1" : "0"));
      GradientCheck g;
      OpBuilder &b = g.builder();
      Value x = g.random({2, 3, 5});
      Value weight = withWeight ? g.random({5}) : Value();
      Value bias = withBias ? g.random({5}) : Value();
      g.check(b.create<LayerNormOp>(g.loc(), x.getType(), x, weight, bias,
                                    b.getF64FloatAttr(1e-3)));
    }
  }
}

TEST(NormGradientTest, RmsNormWithAndWithoutWeight) {
  for (bool withWeight : {false, true}) {
    SCOPED_TRACE(std::string("weight=") + (withWeight ? "1" : "0"));
    GradientCheck g;
    OpBuilder &b = g.builder();
    Value x = g.random({4, 6});
    Value weight = withWeight ? g.random({6}) : Value();
    g.check(b.create<RmsNormOp>(g.loc(), x.getType(), x, weight, b.getF64FloatAttr(1e-4)));
  }
}

TEST(NormGradientTest, RankOneInput) {
  GradientCheck g;
  OpBuilder &b = g.builder();
  Value x = g.random({5});
  Value weight = g.random({5}), bias = g.random({5});
  g.check(b.create<LayerNormOp>(g.loc(), x.getType(), x, weight, bias,
                                b.getF64FloatAttr(1e-5)));
}

TEST(RopeGradientTest, HalvesAndInterleaved) {
  for (bool interleaved : {false, true}) {
    SCOPED_TRACE(interleaved ? "interleaved" : "halves");
    GradientCheck g;
    OpBuilder &b = g.builder();
    Value x = g.random({2, 2, 3, 6});
    // Arbitrary tables (halves unequal), so the rule cannot rely on the
    // symmetry of real rotary tables.
    Value cos = g.random({3, 6}), sin = g.random({3, 6});
    g.check(b.create<RopeOp>(g.loc(), x.getType(), x, cos, sin,
                             interleaved ? b.getUnitAttr() : UnitAttr()));
  }
}

TEST(AttentionGradientTest, PlainCausalGroupedAndWindowed) {
  struct Case {
    const char *name;
    int64_t qHeads, kvHeads, seq, kvSeq;
    bool causal;
    std::optional<double> scale;
    int64_t window = 0;
  };
  for (const Case &c : {Case{"plain", 2, 2, 3, 3, false, std::nullopt},
                        Case{"causal grouped", 4, 2, 3, 5, true, std::nullopt},
                        Case{"grouped scaled", 3, 1, 2, 4, false, 0.3},
                        Case{"sliding window", 4, 2, 5, 6, true, std::nullopt, 2}}) {
    SCOPED_TRACE(c.name);
    GradientCheck g;
    OpBuilder &b = g.builder();
    Value q = g.random({2, c.qHeads, c.seq, 4});
    Value k = g.random({2, c.kvHeads, c.kvSeq, 4});
    Value v = g.random({2, c.kvHeads, c.kvSeq, 3});
    g.check(b.create<AttentionOp>(g.loc(), q, k, v,
                                  c.causal ? b.getUnitAttr() : UnitAttr(),
                                  c.scale ? b.getF64FloatAttr(*c.scale) : FloatAttr(),
                                  b.getI64IntegerAttr(0),
                                  c.window ? b.getI64IntegerAttr(c.window) : IntegerAttr()));
  }
}

TEST(EmbeddingGradientTest, RepeatedIds) {
  GradientCheck g;
  Value table = g.random({5, 3});
  Value ids = g.ints({2, 3}, {4, 0, 4, 2, 4, 0});
  g.check(g.builder().create<EmbeddingOp>(g.loc(), table, ids, mlir::IntegerAttr(), mlir::IntegerAttr()));
}

TEST(CrossEntropyGradientTest, EveryReductionWithIgnoredRows) {
  // The loss is f32 whatever the logits are, so the differences use a
  // larger step and a tolerance of f32's precision.
  const Tolerance f32Loss{1e-3, 1e-3, 2e-4};
  for (LossReduction reduction :
       {LossReduction::mean, LossReduction::sum, LossReduction::none}) {
    SCOPED_TRACE(stringifyLossReduction(reduction).str());
    GradientCheck g;
    OpBuilder &b = g.builder();
    Value logits = g.random({4, 5});
    Value labels = g.ints({4}, {3, -100, 0, 4});
    g.check(b.create<CrossEntropyOp>(
                g.loc(), logits, labels, b.getI64IntegerAttr(-100),
                LossReductionAttr::get(b.getContext(), reduction)),
            f32Loss);
  }
}

TEST(CrossEntropyGradientTest, CustomIgnoreIndexWithI32Labels) {
  GradientCheck g;
  OpBuilder &b = g.builder();
  Value logits = g.random({3, 4});
  Value labels = g.ints({3}, {1, 2, 2}, 32);
  g.check(b.create<CrossEntropyOp>(g.loc(), logits, labels, b.getI64IntegerAttr(2),
                                   LossReductionAttr::get(b.getContext(),
                                                          LossReduction::mean)),
          Tolerance{1e-3, 1e-3, 2e-4});
}

TEST(DropoutGradientTest, SameMaskAsForward) {
  GradientCheck g;
  OpBuilder &b = g.builder();
  Value x = g.random({4, 8});
  auto dropout = b.create<DropoutOp>(g.loc(), x.getType(), x, b.getF64FloatAttr(0.3),
                                     b.getI64IntegerAttr(7));
  g.check(dropout);
  // Elements the forward dropped get exactly zero.
  std::vector<double> y = g.evaluate(dropout);
  std::vector<double> dx = g.evaluate(g.gradient(dropout, 0, {g.random({4, 8})}));
  int dropped = 0;
  for (size_t i = 0; i < y.size(); ++i)
    if (y[i] == 0.0) {
      ++dropped;
      EXPECT_EQ(dx[i], 0.0) << "element " << i;
    }
  EXPECT_GT(dropped, 0);
}

} // namespace
