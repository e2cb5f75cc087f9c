#ifndef LOOM_KERNELS_CPU_OPERANDCHECKS_H
#define LOOM_KERNELS_CPU_OPERANDCHECKS_H

// Host-side operand validation shared by every backend (library
// LoomKernelChecks, which LoomCpuKernels and LoomCudaKernels both link): the
// shape, dtype and attribute checks of each kernel's operands, and the
// geometry they imply (broadcast strides, slice and transpose reads, gather
// and concat extents, row sizes). A backend calls the check of a kernel
// before it computes anything; the check returns what the kernel needs to
// know about its operands, or the error (text shared by all backends, which
// the tests assert).
//
// Only what can be checked from shapes, dtypes and attributes is here.
// Checks that read tensor data (index and label ranges) stay with the CPU
// kernels: on a GPU the data are in device memory.

#include "kernels/cpu/CpuKernels.h"
#include "runtime/abi/LinearCrossEntropy.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::cpu::detail {

/// An error for the caller; runKernel prefixes the kernel's name.
llvm::Error kernelError(const llvm::Twine &message);

#define LOOM_CONCAT_INNER(a, b) a##b
#define LOOM_CONCAT(a, b) LOOM_CONCAT_INNER(a, b)
/// `LOOM_ASSIGN_OR_RETURN(int64_t dim, attrs.getInt("dim"));`
#define LOOM_ASSIGN_OR_RETURN(lhs, expr)                                       \
  auto LOOM_CONCAT(loomExpected, __LINE__) = (expr);                           \
  if (!LOOM_CONCAT(loomExpected, __LINE__))                                    \
    return LOOM_CONCAT(loomExpected, __LINE__).takeError();                    \
  lhs = std::move(*LOOM_CONCAT(loomExpected, __LINE__))
#define LOOM_RETURN_IF_ERROR(expr)                                             \
  if (llvm::Error loomError = (expr))                                          \
  return loomError

//===----------------------------------------------------------------------===//
// Building blocks
//===----------------------------------------------------------------------===//

std::string shapeToString(llvm::ArrayRef<int64_t> shape);
int64_t product(llvm::ArrayRef<int64_t> dims);
/// Row-major element strides of `shape`.
std::vector<int64_t> contiguousStrides(llvm::ArrayRef<int64_t> shape);

/// Checks there is a data pointer wherever there are elements, and that no
/// dim is negative.
llvm::Error checkTensor(const Tensor &tensor, const char *role);
llvm::Error checkSameShape(const Tensor &a, const char *aRole, const Tensor &b,
                           const char *bRole);
llvm::Error checkSameDType(const Tensor &a, const char *aRole, const Tensor &b,
                           const char *bRole);
llvm::Error checkRank(const Tensor &tensor, const char *role, size_t rank);
/// `dim` in [-rank, rank) -> [0, rank).
llvm::Expected<int64_t> normalizeDim(int64_t dim, int64_t rank, const char *what);
/// i32 or i64 (indices, ids, labels).
llvm::Error checkIndexDType(const Tensor &indices, const char *role);

/// Element strides of `input` read as if broadcast (NumPy rules) to
/// `outShape`: one per output dim, 0 where the input repeats.
llvm::Expected<std::vector<int64_t>>
broadcastStrides(llvm::ArrayRef<int64_t> inShape, llvm::ArrayRef<int64_t> outShape,
                 const char *role);

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

enum class UnaryOp {
  Neg, Abs, Exp, Log, Sqrt, Rsqrt, Reciprocal, Tanh, Erf, Sigmoid, Silu, Relu,
  GeluErf, GeluTanh,
};
enum class BinaryOp { Add, Sub, Mul, Div, Pow, Maximum, Minimum };
enum class ComparePred : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
enum class Activation { GeluErf, GeluTanh, Silu };

/// The unary kernels (nn.neg ... nn.gelu): input and output alike.
llvm::Expected<UnaryOp> checkUnary(KernelId id, const Tensor &in, const Tensor &out,
                                   const KernelAttrs &attrs);

/// A binary map's operands read as broadcast to the output.
struct BinaryPlan {
  BinaryOp op;
  std::vector<int64_t> lhsStrides, rhsStrides;
};
/// The binary kernels (nn.add ... nn.minimum). Integer nn.pow is an error.
llvm::Expected<BinaryPlan> checkBinary(KernelId id, const Tensor &a, const Tensor &b,
                                       const Tensor &out);

struct ComparePlan {
  ComparePred pred;
  std::vector<int64_t> lhsStrides, rhsStrides;
};
llvm::Expected<ComparePlan> checkCompare(const Tensor &a, const Tensor &b, const Tensor &out,
                                         const KernelAttrs &attrs);

/// nn.where: the strides of condition, lhs and rhs broadcast to the output.
llvm::Expected<std::array<std::vector<int64_t>, 3>>
checkWhere(const Tensor &cond, const Tensor &a, const Tensor &b, const Tensor &out);

struct DropoutParams {
  double p;
  int64_t seed;
};
llvm::Expected<DropoutParams> checkDropout(const Tensor &in, const Tensor &out,
                                           const KernelAttrs &attrs);

/// nn.iota: out[i] = start + ((i / inner) % size) * step.
struct IotaPlan {
  double start, step;
  int64_t size, inner;
};
llvm::Expected<IotaPlan> checkIota(const Tensor &out, const KernelAttrs &attrs);

/// nn.grouped_matmul: input [S, K], weight [E, K, N] ([E, N, K] with
/// transpose_weight), result [S, N], one dtype.
struct GroupedMatmulPlan {
  int64_t rows, k, groups, n;
  bool transposed;
};
llvm::Expected<GroupedMatmulPlan> checkGroupedMatmul(const Tensor &input, const Tensor &weight,
                                                     const Tensor &out,
                                                     const KernelAttrs &attrs);

/// nn.grouped_matmul_weight_grad's result dtype: the operands', or f32 from
/// bf16 or f16 operands (a widened result: the f32 accumulators written
/// without rounding).
inline bool weightGradDTypeOk(DType operands, DType result) {
  return result == operands ||
         (result == DType::F32 && (operands == DType::BF16 || operands == DType::F16));
}

/// nn.gelu_grad and nn.silu_grad: input, grad and output alike.
llvm::Expected<Activation> checkActivationGrad(KernelId id, const Tensor &x,
                                               const Tensor &dy, const Tensor &out,
                                               const KernelAttrs &attrs);

//===----------------------------------------------------------------------===//
// Reductions and softmax
//===----------------------------------------------------------------------===//

enum class ReduceOp { Sum, Mean, Max };

struct ReducePlan {
  ReduceOp op = ReduceOp::Sum;
  std::vector<int64_t> keptShape, keptStrides;       // output order
  std::vector<int64_t> reducedShape, reducedStrides; // input strides
  int64_t reduceCount = 1;
};
/// nn.reduce_sum, nn.reduce_mean and nn.reduce_max ('dims', 'keepdim').
llvm::Expected<ReducePlan> checkReduce(KernelId id, const Tensor &in,
                                       const Tensor &out, const KernelAttrs &attrs);

/// Softmax along one dim: `lines` lines of `length` elements, `inner` apart.
struct SoftmaxPlan {
  bool log;
  int64_t length, inner, lines;
};
/// nn.softmax and nn.log_softmax.
llvm::Expected<SoftmaxPlan> checkSoftmax(KernelId id, const Tensor &in,
                                         const Tensor &out, const KernelAttrs &attrs);

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

/// A norm over the last dim: `rows` rows of `features`, with the optional
/// per-feature weight and bias (null when absent).
struct NormPlan {
  bool layerNorm;
  int64_t features, rows;
  double epsilon;
  const Tensor *weight = nullptr, *bias = nullptr;
  const Tensor *addend = nullptr; // the norm gradients' residual (has_addend)
};
/// nn.layer_norm and nn.rms_norm (inputs x, [weight], [bias]).
llvm::Expected<NormPlan> checkNorm(KernelId id, llvm::ArrayRef<Tensor> inputs,
                                   const Tensor &out, const KernelAttrs &attrs);
/// nn.layer_norm_grad and nn.rms_norm_grad (inputs x, dy, [weight]).
llvm::Expected<NormPlan> checkNormGrad(KernelId id, llvm::ArrayRef<Tensor> inputs,
                                       const Tensor &out, const KernelAttrs &attrs);
/// nn.norm_weight_grad (x, dy -> dw, scratch; runtime/abi/NormWeightGrad.h):
/// layerNorm is the centered attr.
llvm::Expected<NormPlan> checkNormWeightGrad(llvm::ArrayRef<Tensor> inputs,
                                             llvm::ArrayRef<Tensor> outputs,
                                             const KernelAttrs &attrs);

//===----------------------------------------------------------------------===//
// Rope and attention
//===----------------------------------------------------------------------===//

/// nn.rope: x [..., S, D] rotated by cos and sin tables [S, D].
struct RopePlan {
  bool interleaved;
  int64_t seq, dim;
  /// 'transpose': 0 none, 1 input ([.., S, H, D] in, [.., H, S, D] out),
  /// 2 result (the reverse); heads = H (1 when none).
  int transpose = 0;
  int64_t heads = 1;
  /// Where logical row r = ((outer * H + h) * S + s) of the [.., H, S, D]
  /// view starts in x (in) and in the result (out), in elements.
  int64_t rowOffset(int64_t r, bool in) const {
    if (transpose == 0)
      return r * dim;
    const int64_t s = r % seq, h = (r / seq) % heads, outer = r / (seq * heads);
    const bool swapped = (transpose == 1) == in; // this side is [.., S, H, D]
    return (swapped ? (outer * seq + s) * heads + h : r) * dim;
  }
};
llvm::Expected<RopePlan> checkRope(const Tensor &x, const Tensor &cosT, const Tensor &sinT,
                                   const Tensor &out, const KernelAttrs &attrs);

/// The tensors of an attention kernel call, by role.
enum class AttentionRole : int { Q, K, V, Out, Grad, DQ, DK, DV };

/// Where row (b, h, s) of an attention tensor starts, in elements; a row is
/// contiguous. Head-major [B, H, S, D] or sequence-major [B, S, H, D].
struct AttentionLayout {
  int64_t batchStride, headStride, rowStride;
  int64_t at(int64_t b, int64_t h, int64_t s) const {
    return b * batchStride + h * headStride + s * rowStride;
  }
};

/// q [B, H, S, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv] (logically; the
/// `seq_major` attribute stores any of them, the output, its gradient and the
/// input gradients as [B, S, H, D] instead).
struct AttentionShape {
  int64_t batch, qHeads, seq, headDim, kvHeads, kvSeq, valueDim;
  bool causal;
  /// A sliding window (with causal): each query sees at most its last
  /// `window` keys; 0 for none.
  int64_t window = 0;
  double scale;
  /// The keys query row `i` sees: [first, end). Causal masks are aligned
  /// to the end (query i sees keys j <= i + kvSeq - seq).
  std::pair<int64_t, int64_t> visibleKeys(int64_t i) const {
    if (!causal)
      return {0, kvSeq};
    const int64_t end = std::clamp<int64_t>(i + (kvSeq - seq) + 1, 0, kvSeq);
    const int64_t first = window > 0 ? std::max<int64_t>(end - window, 0) : 0;
    return {first, end};
  }
  /// Bit r (AttentionRole) set: that tensor is stored [B, S, H, D].
  unsigned seqMajorRoles = 0;
  std::vector<int64_t> outShape() const { return {batch, qHeads, seq, valueDim}; }
  bool seqMajor(AttentionRole r) const { return seqMajorRoles >> int(r) & 1; }
  /// The layout of the tensor of role `r`.
  AttentionLayout layout(AttentionRole r) const {
    const bool query = r == AttentionRole::Q || r == AttentionRole::Out ||
                       r == AttentionRole::Grad || r == AttentionRole::DQ;
    const int64_t heads = query ? qHeads : kvHeads, rows = query ? seq : kvSeq;
    const int64_t dim = r == AttentionRole::V || r == AttentionRole::DV || r == AttentionRole::Out ||
                                r == AttentionRole::Grad
                            ? valueDim
                            : headDim;
    if (seqMajor(r))
      return {rows * heads * dim, dim, heads * dim};
    return {heads * rows * dim, rows * dim, dim};
  }
};
/// nn.attention (inputs q, k, v; output [B, H, S, Dv]).
llvm::Expected<AttentionShape> checkAttention(const Tensor &q, const Tensor &k,
                                              const Tensor &v, const Tensor &out,
                                              const KernelAttrs &attrs);
/// nn.attention_grad (inputs q, k, v, dOut; outputs dq, dk, dv).
llvm::Expected<AttentionShape> checkAttentionGrad(llvm::ArrayRef<Tensor> inputs,
                                                  llvm::ArrayRef<Tensor> outputs,
                                                  const KernelAttrs &attrs);
/// nn.attention_with_stats (inputs q, k, v; outputs out [B, H, S, Dv] and
/// lse [B, H, S] f32).
llvm::Expected<AttentionShape> checkAttentionWithStats(llvm::ArrayRef<Tensor> inputs,
                                                       llvm::ArrayRef<Tensor> outputs,
                                                       const KernelAttrs &attrs);
/// nn.attention_grad_with_stats (inputs q, k, v, out, lse, dOut; outputs dq,
/// dk, dv).
llvm::Expected<AttentionShape> checkAttentionGradWithStats(llvm::ArrayRef<Tensor> inputs,
                                                           llvm::ArrayRef<Tensor> outputs,
                                                           const KernelAttrs &attrs);

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

enum class LossReduction : int { None = 0, Sum = 1, Mean = 2 };
const char *lossReductionName(LossReduction reduction);

/// logits [N, C] (or the statistics [N, 3B] of the block loss), labels [N].
struct CrossEntropyShape {
  int64_t rows, classes, ignoreIndex;
  LossReduction reduction;
  /// The loss's shape: [N] for reduction none, else a scalar.
  std::vector<int64_t> lossShape() const {
    return reduction == LossReduction::None ? std::vector<int64_t>{rows}
                                            : std::vector<int64_t>{};
  }
};
/// nn.cross_entropy (logits, labels -> f32 loss).
llvm::Expected<CrossEntropyShape> checkCrossEntropy(const Tensor &logits, const Tensor &labels,
                                                    const Tensor &out, const KernelAttrs &attrs);
/// nn.cross_entropy_grad (logits, labels, loss gradient -> dlogits).
llvm::Expected<CrossEntropyShape> checkCrossEntropyGrad(const Tensor &logits,
                                                        const Tensor &labels,
                                                        const Tensor &lossGrad,
                                                        const Tensor &out,
                                                        const KernelAttrs &attrs);

/// nn.linear_cross_entropy: N rows of H features, V classes, `chunk` rows a
/// chunk, and where its scratch's parts start (in f32 words).
struct LinearCrossEntropyShape {
  CrossEntropyShape ce; // rows N, classes V, ignore_index, reduction
  int64_t features = 0, chunk = 0;
  LinearCrossEntropyScratch scratch;
};
/// nn.linear_cross_entropy (x, w, labels, loss gradient -> loss, dx, dw,
/// scratch).
llvm::Expected<LinearCrossEntropyShape> checkLinearCrossEntropy(llvm::ArrayRef<Tensor> in,
                                                                llvm::ArrayRef<Tensor> out,
                                                                const KernelAttrs &attrs);

/// The vocabulary-parallel loss: `blocks` blocks of statistics per row,
/// this block's first class `vocabStart`, the whole vocabulary `numClasses`
/// (combine only; INT64_MAX when not given).
struct BlockLossShape {
  CrossEntropyShape ce;
  int64_t blocks = 0, vocabStart = 0, numClasses = 0;
};
/// nn.cross_entropy_stats (logits, labels -> f32 [N, 3]).
llvm::Expected<BlockLossShape> checkCrossEntropyStats(const Tensor &logits,
                                                      const Tensor &labels, const Tensor &out,
                                                      const KernelAttrs &attrs);
/// nn.cross_entropy_combine (stats [N, 3B], labels -> f32 loss).
llvm::Expected<BlockLossShape> checkCrossEntropyCombine(const Tensor &stats,
                                                        const Tensor &labels,
                                                        const Tensor &out,
                                                        const KernelAttrs &attrs);
/// nn.cross_entropy_block_grad (logits, labels, loss gradient, stats ->
/// dlogits).
llvm::Expected<BlockLossShape>
checkCrossEntropyBlockGrad(const Tensor &logits, const Tensor &labels, const Tensor &lossGrad,
                           const Tensor &stats, const Tensor &out, const KernelAttrs &attrs);

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

/// out[i] = in[base + sum_d index_d(i) * strides[d]] (element units) over the
/// output's positions.
struct StridedRead {
  int64_t base = 0;
  std::vector<int64_t> strides;
};
/// nn.transpose ('permutation').
llvm::Expected<StridedRead> checkTranspose(const Tensor &in, const Tensor &out,
                                           const KernelAttrs &attrs);
/// nn.broadcast (NumPy rules).
llvm::Expected<StridedRead> checkBroadcast(const Tensor &in, const Tensor &out);
/// nn.slice ('starts', 'strides', 'limits').
llvm::Expected<StridedRead> checkSlice(const Tensor &in, const Tensor &out,
                                       const KernelAttrs &attrs);

/// nn.pad: input element j of dim d lands at low[d] + j * (interior[d] + 1);
/// the rest of the output is `value`.
struct PadPlan {
  std::vector<int64_t> low, interior;
  double value;
};
llvm::Expected<PadPlan> checkPad(const Tensor &in, const Tensor &out, const KernelAttrs &attrs);

/// nn.concat (pieces = inputs, whole = output) and nn.split (whole = input,
/// pieces = outputs): the whole seen as [outer, whole.shape[dim], inner] and
/// each piece as [outer, piece.shape[dim], inner].
struct PiecesPlan {
  int64_t dim, outer, inner;
};
llvm::Expected<PiecesPlan> checkConcat(llvm::ArrayRef<Tensor> inputs, const Tensor &out,
                                       const KernelAttrs &attrs);
llvm::Expected<PiecesPlan> checkSplit(const Tensor &in, llvm::ArrayRef<Tensor> outputs,
                                      const KernelAttrs &attrs);

/// A gather (or its scatter-add gradient) along `axis` of a tensor seen as
/// [outer, axisSize, inner].
struct GatherPlan {
  int64_t axis, outer, axisSize, inner;
};
/// nn.gather (data, indices -> out; 'axis').
llvm::Expected<GatherPlan> checkGather(const Tensor &data, const Tensor &indices,
                                       const Tensor &out, const KernelAttrs &attrs);
/// nn.gather_grad (indices, grad -> out; 'axis', 'axis_size').
llvm::Expected<GatherPlan> checkGatherGrad(const Tensor &indices, const Tensor &grad,
                                           const Tensor &out, const KernelAttrs &attrs);

/// An embedding table [vocab, width], possibly one block of a
/// vocabulary-parallel table: rows [vocabStart, vocabStart + vocab) of a
/// table of `bound` rows (block: whether 'vocab_start' is given).
struct EmbeddingPlan {
  int64_t vocab, width;
  bool block;
  int64_t vocabStart, bound;
};
/// nn.embedding (table, ids -> out; 'vocab_start', 'vocab_size').
llvm::Expected<EmbeddingPlan> checkEmbedding(const Tensor &table, const Tensor &ids,
                                             const Tensor &out, const KernelAttrs &attrs);
/// nn.embedding_grad (ids, grad -> out; 'num_embeddings', 'vocab_start',
/// 'vocab_size').
llvm::Expected<EmbeddingPlan> checkEmbeddingGrad(const Tensor &ids, const Tensor &grad,
                                                 const Tensor &out, const KernelAttrs &attrs);

//===----------------------------------------------------------------------===//
// Matmul and optimizer
//===----------------------------------------------------------------------===//

/// nn.matmul's dtypes: lhs and rhs alike; the result theirs, or f32 with
/// bf16/f16 operands (the f32 accumulation written unrounded).
llvm::Error checkMatmulDTypes(const Tensor &a, const Tensor &b, const Tensor &out);

/// nn.scaled_matmul's operand checks.
llvm::Error checkScaledMatmul(const Tensor &a, const Tensor &b, const Tensor &scaleA,
                              const Tensor &scaleB, const Tensor &out);

/// One AdamW parameter's p, g, m, v (inputs) and p', m', v' (outputs): f32,
/// all of the parameter's shape.
llvm::Error checkAdamWGroup(llvm::ArrayRef<Tensor> in, llvm::ArrayRef<Tensor> out);
/// nn.adamw_multi's operand layout: returns the input index of the first
/// parameter group (after lr, step and the optional scale), given
/// `numCopies` outputs (attr copies) after the 3 per parameter.
llvm::Expected<size_t> adamwMultiFirstGroup(size_t numInputs, size_t numOutputs,
                                            bool hasScale, size_t numCopies = 0);
/// nn.adamw_multi's layout, from its operands and attrs has_scale and copies.
struct AdamWMultiLayout {
  bool hasScale = false;
  size_t first = 0;  ///< input index of the first parameter group
  size_t groups = 0; ///< parameters: inputs first + 4i .. first + 4i + 3, outputs 3i .. 3i + 2
  /// Attr copies (checked: ascending, no repeats, each < groups): the
  /// parameters with a compute copy; entry j's is output 3 * groups + j, a
  /// float tensor of the parameter's shape.
  std::vector<int64_t> copies;
};
/// Checks the operand counts, copies and the copy outputs (shape the
/// parameter's, dtype f32, bf16 or f16); the groups themselves are
/// checkAdamWGroup's.
llvm::Expected<AdamWMultiLayout> checkAdamWMultiLayout(llvm::ArrayRef<Tensor> in,
                                                       llvm::ArrayRef<Tensor> out,
                                                       const KernelAttrs &attrs);
/// nn.cast_multi: n tensors of one dtype -> n of another, shapes pairwise equal.
llvm::Error checkCastMulti(llvm::ArrayRef<Tensor> in, llvm::ArrayRef<Tensor> out);
/// nn.sum_squares_multi: n float tensors -> n f32 scalars (or one, the
/// total) and the f64 scratch (runtime/abi/SumSquares.h).
llvm::Error checkSumSquaresMulti(llvm::ArrayRef<Tensor> in, llvm::ArrayRef<Tensor> out,
                                 bool total);

//===----------------------------------------------------------------------===//
// FP8 quantization (NNFp8Ops.td)
//===----------------------------------------------------------------------===//

enum class Fp8Kernel { Quantize, Dequantize, Amax, Scale };
/// The operands of nn.quantize (x, scale -> q), nn.dequantize (q, scale ->
/// x), nn.amax (x -> amax) or nn.fp8_scale (amax -> scale; attrs format,
/// margin): dtypes, shapes, and the tiling (a scale or amax of rank 0, or of
/// the tensor's rank with each dim a nonzero divisor of the tensor's).
llvm::Error checkFp8(Fp8Kernel kernel, llvm::ArrayRef<Tensor> inputs,
                     llvm::ArrayRef<Tensor> outputs, const KernelAttrs &attrs);

/// nn.quantize_tiles: x [R, C] -> q [R, C], qT [C, R] (one FP8 type), scale
/// (a rank-2 tiling of q) and scaleT (of qT), f32; attrs format, margin.
llvm::Error checkQuantizeTiles(llvm::ArrayRef<Tensor> inputs, llvm::ArrayRef<Tensor> outputs,
                               const KernelAttrs &attrs);

/// nn.quantize_tensor: x [R, C] -> q [R, C], qT [C, R] (one FP8 type) and
/// one scale (rank 0, f32); attrs format, margin.
llvm::Error checkQuantizeTensor(llvm::ArrayRef<Tensor> inputs, llvm::ArrayRef<Tensor> outputs,
                                const KernelAttrs &attrs);

} // namespace loom::cpu::detail

#endif
