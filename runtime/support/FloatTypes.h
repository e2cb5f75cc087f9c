#ifndef LOOM_RUNTIME_SUPPORT_FLOATTYPES_H
#define LOOM_RUNTIME_SUPPORT_FLOATTYPES_H

// Bit-exact conversions between f32/f64 and the narrow float formats Loom
// stores (bf16, IEEE f16, f8E4M3FN, f8E5M2), and element access by DType.
//
// Rounding: every narrowing rounds once, to nearest, ties to even, directly
// from the source value (a double is not first rounded to f32). Subnormals,
// signed zeros, infinities and NaNs are handled exactly:
//  - bf16, f16, f8E5M2 have infinities: values past the largest finite value
//    by half an ulp or more become +-inf.
//  - f8E4M3FN has no infinity (its only NaNs are 0x7F and 0xFF, largest finite
//    448 = 0x7E). Like MLIR's APFloat and ml_dtypes' non-saturating cast, a
//    value that rounds past 448 (anything >= 464, and +-inf) becomes NaN
//    (0x7F, or 0xFF when negative); 464 itself ties to 448.
//  - NaN stays NaN: the sign and as many high payload bits as fit are kept,
//    and the quiet bit is set when the kept payload would be zero. So every
//    narrow NaN pattern survives narrow -> f32 -> narrow unchanged.
// Widening (narrow -> f32/f64) is always exact.

#include "runtime/abi/DType.h"

#include <cstdint>
#include <cstring>

namespace loom {

uint16_t floatToBf16(float value);
uint16_t doubleToBf16(double value);
inline float bf16ToFloat(uint16_t bits) {
  uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

uint16_t floatToF16(float value);
uint16_t doubleToF16(double value);
float f16ToFloat(uint16_t bits);

/// The largest finite value of an FP8 format (f8E4M3FN: 448, f8E5M2:
/// 57344), to which FP8 quantization saturates.
constexpr float fp8MaxFinite(DType type) {
  return type == DType::F8E4M3FN ? 448.0f : 57344.0f;
}

uint8_t floatToF8E4M3FN(float value);
uint8_t doubleToF8E4M3FN(double value);
float f8E4M3FNToFloat(uint8_t bits);

uint8_t floatToF8E5M2(float value);
uint8_t doubleToF8E5M2(double value);
float f8E5M2ToFloat(uint8_t bits);

/// Element `index` of the array at `data` (of element type `type`), widened
/// exactly to double (i64 beyond 2^53 rounds; i1 reads as 0 or 1, any nonzero
/// byte being 1).
double loadAsDouble(const void *data, DType type, int64_t index);
/// Stores `value` as element `index`. Float types round to nearest even (see
/// above); integer types truncate toward zero, saturating at the type's range,
/// with NaN stored as 0; i1 stores 1 for any nonzero value (NaN included).
void storeFromDouble(void *data, DType type, int64_t index, double value);

/// Float-precision variants, for kernels that compute in f32. loadAsFloat
/// rounds f64 and large integers to f32; storeFromFloat behaves as
/// storeFromDouble.
float loadAsFloat(const void *data, DType type, int64_t index);
void storeFromFloat(void *data, DType type, int64_t index, float value);

/// Bulk forms: elements [start, start + count) of `data`, to or from `values`.
void loadFloats(const void *data, DType type, int64_t start, int64_t count,
                float *values);
void storeFloats(void *data, DType type, int64_t start, int64_t count,
                 const float *values);
void loadDoubles(const void *data, DType type, int64_t start, int64_t count,
                 double *values);
void storeDoubles(void *data, DType type, int64_t start, int64_t count,
                  const double *values);

} // namespace loom

#endif
