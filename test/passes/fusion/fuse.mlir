// RUN: loom-opt %s --loom-fuse --split-input-file | FileCheck %s
// RUN: loom-opt %s --loom-fuse --loom-unfuse --split-input-file | FileCheck %s --check-prefix=UNFUSE

// A chain of elementwise, broadcast, cast and row-reduction ops becomes one
// group; the GEMM (not fusible) stays outside and splits the chain.
// CHECK-LABEL: func.func @chain
// CHECK: %[[F:.*]] = nn.fused(%arg1, %arg0) : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4xbf16> {
// CHECK-NEXT: ^bb0(%[[B:.*]]: tensor<8xf32>, %[[A:.*]]: tensor<4x8xf32>):
// CHECK-NEXT: %[[BC:.*]] = nn.broadcast %[[B]] : tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[M:.*]] = nn.mul %[[A]], %[[BC]]
// CHECK-NEXT: %[[E:.*]] = nn.exp %[[M]]
// CHECK-NEXT: %[[S:.*]] = nn.reduce_sum %[[E]] dims = [1]
// CHECK-NEXT: %[[C:.*]] = nn.cast %[[S]] : tensor<4xf32> -> tensor<4xbf16>
// CHECK-NEXT: nn.yield %[[C]] : tensor<4xbf16>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
// UNFUSE-LABEL: func.func @chain
// UNFUSE-NOT: nn.fused
// UNFUSE: nn.broadcast %arg1
// UNFUSE-NEXT: nn.mul %arg0
// UNFUSE-NEXT: nn.exp
// UNFUSE-NEXT: nn.reduce_sum
// UNFUSE-NEXT: nn.cast
// UNFUSE-NEXT: return
func.func @chain(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4xbf16> {
  %b = nn.broadcast %w : tensor<8xf32> -> tensor<4x8xf32>
  %m = nn.mul %x, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %e = nn.exp %m : tensor<4x8xf32>
  %s = nn.reduce_sum %e dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %c = nn.cast %s : tensor<4xf32> -> tensor<4xbf16>
  return %c : tensor<4xbf16>
}

// -----

// A matmul between two elementwise chains: two groups, never one across it.
// CHECK-LABEL: func.func @split_by_matmul
// CHECK: %[[F0:.*]] = nn.fused(%arg0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: nn.neg
// CHECK-NEXT: nn.exp
// CHECK: %[[MM:.*]] = nn.matmul %[[F0]], %arg1
// CHECK: nn.fused(%[[MM]]) : (tensor<4x4xf32>) -> tensor<4x4xf32>
// CHECK: nn.relu
// CHECK-NEXT: nn.tanh
func.func @split_by_matmul(%x: tensor<4x8xf32>, %w: tensor<8x4xf32>) -> tensor<4x4xf32> {
  %a = nn.neg %x : tensor<4x8xf32>
  %b = nn.exp %a : tensor<4x8xf32>
  %c = nn.matmul %b, %w : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %d = nn.relu %c : tensor<4x4xf32>
  %e = nn.tanh %d : tensor<4x4xf32>
  return %e : tensor<4x4xf32>
}

// -----

// A reduction read by two consumers is in one group only (never
// duplicated): the consumers join its group, and it is computed once.
// CHECK-LABEL: func.func @reduction_two_consumers
// CHECK: %[[F:.*]]:2 = nn.fused(%arg0)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: %[[M:.*]] = nn.reduce_max
// CHECK-NEXT: nn.exp %[[M]]
// CHECK-NEXT: nn.neg %[[M]]
// CHECK-NEXT: nn.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]#0, %[[F]]#1
func.func @reduction_two_consumers(%x: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %m = nn.reduce_max %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %a = nn.exp %m : tensor<4xf32>
  %b = nn.neg %m : tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}

// -----

// A reduction whose value is read outside the group (here by a GEMM) is a
// result of the group, not recomputed there.
// CHECK-LABEL: func.func @reduction_read_outside
// CHECK: %[[F:.*]]:2 = nn.fused(%arg0) : (tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK-COUNT-1: nn.reduce_sum
// CHECK: nn.yield
// CHECK-NOT: nn.reduce_sum
// CHECK: nn.reshape %[[F]]#0
// CHECK: return %[[F]]#1
func.func @reduction_read_outside(%x: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<1x4xf32>) {
  %s = nn.reduce_sum %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %e = nn.exp %s : tensor<4xf32>
  %r = nn.reshape %s : tensor<4xf32> -> tensor<1x4xf32>
  return %e, %r : tensor<4xf32>, tensor<1x4xf32>
}

// -----

// A reduction over an outer dim is not a row reduction: not fused.
// CHECK-LABEL: func.func @column_reduction
// CHECK-NOT: nn.fused
// CHECK: nn.reduce_sum %{{.*}} dims = [0]
// CHECK-NOT: nn.fused
func.func @column_reduction(%x: tensor<4x8xf32>) -> tensor<8xf32> {
  %s = nn.reduce_sum %x dims = [0] : tensor<4x8xf32> -> tensor<8xf32>
  %e = nn.exp %s : tensor<8xf32>
  return %e : tensor<8xf32>
}

// -----

// Ops on different pipeline stages never share a group.
// CHECK-LABEL: func.func @stages
// CHECK: nn.fused(%arg0) {pipe.stage = 0 : i64}
// CHECK: nn.neg
// CHECK-NEXT: nn.exp
// CHECK: nn.fused(%{{.*}}) {pipe.stage = 1 : i64}
// CHECK: nn.relu
// CHECK-NEXT: nn.tanh
func.func @stages(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = nn.neg %x {pipe.stage = 0 : i64} : tensor<4xf32>
  %b = nn.exp %a {pipe.stage = 0 : i64} : tensor<4xf32>
  %c = nn.relu %b {pipe.stage = 1 : i64} : tensor<4xf32>
  %d = nn.tanh %c {pipe.stage = 1 : i64} : tensor<4xf32>
  return %d : tensor<4xf32>
}

// -----

// A collective splits a chain, even where the ops after it also read the
// ops before it: one group would have to run both before and after the
// all-reduce.
// CHECK-LABEL: func.func @collective
// CHECK: %[[F0:.*]] = nn.fused(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK: nn.neg
// CHECK-NEXT: nn.exp
// CHECK: %[[R:.*]] = dist.all_reduce %[[F0]]
// CHECK: nn.fused(%[[R]], %[[F0]])
// CHECK: nn.mul
// CHECK-NEXT: nn.relu
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  func.func @collective(%x: tensor<4xf32>) -> tensor<4xf32> {
    %a = nn.neg %x : tensor<4xf32>
    %b = nn.exp %a : tensor<4xf32>
    %r = dist.all_reduce %b {axes = ["tp"], reduce = #dist.reduce<sum>} : tensor<4xf32>
    %m = nn.mul %r, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %y = nn.relu %m : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// Values read after the group (as the backward reads the forward's
// activations) stay available as its results; a lone fusible op is left
// alone.
// CHECK-LABEL: func.func @kept_for_backward
// CHECK: %[[F:.*]]:2 = nn.fused(%arg0, %arg1)
// CHECK: %[[S:.*]] = nn.silu
// CHECK-NEXT: %[[M:.*]] = nn.mul %[[S]]
// CHECK-NEXT: nn.yield %[[S]], %[[M]]
// CHECK: %[[G:.*]] = nn.matmul %[[F]]#1, %arg2
// CHECK: nn.silu_grad %arg0, %[[G]]
// CHECK-NOT: nn.fused
// CHECK: nn.mul %[[G]], %[[F]]#0
func.func @kept_for_backward(%x: tensor<4x4xf32>, %u: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %s = nn.silu %x : tensor<4x4xf32>
  %m = nn.mul %s, %u : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %g = nn.matmul %m, %w : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %dx = nn.silu_grad %x, %g : tensor<4x4xf32>
  %du = nn.mul %g, %s : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %dx, %du : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// An op between a group's members that reads the group (a reshape, not
// fusible) moves after the nn.fused op; the value it reads is a result.
// CHECK-LABEL: func.func @moved_reader
// CHECK: %[[F:.*]]:2 = nn.fused(%arg0)
// CHECK: nn.neg
// CHECK-NEXT: nn.exp
// CHECK-NEXT: nn.yield
// CHECK: nn.reshape %[[F]]#0
// CHECK: return %[[F]]#1
func.func @moved_reader(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<2x2xf32>) {
  %a = nn.neg %x : tensor<4xf32>
  %r = nn.reshape %a : tensor<4xf32> -> tensor<2x2xf32>
  %b = nn.exp %a : tensor<4xf32>
  return %b, %r : tensor<4xf32>, tensor<2x2xf32>
}

// -----

// Two groups that would each need the other first: {exp, mul} reads the
// neg, and the add reads the exp through a reshape. The neg and add do not
// group (the program stays acyclic), the exp and mul do.
// CHECK-LABEL: func.func @overlapping_groups
// CHECK: %[[N:.*]] = nn.neg %arg1
// CHECK: %[[F:.*]]:2 = nn.fused(%arg0, %[[N]])
// CHECK-NEXT: ^bb0
// CHECK-NEXT: nn.exp
// CHECK-NEXT: nn.mul
// CHECK-NEXT: nn.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[R:.*]] = nn.reshape %[[F]]#0
// CHECK-NEXT: %[[R2:.*]] = nn.reshape %[[R]]
// CHECK-NEXT: nn.add %[[N]], %[[R2]]
// CHECK-NOT: nn.fused
func.func @overlapping_groups(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %b1 = nn.exp %x : tensor<4xf32>
  %g1 = nn.neg %y : tensor<4xf32>
  %b2 = nn.mul %b1, %g1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %a = nn.reshape %b1 : tensor<4xf32> -> tensor<2x2xf32>
  %af = nn.reshape %a : tensor<2x2xf32> -> tensor<4xf32>
  %g2 = nn.add %g1, %af : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %b2, %g2 : tensor<4xf32>, tensor<4xf32>
}

// -----

// The same, the reshape before the neg: the search while grouping does not
// look before a group's first op, and the check when the groups become
// nn.fused ops ends the neg's group before the add.
// CHECK-LABEL: func.func @overlapping_groups_early_reader
// CHECK: %[[N:.*]] = nn.neg %arg1
// CHECK: %[[F:.*]]:2 = nn.fused(%arg0, %[[N]])
// CHECK-NEXT: ^bb0
// CHECK-NEXT: nn.exp
// CHECK-NEXT: nn.mul
// CHECK-NEXT: nn.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[R:.*]] = nn.reshape %[[F]]#0
// CHECK-NEXT: %[[R2:.*]] = nn.reshape %[[R]]
// CHECK-NEXT: nn.add %[[N]], %[[R2]]
// CHECK-NOT: nn.fused
func.func @overlapping_groups_early_reader(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %b1 = nn.exp %x : tensor<4xf32>
  %a = nn.reshape %b1 : tensor<4xf32> -> tensor<2x2xf32>
  %af = nn.reshape %a : tensor<2x2xf32> -> tensor<4xf32>
  %g1 = nn.neg %y : tensor<4xf32>
  %b2 = nn.mul %b1, %g1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %g2 = nn.add %g1, %af : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %b2, %g2 : tensor<4xf32>, tensor<4xf32>
}
