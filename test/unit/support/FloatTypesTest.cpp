#include "runtime/support/FloatTypes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace loom;

namespace {

float floatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}
uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

/// A narrow format as the tests see it: its converters, and facts about its
/// encoding stated independently of the implementation.
struct Format {
  const char *name;
  int totalBits;
  uint32_t (*fromFloat)(float);
  uint32_t (*fromDouble)(double);
  float (*toFloat)(uint32_t);
  uint32_t maxFiniteCode;   // largest positive finite encoding
  uint32_t overflowCode;    // +inf, or the positive NaN for f8E4M3FN
  bool overflowCodeIsEven;  // for ties between max finite and overflow
};

const Format kFormats[] = {
    {"bf16", 16, [](float v) -> uint32_t { return floatToBf16(v); },
     [](double v) -> uint32_t { return doubleToBf16(v); },
     [](uint32_t b) { return bf16ToFloat(static_cast<uint16_t>(b)); }, 0x7F7F,
     0x7F80, true},
    {"f16", 16, [](float v) -> uint32_t { return floatToF16(v); },
     [](double v) -> uint32_t { return doubleToF16(v); },
     [](uint32_t b) { return f16ToFloat(static_cast<uint16_t>(b)); }, 0x7BFF,
     0x7C00, true},
    {"f8E4M3FN", 8, [](float v) -> uint32_t { return floatToF8E4M3FN(v); },
     [](double v) -> uint32_t { return doubleToF8E4M3FN(v); },
     [](uint32_t b) { return f8E4M3FNToFloat(static_cast<uint8_t>(b)); }, 0x7E,
     0x7F, false},
    {"f8E5M2", 8, [](float v) -> uint32_t { return floatToF8E5M2(v); },
     [](double v) -> uint32_t { return doubleToF8E5M2(v); },
     [](uint32_t b) { return f8E5M2ToFloat(static_cast<uint8_t>(b)); }, 0x7B,
     0x7C, true},
};

uint32_t signBit(const Format &f) { return 1u << (f.totalBits - 1); }

/// Round-to-nearest-even by search over the format's positive finite values
/// (the codes 0..maxFiniteCode ascend with their values), with a virtual
/// next value one ulp past the maximum standing for overflow.
class NearestReference {
public:
  explicit NearestReference(const Format &format) : f_(format) {
    for (uint32_t code = 0; code <= f_.maxFiniteCode; ++code)
      values_.push_back(f_.toFloat(code));
    const double topUlp = values_[f_.maxFiniteCode] - values_[f_.maxFiniteCode - 1];
    overflowValue_ = values_.back() + topUlp;
  }
  /// Expected encoding of x (not NaN).
  uint32_t round(double x) const {
    const uint32_t sign = std::signbit(x) ? signBit(f_) : 0;
    const double a = std::fabs(x);
    if (a >= overflowValue_)
      return sign | f_.overflowCode;
    auto upper = std::upper_bound(values_.begin(), values_.end(), a);
    const uint32_t hi = static_cast<uint32_t>(upper - values_.begin()); // may be past max
    const uint32_t lo = hi - 1;
    const double hiValue = hi > f_.maxFiniteCode ? overflowValue_ : values_[hi];
    const double below = a - values_[lo], above = hiValue - a;
    bool pickHigh;
    if (below != above)
      pickHigh = above < below;
    else if (hi > f_.maxFiniteCode)
      pickHigh = f_.overflowCodeIsEven;
    else
      pickHigh = (hi & 1) == 0;
    if (!pickHigh)
      return sign | lo;
    return sign | (hi > f_.maxFiniteCode ? f_.overflowCode : hi);
  }
  const std::vector<double> &values() const { return values_; }

private:
  const Format &f_;
  std::vector<double> values_;
  double overflowValue_;
};

TEST(FloatTypesTest, KnownBf16Values) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(floatToBf16(-2.0f), 0xC000);
  EXPECT_EQ(bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(floatToBf16(-0.0f), 0x8000);
  // Ties go to the even neighbour; anything past the tie rounds up.
  EXPECT_EQ(floatToBf16(floatFromBits(0x3F808000)), 0x3F80);
  EXPECT_EQ(floatToBf16(floatFromBits(0x3F818000)), 0x3F82);
  EXPECT_EQ(floatToBf16(floatFromBits(0x3F808001)), 0x3F81);
  EXPECT_EQ(floatToBf16(floatFromBits(0x3F807FFF)), 0x3F80);
  // The largest f32 is past bf16's largest finite value by more than half an ulp.
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(floatToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // f32 subnormals are bf16 subnormals.
  EXPECT_EQ(floatToBf16(floatFromBits(0x00010000)), 0x0001);
  EXPECT_EQ(floatToBf16(floatFromBits(0x00008000)), 0x0000); // tie to even zero
  EXPECT_EQ(floatToBf16(floatFromBits(0x00018000)), 0x0002);
  const uint16_t nan = floatToBf16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16ToFloat(nan)));
  // A NaN whose payload lives only in the low bits stays NaN.
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(floatFromBits(0x7F800001)))));
  EXPECT_EQ(doubleToBf16(1.0 + 1.0 / 256), 0x3F80);
  // Just above the tie: a double keeps the bits an f32 would have lost.
  EXPECT_EQ(doubleToBf16(1.0 + 1.0 / 256 + 1e-12), 0x3F81);
}

TEST(FloatTypesTest, KnownF16Values) {
  EXPECT_EQ(floatToF16(1.0f), 0x3C00);
  EXPECT_EQ(floatToF16(-1.5f), 0xBE00);
  EXPECT_EQ(floatToF16(65504.0f), 0x7BFF);
  EXPECT_EQ(floatToF16(65519.0f), 0x7BFF);
  EXPECT_EQ(floatToF16(65520.0f), 0x7C00); // tie with 65536 (even) = inf
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -25) * 1.001f), 0x0001);
  EXPECT_EQ(floatToF16(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -14)), 0x0400); // smallest normal
  EXPECT_EQ(floatToF16(-0.0f), 0x8000);
  EXPECT_EQ(f16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16ToFloat(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16ToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16ToFloat(0x7E00)));
}

TEST(FloatTypesTest, KnownF8E4M3FNValues) {
  EXPECT_EQ(floatToF8E4M3FN(1.0f), 0x38);
  EXPECT_EQ(floatToF8E4M3FN(448.0f), 0x7E);
  EXPECT_EQ(floatToF8E4M3FN(-448.0f), 0xFE);
  EXPECT_EQ(floatToF8E4M3FN(464.0f), 0x7E); // tie: 448's mantissa is even
  // Past 464 the value would round to 480, which is the NaN pattern: NaN.
  EXPECT_EQ(floatToF8E4M3FN(464.5f), 0x7F);
  EXPECT_EQ(floatToF8E4M3FN(1e6f), 0x7F);
  EXPECT_EQ(floatToF8E4M3FN(-1e6f), 0xFF);
  EXPECT_EQ(floatToF8E4M3FN(std::numeric_limits<float>::infinity()), 0x7F);
  EXPECT_EQ(floatToF8E4M3FN(-std::numeric_limits<float>::infinity()), 0xFF);
  EXPECT_EQ(floatToF8E4M3FN(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(floatToF8E4M3FN(std::ldexp(1.0f, -9)), 0x01);  // smallest subnormal
  EXPECT_EQ(floatToF8E4M3FN(std::ldexp(7.0f, -9)), 0x07);  // largest subnormal
  EXPECT_EQ(floatToF8E4M3FN(std::ldexp(1.0f, -6)), 0x08);  // smallest normal
  EXPECT_EQ(floatToF8E4M3FN(std::ldexp(1.0f, -10)), 0x00); // tie to zero
  EXPECT_EQ(floatToF8E4M3FN(std::ldexp(3.0f, -10)), 0x02); // tie to even
  EXPECT_EQ(f8E4M3FNToFloat(0x7E), 448.0f);
  EXPECT_EQ(f8E4M3FNToFloat(0x78), 256.0f); // exponent all ones is finite here
  EXPECT_TRUE(std::isnan(f8E4M3FNToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(f8E4M3FNToFloat(0xFF)));
  EXPECT_EQ(f8E4M3FNToFloat(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(f8E4M3FNToFloat(0x80)));
}

TEST(FloatTypesTest, KnownF8E5M2Values) {
  EXPECT_EQ(floatToF8E5M2(1.0f), 0x3C);
  EXPECT_EQ(floatToF8E5M2(57344.0f), 0x7B);
  EXPECT_EQ(floatToF8E5M2(61439.0f), 0x7B);
  EXPECT_EQ(floatToF8E5M2(61440.0f), 0x7C); // tie with 65536 (even) = inf
  EXPECT_EQ(floatToF8E5M2(-std::numeric_limits<float>::infinity()), 0xFC);
  EXPECT_EQ(floatToF8E5M2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_EQ(floatToF8E5M2(std::ldexp(1.0f, -17)), 0x00);
  EXPECT_EQ(f8E5M2ToFloat(0x7B), 57344.0f);
  EXPECT_EQ(f8E5M2ToFloat(0x7C), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f8E5M2ToFloat(0x7D)));
  EXPECT_TRUE(std::isnan(f8E5M2ToFloat(floatToF8E5M2(std::nanf("")))));
}

TEST(FloatTypesTest, EveryPatternRoundTripsThroughFloat) {
  for (const Format &f : kFormats) {
    const uint32_t count = 1u << f.totalBits;
    for (uint32_t code = 0; code < count; ++code) {
      const float wide = f.toFloat(code);
      ASSERT_EQ(f.fromFloat(wide), code) << f.name << " pattern " << code;
      if (std::isnan(wide)) // f32 -> f64 itself quiets signaling NaNs
        ASSERT_TRUE(std::isnan(f.toFloat(f.fromDouble(wide)))) << f.name << " " << code;
      else
        ASSERT_EQ(f.fromDouble(wide), code) << f.name << " pattern " << code;
    }
  }
}

TEST(FloatTypesTest, WideningIsExactAndMonotonic) {
  // Positive finite codes are ordered like their values, and negation only
  // flips the sign bit.
  for (const Format &f : kFormats) {
    for (uint32_t code = 1; code <= f.maxFiniteCode; ++code) {
      ASSERT_LT(f.toFloat(code - 1), f.toFloat(code)) << f.name << " " << code;
      ASSERT_EQ(f.toFloat(code | signBit(f)), -f.toFloat(code)) << f.name;
    }
  }
}

TEST(FloatTypesTest, RoundingMatchesNearestEvenSearch) {
  std::mt19937_64 rng(1234);
  for (const Format &f : kFormats) {
    NearestReference reference(f);
    const std::vector<double> &values = reference.values();
    std::vector<double> probes;
    // Every midpoint between neighbours (the ties), and a float ulp around it.
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      const float mid = static_cast<float>((values[i] + values[i + 1]) / 2);
      probes.push_back(mid);
      probes.push_back(std::nextafter(mid, 0.0f));
      probes.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
      probes.push_back(values[i]);
    }
    // Random values spread over every binade the format touches and beyond.
    std::uniform_real_distribution<double> mantissa(1.0, 2.0);
    std::uniform_int_distribution<int> exponent(-150, 130);
    for (int i = 0; i < 200000; ++i)
      probes.push_back(
          static_cast<float>(std::ldexp(mantissa(rng), exponent(rng))));
    for (double probe : probes) {
      for (double signedProbe : {probe, -probe}) {
        const float asFloat = static_cast<float>(signedProbe);
        ASSERT_EQ(f.fromFloat(asFloat), reference.round(asFloat))
            << f.name << " of " << asFloat;
        ASSERT_EQ(f.fromDouble(signedProbe), reference.round(signedProbe))
            << f.name << " of double " << signedProbe;
      }
    }
    // Doubles between two floats: single rounding from the double.
    for (int i = 0; i < 100000; ++i) {
      const double probe = std::ldexp(mantissa(rng), exponent(rng));
      ASSERT_EQ(f.fromDouble(probe), reference.round(probe))
          << f.name << " of double " << probe;
    }
  }
}

TEST(FloatTypesTest, NaNStaysNaN) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(),
                        -std::numeric_limits<float>::quiet_NaN(),
                        floatFromBits(0x7F800001), floatFromBits(0xFFC00000)};
  for (const Format &f : kFormats) {
    for (float nan : nans) {
      EXPECT_TRUE(std::isnan(f.toFloat(f.fromFloat(nan)))) << f.name;
      EXPECT_TRUE(std::isnan(f.toFloat(f.fromDouble(nan)))) << f.name;
      EXPECT_EQ(std::signbit(f.toFloat(f.fromFloat(nan))), std::signbit(nan)) << f.name;
    }
  }
}

TEST(FloatTypesTest, StoreAndLoadByDType) {
  std::vector<uint8_t> buffer(8 * 4);
  void *data = buffer.data();
  storeFromDouble(data, DType::I64, 0, 2.7);
  storeFromDouble(data, DType::I64, 1, -2.7);
  storeFromDouble(data, DType::I64, 2, 1e30);
  storeFromDouble(data, DType::I64, 3, std::nan(""));
  EXPECT_EQ(loadAsDouble(data, DType::I64, 0), 2.0);
  EXPECT_EQ(loadAsDouble(data, DType::I64, 1), -2.0);
  EXPECT_EQ(static_cast<const int64_t *>(data)[2], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(loadAsDouble(data, DType::I64, 3), 0.0);

  storeFromDouble(data, DType::I32, 0, -3e9);
  storeFromDouble(data, DType::I32, 1, 3e9);
  storeFromDouble(data, DType::I32, 2, -7.9);
  EXPECT_EQ(static_cast<const int32_t *>(data)[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(static_cast<const int32_t *>(data)[1], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(loadAsDouble(data, DType::I32, 2), -7.0);

  storeFromDouble(data, DType::I1, 0, 0.0);
  storeFromDouble(data, DType::I1, 1, -0.0);
  storeFromDouble(data, DType::I1, 2, 0.25);
  storeFromDouble(data, DType::I1, 3, std::nan(""));
  EXPECT_EQ(buffer[0], 0);
  EXPECT_EQ(buffer[1], 0);
  EXPECT_EQ(buffer[2], 1);
  EXPECT_EQ(buffer[3], 1);
  buffer[4] = 7; // a nonzero byte reads as true
  EXPECT_EQ(loadAsDouble(data, DType::I1, 4), 1.0);

  storeFromDouble(data, DType::BF16, 0, 1.0);
  storeFromDouble(data, DType::F16, 1, -2.0);
  storeFromDouble(data, DType::F8E4M3FN, 4, 448.0);
  storeFromDouble(data, DType::F8E5M2, 5, 57344.0);
  EXPECT_EQ(static_cast<const uint16_t *>(data)[0], 0x3F80);
  EXPECT_EQ(static_cast<const uint16_t *>(data)[1], 0xC000);
  EXPECT_EQ(buffer[4], 0x7E);
  EXPECT_EQ(buffer[5], 0x7B);
  EXPECT_EQ(loadAsDouble(data, DType::F8E4M3FN, 4), 448.0);
  EXPECT_EQ(loadAsFloat(data, DType::BF16, 0), 1.0f);

  storeFromDouble(data, DType::F64, 1, 0.1);
  EXPECT_EQ(loadAsDouble(data, DType::F64, 1), 0.1);
  storeFromFloat(data, DType::F32, 0, 0.1f);
  EXPECT_EQ(loadAsFloat(data, DType::F32, 0), 0.1f);

  const float values[3] = {1.5f, -0.25f, 3.0f};
  storeFloats(data, DType::BF16, 1, 3, values);
  float back[3];
  loadFloats(data, DType::BF16, 1, 3, back);
  EXPECT_EQ(back[0], 1.5f);
  EXPECT_EQ(back[1], -0.25f);
  EXPECT_EQ(back[2], 3.0f);
  EXPECT_EQ(bitsOf(loadAsFloat(data, DType::BF16, 1)), bitsOf(1.5f));
}

} // namespace
