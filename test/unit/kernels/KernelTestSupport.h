#ifndef LOOM_TEST_UNIT_KERNELS_KERNELTESTSUPPORT_H
#define LOOM_TEST_UNIT_KERNELS_KERNELTESTSUPPORT_H

// Helpers for the CPU kernel tests: tensors that own their memory, random
// inputs, index arithmetic for the reference loops, tolerant comparisons.
// Reference results are computed in the tests themselves, in double, with
// loops written for clarity rather than shared with the kernels.

#include "kernels/cpu/CpuKernels.h"
#include "runtime/support/FloatTypes.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace loom::cpu::test {

/// A tensor and the bytes it points into (movable, not copyable).
class OwnedTensor {
public:
  OwnedTensor(DType dtype, std::vector<int64_t> shape);
  OwnedTensor(DType dtype, std::vector<int64_t> shape, const std::vector<double> &values);
  OwnedTensor(OwnedTensor &&) = default;
  OwnedTensor &operator=(OwnedTensor &&) = default;
  OwnedTensor(const OwnedTensor &) = delete;

  const Tensor &t() const { return tensor_; }
  operator const Tensor &() const { return tensor_; }
  /// Every element widened to double.
  std::vector<double> values() const;
  const std::vector<uint8_t> &bytes() const { return bytes_; }
  int64_t numElements() const { return tensor_.numElements(); }

private:
  std::vector<uint8_t> bytes_;
  Tensor tensor_;
};

/// Uniform values in [lo, hi] with |v| >= minMagnitude (so no zeros).
std::vector<double> randomValues(size_t count, double lo, double hi, uint64_t seed,
                                 double minMagnitude = 0.05);
/// Random integers in [lo, hi].
std::vector<double> randomInts(size_t count, int64_t lo, int64_t hi, uint64_t seed);
/// `value` rounded to `dtype` and widened back.
double roundTo(DType dtype, double value);
std::vector<double> roundAll(DType dtype, std::vector<double> values);

int64_t numElementsOf(const std::vector<int64_t> &shape);
std::vector<int64_t> unravel(int64_t index, const std::vector<int64_t> &shape);
int64_t ravel(const std::vector<int64_t> &index, const std::vector<int64_t> &shape);
/// The element of an input of `inShape` that NumPy broadcasting reads for
/// output position `outIndex`.
int64_t broadcastSource(const std::vector<int64_t> &outIndex,
                        const std::vector<int64_t> &inShape);

/// Each |actual - expected| <= absTol + relTol * |expected|; NaNs must match.
void expectClose(const std::vector<double> &actual, const std::vector<double> &expected,
                 double relTol, double absTol = 0.0, const std::string &what = "");

llvm::Error run(std::string_view name, std::initializer_list<Tensor> inputs,
                std::initializer_list<Tensor> outputs, const KernelAttrs &attrs = {},
                int threads = 1);

/// The error's message, or "" on success.
std::string errorMessage(llvm::Error err);

} // namespace loom::cpu::test

#define EXPECT_KERNEL_OK(expr)                                                 \
  do {                                                                         \
    std::string loomMessage = ::loom::cpu::test::errorMessage(expr);           \
    EXPECT_EQ(loomMessage, "");                                                \
  } while (0)
#define ASSERT_KERNEL_OK(expr)                                                 \
  do {                                                                         \
    std::string loomMessage = ::loom::cpu::test::errorMessage(expr);           \
    ASSERT_EQ(loomMessage, "");                                                \
  } while (0)
/// The kernel must fail with a message containing `fragment`.
#define EXPECT_KERNEL_ERROR(expr, fragment)                                    \
  do {                                                                         \
    std::string loomMessage = ::loom::cpu::test::errorMessage(expr);           \
    EXPECT_NE(loomMessage, "") << "expected an error containing " << fragment; \
    EXPECT_NE(loomMessage.find(fragment), std::string::npos)                   \
        << "message: " << loomMessage;                                         \
  } while (0)

#endif
