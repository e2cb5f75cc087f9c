// The gradients of the kernels that select elements: embedding_grad and
// gather_grad add slices of the gradient up by index (scatter-add), pad
// places a slice's gradient back where the slice read it.
//
// Scatter-adds are deterministic without atomics: the positions are grouped
// by target (a stable counting sort, so each group is in position order),
// and each output slice is summed, in double, by the one task that owns it.

#include "kernels/cpu/KernelSupport.h"

#include <algorithm>

namespace loom::cpu::detail {

namespace {

/// out[o, a, :] = sum of grad[o, p, :] over the positions p (in increasing
/// order) with targets[p] == a; out is [outer, axisSize, inner] and grad is
/// [outer, targets.size(), inner], both row-major. Positions whose target is
/// negative add to nothing.
llvm::Error scatterAddSlices(const KernelCall &call, const Tensor &grad,
                             const Tensor &out, const std::vector<int64_t> &targets,
                             int64_t outer, int64_t axisSize, int64_t inner) {
  LOOM_RETURN_IF_ERROR(checkSameDType(grad, "grad", out, "output"));
  const int64_t count = static_cast<int64_t>(targets.size());
  std::vector<int64_t> groupStart(axisSize + 1, 0), positions(count);
  for (int64_t target : targets)
    if (target >= 0)
      ++groupStart[target + 1];
  for (int64_t a = 0; a < axisSize; ++a)
    groupStart[a + 1] += groupStart[a];
  std::vector<int64_t> next(groupStart.begin(), groupStart.end() - 1);
  for (int64_t p = 0; p < count; ++p)
    if (targets[p] >= 0)
      positions[next[targets[p]]++] = p;
  return dispatchFloat(out.dtype, "grad", [&](auto tag) {
    using T = decltype(tag);
    InputArray<T> g(grad);
    const int64_t averageGroup = axisSize == 0 ? 0 : count / axisSize;
    parallelFor(call.ctx, outer * axisSize, inner * (averageGroup + 1),
                [&](int64_t begin, int64_t end) {
      std::vector<double> acc(inner);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t o = task / axisSize, a = task % axisSize;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t s = groupStart[a]; s < groupStart[a + 1]; ++s) {
          const T *src = g.data() + (o * count + positions[s]) * inner;
          for (int64_t i = 0; i < inner; ++i)
            acc[i] += src[i];
        }
        for (int64_t i = 0; i < inner; ++i)
          storeFromDouble(out.data, out.dtype, task * inner + i, acc[i]);
      }
    });
    return llvm::Error::success();
  });
}

template <typename Word>
void scatterWords(const KernelContext &ctx, const Tensor &in, int64_t baseOffset,
                  const std::vector<int64_t> &dstStrides, const Tensor &out) {
  const Word *src = static_cast<const Word *>(in.data);
  Word *dst = static_cast<Word *>(out.data) + baseOffset;
  parallelFor(ctx, in.numElements(), 2, [&](int64_t begin, int64_t end) {
    StridedWalker<1> walker(in.shape, {dstStrides.data()}, begin);
    for (int64_t i = begin; i < end; ++i, walker.next())
      dst[walker.offset(0)] = src[i];
  });
}

template <typename Word> void fillWords(const KernelContext &ctx, const Tensor &out,
                                        const void *element) {
  Word value;
  std::memcpy(&value, element, sizeof(Word));
  Word *dst = static_cast<Word *>(out.data);
  parallelFor(ctx, out.numElements(), 1, [&](int64_t begin, int64_t end) {
    std::fill(dst + begin, dst + end, value);
  });
}

} // namespace

llvm::Error runEmbeddingGrad(const KernelCall &call) {
  const Tensor &ids = call.inputs[0], &grad = call.inputs[1], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(EmbeddingPlan plan, checkEmbeddingGrad(ids, grad, out, call.attrs));
  // A block of a vocabulary-parallel table: other blocks' ids are skipped.
  const bool block = plan.block;
  const int64_t vocab = plan.vocab, width = plan.width, start = plan.vocabStart;
  const int64_t bound = plan.bound;
  const int64_t count = ids.numElements();
  std::vector<int64_t> targets(count);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = loadInt(ids.data, ids.dtype, i);
    targets[i] = id - start;
    if (block && id >= bound)
      return kernelError("id " + llvm::Twine(id) + " at position " + llvm::Twine(i) +
                         " is outside the table's " + llvm::Twine(bound) + " rows");
    if (block && id >= 0 && (targets[i] < 0 || targets[i] >= vocab)) {
      targets[i] = -1;
      continue;
    }
    if (targets[i] < 0 || targets[i] >= vocab)
      return kernelError("id " + llvm::Twine(id) + " at position " + llvm::Twine(i) +
                         " is outside the table's " + llvm::Twine(vocab) + " rows");
  }
  return scatterAddSlices(call, grad, out, targets, 1, vocab, width);
}

llvm::Error runGatherGrad(const KernelCall &call) {
  const Tensor &indices = call.inputs[0], &grad = call.inputs[1];
  const Tensor &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(GatherPlan plan, checkGatherGrad(indices, grad, out, call.attrs));
  const int64_t axisSize = plan.axisSize;
  const int64_t count = indices.numElements();
  std::vector<int64_t> targets(count);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = loadInt(indices.data, indices.dtype, i);
    if (index < -axisSize || index >= axisSize)
      return kernelError("index " + llvm::Twine(index) + " at position " +
                         llvm::Twine(i) + " is outside [" + llvm::Twine(-axisSize) +
                         ", " + llvm::Twine(axisSize) + ")");
    targets[i] = index < 0 ? index + axisSize : index;
  }
  return scatterAddSlices(call, grad, out, targets, plan.outer, axisSize, plan.inner);
}

llvm::Error runPad(const KernelCall &call) {
  const Tensor &in = call.inputs[0], &out = call.outputs[0];
  LOOM_ASSIGN_OR_RETURN(PadPlan plan, checkPad(in, out, call.attrs));
  const size_t rank = in.shape.size();
  const double value = plan.value;
  const std::vector<int64_t> &low = plan.low, &interior = plan.interior;
  // The padding value as one element of the output's dtype.
  uint64_t element = 0;
  if (isIntLike(out.dtype))
    storeInt(&element, out.dtype, 0, static_cast<int64_t>(value));
  else
    storeFromDouble(&element, out.dtype, 0, value);
  const std::vector<int64_t> outStrides = contiguousStrides(out.shape);
  std::vector<int64_t> dstStrides(rank);
  int64_t base = 0;
  for (size_t d = 0; d < rank; ++d) {
    dstStrides[d] = outStrides[d] * (interior[d] + 1);
    base += low[d] * outStrides[d];
  }
  switch (dtypeSize(out.dtype)) {
  case 1:
    fillWords<uint8_t>(call.ctx, out, &element);
    scatterWords<uint8_t>(call.ctx, in, base, dstStrides, out);
    break;
  case 2:
    fillWords<uint16_t>(call.ctx, out, &element);
    scatterWords<uint16_t>(call.ctx, in, base, dstStrides, out);
    break;
  case 4:
    fillWords<uint32_t>(call.ctx, out, &element);
    scatterWords<uint32_t>(call.ctx, in, base, dstStrides, out);
    break;
  default:
    fillWords<uint64_t>(call.ctx, out, &element);
    scatterWords<uint64_t>(call.ctx, in, base, dstStrides, out);
    break;
  }
  return llvm::Error::success();
}

} // namespace loom::cpu::detail
