#ifndef LOOM_NN_TRAINING_OPS_TD
#define LOOM_NN_TRAINING_OPS_TD

// Ops that only training steps contain: optimizer updates and the writes
// that carry a step's results into the next step.

// A per-step f32 scalar the runtime supplies (learning rate, step number).
def NN_F32Scalar : TensorRankOf<[F32], [0]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getF32Type())">;

def NN_AssignOp : NN_Op<"assign", [AllTypesMatch<["parameter", "value"]>]> {
  let summary = "after this step, the parameter holds the given value";
  let description = [{
    Values stay immutable inside a step: every use of `%w` reads the value
    the parameter had when the step began. The assignment takes effect when
    the step ends (the lowering writes the parameter's buffer after its
    last reader).

    ```mlir
    %w = nn.parameter "fc.weight" : tensor<8x4xf32>
    ...
    nn.assign %w, %w_next : tensor<8x4xf32>
    ```
  }];
  let arguments = (ins NN_Tensor:$parameter, NN_Tensor:$value);
  let assemblyFormat = "$parameter `,` $value attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def NN_AdamWOp : NN_KernelOp<"adamw", [Pure, AllTypesMatch<["param", "grad", "exp_avg",
    "exp_avg_sq", "new_param", "new_exp_avg", "new_exp_avg_sq"]>]> {
  let kernelDoc = [{
    param, grad, exp_avg, exp_avg_sq (f32, one shape), lr, step (f32 scalars)
    -> new param, new exp_avg, new exp_avg_sq; attrs beta1, beta2, epsilon,
    weight_decay (f64).
  }];
  let summary = "one AdamW update of a parameter and its moments";
  let description = [{
    With `g` the gradient, `t` the 1-based step and `lr` the learning rate
    (both f32 scalars, supplied each step):
    `m' = b1 m + (1 - b1) g`, `v' = b2 v + (1 - b2) g^2`,
    `p' = p - lr (wd p + (m' / (1 - b1^t)) / (sqrt(v' / (1 - b2^t)) + eps))`.
    Parameter, gradient and moments are f32 (master weights).

    ```mlir
    %p2, %m2, %v2 = nn.adamw %p, %g, %m, %v, %lr, %t beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-08 weight_decay = 0.1 : tensor<8x4xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$param, NN_FloatTensor:$grad,
                   NN_FloatTensor:$exp_avg, NN_FloatTensor:$exp_avg_sq,
                   NN_F32Scalar:$lr, NN_F32Scalar:$step,
                   F64Attr:$beta1, F64Attr:$beta2, F64Attr:$epsilon,
                   F64Attr:$weight_decay);
  let results = (outs NN_FloatTensor:$new_param, NN_FloatTensor:$new_exp_avg,
                 NN_FloatTensor:$new_exp_avg_sq);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $lr `,` $step
    `beta1` `=` $beta1 `beta2` `=` $beta2 `epsilon` `=` $epsilon
    `weight_decay` `=` $weight_decay attr-dict `:` type($param)
  }];
  let hasVerifier = 1;
}

def NN_LinearCrossEntropyOp : NN_KernelOp<"linear_cross_entropy", [Pure,
    DeclareOpInterfaceMethods<NN_KernelScratchOpInterface>,
    DeclareOpInterfaceMethods<NN_FlopCountOpInterface>]> {
  let kernelExtraOutputs = 1;
  let kernelDoc = [{
    x [N, H], w [V, H] (one float type), labels [N] (i32/i64), dLoss (f32
    scalar) -> loss (f32 scalar), dx [N, H] (x's type), dw [V, H] (x's type
    or f32), then an f32 scratch of linearCrossEntropyScratch(N, V, chunk,
    x's element size).words elements (the last output; runtime/abi/
    LinearCrossEntropy.h). Attrs ignore_index, reduction (mean or sum),
    chunk (rows a chunk). Per chunk of rows: the f32 logits x_c w^T, each
    row's loss, the gradient g_c (nn.cross_entropy_grad's, rounded to x's
    type), dx_c = g_c w, and dw += g_c^T x_c accumulated in f32 in row order
    and rounded once. Then the rows' losses reduced as nn.cross_entropy's.
  }];
  let summary = "the LM head's GEMM and the cross-entropy, forward and backward, chunked over rows";
  let description = [{
    The loss of a training step and the gradients of its last linear layer,
    computed chunk by chunk so that the `[N, V]` logits never exist whole:
    for each `chunk` rows of `input`, the logits `input_c weight^T` (in f32),
    each row's loss, and the logits' gradient (as `nn.cross_entropy_grad`
    with `grad`, rounded to the input's type) from which `input_grad`'s rows
    and `weight_grad`'s running f32 sum follow at once. `loss` is what
    `nn.cross_entropy` of the whole logits gives (`mean` over the rows whose
    label is not `ignore_index`, or `sum`). `--loom-fuse-linear-cross-entropy`
    makes it from the training step's LM head, loss and their gradients.

    ```mlir
    %loss, %dx, %dw = nn.linear_cross_entropy %x, %w, %labels, %dloss chunk = 2048 : (tensor<4096x2048xbf16>, tensor<32000x2048xbf16>, tensor<4096xi64>, tensor<f32>) -> (tensor<f32>, tensor<4096x2048xbf16>, tensor<32000x2048xf32>)
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$weight, NN_IndexTensor:$labels,
      StaticShapeTensorOf<[F32]>:$grad,
      DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
      DefaultValuedAttr<NN_LossReductionAttr,
                        "::loom::nn::LossReduction::mean">:$reduction,
      I64Attr:$chunk);
  let results = (outs StaticShapeTensorOf<[F32]>:$loss, NN_FloatTensor:$input_grad,
                 NN_FloatTensor:$weight_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $labels `,` $grad (`reduction` `=` `` $reduction^)?
    `chunk` `=` $chunk attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Kernels with no nn op of their own
//===----------------------------------------------------------------------===//

def NN_AdamWMultiKernel : NN_RuntimeKernel<"nn.adamw_multi", 6, -1, -1,
    [NN_KernelAttr<"has_scale", "Int">, NN_KernelRequiredAttr<"beta1", "F64">,
     NN_KernelRequiredAttr<"beta2", "F64">, NN_KernelRequiredAttr<"epsilon", "F64">,
     NN_KernelRequiredAttr<"weight_decays", "F64s">, NN_KernelAttr<"copies", "Ints">], [{
  nn.adamw over many parameters in one call (--loom-fuse-adamw): lr, step,
  [scale when attr has_scale = 1: every gradient is first multiplied by it,
  as gradient clipping does], then param, grad, exp_avg, exp_avg_sq per
  parameter -> new param, exp_avg, exp_avg_sq per parameter, then one
  compute copy per entry of attr copies. Attrs beta1, beta2, epsilon (f64)
  and weight_decays (f64 list, one per parameter). Attr copies (int list,
  default empty: ascending, no repeats, each below the number of
  parameters) names the parameters whose compute copy the kernel also
  writes, in the same pass: after the 3n results, in the order listed, a
  tensor of the parameter's shape (f32, bf16 or f16) that receives the new
  parameter rounded to its type, the bits nn.cast of the new f32 parameter
  would write (to nearest even; NaN and overflow as the cast). So a bf16
  step needs no cast of its f32 master weights at the start of the next.
}]>;

def NN_SumSquaresMultiKernel : NN_RuntimeKernel<"nn.sum_squares_multi", 1, -1, -1,
    [NN_KernelAttr<"total", "Int">], [{
  The sums of squares of many tensors in one call (--loom-fuse-sum-squares,
  for the global gradient norm): x_1 .. x_n (f32, bf16 or f16, any shape)
  -> s_1 .. s_n (f32 scalars: s_i = sum of x_i's squared elements), or with
  attr total = 1 one f32 scalar, the sum of all of them; then an f64
  scratch of sumSquaresScratch(sizes) elements (the last output). Each
  tensor is summed in chunks of kSumSquaresChunk elements, squares
  accumulated in f64 within a chunk, then the chunks' sums in order, then
  (total) the tensors' sums in order; rounded to f32 once. Deterministic.
}]>;

def NN_NormWeightGradKernel : NN_RuntimeKernel<"nn.norm_weight_grad", 2, 2, 2,
    [NN_KernelRequiredAttr<"epsilon", "F64">, NN_KernelAttr<"centered", "Int">], [{
  A norm's weight gradient in one call (--loom-fuse-norm-weight-grad): x and
  dy [..., H] (f32, bf16 or f16) -> dw [H] (any float type) = the sum over
  rows of dy * xhat, xhat = x / sqrt(mean(x^2) + epsilon) (rms_norm's), or
  with attr centered = 1 (x - mean) / sqrt(var + epsilon) (layer_norm's);
  then an f32 scratch of normWeightGradScratch(rows, H) elements (the last
  output: each row's inverse deviation, each row's mean, then per block of
  kNormWeightGradRows rows its column sums). Products in f32, the blocks'
  sums in f64 in order; rounded once. Deterministic.
}]>;

def NN_CastMultiKernel : NN_RuntimeKernel<"nn.cast_multi", 1, -1, -1, [], [{
  nn.cast of many tensors in one call (--loom-fuse-casts, the master
  weights' bf16 copies at the start of a step): x_1 .. x_n of one element
  type -> y_1 .. y_n of another (each y_i x_i's shape), rounded as nn.cast
  rounds. Bitwise what the casts one by one write.
}]>;

def NN_QuantizeTilesKernel : NN_RuntimeKernel<"nn.quantize_tiles", 1, 1, 4,
    [NN_KernelRequiredAttr<"format", "Str">, NN_KernelAttr<"margin", "Int">], [{
  Current-scaling FP8 quantization of a matrix and its transposed copy in
  one call (--loom-fuse-fp8-quantize): x [R, C] (f32, bf16 or f16) -> q [R,
  C] and qT [C, R] (f8E4M3FN or f8E5M2), scale (a tiling of q) and scaleT
  (a tiling of qT), f32. Each scale is nn.fp8_scale (attrs format, margin)
  of nn.amax over its tiles, and q, qT are nn.quantize of x with them:
  bitwise what nn.amax, nn.fp8_scale (and nn.transpose) and nn.quantize
  write one by one. On CUDA the tiles fit 128 x 128 blocks (1 x 128 and
  128 x 128, DeepSeek-V3's blockwise), so x is read once.
}]>;

def NN_QuantizeTensorKernel : NN_RuntimeKernel<"nn.quantize_tensor", 1, 1, 3,
    [NN_KernelRequiredAttr<"format", "Str">, NN_KernelAttr<"margin", "Int">], [{
  Current-scaling FP8 quantization of a matrix and its transposed copy
  under one scale (--loom-fuse-fp8-quantize, the tensorwise recipe): x [R,
  C] (f32, bf16 or f16) -> q [R, C] and qT [C, R] (f8E4M3FN or f8E5M2) and
  scale (rank 0, f32), nn.fp8_scale (attrs format, margin) of nn.amax of
  all of x: bitwise what nn.amax, nn.fp8_scale and nn.quantize write one by
  one. On CUDA the amax's last block writes the scale (two launches, not
  five).
}]>;

def NN_SwigluKernel : NN_RuntimeKernel<"nn.swiglu", 2, 2, 2, [], [{
  The SwiGLU product in one call (--loom-fuse-swiglu): g, u (one float type
  and shape) -> s = silu(g), h = s * u: what nn.silu and then nn.mul write
  (s rounded to the type before the product). s is kept for the backward.
}]>;

def NN_SwigluGradKernel : NN_RuntimeKernel<"nn.swiglu_grad", 4, 4, 2, [], [{
  The SwiGLU product's gradients in one call (--loom-fuse-swiglu): g, u,
  s (= silu(g)), dy (one float type and shape) -> dg = silu_grad(g, dy * u),
  du = dy * s: what nn.mul, nn.mul and nn.silu_grad write (dy * u rounded to
  the type before the silu gradient).
}]>;

#endif
