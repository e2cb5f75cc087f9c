// Data-movement CUDA kernels: transpose, broadcast, slice, pad, concat, split,
// gather, embedding, and the scatter-adds gather_grad and embedding_grad.
// Copies move whole words (up to 16 bytes) whenever the sizes, offsets and
// pointers allow, and work on any dtype as bytes.
//
// Where the GPU cannot do what the CPU does: indices live on the device, so an
// out-of-range index (an error on the CPU) cannot be reported when the kernel
// is launched. gather and embedding write zeros for such an index's slice;
// gather_grad and embedding_grad leave its gradient out of every sum.
//
// The scatter-adds are deterministic without atomics: the positions are
// sorted by target with a stable radix sort (so each target's positions stay
// in increasing order), and each output element is summed, in double, by one
// thread walking its target's positions in that order — the CPU's order, so
// the results are bitwise the CPU's.

#include "kernels/cuda/DeviceSupport.cuh"
#include "kernels/cpu/KernelSupport.h" // isIntLike, storeInt

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>

namespace loom::cuda {

using cpu::detail::checkSameDType;
using cpu::detail::contiguousStrides;
using cpu::detail::product;

namespace {

/// Calls fn(Word{}) with the unsigned word of `bytes` bytes (uint4 for 16).
template <typename Fn> llvm::Error dispatchWord(size_t bytes, Fn &&fn) {
  switch (bytes) {
  case 1:
    return fn(uint8_t{});
  case 2:
    return fn(uint16_t{});
  case 4:
    return fn(uint32_t{});
  case 8:
    return fn(uint64_t{});
  case 16:
    return fn(uint4{});
  default:
    return kernelError("unsupported element size " + llvm::Twine(bytes));
  }
}

/// The widest word (16, 8, 4, 2 or 1 bytes) dividing every size and offset in
/// `byteCounts` and aligning every pointer in `pointers`.
size_t widestWord(std::initializer_list<int64_t> byteCounts,
                  std::initializer_list<const void *> pointers) {
  for (size_t word = 16; word > 1; word /= 2) {
    bool fits = true;
    for (int64_t bytes : byteCounts)
      fits = fits && bytes % static_cast<int64_t>(word) == 0;
    for (const void *ptr : pointers)
      fits = fits && isAligned(ptr, word);
    if (fits)
      return word;
  }
  return 1;
}

//===----------------------------------------------------------------------===//
// Strided copies: transpose, broadcast, slice
//===----------------------------------------------------------------------===//

/// out[i] = in[offset(i)] over the output's (contiguous) positions.
template <typename Word, typename Index>
__global__ void __launch_bounds__(kBlockSize)
stridedCopyKernel(Index n, const __grid_constant__ StridedMap<1> map, Word *out,
                  const Word *in) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    Index offset[1];
    stridedOffsets(map, i, offset);
    out[i] = in[offset[0]];
  }
}

/// out[i] = in[base + sum_d index_d(i) * srcStrides[d]] (element units).
llvm::Error stridedCopy(const LaunchContext &ctx, const Tensor &in, int64_t base,
                        llvm::ArrayRef<int64_t> srcStrides, const Tensor &out) {
  int64_t n = out.numElements();
  if (n == 0)
    return llvm::Error::success();
  const int64_t elementSize = static_cast<int64_t>(dtypeSize(out.dtype));
  LOOM_ASSIGN_OR_RETURN(StridedMap<1> map, makeStridedMap<1>(out.shape, {srcStrides}));
  // Rows that are contiguous in both tensors move as wider words when every
  // other stride, the base and both pointers allow it.
  int64_t wordSize = elementSize;
  const int last = map.rank - 1;
  if (map.rank > 0 && map.strides[0][last] == 1) {
    for (int64_t word = 16; word > elementSize; word /= 2) {
      const int64_t factor = word / elementSize;
      if (word % elementSize != 0 || map.shape[last] % factor != 0 || base % factor != 0)
        continue;
      bool fits = isAligned(in.data, word) && isAligned(out.data, word);
      for (int d = 0; d < last; ++d)
        fits = fits && map.strides[0][d] % factor == 0;
      if (!fits)
        continue;
      map.shape[last] /= factor;
      for (int d = 0; d < last; ++d)
        map.strides[0][d] /= factor;
      base /= factor;
      n /= factor;
      wordSize = word;
      break;
    }
  }
  return dispatchWord(wordSize, [&](auto tag) {
    using Word = decltype(tag);
    const Word *src = static_cast<const Word *>(in.data) + base;
    Word *dst = static_cast<Word *>(out.data);
    if (fitsIn32Bits(map, n))
      stridedCopyKernel<Word, uint32_t><<<gridFor(n, ctx), kBlockSize, 0, ctx.stream>>>(
          static_cast<uint32_t>(n), map, dst, src);
    else
      stridedCopyKernel<Word, int64_t><<<gridFor(n, ctx), kBlockSize, 0, ctx.stream>>>(
          n, map, dst, src);
    return llvm::Error::success();
  });
}

llvm::Error launchTranspose(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 1, 1));
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::StridedRead read,
                        cpu::detail::checkTranspose(in, out, call.attrs));
  return stridedCopy(call.ctx, in, read.base, read.strides, out);
}

llvm::Error launchBroadcast(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 1, 1));
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::StridedRead read, cpu::detail::checkBroadcast(in, out));
  return stridedCopy(call.ctx, in, read.base, read.strides, out);
}

llvm::Error launchSlice(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 1, 1));
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::StridedRead read,
                        cpu::detail::checkSlice(in, out, call.attrs));
  return stridedCopy(call.ctx, in, read.base, read.strides, out);
}

//===----------------------------------------------------------------------===//
// Pad
//===----------------------------------------------------------------------===//

struct PadMap {
  int rank = 0;
  int64_t outShape[kMaxRank] = {};
  int64_t low[kMaxRank] = {};
  int64_t step[kMaxRank] = {}; // interior + 1
  int64_t inShape[kMaxRank] = {};
  int64_t inStrides[kMaxRank] = {};
};

/// Each output element reads its input element, or is `value` where it falls
/// in the low/high padding or between input elements (interior padding).
template <typename Word>
__global__ void __launch_bounds__(kBlockSize)
padKernel(int64_t n, const __grid_constant__ PadMap map, Word value, Word *out,
          const Word *in) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    int64_t remaining = i, inOffset = 0;
    bool inside = true;
    for (int d = map.rank - 1; d >= 0; --d) {
      int64_t index = remaining;
      if (d > 0) {
        index = remaining % map.outShape[d];
        remaining /= map.outShape[d];
      }
      const int64_t j = index - map.low[d];
      if (j < 0) {
        inside = false;
      } else {
        const int64_t q = j / map.step[d];
        if (q * map.step[d] != j || q >= map.inShape[d])
          inside = false;
        else
          inOffset += q * map.inStrides[d];
      }
    }
    out[i] = inside ? in[inOffset] : value;
  }
}

llvm::Error launchPad(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 1, 1));
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::PadPlan plan, cpu::detail::checkPad(in, out, call.attrs));
  const size_t rank = in.shape.size();
  const double value = plan.value;
  const std::vector<int64_t> &low = plan.low, &interior = plan.interior;
  if (rank > static_cast<size_t>(kMaxRank))
    return kernelError("rank " + llvm::Twine(rank) + " is above the " +
                       llvm::Twine(kMaxRank) + " dims this kernel supports");
  const int64_t n = out.numElements();
  if (n == 0)
    return llvm::Error::success();
  // The padding value as one element of the output's dtype (as the CPU).
  uint64_t element[2] = {0, 0}; // room for the widest word dispatchWord names
  if (cpu::detail::isIntLike(out.dtype))
    cpu::detail::storeInt(element, out.dtype, 0, static_cast<int64_t>(value));
  else
    storeFromDouble(element, out.dtype, 0, value);
  PadMap map;
  map.rank = static_cast<int>(rank);
  const std::vector<int64_t> inStrides = contiguousStrides(in.shape);
  for (size_t d = 0; d < rank; ++d) {
    map.outShape[d] = out.shape[d];
    map.low[d] = low[d];
    map.step[d] = interior[d] + 1;
    map.inShape[d] = in.shape[d];
    map.inStrides[d] = inStrides[d];
  }
  return dispatchWord(dtypeSize(out.dtype), [&](auto tag) {
    using Word = decltype(tag);
    Word fill;
    std::memcpy(&fill, element, sizeof(Word));
    padKernel<Word><<<gridFor(n, call.ctx), kBlockSize, 0, call.ctx.stream>>>(
        n, map, fill, static_cast<Word *>(out.data), static_cast<const Word *>(in.data));
    return llvm::Error::success();
  });
}

//===----------------------------------------------------------------------===//
// Concat and split
//===----------------------------------------------------------------------===//

/// dst[r * dstPitch + c] = src[r * srcPitch + c] for r < rows, c < rowWords.
template <typename Word>
__global__ void __launch_bounds__(kBlockSize)
copyRowsKernel(int64_t rows, int64_t rowWords, Word *dst, int64_t dstPitch, const Word *src,
               int64_t srcPitch) {
  const int64_t n = rows * rowWords;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t r = i / rowWords, c = i - r * rowWords;
    dst[r * dstPitch + c] = src[r * srcPitch + c];
  }
}

/// Copies between `whole` and its pieces along `dim`; `toWhole` picks the
/// direction. One launch per piece.
llvm::Error copyPieces(const LaunchContext &ctx, const Tensor &whole,
                       llvm::ArrayRef<Tensor> pieces, const cpu::detail::PiecesPlan &plan,
                       bool toWhole) {
  const int64_t elementSize = static_cast<int64_t>(dtypeSize(whole.dtype));
  const int64_t dim = plan.dim, outer = plan.outer, inner = plan.inner;
  const int64_t wholeRow = whole.shape[dim] * inner * elementSize;
  int64_t offset = 0; // bytes into a row of `whole`
  for (const Tensor &piece : pieces) {
    const int64_t pieceRow = piece.shape[dim] * inner * elementSize;
    if (outer > 0 && pieceRow > 0) {
      char *wholeBytes = static_cast<char *>(whole.data) + offset;
      char *pieceBytes = static_cast<char *>(piece.data);
      const size_t word =
          widestWord({pieceRow, wholeRow}, {wholeBytes, static_cast<const void *>(pieceBytes)});
      LOOM_RETURN_IF_ERROR(dispatchWord(word, [&](auto tag) {
        using Word = decltype(tag);
        const int64_t w = static_cast<int64_t>(sizeof(Word));
        const unsigned blocks = gridFor(outer * (pieceRow / w), ctx);
        if (toWhole)
          copyRowsKernel<Word><<<blocks, kBlockSize, 0, ctx.stream>>>(
              outer, pieceRow / w, reinterpret_cast<Word *>(wholeBytes), wholeRow / w,
              reinterpret_cast<const Word *>(pieceBytes), pieceRow / w);
        else
          copyRowsKernel<Word><<<blocks, kBlockSize, 0, ctx.stream>>>(
              outer, pieceRow / w, reinterpret_cast<Word *>(pieceBytes), pieceRow / w,
              reinterpret_cast<const Word *>(wholeBytes), wholeRow / w);
        return llvm::Error::success();
      }));
    }
    offset += pieceRow;
  }
  return llvm::Error::success();
}

llvm::Error launchConcat(const KernelCall &call) {
  if (call.inputs.empty())
    return kernelError("takes 1 or more inputs, got 0");
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, call.inputs.size(), 1, 1));
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::PiecesPlan plan,
                        cpu::detail::checkConcat(call.inputs, out, call.attrs));
  return copyPieces(call.ctx, out, call.inputs, plan, /*toWhole=*/true);
}

llvm::Error launchSplit(const KernelCall &call) {
  if (call.outputs.empty())
    return kernelError("produces 1 or more outputs, got 0");
  LOOM_RETURN_IF_ERROR(checkOperands(call, 1, 1, 1, call.outputs.size()));
  const Tensor &in = call.inputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::PiecesPlan plan,
                        cpu::detail::checkSplit(in, call.outputs, call.attrs));
  return copyPieces(call.ctx, in, call.outputs, plan, /*toWhole=*/false);
}

//===----------------------------------------------------------------------===//
// Gather and embedding
//===----------------------------------------------------------------------===//

/// out[o, i, w] = data[o, index(i), w] in words of one slice; zeros where the
/// index is out of range. Negative indices count from the end when
/// `wrapNegative` (gather), and are out of range otherwise (embedding).
template <typename Word, typename IndexT>
__global__ void __launch_bounds__(kBlockSize)
gatherKernel(int64_t total, int64_t count, int64_t sliceWords, int64_t axisSize,
             bool wrapNegative, int64_t indexStart, const IndexT *indices, const Word *data, Word *out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += stride) {
    const int64_t q = t / sliceWords, w = t - q * sliceWords;
    const int64_t o = q / count, i = q - o * count;
    int64_t index = static_cast<int64_t>(indices[i]) - indexStart;
    if (index < 0 && wrapNegative)
      index += axisSize;
    Word value{};
    if (index >= 0 && index < axisSize)
      value = data[(o * axisSize + index) * sliceWords + w];
    out[t] = value;
  }
}

llvm::Error launchGatherSlices(const LaunchContext &ctx, const Tensor &data,
                               const Tensor &indices, const Tensor &out, int64_t outer,
                               int64_t axisSize, int64_t sliceBytes, bool wrapNegative,
                               int64_t indexStart = 0) {
  const int64_t count = indices.numElements();
  if (outer == 0 || count == 0 || sliceBytes == 0)
    return llvm::Error::success();
  const size_t word = widestWord({sliceBytes}, {data.data, out.data});
  return dispatchWord(word, [&](auto tag) {
    using Word = decltype(tag);
    const int64_t sliceWords = sliceBytes / static_cast<int64_t>(sizeof(Word));
    const int64_t total = outer * count * sliceWords;
    const unsigned blocks = gridFor(total, ctx);
    const Word *src = static_cast<const Word *>(data.data);
    Word *dst = static_cast<Word *>(out.data);
    if (indices.dtype == DType::I32)
      gatherKernel<Word, int32_t><<<blocks, kBlockSize, 0, ctx.stream>>>(
          total, count, sliceWords, axisSize, wrapNegative, indexStart,
          static_cast<const int32_t *>(indices.data), src, dst);
    else
      gatherKernel<Word, int64_t><<<blocks, kBlockSize, 0, ctx.stream>>>(
          total, count, sliceWords, axisSize, wrapNegative, indexStart,
          static_cast<const int64_t *>(indices.data), src, dst);
    return llvm::Error::success();
  });
}

llvm::Error launchGather(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1, 1));
  const Tensor &data = call.inputs[0], &indices = call.inputs[1];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::GatherPlan plan,
                        cpu::detail::checkGather(data, indices, out, call.attrs));
  const int64_t sliceBytes = plan.inner * static_cast<int64_t>(dtypeSize(data.dtype));
  return launchGatherSlices(call.ctx, data, indices, out, plan.outer, plan.axisSize, sliceBytes,
                            /*wrapNegative=*/true);
}

llvm::Error launchEmbedding(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1, 1));
  const Tensor &table = call.inputs[0], &ids = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::EmbeddingPlan plan,
                        cpu::detail::checkEmbedding(table, ids, out, call.attrs));
  // A block of a vocabulary-parallel table: other blocks' ids give zeros
  // (as ids outside the table always do here).
  return launchGatherSlices(call.ctx, table, ids, out, /*outer=*/1, plan.vocab,
                            plan.width * static_cast<int64_t>(dtypeSize(table.dtype)),
                            /*wrapNegative=*/false, plan.vocabStart);
}

//===----------------------------------------------------------------------===//
// Scatter-adds: gather_grad and embedding_grad
//===----------------------------------------------------------------------===//

/// keys[p] = the target of position p (axisSize for an index out of range,
/// which no output reads), values[p] = p.
template <typename IndexT>
__global__ void __launch_bounds__(kBlockSize)
resolveTargetsKernel(int64_t count, int64_t axisSize, bool wrapNegative, int64_t indexStart,
                     const IndexT *indices, uint32_t *keys, uint32_t *values) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < count;
       p += stride) {
    int64_t index = static_cast<int64_t>(indices[p]) - indexStart;
    if (index < 0 && wrapNegative)
      index += axisSize;
    keys[p] = static_cast<uint32_t>(index >= 0 && index < axisSize ? index : axisSize);
    values[p] = static_cast<uint32_t>(p);
  }
}

/// starts[a] = the first sorted position whose key is >= a, for a in
/// [0, axisSize]: target a's positions are [starts[a], starts[a + 1]).
__global__ void __launch_bounds__(kBlockSize)
groupStartsKernel(int64_t groups, int64_t count, const uint32_t *sortedKeys,
                  uint32_t *starts) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t a = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; a < groups;
       a += stride) {
    int64_t lo = 0, hi = count;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (static_cast<int64_t>(sortedKeys[mid]) < a)
        lo = mid + 1;
      else
        hi = mid;
    }
    starts[a] = static_cast<uint32_t>(lo);
  }
}

/// out[o, a, i] = sum over target a's positions p, in increasing order, of
/// grad[o, p, i]; accumulated in double, rounded once on store.
template <DType D>
__global__ void __launch_bounds__(kBlockSize)
scatterAddKernel(int64_t total, int64_t axisSize, int64_t inner, int64_t count,
                 const uint32_t *starts, const uint32_t *positions,
                 const StorageOf<D> *grad, StorageOf<D> *out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += stride) {
    const int64_t q = t / inner, i = t - q * inner;
    const int64_t o = q / axisSize, a = q - o * axisSize;
    const StorageOf<D> *rows = grad + o * count * inner + i;
    double acc = 0.0;
    for (uint32_t s = starts[a], end = starts[a + 1]; s < end; ++s)
      acc = dev::add(acc, dev::Elem<D>::loadDouble(rows[static_cast<int64_t>(positions[s]) * inner]));
    out[t] = dev::Elem<D>::storeDouble(acc);
  }
}

/// out [outer, axisSize, inner] = grad [outer, count, inner] added up by
/// target along the middle dim (Scatter.cpp's scatterAddSlices); `outer` is
/// implied by the output's size.
llvm::Error scatterAddSlices(const LaunchContext &ctx, const Tensor &indices,
                             const Tensor &grad, const Tensor &out, int64_t axisSize, int64_t inner, bool wrapNegative,
                             int64_t indexStart = 0) {
  LOOM_RETURN_IF_ERROR(checkSameDType(grad, "grad", out, "output"));
  return dispatchFloatDType(out.dtype, "grad", [&](auto tag) -> llvm::Error {
    constexpr DType D = decltype(tag)::value;
    const int64_t total = out.numElements();
    const int64_t count = indices.numElements();
    if (total == 0)
      return llvm::Error::success();
    if (count == 0) // nothing to add: all zeros (+0.0 is all-zero bits)
      return cudaError(cudaMemsetAsync(out.data, 0, out.sizeInBytes(), ctx.stream),
                       "cudaMemsetAsync");
    if (count >= (int64_t(1) << 31) || axisSize >= (int64_t(1) << 31))
      return kernelError("scatter-add of " + llvm::Twine(count) + " positions into " +
                         llvm::Twine(axisSize) + " targets is too large (2^31 each)");
    int endBit = 1;
    while ((int64_t(1) << endBit) <= axisSize) // keys go up to axisSize
      ++endBit;
    const int items = static_cast<int>(count);
    size_t sortBytes = 0;
    LOOM_RETURN_IF_ERROR(cudaError(
        cub::DeviceRadixSort::SortPairs(nullptr, sortBytes, static_cast<const uint32_t *>(nullptr),
                                        static_cast<uint32_t *>(nullptr),
                                        static_cast<const uint32_t *>(nullptr),
                                        static_cast<uint32_t *>(nullptr), items, 0, endBit,
                                        ctx.stream),
        "cub::DeviceRadixSort (size)"));
    auto roundUp = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
    const size_t keyBytes = roundUp(count * sizeof(uint32_t));
    const size_t startBytes = roundUp((axisSize + 1) * sizeof(uint32_t));
    const size_t scratchBytes = 4 * keyBytes + startBytes + roundUp(sortBytes);
    void *scratch = nullptr;
    LOOM_RETURN_IF_ERROR(
        cudaError(cudaMallocAsync(&scratch, scratchBytes, ctx.stream), "cudaMallocAsync"));
    char *bytes = static_cast<char *>(scratch);
    auto *keysIn = reinterpret_cast<uint32_t *>(bytes);
    auto *keysOut = reinterpret_cast<uint32_t *>(bytes + keyBytes);
    auto *valuesIn = reinterpret_cast<uint32_t *>(bytes + 2 * keyBytes);
    auto *valuesOut = reinterpret_cast<uint32_t *>(bytes + 3 * keyBytes);
    auto *starts = reinterpret_cast<uint32_t *>(bytes + 4 * keyBytes);
    void *sortScratch = bytes + 4 * keyBytes + startBytes;

    if (indices.dtype == DType::I32)
      resolveTargetsKernel<int32_t><<<gridFor(count, ctx), kBlockSize, 0, ctx.stream>>>(
          count, axisSize, wrapNegative, indexStart, static_cast<const int32_t *>(indices.data), keysIn,
          valuesIn);
    else
      resolveTargetsKernel<int64_t><<<gridFor(count, ctx), kBlockSize, 0, ctx.stream>>>(
          count, axisSize, wrapNegative, indexStart, static_cast<const int64_t *>(indices.data), keysIn,
          valuesIn);
    llvm::Error sorted = cudaError(
        cub::DeviceRadixSort::SortPairs(sortScratch, sortBytes, keysIn, keysOut, valuesIn,
                                        valuesOut, items, 0, endBit, ctx.stream),
        "cub::DeviceRadixSort");
    if (!sorted) {
      groupStartsKernel<<<gridFor(axisSize + 1, ctx), kBlockSize, 0, ctx.stream>>>(
          axisSize + 1, count, keysOut, starts);
      // One thread per output element: a target that many positions share
      // (a padding id) still spreads over its row's `inner` threads.
      scatterAddKernel<D><<<gridFor(total, ctx), kBlockSize, 0, ctx.stream>>>(
          total, axisSize, inner, count, starts, valuesOut,
          static_cast<const StorageOf<D> *>(grad.data), static_cast<StorageOf<D> *>(out.data));
    }
    llvm::Error freed = cudaError(cudaFreeAsync(scratch, ctx.stream), "cudaFreeAsync");
    if (sorted) {
      llvm::consumeError(std::move(freed));
      return sorted;
    }
    return freed;
  });
}

llvm::Error launchEmbeddingGrad(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1, 1));
  const Tensor &ids = call.inputs[0], &grad = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::EmbeddingPlan plan,
                        cpu::detail::checkEmbeddingGrad(ids, grad, out, call.attrs));
  return scatterAddSlices(call.ctx, ids, grad, out, plan.vocab, plan.width,
                          /*wrapNegative=*/false, plan.vocabStart);
}

llvm::Error launchGatherGrad(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkOperands(call, 2, 2, 1, 1));
  const Tensor &indices = call.inputs[0], &grad = call.inputs[1];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(cpu::detail::GatherPlan plan,
                        cpu::detail::checkGatherGrad(indices, grad, out, call.attrs));
  return scatterAddSlices(call.ctx, indices, grad, out, plan.axisSize, plan.inner,
                          /*wrapNegative=*/true);
}

} // namespace

void registerDataMovementKernels(KernelRegistry &registry) {
  registry.add(KernelId::Transpose, launchTranspose);
  registry.add(KernelId::Broadcast, launchBroadcast);
  registry.add(KernelId::Slice, launchSlice);
  registry.add(KernelId::Pad, launchPad);
  registry.add(KernelId::Concat, launchConcat);
  registry.add(KernelId::Split, launchSplit);
  registry.add(KernelId::Gather, launchGather);
  registry.add(KernelId::Embedding, launchEmbedding);
  registry.add(KernelId::GatherGrad, launchGatherGrad);
  registry.add(KernelId::EmbeddingGrad, launchEmbeddingGrad);
}

} // namespace loom::cuda
