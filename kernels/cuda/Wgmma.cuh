#ifndef LOOM_KERNELS_CUDA_WGMMA_CUH
#define LOOM_KERNELS_CUDA_WGMMA_CUH

// Hopper's warpgroup MMA (wgmma, sm_90a): 128 threads multiply operands
// that sit in shared memory, described by 64-bit matrix descriptors, into
// f32 accumulators held in registers, asynchronously. Loom stages operands
// in the 128-byte swizzle: rows of 128 bytes (64 16-bit elements), 8 rows
// to a 1024-byte atom aligned to 1024 bytes, each row's 16-byte chunks
// permuted by XOR with the row's index within the atom, so that the 8 rows
// of a chunk column fall in different banks. A K-major operand's rows run
// along M (or N) and hold 64 consecutive k; an MN-major one's run along K
// and hold 64 consecutive m (or n) (PTX ISA, "Matrix Descriptor Format"
// and "Shared Memory Matrix Layout").

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace loom::cuda {
namespace {

/// The descriptor of a 128-byte-swizzled operand starting at shared
/// address `addr`. K-major: `sbo` bytes between groups of 8 rows along M
/// or N (`lbo` unused: the 16 k of an instruction lie in one row).
/// MN-major: `lbo` bytes between atoms along M or N, `sbo` between groups
/// of 8 k.
__device__ __forceinline__ uint64_t wgmmaDescSw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Makes this thread's generic-proxy writes to shared memory (st.shared,
/// cp.async) visible to the async proxy that wgmma reads through.
__device__ __forceinline__ void fenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/// Keeps the compiler from moving reads or writes of `r` across an
/// in-flight wgmma (which reads and writes it behind the compiler's back).
__device__ __forceinline__ void wgmmaFenceOperand(float &r) {
  asm volatile("" : "+f"(r)::"memory");
}

#define LOOM_WG_F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define LOOM_WG_F16(i) LOOM_WG_F4(i), LOOM_WG_F4(i + 4), LOOM_WG_F4(i + 8), LOOM_WG_F4(i + 12)
#define LOOM_WG_F64 LOOM_WG_F16(0), LOOM_WG_F16(16), LOOM_WG_F16(32), LOOM_WG_F16(48)

/// d[64 x 128] += A[64 x 16] B[16 x 128] for the calling warpgroup, A
/// K-major (TransA = 0) or M-major (1), B K-major (TransB = 0) or N-major
/// (1). Thread t's
/// accumulators: for each 8 columns j, d[4j + 2h + c] is row 16 (t / 32) +
/// (t % 32) / 4 + 8h, column 8j + 2 (t % 4) + c (the mma.sync m16n8 layout
/// repeated along N).
template <typename T, int TransA, int TransB>
__device__ __forceinline__ void wgmma64x128x16(float (&d)[64], uint64_t descA, uint64_t descB) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, "
                 "%67, %68;\n}\n"
                 : LOOM_WG_F64
                 : "l"(descA), "l"(descB), "r"(1), "n"(TransA), "n"(TransB));
  } else {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, "
                 "%67, %68;\n}\n"
                 : LOOM_WG_F64
                 : "l"(descA), "l"(descB), "r"(1), "n"(TransA), "n"(TransB));
  }
}

#undef LOOM_WG_F64
#undef LOOM_WG_F16
#undef LOOM_WG_F4

} // namespace
} // namespace loom::cuda

#endif // LOOM_KERNELS_CUDA_WGMMA_CUH
