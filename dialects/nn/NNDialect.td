#ifndef LOOM_NN_DIALECT_TD
#define LOOM_NN_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def NN_Dialect : Dialect {
  let name = "nn";
  let cppNamespace = "::loom::nn";
  let summary = "Loom's model-level operations on ranked tensors";
  let description = [{
    The `nn` dialect holds a model as imported from ONNX or torch.export, and
    the training step built from it: value-semantic ops on statically shaped
    builtin tensors. Every op verifies its operand and result types, infers
    its result type where it can, and names the problem when it cannot.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

def NN_FloatElement : AnyTypeOf<[F64, F32, F16, BF16, F8E4M3FN, F8E5M2],
                                 "floating-point">;
def NN_IndexElement : AnyTypeOf<[I32, I64], "32/64-bit integer">;
def NN_AnyElement : AnyTypeOf<[F64, F32, F16, BF16, F8E4M3FN, F8E5M2,
                               I64, I32, I1], "Loom element">;

def NN_FloatTensor : StaticShapeTensorOf<[NN_FloatElement]>;
def NN_IndexTensor : StaticShapeTensorOf<[NN_IndexElement]>;
def NN_BoolTensor : StaticShapeTensorOf<[I1]>;
def NN_Tensor : StaticShapeTensorOf<[NN_AnyElement]>;
// Arithmetic works on floats and the integer index types, not on i1.
def NN_NumericTensor : StaticShapeTensorOf<[NN_FloatElement, NN_IndexElement]>;

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

class NN_I32Enum<string name, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let cppNamespace = "::loom::nn";
  let genSpecializedAttr = 0;
}

class NN_EnumAttr<EnumAttrInfo info, string mnemonic>
    : EnumAttr<NN_Dialect, info, mnemonic> {
  let assemblyFormat = "$value";
}

def NN_GeluApproximation : NN_I32Enum<"GeluApproximation",
    "how gelu is computed", [
  I32EnumAttrCase<"none", 0>,
  I32EnumAttrCase<"tanh", 1>]>;
def NN_GeluApproximationAttr : NN_EnumAttr<NN_GeluApproximation, "gelu">;

def NN_RopeTranspose : NN_I32Enum<"RopeTranspose",
    "which side of nn.rope has dims -3 and -2 swapped", [
  I32EnumAttrCase<"none", 0>,
  I32EnumAttrCase<"input", 1>,
  I32EnumAttrCase<"result", 2>]>;
def NN_RopeTransposeAttr : NN_EnumAttr<NN_RopeTranspose, "rope_transpose">;

def NN_ComparePredicate : NN_I32Enum<"ComparePredicate",
    "elementwise comparison", [
  I32EnumAttrCase<"eq", 0>, I32EnumAttrCase<"ne", 1>,
  I32EnumAttrCase<"lt", 2>, I32EnumAttrCase<"le", 3>,
  I32EnumAttrCase<"gt", 4>, I32EnumAttrCase<"ge", 5>]>;
def NN_ComparePredicateAttr : NN_EnumAttr<NN_ComparePredicate, "predicate">;

def NN_LossReduction : NN_I32Enum<"LossReduction",
    "how per-example losses are combined", [
  I32EnumAttrCase<"mean", 0>, I32EnumAttrCase<"sum", 1>,
  I32EnumAttrCase<"none", 2>]>;
def NN_LossReductionAttr : NN_EnumAttr<NN_LossReduction, "reduction">;

def NN_InitKind : NN_I32Enum<"InitKind",
    "how a parameter is initialized when no weights are supplied", [
  I32EnumAttrCase<"zeros", 0>, I32EnumAttrCase<"ones", 1>,
  I32EnumAttrCase<"normal", 2>, I32EnumAttrCase<"uniform", 3>]>;
def NN_InitKindAttr : NN_EnumAttr<NN_InitKind, "init">;


//===----------------------------------------------------------------------===//
// FP8 precision policy (passes/fp8)
//===----------------------------------------------------------------------===//

def NN_Fp8Recipe : NN_I32Enum<"Fp8Recipe", "how an FP8 GEMM's operands are scaled", [
  // One scale per tensor from this step's amax (current scaling).
  I32EnumAttrCase<"tensorwise", 0>,
  // One scale per tensor from the largest amax of the last `history` steps.
  I32EnumAttrCase<"tensorwise_delayed", 1>,
  // One scale per row of the GEMM's operands (per token, per output feature).
  I32EnumAttrCase<"rowwise", 2>,
  // Activations in 1x128 tiles, weights in 128x128 blocks (DeepSeek-V3).
  I32EnumAttrCase<"blockwise", 3>]>;

def NN_Fp8Format : NN_I32Enum<"Fp8Format", "which FP8 formats a recipe uses", [
  // e4m3 for every operand.
  I32EnumAttrCase<"e4m3", 0>,
  // e4m3 for activations and weights, e5m2 for gradients.
  I32EnumAttrCase<"hybrid", 1>]>;

def NN_Fp8PolicyAttr : AttrDef<NN_Dialect, "Fp8Policy"> {
  let mnemonic = "fp8";
  let summary = "the FP8 recipe that governs a GEMM";
  let description = [{
    Set by `--loom-fp8-mark` as `nn.fp8` on the `nn.matmul` ops of linear
    layers, carried by autodiff onto their data- and weight-gradient GEMMs
    (with `gradient`: which operand is the result's gradient, the one that
    `hybrid` quantizes to e5m2), and expanded by `--loom-fp8-expand` into
    `nn.amax`, `nn.fp8_scale`, `nn.quantize` and `nn.scaled_matmul`.

    ```mlir
    %y = nn.matmul %x, %w {transpose_rhs, nn.fp8 = #nn.fp8<recipe = tensorwise, format = hybrid>} ...
    %dx = nn.matmul %dy, %w {nn.fp8 = #nn.fp8<recipe = tensorwise, format = hybrid, gradient = 0>} ...
    ```
  }];
  let parameters = (ins EnumParameter<NN_Fp8Recipe>:$recipe,
                        EnumParameter<NN_Fp8Format>:$format,
                        DefaultValuedParameter<"int64_t", "0">:$margin,
                        DefaultValuedParameter<"int64_t", "1">:$history,
                        DefaultValuedParameter<"int64_t", "-1">:$gradient);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // LOOM_NN_DIALECT_TD
