#ifndef LOOM_DIST_OPS_TD
#define LOOM_DIST_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/EnumAttr.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Dist_Dialect : Dialect {
  let name = "dist";
  let cppNamespace = "::loom::dist";
  let summary = "device meshes, tensor shardings and collectives";
  let description = [{
    A device mesh with named axes (`#dist.mesh<["dp"=2, "tp"=2]>`, set on the
    module as `dist.mesh`), per-tensor sharding attributes naming which mesh
    axes split which dimension (block-distributed, major axis first) and
    which axes hold partial sums, and collectives on tensors (value
    semantics) that the SPMD partitioner inserts. Ranks are numbered
    row-major over the mesh axes: the last axis varies fastest.

    The dialect owns these discardable attributes (verified by
    `verifyOperationAttribute` and, on function arguments and results,
    `verifyRegionArgAttribute`/`verifyRegionResultAttribute`; DistDialect.h
    has their accessors):

    | attribute | on | value |
    | --- | --- | --- |
    | `dist.mesh` | module | `#dist.mesh<...>` |
    | `dist.zero1` | module | unit: ZeRO-1 over the data-parallel axis |
    | `dist.sharding` | op | one `#dist.sharding<...>` (or `unit`: undecided) per result, in an array |
    | `dist.sharding` | function argument, result | `#dist.sharding<...>` |
    | `dist.global_type` | op, function argument, result | the tensor type before partitioning |
    | `dist.rank_offsets` | op | `[{attr, axes, element, stride}, ...]` (DistDialect.h) |
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
}

def Dist_ReduceKind : I32EnumAttr<"ReduceKind",
    "how a collective combines the group's values", [
  I32EnumAttrCase<"Sum", 0, "sum">,
  I32EnumAttrCase<"Mean", 1, "mean">,
  I32EnumAttrCase<"Max", 2, "max">,
  I32EnumAttrCase<"Min", 3, "min">]> {
  let cppNamespace = "::loom::dist";
  let genSpecializedAttr = 0;
}

// Printed as #dist.reduce<sum>.
def Dist_ReduceKindAttr : EnumAttr<Dist_Dialect, Dist_ReduceKind, "reduce"> {
  let assemblyFormat = "`<` $value `>`";
}

class Dist_Attr<string name, string attrMnemonic> : AttrDef<Dist_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def Dist_MeshAttr : Dist_Attr<"Mesh", "mesh"> {
  let summary = "a device mesh with named axes";
  let description = [{
    ```mlir
    module attributes {dist.mesh = #dist.mesh<["dp"=2, "tp"=4]>} { ... }
    ```
    Axis names are unique; sizes are positive. The mesh has
    `product(sizes)` ranks, row-major (the last axis varies fastest).
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::StringAttr">:$names,
                        ArrayRefParameter<"int64_t">:$sizes);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The size of axis `name`, or nullopt if the mesh has no such axis.
    std::optional<int64_t> axisSize(llvm::StringRef name) const;
    /// The product of the sizes of `axes` (all must exist).
    int64_t groupSize(llvm::ArrayRef<llvm::StringRef> axes) const;
    int64_t numRanks() const;
  }];
}

def Dist_ShardingAttr : Dist_Attr<"Sharding", "sharding"> {
  let summary = "how a tensor is laid out over the mesh";
  let description = [{
    One list of mesh axes per tensor dimension: the axes that split that
    dimension into equal contiguous blocks, major first (rank coordinate
    along the first axis picks the outer block). `partial` lists axes over
    which each rank holds a partial sum (the value is the sum across the
    axis). All lists empty: replicated.

    ```mlir
    #dist.sharding<[["tp"], []]>                  // rows split over tp
    #dist.sharding<[["dp"], []]>                  // batch split over dp
    #dist.sharding<[[], []], partial = ["tp"]>    // sum over tp pending
    ```
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::ArrayAttr">:$dims,
                        ArrayRefParameter<"::mlir::StringAttr">:$partial);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The axes splitting dim `d`, major first.
    llvm::SmallVector<llvm::StringRef> dimAxes(unsigned d) const;
    llvm::SmallVector<llvm::StringRef> partialAxes() const;
    bool isReplicated() const;
    static ShardingAttr get(mlir::MLIRContext *ctx,
                            llvm::ArrayRef<llvm::SmallVector<llvm::StringRef>> dims,
                            llvm::ArrayRef<llvm::StringRef> partial);
    static ShardingAttr replicated(mlir::MLIRContext *ctx, unsigned rank);
  }];
}

class Dist_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, traits>;

def Dist_Tensor : StaticShapeTensorOf<[AnyType]>;

// Collectives over the ranks that share every mesh coordinate except those
// of `axes` (the group). Each verifies its axes against the module's mesh.
// Collectives with results are pure: every rank runs the same program, so
// folding or dropping one happens on all ranks alike. send/recv are not.
class Dist_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Dist_Op<mnemonic, traits> {
  let hasVerifier = 1;
}

def Dist_AllReduceOp : Dist_CollectiveOp<"all_reduce",
    [Pure, InferTypeOpAdaptor]> {
  let summary = "every rank of the group gets the reduction of all ranks' values";
  let description = [{
    `reduce` is `#dist.reduce<sum>`, `<mean>`, `<max>` or `<min>`. Result i is the reduction of
    input i (same type). Several inputs make one bucket: the reductions are
    issued together (one NCCL group), as `--loom-bucket-reductions` groups
    data-parallel gradients.

    ```mlir
    %y = dist.all_reduce %x {axes = ["tp"], reduce = #dist.reduce<sum>} : tensor<2x8x64xf32>
    %gw, %gb = dist.all_reduce %dw, %db {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<64x32xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Variadic<Dist_Tensor>:$inputs, StrArrayAttr:$axes,
                   Dist_ReduceKindAttr:$reduce);
  let results = (outs Variadic<Dist_Tensor>:$results);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs)";
}

def Dist_AllGatherOp : Dist_CollectiveOp<"all_gather", [Pure]> {
  let summary = "concatenates the group's blocks along dim, in rank order";
  let description = [{
    The result's `dim` is the input's times the group size.

    ```mlir
    %y = dist.all_gather %x {axes = ["tp"], dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x16xf32>
    ```
  }];
  let arguments = (ins Dist_Tensor:$input, StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs Dist_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Dist_ReduceScatterOp : Dist_CollectiveOp<"reduce_scatter", [Pure]> {
  let summary = "reduces across the group and keeps this rank's block of dim";
  let description = [{
    Result i's `dim` is input i's divided by the group size. Several inputs
    (one `dim` for all) make one bucket, issued together like a bucketed
    `dist.all_reduce`.

    ```mlir
    %y = dist.reduce_scatter %x {axes = ["dp"], dim = 0 : i64, reduce = #dist.reduce<sum>} : tensor<8x4xf32> -> tensor<4x4xf32>
    ```
  }];
  let arguments = (ins Variadic<Dist_Tensor>:$inputs, StrArrayAttr:$axes, I64Attr:$dim,
                   Dist_ReduceKindAttr:$reduce);
  let results = (outs Variadic<Dist_Tensor>:$results);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($results)";
}

def Dist_AllToAllOp : Dist_CollectiveOp<"all_to_all", [Pure]> {
  let summary = "splits split_dim into group-size blocks, sends block j to rank j, concatenates what arrives along concat_dim";
  let description = [{
    ```mlir
    %y = dist.all_to_all %x {axes = ["tp"], split_dim = 1 : i64, concat_dim = 0 : i64} : tensor<2x8xf32> -> tensor<4x4xf32>
    ```
  }];
  let arguments = (ins Dist_Tensor:$input, StrArrayAttr:$axes,
                   I64Attr:$split_dim, I64Attr:$concat_dim);
  let results = (outs Dist_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Dist_BroadcastOp : Dist_CollectiveOp<"broadcast",
    [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "every rank of the group gets the value of the group's rank `root`";
  let description = [{
    ```mlir
    %y = dist.broadcast %x {axes = ["dp"], root = 0 : i64} : tensor<4xf32>
    ```
  }];
  let arguments = (ins Dist_Tensor:$input, StrArrayAttr:$axes, I64Attr:$root);
  let results = (outs Dist_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Dist_SendOp : Dist_CollectiveOp<"send", [MemoryEffects<[MemWrite]>]> {
  let summary = "sends a tensor to global rank `peer`";
  let description = [{
    ```mlir
    dist.send %x {peer = 1 : i64} : tensor<4xf32>
    ```
  }];
  let arguments = (ins Dist_Tensor:$input, I64Attr:$peer);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Dist_RecvOp : Dist_CollectiveOp<"recv", [MemoryEffects<[MemWrite]>]> {
  let summary = "receives a tensor from global rank `peer`";
  let description = [{
    ```mlir
    %x = dist.recv {peer = 0 : i64} : tensor<4xf32>
    ```
  }];
  let arguments = (ins I64Attr:$peer);
  let results = (outs Dist_Tensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}


def Dist_GatherRowsOp : Dist_CollectiveOp<"gather_rows", [Pure]> {
  let summary = "each rank gathers the rows its range names from the ranks holding them (an all-to-all whose counts the indices give)";
  let description = [{
    `x` is this rank's block of rows of a tensor split along dim 0 over the
    group (the blocks in group order make the whole, as `dist.all_gather`
    would concatenate them); `rows` (`[R]`) names rows of that whole and
    `ranges` (`[G, 2]`) gives each member's `[first, end)` of the result's
    rows. Both are the same on every member. Member p's result row i, for i
    in its range, is row `rows[i]` of the whole; its other rows are zero.
    Each row moves only from the rank holding it to the ranks whose ranges
    name it, so an expert-parallel dispatch moves each token to its
    experts' ranks, not to all of them: `dist.all_gather` then `nn.gather`
    of the rows, read only in this rank's range, computes the same.

    ```mlir
    %r = dist.gather_rows %x, %rows, %ranges {axes = ["ep"]} : (tensor<24x32xf32>, tensor<96xi64>, tensor<2x2xi64>) -> tensor<96x32xf32>
    ```
  }];
  let arguments = (ins Dist_Tensor:$x, Dist_Tensor:$rows, Dist_Tensor:$ranges,
                   StrArrayAttr:$axes);
  let results = (outs Dist_Tensor:$result);
  let assemblyFormat = "$x `,` $rows `,` $ranges attr-dict `:` functional-type(operands, results)";
}

def Dist_ScatterRowsOp : Dist_CollectiveOp<"scatter_rows", [Pure]> {
  let summary = "each rank's rows in its range go to the ranks holding the rows they name, which add them (dist.gather_rows' transpose)";
  let description = [{
    The result is this rank's block of rows of a tensor split along dim 0
    over the group (`n` rows each, in group order). `rows` (`[R]`) and
    `ranges` (`[G, 2]`) are as `dist.gather_rows` takes them: result row t
    of member q is the sum, over the members p in group order and the rows
    i of p's range in order with `rows[i] == q * n + t`, of p's `y[i]`
    (accumulated in f32). So an expert-parallel combine sends each expert's
    output row to the rank holding its token, which adds the token's k
    rows; rows of `y` outside a rank's range are not read.

    ```mlir
    %t = dist.scatter_rows %y, %rows, %ranges {axes = ["ep"]} : (tensor<96x32xf32>, tensor<96xi64>, tensor<2x2xi32>) -> tensor<24x32xf32>
    ```
  }];
  let arguments = (ins Dist_Tensor:$y, Dist_Tensor:$rows, Dist_Tensor:$ranges,
                   StrArrayAttr:$axes);
  let results = (outs Dist_Tensor:$result);
  let assemblyFormat = "$y `,` $rows `,` $ranges attr-dict `:` functional-type(operands, results)";
}

def Dist_ExchangeOp : Dist_CollectiveOp<"exchange", [MemoryEffects<[MemWrite]>]> {
  let summary = "one group of point-to-point transfers, posted together";
  let description = [{
    Sends input i to the group member `send_peers[i]` and receives result j
    from `recv_peers[j]` (indices within the group of ranks that differ from
    this one only along `axes`). All transfers of one exchange are in flight
    at once (one NCCL group), so two ranks that send to each other cannot
    deadlock; transfers between two ranks match in order. A pipeline
    schedule's run of SEND/RECV actions becomes one exchange.

    ```mlir
    %g = dist.exchange(%act : tensor<2x12x32xf32>) {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64: 1>} -> tensor<2x12x32xf32>
    ```
  }];
  let arguments = (ins Variadic<Dist_Tensor>:$inputs, StrArrayAttr:$axes,
                   DenseI64ArrayAttr:$send_peers, DenseI64ArrayAttr:$recv_peers);
  let results = (outs Variadic<Dist_Tensor>:$results);
  let assemblyFormat = [{
    (`(` $inputs^ `:` type($inputs) `)`)? attr-dict (`->` type($results)^)?
  }];
}

#endif // LOOM_DIST_OPS_TD
