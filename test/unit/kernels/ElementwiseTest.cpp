#include "KernelTestSupport.h"

#include <cmath>
#include <functional>
#include <limits>

using namespace loom;
using namespace loom::cpu;
using namespace loom::cpu::test;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct UnaryCase {
  const char *kernel;
  std::function<double(double)> reference;
  double lo, hi; // input range
  std::string approximate = "";
};

std::vector<UnaryCase> unaryCases() {
  const double pi = 3.14159265358979323846;
  return {
      {"nn.neg", [](double x) { return -x; }, -5, 5},
      {"nn.abs", [](double x) { return std::fabs(x); }, -5, 5},
      {"nn.exp", [](double x) { return std::exp(x); }, -5, 5},
      {"nn.log", [](double x) { return std::log(x); }, 0.01, 50},
      {"nn.sqrt", [](double x) { return std::sqrt(x); }, 0.01, 50},
      {"nn.rsqrt", [](double x) { return 1 / std::sqrt(x); }, 0.01, 50},
      {"nn.reciprocal", [](double x) { return 1 / x; }, -5, 5},
      {"nn.tanh", [](double x) { return std::tanh(x); }, -5, 5},
      {"nn.erf", [](double x) { return std::erf(x); }, -3, 3},
      {"nn.sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, -30, 30},
      {"nn.silu", [](double x) { return x / (1 + std::exp(-x)); }, -30, 30},
      {"nn.relu", [](double x) { return x > 0 ? x : 0; }, -5, 5},
      {"nn.gelu", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); },
       -6, 6, "none"},
      {"nn.gelu",
       [pi](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
       },
       -6, 6, "tanh"},
  };
}

TEST(UnaryKernelTest, MatchesDoubleReferenceInEveryFloatType) {
  struct Precision {
    DType dtype;
    double relTol, absTol;
  };
  const Precision precisions[] = {
      {DType::F32, 2e-6, 1e-7}, {DType::F64, 1e-13, 1e-15},
      {DType::BF16, 1.0 / 128, 1e-6}, {DType::F16, 1.0 / 1024, 1e-6}};
  for (const UnaryCase &c : unaryCases()) {
    for (const Precision &p : precisions) {
      // Inputs exactly representable in the dtype, so only the op rounds.
      std::vector<double> xs = roundAll(p.dtype, randomValues(200, c.lo, c.hi, 11));
      OwnedTensor in(p.dtype, {10, 20}, xs), out(p.dtype, {10, 20});
      KernelAttrs attrs;
      if (!c.approximate.empty())
        attrs.set("approximate", c.approximate);
      ASSERT_KERNEL_OK(run(c.kernel, {in}, {out}, attrs));
      std::vector<double> expected;
      for (double x : xs)
        expected.push_back(c.reference(x));
      // A half-precision result can be off by its rounding of the f32 value.
      expectClose(out.values(), expected, p.relTol, p.absTol,
                  std::string(c.kernel) + " " + c.approximate + " " +
                      std::string(dtypeName(p.dtype)));
    }
  }
}

TEST(UnaryKernelTest, SpecialValues) {
  OwnedTensor in(DType::F32, {4}, {0.0, -1.0, kInf, kNaN}), out(DType::F32, {4});
  ASSERT_KERNEL_OK(run("nn.log", {in}, {out}));
  expectClose(out.values(), {-kInf, kNaN, kInf, kNaN}, 0);
  ASSERT_KERNEL_OK(run("nn.relu", {in}, {out}));
  expectClose(out.values(), {0, 0, kInf, kNaN}, 0);
  ASSERT_KERNEL_OK(run("nn.sigmoid", {in}, {out}));
  expectClose(out.values(), {0.5, 1 / (1 + std::exp(1.0)), 1, kNaN}, 1e-7);
  // Large negative inputs must not overflow exp inside sigmoid.
  OwnedTensor big(DType::F32, {2}, {-200.0, 200.0}), bigOut(DType::F32, {2});
  ASSERT_KERNEL_OK(run("nn.silu", {big}, {bigOut}));
  expectClose(bigOut.values(), {-200 * std::exp(-200.0), 200}, 1e-6, 1e-30);
}

TEST(UnaryKernelTest, IntegerNegAbsRelu) {
  const double int32Min = std::numeric_limits<int32_t>::min();
  OwnedTensor in(DType::I32, {4}, {-3, 0, 7, int32Min}), out(DType::I32, {4});
  ASSERT_KERNEL_OK(run("nn.neg", {in}, {out}));
  EXPECT_EQ(out.values(), (std::vector<double>{3, 0, -7, int32Min})); // wraps
  ASSERT_KERNEL_OK(run("nn.abs", {in}, {out}));
  EXPECT_EQ(out.values(), (std::vector<double>{3, 0, 7, int32Min}));
  ASSERT_KERNEL_OK(run("nn.relu", {in}, {out}));
  EXPECT_EQ(out.values(), (std::vector<double>{0, 0, 7, 0}));
  OwnedTensor in64(DType::I64, {2}, {-5, 1e15}), out64(DType::I64, {2});
  ASSERT_KERNEL_OK(run("nn.abs", {in64}, {out64}));
  EXPECT_EQ(out64.values(), (std::vector<double>{5, 1e15}));
}

TEST(UnaryKernelTest, Errors) {
  OwnedTensor i32(DType::I32, {3}), f32(DType::F32, {3}), f32b(DType::F32, {4});
  OwnedTensor bools(DType::I1, {3});
  EXPECT_KERNEL_ERROR(run("nn.exp", {i32}, {i32}), "nn.exp: unsupported dtype i32");
  EXPECT_KERNEL_ERROR(run("nn.neg", {bools}, {bools}), "unsupported dtype i1");
  EXPECT_KERNEL_ERROR(run("nn.exp", {f32}, {f32b}), "shape [3] differs from output shape [4]");
  EXPECT_KERNEL_ERROR(run("nn.exp", {f32}, {i32}), "dtype f32 differs from output dtype i32");
  EXPECT_KERNEL_ERROR(
      run("nn.gelu", {f32}, {f32}, KernelAttrs().set("approximate", std::string("erf"))),
      "'approximate' is 'erf'");
}

TEST(UnaryKernelTest, InPlaceOnNarrowTypes) {
  std::vector<double> xs = roundAll(DType::BF16, randomValues(64, -3, 3, 5));
  OwnedTensor t(DType::BF16, {64}, xs);
  ASSERT_KERNEL_OK(run("nn.tanh", {t}, {t}));
  std::vector<double> expected;
  for (double x : xs)
    expected.push_back(std::tanh(x));
  expectClose(t.values(), expected, 1.0 / 128, 1e-6);
}

using BinaryFn = std::function<double(double, double)>;

TEST(BinaryKernelTest, BroadcastsLikeNumPy) {
  const std::pair<const char *, BinaryFn> ops[] = {
      {"nn.add", [](double a, double b) { return a + b; }},
      {"nn.sub", [](double a, double b) { return a - b; }},
      {"nn.mul", [](double a, double b) { return a * b; }},
      {"nn.div", [](double a, double b) { return a / b; }},
      {"nn.pow", [](double a, double b) { return std::pow(a, b); }},
      {"nn.maximum", [](double a, double b) { return std::max(a, b); }},
      {"nn.minimum", [](double a, double b) { return std::min(a, b); }},
  };
  const std::vector<std::vector<int64_t>> shapeTriples[] = {
      {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}, // no broadcast
      {{2, 1, 4}, {3, 1}, {2, 3, 4}},    // both broadcast
      {{4}, {2, 3, 4}, {2, 3, 4}},       // rank extension
      {{}, {5, 1}, {5, 1}},              // scalar
      {{1, 1}, {1, 7}, {1, 7}},
  };
  for (const auto &[kernel, fn] : ops) {
    for (const auto &shapes : shapeTriples) {
      for (DType dtype : {DType::F32, DType::F64}) {
        const bool isPow = std::string(kernel) == "nn.pow";
        std::vector<double> as = randomValues(numElementsOf(shapes[0]), isPow ? 0.1 : -4, 4, 1);
        std::vector<double> bs = randomValues(numElementsOf(shapes[1]), -3, 3, 2);
        OwnedTensor a(dtype, shapes[0], roundAll(dtype, as));
        OwnedTensor b(dtype, shapes[1], roundAll(dtype, bs));
        OwnedTensor out(dtype, shapes[2]);
        ASSERT_KERNEL_OK(run(kernel, {a, b}, {out}));
        std::vector<double> expected(out.numElements());
        std::vector<double> av = a.values(), bv = b.values();
        for (int64_t i = 0; i < out.numElements(); ++i) {
          std::vector<int64_t> index = unravel(i, shapes[2]);
          expected[i] = fn(av[broadcastSource(index, shapes[0])],
                           bv[broadcastSource(index, shapes[1])]);
        }
        expectClose(out.values(), expected, dtype == DType::F32 ? 1e-6 : 1e-14, 0,
                    kernel);
      }
    }
  }
}

TEST(BinaryKernelTest, Bf16RoundsTheF32Result) {
  std::vector<double> as = roundAll(DType::BF16, randomValues(100, -10, 10, 3));
  std::vector<double> bs = roundAll(DType::BF16, randomValues(100, -10, 10, 4));
  OwnedTensor a(DType::BF16, {100}, as), b(DType::BF16, {100}, bs), out(DType::BF16, {100});
  ASSERT_KERNEL_OK(run("nn.mul", {a, b}, {out}));
  std::vector<double> expected;
  for (int i = 0; i < 100; ++i) // the product of two bf16s is exact in f32
    expected.push_back(roundTo(DType::BF16, as[i] * bs[i]));
  EXPECT_EQ(out.values(), expected);
}

TEST(BinaryKernelTest, MaximumAndMinimumPropagateNaN) {
  OwnedTensor a(DType::F32, {3}, {kNaN, 1, 2}), b(DType::F32, {3}, {1, kNaN, 3});
  OwnedTensor out(DType::F32, {3});
  ASSERT_KERNEL_OK(run("nn.maximum", {a, b}, {out}));
  expectClose(out.values(), {kNaN, kNaN, 3}, 0);
  ASSERT_KERNEL_OK(run("nn.minimum", {a, b}, {out}));
  expectClose(out.values(), {kNaN, kNaN, 2}, 0);
}

TEST(BinaryKernelTest, Integers) {
  for (DType dtype : {DType::I32, DType::I64}) {
    OwnedTensor a(dtype, {2, 3}, {7, -7, 9, 0, 100, -1});
    OwnedTensor b(dtype, {3}, {2, 2, -4});
    OwnedTensor out(dtype, {2, 3});
    ASSERT_KERNEL_OK(run("nn.add", {a, b}, {out}));
    EXPECT_EQ(out.values(), (std::vector<double>{9, -5, 5, 2, 102, -5}));
    ASSERT_KERNEL_OK(run("nn.sub", {a, b}, {out}));
    EXPECT_EQ(out.values(), (std::vector<double>{5, -9, 13, -2, 98, 3}));
    ASSERT_KERNEL_OK(run("nn.mul", {a, b}, {out}));
    EXPECT_EQ(out.values(), (std::vector<double>{14, -14, -36, 0, 200, 4}));
    ASSERT_KERNEL_OK(run("nn.div", {a, b}, {out})); // truncates toward zero
    EXPECT_EQ(out.values(), (std::vector<double>{3, -3, -2, 0, 50, 0}));
    ASSERT_KERNEL_OK(run("nn.maximum", {a, b}, {out}));
    EXPECT_EQ(out.values(), (std::vector<double>{7, 2, 9, 2, 100, -1}));
    ASSERT_KERNEL_OK(run("nn.minimum", {a, b}, {out}));
    EXPECT_EQ(out.values(), (std::vector<double>{2, -7, -4, 0, 2, -4}));
    OwnedTensor zero(dtype, {3}, {1, 0, 1});
    EXPECT_KERNEL_ERROR(run("nn.div", {a, zero}, {out}), "division by zero");
    EXPECT_KERNEL_ERROR(run("nn.pow", {a, b}, {out}), "unsupported dtype");
  }
  // i32 arithmetic wraps like the hardware.
  const double int32Max = std::numeric_limits<int32_t>::max();
  OwnedTensor big(DType::I32, {1}, {int32Max}), one(DType::I32, {1}, {1});
  OwnedTensor sum(DType::I32, {1});
  ASSERT_KERNEL_OK(run("nn.add", {big, one}, {sum}));
  EXPECT_EQ(sum.values()[0], std::numeric_limits<int32_t>::min());
}

TEST(BinaryKernelTest, Errors) {
  OwnedTensor a(DType::F32, {2, 3}), b(DType::F32, {4}), c(DType::F64, {2, 3});
  OwnedTensor out(DType::F32, {2, 3});
  EXPECT_KERNEL_ERROR(run("nn.add", {a, b}, {out}),
                      "rhs shape [4] does not broadcast to output shape [2, 3]");
  EXPECT_KERNEL_ERROR(run("nn.add", {a, c}, {out}), "rhs dtype f64 differs");
  OwnedTensor small(DType::F32, {3});
  EXPECT_KERNEL_ERROR(run("nn.add", {a, a}, {small}), "does not broadcast");
  OwnedTensor bools(DType::I1, {2, 3});
  EXPECT_KERNEL_ERROR(run("nn.add", {bools, bools}, {bools}), "unsupported dtype i1");
}

TEST(BinaryKernelTest, ThreadCountDoesNotChangeResults) {
  const std::vector<int64_t> shape = {64, 1024};
  std::vector<double> xs = randomValues(numElementsOf(shape), 0.1, 3, 8);
  std::vector<double> ys = randomValues(1024, -2, 2, 9);
  OwnedTensor a(DType::F32, shape, xs), b(DType::F32, {1024}, ys);
  OwnedTensor one(DType::F32, shape), many(DType::F32, shape);
  ASSERT_KERNEL_OK(run("nn.pow", {a, b}, {one}, {}, 1));
  ASSERT_KERNEL_OK(run("nn.pow", {a, b}, {many}, {}, 5));
  EXPECT_EQ(one.bytes(), many.bytes());
}

TEST(CompareKernelTest, AllPredicatesWithBroadcasting) {
  const std::pair<const char *, std::function<bool(double, double)>> preds[] = {
      {"eq", [](double a, double b) { return a == b; }},
      {"ne", [](double a, double b) { return a != b; }},
      {"lt", [](double a, double b) { return a < b; }},
      {"le", [](double a, double b) { return a <= b; }},
      {"gt", [](double a, double b) { return a > b; }},
      {"ge", [](double a, double b) { return a >= b; }},
  };
  const std::vector<double> as = {1, 2, 3, kNaN};
  const std::vector<double> bs = {2, 3, kNaN};
  for (DType dtype : {DType::F32, DType::BF16, DType::F64}) {
    OwnedTensor a(dtype, {4, 1}, as), b(dtype, {3}, bs), out(DType::I1, {4, 3});
    for (const auto &[pred, fn] : preds) {
      ASSERT_KERNEL_OK(run("nn.compare", {a, b}, {out},
                           KernelAttrs().set("predicate", std::string(pred))));
      std::vector<double> expected;
      for (double x : as)
        for (double y : bs)
          expected.push_back(fn(x, y) ? 1 : 0);
      EXPECT_EQ(out.values(), expected) << pred << " " << dtypeName(dtype);
    }
  }
  OwnedTensor a(DType::I64, {3}, {-1, 5, 1e12}), b(DType::I64, {3}, {-1, 4, 1e12 + 1});
  OwnedTensor out(DType::I1, {3});
  ASSERT_KERNEL_OK(run("nn.compare", {a, b}, {out},
                       KernelAttrs().set("predicate", std::string("lt"))));
  EXPECT_EQ(out.values(), (std::vector<double>{0, 0, 1}));
  OwnedTensor wrongOut(DType::F32, {3});
  EXPECT_KERNEL_ERROR(run("nn.compare", {a, b}, {wrongOut},
                          KernelAttrs().set("predicate", std::string("lt"))),
                      "expected i1");
  EXPECT_KERNEL_ERROR(run("nn.compare", {a, b}, {out},
                          KernelAttrs().set("predicate", std::string("approx"))),
                      "'predicate' is 'approx'");
}

TEST(WhereKernelTest, SelectsWithBroadcasting) {
  for (DType dtype : {DType::F32, DType::I64, DType::BF16, DType::I1}) {
    OwnedTensor cond(DType::I1, {3, 1}, {1, 0, 1});
    std::vector<double> as = {1, 0, 1, 1};
    std::vector<double> bs = {0, 1, 0, 0, 1, 1, 0, 1, 0, 1, 0, 0};
    if (dtype != DType::I1) {
      as = {10, 20, 30, 40};
      bs = randomInts(12, -50, 50, 3);
    }
    OwnedTensor a(dtype, {4}, as), b(dtype, {3, 4}, bs), out(dtype, {3, 4});
    ASSERT_KERNEL_OK(run("nn.where", {cond, a, b}, {out}));
    std::vector<double> expected;
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c)
        expected.push_back(r != 1 ? as[c] : bs[r * 4 + c]);
    EXPECT_EQ(out.values(), expected) << dtypeName(dtype);
  }
  OwnedTensor floatCond(DType::F32, {2}), x(DType::F32, {2});
  EXPECT_KERNEL_ERROR(run("nn.where", {floatCond, x, x}, {x}), "condition dtype is f32");
}

TEST(CastKernelTest, Conversions) {
  // f32 -> bf16 rounds to nearest even (ties included).
  const double tieDown = 1.0 + 1.0 / 256, tieUp = 1.0 + 3.0 / 256;
  OwnedTensor f(DType::F32, {3}, {tieDown, tieUp, -0.0}), bf(DType::BF16, {3});
  ASSERT_KERNEL_OK(run("nn.cast", {f}, {bf}));
  EXPECT_EQ(bf.values(), (std::vector<double>{1.0, 1.0 + 4.0 / 256, 0.0}));
  EXPECT_EQ(bf.bytes()[5], 0x80); // -0.0 keeps its sign

  OwnedTensor back(DType::F32, {3});
  ASSERT_KERNEL_OK(run("nn.cast", {bf}, {back}));
  EXPECT_EQ(back.values(), bf.values());

  OwnedTensor floats(DType::F32, {6}, {2.9, -2.9, 3e9, -3e9, kNaN, 0.5});
  OwnedTensor ints(DType::I32, {6});
  ASSERT_KERNEL_OK(run("nn.cast", {floats}, {ints}));
  EXPECT_EQ(ints.values(), (std::vector<double>{2, -2, 2147483647, -2147483648.0, 0, 0}));

  OwnedTensor bools(DType::I1, {6});
  ASSERT_KERNEL_OK(run("nn.cast", {floats}, {bools}));
  EXPECT_EQ(bools.values(), (std::vector<double>{1, 1, 1, 1, 1, 1}));
  OwnedTensor someZero(DType::I32, {3}, {0, 5, -1}), boolOut(DType::I1, {3});
  ASSERT_KERNEL_OK(run("nn.cast", {someZero}, {boolOut}));
  EXPECT_EQ(boolOut.values(), (std::vector<double>{0, 1, 1}));
  OwnedTensor boolToFloat(DType::F32, {3});
  ASSERT_KERNEL_OK(run("nn.cast", {boolOut}, {boolToFloat}));
  EXPECT_EQ(boolToFloat.values(), (std::vector<double>{0, 1, 1}));

  // i64 -> f32 rounds once: 2^53 + 1 is not representable in f64 either.
  OwnedTensor big(DType::I64, {1}), bigFloat(DType::F32, {1});
  const int64_t value = (int64_t(1) << 40) + 1;
  std::memcpy(big.t().data, &value, sizeof(value));
  ASSERT_KERNEL_OK(run("nn.cast", {big}, {bigFloat}));
  EXPECT_EQ(bigFloat.values()[0], static_cast<double>(static_cast<float>(value)));

  OwnedTensor wide(DType::F64, {3}, {448.0, 465.0, 1e-3}), f8(DType::F8E4M3FN, {3});
  ASSERT_KERNEL_OK(run("nn.cast", {wide}, {f8}));
  EXPECT_EQ(f8.bytes()[0], 0x7E);
  EXPECT_EQ(f8.bytes()[1], 0x7F); // past the largest finite value: NaN
  EXPECT_EQ(f8.bytes()[2], 0x01); // 1e-3 is past half the smallest subnormal, 2^-9

  OwnedTensor i64(DType::I64, {2}, {-5, 7}), i32(DType::I32, {2});
  ASSERT_KERNEL_OK(run("nn.cast", {i64}, {i32}));
  EXPECT_EQ(i32.values(), (std::vector<double>{-5, 7}));
  OwnedTensor sameType(DType::I64, {2});
  ASSERT_KERNEL_OK(run("nn.cast", {i64}, {sameType}));
  EXPECT_EQ(sameType.values(), (std::vector<double>{-5, 7}));
  EXPECT_KERNEL_ERROR(run("nn.cast", {i64}, {bools}), "shape [2] differs");
}

/// SplitMix64 as published (Vigna's splitmix64.c), for an independent check
/// of nn.dropout's mask.
uint64_t referenceSplitMix(uint64_t x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

TEST(DropoutKernelTest, MaskFollowsTheDocumentedHash) {
  const int64_t count = 100000;
  const double p = 0.3;
  std::vector<double> xs = randomValues(count, -2, 2, 21);
  OwnedTensor in(DType::F32, {count}, xs), out(DType::F32, {count});
  KernelAttrs attrs = KernelAttrs().set("p", p).set("seed", int64_t(42));
  ASSERT_KERNEL_OK(run("nn.dropout", {in}, {out}, attrs));
  std::vector<double> ys = out.values();
  int64_t kept = 0;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t hash = referenceSplitMix(referenceSplitMix(42) + uint64_t(i));
    const double uniform = static_cast<double>(hash >> 40) / 16777216.0;
    const double expected =
        uniform >= p ? static_cast<double>(static_cast<float>(xs[i]) * float(1 / (1 - p)))
                     : 0.0;
    ASSERT_EQ(ys[i], expected) << i;
    kept += ys[i] != 0;
  }
  EXPECT_NEAR(static_cast<double>(kept) / count, 0.7, 0.01);

  OwnedTensor other(DType::F32, {count});
  ASSERT_KERNEL_OK(run("nn.dropout", {in}, {other}, KernelAttrs(attrs).set("seed", int64_t(43))));
  EXPECT_NE(other.values(), ys);
  OwnedTensor threaded(DType::F32, {count});
  ASSERT_KERNEL_OK(run("nn.dropout", {in}, {threaded}, attrs, 4));
  EXPECT_EQ(threaded.bytes(), out.bytes());
}

TEST(DropoutKernelTest, EdgeProbabilities) {
  std::vector<double> xs = randomValues(1000, -2, 2, 22);
  OwnedTensor in(DType::BF16, {1000}, xs), out(DType::BF16, {1000});
  ASSERT_KERNEL_OK(run("nn.dropout", {in}, {out},
                       KernelAttrs().set("p", 0.0).set("seed", int64_t(1))));
  EXPECT_EQ(out.values(), in.values());
  ASSERT_KERNEL_OK(run("nn.dropout", {in}, {out},
                       KernelAttrs().set("p", 1.0).set("seed", int64_t(1))));
  EXPECT_EQ(out.values(), std::vector<double>(1000, 0.0));
  EXPECT_KERNEL_ERROR(run("nn.dropout", {in}, {out},
                          KernelAttrs().set("p", 1.5).set("seed", int64_t(1))),
                      "attribute 'p'");
  EXPECT_KERNEL_ERROR(run("nn.dropout", {in}, {out}, KernelAttrs().set("p", 0.5)),
                      "missing attribute 'seed'");
}

TEST(IotaKernelTest, CountsAlongDim) {
  OwnedTensor positions(DType::I64, {5});
  ASSERT_KERNEL_OK(run("nn.iota", {}, {positions}, KernelAttrs().set("dim", int64_t(0))));
  EXPECT_EQ(positions.values(), (std::vector<double>{0, 1, 2, 3, 4}));

  OwnedTensor grid(DType::F32, {2, 3});
  ASSERT_KERNEL_OK(run("nn.iota", {}, {grid},
                       KernelAttrs().set("dim", int64_t(-1)).set("start", 1.0).set("step", 0.5)));
  EXPECT_EQ(grid.values(), (std::vector<double>{1, 1.5, 2, 1, 1.5, 2}));
  ASSERT_KERNEL_OK(run("nn.iota", {}, {grid}, KernelAttrs().set("dim", int64_t(0))));
  EXPECT_EQ(grid.values(), (std::vector<double>{0, 0, 0, 1, 1, 1}));
  EXPECT_KERNEL_ERROR(run("nn.iota", {}, {grid}, KernelAttrs().set("dim", int64_t(2))),
                      "out of range for rank 2");
}

} // namespace
