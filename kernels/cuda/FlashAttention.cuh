#ifndef LOOM_KERNELS_CUDA_FLASHATTENTION_CUH
#define LOOM_KERNELS_CUDA_FLASHATTENTION_CUH

// Tensor-core attention for bf16/f16 (kernels/cuda/FlashAttention.cu): the
// fast path of nn.attention and nn.attention_grad that Attention.cu takes when
// flashAttentionApplies() says so; the SIMT kernels in Attention.cu are the
// documented fallback for everything else (f32, other head dims, unaligned
// tensors). Same semantics as the CPU reference: grouped heads, causal
// mask aligned to the end, scale; deterministic (no atomics, fixed order).

#include "runtime/abi/DType.h"

#include <cuda_runtime.h>

#include "llvm/Support/Error.h"

#include <cstdint>
#include <initializer_list>

namespace loom::cuda {

/// Where row (b, h, s) of an attention operand starts, in elements; the
/// row's D elements are contiguous. Head-major [B, H, S, D] and
/// sequence-major [B, S, H, D] (nn.attention's `seq_major`) differ only in
/// these strides. cpu::detail::AttentionLayout, callable on the device (the
/// SIMT kernels of Attention.cu use it too).
struct AttnRowLayout {
  int64_t batch = 0, head = 0, row = 0;
  __host__ __device__ int64_t at(int64_t b, int64_t h, int64_t s) const {
    return b * batch + h * head + s * row;
  }
};

struct FlashAttnArgs {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
  void *out = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  /// Each operand's layout (the forward reads q, k, v, out; the backward q,
  /// k, v, dout, dq, dk, dv). The workspaces lse and delta are always
  /// contiguous [B, Hq, S].
  AttnRowLayout qLayout, kLayout, vLayout, outLayout, doutLayout, dqLayout, dkLayout, dvLayout;
  float *lse = nullptr;   // [batch * qHeads * seq] workspace (backward), log2 domain
  float *delta = nullptr; // [batch * qHeads * seq] workspace (backward)
  /// Forward: where to write each query row's natural logsumexp (null: nowhere).
  float *lseOut = nullptr;
  /// Backward: lse and delta already hold the statistics (made from a saved
  /// forward's), so the statistics pass is skipped.
  bool statsReady = false;
  int batch = 0, qHeads = 0, kvHeads = 0, seq = 0, kvSeq = 0, headDim = 0;
  bool causal = false;
  /// A sliding window (with causal): each query sees at most its last
  /// `window` keys; 0 for none.
  int window = 0;
  float scale = 1.f;
};

/// bf16 or f16, headDim == valueDim in {64, 128}, every pointer 16-byte
/// aligned, nonempty problem. Rows are then 16-byte aligned in either layout:
/// every stride is a multiple of D elements (128 or 256 bytes).
bool flashAttentionApplies(DType dtype, int64_t headDim, int64_t valueDim, int64_t seq,
                           int64_t kvSeq, std::initializer_list<const void *> pointers);

/// out = softmax(scale q k^T) v (and args.lseOut where given).
llvm::Error flashAttentionForward(DType dtype, const FlashAttnArgs &args, cudaStream_t stream);

/// dq, dk, dv from q, k, v, dout (args.lse / args.delta: the workspace,
/// filled by a statistics pass first unless args.statsReady).
llvm::Error flashAttentionBackward(DType dtype, const FlashAttnArgs &args, cudaStream_t stream);

} // namespace loom::cuda

#endif
