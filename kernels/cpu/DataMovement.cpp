// Kernels that move elements without arithmetic: embedding, transpose,
// broadcast, slice, concat, split, gather. They work on any dtype, as bytes.

#include "kernels/cpu/KernelSupport.h"

#include <algorithm>

namespace loom::cpu::detail {

namespace {

template <typename Word>
void stridedCopyWords(const KernelContext &ctx, const Tensor &in, int64_t baseOffset,
                      const std::vector<int64_t> &srcStrides, const Tensor &out) {
  const Word *src = static_cast<const Word *>(in.data) + baseOffset;
  Word *dst = static_cast<Word *>(out.data);
  parallelFor(ctx, out.numElements(), 2, [&](int64_t begin, int64_t end) {
    StridedWalker<1> walker(out.shape, {srcStrides.data()}, begin);
    for (int64_t i = begin; i < end; ++i, walker.next())
      dst[i] = src[walker.offset(0)];
  });
}

/// out[i] = in[baseOffset + sum_d index_d(i) * srcStrides[d]] over the
/// output's positions.
void stridedCopy(const KernelContext &ctx, const Tensor &in, int64_t baseOffset,
                 const std::vector<int64_t> &srcStrides, const Tensor &out) {
  switch (dtypeSize(out.dtype)) {
  case 1:
    return stridedCopyWords<uint8_t>(ctx, in, baseOffset, srcStrides, out);
  case 2:
    return stridedCopyWords<uint16_t>(ctx, in, baseOffset, srcStrides, out);
  case 4:
    return stridedCopyWords<uint32_t>(ctx, in, baseOffset, srcStrides, out);
  default:
    return stridedCopyWords<uint64_t>(ctx, in, baseOffset, srcStrides, out);
  }
}

/// Copies between a whole tensor and its pieces along `dim`; `toWhole`
/// picks the direction.
void copyPieces(const Tensor &whole, llvm::ArrayRef<Tensor> pieces, const PiecesPlan &plan,
                bool toWhole) {
  const size_t elementSize = dtypeSize(whole.dtype);
  const int64_t dim = plan.dim, outer = plan.outer, inner = plan.inner;
  const int64_t wholeRow = whole.shape[dim] * inner * elementSize;
  int64_t offset = 0; // bytes into a row of `whole`
  for (const Tensor &piece : pieces) {
    const int64_t pieceRow = piece.shape[dim] * inner * elementSize;
    char *wholeBytes = static_cast<char *>(whole.data);
    char *pieceBytes = static_cast<char *>(piece.data);
    for (int64_t o = 0; o < outer && pieceRow > 0; ++o) {
      char *w = wholeBytes + o * wholeRow + offset;
      char *p = pieceBytes + o * pieceRow;
      if (toWhole)
        std::memcpy(w, p, pieceRow);
      else
        std::memcpy(p, w, pieceRow);
    }
    offset += pieceRow;
  }
}

} // namespace

llvm::Error runEmbedding(const KernelCall &call) {
  const Tensor &table = call.inputs[0], &ids = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(EmbeddingPlan plan, checkEmbedding(table, ids, out, call.attrs));
  // A block of a vocabulary-parallel table (vocab_start): ids of other
  // blocks give zero rows. Negative ids are errors either way.
  const int64_t vocab = plan.vocab, width = plan.width, start = plan.vocabStart;
  const int64_t count = ids.numElements();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = loadInt(ids.data, ids.dtype, i);
    if (id < 0 || id >= plan.bound)
      return kernelError("id " + llvm::Twine(id) + " at position " + llvm::Twine(i) +
                         " is outside the table's " +
                         llvm::Twine(plan.block ? plan.bound : vocab) + " rows");
  }
  const size_t rowBytes = width * dtypeSize(table.dtype);
  parallelFor(call.ctx, count, width, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t row = loadInt(ids.data, ids.dtype, i) - start;
      char *dst = static_cast<char *>(out.data) + i * rowBytes;
      if (row < 0 || row >= vocab)
        std::memset(dst, 0, rowBytes);
      else
        std::memcpy(dst, static_cast<const char *>(table.data) + row * rowBytes, rowBytes);
    }
  });
  return llvm::Error::success();
}

llvm::Error runTranspose(const KernelCall &call) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(StridedRead read, checkTranspose(in, out, call.attrs));
  stridedCopy(call.ctx, in, read.base, read.strides, out);
  return llvm::Error::success();
}

llvm::Error runBroadcast(const KernelCall &call) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(StridedRead read, checkBroadcast(in, out));
  stridedCopy(call.ctx, in, read.base, read.strides, out);
  return llvm::Error::success();
}

llvm::Error runSlice(const KernelCall &call) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(StridedRead read, checkSlice(in, out, call.attrs));
  stridedCopy(call.ctx, in, read.base, read.strides, out);
  return llvm::Error::success();
}

llvm::Error runConcat(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(PiecesPlan plan, checkConcat(call.inputs, call.outputs[0], call.attrs));
  copyPieces(call.outputs[0], call.inputs, plan, /*toWhole=*/true);
  return llvm::Error::success();
}

llvm::Error runSplit(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(PiecesPlan plan, checkSplit(call.inputs[0], call.outputs, call.attrs));
  copyPieces(call.inputs[0], call.outputs, plan, /*toWhole=*/false);
  return llvm::Error::success();
}

llvm::Error runGather(const KernelCall &call) {
  const Tensor &data = call.inputs[0], &indices = call.inputs[1];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(GatherPlan plan, checkGather(data, indices, out, call.attrs));
  const int64_t axisSize = plan.axisSize;
  const int64_t count = indices.numElements();
  // Negative indices count from the end, as in ONNX Gather.
  std::vector<int64_t> resolved(count);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = loadInt(indices.data, indices.dtype, i);
    if (index < -axisSize || index >= axisSize)
      return kernelError("index " + llvm::Twine(index) + " at position " +
                         llvm::Twine(i) + " is outside [" + llvm::Twine(-axisSize) +
                         ", " + llvm::Twine(axisSize) + ")");
    resolved[i] = index < 0 ? index + axisSize : index;
  }
  const size_t sliceBytes = plan.inner * dtypeSize(data.dtype);
  parallelFor(call.ctx, plan.outer * count, sliceBytes / 4 + 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / count, i = task % count;
      std::memcpy(static_cast<char *>(out.data) + task * sliceBytes,
                  static_cast<const char *>(data.data) +
                      (o * axisSize + resolved[i]) * sliceBytes,
                  sliceBytes);
    }
  });
  return llvm::Error::success();
}

} // namespace loom::cpu::detail
