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

llvm::Error checkIndexDType(const Tensor &indices, const char *role) {
  if (indices.dtype != DType::I32 && indices.dtype != DType::I64)
    return kernelError(llvm::Twine(role) + " dtype is " + dtypeName(indices.dtype) +
                       ", expected i32 or i64");
  return llvm::Error::success();
}

/// The extents of a concat/split: every piece must match `whole` except
/// along `dim`, and the pieces' sizes along `dim` must add up.
llvm::Error checkPieces(const Tensor &whole, const char *wholeRole,
                        llvm::ArrayRef<Tensor> pieces, const char *pieceRole,
                        int64_t dim) {
  int64_t total = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    const Tensor &piece = pieces[p];
    LOOM_RETURN_IF_ERROR(checkSameDType(piece, pieceRole, whole, wholeRole));
    bool matches = piece.shape.size() == whole.shape.size();
    for (size_t d = 0; matches && d < whole.shape.size(); ++d)
      matches = static_cast<int64_t>(d) == dim || piece.shape[d] == whole.shape[d];
    if (!matches)
      return kernelError(llvm::Twine(pieceRole) + " " + llvm::Twine(p) + " shape " +
                         shapeToString(piece.shape) + " does not fit " + wholeRole +
                         " shape " + shapeToString(whole.shape) + " along dim " +
                         llvm::Twine(dim));
    total += piece.shape[dim];
  }
  if (total != whole.shape[dim])
    return kernelError(llvm::Twine(pieceRole) + " sizes along dim " + llvm::Twine(dim) +
                       " add up to " + llvm::Twine(total) + ", " + wholeRole +
                       " has " + llvm::Twine(whole.shape[dim]));
  return llvm::Error::success();
}

/// Copies between a whole tensor and its pieces along `dim`; `toWhole`
/// picks the direction.
void copyPieces(const Tensor &whole, llvm::ArrayRef<Tensor> pieces, int64_t dim,
                bool toWhole) {
  const size_t elementSize = dtypeSize(whole.dtype);
  const int64_t outer = product(llvm::ArrayRef<int64_t>(whole.shape).take_front(dim));
  const int64_t inner = product(llvm::ArrayRef<int64_t>(whole.shape).drop_front(dim + 1));
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
  LOOM_RETURN_IF_ERROR(checkSameDType(table, "table", out, "output"));
  LOOM_RETURN_IF_ERROR(checkRank(table, "table", 2));
  LOOM_RETURN_IF_ERROR(checkIndexDType(ids, "ids"));
  const int64_t vocab = table.shape[0], width = table.shape[1];
  std::vector<int64_t> expected = ids.shape;
  expected.push_back(width);
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected));
  // A block of a vocabulary-parallel table (vocab_start): ids of other
  // blocks give zero rows. Negative ids are errors either way.
  const bool block = call.attrs.has("vocab_start");
  LOOM_ASSIGN_OR_RETURN(int64_t start, call.attrs.getInt("vocab_start", 0));
  // A block checks ids against the whole table (vocab_size), when given.
  LOOM_ASSIGN_OR_RETURN(int64_t bound, call.attrs.getInt("vocab_size", block ? INT64_MAX : vocab));
  const int64_t count = ids.numElements();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = loadInt(ids.data, ids.dtype, i);
    if (id < 0 || id >= bound)
      return kernelError("id " + llvm::Twine(id) + " at position " + llvm::Twine(i) +
                         " is outside the table's " + llvm::Twine(block ? bound : vocab) +
                         " rows");
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
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> permutation,
                        call.attrs.getInts("permutation"));
  const size_t rank = in.shape.size();
  std::vector<bool> seen(rank, false);
  bool valid = permutation.size() == rank;
  for (size_t i = 0; valid && i < rank; ++i) {
    valid = permutation[i] >= 0 && permutation[i] < static_cast<int64_t>(rank) &&
            !seen[permutation[i]];
    if (valid)
      seen[permutation[i]] = true;
  }
  if (!valid)
    return kernelError("attribute 'permutation' " + shapeToString(permutation) +
                       " is not a permutation of " + llvm::Twine(rank) + " dims");
  const std::vector<int64_t> inStrides = contiguousStrides(in.shape);
  std::vector<int64_t> expected(rank), srcStrides(rank);
  for (size_t i = 0; i < rank; ++i) {
    expected[i] = in.shape[permutation[i]];
    srcStrides[i] = inStrides[permutation[i]];
  }
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected));
  stridedCopy(call.ctx, in, 0, srcStrides, out);
  return llvm::Error::success();
}

llvm::Error runBroadcast(const KernelCall &call) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> srcStrides,
                        broadcastStrides(in.shape, out.shape, "input"));
  stridedCopy(call.ctx, in, 0, srcStrides, out);
  return llvm::Error::success();
}

llvm::Error runSlice(const KernelCall &call) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameDType(in, "input", out, "output"));
  const size_t rank = in.shape.size();
  if (out.shape.size() != rank)
    return kernelError("output rank " + llvm::Twine(out.shape.size()) +
                       " differs from input rank " + llvm::Twine(rank));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> starts, call.attrs.getInts("starts"));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> steps,
                        call.attrs.getInts("strides", std::vector<int64_t>(rank, 1)));
  std::optional<std::vector<int64_t>> limits;
  if (call.attrs.has("limits")) {
    LOOM_ASSIGN_OR_RETURN(limits, call.attrs.getInts("limits"));
  }
  if (starts.size() != rank || steps.size() != rank || (limits && limits->size() != rank))
    return kernelError("'starts', 'strides' and 'limits' need one entry per dim (" +
                       llvm::Twine(rank) + ")");
  const std::vector<int64_t> inStrides = contiguousStrides(in.shape);
  std::vector<int64_t> srcStrides(rank);
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t size = out.shape[d], start = starts[d], step = steps[d];
    if (step < 1)
      return kernelError("stride " + llvm::Twine(step) + " of dim " + llvm::Twine(d) +
                         " must be >= 1");
    if (limits) {
      const int64_t limit = (*limits)[d];
      if (start < 0 || limit > in.shape[d] || limit < start)
        return kernelError("dim " + llvm::Twine(d) + ": [" + llvm::Twine(start) + ", " +
                           llvm::Twine(limit) + ") is not within [0, " +
                           llvm::Twine(in.shape[d]) + "]");
      if ((limit - start + step - 1) / step != size)
        return kernelError("dim " + llvm::Twine(d) + ": [" + llvm::Twine(start) + ", " +
                           llvm::Twine(limit) + ") step " + llvm::Twine(step) +
                           " does not give output size " + llvm::Twine(size));
    }
    if (size > 0 && (start < 0 || start >= in.shape[d] ||
                     (size - 1) > (in.shape[d] - 1 - start) / step))
      return kernelError("dim " + llvm::Twine(d) + ": " + llvm::Twine(size) +
                         " elements from " + llvm::Twine(start) + " step " +
                         llvm::Twine(step) + " leave the input's size " +
                         llvm::Twine(in.shape[d]));
    srcStrides[d] = inStrides[d] * step;
    if (size > 0)
      base += start * inStrides[d];
  }
  stridedCopy(call.ctx, in, base, srcStrides, out);
  return llvm::Error::success();
}

llvm::Error runConcat(const KernelCall &call) {
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(int64_t rawDim, call.attrs.getInt("dim"));
  LOOM_ASSIGN_OR_RETURN(int64_t dim, normalizeDim(rawDim, out.shape.size(),
                                                  "attribute 'dim'"));
  LOOM_RETURN_IF_ERROR(checkPieces(out, "output", call.inputs, "input", dim));
  copyPieces(out, call.inputs, dim, /*toWhole=*/true);
  return llvm::Error::success();
}

llvm::Error runSplit(const KernelCall &call) {
  const Tensor &in = call.inputs[0];
  LOOM_ASSIGN_OR_RETURN(int64_t rawDim, call.attrs.getInt("dim"));
  LOOM_ASSIGN_OR_RETURN(int64_t dim, normalizeDim(rawDim, in.shape.size(),
                                                  "attribute 'dim'"));
  LOOM_RETURN_IF_ERROR(checkPieces(in, "input", call.outputs, "output", dim));
  copyPieces(in, call.outputs, dim, /*toWhole=*/false);
  return llvm::Error::success();
}

llvm::Error runGather(const KernelCall &call) {
  const Tensor &data = call.inputs[0], &indices = call.inputs[1];
  const Tensor &out = call.outputs[0];
  LOOM_RETURN_IF_ERROR(checkSameDType(data, "data", out, "output"));
  LOOM_RETURN_IF_ERROR(checkIndexDType(indices, "indices"));
  LOOM_ASSIGN_OR_RETURN(int64_t rawAxis, call.attrs.getInt("axis", 0));
  LOOM_ASSIGN_OR_RETURN(int64_t axis, normalizeDim(rawAxis, data.shape.size(),
                                                   "attribute 'axis'"));
  std::vector<int64_t> expected(data.shape.begin(), data.shape.begin() + axis);
  expected.insert(expected.end(), indices.shape.begin(), indices.shape.end());
  expected.insert(expected.end(), data.shape.begin() + axis + 1, data.shape.end());
  if (out.shape != expected)
    return kernelError("output shape " + shapeToString(out.shape) + " should be " +
                       shapeToString(expected));
  const int64_t axisSize = data.shape[axis];
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
  const int64_t outer = product(llvm::ArrayRef<int64_t>(data.shape).take_front(axis));
  const size_t sliceBytes =
      product(llvm::ArrayRef<int64_t>(data.shape).drop_front(axis + 1)) *
      dtypeSize(data.dtype);
  parallelFor(call.ctx, outer * count, sliceBytes / 4 + 1, [&](int64_t begin, int64_t end) {
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
