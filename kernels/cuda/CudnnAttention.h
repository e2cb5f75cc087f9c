#ifndef LOOM_KERNELS_CUDA_CUDNNATTENTION_H
#define LOOM_KERNELS_CUDA_CUDNNATTENTION_H

// cuDNN's fused attention (flash-style SDPA) for nn.attention and
// nn.attention_grad in bf16/f16, reached through cuDNN 9's C backend API
// (operation graphs of matmul, pointwise, reduction and reshape operations
// that cuDNN's runtime-fusion engines recognize as attention). libcudnn is
// loaded at run time (dlopen): where it is missing, too old or cannot run a
// shape, Loom says so once on stderr and its own kernels
// (FlashAttention.cu, Attention.cu) run instead; nothing crashes.
//
// LOOM_ATTENTION=loom | cudnn | auto (the default) picks the path: `loom`
// never touches cuDNN; `cudnn` makes a bf16/f16 problem that cuDNN cannot run
// an error instead of a fallback (for benchmarks). f32 always runs Loom's
// kernels. LOOM_CUDNN_LIBRARY names the one library file to load (instead
// of libcudnn.so.9 on the loader's path and the CUDA install's).
//
// Operands may each be head-major [B, H, S, D] or sequence-major
// [B, S, H, D] (nn.attention's `seq_major`): cuDNN's tensors take any
// strides, so every operand keeps its logical [B, H, S, D] dims and gets its
// own strides (CudnnAttnLayout); nothing is transposed around the graph.
//
// Grouped-query attention is native: K/V keep their Hkv heads (cuDNN's
// matmuls broadcast the head dimension) and dK/dV are reduced over the query
// heads that share them inside the graph; repeated K/V never exist.
//
// The backward graph needs the forward's output O and its softmax statistics
// (Stats: the natural logsumexp of the scaled, masked scores per query row,
// f32 [B, H, S, 1], the convention of nn.attention_with_stats' lse).
// nn.attention_with_stats writes them as its second output and
// nn.attention_grad_with_stats hands them back, so its backward is the
// backward graph alone. nn.attention_grad receives only q, k, v and dO, so
// it reruns the forward graph (with statistics) into scratch memory first,
// then runs the backward graph: one extra forward per backward.

#include "runtime/abi/DType.h"

#include <cuda_runtime.h>

#include "llvm/Support/Error.h"

#include <cstdint>
#include <initializer_list>
#include <string>

namespace loom::cuda {

enum class AttentionPath { Auto, Loom, Cudnn };

/// The path LOOM_ATTENTION asks for (read once), or what setAttentionPath set.
AttentionPath attentionPath();
/// Overrides LOOM_ATTENTION for the process (benchmarks and tests).
void setAttentionPath(AttentionPath path);

/// Whether libcudnn could be loaded (tries once); `why` gets the reason when
/// it could not, or the loaded library and version when it could.
bool cudnnAvailable(std::string *why = nullptr);

/// Element strides of an operand's batch, head and sequence dims (its D
/// elements contiguous): head-major [B, H, S, D] {H S D, S D, D} or
/// sequence-major [B, S, H, D] {S H D, D, H D}.
struct CudnnAttnLayout {
  int64_t batch = 0, head = 0, row = 0;
};

struct CudnnAttnArgs {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
  void *out = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  /// Each operand's layout; set for every operand the call passes (the
  /// forward: q, k, v, out; the backward: all). The statistics (lse) are
  /// always contiguous [B, Hq, S].
  CudnnAttnLayout qLayout, kLayout, vLayout, outLayout, doutLayout, dqLayout, dkLayout, dvLayout;
  /// [B, Hq, S] f32 statistics (natural logsumexp per query row): the
  /// forward writes them here (null: to scratch); given to the backward with
  /// `out`, they are the saved forward's and no forward runs again.
  float *lse = nullptr;
  int64_t batch = 0, qHeads = 0, kvHeads = 0, seq = 0, kvSeq = 0, headDim = 0, valueDim = 0;
  bool causal = false;
  /// A sliding window (with causal): keys `window` or more before a query's
  /// last visible key are hidden (cuDNN's band left bound); 0 for none.
  int64_t window = 0;
  double scale = 1.0;
};

/// out = softmax(scale q k^T [causal mask aligned to the end]) v through
/// cuDNN. Returns false (and runs nothing) when cuDNN is not to be used for
/// this problem: f32, LOOM_ATTENTION=loom, no usable libcudnn, or a shape
/// cuDNN has no engine for; the caller then runs Loom's kernel.
llvm::Expected<bool> cudnnAttentionForward(DType dtype, const CudnnAttnArgs &args,
                                           cudaStream_t stream);

/// dq, dk, dv from q, k, v, dout, and the forward's out and lse when
/// args.lse is given (else the forward is recomputed with statistics first).
/// Returns false as cudnnAttentionForward does.
llvm::Expected<bool> cudnnAttentionBackward(DType dtype, const CudnnAttnArgs &args,
                                            cudaStream_t stream);

} // namespace loom::cuda

#endif
