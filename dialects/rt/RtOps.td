#ifndef LOOM_RT_OPS_TD
#define LOOM_RT_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/EnumAttr.td"

def Rt_Dialect : Dialect {
  let name = "rt";
  let cppNamespace = "::loom::rt";
  let summary = "per-rank programs over planned buffers: Loom's last IR";
  let description = [{
    An `rt.program` is what one rank runs in one step: buffers at offsets in
    two arenas (persistent: parameters and constants; scratch: everything
    else, reused by the memory planner), kernel calls and copies on named
    streams, and events between streams. It maps one to one onto the
    executable format (runtime/schema/executable.fbs).

    A multi-rank module carries its device mesh as module attributes:
    `rt.mesh_axes = ["dp", "tp"]` and `rt.mesh_shape = array<i64: 2, 2>`
    (absent: one rank). Ranks are numbered row-major over the mesh. A module
    with one `rt.program` and a mesh of N ranks is SPMD: every rank runs it.
    A module with N programs (a pipeline) gives each rank its own.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
}

// The collectives and reductions, with the values of runtime/abi/Collective.h's
// CollectiveKind and ReduceOp (RtDialect.cpp checks they agree).
def Rt_CollectiveKind : I32EnumAttr<"CollectiveKind", "what a collective does", [
  I32EnumAttrCase<"AllReduce", 0, "all_reduce">,
  I32EnumAttrCase<"AllGather", 1, "all_gather">,
  I32EnumAttrCase<"ReduceScatter", 2, "reduce_scatter">,
  I32EnumAttrCase<"AllToAll", 3, "all_to_all">,
  I32EnumAttrCase<"Broadcast", 4, "broadcast">,
  I32EnumAttrCase<"Send", 5, "send">,
  I32EnumAttrCase<"Recv", 6, "recv">,
  I32EnumAttrCase<"Exchange", 7, "exchange">,
  I32EnumAttrCase<"GatherRows", 8, "gather_rows">,
  I32EnumAttrCase<"ScatterRows", 9, "scatter_rows">]> {
  let cppNamespace = "::loom::rt";
  let genSpecializedAttr = 0;
}

// Printed as a bare keyword in rt.collective's syntax.
def Rt_CollectiveKindAttr : EnumAttr<Rt_Dialect, Rt_CollectiveKind, "collective"> {
  let assemblyFormat = "$value";
}

def Rt_ReduceKind : I32EnumAttr<"ReduceKind", "how a collective combines the group's values", [
  I32EnumAttrCase<"Sum", 0, "sum">,
  I32EnumAttrCase<"Max", 1, "max">,
  I32EnumAttrCase<"Avg", 2, "avg">]> {
  let cppNamespace = "::loom::rt";
  let genSpecializedAttr = 0;
}

// Printed as #rt.reduce<sum>.
def Rt_ReduceKindAttr : EnumAttr<Rt_Dialect, Rt_ReduceKind, "reduce"> {
  let assemblyFormat = "`<` $value `>`";
}

class Rt_Op<string mnemonic, list<Trait> traits = []>
    : Op<Rt_Dialect, mnemonic, traits>;

def Rt_Buffer : MemRefOf<[AnyType]>;

def Rt_ProgramOp : Rt_Op<"program", [Symbol, SingleBlock, NoTerminator,
                                     IsolatedFromAbove]> {
  let summary = "the program one rank runs per step";
  let description = [{
    ```mlir
    rt.program @main rank = 0 streams = ["compute"] {
      %x = rt.input "x" : memref<4x8xf32>
      %y = rt.alloc : memref<4x8xf32>
      rt.kernel "nn.relu(%x) -> (%y) : (memref<4x8xf32>) -> memref<4x8xf32>
      rt.output "y" %y : memref<4x8xf32>
    }
    ```
    After `--loom-plan-memory` it carries `arena_sizes` (persistent, scratch
    bytes) and `scratch_unplanned_bytes` (what no reuse would cost); after
    `--loom-assign-streams`, `num_events`.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, I64Attr:$rank,
                   StrArrayAttr:$streams,
                   OptionalAttr<DenseI64ArrayAttr>:$arena_sizes,
                   OptionalAttr<I64Attr>:$scratch_unplanned_bytes,
                   OptionalAttr<I64Attr>:$num_events);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name `rank` `=` $rank `streams` `=` $streams attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    mlir::Block &getBlock() { return getBody().front(); }
  }];
}

// Buffers. `offset` is absent until the memory planner assigns it.
def Rt_AllocOp : Rt_Op<"alloc"> {
  let summary = "a scratch buffer, or with `persistent` one kept across steps";
  let description = [{
    A `persistent` buffer lives in the persistent arena beside the
    parameters and keeps its bytes from one step to the next, but it is no
    parameter: it is not initialized, saved in checkpoints or loaded from
    weights. It holds state the program derives from its parameters (a
    compute-precision copy of a weight that the optimizer rewrites each step),
    which `refresh` kernels (see `rt.kernel`) recompute whenever the
    parameters were set from outside.

    A `host` buffer lives in the host arena (pinned host memory on a GPU):
    an offloaded activation, which only `rt.copy` reads and writes.
  }];
  let arguments = (ins OptionalAttr<I64Attr>:$offset, OptionalAttr<StrAttr>:$name,
                   UnitAttr:$persistent, UnitAttr:$host);
  let results = (outs Rt_Buffer:$result);
  let assemblyFormat = "(`persistent` $persistent^)? (`host` $host^)? (`offset` `=` $offset^)? attr-dict `:` type($result)";
}

def Rt_InputOp : Rt_Op<"input"> {
  let summary = "a scratch buffer the caller fills before the step";
  let description = [{
    In a multi-rank module an input may be sharded: `global_shape` is the
    tensor the caller holds and `sharding` lists, per global dimension, the
    mesh axes splitting it (`[]`: whole); the buffer is this rank's block.

    ```mlir
    %t = rt.input "tokens" {global_shape = array<i64: 8, 17>, sharding = [["dp"], []]} : memref<4x17xi64>
    ```
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<I64Attr>:$offset,
                   OptionalAttr<ArrayAttr>:$sharding,
                   OptionalAttr<DenseI64ArrayAttr>:$global_shape);
  let results = (outs Rt_Buffer:$result);
  let assemblyFormat = "$name (`offset` `=` $offset^)? attr-dict `:` type($result)";
  let hasVerifier = 1;
  let builders = [
    // An input of one rank (no sharding).
    OpBuilder<(ins "mlir::Type":$result, "mlir::StringAttr":$name,
                   "mlir::IntegerAttr":$offset), [{
      build($_builder, $_state, result, name, offset, nullptr, nullptr);
    }]>
  ];
}

def Rt_ParamOp : Rt_Op<"param"> {
  let summary = "a persistent buffer holding a parameter or constant";
  let description = [{
    Carries what the executable's parameter table needs: the name, whether it
    is trainable, and its initializer (`init`, `init_scale`) or its `value`.
    A sharded parameter carries `global_shape` and `sharding` (as for
    `rt.input`); its buffer is this rank's block, its initial values are the
    global tensor's (a `value` holds the global tensor).
  }];
  let arguments = (ins StrAttr:$name, UnitAttr:$frozen,
                   DefaultValuedAttr<StrAttr, "\"zeros\"">:$init,
                   DefaultValuedAttr<F64Attr, "0.0">:$init_scale,
                   OptionalAttr<ElementsAttr>:$value,
                   OptionalAttr<I64Attr>:$offset,
                   OptionalAttr<ArrayAttr>:$sharding,
                   OptionalAttr<DenseI64ArrayAttr>:$global_shape);
  let results = (outs Rt_Buffer:$result);
  let assemblyFormat = [{
    $name (`offset` `=` $offset^)? (`frozen` $frozen^)? attr-dict `:` type($result)
  }];
  let builders = [
    // A parameter of one rank (no sharding).
    OpBuilder<(ins "mlir::Type":$result, "mlir::StringAttr":$name,
                   "mlir::UnitAttr":$frozen, "mlir::StringAttr":$init,
                   "mlir::FloatAttr":$init_scale, "mlir::ElementsAttr":$value,
                   "mlir::IntegerAttr":$offset), [{
      build($_builder, $_state, result, name, frozen, init, init_scale, value,
            offset, nullptr, nullptr);
    }]>
  ];
  let hasVerifier = 1;
}

def Rt_AliasOp : Rt_Op<"alias"> {
  let summary = "the same bytes seen with another shape (a reshape)";
  let arguments = (ins Rt_Buffer:$source);
  let results = (outs Rt_Buffer:$result);
  let assemblyFormat = "$source attr-dict `:` type($source) `->` type($result)";
  let hasVerifier = 1;
}

def Rt_OutputOp : Rt_Op<"output"> {
  let summary = "marks a buffer the caller reads after the step";
  let arguments = (ins StrAttr:$name, Rt_Buffer:$buffer);
  let assemblyFormat = "$name $buffer attr-dict `:` type($buffer)";
}

// Work. `stream` is absent until --loom-assign-streams sets it.
def Rt_KernelOp : Rt_Op<"kernel", [AttrSizedOperandSegments]> {
  let summary = "calls a kernel of the contract (runtime/abi/Kernels.def, generated from nn ODS)";
  let description = [{
    Destination-passing: the kernel reads `inputs` and writes `outputs`.
    `attrs` are the kernel's attributes (integers, floats, strings, arrays).
    A `refresh` kernel runs only in the first step after the parameters were
    set from outside the program (initialized, loaded from weights or a
    checkpoint): it recomputes `persistent` buffers that the program itself
    keeps up to date in every other step.

    ```mlir
    rt.kernel "nn.matmul(%a, %b) -> (%c) attrs {transpose_lhs = 0, transpose_rhs = 1} : (memref<4x8xf32>, memref<16x8xf32>) -> memref<4x16xf32>
    ```
  }];
  let arguments = (ins StrAttr:$kernel, Variadic<Rt_Buffer>:$inputs,
                   Variadic<Rt_Buffer>:$outputs,
                   DefaultValuedAttr<DictionaryAttr, "{}">:$attrs,
                   OptionalAttr<StrAttr>:$stream, UnitAttr:$refresh);
  let assemblyFormat = [{
    $kernel `(` $inputs `)` `->` `(` $outputs `)` (`attrs` $attrs^)?
    (`on` $stream^)? (`refresh` $refresh^)? attr-dict `:` functional-type($inputs, $outputs)
  }];
  let extraClassDeclaration = [{
    /// The kernel's id in the contract (runtime/abi/KernelList.h); none for
    /// a name the contract lacks (which the verifier rejects).
    std::optional<::loom::KernelId> getKernelId() {
      return ::loom::findKernel(getKernel().str());
    }
    /// nn.fused: the body parses and matches the call's buffers.
    ::mlir::LogicalResult verifyFusedBody();
  }];
  let hasVerifier = 1;
}

def Rt_CollectiveOp : Rt_Op<"collective", [AttrSizedOperandSegments]> {
  let summary = "a collective over the ranks of a mesh group, send/recv, or an exchange";
  let description = [{
    Destination-passing like `rt.kernel`. The group holds the ranks that
    differ from this one only along `axes`, ordered row-major by their
    coordinates along `axes` in the listed order. Kinds and their attributes:
    `all_reduce` (reduce = #rt.reduce<sum|max|avg>), `all_gather` (dim), `reduce_scatter`
    (dim, reduce), `all_to_all` (split_dim, concat_dim), `broadcast` (root,
    an index within the group), `send` (peer, an absolute rank; no output),
    `recv` (peer; no input), `exchange` (axes, send_peers, recv_peers: any
    number of inputs and outputs, at least one of either; input i goes to
    the group member `send_peers[i]`, output j comes from `recv_peers[j]`,
    all in flight at once; transfers between two ranks match in order).
    `all_reduce` and `reduce_scatter` also take a bucket: several inputs and
    as many outputs, input i reduced into output i, all issued together (one
    NCCL group). With
    the module's mesh known, the verifier checks the shapes against the
    group size (all_gather's output dim is the input's times the group size)
    and an exchange's peers against the group.

    ```mlir
    rt.collective all_reduce (%in) -> (%out) {axes = ["tp"], reduce = #rt.reduce<sum>} : (memref<4x8xf32>) -> memref<4x8xf32>
    rt.collective all_gather (%in) -> (%out) on "dp_comm" {axes = ["dp"], dim = 0} : (memref<2x8xf32>) -> memref<4x8xf32>
    rt.collective all_reduce (%dw, %db) -> (%gw, %gb) on "dp_comm" {axes = ["dp"], reduce = #rt.reduce<sum>} : (memref<64x32xf32>, memref<64xf32>) -> (memref<64x32xf32>, memref<64xf32>)
    rt.collective send (%x) -> () {peer = 1} : (memref<4xf32>) -> ()
    rt.collective exchange (%act) -> (%grad) {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64: 1>} : (memref<2x12x32xf32>) -> memref<2x12x32xf32>
    ```
  }];
  let arguments = (ins Rt_CollectiveKindAttr:$kind, Variadic<Rt_Buffer>:$inputs,
                   Variadic<Rt_Buffer>:$outputs,
                   OptionalAttr<StrArrayAttr>:$axes,
                   OptionalAttr<Rt_ReduceKindAttr>:$reduce,
                   OptionalAttr<I64Attr>:$dim,
                   OptionalAttr<I64Attr>:$split_dim,
                   OptionalAttr<I64Attr>:$concat_dim,
                   OptionalAttr<I64Attr>:$root,
                   OptionalAttr<I64Attr>:$peer,
                   OptionalAttr<DenseI64ArrayAttr>:$send_peers,
                   OptionalAttr<DenseI64ArrayAttr>:$recv_peers,
                   OptionalAttr<StrAttr>:$stream);
  let assemblyFormat = [{
    $kind `(` $inputs `)` `->` `(` $outputs `)` (`on` $stream^)? attr-dict
    `:` functional-type($inputs, $outputs)
  }];
  let hasVerifier = 1;
}

def Rt_CopyOp : Rt_Op<"copy"> {
  let summary = "copies one buffer's bytes into another of the same size";
  let arguments = (ins Rt_Buffer:$source, Rt_Buffer:$target,
                   OptionalAttr<StrAttr>:$stream);
  let assemblyFormat = [{
    $source `->` $target (`on` $stream^)? attr-dict `:` type($source) `->` type($target)
  }];
  let hasVerifier = 1;
}

def Rt_RecordEventOp : Rt_Op<"record_event"> {
  let summary = "records event `event` on `stream` after the work issued so far";
  let arguments = (ins I64Attr:$event, StrAttr:$stream);
  let assemblyFormat = "$event `on` $stream attr-dict";
}

def Rt_WaitEventOp : Rt_Op<"wait_event"> {
  let summary = "makes `stream` wait until event `event` has been recorded";
  let arguments = (ins I64Attr:$event, StrAttr:$stream);
  let assemblyFormat = "$event `on` $stream attr-dict";
}

#endif // LOOM_RT_OPS_TD
