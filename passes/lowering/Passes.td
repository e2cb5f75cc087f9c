#ifndef LOOM_PASSES_LOWERING_PASSES_TD
#define LOOM_PASSES_LOWERING_PASSES_TD

include "mlir/Pass/PassBase.td"

def LowerToRt : Pass<"loom-lower-to-rt", "mlir::ModuleOp"> {
  let summary = "bufferize the entry function's nn ops into an rt.program";
  let description = [{
    Each tensor becomes a buffer: function arguments `rt.input`, parameters
    and constants `rt.param` (persistent), every other op's results
    `rt.alloc` (scratch) written by an `rt.kernel` call named after the op.
    A reshape becomes an `rt.alias` of its input: no bytes move. Enum and
    unit attributes become the strings and integers the kernels read.

    Before:
    ```mlir
    func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
      %y = nn.relu %x : tensor<4x8xf32>
      return %y : tensor<4x8xf32>
    }
    ```
    After:
    ```mlir
    rt.program @main rank = 0 streams = ["compute"] {
      %0 = rt.input "x" : memref<4x8xf32>
      %1 = rt.alloc : memref<4x8xf32>
      rt.kernel "nn.relu" (%0) -> (%1) : (memref<4x8xf32>) -> memref<4x8xf32>
      rt.output "result0" %1 : memref<4x8xf32>
    }
    ```
    Argument and result names come from `loom.name` argument/result
    attributes when present.

    An SPMD program from `--loom-spmd-partition` (one program, run by every
    rank): the module's `dist.mesh` becomes `rt.mesh_axes` and
    `rt.mesh_shape`; a split argument or parameter becomes an `rt.input` or
    `rt.param` whose buffer is the local shard, with `sharding` (per global
    dim, the mesh axes splitting it) and `global_shape`; each `dist`
    collective becomes an `rt.collective` of the same kind writing a new
    buffer (`dist.all_reduce %x {axes = ["tp"], reduce = #dist.reduce<sum>}` becomes
    `rt.collective all_reduce (%x) -> (%y) {axes = ["tp"], reduce = #rt.reduce<sum>}`;
    a mean is the runtime's `avg`).

    A pipelined step's schedule, the module's `pipe.schedule_csv`, becomes
    `rt.schedule_csv`, which the executable stores.

    A fusion group left by `--loom-unfuse keep-generatable` becomes one call
    of the `nn.fused` kernel: its inputs, one buffer per value it yields
    (its other values get none), and its ops as text
    (`nn::FusedOp::kernelBody()`, runtime/abi/FusedBody.h):
    ```mlir
    rt.kernel "nn.fused"(%x, %g) -> (%s, %m) attrs {body = "(bf16[2,64], bf16[2,64]) { %0 = nn.silu(%i0) : bf16[2,64]; %1 = nn.mul(%0, %i1) : bf16[2,64]; yield %0, %1 }"} : ...
    ```
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "the function to lower (other functions are dropped)">
  ];
  let dependentDialects = ["loom::rt::RtDialect"];
}

def AssignStreams : Pass<"loom-assign-streams", "mlir::ModuleOp"> {
  let summary = "put work on streams by role and add events where streams meet";
  let description = [{
    Kernels without a stream run on `compute`; copies on `host_copy` when
    tagged `loom.host_copy`, else on `compute`. Collectives go on a
    communication stream by the role of their axes: `tp_comm` when `axes`
    holds "tp", else `dp_comm` for "dp", `pp_comm` for "pp" and for
    send/recv, else `<first axis>_comm`. Where an op reads or writes
    bytes that an earlier op on another stream wrote (or reads bytes an
    earlier op on another stream is still reading, and writes them), the
    pass records an event after the earlier op and makes this op's stream
    wait for it. Byte ranges come from planned offsets, so memory reuse is
    synchronized too; run it after `--loom-plan-memory`.

    Before:
    ```mlir
    rt.kernel "nn.relu" (%a) -> (%b) : ...
    rt.copy %b -> %c {loom.host_copy} : ...
    ```
    After:
    ```mlir
    rt.kernel "nn.relu" (%a) -> (%b) on "compute" : ...
    rt.record_event 0 on "compute"
    rt.wait_event 0 on "host_copy"
    rt.copy %b -> %c on "host_copy" : ...
    ```
  }];
}

#endif
