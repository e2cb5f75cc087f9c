#ifndef LOOM_NN_FUSION_OPS_TD
#define LOOM_NN_FUSION_OPS_TD

//===----------------------------------------------------------------------===//
// Fusion groups (--loom-fuse)
//===----------------------------------------------------------------------===//

// Lowering keeps a group whose body the CUDA code generator takes (elementwise,
// broadcast and cast members with scalar formulas, f32/bf16/f16/i1) as one
// call of the runtime kernel nn.fused below, and inlines any
// other (--loom-unfuse keep-generatable).
def NN_FusedOp : NN_Op<"fused", [IsolatedFromAbove, SingleBlock,
                                 RecursiveMemoryEffects, RecursivelySpeculatable]> {
  let summary = "a group of fusible ops that run as one kernel";
  let description = [{
    A producer-consumer group of elementwise, broadcast, cast and row
    reduction ops (FusibleOpInterface) that `--loom-fuse` found. The
    operands are the group's inputs, the block's arguments stand for them;
    the results are the group's values used outside it (later ops, the
    backward), which `nn.yield` returns. Isolated from above.

    `--loom-lower-to-rt` makes a group one call of the `nn.fused` kernel,
    its body carried as text (`kernelBody()`, runtime/abi/FusedBody.h): the
    CPU backend runs it op by op, the CUDA backend as one generated kernel.

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
    /// The group as the nn.fused kernel's body (runtime/abi/FusedBody.h):
    /// each member's kernel, operands, result type and kernel attributes.
    /// An error says why it has none (a member without a kernel, a dynamic
    /// shape, an element type or attribute the format cannot carry).
    ::llvm::Expected<::loom::FusedBody> kernelBody();
  }];
}

// The kernel a kept fusion group lowers to.
def NN_FusedKernel : NN_RuntimeKernel<"nn.fused", 1, -1, -1,
    [NN_KernelRequiredAttr<"body", "Str">], [{
  A fusion group (nn.fused) as one call: its inputs -> the values it yields.
  attr body: the group's ops as text (runtime/abi/FusedBody.h): the input
  types, then per member its kernel, operands (group inputs or earlier
  members), attributes and result type, then the members yielded, one output
  each. The members are elementwise, broadcast and cast kernels with scalar
  formulas over f32, bf16, f16 and i1. Runs as the members' kernels in order
  (CPU: bit for bit the unfused program) or as one kernel generated from the
  formulas (CUDA: kernels/fused), whose members' values not yielded are never
  stored.
}]>;

def NN_YieldOp : NN_Op<"yield", [Pure, Terminator, HasParent<"FusedOp">]> {
  let summary = "the values an nn.fused group returns";
  let arguments = (ins Variadic<NN_Tensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

#endif // LOOM_NN_FUSION_OPS_TD
