// RUN: loom-opt %s --loom-lower-to-rt | FileCheck %s
// RUN: loom-opt %s --loom-lower-to-rt --loom-plan-memory --loom-assign-streams | FileCheck %s --check-prefix=STREAMS

// A bucket (--loom-bucket-reductions) becomes one rt.collective with an
// output buffer per input, in order.
// CHECK: rt.kernel "nn.relu"({{.*}}) -> (%[[A:[0-9]+]])
// CHECK: rt.kernel "nn.relu"({{.*}}) -> (%[[B:[0-9]+]])
// CHECK: %[[GA:.*]] = rt.alloc {{.*}}: memref<16xf32>
// CHECK: %[[GB:.*]] = rt.alloc {{.*}}: memref<4x4xf32>
// CHECK: rt.collective all_reduce(%[[A]], %[[B]]) -> (%[[GA]], %[[GB]]) {axes = ["dp"], reduce = #rt.reduce<sum>} : (memref<16xf32>, memref<4x4xf32>) -> (memref<16xf32>, memref<4x4xf32>)
// CHECK: rt.kernel "nn.neg"(%[[GA]])
// CHECK: rt.kernel "nn.neg"(%[[GB]])

// On its stream, the bucket waits once for the compute stream after the
// last gradient's producer, and the readers of its results wait for it.
// STREAMS: rt.kernel "nn.relu"({{.*}}) -> (%[[A:[0-9]+]]) on "compute"
// STREAMS: rt.kernel "nn.relu"({{.*}}) -> (%[[B:[0-9]+]]) on "compute"
// STREAMS-NEXT: rt.record_event 0 on "compute"
// STREAMS: rt.wait_event 0 on "dp_comm"
// STREAMS-NEXT: rt.collective all_reduce(%[[A]], %[[B]]) -> ({{.*}}) on "dp_comm"
// STREAMS-NEXT: rt.record_event 1 on "dp_comm"
// STREAMS: rt.wait_event 1 on "compute"
// STREAMS-NEXT: rt.kernel "nn.neg"
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @main(%x: tensor<16xf32>, %y: tensor<4x4xf32>) -> (tensor<16xf32>, tensor<4x4xf32>) {
    %a = nn.relu %x : tensor<16xf32>
    %b = nn.relu %y : tensor<4x4xf32>
    %g:2 = dist.all_reduce %a, %b {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<16xf32>, tensor<4x4xf32>
    %na = nn.neg %g#0 : tensor<16xf32>
    %nb = nn.neg %g#1 : tensor<4x4xf32>
    return %na, %nb : tensor<16xf32>, tensor<4x4xf32>
  }
}
