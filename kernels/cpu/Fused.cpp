// nn.fused on the CPU: the body's members run one by one through their own
// kernels, values not yielded in scratch memory, so a fusion group computes
// bit for bit what its ops computed unfused (the reference the generated
// CUDA kernels are compared with).

#include "kernels/cpu/KernelSupport.h"
#include "runtime/abi/FusedBody.h"

#include <map>
#include <memory>
#include <mutex>
#include <new>

namespace loom::cpu::detail {

namespace {

/// Bodies parsed once per distinct text: a step calls the same groups again.
llvm::Expected<std::shared_ptr<const FusedBody>> parsedBody(const std::string &text) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const FusedBody>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(text);
  if (it != cache.end())
    return it->second;
  llvm::Expected<FusedBody> body = parseFusedBody(text);
  if (!body)
    return kernelError("body: " + llvm::toString(body.takeError()));
  // A program holds a bounded number of groups; a stream of distinct bodies
  // (a fuzzer) must not grow this without bound.
  if (cache.size() >= 4096)
    cache.clear();
  auto parsed = std::make_shared<const FusedBody>(std::move(*body));
  cache.emplace(text, parsed);
  return parsed;
}

std::vector<FusedTensorType> typesOf(llvm::ArrayRef<Tensor> tensors) {
  std::vector<FusedTensorType> types;
  for (const Tensor &t : tensors)
    types.push_back({t.dtype, t.shape});
  return types;
}

} // namespace

llvm::Error runFused(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(std::string text, call.attrs.getStr("body"));
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<const FusedBody> parsed, parsedBody(text));
  const FusedBody &body = *parsed;
  if (std::string problem = checkFusedCall(body, typesOf(call.inputs), typesOf(call.outputs));
      !problem.empty())
    return kernelError(problem);
  std::vector<int> outputOf(body.steps.size(), -1);
  for (size_t o = 0; o < body.yields.size(); ++o)
    outputOf[body.yields[o]] = static_cast<int>(o);
  // The values not yielded live in scratch memory. A body from the compiler
  // needs about as much as its call's buffers; a damaged one could ask for
  // any amount, which is refused rather than tried.
  uint64_t callBytes = 0, scratchBytes = 0;
  for (const Tensor &t : call.inputs)
    callBytes += t.sizeInBytes();
  for (const Tensor &t : call.outputs)
    callBytes += t.sizeInBytes();
  for (size_t j = 0; j < body.steps.size(); ++j)
    if (outputOf[j] < 0)
      scratchBytes += Tensor{nullptr, body.steps[j].result.dtype, body.steps[j].result.shape}
                          .sizeInBytes();
  if (scratchBytes > 16 * callBytes + (uint64_t(64) << 20))
    return kernelError("the body's values that are not yielded need " + llvm::Twine(scratchBytes) +
                       " bytes, far more than its call's buffers (" + llvm::Twine(callBytes) +
                       " bytes): a damaged body?");
  std::vector<std::vector<uint8_t>> scratch(body.steps.size());
  std::vector<Tensor> values(body.steps.size());
  for (size_t j = 0; j < body.steps.size(); ++j) {
    const FusedStep &step = body.steps[j];
    Tensor result{nullptr, step.result.dtype, step.result.shape};
    if (outputOf[j] >= 0) {
      result.data = call.outputs[outputOf[j]].data;
    } else {
      try {
        scratch[j].resize(std::max<size_t>(result.sizeInBytes(), 1));
      } catch (const std::bad_alloc &) {
        return kernelError("member %" + llvm::Twine(j) + ": cannot allocate " +
                           llvm::Twine(result.sizeInBytes()) + " bytes for its value");
      }
      result.data = scratch[j].data();
    }
    std::vector<Tensor> operands;
    for (const FusedRef &r : step.operands)
      operands.push_back(r.isInput ? call.inputs[r.index] : values[r.index]);
    if (llvm::Error err = runKernel(step.kernel, operands, {result}, KernelAttrs(step.attrs),
                                    call.ctx))
      return kernelError("member %" + llvm::Twine(j) + ": " + llvm::toString(std::move(err)));
    values[j] = std::move(result);
  }
  return llvm::Error::success();
}

} // namespace loom::cpu::detail
