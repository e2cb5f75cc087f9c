#include "runtime/support/FloatTypes.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom {

namespace {

/// Bit layout of the wide source formats the narrowing converters read.
template <typename T> struct WideFormat;
template <> struct WideFormat<float> {
  using Bits = uint32_t;
  static constexpr int kManBits = 23;
  static constexpr int kExpBits = 8;
  static constexpr int kBias = 127;
};
template <> struct WideFormat<double> {
  using Bits = uint64_t;
  static constexpr int kManBits = 52;
  static constexpr int kExpBits = 11;
  static constexpr int kBias = 1023;
};

/// Rounds `value` to the narrow format with ExpBits/ManBits, IEEE-style bias,
/// to nearest even. HasInf=false selects the "FN" encoding (no infinity, the
/// all-ones pattern is the only NaN), where overflow becomes NaN.
template <int ExpBits, int ManBits, bool HasInf, typename Wide>
uint32_t narrowFrom(Wide value) {
  using Fmt = WideFormat<Wide>;
  using Bits = typename Fmt::Bits;
  constexpr uint32_t kExpAllOnes = (1u << ExpBits) - 1;
  constexpr uint32_t kManMask = (1u << ManBits) - 1;
  constexpr int kBias = (1 << (ExpBits - 1)) - 1;
  constexpr int kMinNormalExp = 1 - kBias;
  constexpr int kWideBits = 1 + Fmt::kExpBits + Fmt::kManBits;

  Bits bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t signOut = static_cast<uint32_t>(bits >> (kWideBits - 1))
                           << (ExpBits + ManBits);
  const uint32_t nanOrOverflowFN = signOut | (kExpAllOnes << ManBits) | kManMask;
  const Bits absBits = bits & ((Bits(1) << (kWideBits - 1)) - 1);
  const int wideExp = static_cast<int>(absBits >> Fmt::kManBits);
  const Bits wideMan = absBits & ((Bits(1) << Fmt::kManBits) - 1);

  if (wideExp == (1 << Fmt::kExpBits) - 1) {
    if (!HasInf)
      return nanOrOverflowFN;
    if (wideMan == 0)
      return signOut | (kExpAllOnes << ManBits);
    // NaN: keep the high payload bits; never let it collapse to infinity.
    uint32_t payload = static_cast<uint32_t>(wideMan >> (Fmt::kManBits - ManBits));
    if (payload == 0)
      payload = 1u << (ManBits - 1);
    return signOut | (kExpAllOnes << ManBits) | payload;
  }
  if (absBits == 0)
    return signOut;

  // |value| = mant * 2^(exp2 - kManBits).
  Bits mant;
  int exp2;
  if (wideExp == 0) {
    mant = wideMan;
    exp2 = 1 - Fmt::kBias;
  } else {
    mant = wideMan | (Bits(1) << Fmt::kManBits);
    exp2 = wideExp - Fmt::kBias;
  }
  const int leadingBit = static_cast<int>(sizeof(Bits) * 8 - 1) -
                         (sizeof(Bits) == 8 ? __builtin_clzll(mant)
                                            : __builtin_clz(static_cast<uint32_t>(mant)));
  const int valueExp = exp2 - Fmt::kManBits + leadingBit; // floor(log2 |value|)
  // Exponent of the narrow format's ulp at this magnitude.
  int ulpExp = std::max(valueExp, kMinNormalExp) - ManBits;
  const int shift = ulpExp - (exp2 - Fmt::kManBits); // > 0 for every format here
  if (shift > Fmt::kManBits + 1)
    return signOut; // below half the smallest subnormal: rounds to zero
  uint64_t rounded = static_cast<uint64_t>(mant >> shift);
  const Bits remainder = mant & ((Bits(1) << shift) - 1);
  const Bits half = Bits(1) << (shift - 1);
  if (remainder > half || (remainder == half && (rounded & 1)))
    ++rounded;
  if (rounded == 0)
    return signOut;
  if (rounded >> (ManBits + 1)) { // rounding carried into a new binade
    rounded >>= 1;
    ++ulpExp;
  }
  int biased;
  uint32_t manField;
  if (rounded < (1u << ManBits)) { // subnormal
    biased = 0;
    manField = static_cast<uint32_t>(rounded);
  } else {
    biased = ulpExp + ManBits + kBias;
    manField = static_cast<uint32_t>(rounded) & kManMask;
  }
  if (HasInf) {
    if (biased >= static_cast<int>(kExpAllOnes))
      return signOut | (kExpAllOnes << ManBits);
  } else if (biased > static_cast<int>(kExpAllOnes) ||
             (biased == static_cast<int>(kExpAllOnes) && manField == kManMask)) {
    return nanOrOverflowFN;
  }
  return signOut | (static_cast<uint32_t>(biased) << ManBits) | manField;
}

/// Exact widening of a narrow pattern to f32 (for formats whose subnormals
/// are f32 normals, i.e. every format here but bf16).
template <int ExpBits, int ManBits, bool HasInf> float narrowToFloat(uint32_t bits) {
  constexpr uint32_t kExpAllOnes = (1u << ExpBits) - 1;
  constexpr uint32_t kManMask = (1u << ManBits) - 1;
  constexpr int kBias = (1 << (ExpBits - 1)) - 1;
  constexpr int kMinNormalExp = 1 - kBias;
  const uint32_t sign = (bits >> (ExpBits + ManBits)) & 1;
  const uint32_t exp = (bits >> ManBits) & kExpAllOnes;
  const uint32_t man = bits & kManMask;
  uint32_t out = sign << 31;
  if (exp == kExpAllOnes && (HasInf || man == kManMask)) {
    out |= 0x7F800000u | (man << (23 - ManBits)); // inf when man == 0
  } else if (exp == 0) {
    if (man != 0) {
      const int leadingBit = 31 - __builtin_clz(man);
      const int valueExp = kMinNormalExp - ManBits + leadingBit;
      out |= static_cast<uint32_t>(valueExp + 127) << 23 |
             ((man << (23 - leadingBit)) & 0x7FFFFFu);
    }
  } else {
    out |= static_cast<uint32_t>(static_cast<int>(exp) - kBias + 127) << 23 |
           man << (23 - ManBits);
  }
  float value;
  std::memcpy(&value, &out, sizeof(value));
  return value;
}

template <typename Int> Int saturatingTruncate(double value) {
  if (std::isnan(value))
    return 0;
  // Powers of two, so the bounds are exact doubles.
  constexpr double kUpper = -static_cast<double>(std::numeric_limits<Int>::min());
  if (value >= kUpper)
    return std::numeric_limits<Int>::max();
  if (value <= static_cast<double>(std::numeric_limits<Int>::min()))
    return std::numeric_limits<Int>::min();
  return static_cast<Int>(value);
}

template <typename T> T readAs(const void *data, int64_t index) {
  T value;
  std::memcpy(&value, static_cast<const char *>(data) + index * sizeof(T),
              sizeof(T));
  return value;
}
template <typename T> void writeAs(void *data, int64_t index, T value) {
  std::memcpy(static_cast<char *>(data) + index * sizeof(T), &value, sizeof(T));
}

} // namespace

uint16_t floatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) { // NaN
    uint16_t narrowed = static_cast<uint16_t>(bits >> 16);
    return (narrowed & 0x7F) ? narrowed : static_cast<uint16_t>(narrowed | 0x40);
  }
  // bf16 shares f32's exponent, so RNE is an add on the raw bits; a carry
  // into the exponent is the correct next binade (or infinity).
  const uint32_t roundingBias = 0x7FFFu + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}
uint16_t doubleToBf16(double value) {
  return static_cast<uint16_t>(narrowFrom<8, 7, true>(value));
}

uint16_t floatToF16(float value) {
  return static_cast<uint16_t>(narrowFrom<5, 10, true>(value));
}
uint16_t doubleToF16(double value) {
  return static_cast<uint16_t>(narrowFrom<5, 10, true>(value));
}
float f16ToFloat(uint16_t bits) { return narrowToFloat<5, 10, true>(bits); }

uint8_t floatToF8E4M3FN(float value) {
  return static_cast<uint8_t>(narrowFrom<4, 3, false>(value));
}
uint8_t doubleToF8E4M3FN(double value) {
  return static_cast<uint8_t>(narrowFrom<4, 3, false>(value));
}
float f8E4M3FNToFloat(uint8_t bits) { return narrowToFloat<4, 3, false>(bits); }

uint8_t floatToF8E5M2(float value) {
  return static_cast<uint8_t>(narrowFrom<5, 2, true>(value));
}
uint8_t doubleToF8E5M2(double value) {
  return static_cast<uint8_t>(narrowFrom<5, 2, true>(value));
}
float f8E5M2ToFloat(uint8_t bits) { return narrowToFloat<5, 2, true>(bits); }

double loadAsDouble(const void *data, DType type, int64_t index) {
  switch (type) {
  case DType::F32:
    return readAs<float>(data, index);
  case DType::F64:
    return readAs<double>(data, index);
  case DType::F16:
    return f16ToFloat(readAs<uint16_t>(data, index));
  case DType::BF16:
    return bf16ToFloat(readAs<uint16_t>(data, index));
  case DType::F8E4M3FN:
    return f8E4M3FNToFloat(readAs<uint8_t>(data, index));
  case DType::F8E5M2:
    return f8E5M2ToFloat(readAs<uint8_t>(data, index));
  case DType::I64:
    return static_cast<double>(readAs<int64_t>(data, index));
  case DType::I32:
    return readAs<int32_t>(data, index);
  case DType::I1:
    return readAs<uint8_t>(data, index) != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

void storeFromDouble(void *data, DType type, int64_t index, double value) {
  switch (type) {
  case DType::F32:
    return writeAs<float>(data, index, static_cast<float>(value));
  case DType::F64:
    return writeAs<double>(data, index, value);
  case DType::F16:
    return writeAs<uint16_t>(data, index, doubleToF16(value));
  case DType::BF16:
    return writeAs<uint16_t>(data, index, doubleToBf16(value));
  case DType::F8E4M3FN:
    return writeAs<uint8_t>(data, index, doubleToF8E4M3FN(value));
  case DType::F8E5M2:
    return writeAs<uint8_t>(data, index, doubleToF8E5M2(value));
  case DType::I64:
    return writeAs<int64_t>(data, index, saturatingTruncate<int64_t>(value));
  case DType::I32:
    return writeAs<int32_t>(data, index, saturatingTruncate<int32_t>(value));
  case DType::I1:
    return writeAs<uint8_t>(data, index, value != 0.0 ? 1 : 0);
  }
}

float loadAsFloat(const void *data, DType type, int64_t index) {
  switch (type) {
  case DType::F32:
    return readAs<float>(data, index);
  case DType::BF16:
    return bf16ToFloat(readAs<uint16_t>(data, index));
  case DType::F16:
    return f16ToFloat(readAs<uint16_t>(data, index));
  case DType::I64:
    return static_cast<float>(readAs<int64_t>(data, index)); // one rounding
  default:
    return static_cast<float>(loadAsDouble(data, type, index));
  }
}

void storeFromFloat(void *data, DType type, int64_t index, float value) {
  switch (type) {
  case DType::F32:
    return writeAs<float>(data, index, value);
  case DType::BF16:
    return writeAs<uint16_t>(data, index, floatToBf16(value));
  case DType::F16:
    return writeAs<uint16_t>(data, index, floatToF16(value));
  case DType::F8E4M3FN:
    return writeAs<uint8_t>(data, index, floatToF8E4M3FN(value));
  case DType::F8E5M2:
    return writeAs<uint8_t>(data, index, floatToF8E5M2(value));
  default:
    return storeFromDouble(data, type, index, value);
  }
}

void loadFloats(const void *data, DType type, int64_t start, int64_t count,
                float *values) {
  if (type == DType::F32) {
    std::memcpy(values, static_cast<const float *>(data) + start,
                count * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < count; ++i)
    values[i] = loadAsFloat(data, type, start + i);
}

void storeFloats(void *data, DType type, int64_t start, int64_t count,
                 const float *values) {
  if (type == DType::F32) {
    std::memcpy(static_cast<float *>(data) + start, values,
                count * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < count; ++i)
    storeFromFloat(data, type, start + i, values[i]);
}

void loadDoubles(const void *data, DType type, int64_t start, int64_t count,
                 double *values) {
  for (int64_t i = 0; i < count; ++i)
    values[i] = loadAsDouble(data, type, start + i);
}

void storeDoubles(void *data, DType type, int64_t start, int64_t count,
                  const double *values) {
  for (int64_t i = 0; i < count; ++i)
    storeFromDouble(data, type, start + i, values[i]);
}

} // namespace loom
