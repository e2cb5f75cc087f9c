#ifndef LOOM_PASSES_SHARDING_PASSES_TD
#define LOOM_PASSES_SHARDING_PASSES_TD

include "mlir/Pass/PassBase.td"

def ShardAnnotate : Pass<"loom-shard-annotate", "mlir::ModuleOp"> {
  let summary = "choose a mesh and Megatron-style shardings of weights and the batch";
  let description = [{
    Sets the module's mesh (`dist.mesh`, axes `dp` then `tp`, those of size
    more than 1) and seeds shardings that `--loom-sharding-propagation`
    spreads:

    - tensor parallelism (`tp`): a weight matmul whose result flows, through
      elementwise and shape ops, into `nn.attention` or into another weight
      matmul (Q/K/V, gate/up) is column-parallel: its weight's output dim
      is split over `tp`. The matmuls reading those results (attention
      output, down projection) become row-parallel by propagation. A weight
      matmul whose result is the logits of a cross-entropy (the LM head) is
      split by vocabulary; the loss reads the gathered logits. Weights are
      found by this dataflow, not by name;
    - sequence parallelism (`sp`, with tp): residual-stream values (the
      inputs and outputs of norms and residual adds) are split along the
      sequence over `tp`, so row-parallel outputs are reduce-scattered and
      column-parallel inputs all-gathered;
    - data parallelism (`dp`): the `tokens` argument is split along the
      batch;
    - `zero1`: marks the module (`dist.zero1`) so that propagation also
      splits optimizer state and updates over `dp`.

    A module that already has a `dist.mesh` keeps its user annotations and
    is left alone.

    Before:
    ```mlir
    %w = nn.parameter "q.weight" : tensor<64x32xf32>
    %q = nn.matmul %x, %w {transpose_rhs} : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
    ```
    After (`tp=2`):
    ```mlir
    module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
      %w = nn.parameter "q.weight" {dist.sharding = [#dist.sharding<[["tp"], []]>]} : tensor<64x32xf32>
    ```
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1", "tensor-parallel ranks">,
    Option<"dp", "dp", "int64_t", /*default=*/"1", "data-parallel ranks">,
    Option<"sp", "sp", "bool", /*default=*/"false",
           "sequence parallelism over the tensor-parallel ranks">,
    Option<"zero1", "zero1", "bool", /*default=*/"false",
           "split optimizer state and updates over the data-parallel ranks">,
  ];
  let dependentDialects = ["loom::dist::DistDialect"];
}

def ShardingPropagation : Pass<"loom-sharding-propagation", "mlir::ModuleOp"> {
  let summary = "spread shardings to every value through the ops' sharding rules";
  let description = [{
    Every tensor of every function gets a `dist.sharding` (on its defining
    op, one per result; on function arguments as an argument attribute),
    derived from the annotated ones through each op's
    `ShardingRuleOpInterface` rule: a dim's mesh axes go to its major
    factor and from there to every dim made of that factor, forwards and
    backwards until nothing changes. Factors a rule keeps whole are never
    split; contracted factors that are split make the result a partial sum.
    Values nothing constrains are replicated. The pass knows no op by name.
    With `dist.zero1`, the operands and results of optimizer updates (and
    the parameters holding optimizer state) are further split over `dp`.

    Before:
    ```mlir
    %w = nn.parameter "w" {dist.sharding = [#dist.sharding<[["tp"], []]>]} : tensor<64x32xf32>
    %y = nn.matmul %x, %w {transpose_rhs} : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
    %z = nn.relu %y : tensor<8x64xf32>
    ```
    After:
    ```mlir
    %y = nn.matmul %x, %w {dist.sharding = [#dist.sharding<[[], ["tp"]]>], transpose_rhs} ...
    %z = nn.relu %y {dist.sharding = [#dist.sharding<[[], ["tp"]]>]} : tensor<8x64xf32>
    ```
  }];
  let dependentDialects = ["loom::dist::DistDialect"];
}

def SpmdPartition : Pass<"loom-spmd-partition", "mlir::ModuleOp"> {
  let summary = "rewrite the sharded program into the one every rank runs";
  let description = [{
    Each op runs on local shards: its factors are split as its operands
    already are or as its result should be, whichever moves fewer bytes;
    operands are converted with `dist` collectives (`all_gather` to undo a
    split, `all_reduce` or `reduce_scatter` to settle a partial sum, a
    block taken locally to add one); result types become local shapes;
    means over split factors are scaled by 1/ranks. Partial sums travel
    through additive and linear ops and are settled where a non-linear op
    needs the value. Function results are replicated. Parameters and
    arguments keep `dist.sharding` and `dist.global_type`; a dim that does
    not divide is an error naming the tensor and the numbers.

    Before (`#dist.mesh<["tp"=2]>`):
    ```mlir
    %y = nn.matmul %x, %w {dist.sharding = [#dist.sharding<[[], []], partial = ["tp"]>]} : (tensor<8x64xf32>, tensor<32x64xf32>) -> tensor<8x32xf32>
    %z = nn.relu %y : tensor<8x32xf32>
    ```
    After (with `%x` split on dim 1, `%w` on dim 1):
    ```mlir
    %y = nn.matmul %x, %w : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
    %s = dist.all_reduce %y {axes = ["tp"], reduce = "sum"} : tensor<8x32xf32>
    %z = nn.relu %s : tensor<8x32xf32>
    ```
  }];
  let dependentDialects = ["loom::dist::DistDialect"];
}

#endif
