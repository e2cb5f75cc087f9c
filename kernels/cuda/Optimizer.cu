// CUDA AdamW (as kernels/cpu/Optimizer.cpp): nn.adamw and the multi-tensor
// nn.adamw_multi, each element updated in double and rounded to f32 on store
// (nn.adamw_multi also writes the compute copies of attr copies from the new
// values in registers, rounded as nn.cast rounds them).
//
// Where the GPU cannot do what the CPU does: lr and step are read on the
// device, so a step below 1 (an error on the CPU) leaves parameter and
// moments unchanged (copied to the outputs; a compute copy is then the
// unchanged parameter, cast).

#include "kernels/cuda/DeviceSupport.cuh"
#include "kernels/cpu/OperandChecks.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

namespace loom::cuda {
namespace {

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

struct AdamWParams {
  double beta1, beta2, oneMinusBeta1, oneMinusBeta2, epsilon, decay;
};

/// One element of Optimizer.cpp's update, in double, rounded to f32 on store.
__device__ __forceinline__ void adamwElement(const AdamWParams &h, double lr, double c1,
                                             double c2, float p, float g, float m, float v,
                                             float &pOut, float &mOut, float &vOut) {
  using namespace dev;
  const double grad = g;
  const double m1 = add(mul(h.beta1, static_cast<double>(m)), mul(h.oneMinusBeta1, grad));
  const double v1 =
      add(mul(h.beta2, static_cast<double>(v)), mul(mul(h.oneMinusBeta2, grad), grad));
  const double update = (m1 / c1) / add(msqrt(v1 / c2), h.epsilon);
  const double p0 = p;
  pOut = static_cast<float>(sub(p0, mul(lr, add(mul(h.decay, p0), update))));
  mOut = static_cast<float>(m1);
  vOut = static_cast<float>(v1);
}

/// lr and step are read on the device. Every element reads its own p, g, m, v
/// before writing its own results, so outputs may alias inputs.
template <int V>
__global__ void __launch_bounds__(kBlockSize)
adamwKernel(int64_t n, AdamWParams h, const float *lrPtr, const float *stepPtr,
            const float *p, const float *g, const float *m, const float *v, float *pOut,
            float *mOut, float *vOut) {
  // The bias corrections, once per block (pow is costly next to one element).
  __shared__ double corrections[2];
  const double lr = *lrPtr, step = *stepPtr;
  const bool valid = step >= 1; // otherwise leave everything as it is
  if (threadIdx.x < 2)
    corrections[threadIdx.x] =
        valid ? 1.0 - pow(threadIdx.x == 0 ? h.beta1 : h.beta2, step) : 1.0;
  __syncthreads();
  const double c1 = corrections[0], c2 = corrections[1];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = n / V;
  using F = dev::Vec<float, V>;
  for (int64_t i = first; i < vectors; i += stride) {
    const F vp = reinterpret_cast<const F *>(p)[i], vg = reinterpret_cast<const F *>(g)[i];
    const F vm = reinterpret_cast<const F *>(m)[i], vv = reinterpret_cast<const F *>(v)[i];
    F op = vp, om = vm, ov = vv;
    if (valid) {
#pragma unroll
      for (int k = 0; k < V; ++k)
        adamwElement(h, lr, c1, c2, vp.v[k], vg.v[k], vm.v[k], vv.v[k], op.v[k], om.v[k],
                     ov.v[k]);
    }
    reinterpret_cast<F *>(pOut)[i] = op;
    reinterpret_cast<F *>(mOut)[i] = om;
    reinterpret_cast<F *>(vOut)[i] = ov;
  }
  for (int64_t i = vectors * V + first; i < n; i += stride) {
    float op = p[i], om = m[i], ov = v[i];
    if (valid)
      adamwElement(h, lr, c1, c2, p[i], g[i], m[i], v[i], op, om, ov);
    pOut[i] = op;
    mOut[i] = om;
    vOut[i] = ov;
  }
}

llvm::Error launchAdamW(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 6, 6, 3, 3));
  const Tensor &param = call.inputs[0];
  LOOM_RETURN_IF_ERROR(cpu::detail::checkAdamWGroup(call.inputs.take_front(4), call.outputs));
  for (size_t i = 4; i < 6; ++i)
    if (call.inputs[i].dtype != DType::F32 || call.inputs[i].numElements() != 1)
      return kernelError("learning rate and step must be f32 scalars");
  LOOM_ASSIGN_OR_RETURN(double beta1, call.attrs.getF64("beta1"));
  LOOM_ASSIGN_OR_RETURN(double beta2, call.attrs.getF64("beta2"));
  LOOM_ASSIGN_OR_RETURN(double epsilon, call.attrs.getF64("epsilon"));
  LOOM_ASSIGN_OR_RETURN(double decay, call.attrs.getF64("weight_decay"));
  const int64_t n = param.numElements();
  if (n == 0)
    return llvm::Error::success();
  const AdamWParams h{beta1, beta2, 1 - beta1, 1 - beta2, epsilon, decay};
  auto f = [](const Tensor &t) { return static_cast<float *>(t.data); };
  const auto &in = call.inputs;
  const auto &out = call.outputs;
  bool aligned = true;
  for (const Tensor &t : in.take_front(4))
    aligned = aligned && isAligned(t.data, 16);
  for (const Tensor &t : out)
    aligned = aligned && isAligned(t.data, 16);
  if (aligned)
    adamwKernel<4><<<gridFor(n / 4 + 1, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
        n, h, f(in[4]), f(in[5]), f(in[0]), f(in[1]), f(in[2]), f(in[3]), f(out[0]), f(out[1]),
        f(out[2]));
  else
    adamwKernel<1><<<gridFor(n, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
        n, h, f(in[4]), f(in[5]), f(in[0]), f(in[1]), f(in[2]), f(in[3]), f(out[0]), f(out[1]),
        f(out[2]));
  return llvm::Error::success();
}

/// Up to kMultiTensors parameters per launch, passed by value (the kernel
/// parameter space holds them, no device-side table to allocate).
constexpr int kMultiTensors = 36;
constexpr int64_t kMultiChunk = 16384; // elements per block

/// A parameter's compute copy (attr copies): none, or its element type.
enum CopyType : int8_t { kNoCopy, kCopyF32, kCopyBF16, kCopyF16 };

struct AdamWMultiArgs {
  int count;
  int64_t n[kMultiTensors];
  int64_t firstBlock[kMultiTensors + 1];
  double decay[kMultiTensors];
  const float *g[kMultiTensors];
  float *p[kMultiTensors], *m[kMultiTensors], *v[kMultiTensors];
  void *copy[kMultiTensors];
  int8_t copyType[kMultiTensors];
};

/// nn.cast's rounding of one f32 value to a 16-bit copy: CastFn<F32, To> of
/// Elementwise.cu (bf16: floatToBf16, the single RNE rounding of
/// FloatTypes.cpp; f16: widened exactly to f64, then narrowed once).
template <CopyType C> __device__ __forceinline__ uint16_t castCopy(float x) {
  if constexpr (C == kCopyBF16)
    return dev::floatToBf16(x);
  else
    return dev::Elem<DType::F16>::storeDouble(dev::Elem<DType::F32>::loadDouble(x));
}

/// Elements [i, i + V) of a 16-bit compute copy (C: bf16 or f16).
template <int V, CopyType C>
__device__ __forceinline__ void writeCopy16(void *copy, int64_t i, const float (&values)[V],
                                            bool vec) {
  dev::Vec<uint16_t, V> out;
#pragma unroll
  for (int k = 0; k < V; ++k)
    out.v[k] = castCopy<C>(values[k]);
  uint16_t *c = static_cast<uint16_t *>(copy) + i;
  if (vec) {
    *reinterpret_cast<dev::Vec<uint16_t, V> *>(c) = out;
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k)
      c[k] = out.v[k];
  }
}

/// Elements [i, i + V) of a compute copy from the new parameter values
/// (still in registers): one vector store where `vec` (the copy's chunk is
/// aligned), else V scalar ones. `type` is the same for a whole block.
template <int V>
__device__ __forceinline__ void writeCopy(int8_t type, void *copy, int64_t i,
                                          const float (&values)[V], bool vec) {
  if (type == kCopyBF16) {
    writeCopy16<V, kCopyBF16>(copy, i, values, vec);
  } else if (type == kCopyF16) {
    writeCopy16<V, kCopyF16>(copy, i, values, vec);
  } else if (type == kCopyF32) { // nn.cast to the same type copies the bits
    float *c = static_cast<float *>(copy) + i;
    if (vec) {
      dev::Vec<float, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k)
        out.v[k] = values[k];
      *reinterpret_cast<dev::Vec<float, V> *>(c) = out;
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k)
        c[k] = values[k];
    }
  }
}

/// Each block updates one chunk of one parameter, in place (the fused kernel
/// writes p, m, v back where it read them, as --loom-fuse-adamw arranges),
/// and writes the chunk of its compute copy, if it has one, from the new
/// values in registers (no second pass).
__global__ void __launch_bounds__(kBlockSize)
adamwMultiKernel(const __grid_constant__ AdamWMultiArgs a, AdamWParams hyper, const float *lrPtr,
                 const float *stepPtr, const float *scalePtr) {
  __shared__ double corrections[2];
  const double lr = *lrPtr, step = *stepPtr;
  const bool valid = step >= 1;
  int t = 0;
  while (t + 1 < a.count && a.firstBlock[t + 1] <= blockIdx.x)
    ++t;
  const int64_t n = a.n[t];
  const int64_t begin = (blockIdx.x - a.firstBlock[t]) * kMultiChunk;
  const int64_t end = begin + kMultiChunk < n ? begin + kMultiChunk : n;
  float *p = a.p[t], *m = a.m[t], *v = a.v[t];
  const int8_t copyType = a.copyType[t];
  void *copy = a.copy[t];
  if (!valid) {
    // The parameter stays as it is; its copy is still what nn.cast writes.
    if (copyType != kNoCopy)
      for (int64_t j = begin + threadIdx.x; j < end; j += kBlockSize) {
        const float values[1] = {p[j]};
        writeCopy<1>(copyType, copy, j, values, false);
      }
    return;
  }
  if (threadIdx.x < 2)
    corrections[threadIdx.x] = 1.0 - pow(threadIdx.x == 0 ? hyper.beta1 : hyper.beta2, step);
  __syncthreads();
  const double c1 = corrections[0], c2 = corrections[1];
  const float scale = scalePtr ? *scalePtr : 1.0f;
  const float *g = a.g[t];
  AdamWParams h = hyper;
  h.decay = a.decay[t];
  using F = dev::Vec<float, 4>;
  const bool aligned = ((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(g) |
                         reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v)) &
                        15) == 0;
  // Chunks start at multiples of kMultiChunk, so an aligned tensor's chunks
  // are aligned too.
  const int64_t vecEnd = aligned ? begin + (end - begin) / 4 * 4 : begin;
  const uintptr_t copyAlign = copyType == kCopyF32 ? 15 : 7; // 4 elements
  const bool copyVec = (reinterpret_cast<uintptr_t>(copy) & copyAlign) == 0;
  for (int64_t i = begin + 4 * threadIdx.x; i < vecEnd; i += 4 * kBlockSize) {
    const F vp = *reinterpret_cast<const F *>(p + i), vg = *reinterpret_cast<const F *>(g + i);
    const F vm = *reinterpret_cast<const F *>(m + i), vv = *reinterpret_cast<const F *>(v + i);
    F op, om, ov;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float grad = scalePtr ? vg.v[k] * scale : vg.v[k];
      adamwElement(h, lr, c1, c2, vp.v[k], grad, vm.v[k], vv.v[k], op.v[k], om.v[k], ov.v[k]);
    }
    *reinterpret_cast<F *>(p + i) = op;
    *reinterpret_cast<F *>(m + i) = om;
    *reinterpret_cast<F *>(v + i) = ov;
    if (copyType != kNoCopy)
      writeCopy<4>(copyType, copy, i, op.v, copyVec);
  }
  for (int64_t j = vecEnd + threadIdx.x; j < end; j += kBlockSize) {
    const float grad = scalePtr ? g[j] * scale : g[j];
    float op, om, ov;
    adamwElement(h, lr, c1, c2, p[j], grad, m[j], v[j], op, om, ov);
    p[j] = op;
    m[j] = om;
    v[j] = ov;
    if (copyType != kNoCopy) {
      const float values[1] = {op};
      writeCopy<1>(copyType, copy, j, values, false);
    }
  }
}

llvm::Error launchAdamWMulti(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(cpu::detail::AdamWMultiLayout layout,
                        cpu::detail::checkAdamWMultiLayout(call.inputs, call.outputs, call.attrs));
  const size_t first = layout.first, groups = layout.groups;
  for (size_t i = 0; i < first; ++i)
    if (call.inputs[i].dtype != DType::F32 || call.inputs[i].numElements() != 1)
      return kernelError("learning rate, step and scale must be f32 scalars");
  LOOM_ASSIGN_OR_RETURN(double beta1, call.attrs.getF64("beta1"));
  LOOM_ASSIGN_OR_RETURN(double beta2, call.attrs.getF64("beta2"));
  LOOM_ASSIGN_OR_RETURN(double epsilon, call.attrs.getF64("epsilon"));
  LOOM_ASSIGN_OR_RETURN(std::vector<double> decays, call.attrs.getF64List("weight_decays"));
  if (decays.size() != groups)
    return kernelError("weight_decays has " + std::to_string(decays.size()) +
                       " entries for " + std::to_string(groups) + " parameters");
  const AdamWParams h{beta1, beta2, 1 - beta1, 1 - beta2, epsilon, 0};
  for (size_t i = 0; i < groups; ++i) {
    llvm::ArrayRef<Tensor> in = call.inputs.slice(first + 4 * i, 4);
    llvm::ArrayRef<Tensor> out = call.outputs.slice(3 * i, 3);
    LOOM_RETURN_IF_ERROR(cpu::detail::checkAdamWGroup(in, out));
    // In place only: each result is its own input's buffer.
    if (out[0].data != in[0].data || out[1].data != in[2].data || out[2].data != in[3].data)
      return kernelError("parameter " + std::to_string(i) +
                         ": the CUDA kernel updates in place; results must be the "
                         "parameter's and moments' own buffers");
  }
  // Parameter i's compute copy (attr copies), if any.
  std::vector<const Tensor *> copyOf(groups, nullptr);
  for (size_t j = 0; j < layout.copies.size(); ++j)
    copyOf[static_cast<size_t>(layout.copies[j])] = &call.outputs[3 * groups + j];
  auto copyTypeOf = [](const Tensor *copy) -> int8_t {
    if (!copy)
      return kNoCopy;
    return copy->dtype == DType::F32 ? kCopyF32 : copy->dtype == DType::BF16 ? kCopyBF16 : kCopyF16;
  };
  auto f = [](const Tensor &t) { return static_cast<float *>(t.data); };
  const float *scale = layout.hasScale ? f(call.inputs[2]) : nullptr;
  for (size_t start = 0; start < groups;) {
    AdamWMultiArgs a{};
    int64_t blocks = 0;
    size_t i = start;
    for (; i < groups && a.count < kMultiTensors; ++i) {
      llvm::ArrayRef<Tensor> in = call.inputs.slice(first + 4 * i, 4);
      const int64_t n = in[0].numElements();
      if (n == 0)
        continue;
      a.n[a.count] = n;
      a.decay[a.count] = decays[i];
      a.firstBlock[a.count] = blocks;
      a.p[a.count] = f(in[0]);
      a.g[a.count] = f(in[1]);
      a.m[a.count] = f(in[2]);
      a.v[a.count] = f(in[3]);
      a.copy[a.count] = copyOf[i] ? copyOf[i]->data : nullptr;
      a.copyType[a.count] = copyTypeOf(copyOf[i]);
      blocks += (n + kMultiChunk - 1) / kMultiChunk;
      ++a.count;
    }
    a.firstBlock[a.count] = blocks;
    start = i;
    if (blocks == 0)
      continue;
    adamwMultiKernel<<<unsigned(blocks), kBlockSize, 0, call.ctx.stream>>>(
        a, h, f(call.inputs[0]), f(call.inputs[1]), scale);
  }
  return llvm::Error::success();
}

} // namespace

void registerOptimizerKernels(KernelRegistry &registry) {
  registry.add(KernelId::Adamw, launchAdamW);
  registry.add(KernelId::AdamwMulti, launchAdamWMulti);
}

} // namespace loom::cuda
