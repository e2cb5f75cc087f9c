#ifndef LOOM_NN_INTERFACES_TD
#define LOOM_NN_INTERFACES_TD

include "mlir/IR/OpBase.td"

def NN_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::loom::nn";
  let description = [{
    An op's gradient rule: how the gradient of one operand is built from the
    gradients of the op's results, for reverse-mode autodiff
    (--loom-build-training-step). The rule lives with the op, so every op
    that can be differentiated says so here and nowhere else.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds, at the builder's insertion point, the gradient of operand
        `index` given `resultGradients` (one per result; a null entry means
        that result has no gradient, i.e. zero). Returns null when the
        operand is not differentiable (integer ids, labels, conditions), and
        failure when the rule cannot handle this instance.
      }],
      "::mlir::FailureOr<::mlir::Value>", "buildOperandGradient",
      (ins "::mlir::OpBuilder &":$builder, "unsigned":$index,
           "::mlir::ArrayRef<::mlir::Value>":$resultGradients)>,
  ];
}

def NN_FusibleOpInterface : OpInterface<"FusibleOpInterface"> {
  let cppNamespace = "::loom::nn";
  let description = [{
    An op that `--loom-fuse` may put in an `nn.fused` group, and how: an
    elementwise op (with NumPy broadcasting of its operands), a broadcast,
    a cast, or a reduction over rows (the innermost dims). The fusion pass
    reads only this; it knows no op by name. An op that does not implement
    it (a GEMM, attention, a collective) is never fused.
  }];
  let methods = [
    InterfaceMethod<[{
        How this instance fuses; `FusionKind::None` when it cannot (a
        reduction over an outer dim).
      }],
      "::loom::nn::FusionKind", "getFusionKind", (ins), [{}], [{
        return ::loom::nn::FusionKind::Elementwise;
      }]>,
  ];
}

def NN_WidenableResultOpInterface : OpInterface<"WidenableResultOpInterface"> {
  let cppNamespace = "::loom::nn";
  let description = [{
    An op that can write a result in a wider float type than its operands'
    at no extra cost, because it computes in that type anyway and would only
    round at the end (a GEMM accumulates bf16 products in f32).
    `--loom-widen-results` folds a widening `nn.cast` of such a result into
    the op: the rounding to the narrow type, and the cast's pass over
    memory, are gone. It folds a narrowing cast likewise where the op says
    it can write the narrow type (canNarrowResult).
  }];
  let methods = [
    InterfaceMethod<[{
        Whether result `index` may have element type `elementType` (wider
        than it has now) with the same operands.
      }],
      "bool", "canWidenResult", (ins "unsigned":$index, "::mlir::Type":$elementType)>,
    InterfaceMethod<[{
        Whether result `index` may have element type `elementType` (narrower
        than it has now) with the same operands: the op rounds once to the
        narrow type instead of writing the wide one for a cast to read (a
        loss gradient computed in f32 and written in bf16).
      }],
      "bool", "canNarrowResult", (ins "unsigned":$index, "::mlir::Type":$elementType),
      [{}], [{ return false; }]>,
  ];
}

def NN_IntegerRangeOpInterface : OpInterface<"IntegerRangeOpInterface"> {
  let cppNamespace = "::loom::nn";
  let description = [{
    An op whose integer (or i1) results hold values in a range known from
    its operands' ranges, its attributes and its shapes: a top-k's indices
    lie in [0, n), a sort's values in its input's, a reshape's in its
    input's. `nn::integerRange` (NNOps.h) follows these through the
    dataflow, and the canonicalizer replaces an `nn.where` whose condition
    they settle (an `nn.compare` true, or false, for every value its
    operands can hold) by the operand it selects: transformers masks the
    routed rows whose expert id is past the experts, which a top-k over the
    experts never gives, and the masks' passes over the rows fold away.
  }];
  let methods = [
    InterfaceMethod<[{
        The range of result `index`'s values, given each operand's
        (std::nullopt: unknown, or not an integer). By default the union of
        the operands of the result's element type: right for ops that only
        move values (reshape, transpose, broadcast, slice, concat, where).
      }],
      "std::optional<::loom::nn::IntegerRange>", "inferIntegerRange",
      (ins "unsigned":$index,
           "::llvm::ArrayRef<std::optional<::loom::nn::IntegerRange>>":$operands),
      [{}], [{
        ::mlir::Type element =
            ::mlir::getElementTypeOrSelf($_op->getResult(index).getType());
        std::optional<::loom::nn::IntegerRange> range;
        for (auto [i, operand] : ::llvm::enumerate($_op->getOperands())) {
          if (::mlir::getElementTypeOrSelf(operand.getType()) != element)
            continue;
          if (!operands[i])
            return std::nullopt;
          range = range ? range->join(*operands[i]) : *operands[i];
        }
        return range;
      }]>,
  ];
}

def NN_TransposeAbsorbingOpInterface : OpInterface<"TransposeAbsorbingOpInterface"> {
  let cppNamespace = "::loom::nn";
  let description = [{
    An op that can read an operand, or write its result, in a permuted
    layout itself, so the `nn.transpose` before or after it never has to
    run as a pass over memory (`--loom-fold-transposes`). Rope reads
    `[B, S, H, D]` projections and writes `[B, H, S, D]` for attention, and
    the reverse for the gradients; attention reads and writes any of its
    tensors `[B, S, H, D]` (`seq_major`).
  }];
  let methods = [
    InterfaceMethod<[{
        Whether the op can take operand `index` (or, with `index` < 0,
        write result `-1 - index`) permuted by `permutation` (result dim i
        is input dim permutation[i]).
      }],
      "bool", "canAbsorbTranspose", (ins "int":$index, "::llvm::ArrayRef<int64_t>":$permutation)>,
    InterfaceMethod<[{
        Builds, at the builder's insertion point, the op reading `source`
        (the transpose's input) as operand `index`, or writing `resultType`
        (the transpose's result type) as result `-1 - index`; its other
        operands and results are the op's. The caller replaces the uses.
        Only called after canAbsorbTranspose said yes.
      }],
      "::mlir::Operation *", "absorbTranspose",
      (ins "::mlir::OpBuilder &":$builder, "int":$index, "::mlir::Value":$source,
           "::mlir::Type":$resultType)>,
  ];
}

def NN_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::loom::nn";
  let description = [{
    An op's sharding rule, as data: which dims of its operands and results
    are the same index space (a factor, einsum-style), which factors are
    contracted (sharding them leaves partial sums) and which must stay whole
    on every rank (a softmax or norm axis). Sharding propagation and the SPMD
    partitioner (passes/sharding) read only this; they know no op by name.
  }];
  let methods = [
    InterfaceMethod<[{
        The op's factors and, per operand and result dim, the factors it is
        made of (major first; none for a size-1 or unsplittable dim).
      }],
      "::loom::nn::ShardingRule", "getShardingRule", (ins)>,
  ];
}

def NN_KernelScratchOpInterface : OpInterface<"KernelScratchOpInterface"> {
  let cppNamespace = "::loom::nn";
  let description = [{
    An op whose kernel needs working memory for the length of its call (a
    chunk's logits): the lowering to rt appends one buffer of this type to
    the call's outputs, after the op's results, and the memory planner
    places it like any other buffer, so the plan's peak counts it. The op's
    kernel contract says so (`kernelExtraOutputs = 1`).
  }];
  let methods = [
    InterfaceMethod<[{
        The scratch buffer's type (a static shape).
      }],
      "::mlir::RankedTensorType", "getKernelScratchType", (ins)>,
  ];
}

def NN_FlopCountOpInterface : OpInterface<"FlopCountOpInterface"> {
  let cppNamespace = "::loom::nn";
  let description = [{
    The floating-point operations an op performs, from its shapes: what
    pipeline partitioning balances stages by (--loom-pipeline-partition) and
    what the schedule's cost model reads. An op that does not implement it
    counts one per element of its first result (elementwise work); ops whose
    work is not linear in their output (GEMMs, attention) say so here.
  }];
  let methods = [
    InterfaceMethod<[{
        The op's FLOPs (0 when a shape it needs is dynamic).
      }],
      "int64_t", "getFlops", (ins)>,
  ];
  let extraClassDeclaration = [{
    /// The FLOPs of any op: its own count when it implements the interface,
    /// else one per element of its first result (0 without a static one).
    static int64_t flopsOf(::mlir::Operation *op);
  }];
}

def NN_GroupedRowsOpInterface : OpInterface<"GroupedRowsOpInterface"> {
  let cppNamespace = "::loom::nn";
  let description = [{
    An op over rows grouped by expert (the experts' grouped GEMMs): rows
    [offsets[g-1], offsets[g]) are group g's, and the op works on a block of
    the groups. It reads some operands only at the block's rows and, where
    it says so, its result is zero at every other row. Expert parallelism
    leaves such a result partial over the ranks holding the other blocks; a
    reader of the same block's rows needs no reduction of it
    (--loom-elide-group-reductions).
  }];
  let methods = [
    InterfaceMethod<"The running row counts of all the groups (`[G]`).",
      "::mlir::Value", "getGroupOffsets", (ins)>,
    InterfaceMethod<"The block's first group (as rank 0 has it; rank offsets add the rest).",
      "int64_t", "getFirstGroup", (ins)>,
    InterfaceMethod<"The groups in the block.", "int64_t", "getGroupCount", (ins)>,
    InterfaceMethod<"Whether operand `index` is read only at the block's rows.",
      "bool", "readsOnlyGroupRows", (ins "unsigned":$index)>,
    InterfaceMethod<"Whether result 0 is zero at every row outside the block's groups.",
      "bool", "writesOnlyGroupRows", (ins)>,
  ];
}

def NN_SpmdLocalizeOpInterface : OpInterface<"SpmdLocalizeOpInterface"> {
  let cppNamespace = "::loom::nn";
  let description = [{
    An op whose attributes speak of global sizes (a vocabulary's extent, a
    slice's limits, a constant's value): the SPMD partitioner
    (--loom-spmd-partition) clones it with its rank's local operand and
    result types and then asks the clone to say the same thing of its
    block. Attributes that differ per rank (where a vocabulary block starts)
    are written as rank 0 has them, plus rank offsets recorded through the
    context. The partitioner knows no op by name.
  }];
  let methods = [
    InterfaceMethod<[{
        Rewrites this op (the local clone) for its rank's shard; `global` is
        the op it was cloned from, with global types.
      }],
      "::mlir::LogicalResult", "localizeAttributes",
      (ins "::mlir::Operation *":$global, "const ::loom::nn::ShardContext &":$shard)>,
  ];
}

def NN_ClassParallelLossOpInterface : OpInterface<"ClassParallelLossOpInterface"> {
  let cppNamespace = "::loom::nn";
  let description = [{
    A loss over the classes of its logits, or its gradient, that can run on
    a block of the classes (Megatron's vocabulary-parallel cross-entropy):
    when the SPMD partitioner (--loom-spmd-partition) splits the class
    factor, each rank computes statistics of its block, the statistics of
    all blocks are all-gathered along their last dim, and the op is rebuilt
    from them, so the gathered logits never exist.
  }];
  let methods = [
    InterfaceMethod<"The logits (`[N, C]`).", "::mlir::Value", "getLogits", (ins)>,
    InterfaceMethod<"The integer labels (`[N]`).", "::mlir::Value", "getLabels", (ins)>,
    InterfaceMethod<[{
        The factor of `rule` (the op's sharding rule) that is the classes.
      }],
      "int", "getClassFactor", (ins "const ::loom::nn::ShardingRule &":$rule), [{}], [{
        return rule.operandDims[0][1].front();
      }]>,
    InterfaceMethod<[{
        Builds the statistics of one block of classes from the local
        `logits` and `labels`; ops of the same logits and labels share them.
      }],
      "::mlir::Operation *", "buildBlockStatistics",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::Value":$logits, "::mlir::Value":$labels,
           "const ::loom::nn::ShardContext &":$shard)>,
    InterfaceMethod<[{
        Builds the op's local replacement from the gathered `stats`; `local`
        maps the op's operands to their local values.
      }],
      "::mlir::Operation *", "buildFromBlockStatistics",
      (ins "::mlir::OpBuilder &":$builder, "::mlir::IRMapping &":$local, "::mlir::Value":$stats,
           "const ::loom::nn::ShardContext &":$shard)>,
  ];
}

// The op's result element types are part of its meaning (a loss or a
// statistic computed in f32, a cast): --loom-cast-compute leaves them.
def NN_KeepsResultPrecision : NativeOpTrait<"KeepsResultPrecision"> {
  let cppNamespace = "::loom::nn::OpTrait";
}

#endif
