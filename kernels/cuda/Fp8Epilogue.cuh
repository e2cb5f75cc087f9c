#ifndef LOOM_KERNELS_CUDA_FP8EPILOGUE_CUH
#define LOOM_KERNELS_CUDA_FP8EPILOGUE_CUH

// The device side of whole-tensor amaxes finished in one launch: a block's
// maximum, the scale nn.fp8_scale takes of an amax, and the FP8 scale
// epilogue (runtime/abi/KernelList.h) that a kernel writing a tensor runs
// to give that tensor's scale without a second pass over memory.

#include <cuda_runtime.h>

#include <cstdint>

namespace loom::cuda {

/// The block's maximum of each thread's `m`, in thread 0. Every thread of
/// the block calls it; a second call needs a __syncthreads() before it.
__device__ inline unsigned blockMaximum(unsigned m) {
  __shared__ unsigned warpMax[32];
  for (int offset = 16; offset > 0; offset /= 2)
    m = max(m, __shfl_down_sync(0xffffffffu, m, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0)
    warpMax[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < int(blockDim.x / 32) ? warpMax[lane] : 0;
    for (int offset = 16; offset > 0; offset /= 2)
      m = max(m, __shfl_down_sync(0xffffffffu, m, offset));
  }
  return m;
}

/// fp8ScaleKernel's scale of one amax (bits of |x| taken by atomicMax).
__device__ inline float scaleOfAmax(unsigned bits, float headroom, float limit) {
  const float a = __uint_as_float(bits);
  return !isfinite(a) ? __uint_as_float(0x7fc00000u)
         : a == 0.0f  ? 1.0f
                      : __fdiv_rn(__fmul_rn(a, headroom), limit);
}

/// Bits of |v|: ordered as the magnitudes (a NaN above every number).
__device__ inline unsigned absBits(float v) { return __float_as_uint(fabsf(v)); }

/// The FP8 scale epilogue of a kernel with a 1-D grid: the scales of up to
/// two of its outputs. count = 0: none. counters: the stream's
/// (LaunchContext::counters), [0] the blocks done, [1 + j] output j's
/// maximum so far; the last block writes the scales and leaves them zero.
struct Fp8ScaleEpilogue {
  static constexpr int kMax = 2;
  int count = 0;
  int output[kMax] = {0, 0}; // which of the kernel's outputs
  float *scale[kMax] = {nullptr, nullptr};
  unsigned *counters = nullptr;
  float headroom = 1.0f, limit = 448.0f;
};

/// Every thread of every block calls it once, with its maxima (m[j] the
/// bits of the largest |y| of epilogue output j it wrote).
__device__ inline void finishFp8Scales(const unsigned (&m)[Fp8ScaleEpilogue::kMax],
                                       const Fp8ScaleEpilogue &e) {
  for (int j = 0; j < e.count; ++j) {
    if (j > 0)
      __syncthreads();
    const unsigned b = blockMaximum(m[j]);
    if (threadIdx.x == 0 && b != 0)
      atomicMax(&e.counters[1 + j], b);
  }
  if (threadIdx.x != 0)
    return;
  __threadfence();
  if (atomicInc(&e.counters[0], gridDim.x - 1) != gridDim.x - 1)
    return;
  for (int j = 0; j < e.count; ++j) {
    unsigned bits = atomicExch(&e.counters[1 + j], 0u);
    if (bits > 0x7f800000u)
      bits = 0x7fc00000u;
    *e.scale[j] = scaleOfAmax(bits, e.headroom, e.limit);
  }
}

} // namespace loom::cuda

#endif
