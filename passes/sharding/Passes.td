#ifndef LOOM_PASSES_SHARDING_PASSES_TD
#define LOOM_PASSES_SHARDING_PASSES_TD

include "mlir/Pass/PassBase.td"

def ExpandKvHeads : Pass<"loom-expand-kv-heads", "mlir::ModuleOp"> {
  let summary = "give attention one key/value head per query head where tensor parallelism cannot split the key/value heads";
  let description = [{
    Tensor parallelism splits attention by heads. A model with fewer
    key/value heads than ranks (multi-query attention: one; GQA with few
    groups), or a count the ranks do not divide, has query heads that
    divide but key/value heads that do not. Each such attention's keys and
    values are gathered to one head per query head (head h reads key/value
    head h / (heads / kv_heads), as grouped-query attention defines it), so
    the attention splits by its query heads; each rank then holds the key
    and value heads its query heads read (Megatron replicates them too).
    The gradients of the copies add up in the gather's gradient. Run before
    --loom-build-training-step, with `ranks` the tensor-parallel ranks.

    Before (`ranks=2`):
    ```mlir
    %o = nn.attention %q, %k, %v causal scale = 0.35 : (tensor<2x4x8x8xf32>, tensor<2x1x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32>
    ```
    After:
    ```mlir
    %i = nn.constant dense<0> : tensor<4xi64>
    %k4 = nn.gather %k, %i axis = 1 : (tensor<2x1x8x8xf32>, tensor<4xi64>) -> tensor<2x4x8x8xf32>
    %v4 = nn.gather %v, %i axis = 1 : (tensor<2x1x8x8xf32>, tensor<4xi64>) -> tensor<2x4x8x8xf32>
    %o = nn.attention %q, %k4, %v4 causal scale = 0.35 : ...
    ```
  }];
  let options = [
    Option<"ranks", "ranks", "int64_t", /*default=*/"1", "tensor-parallel ranks">,
  ];
}

def ShardAnnotate : Pass<"loom-shard-annotate", "mlir::ModuleOp"> {
  let summary = "choose a mesh and Megatron-style shardings of weights and the batch";
  let description = [{
    Sets the module's mesh (`dist.mesh`, axes `dp`, `ep` then `tp`, those of
    size more than 1) and seeds shardings that `--loom-sharding-propagation`
    spreads:

    - tensor parallelism (`tp`): a weight matmul whose result flows, through
      elementwise and shape ops, into `nn.attention` or into another weight
      matmul (Q/K/V, gate/up) is column-parallel: its weight's output dim
      is split over `tp`. The matmuls reading those results (attention
      output, down projection) become row-parallel by propagation. A weight
      matmul whose result is the logits of a cross-entropy (the LM head) is
      split by vocabulary, and so is the loss (`--loom-spmd-partition`
      computes it from each block's statistics). An embedding table whose
      rows divide by `tp` is split by rows (vocabulary-parallel). Weights
      are found by this dataflow, not by name;
    - sequence parallelism (`sp`, with tp): residual-stream values (the
      inputs and outputs of norms and residual adds) are split along the
      sequence over `tp`, so row-parallel outputs are reduce-scattered and
      column-parallel inputs all-gathered;
    - data parallelism (`dp`): the `tokens` argument is split along the
      batch;
    - expert parallelism (`ep`): the batch is split over `ep` too (the
      expert-parallel ranks are data-parallel ranks for everything but the
      experts), and the experts' weights (the weight operand of each forward
      `nn.grouped_matmul`) are split along their expert dim: each rank
      holds a block of the experts and computes their rows of every grouped
      GEMM (its result is partial over `ep`); the routed rows are gathered
      over the batch axes first, so every rank sees every token's choices;
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
    Option<"ep", "ep", "int64_t", /*default=*/"1",
           "expert-parallel ranks (the experts split over them; the batch too)">,
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

def GatherGroupRows : Pass<"loom-gather-group-rows", "mlir::ModuleOp"> {
  let summary = "dispatch each row only to the ranks whose experts read it (dist.gather_rows)";
  let description = [{
    Expert parallelism's dispatch, as partitioned: the tokens are
    all-gathered over the ranks splitting them (`dist.all_gather`), then
    the routed rows gathered from them (`nn.gather` by the sorted choices'
    tokens), and each rank's grouped GEMMs read only the rows of its own
    block of experts. Every token goes to every rank.

    Where every reader of such a gather reads only its block's rows
    (`GroupedRowsOpInterface`: the same offsets, first group and count,
    the block moving along the all-gather's axes), the pair becomes one
    `dist.gather_rows`: each rank receives only the rows of its block, from
    the ranks holding their tokens (an all-to-all whose counts the routing
    gives). The ranges it needs, each rank's `[first, end)` of the sorted
    rows, are read from the offsets: `[offsets[g - 1], offsets[g + count -
    1])` for a block starting at group g. Rows outside a rank's range are
    zero, which its readers never read. The combine, rows zero outside
    each rank's block (a grouped op's, maybe scaled row by row) unsorted by
    the inverse of a sort's positions p, summed over each token's k rows and
    reduce-scattered, becomes a `dist.scatter_rows` by `p / k`; the
    backward's two are the same shapes. Decided by interfaces, not names.
    Off unless asked (`loom-compile --ep-dispatch=all-to-all`): over NCCL
    the row lists are read on the host, so the step is not captured.
  }];
  let dependentDialects = ["loom::dist::DistDialect", "loom::nn::NNDialect"];
}

def ElideGroupReductions : Pass<"loom-elide-group-reductions", "mlir::ModuleOp"> {
  let summary = "drop the reductions of expert-parallel results that only their own experts read";
  let description = [{
    Under expert parallelism (`--ep`) a rank's grouped GEMM computes the
    rows of its own experts and leaves zeros elsewhere, so its result is
    partial over `ep` and the partitioner sums it (`dist.all_reduce`)
    before any op that is not linear. Between an expert's two GEMMs (the
    activation, and its gradient in the backward) that sum is not needed:
    the next grouped GEMM of the same block of experts reads only those
    experts' rows, and every op on the way computes each row from the same
    row of its operands, so those rows are already whole on their rank.

    An all-reduce (a sum) of a result that an op with
    `GroupedRowsOpInterface` writes only at its block's rows, over exactly
    the axes its block moves along, is dropped when every op that reads
    it, transitively, either computes row by row (its sharding rule maps
    the rows of what it reads to the rows of every result) or reads only
    the same block's rows of the same groups (`GroupedRowsOpInterface`).
    Decided by interfaces and sharding rules, not by op names.
  }];
  let dependentDialects = ["loom::dist::DistDialect"];
}

def SpmdPartition : Pass<"loom-spmd-partition", "mlir::ModuleOp"> {
  let summary = "rewrite the sharded program into the one every rank runs";
  let description = [{
    Each op runs on local shards: its factors are split as its operands
    already are or as its result should be, whichever moves fewer bytes;
    operands are converted with `dist` collectives (`all_gather` to undo a
    split, `all_to_all` to move one to another dim, `all_reduce` or
    `reduce_scatter` to settle a partial sum, and a local `nn.slice` to
    take this rank's block of a replicated tensor);
    result types become local shapes. An op that works on its rank's block
    (a local slice, a vocabulary-parallel embedding or its gradient) carries
    its attributes as rank 0 has them and `dist.rank_offsets`, from which
    the emitter writes each rank's. A cross-entropy whose logits are split
    by classes becomes the vocabulary-parallel loss: each block's
    statistics (`nn.cross_entropy_stats`), all-gathered, then
    `nn.cross_entropy_combine` (the loss) and
    `nn.cross_entropy_block_grad` (each block's gradient);
    means over split factors are scaled by 1/ranks. Partial sums travel
    through additive and linear ops and are settled where a non-linear op
    needs the value; a linear op runs whole over a partial sum's axes
    rather than settle it when the chain of linear readers after it is
    smaller (the experts' partial rows, weighted, unsorted and summed over
    the k choices, reduce-scattered as the tokens' outputs). A value read by
    several ops is settled once in place unless carrying it costs less. A
    reader of two float values carries a partial sum only when the other is
    whole; where that other value is not partitioned yet, the function is
    partitioned a second time with the first run's layouts as the guess,
    and the run whose collectives move fewer elements is kept. Function
    results are replicated. Parameters and
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
    %s = dist.all_reduce %y {axes = ["tp"], reduce = #dist.reduce<sum>} : tensor<8x32xf32>
    %z = nn.relu %s : tensor<8x32xf32>
    ```
  }];
  let dependentDialects = ["loom::dist::DistDialect"];
}

def BucketReductions : Pass<"loom-bucket-reductions", "mlir::ModuleOp"> {
  let summary = "group data-parallel gradient reductions into buckets, as DDP does";
  let description = [{
    After `--loom-spmd-partition`, each gradient's data-parallel reduction
    (a `sum` or `mean` `dist.all_reduce`, or with ZeRO-1 `dist.reduce_scatter`,
    over a group that includes the `axis` mesh axis) sits right after the
    gradient's producer: one collective per gradient, in backward order.
    This pass walks them in program order and gathers those that share
    the op, axes, reduction, element type (and a reduce_scatter's dim) into
    buckets of at least `bucket-bytes` input bytes (the last bucket of a
    kind may be smaller; a gradient larger than the cap gets a bucket of its
    own). Each bucket becomes one collective with several inputs and results,
    placed where its last member was: issued as soon as the last of its
    gradients is produced. A bucket is closed early when one of its results
    is read before the next gradient of its kind, so no reader moves.
    Tensor-parallel reductions and `max` reductions are left alone.
    `bucket-bytes=0` leaves the program as it is.

    Before (`bucket-bytes=4096`):
    ```mlir
    %dw2 = nn.matmul ...
    %g2 = dist.all_reduce %dw2 {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<16x32xf32>
    %dw1 = nn.matmul ...
    %g1 = dist.all_reduce %dw1 {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<16x32xf32>
    %dw0 = nn.matmul ...
    %g0 = dist.all_reduce %dw0 {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<16x32xf32>
    ```
    After (2 KiB each: the first two fill a bucket):
    ```mlir
    %dw2 = nn.matmul ...
    %dw1 = nn.matmul ...
    %g2, %g1 = dist.all_reduce %dw2, %dw1 {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<16x32xf32>, tensor<16x32xf32>
    %dw0 = nn.matmul ...
    %g0 = dist.all_reduce %dw0 {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<16x32xf32>
    ```
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t", /*default=*/"25 * 1024 * 1024",
           "close a bucket once its inputs hold this many bytes (0: no bucketing)">,
    Option<"axis", "axis", "std::string", /*default=*/"\"dp\"",
           "the data-parallel mesh axis">,
  ];
  let statistics = [
    Statistic<"numBuckets", "buckets", "collectives made of several reductions">,
    Statistic<"numReductions", "bucketed-reductions", "reductions moved into buckets">,
  ];
  let dependentDialects = ["loom::dist::DistDialect"];
}

#endif
