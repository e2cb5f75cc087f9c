#ifndef LOOM_PASSES_FUSION_PASSES_TD
#define LOOM_PASSES_FUSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def FuseAdamW : Pass<"loom-fuse-adamw", "mlir::ModuleOp"> {
  let summary = "one nn.adamw_multi call for a run of in-place AdamW updates";
  let description = [{
    The optimizer step ends with one `nn.adamw` per parameter, each often
    preceded by the gradient-clipping `nn.mul` of its gradient by a scalar.
    Each call reads and writes a few tensors; issued one by one they pay a
    launch each and leave small tensors' blocks idle. This pass replaces a
    run of in-place updates (results written over the parameter and its
    moments) sharing learning rate, step, betas and epsilon with one
    `nn.adamw_multi`, the clipping scale folded in (computed the same way:
    the gradient times the scale in f32), so the scaled gradients are never
    written. Runs on `rt` programs before `--loom-plan-memory`.

    Before:
    ```mlir
    rt.kernel "nn.mul" (%g0, %scale) -> (%s0) : ...
    rt.kernel "nn.adamw" (%p0, %s0, %m0, %v0, %lr, %step) -> (%p0, %m0, %v0) attrs {..., weight_decay = 1.0e-01 : f64} : ...
    rt.kernel "nn.mul" (%g1, %scale) -> (%s1) : ...
    rt.kernel "nn.adamw" (%p1, %s1, %m1, %v1, %lr, %step) -> (%p1, %m1, %v1) attrs {..., weight_decay = 0.0 : f64} : ...
    ```
    After:
    ```mlir
    rt.kernel "nn.adamw_multi" (%lr, %step, %scale, %p0, %g0, %m0, %v0, %p1, %g1, %m1, %v1)
        -> (%p0, %m0, %v0, %p1, %m1, %v1)
        attrs {..., has_scale = 1 : i64, weight_decays = array<f64: 1.0e-01, 0.0>} : ...
    ```
  }];
}

def FuseMatmulEpilogue : Pass<"loom-fuse-matmul-epilogue", "mlir::ModuleOp"> {
  let summary = "bias adds, residual adds and tanh-GELUs after a GEMM become its epilogue";
  let description = [{
    A GEMM whose result only feeds an `nn.add` of a `[N]` bias takes the
    bias as a third operand with `epilogue = "bias"`; when a tanh `nn.gelu`
    is then the biased result's only reader (directly or through a
    reshape), the GEMM writes the activation itself, `epilogue =
    "bias_gelu"` (cuBLASLt's fused epilogues on the GPU). In training the
    GELU's input is kept for its gradient, so there only the bias fuses.
    An `nn.add` of the result and a tensor of its own shape and type (a
    residual; the input gradient summed over the Q, K and V projections or
    over gate and up; a weight gradient summed over microbatches) becomes
    `epilogue = "add"` with that tensor as the third operand: the GEMM
    writes the sum (cuBLASLt's beta = 1, rounded once), where the GEMM ran
    if the addend is ready by then, else where the add ran. The CPU
    reference rounds the product and adds, bitwise the unfused ops.
    Runs on `rt` programs before `--loom-plan-memory`.

    Before:
    ```mlir
    rt.kernel "nn.matmul" (%x, %w) -> (%t) : ...
    rt.kernel "nn.add" (%t, %b) -> (%u) : ...
    rt.kernel "nn.gelu" (%u) -> (%v) attrs {approximate = "tanh"} : ...
    ```
    After:
    ```mlir
    rt.kernel "nn.matmul" (%x, %w, %b) -> (%v) attrs {epilogue = "bias_gelu"} : ...
    ```
  }];
}

def Fuse : Pass<"loom-fuse", "mlir::ModuleOp"> {
  let summary = "groups chains of elementwise, broadcast, cast and row-reduction ops into nn.fused";
  let description = [{
    Groups producer-consumer chains of nn ops that implement
    `FusibleOpInterface` (elementwise, broadcast, cast, reduction over the
    innermost dims) into one `nn.fused` op holding the original ops in its
    region. Decided by the interface only: the pass knows no op by name.

    Rules: groups are formed within one block, in program order (each op
    joins the group of its first fusible producer that can take it, else
    starts one); every op belongs to at most one group, so no op (and no
    reduction) is ever duplicated; ops whose discardable attributes differ
    (`pipe.stage`, `pipe.rank`) never share a group; an op joins a group
    only if none of its other inputs depends on the group (through any op,
    such as a collective, or another group), so groups never cross a
    non-fusible op and the fused program stays acyclic; groups of one op
    are left alone. A group's values used outside it (later ops, the
    backward, the function's results) are the `nn.fused` op's results.
    An op joins a group only within `max-span` ops (in program order) of
    the group's first op: the `nn.fused` op runs where the group's last op
    was (ops between that read the group move after it), so a group that
    spans the step (gradient accumulations across microbatches) would hold
    its inputs until the end. Lowering keeps a group of elementwise,
    broadcast and cast ops as one `nn.fused` kernel call (the CPU backend
    runs its body op by op, the CUDA backend one kernel generated from it)
    and inlines any other (`--loom-unfuse keep-generatable`).

    Before:
    ```mlir
    %m = nn.mul %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %s = nn.reduce_sum %m dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
    ```
    After:
    ```mlir
    %s = nn.fused (%x, %w) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4xf32> {
    ^bb0(%a: tensor<4x8xf32>, %b: tensor<8xf32>):
      %m = nn.mul %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
      %r = nn.reduce_sum %m dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
      nn.yield %r : tensor<4xf32>
    }
    ```
  }];
  let options = [
    Option<"maxSpan", "max-span", "unsigned", "64",
           "the most ops (in program order) from a group's first op to its last">,
  ];
}

def Unfuse : Pass<"loom-unfuse", "mlir::ModuleOp"> {
  let summary = "inlines nn.fused ops' bodies in their place (all, or those no kernel can be generated for)";
  let description = [{
    Replaces each `nn.fused` op by the ops of its body, its block's
    arguments by its inputs and its results by the values `nn.yield`
    returns: the program the CPU backend runs op by op, bit for bit what
    it computed before `--loom-fuse`.

    With `keep-generatable`, a group stays when the CUDA code generator
    can make one kernel of it (its body, `FusedOp::kernelBody()`, has no
    `fusedCodegenProblem`: elementwise, broadcast and cast members with
    scalar formulas, over f32, bf16, f16 and i1):
    `--loom-lower-to-rt` makes it one `rt.kernel "nn.fused"` call. Every
    other group (a row reduction, an integer value)
    is inlined. Loom's pipeline runs it so, first in its `rt` step.

    Before (`keep-generatable`):
    ```mlir
    %a:2 = nn.fused (%x, %g) : ... {   // silu, mul: kept
    ^bb0(...): ... nn.yield %s, %m : ...
    }
    %b = nn.fused (%y) : ... {         // mul, reduce_sum: inlined
    ^bb0(%v: tensor<4x8xf32>):
      %sq = nn.mul %v, %v : ...
      %r = nn.reduce_sum %sq dims = [1] : ...
      nn.yield %r : tensor<4xf32>
    }
    ```
    After:
    ```mlir
    %a:2 = nn.fused (%x, %g) : ... { ... }
    %sq = nn.mul %y, %y : ...
    %b = nn.reduce_sum %sq dims = [1] : ...
    ```
  }];
  let options = [
    Option<"keepGeneratable", "keep-generatable", "bool", "false",
           "keep the groups the CUDA code generator takes (one nn.fused call each)">,
  ];
}

def WidenResults : Pass<"loom-widen-results", "mlir::ModuleOp"> {
  let summary = "a widening cast of a GEMM's result becomes the GEMM's own result type";
  let description = [{
    In bf16 training every weight gradient is a bf16 GEMM result cast to
    f32 for the f32 master weights: the GEMM accumulates in f32, rounds to
    bf16, writes it, and a cast reads it back and writes f32. An
    `nn.cast` to a wider float type whose input is the only use of a
    result of an op implementing `WidenableResultOpInterface` is folded
    into that op: the result gets the wider type, the cast disappears. The
    values change only by the rounding that is skipped (the result is the
    f32 accumulation itself), so this is not bit-identical with the
    unmodified program; the loss stays within bf16 rounding of it. The
    logits of a bf16 LM head cast to f32 for the loss fold the same way.

    Before:
    ```mlir
    %g = nn.matmul %x, %dy {transpose_lhs} : (tensor<64x192xbf16>, tensor<64x512xbf16>) -> tensor<192x512xbf16>
    %f = nn.cast %g : tensor<192x512xbf16> -> tensor<192x512xf32>
    ```
    After:
    ```mlir
    %f = nn.matmul %x, %dy {transpose_lhs} : (tensor<64x192xbf16>, tensor<64x512xbf16>) -> tensor<192x512xf32>
    ```
  }];
}

def FuseLinearCrossEntropy : Pass<"loom-fuse-linear-cross-entropy", "mlir::ModuleOp"> {
  let summary = "the LM head's GEMM, the loss and their gradients become one chunked nn.linear_cross_entropy";
  let description = [{
    In a training step the LM head writes `[N, V]` f32 logits, the loss
    reads them, the loss gradient writes `[N, V]` again (in the compute
    type), and two GEMMs read that for the input's and the weight's
    gradients. At a 128k vocabulary and 8k tokens that is 4 GiB of logits
    and 2 GiB of gradient alive at once. The five ops become one
    `nn.linear_cross_entropy`, which runs them chunk by chunk of rows: only
    a chunk's logits and gradient exist (the kernel's scratch, which the
    memory planner places), the weight gradient accumulates in f32 across
    chunks.

    Matched from each `nn.cross_entropy_grad`: its logits (through
    reshapes) are a GEMM's result `x w^T` read by nothing but that gradient
    and one `nn.cross_entropy` of the same labels and reduction (mean or
    sum); its result (through reshapes) is read by nothing but the GEMMs
    `g w` and `g^T x`. Anything else (logits returned, a vocabulary-parallel
    loss, a collective in between) is left as it is. Run after
    `--loom-widen-results` (the logits written in f32, the gradient in the
    compute type). The loss and the input gradient are what the ops give
    one by one; the weight gradient differs only by where its f32 sum is
    rounded (not at all when it is f32).
  }];
  let options = [
    Option<"chunk", "chunk", "int64_t", "0",
           "rows a chunk (0: about 1 GiB of logits and gradient, at least 2048 rows)">,
  ];
}

def ShareCasts : Pass<"loom-share-casts", "mlir::ModuleOp"> {
  let summary = "one nn.cast per value and type in a block: the master weights cast once a step";
  let description = [{
    A training step unrolled over microbatches casts each f32 master weight
    to the compute type once per microbatch: the copies carry their
    microbatch's tag, so CSE keeps them apart, yet each reads the same
    weights and writes the same values. Every `nn.cast` of a value to a
    type that an earlier cast in the block already made is replaced by that
    one. The bf16 weights then live from the first microbatch to the last
    (as the compute-type copy of a framework's mixed-precision optimizer
    does), and the per-microbatch passes over the f32 weights are gone.
    Bit-identical.
  }];
}

def FoldTransposes : Pass<"loom-fold-transposes", "mlir::ModuleOp"> {
  let summary = "transposes that the op before or after can do itself are folded into it";
  let description = [{
    An `nn.transpose` whose only reader implements
    `TransposeAbsorbingOpInterface` and can take that operand permuted, or
    whose input is the only use of such an op's result that can write it
    permuted, is folded into that op: one pass over memory less. In a
    Llama layer, rope reads the `[B, S, H, D]` query and key projections
    and writes `[B, H, S, D]` for attention, and the gradients' rope writes
    `[B, S, H, D]` back: four transposes a layer. Runs after the training
    step is built. Bit-identical (the same values move).

    Before:
    ```mlir
    %t = nn.transpose %q permutation = [0, 2, 1, 3] : tensor<1x64x6x32xbf16> -> tensor<1x6x64x32xbf16>
    %r = nn.rope %t, %cos, %sin : (tensor<1x6x64x32xbf16>, tensor<64x32xbf16>, tensor<64x32xbf16>) -> tensor<1x6x64x32xbf16>
    ```
    After:
    ```mlir
    %r = nn.rope %q, %cos, %sin transpose = input : (tensor<1x64x6x32xbf16>, tensor<64x32xbf16>, tensor<64x32xbf16>) -> tensor<1x6x64x32xbf16>
    ```
  }];
}

def FuseSumSquares : Pass<"loom-fuse-sum-squares", "mlir::ModuleOp"> {
  let summary = "one nn.sum_squares_multi call for a run of the gradient norm's sums of squares";
  let description = [{
    The global gradient norm sums every gradient's squares: per gradient an
    `nn.mul` of the gradient by itself, an `nn.reduce_sum` of the rows, and
    an `nn.reduce_sum` of those to an f32 scalar, then scalar adds. Three
    kernels per gradient, the squares written and read back: at the 0.95B
    Llama's size about 5 ms a step on an H200, several times what reading
    the gradients once costs. This pass replaces a run of such chains with
    one `nn.sum_squares_multi` call, which reads each gradient once and
    writes each chain's scalar where the chain did (so whatever adds,
    all-reduces or exchanges the sums next is unchanged), plus an f64
    scratch of per-chunk partial sums. The squares are no longer rounded to
    the gradient's type before they are summed, so the norm is at least as
    exact as before, not bitwise the same.

    A chain joins the run at its last kernel; the call goes before the
    first op that reads a sum of the run or writes a gradient it reads (a
    collective, a copy, an output, another stream), and the running
    total's scalar adds in between move after the call. Runs on `rt`
    programs before `--loom-plan-memory`.

    Before:
    ```mlir
    rt.kernel "nn.mul" (%g0, %g0) -> (%sq0) : ...
    rt.kernel "nn.reduce_sum" (%sq0) -> (%r0) attrs {dims = array<i64: 1>, keepdim = 0 : i64} : ...
    rt.kernel "nn.reduce_sum" (%r0) -> (%s0) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : ...
    rt.kernel "nn.mul" (%g1, %g1) -> (%sq1) : ...
    rt.kernel "nn.reduce_sum" (%sq1) -> (%s1) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : ...
    rt.kernel "nn.add" (%s0, %s1) -> (%total) : ...
    ```
    After:
    ```mlir
    %partials = rt.alloc {name = "sum_squares.partials"} : memref<2xf64>
    rt.kernel "nn.sum_squares_multi" (%g0, %g1) -> (%s0, %s1, %partials) : ...
    rt.kernel "nn.add" (%s0, %s1) -> (%total) : ...
    ```
  }];
}

def FuseNormWeightGrad : Pass<"loom-fuse-norm-weight-grad", "mlir::ModuleOp"> {
  let summary = "one nn.norm_weight_grad call per norm weight gradient";
  let description = [{
    Autodiff writes a norm's weight gradient as the norm again without its
    weight (`nn.rms_norm` or `nn.layer_norm`), an `nn.mul` by the incoming
    gradient and an `nn.reduce_sum` over the rows, in bf16 training then an
    `nn.cast` to the f32 master weight's type: four kernels, the normalized
    input and the product written and read back. This pass replaces each
    with one `nn.norm_weight_grad`, which reads x and dy once and writes the
    gradient in the cast's type, with an f32 scratch (row statistics and
    per-block column sums). The products are no longer rounded to bf16
    before they are summed, so the gradient is at least as exact as before,
    not bitwise the same. Runs on `rt` programs before `--loom-plan-memory`.

    Before:
    ```mlir
    rt.kernel "nn.rms_norm" (%x) -> (%n) attrs {epsilon = 1.0e-05 : f64, has_weight = 0 : i64} : ...
    rt.kernel "nn.mul" (%dy, %n) -> (%p) : ...
    rt.kernel "nn.reduce_sum" (%p) -> (%g) attrs {dims = array<i64: 0, 1>, keepdim = 0 : i64} : ...
    rt.kernel "nn.cast" (%g) -> (%g32) : (memref<64xbf16>) -> memref<64xf32>
    ```
    After:
    ```mlir
    %s = rt.alloc {name = "norm_weight_grad.scratch"} : memref<...xf32>
    rt.kernel "nn.norm_weight_grad" (%x, %dy) -> (%g32, %s) attrs {epsilon = 1.0e-05 : f64} : ...
    ```
  }];
}

def FuseSwiglu : Pass<"loom-fuse-swiglu", "mlir::ModuleOp"> {
  let summary = "the SwiGLU product and its gradients as one kernel each";
  let description = [{
    A Llama MLP multiplies silu of the gate projection with the up
    projection, `h = silu(g) * u`, keeping `s = silu(g)` for the backward,
    which computes `du = dy * s` and `dg = silu_grad(g, dy * u)`: five kernels
    and 14 passes over `[tokens, ffn]` tensors. `nn.silu` followed by the
    `nn.mul` of its result becomes one `nn.swiglu` (g, u -> s, h), run where
    the product ran; the two products and the silu gradient become one
    `nn.swiglu_grad` (g, u, s, dy -> dg, du), run where the first product
    ran, and `dy * u` is never written. Bitwise the unfused kernels on the
    CPU (it runs them); the CUDA kernels compute each element with the
    unfused kernels' formulas. Runs on `rt` programs before
    `--loom-plan-memory`.
  }];
}

def FuseFp8Quantize : Pass<"loom-fuse-fp8-quantize", "mlir::ModuleOp"> {
  let summary = "a current-scaling FP8 quantization and its scales as one kernel";
  let description = [{
    A current-scaling FP8 recipe quantizes each GEMM operand with its
    transposed copy (for the other GEMM that reads it) from this step's
    amax: `nn.amax` of x in the tiles of x, `nn.fp8_scale`, the same for
    the copy's tiles (then `nn.transpose` of those scales, or a view when
    they are one row), then `nn.quantize` -- five to seven kernels, x read
    three times. This pass replaces each such chain whose amaxes feed only
    their scales, and whose scales nothing else reads before the
    quantization, and whose tiles each lie in one 128 x 128 block of x and
    of its copy (`fp8TilesInBlocks`: DeepSeek-V3's blockwise), with one
    `nn.quantize_tiles` (x -> q, qT, scale, scaleT)
    where the quantization ran, writing the buffers the chain wrote.
    Bitwise the unfused kernels (the CPU runs them); on CUDA, tiles within
    128 x 128 blocks (DeepSeek-V3's 1 x 128 and 128 x 128) read x once.
    The tensorwise chain (one amax of all of x, its scale, `nn.quantize`
    of x and its copy under it) becomes one `nn.quantize_tensor` (x -> q,
    qT, scale): on CUDA two launches instead of five (the amax's last block
    writes the scale). Then, where one kernel writes all of x, that writer
    takes the FP8 scale epilogue (`fp8_scale_of`, runtime/abi/KernelList.h:
    one more output, x's scale) and the quantization is `nn.quantize` of x
    under it: a kernel that finishes the amax as it writes (SwiGLU and its
    gradient on CUDA) saves the pass over x the amax made.
    Runs on `rt` programs before `--loom-plan-memory`.
  }];
  let options = [
    Option<"writerScales", "writer-scales", "bool", /*default=*/"true",
           "let the kernel that writes a tensor quantized whole give its scale">,
  ];
}

def FuseCasts : Pass<"loom-fuse-casts", "mlir::ModuleOp"> {
  let summary = "one nn.cast_multi call for a run of consecutive casts";
  let description = [{
    A bf16 training step starts by casting every f32 master weight to bf16:
    one `nn.cast` per parameter, nothing else between them, most of them
    small enough that a launch costs more than its bytes. This pass replaces
    each run of consecutive casts with one source and one destination type
    (only buffer declarations between them, none reading another's result)
    with one `nn.cast_multi` call, which writes the same bits. Runs on `rt`
    programs before `--loom-plan-memory`.

    Before:
    ```mlir
    rt.kernel "nn.cast" (%w0) -> (%b0) : (memref<64x32xf32>) -> memref<64x32xbf16>
    %b1 = rt.alloc : memref<32xbf16>
    rt.kernel "nn.cast" (%w1) -> (%b1) : (memref<32xf32>) -> memref<32xbf16>
    ```
    After:
    ```mlir
    %b1 = rt.alloc : memref<32xbf16>
    rt.kernel "nn.cast_multi" (%w0, %w1) -> (%b0, %b1) : ...
    ```
  }];
}

def OptimizerWritesCopies : Pass<"loom-optimizer-writes-copies", "mlir::ModuleOp"> {
  let summary = "the optimizer writes each weight's compute-precision copy";
  let description = [{
    A bf16 training step casts every f32 master weight to bf16 before its
    forward (`nn.cast_multi`), although the weights changed only in the
    previous step's optimizer update, which had each new value in registers.
    This pass lets the update write the copy: the weight's
    `nn.adamw_multi` gains one output per kept copy (attribute `copies`,
    the groups', in order) holding the new weight rounded to the copy's type
    (the bits the cast would write), the copy becomes a persistent buffer
    (`rt.alloc persistent`: not a parameter, never saved or loaded), and the
    cast becomes a `refresh` call, which the runtime runs only in the first
    step after the parameters are set (initialized, loaded from weights or
    restored from a checkpoint). Megatron's distributed optimizer keeps its
    bf16 parameters the same way.

    A copy is kept only when its weight is a parameter that one
    `nn.adamw_multi` writes and nothing else does (a ZeRO-1 all-gather does:
    such weights keep their casts), the copy is scratch that only the cast
    writes, and every read of it comes before the update (it is the copy of
    the weight the step began with). Runs on `rt` programs after
    `--loom-fuse-adamw` and `--loom-fuse-casts`, before
    `--loom-plan-memory`.
  }];
}

#endif
