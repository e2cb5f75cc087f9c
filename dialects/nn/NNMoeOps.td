#ifndef LOOM_NN_MOE_OPS_TD
#define LOOM_NN_MOE_OPS_TD

// Mixture-of-experts building blocks (issue 21): a router (its scores,
// top-k choice and weights in one op), a plain top-k choice, the sort that
// groups tokens by expert, and the experts' grouped GEMM over those groups.
// The routing's other steps (counts per expert, their running sum, the
// one-hot masks of gathers and scatters) are compositions of the
// elementwise, compare and reduction ops.

def NN_TopkOp : NN_KernelOp<"topk", [Pure, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<NN_GradientOpInterface>, DeclareOpInterfaceMethods<NN_IntegerRangeOpInterface, ["inferIntegerRange"]>]> {
  let kernelDoc = [{
    input (float) [..., N] -> values [..., k] (input's dtype), indices
    [..., k] (i64): the k largest of each row along the last dim (the k
    smallest with attr smallest = 1), best first; equal values by lower
    index first; NaN ranks above every number.
  }];
  let summary = "the k largest (or smallest) values of each row and their positions";
  let description = [{
    Along the last dim. The values come best first, ties by position, so the
    result does not depend on the kernel. The values' gradient goes back to
    the positions they came from; the indices have none.

    ```mlir
    %v, %i = nn.topk %scores k = 2 : (tensor<8x4xf32>) -> (tensor<8x2xf32>, tensor<8x2xi64>)
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, I64Attr:$k, UnitAttr:$smallest);
  let results = (outs NN_FloatTensor:$values, NN_IndexTensor:$indices);
  let assemblyFormat = [{
    $input `k` `=` $k (`smallest` $smallest^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_RouterOp : NN_KernelOp<"router", [Pure, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<NN_GradientOpInterface>, DeclareOpInterfaceMethods<NN_IntegerRangeOpInterface, ["inferIntegerRange"]>]> {
  let kernelDoc = [{
    logits [..., E] (float), bias [E] (optional, has_bias) -> weights
    [..., k] (logits' dtype), ids [..., k] (i64), scores [..., E] (logits'
    dtype), per row: s = softmax(logits) (sigmoid(logits) with attr
    sigmoid = 1); c = s + bias; with groups G > 1, each group of E/G
    experts scores the sum of its group_top best c, the group_k best groups
    are kept and every other expert's c becomes group_fill; ids = the k
    best c (ties by lower expert, NaN first); w = s[ids], divided by
    (sum(w) + epsilon) with normalize = 1, times scale; scores = s. attrs
    k, sigmoid, normalize, groups (1), group_k, group_top, group_fill,
    epsilon (0), scale (1).
  }];
  let summary = "a mixture-of-experts router: scores, (group-limited) top-k, normalized weights";
  let description = [{
    The routing of a mixture-of-experts layer from its router's logits, in
    one op: the experts' affinities (a softmax, as Mixtral and Qwen, or a
    sigmoid, as DeepSeek-V3 and GLM-4-MoE), an optional per-expert bias
    that steers the choice but not the weights (DeepSeek-V3's
    auxiliary-loss-free balancing), optional group-limited selection
    (DeepSeek-V3: only the `group_k` groups whose `group_top` best experts
    score highest are eligible; the others' choice scores become
    `group_fill`), the top `k` experts of each token, and their weights:
    the affinities of the chosen experts, optionally normalized to sum 1
    (`normalize`, with `epsilon` added to the sum) and scaled (`scale`,
    DeepSeek-V3's routed scaling factor). `scores` are the affinities of
    every expert (the load-balancing losses read them).

    `--loom-raise-router` makes it from the ops an import gives; the
    weights' gradient goes back to the logits through the chosen experts'
    affinities (and `scores`' through all), the ids and the bias have none.

    ```mlir
    %w, %ids, %p = nn.router %logits k = 2 {normalize} : (tensor<48x8xf32>) -> (tensor<48x2xf32>, tensor<48x2xi64>, tensor<48x8xf32>)
    %w, %ids, %s = nn.router %logits bias %b k = 8 {sigmoid, normalize, groups = 8 : i64, group_k = 4 : i64, scale = 2.5 : f64} : (tensor<48x256xf32>, tensor<256xf32>) -> (tensor<48x8xf32>, tensor<48x8xi64>, tensor<48x256xf32>)
    ```
  }];
  let arguments = (ins NN_FloatTensor:$logits, Optional<NN_FloatTensor>:$bias, I64Attr:$k,
                   UnitAttr:$sigmoid, UnitAttr:$normalize,
                   DefaultValuedAttr<I64Attr, "1">:$groups,
                   DefaultValuedAttr<I64Attr, "1">:$group_k,
                   DefaultValuedAttr<I64Attr, "2">:$group_top,
                   DefaultValuedAttr<F64Attr, "0.0">:$group_fill,
                   DefaultValuedAttr<F64Attr, "0.0">:$epsilon,
                   DefaultValuedAttr<F64Attr, "1.0">:$scale);
  let results = (outs NN_FloatTensor:$weights, NN_IndexTensor:$ids, NN_FloatTensor:$scores);
  let assemblyFormat = [{
    $logits (`bias` $bias^)? `k` `=` $k attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_SortOp : NN_KernelOp<"sort", [Pure, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<NN_GradientOpInterface>, DeclareOpInterfaceMethods<NN_IntegerRangeOpInterface, ["inferIntegerRange"]>]> {
  let kernelDoc = [{
    input [..., N] (float or integer) -> values (input's type), indices
    [..., N] (i64): each row along the last dim in ascending order (attr
    descending = 1: descending), stable (equal values keep their order);
    NaN sorts above every number.
  }];
  let summary = "each row sorted along the last dim, stably, with the permutation";
  let description = [{
    Stable, so equal keys (tokens routed to one expert) keep their order and
    the result does not depend on the kernel. A float input's gradient goes
    back through the permutation.

    ```mlir
    %v, %p = nn.sort %ids : (tensor<96xi64>) -> (tensor<96xi64>, tensor<96xi64>)
    ```
  }];
  let arguments = (ins NN_NumericTensor:$input, UnitAttr:$descending);
  let results = (outs NN_NumericTensor:$values, NN_IndexTensor:$indices);
  let assemblyFormat = [{
    $input (`descending` $descending^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_GroupedMatmulOp : NN_KernelOp<"grouped_matmul", [Pure, InferTypeOpAdaptor,
    DeclareOpInterfaceMethods<NN_GradientOpInterface>,
    DeclareOpInterfaceMethods<NN_FlopCountOpInterface>,
    DeclareOpInterfaceMethods<NN_SpmdLocalizeOpInterface>,
    DeclareOpInterfaceMethods<NN_GroupedRowsOpInterface>]> {
  let kernelDoc = [{
    input [S, K], weight [E, K, N], or [E, N, K] with transpose_weight
    (float, one dtype), offsets [G] (i32/i64, non-decreasing, at most S; G >=
    group_start + E) -> out [S, N] (input's dtype): rows offsets[g-1] ..
    offsets[g] (from 0 for g = 0) of group g = group_start + e times
    weight[e] (its transpose with transpose_weight); every other row is
    zero. attrs group_start (default 0), transpose_weight (default 0).
    Accumulates in f32 (f64 for f64), in increasing k.
  }];
  let summary = "one GEMM per group of rows, each with its own weight (the experts' GEMM)";
  let description = [{
    The rows of `input` come grouped by expert: group `e` is rows
    `offsets[e-1]` to `offsets[e]` (the running count of tokens per expert),
    multiplied by `weight[e]`, or by its transpose with `transpose_weight`
    (a weight stored `[E, N, K]`, as transformers stores its experts, read
    in place: the canonicalizer folds an `nn.transpose` of the weight into
    the attribute). Rows past the last offset (tokens dropped, or
    sent to no local expert) give zeros. An expert with no rows does no work.

    With `group_start`, the weight holds a block of the groups (expert
    parallelism: each rank holds a block of the experts): `weight[e]` is
    group `group_start + e`, `offsets` still bound all groups, and rows of
    other blocks' groups give zeros, so the blocks' results add up to the
    whole grouped GEMM.

    ```mlir
    %y = nn.grouped_matmul %x, %w, %offs : (tensor<96x32xf32>, tensor<4x32x48xf32>, tensor<4xi32>) -> tensor<96x48xf32>
    %p = nn.grouped_matmul %x, %wb, %offs {group_start = 2 : i64} : (tensor<96x32xf32>, tensor<2x32x48xf32>, tensor<4xi32>) -> tensor<96x48xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$weight, NN_IndexTensor:$offsets,
                   OptionalAttr<I64Attr>:$group_start, UnitAttr:$transpose_weight);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight `,` $offsets attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let extraClassDeclaration = [{
    /// The weight's contracted dim (1, or 2 with transpose_weight) and its
    /// output features' dim.
    unsigned getWeightContractedDim() { return getTransposeWeight() ? 2 : 1; }
    unsigned getWeightFeatureDim() { return getTransposeWeight() ? 1 : 2; }
  }];
}

def NN_GroupedMatmulWeightGradOp : NN_KernelOp<"grouped_matmul_weight_grad", [Pure,
    DeclareOpInterfaceMethods<NN_FlopCountOpInterface>,
    DeclareOpInterfaceMethods<NN_SpmdLocalizeOpInterface>,
    DeclareOpInterfaceMethods<NN_GroupedRowsOpInterface>,
    DeclareOpInterfaceMethods<NN_WidenableResultOpInterface>]> {
  let kernelDoc = [{
    input [S, K], grad [S, N] (float, one dtype), offsets [G] (as
    nn.grouped_matmul, G >= group_start + E) -> out [E, K, N] (the
    operands' dtype, or f32 from bf16/f16): out[e] = input[rows of group
    group_start + e]^T grad[those rows]; zero for a group with no rows.
    attr group_start (default 0). Accumulates in f32 (f64 for f64), in
    increasing row order.
  }];
  let summary = "the weight gradient of nn.grouped_matmul, per group";
  let description = [{
    The result holds groups `group_start` to `group_start + E - 1` (a block
    of the experts, as the forward's weight does). From bf16 or f16
    operands it may be f32 (`--loom-widen-results`): the accumulators
    written as they are, for an f32 master weight's gradient, instead of
    rounded to bf16 and widened again by a cast.

    ```mlir
    %dw = nn.grouped_matmul_weight_grad %x, %dy, %offs : (tensor<96x32xf32>, tensor<96x48xf32>, tensor<4xi32>) -> tensor<4x32x48xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$grad, NN_IndexTensor:$offsets,
                   OptionalAttr<I64Attr>:$group_start);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `,` $grad `,` $offsets attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // LOOM_NN_MOE_OPS_TD
