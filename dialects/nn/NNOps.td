#ifndef LOOM_NN_OPS_TD
#define LOOM_NN_OPS_TD

include "dialects/nn/NNDialect.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "dialects/nn/NNInterfaces.td"
include "dialects/nn/NNKernels.td"

// Every nn op states its sharding rule (dialects/nn/NNShardingRules.cpp).
class NN_Op<string mnemonic, list<Trait> traits = []>
    : Op<NN_Dialect, mnemonic, !listconcat(traits,
        [DeclareOpInterfaceMethods<NN_ShardingRuleOpInterface>])>;

// An nn op that lowers to the runtime kernel of its own name (NNKernels.td).
class NN_KernelOp<string mnemonic, list<Trait> traits = []>
    : NN_Op<mnemonic, traits>, NN_Kernel;

//===----------------------------------------------------------------------===//
// Constants and parameters
//===----------------------------------------------------------------------===//

def NN_ConstantOp : NN_Op<"constant",
    [ConstantLike, Pure, AllTypesMatch<["value", "result"]>, DeclareOpInterfaceMethods<NN_SpmdLocalizeOpInterface>,
     DeclareOpInterfaceMethods<NN_IntegerRangeOpInterface, ["inferIntegerRange"]>]> {
  let summary = "a constant tensor";
  let description = [{
    ```mlir
    %0 = nn.constant dense<[1.0, 2.0]> : tensor<2xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

def NN_ParameterOp : NN_Op<"parameter", [Pure]> {
  let summary = "a named model parameter or buffer";
  let description = [{
    A tensor that lives across steps: a weight (trainable) or a buffer such as
    rotary frequencies (not trainable). `name` is the fully-qualified name the
    model gave it (`model.layers.0.mlp.up_proj.weight`), which checkpoints and
    weight files use. Its value comes from `value` when present (weights
    imported with the model), else from weights supplied at run time, else
    from the seeded initializer `init` (scaled by `init_scale`).

    `module_path`, when the importer knows it, is the path of the model's
    module that holds the parameter (`model.layers.0.mlp.up_proj`), taken
    from the model's module tree (torch.export's state-dict names and
    `nn_module_stack`, ONNX node scopes), not from the name's spelling:
    pipeline partitioning finds the model's layers by it.

    ```mlir
    %w = nn.parameter "lm_head.weight" init(normal, 0.02) : tensor<64x32xf32>
    %f = nn.parameter "rope.inv_freq" frozen : tensor<8xf32>
    %u = nn.parameter "w3" : tensor<64x32xf32> module "model.layers.3.mlp.up_proj"
    ```
  }];
  let arguments = (ins
    StrAttr:$name,
    UnitAttr:$frozen,
    DefaultValuedAttr<NN_InitKindAttr, "::loom::nn::InitKind::zeros">:$init,
    DefaultValuedAttr<F64Attr, "0.0">:$init_scale,
    OptionalAttr<ElementsAttr>:$value,
    OptionalAttr<StrAttr>:$module_path);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $name (`frozen` $frozen^)? `` custom<ParamInit>($init, $init_scale)
    (`value` `(` $value^ `)`)? attr-dict `:` type($result)
    (`module` $module_path^)?
  }];
  let builders = [
    // A parameter whose module is not known (or set later).
    OpBuilder<(ins "::mlir::Type":$type, "::mlir::StringAttr":$name,
                   "::mlir::UnitAttr":$frozen, "::loom::nn::InitKindAttr":$init,
                   "::mlir::FloatAttr":$init_scale, "::mlir::ElementsAttr":$value), [{
      build($_builder, $_state, type, name, frozen, init, init_scale, value,
            ::mlir::StringAttr());
    }]>,
  ];
  let extraClassDeclaration = [{
    bool isTrainable() { return !getFrozen(); }
  }];
  let hasVerifier = 1;
}

def NN_IotaOp : NN_KernelOp<"iota", [Pure]> {
  let kernelDoc = [{
    out[i] = start + i * step along attr dim, broadcast over the other dims.
  }];
  let summary = "start + i * step along one dimension";
  let description = [{
    `result[..., i, ...] = start + i * step` where `i` indexes `dim`; the
    other dimensions repeat the same values (arange, positions).

    ```mlir
    %p = nn.iota dim = 0 : tensor<16xi64>
    ```
  }];
  let arguments = (ins I64Attr:$dim,
                   DefaultValuedAttr<F64Attr, "0.0">:$start,
                   DefaultValuedAttr<F64Attr, "1.0">:$step);
  let results = (outs NN_NumericTensor:$result);
  let assemblyFormat = "`dim` `=` $dim attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class NN_UnaryOp<string mnemonic, Type operandType, list<Trait> traits = []>
    : NN_KernelOp<mnemonic, !listconcat([Pure, SameOperandsAndResultType,
        DeclareOpInterfaceMethods<NN_GradientOpInterface>, NN_FusibleOpInterface], traits)> {
  let arguments = (ins operandType:$input);
  let results = (outs operandType:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let extraClassDefinition = [{
    ::loom::nn::ShardingRule $cppClass::getShardingRule() {
      return ::loom::nn::elementwiseShardingRule(*this, /*linear=*/false);
    }
  }];
}

def NN_NegOp : NN_UnaryOp<"neg", NN_NumericTensor> { let summary = "-x"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"-$0">];
}
def NN_AbsOp : NN_UnaryOp<"abs", NN_NumericTensor> { let summary = "|x|"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"fabsf($0)">];
}
def NN_ExpOp : NN_UnaryOp<"exp", NN_FloatTensor> { let summary = "e^x"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"expf($0)">];
}
def NN_LogOp : NN_UnaryOp<"log", NN_FloatTensor> { let summary = "natural log"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"logf($0)">];
}
def NN_SqrtOp : NN_UnaryOp<"sqrt", NN_FloatTensor> { let summary = "square root"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"sqrtf($0)">];
}
def NN_RsqrtOp : NN_UnaryOp<"rsqrt", NN_FloatTensor> { let summary = "1/sqrt(x)"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"1.0f / sqrtf($0)">];
}
def NN_ReciprocalOp : NN_UnaryOp<"reciprocal", NN_FloatTensor> { let summary = "1/x"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"1.0f / $0">];
}
def NN_TanhOp : NN_UnaryOp<"tanh", NN_FloatTensor> { let summary = "tanh"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"tanhf($0)">];
}
def NN_ErfOp : NN_UnaryOp<"erf", NN_FloatTensor> { let summary = "error function"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"erff($0)">];
}
def NN_SigmoidOp : NN_UnaryOp<"sigmoid", NN_FloatTensor> { let summary = "1/(1+e^-x)"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"loom_sigmoid($0)">];
}
def NN_SiluOp : NN_UnaryOp<"silu", NN_FloatTensor> { let summary = "x * sigmoid(x)"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"$0 * loom_sigmoid($0)">];
}
def NN_ReluOp : NN_UnaryOp<"relu", NN_FloatTensor> { let summary = "max(x, 0)"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"($0 != $0 ? $0 : ($0 > 0.0f ? $0 : 0.0f))">];
}

def NN_GeluOp : NN_KernelOp<"gelu", [Pure, SameOperandsAndResultType,
                              DeclareOpInterfaceMethods<NN_GradientOpInterface>,
                              NN_FusibleOpInterface]> {
  let kernelDoc = [{
    attr approximate: "none" | "tanh"
  }];
  let kernelScalarFormulas = [
    NN_ScalarFormula<"$0 * 0.5f * (1.0f + erff($0 * 0.70710678118654752440f))",
                     "approximate", "none">,
    NN_ScalarFormula<"0.5f * $0 * (1.0f + tanhf(0.79788456080286535588f * "
                     "($0 + 0.044715f * $0 * $0 * $0)))", "approximate", "tanh">];
  let summary = "Gaussian error linear unit, exact or tanh-approximated";
  let description = [{
    `none`: x/2 (1 + erf(x/sqrt(2))); `tanh`: x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))).

    ```mlir
    %y = nn.gelu %x approximate = tanh : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input,
      DefaultValuedAttr<NN_GeluApproximationAttr,
                        "::loom::nn::GeluApproximation::none">:$approximate);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input (`approximate` `=` `` $approximate^)? attr-dict `:` type($result)
  }];
}

// Binary ops broadcast their operands NumPy-style; operand element types match.
class NN_BinaryOp<string mnemonic, list<Trait> traits = []>
    : NN_KernelOp<mnemonic, !listconcat([Pure, SameOperandsAndResultElementType,
        InferTypeOpAdaptor, DeclareOpInterfaceMethods<NN_GradientOpInterface>,
        NN_FusibleOpInterface], traits)> {
  let arguments = (ins NN_NumericTensor:$lhs, NN_NumericTensor:$rhs);
  let results = (outs NN_NumericTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDefinition = [{
    ::loom::nn::ShardingRule $cppClass::getShardingRule() {
      return ::loom::nn::binaryShardingRule(*this);
    }
  }];
}

def NN_AddOp : NN_BinaryOp<"add", [Commutative, DeclareOpInterfaceMethods<NN_IntegerRangeOpInterface, ["inferIntegerRange"]>]> { let summary = "a + b"; 
  let hasCanonicalizer = 1;
  let kernelScalarFormulas = [NN_ScalarFormula<"$0 + $1">];
}
def NN_SubOp : NN_BinaryOp<"sub", [DeclareOpInterfaceMethods<NN_IntegerRangeOpInterface, ["inferIntegerRange"]>]> { let summary = "a - b"; 
  let hasCanonicalizer = 1;
  let kernelScalarFormulas = [NN_ScalarFormula<"$0 - $1">];
}
def NN_MulOp : NN_BinaryOp<"mul", [Commutative, DeclareOpInterfaceMethods<NN_IntegerRangeOpInterface, ["inferIntegerRange"]>]> { let summary = "a * b"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"$0 * $1">];
}
def NN_DivOp : NN_BinaryOp<"div", [DeclareOpInterfaceMethods<NN_IntegerRangeOpInterface, ["inferIntegerRange"]>]> { let summary = "a / b"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"$0 / $1">];
}
def NN_PowOp : NN_BinaryOp<"pow"> { let summary = "a ^ b"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"powf($0, $1)">];
}
def NN_MaximumOp : NN_BinaryOp<"maximum", [Commutative, NN_IntegerRangeOpInterface]> { let summary = "max(a, b)"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"($0 != $0 ? $0 : $1 != $1 ? $1 : ($0 > $1 ? $0 : $1))">];
}
def NN_MinimumOp : NN_BinaryOp<"minimum", [Commutative, NN_IntegerRangeOpInterface]> { let summary = "min(a, b)"; 
  let kernelScalarFormulas = [NN_ScalarFormula<"($0 != $0 ? $0 : $1 != $1 ? $1 : ($0 < $1 ? $0 : $1))">];
}

def NN_CompareOp : NN_KernelOp<"compare", [Pure, SameOperandsElementType,
                                     InferTypeOpAdaptor, DeclareOpInterfaceMethods<NN_GradientOpInterface>,
                                     NN_FusibleOpInterface, DeclareOpInterfaceMethods<NN_IntegerRangeOpInterface, ["inferIntegerRange"]>]> {
  let kernelDoc = [{
    attr predicate: eq|ne|lt|le|gt|ge; out i1. Broadcasting.
  }];
  // An i1 value is 0 or 1 in f32.
  let kernelScalarFormulas = [
    NN_ScalarFormula<"($0 == $1 ? 1.0f : 0.0f)", "predicate", "eq">,
    NN_ScalarFormula<"($0 != $1 ? 1.0f : 0.0f)", "predicate", "ne">,
    NN_ScalarFormula<"($0 < $1 ? 1.0f : 0.0f)", "predicate", "lt">,
    NN_ScalarFormula<"($0 <= $1 ? 1.0f : 0.0f)", "predicate", "le">,
    NN_ScalarFormula<"($0 > $1 ? 1.0f : 0.0f)", "predicate", "gt">,
    NN_ScalarFormula<"($0 >= $1 ? 1.0f : 0.0f)", "predicate", "ge">];
  let summary = "elementwise comparison, broadcasting, giving i1";
  let description = [{
    ```mlir
    %m = nn.compare lt, %a, %b : (tensor<4x1xi64>, tensor<4xi64>) -> tensor<4x4xi1>
    ```
  }];
  let arguments = (ins NN_ComparePredicateAttr:$predicate,
                   NN_Tensor:$lhs, NN_Tensor:$rhs);
  let results = (outs NN_BoolTensor:$result);
  let assemblyFormat = [{
    `` $predicate `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
}

def NN_WhereOp : NN_KernelOp<"where", [Pure, InferTypeOpAdaptor,
                                 DeclareOpInterfaceMethods<NN_GradientOpInterface>,
                                 NN_FusibleOpInterface,
                                 DeclareOpInterfaceMethods<NN_IntegerRangeOpInterface, ["inferIntegerRange"]>]> {
  let kernelDoc = [{
    cond (i1), a, b; broadcasting
  }];
  let kernelScalarFormulas = [NN_ScalarFormula<"($0 != 0.0f ? $1 : $2)">];
  let summary = "cond ? a : b, elementwise with broadcasting";
  let arguments = (ins NN_BoolTensor:$condition, NN_Tensor:$lhs, NN_Tensor:$rhs);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $condition `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
  let hasCanonicalizer = 1;
}

def NN_CastOp : NN_KernelOp<"cast", [Pure, DeclareOpInterfaceMethods<NN_GradientOpInterface>,
                                NN_KeepsResultPrecision, DeclareOpInterfaceMethods<NN_IntegerRangeOpInterface, ["inferIntegerRange"]>,
                                DeclareOpInterfaceMethods<NN_FusibleOpInterface, ["getFusionKind"]>]> {
  let kernelDoc = [{
    any dtype to any dtype
  }];
  // The value as it is; the result's element type rounds it.
  let kernelScalarFormulas = [NN_ScalarFormula<"$0">];
  let summary = "element type conversion (round to nearest even for floats)";
  let description = [{
    ```mlir
    %b = nn.cast %a : tensor<4xf32> -> tensor<4xbf16>
    ```
  }];
  let arguments = (ins NN_Tensor:$input);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Contractions and reductions
//===----------------------------------------------------------------------===//

def NN_MatmulOp : NN_KernelOp<"matmul", [Pure, SameOperandsElementType,
                                   InferTypeOpAdaptorWithIsCompatible,
                                   DeclareOpInterfaceMethods<NN_GradientOpInterface>,
                                   DeclareOpInterfaceMethods<NN_FlopCountOpInterface>,
                                   DeclareOpInterfaceMethods<NN_WidenableResultOpInterface>]> {
  let kernelDoc = [{
    a [..., M, K] (or [..., K, M] with transpose_lhs), b [..., K, N] (or
    [..., N, K] with transpose_rhs); batch dims broadcast. attr epilogue (set by
    --loom-fuse-matmul-epilogue): "none", "bias" (a third operand [N] added to
    every row), "gelu" (tanh approximation), "bias_gelu", or "add" (a third
    operand of the result's shape and dtype added to it: a residual, or a
    sum the GEMM continues; one rounding on the GPU, cuBLASLt's beta = 1,
    the product rounded and then the add on the CPU). The result is a's
    dtype, or f32 with bf16/f16 operands (products accumulated in f32 and
    written unrounded).
  }];
  let kernelExtraAttrs = [NN_KernelAttr<"epilogue", "Str">,
                          // Until 2026-11: the flags' names in executables.
                          NN_KernelRetiredAttr<"transpose_a">,
                          NN_KernelRetiredAttr<"transpose_b">];
  let kernelExtraInputs = 1;
  let summary = "batched matrix product with optional transposes";
  let description = [{
    `lhs` is `[..., M, K]` (`[..., K, M]` with `transpose_lhs`), `rhs` is
    `[..., K, N]` (`[..., N, K]` with `transpose_rhs`); batch dimensions
    broadcast. A linear layer `x W^T` is `nn.matmul %x, %w {transpose_rhs}`.
    The result has the operands' element type, or f32 when they are bf16 or
    f16: the products are accumulated in f32 either way, and an f32 result
    is written without rounding (what `--loom-widen-results` makes of a
    GEMM followed by a cast to f32).

    ```mlir
    %y = nn.matmul %x, %w {transpose_rhs} : (tensor<2x16x64xf32>, tensor<128x64xf32>) -> tensor<2x16x128xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$lhs, NN_FloatTensor:$rhs,
                   UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
}

class NN_ReduceOp<string mnemonic, Type elementType>
    : NN_KernelOp<mnemonic, [Pure, SameOperandsAndResultElementType,
                       InferTypeOpAdaptor, DeclareOpInterfaceMethods<NN_GradientOpInterface>,
                       DeclareOpInterfaceMethods<NN_FusibleOpInterface, ["getFusionKind"]>]> {
  let arguments = (ins elementType:$input, DenseI64ArrayAttr:$dims,
                   UnitAttr:$keepdim);
  let results = (outs elementType:$result);
  let assemblyFormat = [{
    $input `dims` `=` $dims (`keepdim` $keepdim^)? attr-dict `:`
    type($input) `->` type($result)
  }];
  let hasFolder = 1;
  let extraClassDefinition = [{
    ::loom::nn::ShardingRule $cppClass::getShardingRule() {
      return ::loom::nn::reductionShardingRule(*this);
    }
    ::loom::nn::FusionKind $cppClass::getFusionKind() {
      return ::loom::nn::reductionFusionKind(*this);
    }
  }];
}

def NN_ReduceSumOp : NN_ReduceOp<"reduce_sum", NN_NumericTensor> {
  let summary = "sum over dims";
}
def NN_ReduceMeanOp : NN_ReduceOp<"reduce_mean", NN_FloatTensor> {
  let summary = "mean over dims";
}
def NN_ReduceMaxOp : NN_ReduceOp<"reduce_max", NN_NumericTensor> {
  let summary = "maximum over dims";
}

class NN_SoftmaxLikeOp<string mnemonic> : NN_KernelOp<mnemonic,
    [Pure, SameOperandsAndResultType, DeclareOpInterfaceMethods<NN_GradientOpInterface>]> {
  let arguments = (ins NN_FloatTensor:$input, I64Attr:$dim);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `dim` `=` $dim attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::loom::nn::ShardingRule $cppClass::getShardingRule() {
      return ::loom::nn::wholeDimShardingRule(*this, getDim());
    }
  }];
}
def NN_SoftmaxOp : NN_SoftmaxLikeOp<"softmax"> {
  let summary = "exp(x) / sum(exp(x)) along dim";
}
def NN_LogSoftmaxOp : NN_SoftmaxLikeOp<"log_softmax"> {
  let summary = "x - logsumexp(x) along dim";
}

//===----------------------------------------------------------------------===//
// Transformer layers
//===----------------------------------------------------------------------===//

def NN_LayerNormOp : NN_KernelOp<"layer_norm", [Pure, AttrSizedOperandSegments,
                                          DeclareOpInterfaceMethods<NN_GradientOpInterface>]> {
  let kernelDoc = [{
    x [..., D], optional weight [D], optional bias [D]; attrs epsilon (f64),
    has_weight, has_bias (0/1) say which optional inputs are present.
  }];
  let summary = "layer normalization over the last dimension";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * weight + bias` over the last dim,
    with the biased variance. `weight` and `bias` are optional, shaped `[D]`;
    either may be given without the other.

    ```mlir
    %y = nn.layer_norm %x, weight %w, bias %b epsilon = 1.0e-05 : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    %z = nn.layer_norm %x, bias %b : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input,
                   Optional<NN_FloatTensor>:$weight,
                   Optional<NN_FloatTensor>:$bias,
                   DefaultValuedAttr<F64Attr, "1e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `` custom<NormAffine>($weight, $bias) (`epsilon` `=` $epsilon^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_RmsNormOp : NN_KernelOp<"rms_norm", [Pure, DeclareOpInterfaceMethods<NN_GradientOpInterface>]> {
  let kernelDoc = [{
    x, optional weight; attrs epsilon, has_weight
  }];
  let summary = "root-mean-square normalization over the last dimension";
  let description = [{
    `x / sqrt(mean(x^2) + epsilon) * weight`; `weight` is optional, `[D]`.

    ```mlir
    %y = nn.rms_norm %x, weight %w epsilon = 1.0e-06 : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input,
                   Optional<NN_FloatTensor>:$weight,
                   DefaultValuedAttr<F64Attr, "1e-6">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input (`,` `weight` $weight^)? (`epsilon` `=` $epsilon^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_RopeOp : NN_KernelOp<"rope", [Pure, DeclareOpInterfaceMethods<NN_GradientOpInterface>,
                                     DeclareOpInterfaceMethods<NN_TransposeAbsorbingOpInterface>]> {
  let kernelDoc = [{
    x [B, H, S, D], cos [S, D], sin [S, D]; attr interleaved (0: rotate halves
    as Llama does; 1: rotate adjacent pairs); attr transpose: "none", "input"
    (x is [B, S, H, D], the result [B, H, S, D]) or "result" (x is
    [B, H, S, D], the result [B, S, H, D]).
  }];
  let summary = "rotary position embedding";
  let description = [{
    `x` is `[..., S, D]` (D even), `cos` and `sin` are `[S, D]`. By default
    the halves rotate (`x * cos + rotate_half(x) * sin`, as Llama does); with
    `interleaved`, adjacent pairs rotate (GPT-J).

    `transpose` folds a swap of dims -3 and -2 (heads and positions) into
    the op: with `input`, `x` is `[..., S, H, D]` and the result is the rope
    of its transpose, `[..., H, S, D]`; with `result`, `x` is
    `[..., H, S, D]` and the result is the transpose of its rope,
    `[..., S, H, D]`. `--loom-fold-transposes` sets it, after autodiff (the
    gradient rule takes `none` only).

    ```mlir
    %q2 = nn.rope %q, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$cos,
                   NN_FloatTensor:$sin, UnitAttr:$interleaved,
                   DefaultValuedAttr<NN_RopeTransposeAttr,
                                     "::loom::nn::RopeTranspose::none">:$transpose);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $cos `,` $sin (`transpose` `=` `` $transpose^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let builders = [
    // Untransposed (what importers and gradient rules build).
    OpBuilder<(ins "::mlir::Type":$type, "::mlir::Value":$input, "::mlir::Value":$cos,
                   "::mlir::Value":$sin, "::mlir::UnitAttr":$interleaved), [{
      build($_builder, $_state, type, input, cos, sin, interleaved,
            ::loom::nn::RopeTransposeAttr::get($_builder.getContext(),
                                               ::loom::nn::RopeTranspose::none));
    }]>,
  ];
}

def NN_AttentionOp : NN_KernelOp<"attention", [Pure, SameOperandsAndResultElementType,
                                         InferTypeOpAdaptor, DeclareOpInterfaceMethods<NN_GradientOpInterface>,
    DeclareOpInterfaceMethods<NN_TransposeAbsorbingOpInterface>,
                                         DeclareOpInterfaceMethods<NN_FlopCountOpInterface>]> {
  let kernelDoc = [{
    q [B, Hq, S, D], k/v [B, Hkv, Skv, D], Hq % Hkv == 0; attrs causal (0/1),
    window (0: none; W > 0 with causal: query i sees keys j with
    i + Skv - S - W < j <= i + Skv - S), scale (f64, the effective one), seq_major (bit i: tensor i of the call,
    inputs then outputs, is [B, S, H, D]; on all four attention kernels, never
    the lse). out [B, Hq, S, Dv].
  }];
  let kernelExtraAttrs = [NN_KernelAttr<"scale", "F64", "$_op.getEffectiveScale()">];
  let summary = "scaled dot-product attention, optionally causal, with grouped KV heads";
  let description = [{
    `softmax(q k^T * scale + mask) v` per head. `q` is `[B, Hq, S, D]`, `k`
    is `[B, Hkv, Skv, D]`, `v` is `[B, Hkv, Skv, Dv]`; `Hq` is a multiple of
    `Hkv` (grouped-query attention: query head `h` reads KV head
    `h / (Hq / Hkv)`). `causal` lets query `i` see keys `j <= i + Skv - S`;
    a `window` W > 0 (only with `causal`: a sliding window, as Mistral's,
    Gemma's and EXAONE's local layers use) also hides keys `j <= i + Skv -
    S - W`, so each query sees at most its last W keys. `scale` defaults to
    `1/sqrt(D)`.

    `seq_major` (a bit mask, default 0) stores some tensors sequence-major:
    bit `i` set means the op's tensor `i` (operands, then results) is
    `[B, S, H, D]` rather than `[B, H, S, D]`, as a projection's reshape
    gives it. The same bits mean the same on `nn.attention_with_stats`,
    `nn.attention_grad` and `nn.attention_grad_with_stats`; the statistics
    `lse` have one layout only. `--loom-fold-transposes` sets them in place
    of the transposes around attention.

    ```mlir
    %o = nn.attention %q, %k, %v causal : (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>) -> tensor<1x8x16x32xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                   NN_FloatTensor:$value, UnitAttr:$causal,
                   OptionalAttr<F64Attr>:$scale,
                   DefaultValuedAttr<I64Attr, "0">:$seq_major,
                   OptionalAttr<I64Attr>:$window);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`causal` $causal^)? (`window` `=` $window^)? (`scale` `=` $scale^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The scale actually applied: `scale`, or 1/sqrt(head dim).
    double getEffectiveScale();
  }];
}

def NN_AttentionWithStatsOp : NN_KernelOp<"attention_with_stats", [Pure,
    SameOperandsElementType, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<NN_TransposeAbsorbingOpInterface>, DeclareOpInterfaceMethods<NN_FlopCountOpInterface>]> {
  let kernelDoc = [{
    q, k, v and attrs causal, window, scale as nn.attention -> out (nn.attention's
    output) and lse [B, Hq, S] f32: per query row, the natural logsumexp of
    its scaled visible scores, max + log(sum exp(s - max)); -inf for a row
    that sees no key.
  }];
  let kernelExtraAttrs = [NN_KernelAttr<"scale", "F64", "$_op.getEffectiveScale()">];
  let summary = "nn.attention that also returns its softmax statistics";
  let description = [{
    Operands, attributes and `result` are those of `nn.attention`. `lse`
    (`[B, Hq, S]`, f32 whatever the operands' type) holds, per query row
    `i` of head `h`, the logsumexp of the row's scores in natural-log units:
    with `s_j = scale * (q_i . k_j)` over the keys `j` the row sees (all of
    them, or `j <= i + Skv - S` when causal),
    `lse = m + log(sum_j exp(s_j - m))`, `m = max_j s_j`, so that the
    softmax probabilities are `exp(s_j - lse)`. This is cuDNN's `Stats`
    tensor of its SDPA forward (`[B, H, S, 1]`). A row that sees no key has
    `lse = -inf` (and a zero output).

    `nn.attention_grad_with_stats` reads `result` and `lse` instead of
    recomputing the forward; `--loom-attention-stats` makes the pair.

    ```mlir
    %o, %lse = nn.attention_with_stats %q, %k, %v causal : (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>) -> (tensor<1x8x16x32xf32>, tensor<1x8x16xf32>)
    ```
  }];
  let arguments = (ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                   NN_FloatTensor:$value, UnitAttr:$causal,
                   OptionalAttr<F64Attr>:$scale,
                   DefaultValuedAttr<I64Attr, "0">:$seq_major,
                   OptionalAttr<I64Attr>:$window);
  let results = (outs NN_FloatTensor:$result, StaticShapeTensorOf<[F32]>:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`causal` $causal^)? (`window` `=` $window^)? (`scale` `=` $scale^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The scale actually applied: `scale`, or 1/sqrt(head dim).
    double getEffectiveScale();
  }];
}

def NN_EmbeddingOp : NN_KernelOp<"embedding", [Pure, InferTypeOpAdaptor,
                                         DeclareOpInterfaceMethods<NN_GradientOpInterface>,
                                         DeclareOpInterfaceMethods<NN_SpmdLocalizeOpInterface>]> {
  let kernelDoc = [{
    table [V, D], ids (i32/i64) [...] -> [..., D]; attr vocab_start, when
    given: the table is rows [vocab_start, vocab_start + V) of a larger one,
    and other ids give zero rows (a vocabulary-parallel block).
  }];
  let summary = "rows of a table selected by integer ids";
  let description = [{
    `result[p] = table[ids[p]]`; an id outside the table is an error.

    With `vocab_start`, the table is a block of a larger one that starts at
    id `vocab_start` (a vocabulary-parallel embedding: each rank holds a
    block of rows): an id in `[vocab_start, vocab_start + rows)` selects row
    `id - vocab_start`, and any other id gives a zero row, so the blocks'
    results add up to the whole table's lookup. `vocab_size`, when given,
    is the whole table's row count: an id outside it is an error on every
    block.

    ```mlir
    %h = nn.embedding %table, %ids : (tensor<100x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
    %p = nn.embedding %block, %ids {vocab_start = 50 : i64} : (tensor<50x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$table, NN_IndexTensor:$ids,
                   OptionalAttr<I64Attr>:$vocab_start, OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $ids attr-dict `:` functional-type(operands, results)
  }];
}

def NN_CrossEntropyOp : NN_KernelOp<"cross_entropy", [Pure, InferTypeOpAdaptor,
                                                 DeclareOpInterfaceMethods<NN_GradientOpInterface>,
                                                 DeclareOpInterfaceMethods<NN_ClassParallelLossOpInterface>, NN_KeepsResultPrecision]> {
  let kernelDoc = [{
    logits [N, C], labels [N] (i32/i64); attrs ignore_index, reduction
    ("mean" | "sum" | "none"). out f32: [] or [N].
  }];
  let summary = "softmax cross-entropy of logits against integer labels";
  let description = [{
    `logits` is `[N, C]`, `labels` is `[N]`. Rows whose label equals
    `ignore_index` contribute nothing; `mean` divides by the rows that count.
    The result is f32: a scalar for `mean`/`sum`, `[N]` for `none`.

    ```mlir
    %l = nn.cross_entropy %logits, %labels : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<f32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$logits, NN_IndexTensor:$labels,
      DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
      DefaultValuedAttr<NN_LossReductionAttr,
                        "::loom::nn::LossReduction::mean">:$reduction);
  let results = (outs StaticShapeTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $logits `,` $labels (`reduction` `=` `` $reduction^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def NN_DropoutOp : NN_KernelOp<"dropout", [Pure, SameOperandsAndResultType,
                                     DeclareOpInterfaceMethods<NN_GradientOpInterface>]> {
  let kernelDoc = [{
    attrs p (f64), seed (int). Keeps element i when uniform(seed, i) >= p and
    scales it by 1/(1-p); uniform() is the counter-based hash in kernels/cpu.
  }];
  let summary = "zeroes elements with probability p, scales the rest by 1/(1-p)";
  let description = [{
    The mask is a function of `seed` and the element index (a counter-based
    hash, see kernels/cpu), so it is reproducible and needs no state.

    ```mlir
    %y = nn.dropout %x p = 1.0e-01 seed = 42 : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, F64Attr:$p, I64Attr:$seed);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `p` `=` $p `seed` `=` $seed attr-dict `:` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def NN_StopGradientOp : NN_Op<"stop_gradient", [Pure, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<NN_GradientOpInterface>]> {
  let summary = "the value, through which no gradient flows (torch's no_grad, detach)";
  let description = [{
    The importer puts one on each float result of a subgraph computed under
    `torch.no_grad` (an exported `wrap_with_set_grad_enabled(False, ...)`)
    and on a `detach`. Autodiff sends nothing back through it;
    `--loom-build-training-step` then replaces it by its input, and an
    inference compile drops it after raising, so no kernel ever runs it. Of
    a constant it is the constant.

    ```mlir
    %s = nn.stop_gradient %scores : tensor<8x16xf32>
    ```
  }];
  let arguments = (ins NN_Tensor:$input);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasFolder = 1;
  let extraClassDefinition = [{
    ::loom::nn::ShardingRule $cppClass::getShardingRule() {
      return ::loom::nn::elementwiseShardingRule(*this, /*linear=*/false);
    }
  }];
}

def NN_ReshapeOp : NN_Op<"reshape", [NN_IntegerRangeOpInterface, Pure, SameOperandsAndResultElementType,
                                     DeclareOpInterfaceMethods<NN_GradientOpInterface>]> {
  let summary = "same elements, new shape";
  let arguments = (ins NN_Tensor:$input);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def NN_OffloadOp : NN_Op<"offload", [SameOperandsAndResultType]> {
  let summary = "a saved activation moved to host memory until its backward";
  let description = [{
    The same value, held in host memory (a buffer of the host arena): the
    forward's copy to the host, on the host-copy stream, after its last
    forward use (`--loom-offload-activations`). Only `nn.reload` reads it.
    Not pure: a copy that moves memory stays where it was put.

    ```mlir
    %h = nn.offload %a : tensor<4x8xbf16>
    %b = nn.reload %h : tensor<4x8xbf16>
    ```
  }];
  let arguments = (ins NN_Tensor:$input);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def NN_ReloadOp : NN_Op<"reload", [SameOperandsAndResultType]> {
  let summary = "an offloaded activation brought back to the device";
  let description = [{
    The value of an `nn.offload`, back in device memory for the backward
    that reads it: a copy on the host-copy stream before its first backward
    use.
  }];
  let arguments = (ins NN_Tensor:$input);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def NN_TransposeOp : NN_KernelOp<"transpose", [NN_IntegerRangeOpInterface, Pure, SameOperandsAndResultElementType,
                                         InferTypeOpAdaptor, DeclareOpInterfaceMethods<NN_GradientOpInterface>]> {
  let kernelDoc = [{
    attr permutation
  }];
  let summary = "permutes dimensions: result dim i is input dim permutation[i]";
  let arguments = (ins NN_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $input `permutation` `=` $permutation attr-dict `:` type($input) `->` type($result)
  }];
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def NN_BroadcastOp : NN_KernelOp<"broadcast", [NN_IntegerRangeOpInterface, Pure, SameOperandsAndResultElementType,
                                         DeclareOpInterfaceMethods<NN_GradientOpInterface>,
                                         DeclareOpInterfaceMethods<NN_FusibleOpInterface, ["getFusionKind"]>]> {
  let kernelDoc = [{
    NumPy broadcasting to the output's shape
  }];
  let kernelScalarFormulas = [NN_ScalarFormula<"$0">];
  let summary = "NumPy-style broadcast to the result's shape";
  let arguments = (ins NN_Tensor:$input);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def NN_SliceOp : NN_KernelOp<"slice", [NN_IntegerRangeOpInterface, Pure, SameOperandsAndResultElementType,
                                 InferTypeOpAdaptor, DeclareOpInterfaceMethods<NN_GradientOpInterface>,
                                 DeclareOpInterfaceMethods<NN_SpmdLocalizeOpInterface>]> {
  let kernelDoc = [{
    attrs starts, strides (per dim); sizes = out shape
  }];
  let summary = "strided slice: [start, limit) step stride, per dimension";
  let arguments = (ins NN_Tensor:$input, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$limits, DenseI64ArrayAttr:$strides);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $input `starts` `=` $starts `limits` `=` $limits `strides` `=` $strides
    attr-dict `:` type($input) `->` type($result)
  }];
  let hasFolder = 1;
}

def NN_ConcatOp : NN_KernelOp<"concat", [NN_IntegerRangeOpInterface, Pure, SameOperandsAndResultElementType,
                                   InferTypeOpAdaptor, DeclareOpInterfaceMethods<NN_GradientOpInterface>]> {
  let kernelDoc = [{
    attr dim
  }];
  let summary = "joins tensors along dim";
  let arguments = (ins Variadic<NN_Tensor>:$inputs, I64Attr:$dim);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $inputs `dim` `=` $dim attr-dict `:` functional-type($inputs, results)
  }];
  let hasFolder = 1;
}

def NN_SplitOp : NN_KernelOp<"split", [Pure, SameOperandsAndResultElementType,
                                 DeclareOpInterfaceMethods<NN_GradientOpInterface>]> {
  let kernelDoc = [{
    attr dim; sizes from the outputs' shapes
  }];
  let summary = "cuts a tensor along dim into the results' sizes";
  let arguments = (ins NN_Tensor:$input, I64Attr:$dim);
  let results = (outs Variadic<NN_Tensor>:$results);
  let assemblyFormat = [{
    $input `dim` `=` $dim attr-dict `:` type($input) `->` type($results)
  }];
  let hasVerifier = 1;
}

def NN_GatherOp : NN_KernelOp<"gather", [DeclareOpInterfaceMethods<NN_IntegerRangeOpInterface, ["inferIntegerRange"]>, Pure, InferTypeOpAdaptor,
                                   DeclareOpInterfaceMethods<NN_GradientOpInterface>]> {
  let kernelDoc = [{
    data, indices (i32/i64): out = data.shape[:axis] + indices.shape + data.shape[axis+1:]
  }];
  let summary = "selects slices along axis by integer indices (ONNX Gather)";
  let description = [{
    The result shape is `data.shape[:axis] + indices.shape + data.shape[axis+1:]`.
  }];
  let arguments = (ins NN_Tensor:$data, NN_IndexTensor:$indices, I64Attr:$axis);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $data `,` $indices `axis` `=` $axis attr-dict `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Backward ops: the fused ops gradient rules build (dialects/nn/NNGradients.cpp)
//===----------------------------------------------------------------------===//

def NN_PadOp : NN_KernelOp<"pad", [Pure, SameOperandsAndResultElementType,
                             InferTypeOpAdaptor, DeclareOpInterfaceMethods<NN_GradientOpInterface>]> {
  let kernelDoc = [{
    attrs low, high, interior (int lists, >= 0), value (f64): the input placed
    in a tensor of `value` (the gradient of a strided slice). Any dtype.
  }];
  let summary = "surrounds and interleaves the input with a constant";
  let description = [{
    Per dim `d`, `low[d]` copies of `value` go before the input's elements,
    `high[d]` after, and `interior[d]` between each pair of neighbours, so
    dim `d` of the result has `low + high + n + max(n - 1, 0) * interior`
    elements. All three are non-negative. This is the gradient of a strided
    `nn.slice`: the slice's cotangent placed back at the positions it read.

    ```mlir
    %g = nn.pad %dy low = [1, 0] high = [0, 2] interior = [0, 1] : tensor<2x3xf32> -> tensor<3x7xf32>
    ```
  }];
  let arguments = (ins NN_Tensor:$input, DenseI64ArrayAttr:$low,
                   DenseI64ArrayAttr:$high, DenseI64ArrayAttr:$interior,
                   DefaultValuedAttr<F64Attr, "0.0">:$value);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $input `low` `=` $low `high` `=` $high `interior` `=` $interior
    (`value` `=` $value^)? attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def NN_GeluGradOp : NN_KernelOp<"gelu_grad", [Pure,
    AllTypesMatch<["input", "grad", "result"]>, NN_FusibleOpInterface]> {
  let kernelDoc = [{
    x, dy (same shape) -> dx. attr approximate: "none" | "tanh" (as nn.gelu).
  }];
  let kernelScalarFormulas = [
    NN_ScalarFormula<"$1 * (0.5f * (1.0f + erff($0 * 0.70710678118654752440f)) + "
                     "$0 * 0.39894228040143267794f * expf(-0.5f * $0 * $0))",
                     "approximate", "none">,
    NN_ScalarFormula<"$1 * (0.5f * (1.0f + tanhf(0.79788456080286535588f * "
                     "($0 + 0.044715f * $0 * $0 * $0))) + 0.5f * $0 * (1.0f - "
                     "tanhf(0.79788456080286535588f * ($0 + 0.044715f * $0 * $0 * $0)) * "
                     "tanhf(0.79788456080286535588f * ($0 + 0.044715f * $0 * $0 * $0))) * "
                     "(0.79788456080286535588f * (1.0f + 3.0f * 0.044715f * $0 * $0)))",
                     "approximate", "tanh">];
  let summary = "dx = gelu'(x) * dy, for either form of gelu";
  let description = [{
    ```mlir
    %dx = nn.gelu_grad %x, %dy approximate = tanh : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$grad,
      DefaultValuedAttr<NN_GeluApproximationAttr,
                        "::loom::nn::GeluApproximation::none">:$approximate);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad (`approximate` `=` `` $approximate^)? attr-dict `:` type($result)
  }];
}

def NN_SiluGradOp : NN_KernelOp<"silu_grad", [Pure,
    AllTypesMatch<["input", "grad", "result"]>, NN_FusibleOpInterface]> {
  let kernelDoc = [{
    x, dy -> dx
  }];
  let kernelScalarFormulas = [
    NN_ScalarFormula<"$1 * (loom_sigmoid($0) * (1.0f + $0 * (1.0f - loom_sigmoid($0))))">];
  let summary = "dx = sigmoid(x) (1 + x (1 - sigmoid(x))) * dy";
  let description = [{
    ```mlir
    %dx = nn.silu_grad %x, %dy : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$grad);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `,` $grad attr-dict `:` type($result)";
}

def NN_LayerNormGradOp : NN_KernelOp<"layer_norm_grad", [Pure,
    AllTypesMatch<["input", "grad", "result"]>]> {
  let kernelDoc = [{
    x [..., D], dy (x's shape), optional weight [D], optional addend (x's
    shape and dtype, attr has_addend = 1: --loom-fuse-matmul-epilogue folds
    the residual gradient's add; the CPU rounds dx and adds, the GPU adds
    before rounding) -> dx; attrs epsilon (f64), has_weight (0/1). The
    weight and bias gradients are plain reductions.
  }];
  let kernelExtraInputs = 1;
  let kernelExtraAttrs = [NN_KernelAttr<"has_addend", "Int">];
  let summary = "the input gradient of layer_norm";
  let description = [{
    With `xhat = (x - mean) / sqrt(var + epsilon)` and `g = dy * weight`
    (`g = dy` without weight), per row of the last dim:
    `dx = (g - mean(g) - xhat * mean(g * xhat)) / sqrt(var + epsilon)`.
    The bias does not change dx. The weight and bias gradients are plain
    reductions (`reduce_sum(dy * xhat)`, `reduce_sum(dy)`) that the gradient
    rule builds from existing ops.

    ```mlir
    %dx = nn.layer_norm_grad %x, %dy, weight %w epsilon = 1.0e-05 : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$grad,
                   Optional<NN_FloatTensor>:$weight,
                   DefaultValuedAttr<F64Attr, "1e-5">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad (`,` `weight` $weight^)? (`epsilon` `=` $epsilon^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_RmsNormGradOp : NN_KernelOp<"rms_norm_grad", [Pure,
    AllTypesMatch<["input", "grad", "result"]>]> {
  let kernelDoc = [{
    x, dy, optional weight, optional addend -> dx; attrs epsilon, has_weight,
    has_addend (as layer_norm_grad)
  }];
  let kernelExtraInputs = 1;
  let kernelExtraAttrs = [NN_KernelAttr<"has_addend", "Int">];
  let summary = "the input gradient of rms_norm";
  let description = [{
    With `r = 1 / sqrt(mean(x^2) + epsilon)`, `xhat = x * r` and
    `g = dy * weight` (`g = dy` without weight), per row of the last dim:
    `dx = r * (g - xhat * mean(g * xhat))`.

    ```mlir
    %dx = nn.rms_norm_grad %x, %dy, weight %w epsilon = 1.0e-06 : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$grad,
                   Optional<NN_FloatTensor>:$weight,
                   DefaultValuedAttr<F64Attr, "1e-6">:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad (`,` `weight` $weight^)? (`epsilon` `=` $epsilon^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_AttentionGradOp : NN_KernelOp<"attention_grad", [Pure,
    SameOperandsAndResultElementType, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<NN_TransposeAbsorbingOpInterface>, DeclareOpInterfaceMethods<NN_FlopCountOpInterface>]> {
  let kernelDoc = [{
    q, k, v, dOut (the nn.attention operands and its result's gradient) ->
    dq, dk, dv; attrs causal (0/1), window, scale (f64). dk/dv of a KV head sum over
    the query heads that share it.
  }];
  let kernelExtraAttrs = [NN_KernelAttr<"scale", "F64", "$_op.getEffectiveScale()">];
  let summary = "gradients of nn.attention with respect to query, key and value";
  let description = [{
    Operands and attributes are those of the `nn.attention` being
    differentiated plus `grad`, the gradient of its result
    (`[B, Hq, S, Dv]`). Results are `dq`, `dk`, `dv`, typed like `q`, `k`,
    `v`. With grouped heads, `dk` and `dv` of a KV head sum the
    contributions of every query head that reads it.

    ```mlir
    %dq, %dk, %dv = nn.attention_grad %q, %k, %v, %do causal : (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x8x16x32xf32>) -> (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>)
    ```
  }];
  let arguments = (ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                   NN_FloatTensor:$value, NN_FloatTensor:$grad,
                   UnitAttr:$causal, OptionalAttr<F64Attr>:$scale,
                   DefaultValuedAttr<I64Attr, "0">:$seq_major,
                   OptionalAttr<I64Attr>:$window);
  let results = (outs NN_FloatTensor:$query_grad, NN_FloatTensor:$key_grad,
                 NN_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $grad (`causal` $causal^)? (`window` `=` $window^)?
    (`scale` `=` $scale^)? attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The scale actually applied: `scale`, or 1/sqrt(head dim).
    double getEffectiveScale();
  }];
}

def NN_AttentionGradWithStatsOp : NN_KernelOp<"attention_grad_with_stats", [Pure,
    InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<NN_TransposeAbsorbingOpInterface>, DeclareOpInterfaceMethods<NN_FlopCountOpInterface>]> {
  let kernelDoc = [{
    q, k, v, out, lse, dOut -> dq, dk, dv; out and lse [B, Hq, S] (f32) are
    nn.attention_with_stats' results for q, k, v; attrs causal (0/1), window, scale
    (f64). Results as nn.attention_grad's (dk/dv of a KV head sum over the
    query heads that share it).
  }];
  let kernelExtraAttrs = [NN_KernelAttr<"scale", "F64", "$_op.getEffectiveScale()">];
  let summary = "nn.attention_grad from the forward's saved output and statistics";
  let description = [{
    The gradients `nn.attention_grad` computes, given also the forward's
    output `out` and its row statistics `lse` (`[B, Hq, S]`, f32), the two
    results of the `nn.attention_with_stats` over the same `q`, `k`, `v`,
    `causal` and `scale`. A kernel may use them in place of running the
    forward again (softmax probabilities `exp(scale q.k - lse)`, and the
    row term `sum_j P_j dP_j = dOut . out`); the results are those of
    `nn.attention_grad` on `q`, `k`, `v`, `grad`.

    ```mlir
    %dq, %dk, %dv = nn.attention_grad_with_stats %q, %k, %v, %o, %lse, %do causal : (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16xf32>, tensor<1x8x16x32xf32>) -> (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>)
    ```
  }];
  let arguments = (ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                   NN_FloatTensor:$value, NN_FloatTensor:$out,
                   StaticShapeTensorOf<[F32]>:$lse, NN_FloatTensor:$grad,
                   UnitAttr:$causal, OptionalAttr<F64Attr>:$scale,
                   DefaultValuedAttr<I64Attr, "0">:$seq_major,
                   OptionalAttr<I64Attr>:$window);
  let results = (outs NN_FloatTensor:$query_grad, NN_FloatTensor:$key_grad,
                 NN_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $out `,` $lse `,` $grad (`causal` $causal^)? (`window` `=` $window^)?
    (`scale` `=` $scale^)? attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The scale actually applied: `scale`, or 1/sqrt(head dim).
    double getEffectiveScale();
  }];
}

def NN_EmbeddingGradOp : NN_KernelOp<"embedding_grad", [Pure, InferTypeOpAdaptor, DeclareOpInterfaceMethods<NN_SpmdLocalizeOpInterface>]> {
  let kernelDoc = [{
    ids (i32/i64) [...], dy [..., D] -> dTable [V, D] (V = the output's rows;
    attr num_embeddings must equal it): rows added up by id;
    attr vocab_start as nn.embedding's (other blocks' ids are skipped).
  }];
  let summary = "the table gradient of nn.embedding: rows of grad added up by id";
  let description = [{
    `result[v] = sum of grad[p] over the positions p with ids[p] == v`, a
    `[num_embeddings, D]` table; `grad` is `ids.shape + [D]`. Rows no id
    selects are zero. Sums run in position order, so the result does not
    depend on how the work is split. With `vocab_start` (a block of a
    vocabulary-parallel table, see nn.embedding), row `v` of the result is
    id `vocab_start + v`'s, and ids outside the block are skipped
    (`vocab_size`: as nn.embedding's).

    ```mlir
    %dw = nn.embedding_grad %ids, %dy num_embeddings = 100 : (tensor<2x8xi64>, tensor<2x8x32xf32>) -> tensor<100x32xf32>
    ```
  }];
  let arguments = (ins NN_IndexTensor:$ids, NN_FloatTensor:$grad,
                   I64Attr:$num_embeddings, OptionalAttr<I64Attr>:$vocab_start,
                   OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $ids `,` $grad `num_embeddings` `=` $num_embeddings attr-dict `:`
    functional-type(operands, results)
  }];
}

// Vocabulary-parallel cross-entropy (--loom-spmd-partition, when the
// logits' classes are split over ranks): each rank's statistics of its
// block, gathered, combined into the loss, and each block's gradient from
// the gathered statistics.

def NN_CrossEntropyStatsOp : NN_KernelOp<"cross_entropy_stats", [Pure, InferTypeOpAdaptor,
                                                           NN_KeepsResultPrecision]> {
  let kernelDoc = [{
    Vocabulary-parallel cross-entropy, step 1: logits [N, C] (classes
    [vocab_start, vocab_start + C) of a larger set), labels [N] -> f32 [N, 3]
    per row (max, sum of exp(x - max), the label's logit or 0); attrs
    vocab_start, ignore_index.
  }];
  let summary = "per-row softmax statistics of a block of classes";
  let description = [{
    `logits` is `[N, C]`, a block of the classes that starts at class
    `vocab_start`; `labels` is `[N]`. Row `r` of the `[N, 3]` f32 result is
    `(m, s, t)`: `m` the largest logit of the row, `s` the sum of
    `exp(logit - m)`, and `t` the logit of the row's label when the label is
    in the block (and not `ignore_index`), else 0. The statistics of all
    blocks, side by side, give the loss (nn.cross_entropy_combine) and each
    block's gradient (nn.cross_entropy_block_grad).

    ```mlir
    %s = nn.cross_entropy_stats %logits, %labels {vocab_start = 50 : i64} : (tensor<16x50xf32>, tensor<16xi64>) -> tensor<16x3xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$logits, NN_IndexTensor:$labels,
      DefaultValuedAttr<I64Attr, "0">:$vocab_start,
      DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs StaticShapeTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` functional-type(operands, results)
  }];
}

def NN_CrossEntropyCombineOp : NN_KernelOp<"cross_entropy_combine", [Pure, InferTypeOpAdaptor,
                                                               NN_KeepsResultPrecision]> {
  let kernelDoc = [{
    stats [N, 3B] (B blocks side by side), labels -> the loss (attrs
    ignore_index, reduction as nn.cross_entropy).
  }];
  let summary = "the cross-entropy loss from its blocks' statistics";
  let description = [{
    `stats` is `[N, 3 * B]`: nn.cross_entropy_stats of B blocks of classes,
    side by side. Row `r`'s loss is `M + log(sum_b s_b * exp(m_b - M)) -
    sum_b t_b` with `M` the largest `m_b`: nn.cross_entropy's loss of the
    whole row. `ignore_index` and `reduction` are nn.cross_entropy's;
    `num_classes`, when given, is the classes of all blocks: a label outside
    it (and not `ignore_index`) is an error, as in nn.cross_entropy.

    ```mlir
    %l = nn.cross_entropy_combine %stats, %labels : (tensor<16x6xf32>, tensor<16xi64>) -> tensor<f32>
    ```
  }];
  let arguments = (ins StaticShapeTensorOf<[F32]>:$stats, NN_IndexTensor:$labels,
      OptionalAttr<I64Attr>:$num_classes,
      DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
      DefaultValuedAttr<NN_LossReductionAttr,
                        "::loom::nn::LossReduction::mean">:$reduction);
  let results = (outs StaticShapeTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $stats `,` $labels (`reduction` `=` `` $reduction^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def NN_CrossEntropyBlockGradOp : NN_KernelOp<"cross_entropy_block_grad", [Pure, InferTypeOpAdaptor]> {
  let kernelDoc = [{
    logits, labels, dLoss, stats [N, 3B] -> the block's dLogits; attrs
    vocab_start, ignore_index, reduction.
  }];
  let summary = "the logits gradient of a block of classes";
  let description = [{
    nn.cross_entropy_grad of the classes `[vocab_start, vocab_start + C)`
    of each row, the row's softmax taken from `stats` (`[N, 3 * B]`, the
    statistics of every block, see nn.cross_entropy_combine):
    `g_r * (exp(logit - M) / S - onehot(label - vocab_start))`.

    ```mlir
    %d = nn.cross_entropy_block_grad %logits, %labels, %dloss, %stats {vocab_start = 50 : i64} : (tensor<16x50xf32>, tensor<16xi64>, tensor<f32>, tensor<16x6xf32>) -> tensor<16x50xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$logits, NN_IndexTensor:$labels,
      StaticShapeTensorOf<[F32]>:$grad, StaticShapeTensorOf<[F32]>:$stats,
      DefaultValuedAttr<I64Attr, "0">:$vocab_start,
      DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
      DefaultValuedAttr<NN_LossReductionAttr,
                        "::loom::nn::LossReduction::mean">:$reduction);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $grad `,` $stats (`reduction` `=` `` $reduction^)? attr-dict
    `:` functional-type(operands, results)
  }];
}

def NN_GatherGradOp : NN_KernelOp<"gather_grad", [Pure, InferTypeOpAdaptor]> {
  let kernelDoc = [{
    indices (i32/i64), dy -> dData: slices of dy added up along attr axis, by
    index (negative indices count from the end); attr axis_size must equal the
    output's size along axis.
  }];
  let summary = "the data gradient of nn.gather: slices of grad added up by index";
  let description = [{
    The inverse placement of `nn.gather %data, %indices axis = A`: `grad` is
    `P + indices.shape + Q` where `P` is the data's dims before `A` and `Q`
    those after; the result is `P + [axis_size] + Q`, and slice `i` of `grad`
    is added to slice `indices[i]` (negative indices count from the end, as
    in the gather) in index order.

    ```mlir
    %dd = nn.gather_grad %idx, %dy axis = 1 axis_size = 10 : (tensor<3xi64>, tensor<4x3x5xf32>) -> tensor<4x10x5xf32>
    ```
  }];
  let arguments = (ins NN_IndexTensor:$indices, NN_FloatTensor:$grad,
                   I64Attr:$axis, I64Attr:$axis_size);
  let results = (outs NN_FloatTensor:$result);
  // Along a permutation it is a gather (NNPermutations.cpp).
  let hasCanonicalizer = 1;
  let assemblyFormat = [{
    $indices `,` $grad `axis` `=` $axis `axis_size` `=` $axis_size attr-dict
    `:` functional-type(operands, results)
  }];
}

def NN_CrossEntropyGradOp : NN_KernelOp<"cross_entropy_grad", [Pure, InferTypeOpAdaptorWithIsCompatible,
                                                         DeclareOpInterfaceMethods<NN_ClassParallelLossOpInterface>,
                                                         DeclareOpInterfaceMethods<NN_WidenableResultOpInterface, ["canNarrowResult"]>]> {
  let kernelDoc = [{
    logits [N, C], labels [N], dLoss f32 ([] for mean/sum, [N] for none) ->
    dLogits (the logits' dtype, or any float type: --loom-widen-results folds
    a cast of it, and the gradient is then rounded once to that type); attrs
    ignore_index, reduction (as nn.cross_entropy).
  }];
  let summary = "the logits gradient of nn.cross_entropy";
  let description = [{
    `grad` is the gradient of the loss: an f32 scalar for `mean`/`sum`,
    `[N]` for `none`. Row `r` of the result is
    `g_r * (softmax(logits[r]) - onehot(labels[r]))` with `g_r = grad / n`
    (`mean`, n the rows whose label is not `ignore_index`; zero when n is 0),
    `grad` (`sum`) or `grad[r]` (`none`); rows labelled `ignore_index` are
    zero. The result has the logits' type, or a narrower float type (what
    `--loom-widen-results` makes of the gradient followed by a cast to it).

    ```mlir
    %dl = nn.cross_entropy_grad %logits, %labels, %dloss : (tensor<16x100xf32>, tensor<16xi64>, tensor<f32>) -> tensor<16x100xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$logits, NN_IndexTensor:$labels,
      StaticShapeTensorOf<[F32]>:$grad,
      DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
      DefaultValuedAttr<NN_LossReductionAttr,
                        "::loom::nn::LossReduction::mean">:$reduction);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $grad (`reduction` `=` `` $reduction^)? attr-dict
    `:` functional-type(operands, results)
  }];
}

include "dialects/nn/NNTrainingOps.td"
include "dialects/nn/NNFusionOps.td"
include "dialects/nn/NNFp8Ops.td"
include "dialects/nn/NNMoeOps.td"

#endif // LOOM_NN_OPS_TD
