#include "KernelTestSupport.h"

using namespace loom;
using namespace loom::cpu;
using namespace loom::cpu::test;

namespace {

std::vector<double> iotaValues(int64_t count, double start = 1) {
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i)
    values[i] = start + static_cast<double>(i);
  return values;
}

TEST(EmbeddingKernelTest, SelectsRows) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F64}) {
    for (DType idType : {DType::I32, DType::I64}) {
      std::vector<double> table = iotaValues(5 * 3);
      OwnedTensor t(dtype, {5, 3}, table), ids(idType, {2, 2}, {4, 0, 2, 4});
      OwnedTensor out(dtype, {2, 2, 3});
      ASSERT_KERNEL_OK(run("nn.embedding", {t, ids}, {out}));
      EXPECT_EQ(out.values(), (std::vector<double>{13, 14, 15, 1, 2, 3, 7, 8, 9, 13, 14, 15}));
    }
  }
  OwnedTensor t(DType::F32, {5, 3}), bad(DType::I64, {2}, {1, 5}), out(DType::F32, {2, 3});
  EXPECT_KERNEL_ERROR(run("nn.embedding", {t, bad}, {out}), "id 5 at position 1 is outside");
  OwnedTensor negative(DType::I32, {2}, {-1, 0});
  EXPECT_KERNEL_ERROR(run("nn.embedding", {t, negative}, {out}), "id -1");
  OwnedTensor floatIds(DType::F32, {2});
  EXPECT_KERNEL_ERROR(run("nn.embedding", {t, floatIds}, {out}), "expected i32 or i64");
  OwnedTensor wrongOut(DType::F32, {2, 4});
  OwnedTensor ids(DType::I64, {2}, {0, 1});
  EXPECT_KERNEL_ERROR(run("nn.embedding", {t, ids}, {wrongOut}), "should be [2, 3]");
}

// A vocabulary-parallel block (vocab_start): ids in the block select its
// rows, any other id a zero row, so the blocks' lookups add up to the whole
// table's; negative ids are still errors.
TEST(EmbeddingKernelTest, BlockOfAVocabularyGivesZerosForOtherIds) {
  OwnedTensor block(DType::F32, {2, 3}, {10, 11, 12, 20, 21, 22});
  OwnedTensor ids(DType::I64, {4}, {3, 4, 0, 9});
  OwnedTensor out(DType::F32, {4, 3});
  ASSERT_KERNEL_OK(run("nn.embedding", {block, ids}, {out}, KernelAttrs().set("vocab_start", int64_t(3))));
  EXPECT_EQ(out.values(), (std::vector<double>{10, 11, 12, 20, 21, 22, 0, 0, 0, 0, 0, 0}));
  OwnedTensor negative(DType::I64, {1}, {-1}), one(DType::F32, {1, 3});
  EXPECT_KERNEL_ERROR(run("nn.embedding", {block, negative}, {one},
                          KernelAttrs().set("vocab_start", int64_t(3))),
                      "id -1");
}

TEST(TransposeKernelTest, Permutes) {
  const std::vector<int64_t> shape = {2, 3, 4};
  const std::vector<std::vector<int64_t>> perms = {{0, 1, 2}, {2, 0, 1}, {1, 0, 2}, {2, 1, 0}};
  for (DType dtype : {DType::F32, DType::BF16, DType::I64, DType::I1, DType::F8E5M2}) {
    std::vector<double> xs = iotaValues(24, 0);
    if (dtype == DType::I1)
      for (double &x : xs)
        x = static_cast<int64_t>(x) % 3 == 0;
    OwnedTensor in(dtype, shape, xs);
    std::vector<double> stored = in.values();
    for (const auto &perm : perms) {
      std::vector<int64_t> outShape = {shape[perm[0]], shape[perm[1]], shape[perm[2]]};
      OwnedTensor out(dtype, outShape);
      ASSERT_KERNEL_OK(run("nn.transpose", {in}, {out}, KernelAttrs().set("permutation", perm)));
      std::vector<double> expected(24);
      for (int64_t i = 0; i < 24; ++i) {
        std::vector<int64_t> outIndex = unravel(i, outShape), inIndex(3);
        for (int d = 0; d < 3; ++d)
          inIndex[perm[d]] = outIndex[d];
        expected[i] = stored[ravel(inIndex, shape)];
      }
      EXPECT_EQ(out.values(), expected) << dtypeName(dtype);
    }
  }
  OwnedTensor in(DType::F32, shape), out(DType::F32, {4, 3, 2});
  EXPECT_KERNEL_ERROR(run("nn.transpose", {in}, {out},
                          KernelAttrs().set("permutation", std::vector<int64_t>{0, 0, 1})),
                      "not a permutation");
  EXPECT_KERNEL_ERROR(run("nn.transpose", {in}, {out},
                          KernelAttrs().set("permutation", std::vector<int64_t>{0, 1, 2})),
                      "should be [2, 3, 4]");
}

TEST(BroadcastKernelTest, RepeatsAlongUnitAndMissingDims) {
  OwnedTensor in(DType::I32, {3, 1}, {7, 8, 9}), out(DType::I32, {2, 3, 4});
  ASSERT_KERNEL_OK(run("nn.broadcast", {in}, {out}));
  std::vector<double> expected;
  for (int b = 0; b < 2; ++b)
    for (double v : {7, 8, 9})
      for (int j = 0; j < 4; ++j)
        expected.push_back(v);
  EXPECT_EQ(out.values(), expected);
  OwnedTensor scalar(DType::F16, {}, {2.5}), filled(DType::F16, {2, 2});
  ASSERT_KERNEL_OK(run("nn.broadcast", {scalar}, {filled}));
  EXPECT_EQ(filled.values(), (std::vector<double>{2.5, 2.5, 2.5, 2.5}));
  OwnedTensor bad(DType::I32, {2, 4});
  EXPECT_KERNEL_ERROR(run("nn.broadcast", {in}, {bad}), "does not broadcast");
}

TEST(SliceKernelTest, StartsAndStrides) {
  const std::vector<int64_t> shape = {4, 6};
  OwnedTensor in(DType::F32, shape, iotaValues(24, 0));
  OwnedTensor out(DType::F32, {2, 3});
  KernelAttrs attrs;
  attrs.set("starts", std::vector<int64_t>{1, 1}).set("strides", std::vector<int64_t>{2, 2});
  ASSERT_KERNEL_OK(run("nn.slice", {in}, {out}, attrs));
  EXPECT_EQ(out.values(), (std::vector<double>{7, 9, 11, 19, 21, 23}));
  attrs.set("limits", std::vector<int64_t>{4, 6});
  ASSERT_KERNEL_OK(run("nn.slice", {in}, {out}, attrs));
  EXPECT_EQ(out.values(), (std::vector<double>{7, 9, 11, 19, 21, 23}));

  OwnedTensor column(DType::F32, {4, 1});
  ASSERT_KERNEL_OK(run("nn.slice", {in}, {column},
                       KernelAttrs().set("starts", std::vector<int64_t>{0, 5})));
  EXPECT_EQ(column.values(), (std::vector<double>{5, 11, 17, 23}));

  attrs.set("limits", std::vector<int64_t>{4, 5});
  EXPECT_KERNEL_ERROR(run("nn.slice", {in}, {out}, attrs), "does not give output size 3");
  OwnedTensor tooMany(DType::F32, {2, 4});
  EXPECT_KERNEL_ERROR(run("nn.slice", {in}, {tooMany},
                          KernelAttrs()
                              .set("starts", std::vector<int64_t>{1, 1})
                              .set("strides", std::vector<int64_t>{2, 2})),
                      "leave the input's size 6");
  EXPECT_KERNEL_ERROR(run("nn.slice", {in}, {out},
                          KernelAttrs()
                              .set("starts", std::vector<int64_t>{1, 1})
                              .set("strides", std::vector<int64_t>{2, 0})),
                      "must be >= 1");
  EXPECT_KERNEL_ERROR(run("nn.slice", {in}, {out},
                          KernelAttrs().set("starts", std::vector<int64_t>{1})),
                      "one entry per dim");
}

TEST(ConcatSplitKernelTest, RoundTripAlongEachDim) {
  for (int64_t dim : {0, 1, -1}) {
    const int64_t d = dim < 0 ? dim + 2 : dim;
    std::vector<std::vector<int64_t>> shapes;
    for (int64_t size : {1, 3, 2}) {
      std::vector<int64_t> shape = {4, 5};
      shape[d] = size;
      shapes.push_back(shape);
    }
    std::vector<int64_t> wholeShape = {4, 5};
    wholeShape[d] = 6;
    std::vector<OwnedTensor> pieces;
    double next = 0;
    for (const auto &shape : shapes) {
      pieces.emplace_back(DType::BF16, shape, iotaValues(numElementsOf(shape), next));
      next += 100;
    }
    OwnedTensor whole(DType::BF16, wholeShape);
    std::vector<Tensor> inputs(pieces.begin(), pieces.end());
    std::vector<Tensor> outputs = {whole};
    ASSERT_KERNEL_OK(runKernel("nn.concat", inputs, outputs, KernelAttrs().set("dim", dim)));
    // Expected: whole[i][j] comes from the piece covering that index along d.
    std::vector<double> expected;
    for (int64_t i = 0; i < numElementsOf(wholeShape); ++i) {
      std::vector<int64_t> index = unravel(i, wholeShape);
      int64_t piece = 0, along = index[d];
      while (along >= shapes[piece][d])
        along -= shapes[piece++][d];
      index[d] = along;
      expected.push_back(pieces[piece].values()[ravel(index, shapes[piece])]);
    }
    EXPECT_EQ(whole.values(), expected) << "dim " << dim;

    std::vector<OwnedTensor> parts;
    for (const auto &shape : shapes)
      parts.emplace_back(DType::BF16, shape);
    std::vector<Tensor> splitOutputs(parts.begin(), parts.end());
    ASSERT_KERNEL_OK(runKernel("nn.split", {whole.t()}, splitOutputs, KernelAttrs().set("dim", dim)));
    for (size_t p = 0; p < parts.size(); ++p)
      EXPECT_EQ(parts[p].values(), pieces[p].values()) << "piece " << p;
  }
}

TEST(ConcatSplitKernelTest, Errors) {
  OwnedTensor a(DType::F32, {2, 3}), b(DType::F32, {3, 3}), out(DType::F32, {4, 3});
  EXPECT_KERNEL_ERROR(run("nn.concat", {a, b}, {out}, KernelAttrs().set("dim", int64_t(0))),
                      "add up to 5, output has 4");
  OwnedTensor c(DType::F32, {2, 4});
  EXPECT_KERNEL_ERROR(run("nn.concat", {a, c}, {out}, KernelAttrs().set("dim", int64_t(0))),
                      "input 1 shape [2, 4] does not fit");
  OwnedTensor i(DType::I32, {2, 3});
  EXPECT_KERNEL_ERROR(run("nn.concat", {a, i}, {out}, KernelAttrs().set("dim", int64_t(0))),
                      "input dtype i32 differs");
  EXPECT_KERNEL_ERROR(run("nn.split", {out}, {a, a, a}, KernelAttrs().set("dim", int64_t(0))),
                      "add up to 6");
  EXPECT_KERNEL_ERROR(run("nn.concat", {a, a}, {out}, KernelAttrs().set("dim", int64_t(3))),
                      "out of range");
}

TEST(GatherKernelTest, OnnxSemantics) {
  // data [2, 3, 2], indices [2, 2] along axis 1 -> [2, 2, 2, 2].
  const std::vector<int64_t> dataShape = {2, 3, 2};
  OwnedTensor data(DType::F32, dataShape, iotaValues(12, 0));
  const std::vector<double> indexValues = {2, 0, -1, 1}; // -1 is the last
  for (DType idType : {DType::I32, DType::I64}) {
    OwnedTensor indices(idType, {2, 2}, indexValues);
    OwnedTensor out(DType::F32, {2, 2, 2, 2});
    ASSERT_KERNEL_OK(run("nn.gather", {data, indices}, {out}, KernelAttrs().set("axis", int64_t(1))));
    std::vector<double> expected;
    for (int64_t o = 0; o < 2; ++o)
      for (double index : indexValues)
        for (int64_t inner = 0; inner < 2; ++inner)
          expected.push_back(o * 6 + (index < 0 ? index + 3 : index) * 2 + inner);
    EXPECT_EQ(out.values(), expected);
  }
  OwnedTensor rowIndices(DType::I64, {3}, {1, 1, 0}), rows(DType::F32, {3, 3, 2});
  ASSERT_KERNEL_OK(run("nn.gather", {data, rowIndices}, {rows}, KernelAttrs().set("axis", int64_t(0))));
  std::vector<double> expected;
  for (double r : {1, 1, 0})
    for (int64_t i = 0; i < 6; ++i)
      expected.push_back(r * 6 + i);
  EXPECT_EQ(rows.values(), expected);

  OwnedTensor bad(DType::I64, {3}, {0, 3, 1});
  OwnedTensor out(DType::F32, {2, 3, 2});
  EXPECT_KERNEL_ERROR(run("nn.gather", {data, bad}, {out}, KernelAttrs().set("axis", int64_t(1))),
                      "index 3 at position 1 is outside [-3, 3)");
  OwnedTensor wrongOut(DType::F32, {2, 2, 2});
  EXPECT_KERNEL_ERROR(run("nn.gather", {data, bad}, {wrongOut}, KernelAttrs().set("axis", int64_t(1))),
                      "should be [2, 3, 2]");
}

} // namespace
