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

struct KernelSignature {
  std::string_view name;
  int minInputs, maxInputs, numOutputs; // -1: one or more
};
constexpr KernelSignature kSignatures[] = {
#define LOOM_KERNEL(NAME, MIN_INPUTS, MAX_INPUTS, NUM_OUTPUTS)                 \
  {NAME, MIN_INPUTS, MAX_INPUTS, NUM_OUTPUTS},
#include "runtime/abi/Kernels.def"
#undef LOOM_KERNEL
};

struct KernelImpl {
  std::string_view name;
  KernelFn fn;
};
constexpr KernelImpl kImplementations[] = {
    {"nn.neg", runUnary},          {"nn.abs", runUnary},
    {"nn.exp", runUnary},          {"nn.log", runUnary},
    {"nn.sqrt", runUnary},         {"nn.rsqrt", runUnary},
    {"nn.reciprocal", runUnary},   {"nn.tanh", runUnary},
    {"nn.erf", runUnary},          {"nn.sigmoid", runUnary},
    {"nn.silu", runUnary},         {"nn.relu", runUnary},
    {"nn.gelu", runUnary},         {"nn.add", runBinary},
    {"nn.sub", runBinary},         {"nn.mul", runBinary},
    {"nn.div", runBinary},         {"nn.pow", runBinary},
    {"nn.maximum", runBinary},     {"nn.minimum", runBinary},
    {"nn.compare", runCompare},    {"nn.where", runWhere},
    {"nn.cast", runCast},          {"nn.matmul", runMatmul},
    {"nn.scaled_matmul", runScaledMatmul},
    {"nn.reduce_sum", runReduce},  {"nn.reduce_mean", runReduce},
    {"nn.reduce_max", runReduce},  {"nn.softmax", runSoftmax},
    {"nn.log_softmax", runSoftmax}, {"nn.layer_norm", runLayerNorm},
    {"nn.rms_norm", runRmsNorm},   {"nn.rope", runRope},
    {"nn.attention", runAttention}, {"nn.embedding", runEmbedding},
    {"nn.transpose", runTranspose}, {"nn.broadcast", runBroadcast},
    {"nn.slice", runSlice},        {"nn.concat", runConcat},
    {"nn.split", runSplit},        {"nn.gather", runGather},
    {"nn.cross_entropy", runCrossEntropy}, {"nn.dropout", runDropout},
    {"nn.iota", runIota},
    {"nn.adamw", runAdamW},
    {"nn.adamw_multi", runAdamWMulti},
    {"nn.gelu_grad", runActivationGrad}, {"nn.silu_grad", runActivationGrad},
    {"nn.layer_norm_grad", runNormGrad}, {"nn.rms_norm_grad", runNormGrad},
    {"nn.attention_grad", runAttentionGrad},
    {"nn.embedding_grad", runEmbeddingGrad}, {"nn.gather_grad", runGatherGrad},
    {"nn.cross_entropy_grad", runCrossEntropyGrad}, {"nn.pad", runPad},
    {"nn.cross_entropy_stats", runCrossEntropyStats},
    {"nn.cross_entropy_combine", runCrossEntropyCombine},
    {"nn.cross_entropy_block_grad", runCrossEntropyBlockGrad},
};

const KernelSignature *findSignature(std::string_view name) {
  for (const KernelSignature &sig : kSignatures)
    if (sig.name == name)
      return &sig;
  return nullptr;
}

KernelFn findImplementation(std::string_view name) {
  for (const KernelImpl &impl : kImplementations)
    if (impl.name == name)
      return impl.fn;
  return nullptr;
}

llvm::Error checkArity(const KernelSignature &sig, size_t numInputs,
                       size_t numOutputs) {
  const bool inputsOk = static_cast<int64_t>(numInputs) >= sig.minInputs &&
                        (sig.maxInputs < 0 ||
                         static_cast<int64_t>(numInputs) <= sig.maxInputs);
  if (!inputsOk) {
    std::string expected =
        sig.maxInputs < 0 ? std::to_string(sig.minInputs) + " or more"
        : sig.minInputs == sig.maxInputs
            ? std::to_string(sig.minInputs)
            : std::to_string(sig.minInputs) + " to " + std::to_string(sig.maxInputs);
    return kernelError("takes " + expected + " inputs, got " +
                       llvm::Twine(numInputs));
  }
  const bool outputsOk = sig.numOutputs < 0
                             ? numOutputs >= 1
                             : static_cast<int64_t>(numOutputs) == sig.numOutputs;
  if (!outputsOk)
    return kernelError("produces " +
                       (sig.numOutputs < 0 ? std::string("1 or more")
                                           : std::to_string(sig.numOutputs)) +
                       " outputs, got " + llvm::Twine(numOutputs));
  return llvm::Error::success();
}

} // namespace

bool hasKernel(std::string_view name) {
  return findSignature(name) && findImplementation(name);
}

std::vector<std::string_view> kernelNames() {
  std::vector<std::string_view> names;
  for (const KernelSignature &sig : kSignatures)
    if (findImplementation(sig.name))
      names.push_back(sig.name);
  return names;
}

llvm::Error runKernel(std::string_view name, llvm::ArrayRef<Tensor> inputs,
                      llvm::ArrayRef<Tensor> outputs, const KernelAttrs &attrs,
                      const KernelContext &ctx) {
  const KernelSignature *sig = findSignature(name);
  KernelFn fn = findImplementation(name);
  if (!sig || !fn)
    return llvm::createStringError(
        std::make_error_code(std::errc::invalid_argument),
        "unknown kernel '" + llvm::Twine(name) + "'");
  auto prefixed = [&](llvm::Error err) -> llvm::Error {
    if (!err)
      return llvm::Error::success();
    return llvm::createStringError(std::make_error_code(std::errc::invalid_argument),
                                   llvm::Twine(name) + ": " +
                                       llvm::toString(std::move(err)));
  };
  if (llvm::Error err = checkArity(*sig, inputs.size(), outputs.size()))
    return prefixed(std::move(err));
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
  return prefixed(fn(KernelCall{name, inputs, outputs, attrs, sane}));
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
