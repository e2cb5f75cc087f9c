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

def NN_AdamWOp : NN_Op<"adamw", [Pure, AllTypesMatch<["param", "grad", "exp_avg",
    "exp_avg_sq", "new_param", "new_exp_avg", "new_exp_avg_sq"]>]> {
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

#endif
