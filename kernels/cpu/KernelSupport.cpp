#include "kernels/cpu/KernelSupport.h"

#include <algorithm>
#include <limits>
#include <system_error>
#include <thread>

namespace loom::cpu {

using namespace detail;

//===----------------------------------------------------------------------===//
// Registry and dispatch
//===----------------------------------------------------------------------===//

namespace {

struct KernelImpl {
  KernelId id;
  KernelFn fn;
};
constexpr KernelImpl kImplementations[] = {
    {KernelId::Neg, runUnary},          {KernelId::Abs, runUnary},
    {KernelId::Exp, runUnary},          {KernelId::Log, runUnary},
    {KernelId::Sqrt, runUnary},         {KernelId::Rsqrt, runUnary},
    {KernelId::Reciprocal, runUnary},   {KernelId::Tanh, runUnary},
    {KernelId::Erf, runUnary},          {KernelId::Sigmoid, runUnary},
    {KernelId::Silu, runUnary},         {KernelId::Relu, runUnary},
    {KernelId::Gelu, runUnary},         {KernelId::Add, runBinary},
    {KernelId::Sub, runBinary},         {KernelId::Mul, runBinary},
    {KernelId::Div, runBinary},         {KernelId::Pow, runBinary},
    {KernelId::Maximum, runBinary},     {KernelId::Minimum, runBinary},
    {KernelId::Compare, runCompare},    {KernelId::Where, runWhere},
    {KernelId::Cast, runCast},          {KernelId::Matmul, runMatmul},
    {KernelId::ScaledMatmul, runScaledMatmul},
    {KernelId::ReduceSum, runReduce},  {KernelId::ReduceMean, runReduce},
    {KernelId::ReduceMax, runReduce},  {KernelId::Softmax, runSoftmax},
    {KernelId::LogSoftmax, runSoftmax}, {KernelId::LayerNorm, runLayerNorm},
    {KernelId::RmsNorm, runRmsNorm},   {KernelId::Rope, runRope},
    {KernelId::Attention, runAttention}, {KernelId::Embedding, runEmbedding},
    {KernelId::Transpose, runTranspose}, {KernelId::Broadcast, runBroadcast},
    {KernelId::Slice, runSlice},        {KernelId::Concat, runConcat},
    {KernelId::Split, runSplit},        {KernelId::Gather, runGather},
    {KernelId::CrossEntropy, runCrossEntropy},
    {KernelId::LinearCrossEntropy, runLinearCrossEntropy}, {KernelId::Dropout, runDropout},
    {KernelId::Iota, runIota},
    {KernelId::Adamw, runAdamW},
    {KernelId::AdamwMulti, runAdamWMulti}, {KernelId::SumSquaresMulti, runSumSquaresMulti},
    {KernelId::NormWeightGrad, runNormWeightGrad}, {KernelId::CastMulti, runCastMulti},
    {KernelId::Swiglu, runSwiglu}, {KernelId::SwigluGrad, runSwigluGrad},
    {KernelId::Quantize, runQuantize}, {KernelId::Dequantize, runDequantize},
    {KernelId::Amax, runAmax}, {KernelId::Fp8Scale, runFp8Scale},
    {KernelId::QuantizeTiles, runQuantizeTiles}, {KernelId::QuantizeTensor, runQuantizeTensor},
    {KernelId::GeluGrad, runActivationGrad}, {KernelId::SiluGrad, runActivationGrad},
    {KernelId::LayerNormGrad, runNormGrad}, {KernelId::RmsNormGrad, runNormGrad},
    {KernelId::AttentionGrad, runAttentionGrad},
    {KernelId::AttentionWithStats, runAttentionWithStats},
    {KernelId::AttentionGradWithStats, runAttentionGradWithStats},
    {KernelId::EmbeddingGrad, runEmbeddingGrad}, {KernelId::GatherGrad, runGatherGrad},
    {KernelId::CrossEntropyGrad, runCrossEntropyGrad}, {KernelId::Pad, runPad},
    {KernelId::CrossEntropyStats, runCrossEntropyStats},
    {KernelId::CrossEntropyCombine, runCrossEntropyCombine},
    {KernelId::CrossEntropyBlockGrad, runCrossEntropyBlockGrad},
    {KernelId::Router, runRouter}, {KernelId::Topk, runTopk}, {KernelId::Sort, runSort},
    {KernelId::GroupedMatmul, runGroupedMatmul},
    {KernelId::GroupedMatmulWeightGrad, runGroupedMatmulWeightGrad},
    {KernelId::Fused, runFused},
};

/// The implementation of each kernel of the contract, indexed by KernelId:
/// built once, so a launch indexes a table instead of comparing names.
const std::vector<KernelFn> &implementations() {
  static const std::vector<KernelFn> table = [] {
    std::vector<KernelFn> t(kNumKernels, nullptr);
    for (const KernelImpl &impl : kImplementations)
      t[kernelIndex(impl.id)] = impl.fn;
    return t;
  }();
  return table;
}

} // namespace

bool hasKernel(std::string_view name) {
  std::optional<KernelId> id = findKernel(name);
  return id && implementations()[kernelIndex(*id)];
}

std::vector<std::string_view> kernelNames() {
  std::vector<std::string_view> names;
  for (size_t i = 0; i < kNumKernels; ++i)
    if (implementations()[i])
      names.push_back(kKernelInfos[i].name);
  return names;
}

llvm::Error runKernel(std::string_view name, llvm::ArrayRef<Tensor> inputs,
                      llvm::ArrayRef<Tensor> outputs, const KernelAttrs &attrs,
                      const KernelContext &ctx) {
  std::optional<KernelId> id = findKernel(name);
  if (!id || !implementations()[kernelIndex(*id)])
    return llvm::createStringError(
        std::make_error_code(std::errc::invalid_argument),
        "unknown kernel '" + llvm::Twine(name) + "'");
  return runKernel(*id, inputs, outputs, attrs, ctx);
}

llvm::Error runKernel(KernelId id, llvm::ArrayRef<Tensor> inputs,
                      llvm::ArrayRef<Tensor> outputs, const KernelAttrs &attrs,
                      const KernelContext &ctx) {
  std::string_view name = kernelName(id);
  KernelFn fn = implementations()[kernelIndex(id)];
  if (!fn)
    return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                   "unknown kernel '" + llvm::Twine(name) + "'");
  auto prefixed = [&](llvm::Error err) -> llvm::Error {
    if (!err)
      return llvm::Error::success();
    return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                   llvm::Twine(name) + ": " +
                                       llvm::toString(std::move(err)));
  };
  // The FP8 scale epilogue (KernelList.h): the kernel on its own outputs,
  // then nn.amax and nn.fp8_scale of each listed output into its scale.
  if (attrs.has(kFp8ScaleOfAttr)) {
    Fp8ScaleEpilogueAttrs split;
    if (std::string problem = splitFp8ScaleEpilogue(attrs.all(), outputs.size(), split);
        !problem.empty())
      return prefixed(kernelError(problem));
    llvm::ArrayRef<Tensor> kernelOutputs = outputs.drop_back(split.outputs.size());
    if (llvm::Error err = runKernel(id, inputs, kernelOutputs, KernelAttrs(split.kernelAttrs), ctx))
      return err;
    KernelAttrs scaleAttrs;
    scaleAttrs.set("format", split.format).set("margin", split.margin);
    for (size_t j = 0; j < split.outputs.size(); ++j) {
      const Tensor &scale = outputs[kernelOutputs.size() + j];
      if (llvm::Error err =
              runKernel(KernelId::Amax, {kernelOutputs[split.outputs[j]]}, {scale}, KernelAttrs(), ctx))
        return prefixed(std::move(err));
      if (llvm::Error err = runKernel(KernelId::Fp8Scale, {scale}, {scale}, scaleAttrs, ctx))
        return prefixed(std::move(err));
    }
    return llvm::Error::success();
  }
  if (std::string arity = checkKernelArity(id, inputs.size(), outputs.size()); !arity.empty())
    return prefixed(kernelError(arity));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (llvm::Error err = checkTensor(inputs[i], "input"))
      return prefixed(kernelError("input " + llvm::Twine(i) + ": " +
                                  llvm::toString(std::move(err))));
  for (size_t i = 0; i < outputs.size(); ++i)
    if (llvm::Error err = checkTensor(outputs[i], "output"))
      return prefixed(kernelError("output " + llvm::Twine(i) + ": " +
                                  llvm::toString(std::move(err))));
  KernelContext sane = ctx;
  sane.numThreads = std::max(1, ctx.numThreads);
  return prefixed(fn(KernelCall{name, id, inputs, outputs, attrs, sane}));
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace detail {

void parallelFor(const KernelContext &ctx, int64_t count, int64_t costPerItem,
                 llvm::function_ref<void(int64_t begin, int64_t end)> body) {
  // Below this much work (roughly element operations) a thread costs more
  // than it saves.
  constexpr double kMinWorkPerThread = 32768;
  if (count <= 0)
    return;
  const double work = static_cast<double>(count) * std::max<int64_t>(costPerItem, 1);
  int64_t threads = std::min<int64_t>(ctx.numThreads, count);
  threads = std::min<int64_t>(threads, static_cast<int64_t>(work / kMinWorkPerThread));
  if (threads <= 1) {
    body(0, count);
    return;
  }
  const int64_t chunk = (count + threads - 1) / threads;
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  int64_t nextBegin = chunk; // chunk 0 runs on this thread
  for (; nextBegin < count; nextBegin += chunk) {
    const int64_t begin = nextBegin, end = std::min(count, nextBegin + chunk);
    try {
      workers.emplace_back([=] { body(begin, end); });
    } catch (const std::system_error &) {
      break; // out of threads: this thread does the rest
    }
  }
  body(0, std::min(chunk, count));
  for (int64_t begin = nextBegin; begin < count; begin += chunk)
    body(begin, std::min(count, begin + chunk));
  for (std::thread &worker : workers)
    worker.join();
}

int64_t loadInt(const void *data, DType type, int64_t index) {
  switch (type) {
  case DType::I64: {
    int64_t value;
    std::memcpy(&value, static_cast<const int64_t *>(data) + index, sizeof(value));
    return value;
  }
  case DType::I32: {
    int32_t value;
    std::memcpy(&value, static_cast<const int32_t *>(data) + index, sizeof(value));
    return value;
  }
  case DType::I1:
    return static_cast<const uint8_t *>(data)[index] != 0;
  default: { // a float type: truncate, saturating (see storeFromDouble)
    int64_t value;
    storeFromDouble(&value, DType::I64, 0, loadAsDouble(data, type, index));
    return value;
  }
  }
}

void storeInt(void *data, DType type, int64_t index, int64_t value) {
  switch (type) {
  case DType::I64:
    std::memcpy(static_cast<int64_t *>(data) + index, &value, sizeof(value));
    return;
  case DType::I32: {
    const int32_t narrowed = static_cast<int32_t>(static_cast<uint32_t>(value));
    std::memcpy(static_cast<int32_t *>(data) + index, &narrowed, sizeof(narrowed));
    return;
  }
  case DType::I1:
    static_cast<uint8_t *>(data)[index] = value != 0;
    return;
  default:
    storeFromDouble(data, type, index, static_cast<double>(value));
  }
}

} // namespace detail
} // namespace loom::cpu
