#include "runtime/backends/Backend.h"

#include <cstdlib>
#include <cstring>
#include <thread>

namespace loom {
namespace {

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(int numThreads) { context_.numThreads = numThreads; }

  std::string name() const override { return "cpu"; }

  llvm::Expected<void *> allocate(size_t bytes) override {
    constexpr size_t kAlignment = 256;
    size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    void *ptr = std::aligned_alloc(kAlignment, rounded);
    if (!ptr)
      return llvm::createStringError(std::errc::not_enough_memory,
                                     "cpu backend: cannot allocate %zu bytes",
                                     bytes);
    std::memset(ptr, 0, rounded);
    return ptr;
  }
  void deallocate(void *ptr) override { std::free(ptr); }

  llvm::Error copyToDevice(void *dst, const void *src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return llvm::Error::success();
  }
  llvm::Error copyToHost(void *dst, const void *src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return llvm::Error::success();
  }

  llvm::Error createStreams(unsigned numStreams, unsigned numEvents) override {
    numStreams_ = numStreams;
    recorded_.assign(numEvents, false);
    return llvm::Error::success();
  }
  llvm::Error copy(void *dst, const void *src, size_t bytes,
                   unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    std::memmove(dst, src, bytes);
    return llvm::Error::success();
  }
  using Backend::launch;
  llvm::Error launch(KernelId kernel, llvm::ArrayRef<DeviceTensor> inputs,
                     llvm::ArrayRef<DeviceTensor> outputs,
                     const KernelAttrs &attrs, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    return cpu::runKernel(kernel, inputs, outputs, attrs, context_);
  }
  llvm::Error collective(const CollectiveDesc &desc, const DeviceTensor *in,
                         const DeviceTensor *out, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    return Backend::collective(desc, in, out, stream);
  }
  llvm::Error exchange(const CollectiveDesc &desc, llvm::ArrayRef<DeviceTensor> sends,
                       llvm::ArrayRef<DeviceTensor> recvs, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    return exchangeUnstaged(desc, sends, recvs, nullptr); // host memory already
  }
  // Work runs in issue order, so an event is complete once recorded; a wait
  // on an event never recorded is a program error (it would hang a GPU).
  llvm::Error recordEvent(unsigned event, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    if (event >= recorded_.size())
      return llvm::createStringError(std::errc::invalid_argument,
                                     "cpu backend: event %u out of range", event);
    recorded_[event] = true;
    return llvm::Error::success();
  }
  llvm::Error waitEvent(unsigned event, unsigned stream) override {
    if (auto err = checkStream(stream))
      return err;
    if (event >= recorded_.size() || !recorded_[event])
      return llvm::createStringError(
          std::errc::invalid_argument,
          "cpu backend: stream %u waits for event %u, which was never recorded",
          stream, event);
    return llvm::Error::success();
  }
  llvm::Error synchronize() override { return llvm::Error::success(); }

private:
  llvm::Error checkStream(unsigned stream) const {
    if (stream >= numStreams_)
      return llvm::createStringError(std::errc::invalid_argument,
                                     "cpu backend: stream %u out of range (%u streams)",
                                     stream, numStreams_);
    return llvm::Error::success();
  }

  cpu::KernelContext context_;
  unsigned numStreams_ = 0;
  std::vector<bool> recorded_;
};

} // namespace

static llvm::Error noCapture(const Backend &backend) {
  return llvm::createStringError(std::errc::not_supported,
                                 "the %s backend cannot capture a step", backend.name().c_str());
}
llvm::Error Backend::beginCapture() { return noCapture(*this); }
llvm::Error Backend::endCapture() { return noCapture(*this); }
llvm::Error Backend::replay() { return noCapture(*this); }
llvm::Expected<unsigned> Backend::timestamp(unsigned) {
  return llvm::createStringError(std::errc::not_supported,
                                 "the %s backend has no device timestamps", name().c_str());
}
llvm::Expected<double> Backend::timestampSeconds(unsigned) {
  return llvm::createStringError(std::errc::not_supported,
                                 "the %s backend has no device timestamps", name().c_str());
}

std::unique_ptr<Backend> createCpuBackend(int numThreads) {
  if (numThreads <= 0)
    numThreads = std::max(1u, std::thread::hardware_concurrency());
  return std::make_unique<CpuBackend>(numThreads);
}

llvm::Expected<std::unique_ptr<Backend>> createBackend(std::string_view name,
                                                       int numThreads) {
  if (name == "cpu")
    return createCpuBackend(numThreads);
  if (name == "cuda")
    return createCudaBackend(0);
  if (name == "auto") {
    // A GPU when there is one (and this build can drive it), else the CPU.
    auto cuda = createCudaBackend(0);
    if (cuda)
      return cuda;
    llvm::consumeError(cuda.takeError());
    return createCpuBackend(numThreads);
  }
  return llvm::createStringError(std::errc::invalid_argument,
                                 "unknown backend '%s' (expected auto, cpu or cuda)",
                                 std::string(name).c_str());
}

#ifndef LOOM_HAVE_CUDA_BACKEND
llvm::Expected<std::unique_ptr<Backend>> createCudaBackend(int) {
  return llvm::createStringError(
      std::errc::not_supported,
      "this build of Loom has no CUDA backend (no CUDA toolkit at build time); use --backend=cpu");
}
#endif

} // namespace loom
