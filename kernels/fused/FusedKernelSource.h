#ifndef LOOM_KERNELS_FUSED_FUSEDKERNELSOURCE_H
#define LOOM_KERNELS_FUSED_FUSEDKERNELSOURCE_H

// The fusion code generator: one CUDA C++ kernel from an nn.fused call's
// body (runtime/abi/FusedBody.h), built from its members' scalar formulas
// (KernelScalarFormulas.def) alone. Host C++ that needs no GPU: the CUDA
// backend compiles the source with NVRTC (kernels/cuda/FusedKernels.cpp),
// loom-inspect prints it, and the unit tests read it.
//
// The kernel walks the members' common shape (fusedLoopShape) with a
// grid-stride loop. Inputs and outputs of that whole shape are read and
// written with 16-byte vector accesses (8 bf16/f16 or 4 f32 elements per
// access; V elements per thread, V = 16 bytes of the narrowest of them; i1
// masks, one byte each, are read and written one element at a time),
// then a scalar tail covers what is left (sizes that are not a multiple of
// V) or everything (`vectorized` = 0: a pointer that is not 16-byte
// aligned). Broadcast inputs are read per element at their offset, computed
// from the static shapes (dims merged where every operand steps through them
// alike); an output smaller than the common shape is written by the one
// position that maps to each of its elements. Every value is computed in
// f32; a member's result is rounded to its own element type (bf16, f16) as
// the unfused kernel stores it, so the generated kernel computes what the
// members compute one by one; values that are not yielded stay in registers.

#include "runtime/abi/FusedBody.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loom::fused {

/// Threads per block the generated kernel is written for.
constexpr int kFusedBlockSize = 256;

/// A generated kernel and how to launch it.
struct FusedKernelSource {
  std::string source;
  /// The __global__ function's name (extern "C"). Its parameters: one pointer
  /// per input, one per output, then `int vectorized`.
  std::string entry;
  /// Positions of the loop (elements of the members' common shape).
  int64_t elements = 0;
  /// Elements per thread in the vector loop; 1 when nothing is vectorized.
  int vectorWidth = 1;
  /// Per input / output: whether the vector loop accesses it 16 bytes at a
  /// time, so its pointer must be 16-byte aligned for `vectorized` = 1.
  std::vector<bool> vectorInputs, vectorOutputs;
};

/// The kernel for `body`; an error when fusedCodegenProblem(body) names one.
llvm::Expected<FusedKernelSource> generateFusedKernel(const FusedBody &body);

} // namespace loom::fused

#endif
