// RUN: loom-opt %s --loom-fuse=max-span=2 | FileCheck %s
// RUN: loom-opt %s --loom-fuse | FileCheck %s --check-prefix=DEFAULT

// An op joins a group only within max-span ops of the group's first op:
// the chain of five splits in two with max-span=2, stays one by default.
// CHECK-LABEL: func.func @span
// CHECK: nn.fused(%arg0)
// CHECK: nn.neg
// CHECK-NEXT: nn.exp
// CHECK-NEXT: nn.relu
// CHECK-NEXT: nn.yield
// CHECK: nn.fused(%{{.*}})
// CHECK: nn.tanh
// CHECK-NEXT: nn.sigmoid
// CHECK-NEXT: nn.yield
// DEFAULT-LABEL: func.func @span
// DEFAULT-COUNT-1: nn.fused
// DEFAULT-NOT: nn.fused
func.func @span(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = nn.neg %x : tensor<4xf32>
  %b = nn.exp %a : tensor<4xf32>
  %c = nn.relu %b : tensor<4xf32>
  %d = nn.tanh %c : tensor<4xf32>
  %e = nn.sigmoid %d : tensor<4xf32>
  return %e : tensor<4xf32>
}
