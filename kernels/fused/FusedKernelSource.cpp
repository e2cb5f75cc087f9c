#include "kernels/fused/FusedKernelSource.h"

#include <algorithm>

namespace loom::fused {

namespace {

llvm::Error error(const std::string &message) {
  return llvm::createStringError(std::errc::invalid_argument, "%s", message.c_str());
}

/// How a value of a dtype is stored and converted (the prelude's helpers).
struct Storage {
  const char *cType;
  const char *load, *store, *round; // round: empty for f32
  int bytes;
};

Storage storageOf(DType t) {
  switch (t) {
  case DType::BF16:
    return {"unsigned short", "loom_load_bf16", "loom_store_bf16", "loom_round_bf16", 2};
  case DType::F16:
    return {"unsigned short", "loom_load_f16", "loom_store_f16", "loom_round_f16", 2};
  case DType::I1: // 0 or 1 in f32, a byte in memory (never vectorized)
    return {"unsigned char", "loom_load_i1", "loom_store_i1", "loom_round_i1", 1};
  default: // f32 (fusedCodegenProblem admits nothing else)
    return {"float", "loom_load_f32", "loom_store_f32", "", 4};
  }
}

// Helpers every generated kernel starts with. The conversions are the CPU
// reference's (runtime/support/FloatTypes.cpp): bf16 rounds to nearest even
// on the raw bits, NaNs stay quiet NaNs; f16 converts in hardware, to
// nearest even; i1 is 0 or 1 (any nonzero value stores 1). loom_sigmoid is
// the elementwise kernels' branch-free form.
constexpr const char *kPrelude = R"(__device__ __forceinline__ float loom_load_f32(float x) { return x; }
__device__ __forceinline__ float loom_store_f32(float v) { return v; }
__device__ __forceinline__ float loom_load_bf16(unsigned short x) {
  return __uint_as_float(((unsigned int)x) << 16);
}
__device__ __forceinline__ unsigned short loom_store_bf16(float v) {
  const unsigned int bits = __float_as_uint(v);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    const unsigned short narrowed = (unsigned short)(bits >> 16);
    return (narrowed & 0x7F) ? narrowed : (unsigned short)(narrowed | 0x40);
  }
  return (unsigned short)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float loom_load_f16(unsigned short x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
  return f;
}
__device__ __forceinline__ unsigned short loom_store_f16(float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
__device__ __forceinline__ float loom_load_i1(unsigned char x) { return x != 0 ? 1.0f : 0.0f; }
__device__ __forceinline__ unsigned char loom_store_i1(float v) { return v != 0.0f ? 1 : 0; }
__device__ __forceinline__ float loom_round_i1(float v) { return v != 0.0f ? 1.0f : 0.0f; }
__device__ __forceinline__ float loom_round_bf16(float v) { return loom_load_bf16(loom_store_bf16(v)); }
__device__ __forceinline__ float loom_round_f16(float v) { return loom_load_f16(loom_store_f16(v)); }
__device__ __forceinline__ float loom_sigmoid(float x) {
  const bool nonNegative = x >= 0.0f;
  const float e = expf(nonNegative ? -x : x);
  return (nonNegative ? 1.0f : e) / (1.0f + e);
}
struct alignas(16) loom_vec16 { unsigned int w[4]; };
)";

/// `formula` with each `$N` replaced by the N-th operand's variable.
llvm::Expected<std::string> substitute(std::string_view formula,
                                       const std::vector<std::string> &operands,
                                       const std::string &label) {
  std::string out;
  for (size_t i = 0; i < formula.size();) {
    if (formula[i] != '$') {
      out += formula[i++];
      continue;
    }
    size_t j = i + 1;
    size_t index = 0;
    while (j < formula.size() && formula[j] >= '0' && formula[j] <= '9' && j - i < 4)
      index = index * 10 + (formula[j++] - '0');
    if (j == i + 1 || index >= operands.size())
      return error(label + ": its scalar formula '" + std::string(formula) + "' reads $" +
                   std::string(formula.substr(i + 1, j - i - 1)) + ", and it has " +
                   std::to_string(operands.size()) + " operands");
    out += "(" + operands[index] + ")";
    i = j;
  }
  return out;
}

/// The loop's dims (size-1 dims dropped, neighbours merged where every
/// strided tensor steps through them alike) and each strided tensor's
/// element strides over them (0 where it repeats).
struct LoopPlan {
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides; // per strided tensor
};

LoopPlan planLoop(const std::vector<int64_t> &loop,
                  const std::vector<const std::vector<int64_t> *> &shapes) {
  const size_t rank = loop.size();
  std::vector<std::vector<int64_t>> full(shapes.size(), std::vector<int64_t>(rank, 0));
  for (size_t t = 0; t < shapes.size(); ++t) {
    const std::vector<int64_t> &shape = *shapes[t];
    int64_t stride = 1;
    for (size_t k = shape.size(); k-- > 0;) {
      size_t d = rank - shape.size() + k;
      if (shape[k] == loop[d] && shape[k] != 1)
        full[t][d] = stride;
      stride *= shape[k];
    }
  }
  LoopPlan plan;
  plan.strides.resize(shapes.size());
  for (size_t d = 0; d < rank; ++d) {
    if (loop[d] == 1)
      continue;
    if (!plan.dims.empty()) {
      const size_t last = plan.dims.size() - 1;
      bool mergeable = true;
      for (size_t t = 0; t < shapes.size(); ++t)
        mergeable = mergeable && plan.strides[t][last] == full[t][d] * loop[d];
      if (mergeable) {
        plan.dims[last] *= loop[d];
        for (size_t t = 0; t < shapes.size(); ++t)
          plan.strides[t][last] = full[t][d];
        continue;
      }
    }
    plan.dims.push_back(loop[d]);
    for (size_t t = 0; t < shapes.size(); ++t)
      plan.strides[t].push_back(full[t][d]);
  }
  return plan;
}

int64_t count(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

} // namespace

llvm::Expected<FusedKernelSource> generateFusedKernel(const FusedBody &body) {
  if (std::string problem = fusedCodegenProblem(body); !problem.empty())
    return error(problem);
  const std::vector<int64_t> loop = *fusedLoopShape(body);
  const int64_t n = count(loop);
  const size_t numInputs = body.inputs.size(), numOutputs = body.yields.size();

  FusedKernelSource kernel;
  kernel.entry = "loom_fused";
  kernel.elements = n;

  // Which inputs the members read, and which tensors cover the whole loop
  // (read or written at the loop position itself: vectorizable).
  std::vector<bool> used(numInputs, false);
  for (const FusedStep &s : body.steps)
    for (const FusedRef &r : s.operands)
      if (r.isInput)
        used[r.index] = true;
  auto outputType = [&](size_t o) -> const FusedTensorType & {
    return body.steps[body.yields[o]].result;
  };
  std::vector<bool> inputFull(numInputs), outputFull(numOutputs);
  std::vector<const std::vector<int64_t> *> stridedShapes;
  std::vector<int> inputStrided(numInputs, -1), outputStrided(numOutputs, -1);
  // i1 tensors (bytes) are read and written one element at a time.
  auto vectorizable = [](DType t) { return storageOf(t).bytes >= 2; };
  int minBytes = 0;
  for (size_t k = 0; k < numInputs; ++k) {
    inputFull[k] = count(body.inputs[k].shape) == n;
    if (!used[k])
      continue;
    if (inputFull[k]) {
      if (!vectorizable(body.inputs[k].dtype))
        continue;
      int bytes = storageOf(body.inputs[k].dtype).bytes;
      minBytes = minBytes ? std::min(minBytes, bytes) : bytes;
    } else {
      inputStrided[k] = static_cast<int>(stridedShapes.size());
      stridedShapes.push_back(&body.inputs[k].shape);
    }
  }
  for (size_t o = 0; o < numOutputs; ++o) {
    outputFull[o] = count(outputType(o).shape) == n;
    if (outputFull[o]) {
      if (!vectorizable(outputType(o).dtype))
        continue;
      int bytes = storageOf(outputType(o).dtype).bytes;
      minBytes = minBytes ? std::min(minBytes, bytes) : bytes;
    } else {
      outputStrided[o] = static_cast<int>(stridedShapes.size());
      stridedShapes.push_back(&outputType(o).shape);
    }
  }
  const int width = minBytes ? 16 / minBytes : 1;
  kernel.vectorWidth = width;
  for (size_t k = 0; k < numInputs; ++k)
    kernel.vectorInputs.push_back(width > 1 && used[k] && inputFull[k] &&
                                  vectorizable(body.inputs[k].dtype));
  for (size_t o = 0; o < numOutputs; ++o)
    kernel.vectorOutputs.push_back(width > 1 && outputFull[o] &&
                                   vectorizable(outputType(o).dtype));
  const LoopPlan plan = planLoop(loop, stridedShapes);

  // 32-bit positions when every position (and a grid stride past the last)
  // fits; strided offsets never exceed positions.
  const bool wide = n >= (int64_t(1) << 31);
  const std::string index = wide ? "long long" : "unsigned int";
  auto literal = [&](int64_t v) { return std::to_string(v) + (wide ? "ll" : "u"); };

  // The body at one position `i`: the inputs' values, the members' values,
  // the stores. `vectorLoop`: whole-loop inputs come from x<k>[e] and
  // whole-loop outputs go to y<o>[e] (the vector loads and stores around it).
  auto elementCode = [&](bool vectorLoop, const std::string &indent) -> llvm::Expected<std::string> {
    std::string code;
    if (!plan.dims.empty() && !stridedShapes.empty()) {
      code += indent + index + " q = i;\n";
      for (size_t d = plan.dims.size(); d-- > 0;) {
        if (d == 0) {
          code += indent + "const " + index + " c0 = q;\n";
        } else {
          code += indent + "const " + index + " c" + std::to_string(d) + " = q % " +
                  literal(plan.dims[d]) + ";\n";
          code += indent + "q /= " + literal(plan.dims[d]) + ";\n";
        }
      }
    }
    auto offset = [&](int strided) {
      std::string text;
      for (size_t d = 0; d < plan.dims.size(); ++d) {
        int64_t stride = plan.strides[strided][d];
        if (stride == 0)
          continue;
        text += (text.empty() ? "" : " + ") + std::string("c") + std::to_string(d) +
                (stride == 1 ? "" : " * " + literal(stride));
      }
      return text.empty() ? std::string("0") : text;
    };
    std::vector<std::string> inputVar(numInputs);
    for (size_t k = 0; k < numInputs; ++k) {
      if (!used[k])
        continue;
      inputVar[k] = "a" + std::to_string(k);
      Storage st = storageOf(body.inputs[k].dtype);
      std::string value;
      if (!inputFull[k])
        value = std::string(st.load) + "(in" + std::to_string(k) + "[" + offset(inputStrided[k]) + "])";
      else if (vectorLoop && kernel.vectorInputs[k])
        value = "x" + std::to_string(k) + "[e]";
      else
        value = std::string(st.load) + "(in" + std::to_string(k) + "[i])";
      code += indent + "const float " + inputVar[k] + " = " + value + ";\n";
    }
    for (size_t j = 0; j < body.steps.size(); ++j) {
      const FusedStep &s = body.steps[j];
      std::vector<std::string> operands;
      for (const FusedRef &r : s.operands)
        operands.push_back(r.isInput ? inputVar[r.index] : "v" + std::to_string(r.index));
      std::string label = "member %" + std::to_string(j) + " (" +
                          std::string(kernelName(s.kernel)) + ")";
      auto expr = substitute(*scalarFormula(s.kernel, s.attrs), operands, label);
      if (!expr)
        return expr.takeError();
      Storage st = storageOf(s.result.dtype);
      std::string value = *st.round ? std::string(st.round) + "(" + *expr + ")" : *expr;
      code += indent + "const float v" + std::to_string(j) + " = " + value + "; // " +
              std::string(kernelName(s.kernel)) + "\n";
    }
    for (size_t o = 0; o < numOutputs; ++o) {
      std::string v = "v" + std::to_string(body.yields[o]);
      Storage st = storageOf(outputType(o).dtype);
      if (outputFull[o]) {
        if (vectorLoop && kernel.vectorOutputs[o])
          code += indent + "y" + std::to_string(o) + "[e] = " + v + ";\n";
        else
          code += indent + "out" + std::to_string(o) + "[i] = " + st.store + "(" + v + ");\n";
        continue;
      }
      // Written by the position whose repeated coordinates are all 0.
      std::string predicate;
      for (size_t d = 0; d < plan.dims.size(); ++d)
        if (plan.strides[outputStrided[o]][d] == 0)
          predicate += (predicate.empty() ? "" : " && ") + std::string("c") +
                       std::to_string(d) + " == 0";
      code += indent + (predicate.empty() ? "" : "if (" + predicate + ") ") + "out" +
              std::to_string(o) + "[" + offset(outputStrided[o]) + "] = " + st.store + "(" +
              v + ");\n";
    }
    return code;
  };

  std::string src;
  src += "// Generated by Loom (kernels/fused/FusedKernelSource.cpp) for an nn.fused group:\n";
  src += "//   " + describeFusedBody(body) + "\n";
  src += "// body: " + printFusedBody(body) + "\n";
  src += "// loop: " + std::to_string(n) + " positions over [";
  for (size_t d = 0; d < loop.size(); ++d)
    src += (d ? "," : "") + std::to_string(loop[d]);
  src += "], " + std::to_string(width) + " per thread in the vector loop\n\n";
  src += kPrelude;
  src += "\nextern \"C\" __global__ void __launch_bounds__(" + std::to_string(kFusedBlockSize) +
         ") " + kernel.entry + "(";
  for (size_t k = 0; k < numInputs; ++k)
    src += std::string(k ? ", " : "") + "const " + storageOf(body.inputs[k].dtype).cType +
           " *__restrict__ in" + std::to_string(k);
  for (size_t o = 0; o < numOutputs; ++o)
    src += std::string(numInputs + o ? ", " : "") + storageOf(outputType(o).dtype).cType +
           " *out" + std::to_string(o);
  src += ", int vectorized) {\n";
  if (n == 0) { // nothing to compute (the backend does not launch it)
    kernel.vectorWidth = 1;
    kernel.vectorInputs.assign(numInputs, false);
    kernel.vectorOutputs.assign(numOutputs, false);
    src += "  (void)vectorized;\n}\n";
    kernel.source = std::move(src);
    return kernel;
  }
  src += "  const " + index + " n = " + literal(n) + ";\n";
  src += "  const " + index + " stride = (" + index + ")gridDim.x * blockDim.x;\n";
  src += "  const " + index + " first = (" + index + ")blockIdx.x * blockDim.x + threadIdx.x;\n";
  if (width > 1) {
    const std::string w = std::to_string(width);
    src += "  const " + index + " vectors = vectorized ? n / " + literal(width) + " : 0;\n";
    src += "  for (" + index + " v = first; v < vectors; v += stride) {\n";
    // Vector loads: 16 bytes at a time, unpacked to f32.
    for (size_t k = 0; k < numInputs; ++k) {
      if (!kernel.vectorInputs[k])
        continue;
      Storage st = storageOf(body.inputs[k].dtype);
      const int perWord = 4 / st.bytes, vecs = width * st.bytes / 16;
      const std::string ks = std::to_string(k);
      src += "    float x" + ks + "[" + w + "];\n    {\n";
      src += "      const loom_vec16 *p = reinterpret_cast<const loom_vec16 *>(in" + ks + ") + v * " +
             literal(vecs) + ";\n";
      for (int j = 0; j < vecs; ++j) {
        src += "      const loom_vec16 r" + std::to_string(j) + " = p[" + std::to_string(j) + "];\n";
        for (int wd = 0; wd < 4; ++wd) {
          std::string word = "r" + std::to_string(j) + ".w[" + std::to_string(wd) + "]";
          int e = (j * 4 + wd) * perWord;
          if (perWord == 1)
            src += "      x" + ks + "[" + std::to_string(e) + "] = __uint_as_float(" + word + ");\n";
          else
            src += "      x" + ks + "[" + std::to_string(e) + "] = " + st.load + "((unsigned short)(" +
                   word + " & 0xFFFFu)); x" + ks + "[" + std::to_string(e + 1) + "] = " + st.load +
                   "((unsigned short)(" + word + " >> 16));\n";
        }
      }
      src += "    }\n";
    }
    for (size_t o = 0; o < numOutputs; ++o)
      if (kernel.vectorOutputs[o])
        src += "    float y" + std::to_string(o) + "[" + w + "];\n";
    src += "#pragma unroll\n";
    src += "    for (int e = 0; e < " + w + "; ++e) {\n";
    src += "      const " + index + " i = v * " + literal(width) + " + e;\n";
    src += "      (void)i;\n";
    auto vectorBody = elementCode(true, "      ");
    if (!vectorBody)
      return vectorBody.takeError();
    src += *vectorBody + "    }\n";
    // Vector stores: packed from f32, 16 bytes at a time.
    for (size_t o = 0; o < numOutputs; ++o) {
      if (!kernel.vectorOutputs[o])
        continue;
      Storage st = storageOf(outputType(o).dtype);
      const int perWord = 4 / st.bytes, vecs = width * st.bytes / 16;
      const std::string os = std::to_string(o);
      src += "    {\n      loom_vec16 *p = reinterpret_cast<loom_vec16 *>(out" + os + ") + v * " +
             literal(vecs) + ";\n";
      for (int j = 0; j < vecs; ++j) {
        src += "      loom_vec16 r" + std::to_string(j) + ";\n";
        for (int wd = 0; wd < 4; ++wd) {
          std::string word = "r" + std::to_string(j) + ".w[" + std::to_string(wd) + "]";
          int e = (j * 4 + wd) * perWord;
          if (perWord == 1)
            src += "      " + word + " = __float_as_uint(y" + os + "[" + std::to_string(e) + "]);\n";
          else
            src += "      " + word + " = (unsigned int)" + st.store + "(y" + os + "[" +
                   std::to_string(e) + "]) | ((unsigned int)" + st.store + "(y" + os + "[" +
                   std::to_string(e + 1) + "]) << 16);\n";
        }
        src += "      p[" + std::to_string(j) + "] = r" + std::to_string(j) + ";\n";
      }
      src += "    }\n";
    }
    src += "  }\n";
    src += "  for (" + index + " i = vectors * " + literal(width) + " + first; i < n; i += stride) {\n";
  } else {
    src += "  (void)vectorized;\n";
    src += "  for (" + index + " i = first; i < n; i += stride) {\n";
  }
  auto scalarBody = elementCode(false, "    ");
  if (!scalarBody)
    return scalarBody.takeError();
  src += *scalarBody + "  }\n}\n";
  kernel.source = std::move(src);
  return kernel;
}

} // namespace loom::fused
