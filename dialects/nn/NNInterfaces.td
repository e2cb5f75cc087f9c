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

#endif
