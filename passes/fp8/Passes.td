#ifndef LOOM_PASSES_FP8_PASSES_TD
#define LOOM_PASSES_FP8_PASSES_TD

include "mlir/Pass/PassBase.td"

def Fp8Mark : Pass<"loom-fp8-mark", "mlir::ModuleOp"> {
  let summary = "put the linear layers' GEMMs under an FP8 recipe";
  let description = [{
    The precision policy of `loom-compile --fp8=RECIPE`, as an attribute on
    the ops it governs: every `nn.matmul` that is a linear layer of the
    model's blocks gets `nn.fp8 = #nn.fp8<recipe = ..., format = ...>`.
    Run on the forward, before --loom-build-training-step, whose autodiff
    carries the policy onto each GEMM's data- and weight-gradient GEMMs;
    --loom-fp8-expand then makes the casts and scales explicit.

    A linear layer is a matmul whose right operand is a 2-D parameter (read
    through casts and reshapes). Left alone, as TransformerEngine and
    DeepSeek-V3 leave them in higher precision:
    - a GEMM whose result reaches the loss or a result of the function
      through no other contraction (an op with a FLOP count): the LM head;
    - a GEMM on a parameter that an `nn.embedding` also reads (tied
      embeddings);
    - a GEMM on a parameter whose name matches one of `exclude` (globs,
      `*` and `?`, matched against the whole name), or whose left operand is
      batched in a way the FP8 GEMM cannot take (a batched weight).

    Before:
    ```mlir
    %w = nn.parameter "layers.0.mlp.up.weight" : tensor<64x32xf32>
    %y = nn.matmul %x, %w {transpose_rhs} : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
    ```
    After (`recipe=tensorwise format=hybrid`):
    ```mlir
    %y = nn.matmul %x, %w {nn.fp8 = #nn.fp8<recipe = tensorwise, format = hybrid>, transpose_rhs} ...
    ```
  }];
  let options = [
    Option<"recipe", "recipe", "std::string", /*default=*/"\"tensorwise\"",
           "tensorwise, tensorwise-delayed, rowwise or blockwise">,
    Option<"format", "format", "std::string", /*default=*/"\"e4m3\"",
           "e4m3 (every operand) or hybrid (e5m2 gradients)">,
    Option<"margin", "margin", "int64_t", /*default=*/"0",
           "binades of headroom below the format's largest value">,
    Option<"history", "amax-history", "int64_t", /*default=*/"1",
           "steps of amax history (tensorwise-delayed)">,
    ListOption<"exclude", "exclude", "std::string",
               "parameter name globs whose GEMMs stay in the compute type">,
  ];
  let dependentDialects = ["loom::nn::NNDialect"];
}

def Fp8Expand : Pass<"loom-fp8-expand", "mlir::ModuleOp"> {
  let summary = "FP8 GEMMs with explicit quantization: amax, scale, quantize, scaled_matmul";
  let description = [{
    Rewrites each `nn.matmul` carrying `nn.fp8` (--loom-fp8-mark, and the
    gradient GEMMs autodiff derived from them) into an `nn.scaled_matmul`
    whose operands are quantized by explicit ops. Each tensor is quantized
    once per format however many GEMMs read it, right after it is made:
    `nn.amax` of the tensor, `nn.fp8_scale` of the amax (the recipe's
    margin), and one `nn.quantize` writing the FP8 values and, where some
    GEMM reads them transposed (the weight-gradient GEMM reads the
    activation and the output gradient transposed, the data-gradient GEMM
    the weight), the transposed copy in the same pass. FP8 GEMMs take both
    operands with the contracted dim innermost: `[M, K]` and `[N, K]`.

    Formats: `e4m3` quantizes every operand to f8E4M3FN; `hybrid` quantizes
    the incoming gradient (the operand the policy's `gradient` names) to
    f8E5M2. Scales come from this step's amax, tiled by the recipe as each
    GEMM reads the operand ([rows, K]):
    - `tensorwise`: one per tensor, serving the transposed copy too;
    - `rowwise`: one per row, the transposed copy with one per row of its
      own (the amax over the tensor's columns);
    - `blockwise` (DeepSeek-V3): a weight (the right operand of a forward
      GEMM) in 128 x 128 blocks, its transposed copy the same blocks
      transposed; every other operand in 1 x 128 tiles along K, its
      transposed copy in 1 x 128 tiles along the other dim. The last tile of
      a dim that is not a multiple of 128 is ragged.
    - `tensorwise_delayed` (TransformerEngine's delayed scaling): one per
      tensor from the largest amax of the last `history` steps, kept in a
      program-state parameter `fp8.amax_history.<i>` (frozen, zeros,
      checkpointed with the optimizer's state) that this step's amax then
      enters through `nn.assign`; while the history is all zero (the first
      step) this step's amax serves.

    With several microbatches a weight is quantized once a step
    (`weights-once`, on by default): every microbatch casts the same master
    weight, so its scales and FP8 values are the same each time, and the
    microbatches' GEMMs read the first microbatch's quantization. Not for
    delayed scaling (each quantization enters the amax history) nor under a
    pipeline (a stage's microbatches need not run in order). Under a
    pipeline even a master weight that every microbatch reads as it is (an
    f32 step) is quantized per microbatch: DualPipe runs its two
    directions' microbatches on different model copies.

    Before (a linear layer's forward):
    ```mlir
    %y = nn.matmul %x, %w {nn.fp8 = #nn.fp8<recipe = tensorwise, format = e4m3>, transpose_rhs}
        : (tensor<2x8x32xbf16>, tensor<64x32xbf16>) -> tensor<2x8x64xbf16>
    ```
    After:
    ```mlir
    %x2 = nn.reshape %x : (tensor<2x8x32xbf16>) -> tensor<16x32xbf16>
    %ax = nn.amax %x2 : (tensor<16x32xbf16>) -> tensor<f32>
    %sx = nn.fp8_scale %ax format = "e4m3" : tensor<f32>
    %qx = nn.quantize %x2, %sx : (tensor<16x32xbf16>, tensor<f32>) -> tensor<16x32xf8E4M3FN>
    ... the same for %w ...
    %y2 = nn.scaled_matmul %qx, %qw, %sx, %sw : (...) -> tensor<16x64xbf16>
    %y = nn.reshape %y2 : (tensor<16x64xbf16>) -> tensor<2x8x64xbf16>
    ```
  }];
  let options = [
    Option<"gemmAlignment", "gemm-alignment", "int64_t", /*default=*/"1",
           "what the target's FP8 GEMM needs K and N to be multiples of (16 on "
           "CUDA); a GEMM that falls short stays in the compute type, with a remark">,
    Option<"tokenRanks", "token-ranks", "int64_t", /*default=*/"1",
           "ranks that will split a GEMM's token dim (data, expert and, with "
           "sequence parallelism, tensor ranks): the alignment holds per rank">,
    Option<"featureRanks", "feature-ranks", "int64_t", /*default=*/"1",
           "ranks that will split a weight's features (tensor ranks)">,
    Option<"weightsOnce", "weights-once", "bool", /*default=*/"true",
           "quantize each weight once a step for all its microbatches (current "
           "scaling, no pipeline): the microbatches' casts of one master weight "
           "read one quantization, the first microbatch's">,
  ];
  let dependentDialects = ["loom::nn::NNDialect"];
}

#endif
