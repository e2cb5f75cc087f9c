#include "KernelTestSupport.h"

#include <cmath>
#include <random>
#include <sstream>

namespace loom::cpu::test {

OwnedTensor::OwnedTensor(DType dtype, std::vector<int64_t> shape) {
  tensor_.dtype = dtype;
  tensor_.shape = std::move(shape);
  // One spare byte so even an empty tensor has a valid data pointer.
  bytes_.assign(tensor_.numElements() * dtypeSize(dtype) + 1, 0);
  tensor_.data = bytes_.data();
}

OwnedTensor::OwnedTensor(DType dtype, std::vector<int64_t> shape,
                         const std::vector<double> &values)
    : OwnedTensor(dtype, std::move(shape)) {
  EXPECT_EQ(static_cast<int64_t>(values.size()), tensor_.numElements())
      << "initializer size does not match the shape";
  for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < numElements(); ++i)
    storeFromDouble(tensor_.data, dtype, i, values[i]);
}

std::vector<double> OwnedTensor::values() const {
  std::vector<double> result(numElements());
  for (size_t i = 0; i < result.size(); ++i)
    result[i] = loadAsDouble(tensor_.data, tensor_.dtype, i);
  return result;
}

std::vector<double> randomValues(size_t count, double lo, double hi, uint64_t seed,
                                 double minMagnitude) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values;
  values.reserve(count);
  while (values.size() < count) {
    const double v = dist(rng);
    if (std::fabs(v) >= minMagnitude)
      values.push_back(v);
  }
  return values;
}

std::vector<double> randomInts(size_t count, int64_t lo, int64_t hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  std::vector<double> values(count);
  for (double &v : values)
    v = static_cast<double>(dist(rng));
  return values;
}

double roundTo(DType dtype, double value) {
  uint64_t storage = 0;
  storeFromDouble(&storage, dtype, 0, value);
  return loadAsDouble(&storage, dtype, 0);
}

std::vector<double> roundAll(DType dtype, std::vector<double> values) {
  for (double &v : values)
    v = roundTo(dtype, v);
  return values;
}

int64_t numElementsOf(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  return count;
}

std::vector<int64_t> unravel(int64_t index, const std::vector<int64_t> &shape) {
  std::vector<int64_t> result(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    result[d] = index % shape[d];
    index /= shape[d];
  }
  return result;
}

int64_t ravel(const std::vector<int64_t> &index, const std::vector<int64_t> &shape) {
  int64_t result = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    result = result * shape[d] + index[d];
  return result;
}

int64_t broadcastSource(const std::vector<int64_t> &outIndex,
                        const std::vector<int64_t> &inShape) {
  const size_t lead = outIndex.size() - inShape.size();
  std::vector<int64_t> inIndex(inShape.size());
  for (size_t d = 0; d < inShape.size(); ++d)
    inIndex[d] = inShape[d] == 1 ? 0 : outIndex[lead + d];
  return ravel(inIndex, inShape);
}

void expectClose(const std::vector<double> &actual, const std::vector<double> &expected,
                 double relTol, double absTol, const std::string &what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < actual.size() && failures < 5; ++i) {
    const double a = actual[i], e = expected[i];
    bool ok;
    if (std::isnan(e) || std::isnan(a))
      ok = std::isnan(e) && std::isnan(a);
    else if (std::isinf(e) || std::isinf(a))
      ok = a == e;
    else
      ok = std::fabs(a - e) <= absTol + relTol * std::fabs(e);
    if (!ok) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": got " << a << ", expected " << e
                    << " (difference " << a - e << ")";
    }
  }
}

llvm::Error run(std::string_view name, std::initializer_list<Tensor> inputs,
                std::initializer_list<Tensor> outputs, const KernelAttrs &attrs,
                int threads) {
  KernelContext ctx;
  ctx.numThreads = threads;
  return runKernel(name, llvm::ArrayRef<Tensor>(inputs), llvm::ArrayRef<Tensor>(outputs),
                   attrs, ctx);
}

std::string errorMessage(llvm::Error err) {
  if (!err)
    return "";
  return llvm::toString(std::move(err));
}

} // namespace loom::cpu::test
