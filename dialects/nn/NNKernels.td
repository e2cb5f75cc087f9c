#ifndef LOOM_NN_KERNELS_TD
#define LOOM_NN_KERNELS_TD

// The kernel contract. An nn op that lowers to a runtime kernel of its own
// name says so by deriving from NN_Kernel (NN_KernelOp does); loom-tblgen
// reads these records and writes the kernel list (runtime/abi/Kernels.def),
// the attribute schema the loader checks (runtime/abi/KernelAttrSchema.def)
// and the compiler's op -> kernel attribute functions. Nothing else names a
// kernel's arity or attributes.
//
// From the op's ODS:
// - arity: one input per operand (an Optional one may be absent; a Variadic
//   one is "one or more"), one output per result (Variadic: one or more);
// - attributes: each of the op's attributes, under its own name, with
//   defaults made explicit: flags (UnitAttr, BoolAttr) as Int 0/1, integers
//   as Int, floats as F64, strings and enums as Str, i64/f64 arrays as Ints/F64s;
// - has_<operand> (Int 0/1) for each Optional operand.

// An attribute a kernel reads that is not one of the op's own: `value` is a
// C++ expression over `$_op` (the typed op) giving it, or empty for one that a
// later pass sets on the call (schema only). A derived attribute replaces an
// op attribute of the same name (attention's effective scale).
class NN_KernelAttr<string attrName, string attrKind, code attrValue = "",
                    bit attrRequired = 0> {
  string name = attrName;
  string kind = attrKind; // Int, F64, Str, Ints or F64s
  code value = attrValue;
  // Whether every call carries it (always, when `value` derives it).
  bit required = !or(attrRequired, !ne(attrValue, ""));
}
// A name the kernel no longer reads (renamed or dropped): the loader refuses
// an executable that still carries it rather than run it with a default.
class NN_KernelRetiredAttr<string attrName> : NN_KernelAttr<attrName, "Retired">;
// One that every call of a kernel with no nn op carries.
class NN_KernelRequiredAttr<string attrName, string attrKind>
    : NN_KernelAttr<attrName, attrKind, "", 1>;

// What an elementwise kernel (a map over its result's elements, its operands
// broadcast NumPy-style) computes at one element, as data: a CUDA C++
// expression in f32 over its operands' values `$0`, `$1`, ... (each loaded and
// widened to f32). The CUDA backend's generated kernels for fusion groups
// (nn.fused: runtime/abi/FusedBody.h, kernels/fused/) are built from these
// alone, so the code generator knows no kernel by name. An expression may
// call CUDA's single-precision math functions (expf, logf, sqrtf, tanhf,
// erff, powf, fabsf) and the generated kernel's helper loom_sigmoid(x). It is
// compiled with FMA contraction off and IEEE division and square root, so it
// rounds as the kernel's own CUDA code does when written in the same order.
// With `attr`, the formula is for the calls whose string attribute `attr` is
// `value` (gelu's two approximations); a call that no formula matches has
// none, and a fusion group holding it runs op by op.
class NN_ScalarFormula<string formulaExpr, string formulaAttr = "",
                       string formulaValue = ""> {
  string expr = formulaExpr;
  string attr = formulaAttr;
  string value = formulaValue;
}

// Mixin for an op with a kernel. `kernelDoc` states the kernel's layout and
// semantics where the op's summary does not (it becomes Kernels.def's comment).
class NN_Kernel {
  string kernelDoc = "";
  list<NN_KernelAttr> kernelExtraAttrs = [];
  // Inputs a later pass may append to the call (a fused epilogue's bias).
  int kernelExtraInputs = 0;
  // Outputs the lowering appends to the call after the op's results: a
  // scratch buffer (NN_KernelScratchOpInterface says its type).
  int kernelExtraOutputs = 0;
  // The kernel's value at one element, for an elementwise kernel
  // (NN_ScalarFormula); empty for any other.
  list<NN_ScalarFormula> kernelScalarFormulas = [];
}

// A kernel with no nn op of its own: made by passes over rt programs (a
// multi-tensor optimizer step) or called directly (FP8 GEMM).
class NN_RuntimeKernel<string name, int minIn, int maxIn, int numOut,
                       list<NN_KernelAttr> attrs, string doc> {
  string kernelName = name;
  int minInputs = minIn;
  int maxInputs = maxIn;
  int numOutputs = numOut;
  list<NN_KernelAttr> kernelExtraAttrs = attrs;
  string kernelDoc = doc;
}

#endif
