#ifndef LOOM_TEST_UNIT_RUNTIME_BACKENDFACTORIES_H
#define LOOM_TEST_UNIT_RUNTIME_BACKENDFACTORIES_H

// The backends the conformance suites run on, one factory each: how to
// create it, why it is unavailable (a machine without a GPU), and how far its
// kernels may stray from the CPU kernels'. Shared by BackendConformanceTests
// and the NumPy-referenced kernel suite (test/unit/conformance).

#include "runtime/backends/Backend.h"

#include <memory>
#include <string>

namespace loom::test {

struct CpuBackendFactory {
  static constexpr const char *kName = "cpu";
  static std::unique_ptr<Backend> create() { return createCpuBackend(2); }
  static std::string unavailableReason() { return ""; }
  /// The CPU backend runs the CPU kernels themselves: compared with them it
  /// could not differ, so nothing compares it with them (its kernels are
  /// checked against NumPy references instead).
  static double tolerance(DType) { return 0; }
};

#ifdef LOOM_HAVE_CUDA_BACKEND
struct CudaBackendFactory {
  static constexpr const char *kName = "cuda";
  static std::unique_ptr<Backend> create() {
    auto backend = createCudaBackend(0);
    if (!backend) {
      unavailableReason() = llvm::toString(backend.takeError());
      return nullptr;
    }
    return std::move(*backend);
  }
  static std::string &unavailableReason() {
    static std::string reason;
    return reason;
  }
  /// Different summation orders (and cuBLASLt's blocking) against the CPU
  /// kernels: f32 within 2e-4, narrow floats within a few of their ulps,
  /// relative to 1 + |expected|.
  static double tolerance(DType t) {
    switch (t) {
    case DType::F32: return 2e-4;
    case DType::F64: return 1e-9;
    case DType::F16: return 4e-3;
    case DType::BF16: return 3e-2;
    case DType::F8E4M3FN: case DType::F8E5M2: return 0.13;
    default: return 0;
    }
  }
};
#endif

} // namespace loom::test

#endif
