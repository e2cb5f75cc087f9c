// nn.adamw: one AdamW update of an f32 parameter and its moments. Each
// element reads its own p, g, m, v and writes its own p', m', v', so the
// outputs may alias the inputs (the runtime updates parameters in place).

#include "kernels/cpu/KernelSupport.h"

#include <cmath>

namespace loom::cpu::detail {

llvm::Error runAdamW(const KernelCall &call) {
  const Tensor &param = call.inputs[0];
  for (size_t i = 0; i < 4; ++i) {
    LOOM_RETURN_IF_ERROR(checkTensor(call.inputs[i], "operand"));
    LOOM_RETURN_IF_ERROR(checkSameShape(call.inputs[i], "operand", param, "param"));
    if (call.inputs[i].dtype != DType::F32)
      return kernelError("parameter, gradient and moments must be f32");
  }
  for (size_t i = 4; i < 6; ++i)
    if (call.inputs[i].dtype != DType::F32 || product(call.inputs[i].shape) != 1)
      return kernelError("learning rate and step must be f32 scalars");
  for (const Tensor &out : call.outputs) {
    LOOM_RETURN_IF_ERROR(checkSameShape(out, "result", param, "param"));
    if (out.dtype != DType::F32)
      return kernelError("results must be f32");
  }
  LOOM_ASSIGN_OR_RETURN(double beta1, call.attrs.getF64("beta1"));
  LOOM_ASSIGN_OR_RETURN(double beta2, call.attrs.getF64("beta2"));
  LOOM_ASSIGN_OR_RETURN(double epsilon, call.attrs.getF64("epsilon"));
  LOOM_ASSIGN_OR_RETURN(double decay, call.attrs.getF64("weight_decay"));
  double lr = *static_cast<const float *>(call.inputs[4].data);
  double step = *static_cast<const float *>(call.inputs[5].data);
  if (!(step >= 1))
    return kernelError("step must be at least 1 (bias correction), got " + std::to_string(step));
  double correction1 = 1.0 - std::pow(beta1, step);
  double correction2 = 1.0 - std::pow(beta2, step);

  const float *p = static_cast<const float *>(param.data);
  const float *g = static_cast<const float *>(call.inputs[1].data);
  const float *m = static_cast<const float *>(call.inputs[2].data);
  const float *v = static_cast<const float *>(call.inputs[3].data);
  float *pOut = static_cast<float *>(call.outputs[0].data);
  float *mOut = static_cast<float *>(call.outputs[1].data);
  float *vOut = static_cast<float *>(call.outputs[2].data);
  parallelFor(call.ctx, product(param.shape), 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double grad = g[i];
      double m1 = beta1 * m[i] + (1 - beta1) * grad;
      double v1 = beta2 * v[i] + (1 - beta2) * grad * grad;
      double update = (m1 / correction1) / (std::sqrt(v1 / correction2) + epsilon);
      double p0 = p[i];
      pOut[i] = static_cast<float>(p0 - lr * (decay * p0 + update));
      mOut[i] = static_cast<float>(m1);
      vOut[i] = static_cast<float>(v1);
    }
  });
  return llvm::Error::success();
}

} // namespace loom::cpu::detail
