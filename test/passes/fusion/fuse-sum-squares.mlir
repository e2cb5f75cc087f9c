// RUN: loom-opt %s --loom-fuse-sum-squares --split-input-file | FileCheck %s

// The gradient norm as BuildTrainingStep writes it: a square, a row sum and
// a sum per gradient (a vector's without the row sum), then a running
// total. One call makes the total; the squares, row sums, per-gradient sums
// and adds go, and the scratch holds a partial per 32768-element chunk (two
// for the 40000-element gradient) and a sum per gradient.
// CHECK-LABEL: rt.program @norm
// CHECK-COUNT-2: rt.alloc : memref<f32>
// CHECK-NOT: rt.alloc : memref<f32>
// CHECK-NOT: "nn.mul"
// CHECK-NOT: "nn.reduce_sum"
// CHECK-NOT: "nn.add"
// CHECK: %[[SCRATCH:[0-9]+]] = rt.alloc {name = "sum_squares.partials"} : memref<7xf64>
// CHECK: rt.kernel "nn.sum_squares_multi"(%[[G0:[0-9]+]], %[[G1:[0-9]+]], %[[G2:[0-9]+]]) -> (%[[TOTAL:[0-9]+]], %[[SCRATCH]]) attrs {total = 1 : i64}
// CHECK-NOT: "nn.add"
// CHECK: rt.kernel "nn.sqrt"(%[[TOTAL]])
rt.program @norm rank = 0 streams = ["compute"] {
  %g0 = rt.input "g0" : memref<4x3xf32>
  %g1 = rt.input "g1" : memref<3xf32>
  %g2 = rt.input "g2" : memref<200x200xf32>
  %sq0 = rt.alloc : memref<4x3xf32>
  rt.kernel "nn.mul" (%g0, %g0) -> (%sq0) : (memref<4x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
  %r0 = rt.alloc : memref<4xf32>
  rt.kernel "nn.reduce_sum" (%sq0) -> (%r0) attrs {dims = array<i64: 1>, keepdim = 0 : i64} : (memref<4x3xf32>) -> memref<4xf32>
  %s0 = rt.alloc : memref<f32>
  rt.kernel "nn.reduce_sum" (%r0) -> (%s0) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : (memref<4xf32>) -> memref<f32>
  %sq1 = rt.alloc : memref<3xf32>
  rt.kernel "nn.mul" (%g1, %g1) -> (%sq1) : (memref<3xf32>, memref<3xf32>) -> memref<3xf32>
  %s1 = rt.alloc : memref<f32>
  rt.kernel "nn.reduce_sum" (%sq1) -> (%s1) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : (memref<3xf32>) -> memref<f32>
  %t1 = rt.alloc : memref<f32>
  rt.kernel "nn.add" (%s0, %s1) -> (%t1) : (memref<f32>, memref<f32>) -> memref<f32>
  %sq2 = rt.alloc : memref<200x200xf32>
  rt.kernel "nn.mul" (%g2, %g2) -> (%sq2) : (memref<200x200xf32>, memref<200x200xf32>) -> memref<200x200xf32>
  %flat = rt.alias %sq2 : memref<200x200xf32> -> memref<40000xf32>
  %s2 = rt.alloc : memref<f32>
  rt.kernel "nn.reduce_sum" (%flat) -> (%s2) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : (memref<40000xf32>) -> memref<f32>
  %t2 = rt.alloc : memref<f32>
  rt.kernel "nn.add" (%t1, %s2) -> (%t2) : (memref<f32>, memref<f32>) -> memref<f32>
  %norm = rt.alloc : memref<f32>
  rt.kernel "nn.sqrt" (%t2) -> (%norm) : (memref<f32>) -> memref<f32>
  rt.output "grad_norm" %norm : memref<f32>
}

// -----

// Sums that are not only a running total (one is also an output) are
// written one by one; the add after the first chain moves after the call.
// CHECK-LABEL: rt.program @separate
// CHECK: rt.kernel "nn.sum_squares_multi"(%{{[0-9]+}}, %{{[0-9]+}}) -> (%[[S0:[0-9]+]], %[[S1:[0-9]+]], %{{[0-9]+}}) on "compute"
// CHECK-NEXT: rt.kernel "nn.add"(%[[S0]], %[[S1]])
// CHECK: rt.output "s0" %[[S0]]
rt.program @separate rank = 0 streams = ["compute"] {
  %g0 = rt.input "g0" : memref<8xf32>
  %g1 = rt.input "g1" : memref<8xf32>
  %sq0 = rt.alloc : memref<8xf32>
  rt.kernel "nn.mul" (%g0, %g0) -> (%sq0) on "compute" : (memref<8xf32>, memref<8xf32>) -> memref<8xf32>
  %s0 = rt.alloc : memref<f32>
  rt.kernel "nn.reduce_sum" (%sq0) -> (%s0) attrs {dims = array<i64: 0>, keepdim = 0 : i64} on "compute" : (memref<8xf32>) -> memref<f32>
  %sq1 = rt.alloc : memref<8xf32>
  rt.kernel "nn.mul" (%g1, %g1) -> (%sq1) on "compute" : (memref<8xf32>, memref<8xf32>) -> memref<8xf32>
  %s1 = rt.alloc : memref<f32>
  rt.kernel "nn.reduce_sum" (%sq1) -> (%s1) attrs {dims = array<i64: 0>, keepdim = 0 : i64} on "compute" : (memref<8xf32>) -> memref<f32>
  %t = rt.alloc : memref<f32>
  rt.kernel "nn.add" (%s0, %s1) -> (%t) on "compute" : (memref<f32>, memref<f32>) -> memref<f32>
  rt.output "s0" %s0 : memref<f32>
  rt.output "t" %t : memref<f32>
}

// -----

// Not fused: a square read by something else, and a gradient overwritten
// (in place) between its square and its sum -- moving the square after that
// write would change it. A run ends before an op that reads one of its
// sums.
// CHECK-LABEL: rt.program @kept
// CHECK: rt.kernel "nn.mul"(%[[A:[0-9]+]], %[[A]])
// CHECK: rt.kernel "nn.relu"
// CHECK: rt.kernel "nn.mul"(%[[B:[0-9]+]], %[[B]])
// CHECK: rt.kernel "nn.neg"(%[[B]]) -> (%[[B]])
// CHECK: rt.kernel "nn.reduce_sum"
// CHECK: rt.kernel "nn.sum_squares_multi"(%[[C:[0-9]+]]) -> (%[[SC:[0-9]+]], %{{[0-9]+}})
// CHECK-NEXT: rt.kernel "nn.exp"(%[[SC]])
// CHECK: rt.kernel "nn.sum_squares_multi"(%[[D:[0-9]+]])
rt.program @kept rank = 0 streams = ["compute"] {
  %a = rt.input "a" : memref<8xf32>
  %b = rt.param "b" : memref<8xf32>
  %c = rt.input "c" : memref<8xf32>
  %d = rt.input "d" : memref<8xf32>
  %sqa = rt.alloc : memref<8xf32>
  rt.kernel "nn.mul" (%a, %a) -> (%sqa) : (memref<8xf32>, memref<8xf32>) -> memref<8xf32>
  %ra = rt.alloc : memref<8xf32>
  rt.kernel "nn.relu" (%sqa) -> (%ra) : (memref<8xf32>) -> memref<8xf32>
  %sa = rt.alloc : memref<f32>
  rt.kernel "nn.reduce_sum" (%sqa) -> (%sa) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : (memref<8xf32>) -> memref<f32>
  %sqb = rt.alloc : memref<8xf32>
  rt.kernel "nn.mul" (%b, %b) -> (%sqb) : (memref<8xf32>, memref<8xf32>) -> memref<8xf32>
  rt.kernel "nn.neg" (%b) -> (%b) : (memref<8xf32>) -> memref<8xf32>
  %sb = rt.alloc : memref<f32>
  rt.kernel "nn.reduce_sum" (%sqb) -> (%sb) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : (memref<8xf32>) -> memref<f32>
  %sqc = rt.alloc : memref<8xf32>
  rt.kernel "nn.mul" (%c, %c) -> (%sqc) : (memref<8xf32>, memref<8xf32>) -> memref<8xf32>
  %sc = rt.alloc : memref<f32>
  rt.kernel "nn.reduce_sum" (%sqc) -> (%sc) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : (memref<8xf32>) -> memref<f32>
  %ec = rt.alloc : memref<f32>
  rt.kernel "nn.exp" (%sc) -> (%ec) : (memref<f32>) -> memref<f32>
  %sqd = rt.alloc : memref<8xf32>
  rt.kernel "nn.mul" (%d, %d) -> (%sqd) : (memref<8xf32>, memref<8xf32>) -> memref<8xf32>
  %sd = rt.alloc : memref<f32>
  rt.kernel "nn.reduce_sum" (%sqd) -> (%sd) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : (memref<8xf32>) -> memref<f32>
  rt.output "sa" %sa : memref<f32>
  rt.output "sb" %sb : memref<f32>
  rt.output "ec" %ec : memref<f32>
  rt.output "sd" %sd : memref<f32>
}
