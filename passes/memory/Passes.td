#ifndef LOOM_PASSES_MEMORY_PASSES_TD
#define LOOM_PASSES_MEMORY_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanMemory : Pass<"loom-plan-memory", "mlir::ModuleOp"> {
  let summary = "assign arena offsets: static, liveness-based, with reuse";
  let description = [{
    Parameters are laid out one after another in the persistent arena.
    Scratch buffers (inputs, allocations, and the aliases that share them)
    are live from their first to their last use in program order (inputs
    from the start, outputs to the end); buffers whose lifetimes do not
    overlap may share bytes. Offsets are chosen greedily, largest buffer
    first, at the lowest aligned offset that does not collide with a live
    neighbour. The program records `arena_sizes = [persistent, scratch]` and
    `scratch_unplanned_bytes`, the sum of all scratch buffers.

    Before:
    ```mlir
    %1 = rt.alloc : memref<1024xf32>
    rt.kernel "nn.relu" (%0) -> (%1) ...
    %2 = rt.alloc : memref<1024xf32>
    rt.kernel "nn.exp" (%1) -> (%2) ...
    %3 = rt.alloc : memref<1024xf32>
    rt.kernel "nn.neg" (%2) -> (%3) ...
    ```
    After (`%3` reuses `%1`'s bytes):
    ```mlir
    %1 = rt.alloc offset = 4096 : memref<1024xf32>
    %2 = rt.alloc offset = 8192 : memref<1024xf32>
    %3 = rt.alloc offset = 4096 : memref<1024xf32>
    ```
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"256",
           "byte alignment of every buffer">
  ];
}

def Recompute : Pass<"loom-recompute", "mlir::ModuleOp"> {
  let summary = "recompute forward values in the backward instead of keeping them";
  let description = [{
    Runs on a training step (after `--loom-build-training-step`). A forward
    value the backward reads is kept alive from the forward to the
    backward. This pass clones chosen forward ops into the backward, just
    before their first backward use, and points the backward's uses at the
    clones, so the forward's values die at their last forward use. The
    clones compute exactly what the forward did: losses and gradients are
    unchanged. They carry the forward op's stage and microbatch and are
    tagged `loom.backward` (weight when all their users are weight
    gradients, else input), so pipeline schedules and the dX/dW split place
    them with the backward.

    `mode`:
    - `selective`: ops that are cheap to redo and whose inputs the backward
      keeps anyway: at most 16 FLOPs per result element
      (FlopCountOpInterface; activation functions, norms, elementwise
      products, casts, softmax; never a GEMM or attention), free of memory
      effects, and each operand a parameter or constant, a value the
      backward reads itself, or another recomputed value. What is dropped
      are the activations' and norms' outputs (Megatron's selective
      recompute).
    - `full`: every memory-effect-free forward op of a transformer layer
      (passes/training/Layers.h) except those whose values a later layer
      reads: only each layer's input is kept, and the backward recomputes
      the layer.
    - `none`: nothing.

    `full-layers=K` with `selective` recomputes the first K layers fully and
    the rest selectively: what `loom-compile --recompute=auto` picks to fit
    a memory budget.

    Before (`%1` kept from the forward to the backward):
    ```mlir
    %1 = nn.silu %0
    %2 = nn.matmul %1, %w
    ...
    %g = nn.silu_grad %0, %d {loom.backward = #loom.backward<input>}
    %gw = nn.matmul %1, %e {loom.backward = #loom.backward<weight>}
    ```
    After (selective: `%0` is kept anyway, `%1` dies after the forward):
    ```mlir
    %1 = nn.silu %0
    %2 = nn.matmul %1, %w
    ...
    %g = nn.silu_grad %0, %d {loom.backward = #loom.backward<input>}
    %r = nn.silu %0 {loom.backward = #loom.backward<weight>}
    %gw = nn.matmul %r, %e {loom.backward = #loom.backward<weight>}
    ```
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"selective\"",
           "none, selective or full">,
    Option<"fullLayers", "full-layers", "int64_t", /*default=*/"0",
           "with selective: the first this many layers are recomputed fully">
  ];
}

def OffloadActivations : Pass<"loom-offload-activations", "mlir::ModuleOp"> {
  let summary = "saved activations to host memory between their forward and backward";
  let description = [{
    Runs on the lowered step's nn, just before `--loom-lower-to-rt`. A
    forward value of a chosen transformer layer that the backward reads is
    copied to host memory after its last forward use (`nn.offload`) and back
    before its first backward use (`nn.reload`). The backward reads the copy
    back. The two become `rt.copy` on the `host_copy` stream, the host copy
    a buffer of the host arena that the memory planner plans like scratch,
    so the device holds the value only around its forward and backward
    uses. The values are unchanged: losses and gradients are those of no
    offload.

    `layers`: `all`, or a list of layer indices and ranges (`0-3,6`), as
    passes/training/Layers.h numbers them. Values whose first backward use
    comes before their last forward use are left alone, and so are values
    of the parameters alone (a weight's cast), which do not grow with the
    batch.

    `prefetch` (default 1): a layer's reloads are issued where the backward
    first reads the layer that many layers before it, so the copies back
    overlap those layers' backward; each layer ahead keeps one more layer's
    values on the device. 0 reloads at the first backward use.

    ```mlir
    %1 = nn.silu %0 {loom.microbatch = 0 : i64}
    %2 = nn.matmul %1, %w {loom.microbatch = 0 : i64}
    %h = nn.offload %1 {loom.microbatch = 0 : i64}
    ...
    %r = nn.reload %h {loom.backward = #loom.backward<input>, loom.microbatch = 0 : i64}
    %gw = nn.matmul %r, %e {loom.backward = #loom.backward<weight>, loom.microbatch = 0 : i64}
    ```
  }];
  let options = [
    Option<"layers", "layers", "std::string", /*default=*/"\"all\"",
           "all, or layer indices and ranges (0-3,6)">,
    Option<"prefetch", "prefetch", "int64_t", /*default=*/"1",
           "reload a layer's values this many layers of the backward before its own "
           "(0: at its first backward use)">
  ];
}

#endif
