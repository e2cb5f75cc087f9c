// nn.adamw: one AdamW update of an f32 parameter and its moments. Each
// element reads its own p, g, m, v and writes its own p', m', v', so the
// outputs may alias the inputs (the runtime updates parameters in place).
// nn.adamw_multi also writes the compute copies that attr copies names (the
// new parameter as nn.cast rounds it, e.g. to bf16) in the same pass.

#include "kernels/cpu/KernelSupport.h"

#include <cmath>

namespace loom::cpu::detail {

namespace {

struct AdamWHyper {
  double beta1, beta2, epsilon, decay;
  double lr, correction1, correction2;
};

llvm::Expected<AdamWHyper> readHyper(const KernelCall &call, const Tensor &lrT,
                                     const Tensor &stepT) {
  if (lrT.dtype != DType::F32 || product(lrT.shape) != 1 || stepT.dtype != DType::F32 ||
      product(stepT.shape) != 1)
    return kernelError("learning rate and step must be f32 scalars");
  AdamWHyper h;
  LOOM_ASSIGN_OR_RETURN(h.beta1, call.attrs.getF64("beta1"));
  LOOM_ASSIGN_OR_RETURN(h.beta2, call.attrs.getF64("beta2"));
  LOOM_ASSIGN_OR_RETURN(h.epsilon, call.attrs.getF64("epsilon"));
  if (call.attrs.has("weight_decay")) {
    LOOM_ASSIGN_OR_RETURN(h.decay, call.attrs.getF64("weight_decay"));
  } else {
    h.decay = 0;
  }
  h.lr = *static_cast<const float *>(lrT.data);
  double step = *static_cast<const float *>(stepT.data);
  if (!(step >= 1))
    return kernelError("step must be at least 1 (bias correction), got " + std::to_string(step));
  h.correction1 = 1.0 - std::pow(h.beta1, step);
  h.correction2 = 1.0 - std::pow(h.beta2, step);
  return h;
}

/// Element i of a compute copy: the bits nn.cast of the new f32 parameter
/// writes (runCast: the f32 widens exactly to f64 and storeFromDouble rounds
/// it once, to nearest even, NaN and overflow as FloatTypes.h says; to f32,
/// a plain copy).
inline void storeCopy(const Tensor &copy, int64_t i, float value) {
  if (copy.dtype == DType::F32)
    static_cast<float *>(copy.data)[i] = value;
  else
    storeFromDouble(copy.data, copy.dtype, i, static_cast<double>(value));
}

/// The update of one parameter. With `scale`, the gradient is first
/// multiplied by it in f32, exactly as a separate nn.mul would. With `copy`,
/// the new parameter is also written there, rounded as nn.cast rounds it.
void update(const KernelContext &ctx, AdamWHyper h, llvm::ArrayRef<Tensor> in,
            llvm::ArrayRef<Tensor> out, const float *scale, const Tensor *copy = nullptr) {
  const float *p = static_cast<const float *>(in[0].data);
  const float *g = static_cast<const float *>(in[1].data);
  const float *m = static_cast<const float *>(in[2].data);
  const float *v = static_cast<const float *>(in[3].data);
  float *pOut = static_cast<float *>(out[0].data);
  float *mOut = static_cast<float *>(out[1].data);
  float *vOut = static_cast<float *>(out[2].data);
  parallelFor(ctx, product(in[0].shape), 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double grad = scale ? g[i] * *scale : g[i];
      double m1 = h.beta1 * m[i] + (1 - h.beta1) * grad;
      double v1 = h.beta2 * v[i] + (1 - h.beta2) * grad * grad;
      double step = (m1 / h.correction1) / (std::sqrt(v1 / h.correction2) + h.epsilon);
      double p0 = p[i];
      const float p1 = static_cast<float>(p0 - h.lr * (h.decay * p0 + step));
      pOut[i] = p1;
      mOut[i] = static_cast<float>(m1);
      vOut[i] = static_cast<float>(v1);
      if (copy)
        storeCopy(*copy, i, p1);
    }
  });
}

} // namespace

llvm::Error runAdamW(const KernelCall &call) {
  LOOM_RETURN_IF_ERROR(checkAdamWGroup(call.inputs.take_front(4), call.outputs));
  LOOM_ASSIGN_OR_RETURN(AdamWHyper h, readHyper(call, call.inputs[4], call.inputs[5]));
  update(call.ctx, h, call.inputs.take_front(4), call.outputs, nullptr);
  return llvm::Error::success();
}

llvm::Error runAdamWMulti(const KernelCall &call) {
  LOOM_ASSIGN_OR_RETURN(AdamWMultiLayout layout,
                        checkAdamWMultiLayout(call.inputs, call.outputs, call.attrs));
  const size_t first = layout.first, groups = layout.groups;
  const float *scale = nullptr;
  if (layout.hasScale) {
    const Tensor &s = call.inputs[2];
    if (s.dtype != DType::F32 || product(s.shape) != 1)
      return kernelError("the gradient scale must be an f32 scalar");
    scale = static_cast<const float *>(s.data);
  }
  LOOM_ASSIGN_OR_RETURN(AdamWHyper h, readHyper(call, call.inputs[0], call.inputs[1]));
  LOOM_ASSIGN_OR_RETURN(std::vector<double> decays, call.attrs.getF64List("weight_decays"));
  if (decays.size() != groups)
    return kernelError("weight_decays has " + std::to_string(decays.size()) +
                       " entries for " + std::to_string(groups) + " parameters");
  for (size_t i = 0; i < groups; ++i)
    LOOM_RETURN_IF_ERROR(checkAdamWGroup(call.inputs.slice(first + 4 * i, 4),
                                    call.outputs.slice(3 * i, 3)));
  // copyOf[i]: parameter i's compute copy (attr copies), if any.
  std::vector<const Tensor *> copyOf(groups, nullptr);
  for (size_t j = 0; j < layout.copies.size(); ++j)
    copyOf[static_cast<size_t>(layout.copies[j])] = &call.outputs[3 * groups + j];
  for (size_t i = 0; i < groups; ++i) {
    h.decay = decays[i];
    update(call.ctx, h, call.inputs.slice(first + 4 * i, 4), call.outputs.slice(3 * i, 3),
           scale, copyOf[i]);
  }
  return llvm::Error::success();
}

} // namespace loom::cpu::detail
