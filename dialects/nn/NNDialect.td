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

#endif // LOOM_NN_DIALECT_TD
