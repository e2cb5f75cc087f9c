#ifndef LOOM_NN_FUSION_OPS_TD
#define LOOM_NN_FUSION_OPS_TD

//===----------------------------------------------------------------------===//
// Fusion groups (--loom-fuse)
//===----------------------------------------------------------------------===//

// Not a kernel: no runtime kernel of this name exists. Lowering inlines the
// body (--loom-unfuse) until the CUDA backend generates one kernel per group.
def NN_FusedOp : NN_Op<"fused", [IsolatedFromAbove, SingleBlock,
                                 RecursiveMemoryEffects, RecursivelySpeculatable]> {
  let summary = "a group of fusible ops that run as one kernel";
  let description = [{
    A producer-consumer group of elementwise, broadcast, cast and row
    reduction ops (FusibleOpInterface) that `--loom-fuse` found. The
    operands are the group's inputs, the block's arguments stand for them;
    the results are the group's values used outside it (later ops, the
    backward), which `nn.yield` returns. Isolated from above.

    ```mlir
    %r:2 = nn.fused (%x, %w) : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>) {
    ^bb0(%a: tensor<4x8xf32>, %b: tensor<8xf32>):
      %m = nn.mul %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
      %s = nn.reduce_sum %m dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
      nn.yield %m, %s : tensor<4x8xf32>, tensor<4xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<NN_Tensor>:$inputs);
  let results = (outs Variadic<NN_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $inputs `)` attr-dict `:` functional-type($inputs, $results) $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
  }];
}

def NN_YieldOp : NN_Op<"yield", [Pure, Terminator, HasParent<"FusedOp">]> {
  let summary = "the values an nn.fused group returns";
  let arguments = (ins Variadic<NN_Tensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

#endif // LOOM_NN_FUSION_OPS_TD
