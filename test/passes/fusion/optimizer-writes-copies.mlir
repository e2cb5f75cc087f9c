// RUN: loom-opt %s --loom-optimizer-writes-copies --split-input-file | FileCheck %s

// The update writes the bf16 copies of p0 and of the frozen table's copy
// needs no update: the cast becomes a refresh call, the copies persistent
// buffers named after their weights, and the update lists its copy.
// CHECK-LABEL: rt.program @kept
// CHECK: %[[T:.*]] = rt.alloc persistent {name = "table.copy"} : memref<8xbf16>
// CHECK: %[[C:.*]] = rt.alloc persistent {name = "p0.copy"} : memref<4x3xbf16>
// CHECK: rt.kernel "nn.cast_multi"(%{{.*}}, %{{.*}}) -> (%[[T]], %[[C]]) on "compute" refresh
// CHECK: rt.kernel "nn.matmul"(%{{.*}}, %[[C]])
// CHECK: rt.kernel "nn.adamw_multi"({{.*}}) -> (%{{.*}}, %{{.*}}, %{{.*}}, %[[C]]) attrs {{{.*}}copies = array<i64: 0>
rt.program @kept rank = 0 streams = ["compute"] {
  %lr = rt.input "lr" : memref<f32>
  %step = rt.input "step" : memref<f32>
  %x = rt.input "x" : memref<2x3xbf16>
  %g0 = rt.input "g0" : memref<4x3xf32>
  %table = rt.param "table" frozen : memref<8xf32>
  %p0 = rt.param "p0" : memref<4x3xf32>
  %m0 = rt.param "p0.exp_avg" frozen : memref<4x3xf32>
  %v0 = rt.param "p0.exp_avg_sq" frozen : memref<4x3xf32>
  %t = rt.alloc : memref<8xbf16>
  %c0 = rt.alloc : memref<4x3xbf16>
  rt.kernel "nn.cast_multi" (%table, %p0) -> (%t, %c0) on "compute" : (memref<8xf32>, memref<4x3xf32>) -> (memref<8xbf16>, memref<4x3xbf16>)
  %y = rt.alloc : memref<2x4xbf16>
  rt.kernel "nn.matmul" (%x, %c0) -> (%y) attrs {transpose_lhs = 0 : i64, transpose_rhs = 1 : i64} on "compute" : (memref<2x3xbf16>, memref<4x3xbf16>) -> memref<2x4xbf16>
  rt.kernel "nn.adamw_multi" (%lr, %step, %p0, %g0, %m0, %v0) -> (%p0, %m0, %v0) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, has_scale = 0 : i64, weight_decays = array<f64: 0.1>} on "compute" : (memref<f32>, memref<f32>, memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>) -> (memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>)
  rt.output "y" %y : memref<2x4xbf16>
  rt.output "t" %t : memref<8xbf16>
}

// -----

// Kept as they are: a copy read after the update (it would see the new
// weight), and a weight that a collective also writes (ZeRO-1's gather).
// CHECK-LABEL: rt.program @not_kept
// CHECK-NOT: refresh
// CHECK-NOT: persistent
// CHECK-NOT: copies
module attributes {rt.mesh_axes = ["dp"], rt.mesh_shape = array<i64: 2>} {
rt.program @not_kept rank = 0 streams = ["compute", "comm"] {
  %lr = rt.input "lr" : memref<f32>
  %step = rt.input "step" : memref<f32>
  %x = rt.input "x" : memref<2x3xbf16>
  %g0 = rt.input "g0" : memref<4x3xf32>
  %p0 = rt.param "p0" : memref<4x3xf32>
  %m0 = rt.param "p0.exp_avg" frozen : memref<4x3xf32>
  %v0 = rt.param "p0.exp_avg_sq" frozen : memref<4x3xf32>
  %p1 = rt.param "p1" : memref<4x3xf32>
  %m1 = rt.param "p1.exp_avg" frozen : memref<4x3xf32>
  %v1 = rt.param "p1.exp_avg_sq" frozen : memref<4x3xf32>
  %c0 = rt.alloc : memref<4x3xbf16>
  %c1 = rt.alloc : memref<4x3xbf16>
  rt.kernel "nn.cast_multi" (%p0, %p1) -> (%c0, %c1) on "compute" : (memref<4x3xf32>, memref<4x3xf32>) -> (memref<4x3xbf16>, memref<4x3xbf16>)
  rt.kernel "nn.adamw_multi" (%lr, %step, %p0, %g0, %m0, %v0, %p1, %g0, %m1, %v1) -> (%p0, %m0, %v0, %p1, %m1, %v1) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, has_scale = 0 : i64, weight_decays = array<f64: 0.1, 0.1>} on "compute" : (memref<f32>, memref<f32>, memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>) -> (memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>)
  %y = rt.alloc : memref<2x4xbf16>
  rt.kernel "nn.matmul" (%x, %c0) -> (%y) attrs {transpose_lhs = 0 : i64, transpose_rhs = 1 : i64} on "compute" : (memref<2x3xbf16>, memref<4x3xbf16>) -> memref<2x4xbf16>
  %h = rt.alloc : memref<2x3xf32>
  rt.kernel "nn.slice" (%p1) -> (%h) attrs {limits = array<i64: 2, 3>, starts = array<i64: 0, 0>, strides = array<i64: 1, 1>} on "compute" : (memref<4x3xf32>) -> memref<2x3xf32>
  rt.collective all_gather (%h) -> (%p1) on "comm" {axes = ["dp"], dim = 0} : (memref<2x3xf32>) -> memref<4x3xf32>
  rt.output "y" %y : memref<2x4xbf16>
  rt.output "c1" %c1 : memref<4x3xbf16>
}
}
