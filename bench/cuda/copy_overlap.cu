// How a snapshot copy shares the GPU with a training step: 11 GB (the 0.95B
// model's f32 parameters and Adam moments) copied device to device in 450
// regions, alone and beside a compute-bound stream of kernels (a stand-in
// for a step's GEMMs), by cudaMemcpyAsync, by cudaMemcpyBatchAsync, and by
// copy kernels of several sizes on a low-priority stream. Prints each
// copy's time and the compute stream's time beside it. What decided how
// Loom's asynchronous checkpoints copy (runtime/backends/cuda/CudaBackend.cpp,
// docs/performance.md "Checkpoint stalls").
//
//   nvcc -O2 -arch=sm_90 bench/cuda/copy_overlap.cu -o copy_overlap && ./copy_overlap
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

namespace {

__global__ void copyGridStride(const uint4 *in, uint4 *out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = __ldcs(in + i);
}

// Each block one piece: short blocks that other streams' work can pass.
__global__ void copyPieces(const uint4 *in, uint4 *out, size_t n, size_t piece) {
  size_t begin = blockIdx.x * piece, end = begin + piece < n ? begin + piece : n;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    out[i] = __ldcs(in + i);
}

__global__ void fmaChain(float *out, int iterations) {
  float a = threadIdx.x, b = 1.0001f, c = 0.5f, d = 0.25f;
  for (int i = 0; i < iterations; ++i) {
    a = a * b + c;
    c = c * b + d;
    d = d * b + a;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = a + c + d;
}

} // namespace

int main() {
  const size_t regions = 450, perRegion = size_t(24) << 20, total = regions * perRegion;
  char *src = nullptr, *dst = nullptr;
  float *sink = nullptr;
  if (cudaMalloc(&src, total) != cudaSuccess || cudaMalloc(&dst, total) != cudaSuccess ||
      cudaMalloc(&sink, 132 * 8 * 256 * sizeof(float)) != cudaSuccess) {
    std::fprintf(stderr, "copy_overlap: cannot allocate 2 x %.1f GB\n", total / 1e9);
    return 1;
  }
  cudaMemset(src, 1, total);
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  cudaStream_t compute, copy, lowCopy;
  cudaStreamCreateWithPriority(&compute, cudaStreamNonBlocking, greatest);
  cudaStreamCreateWithPriority(&copy, cudaStreamNonBlocking, least);
  cudaStreamCreateWithPriority(&lowCopy, cudaStreamNonBlocking, least);
  cudaEvent_t c0, c1, k0, k1;
  for (cudaEvent_t *e : {&c0, &c1, &k0, &k1})
    cudaEventCreate(e);
  std::vector<void *> dsts(regions);
  std::vector<const void *> srcs(regions);
  std::vector<size_t> sizes(regions, perRegion);
  for (size_t r = 0; r < regions; ++r) {
    dsts[r] = dst + r * perRegion;
    srcs[r] = src + r * perRegion;
  }
  const char *names[] = {"cudaMemcpyAsync x450", "cudaMemcpyBatchAsync", "kernel, 1056 blocks",
                         "kernel, 1 MB per block", "kernel, 132 blocks", "kernel, 32 blocks"};
  std::printf("%.1f GB in %zu regions\n%-24s %12s %12s %14s\n", total / 1e9, regions, "copy",
              "alone", "beside", "compute beside");
  float computeAlone = 0;
  for (int m = -1; m < 6; ++m) {
    float alone = 0, beside = 0, computeBeside = 0;
    for (int withCompute = 0; withCompute < 2; ++withCompute)
      for (int rep = 0; rep < 2; ++rep) { // the first of each is a warm-up
        cudaDeviceSynchronize();
        cudaEventRecord(k0, copy);
        switch (m) {
        case 0:
          for (size_t r = 0; r < regions; ++r)
            cudaMemcpyAsync(dsts[r], srcs[r], perRegion, cudaMemcpyDeviceToDevice, copy);
          break;
        case 1: {
          cudaMemcpyAttributes attributes = {};
          attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
          attributes.flags = cudaMemcpyFlagPreferOverlapWithCompute;
          size_t index = 0;
          cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), regions, &attributes,
                               &index, 1, copy);
          break;
        }
        case 2:
          copyGridStride<<<1056, 256, 0, copy>>>((const uint4 *)src, (uint4 *)dst, total / 16);
          break;
        case 3:
          copyPieces<<<unsigned(total >> 20), 256, 0, copy>>>((const uint4 *)src, (uint4 *)dst,
                                                              total / 16, (size_t(1) << 20) / 16);
          break;
        case 4:
          copyGridStride<<<132, 256, 0, copy>>>((const uint4 *)src, (uint4 *)dst, total / 16);
          break;
        case 5:
          copyGridStride<<<32, 256, 0, copy>>>((const uint4 *)src, (uint4 *)dst, total / 16);
          break;
        }
        cudaEventRecord(k1, copy);
        if (withCompute || m < 0) {
          cudaEventRecord(c0, compute);
          for (int i = 0; i < 400; ++i)
            fmaChain<<<132 * 8, 256, 0, compute>>>(sink, 9000);
          cudaEventRecord(c1, compute);
        }
        cudaDeviceSynchronize();
        float copyMs = 0, computeMs = 0;
        cudaEventElapsedTime(&copyMs, k0, k1);
        if (withCompute || m < 0)
          cudaEventElapsedTime(&computeMs, c0, c1);
        if (m < 0)
          computeAlone = computeMs;
        else if (withCompute)
          beside = copyMs, computeBeside = computeMs;
        else
          alone = copyMs;
      }
    if (m < 0) {
      std::printf("%-24s %12s %12s %11.1f ms\n", "(none)", "", "", computeAlone);
      continue;
    }
    std::printf("%-24s %9.1f ms %9.1f ms %11.1f ms (%+.1f%%)\n", names[m], alone, beside,
                computeBeside, 100 * (computeBeside / computeAlone - 1));
  }
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    std::fprintf(stderr, "copy_overlap: %s\n", cudaGetErrorString(status));
    return 1;
  }
  return 0;
}
