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

#endif
