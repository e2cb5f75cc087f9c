// RUN: loom-opt %s -split-input-file | FileCheck %s
// RUN: loom-opt %s -split-input-file | loom-opt -split-input-file | FileCheck %s

// The loom.* discardable attributes (dialects/loom/LoomDialect.td) round-trip,
// loom.backward as its enum.

// CHECK-LABEL: func.func @step
// CHECK-SAME: {loom.name = "x"}
// CHECK-SAME: {loom.name = "counts.updated", loom.updates = "counts"}
func.func @step(%x: tensor<4xf32> {loom.name = "x"}) -> (tensor<4xf32> {loom.name = "counts.updated", loom.updates = "counts"}) {
  // CHECK: nn.neg %{{.*}} {loom.backward = #loom.backward<weight>, loom.microbatch = 1 : i64}
  %0 = nn.neg %x {loom.backward = #loom.backward<weight>, loom.microbatch = 1 : i64} : tensor<4xf32>
  // CHECK: nn.neg %{{.*}} {loom.backward = #loom.backward<input>, loom.stream = "compute_b"}
  %1 = nn.neg %0 {loom.backward = #loom.backward<input>, loom.stream = "compute_b"} : tensor<4xf32>
  return %1 : tensor<4xf32>
}
