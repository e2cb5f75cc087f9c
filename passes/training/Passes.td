#ifndef LOOM_PASSES_TRAINING_PASSES_TD
#define LOOM_PASSES_TRAINING_PASSES_TD

include "mlir/Pass/PassBase.td"

def BuildTrainingStep : Pass<"loom-build-training-step", "mlir::ModuleOp"> {
  let summary = "turn a forward function into a whole training step";
  let description = [{
    Replaces `@main` (token ids -> logits, the forward of one microbatch)
    by a function that runs one optimizer step on a global batch:

    - inputs `tokens` [batch, seq+1] (i64), `lr` and `step` (f32 scalars);
    - for each of `batch / b` microbatches (b: the forward's batch size), the
      forward on tokens[:, :-1] and the causal-LM cross-entropy against
      tokens[:, 1:] (ops tagged `loom.microbatch = m`);
    - reverse-mode autodiff through the ops' gradient rules
      (GradientOpInterface), parameter gradients summed over microbatches
      (gradient accumulation); every backward op is tagged
      `loom.backward = #loom.backward<input>` (gradients flowing to activations) or
      `"weight"` (gradients of parameters), which pipeline schedules
      (ZB-H1, DualPipe) place apart;
    - the global gradient norm, clipping to `max-grad-norm`, and AdamW with
      f32 moments kept as parameters `<name>.exp_avg` / `<name>.exp_avg_sq`,
      written back with `nn.assign`;
    - outputs `loss` (mean over microbatches) and `grad_norm` (before clipping).

    Before:
    ```mlir
    func.func @main(%ids: tensor<2x16xi64>) -> tensor<2x16x256xf32>
    ```
    After:
    ```mlir
    func.func @main(%tokens: tensor<8x17xi64> {loom.name = "tokens"},
                    %lr: tensor<f32> {loom.name = "lr"},
                    %step: tensor<f32> {loom.name = "step"})
        -> (tensor<f32> {loom.name = "loss"}, tensor<f32> {loom.name = "grad_norm"})
    ```
  }];
  let options = [
    Option<"batch", "batch", "int64_t", /*default=*/"0",
           "global batch (sequences per step); 0: the forward's batch size">,
    Option<"maxGradNorm", "max-grad-norm", "double", /*default=*/"1.0",
           "clip the global gradient norm to this (0: no clipping)">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.1",
           "AdamW weight decay, applied to parameters of rank 2 and more">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.95", "AdamW beta2">,
    Option<"epsilon", "epsilon", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"gradientsOnly", "gradients-only", "bool", /*default=*/"false",
           "return the loss and every parameter's gradient (outputs `loss` and "
           "`grad.<name>`) instead of updating: for checking gradients">,
    Option<"moeAuxLossCoef", "moe-aux-loss-coef", "double", /*default=*/"0.0",
           "add this times the load-balancing loss (Switch Transformer, Mixtral) of the "
           "softmax routers to each microbatch's loss; 0: none">,
    Option<"moeSeqAuxLossCoef", "moe-seq-aux-loss-coef", "double", /*default=*/"0.0",
           "add this times DeepSeek-V3's sequence-wise balance loss of every router (softmax "
           "or sigmoid) to each microbatch's loss; 0: none">,
    Option<"moeBiasUpdateRate", "moe-bias-update-rate", "double", /*default=*/"0.0",
           "DeepSeek-V3's auxiliary-loss-free balancing: after each step, every router's "
           "correction bias (a buffer added to its scores) moves by this towards the "
           "experts that received fewer tokens than the mean; 0: none">,
    Option<"moeCapacityFactor", "moe-capacity-factor", "double", /*default=*/"0.0",
           "each expert takes at most ceil(F x rows / experts) of a microbatch's "
           "choices, in token order; the others are dropped (their expert output is "
           "zero) and counted (output moe_dropped_tokens); 0: dropless">,
    Option<"dataParallel", "data-parallel", "int64_t", /*default=*/"1",
           "data-parallel ranks: microbatch m takes rows m of each rank's block "
           "of the batch (tokens seen as [dp, microbatches, batch/dp, seq+1]), "
           "so that a split of the batch over dp splits every microbatch; the "
           "tokens argument's loom.row_groups tells the caller to order the "
           "rows so that microbatch m is rows [m b, (m+1) b) of the batch as read">,
  ];
  let dependentDialects = ["loom::nn::NNDialect", "loom::LoomDialect"];
}

def Rebatch : Pass<"loom-rebatch", "mlir::ModuleOp"> {
  let summary = "re-infer @main's shapes for another batch size";
  let description = [{
    A model exported with a fixed batch (every shape in the file has it)
    is compiled for another: the batch dimension is dim 0 of the first
    argument, and of every argument whose dim 0 has the same size. The pass
    follows it through the function and gives every value its shape for
    `batch`:

    - ops that infer their result types (InferTypeOpInterface) re-infer
      them; ops whose results are their operands' type
      (SameOperandsAndResultType) or their operands' broadcast shape take
      the new shapes;
    - ops that carry a shape follow the batch: a reshape finds it in its
      result by the elements per batch index (`[B*S, H] -> [B, S, H]`),
      a broadcast keeps it where its input had it, a slice that takes the
      whole batch takes the whole new one;
    - an operand made without the batch but sized by it (a constant mask
      `[B, 1, S, S]` the importer folded, a broadcast, an iota) is made
      again at the new size when it is the same for every sequence.

    What cannot be followed is an error naming the node: a slice of some
    sequences, a reshape that mixes the batch with other dims, a constant
    that differs between sequences.

    Before (`batch=8`):
    ```mlir
    func.func @main(%ids: tensor<2x16xi64>) -> tensor<2x16x256xf32> {
      %h = nn.embedding %table, %ids : (tensor<256x64xf32>, tensor<2x16xi64>) -> tensor<2x16x64xf32>
      %f = nn.reshape %h : tensor<2x16x64xf32> -> tensor<32x64xf32>
    ```
    After:
    ```mlir
    func.func @main(%ids: tensor<8x16xi64>) -> tensor<8x16x256xf32> {
      %h = nn.embedding %table, %ids : (tensor<256x64xf32>, tensor<8x16xi64>) -> tensor<8x16x64xf32>
      %f = nn.reshape %h : tensor<8x16x64xf32> -> tensor<128x64xf32>
    ```
  }];
  let options = [
    Option<"batch", "batch", "int64_t", /*default=*/"0",
           "the new batch size (0: leave the function as it is)">,
    Option<"function", "function", "std::string", /*default=*/"\"main\"",
           "the function to re-batch">,
  ];
  let dependentDialects = ["loom::nn::NNDialect"];
}

def StripStopGradients : Pass<"loom-strip-stop-gradients", "mlir::ModuleOp"> {
  let summary = "replace each nn.stop_gradient by its input";
  let description = [{
    `nn.stop_gradient` (torch's no_grad and detach) matters to autodiff
    only: --loom-build-training-step replaces them itself once the backward
    is built, and an inference compile runs this pass after raising, so no
    kernel ever runs one.
  }];
}

def BindTrainingInputs : Pass<"loom-bind-training-inputs", "mlir::ModuleOp"> {
  let summary = "give a forward's attention_mask, position_ids and token_type_ids their training values";
  let description = [{
    A training step feeds the forward token ids only: packed sequences of
    the data, none padded. A model exported with more inputs (the
    TorchScript ONNX exporter and Optimum export `input_ids` and
    `attention_mask`; some exports add `position_ids` or `token_type_ids`)
    gets, for each input of `@main` after the first named one of these,
    the value it has for such sequences, and loses the input:

    - `attention_mask` [batch, seq], of any type: ones (no padding);
    - `position_ids` [batch or 1, seq], integers: 0, 1, ..., seq - 1;
    - `token_type_ids` [batch, seq]: zeros.

    Another shape is an error naming the input; an input of another name is
    left for --loom-build-training-step to refuse, naming it.

    Before:
    ```mlir
    func.func @main(%ids: tensor<2x16xi64> {loom.name = "input_ids"},
                    %mask: tensor<2x16xi64> {loom.name = "attention_mask"}) -> tensor<2x16x256xf32>
    ```
    After:
    ```mlir
    func.func @main(%ids: tensor<2x16xi64> {loom.name = "input_ids"}) -> tensor<2x16x256xf32> {
      %mask = nn.constant dense<1> : tensor<2x16xi64>
    ```
  }];
}

def PromoteMasters : Pass<"loom-promote-masters", "mlir::ModuleOp"> {
  let summary = "train a bf16 or f16 model through f32 master weights";
  let description = [{
    A model exported in bf16 or f16 (`model.to(torch.bfloat16)` before the
    export) is trained as mixed precision is: each trainable parameter of
    `@main` of a narrow float type becomes an f32 master weight (its embedded
    value widened exactly), read through one cast back to the exported type,
    so the computation stays as exported while the optimizer updates f32.
    Frozen parameters and f32 ones are left alone. Run before
    --loom-build-training-step. loom-run --weights widens the narrow tensors
    of the model's own safetensors file the same way.

    Before:
    ```mlir
    %w = nn.parameter "fc.weight" : tensor<8x4xbf16>
    ```
    After:
    ```mlir
    %m = nn.parameter "fc.weight" : tensor<8x4xf32>
    %w = nn.cast %m : tensor<8x4xf32> -> tensor<8x4xbf16>
    ```
  }];
}

def CastCompute : Pass<"loom-cast-compute", "mlir::ModuleOp"> {
  let summary = "compute in a narrower float type, keeping f32 parameters";
  let description = [{
    Mixed precision: every f32 activation of `@main` becomes `type` (bf16 by
    default); parameters and constants stay f32 (the master weights the
    optimizer updates) and are cast where they are read; results are cast
    back to their declared types. Run before --loom-build-training-step, whose
    autodiff then casts gradients back to f32 through the casts' rules.

    Before:
    ```mlir
    %w = nn.parameter "fc.weight" : tensor<8x4xf32>
    %y = nn.matmul %x, %w {transpose_rhs} : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
    ```
    After (`type=bf16`):
    ```mlir
    %w = nn.parameter "fc.weight" : tensor<8x4xf32>
    %wb = nn.cast %w : tensor<8x4xf32> -> tensor<8x4xbf16>
    %xb = nn.cast %x : tensor<2x4xf32> -> tensor<2x4xbf16>
    %y = nn.matmul %xb, %wb {transpose_rhs} : (tensor<2x4xbf16>, tensor<8x4xbf16>) -> tensor<2x8xbf16>
    ```
  }];
  let options = [
    Option<"type", "type", "std::string", /*default=*/"\"bf16\"",
           "the compute type: bf16 or f16">,
  ];
  let dependentDialects = ["loom::nn::NNDialect"];
}

def AttentionStats : Pass<"loom-attention-stats", "mlir::ModuleOp"> {
  let summary = "a differentiated attention saves its softmax statistics for its backward";
  let description = [{
    `nn.attention_grad` takes only `q`, `k`, `v` and the output's gradient,
    so its kernel runs the forward again for the softmax statistics it
    needs. For every `nn.attention_grad` whose `q`, `k`, `v`, `causal` and
    effective `scale` are those of an `nn.attention` before it in the same
    block (the forward it differentiates; the nearest one when several
    match), the pass makes the forward an `nn.attention_with_stats` and the
    gradient an `nn.attention_grad_with_stats` that reads the forward's
    output and its row logsumexp `lse` (`[B, Hq, S]`, f32). An attention no
    gradient differentiates is left alone. The new ops keep the discardable
    attributes of the ops they replace (`pipe.stage`, `loom.microbatch`,
    `loom.backward`, ...).

    It runs on the training step after pipeline splitting and SPMD
    partitioning (each rank's program holds its forwards and their
    backwards), so no sharding or stage rule ever sees the new ops; `lse`
    is one more value the memory planner places.

    Before:
    ```mlir
    %o = nn.attention %q, %k, %v causal {loom.microbatch = 0 : i64} : (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>) -> tensor<1x8x16x32xf32>
    ...
    %dq, %dk, %dv = nn.attention_grad %q, %k, %v, %do causal {loom.backward = #loom.backward<input>} : (...) -> (...)
    ```
    After:
    ```mlir
    %o, %lse = nn.attention_with_stats %q, %k, %v causal {loom.microbatch = 0 : i64} : (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>) -> (tensor<1x8x16x32xf32>, tensor<1x8x16xf32>)
    ...
    %dq, %dk, %dv = nn.attention_grad_with_stats %q, %k, %v, %o, %lse, %do causal {loom.backward = #loom.backward<input>} : (...) -> (...)
    ```
  }];
  let dependentDialects = ["loom::nn::NNDialect"];
}

#endif
