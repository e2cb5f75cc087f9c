// RUN: loom-opt %s --loom-fuse-norm-weight-grad --split-input-file | FileCheck %s

// An rms_norm's weight gradient in bf16 training: the norm again without
// its weight, the product with dy, the row sum and the cast to the f32
// master weight's type become one call writing the f32 gradient; the scratch
// holds 2 * 6 row statistics and one block of 6 rows' column sums (8).
// CHECK-LABEL: rt.program @rms
// CHECK-NOT: "nn.rms_norm"
// CHECK-NOT: "nn.mul"
// CHECK-NOT: "nn.reduce_sum"
// CHECK-NOT: "nn.cast"
// CHECK: %[[G:[0-9]+]] = rt.alloc : memref<8xf32>
// CHECK-NEXT: %[[S:[0-9]+]] = rt.alloc {name = "norm_weight_grad.scratch"} : memref<20xf32>
// CHECK-NEXT: rt.kernel "nn.norm_weight_grad"(%[[X:[0-9]+]], %[[DY:[0-9]+]]) -> (%[[G]], %[[S]]) attrs {epsilon = 1.000000e-05 : f64} on "compute"
// CHECK-NEXT: rt.output "g" %[[G]]
rt.program @rms rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<2x3x8xbf16>
  %dy = rt.input "dy" : memref<2x3x8xbf16>
  %n = rt.alloc : memref<2x3x8xbf16>
  rt.kernel "nn.rms_norm" (%x) -> (%n) attrs {epsilon = 1.0e-05 : f64, has_weight = 0 : i64} on "compute" : (memref<2x3x8xbf16>) -> memref<2x3x8xbf16>
  %p = rt.alloc : memref<2x3x8xbf16>
  rt.kernel "nn.mul" (%dy, %n) -> (%p) on "compute" : (memref<2x3x8xbf16>, memref<2x3x8xbf16>) -> memref<2x3x8xbf16>
  %w = rt.alloc : memref<8xbf16>
  rt.kernel "nn.reduce_sum" (%p) -> (%w) attrs {dims = array<i64: 0, 1>, keepdim = 0 : i64} on "compute" : (memref<2x3x8xbf16>) -> memref<8xbf16>
  %g = rt.alloc : memref<8xf32>
  rt.kernel "nn.cast" (%w) -> (%g) on "compute" : (memref<8xbf16>) -> memref<8xf32>
  rt.output "g" %g : memref<8xf32>
}

// -----

// A layer_norm's (centered), without a cast, the normalized input on the
// product's left.
// CHECK-LABEL: rt.program @layer
// CHECK: rt.kernel "nn.norm_weight_grad"(%{{[0-9]+}}, %{{[0-9]+}}) -> (%{{[0-9]+}}, %{{[0-9]+}}) attrs {centered = 1 : i64, epsilon = {{.*}} : f64}
// CHECK-NOT: "nn.layer_norm"
rt.program @layer rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xf32>
  %dy = rt.input "dy" : memref<4x8xf32>
  %n = rt.alloc : memref<4x8xf32>
  rt.kernel "nn.layer_norm" (%x) -> (%n) attrs {epsilon = 1.0e-06 : f64, has_weight = 0 : i64, has_bias = 0 : i64} : (memref<4x8xf32>) -> memref<4x8xf32>
  %p = rt.alloc : memref<4x8xf32>
  rt.kernel "nn.mul" (%n, %dy) -> (%p) : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
  %w = rt.alloc : memref<8xf32>
  rt.kernel "nn.reduce_sum" (%p) -> (%w) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : (memref<4x8xf32>) -> memref<8xf32>
  rt.output "w" %w : memref<8xf32>
}

// -----

// Not fused: the normalized input is read elsewhere; dy overwritten (in
// place) between the product and the sum; a sum that keeps a leading dim.
// CHECK-LABEL: rt.program @kept
// CHECK-NOT: nn.norm_weight_grad
// CHECK-COUNT-3: "nn.rms_norm"
rt.program @kept rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xf32>
  %dy = rt.param "dy" : memref<4x8xf32>
  %n = rt.alloc : memref<4x8xf32>
  rt.kernel "nn.rms_norm" (%x) -> (%n) attrs {epsilon = 1.0e-05 : f64, has_weight = 0 : i64} : (memref<4x8xf32>) -> memref<4x8xf32>
  %p = rt.alloc : memref<4x8xf32>
  rt.kernel "nn.mul" (%dy, %n) -> (%p) : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
  %w = rt.alloc : memref<8xf32>
  rt.kernel "nn.reduce_sum" (%p) -> (%w) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : (memref<4x8xf32>) -> memref<8xf32>
  rt.output "n" %n : memref<4x8xf32>
  %n2 = rt.alloc : memref<4x8xf32>
  rt.kernel "nn.rms_norm" (%x) -> (%n2) attrs {epsilon = 1.0e-05 : f64, has_weight = 0 : i64} : (memref<4x8xf32>) -> memref<4x8xf32>
  %p2 = rt.alloc : memref<4x8xf32>
  rt.kernel "nn.mul" (%dy, %n2) -> (%p2) : (memref<4x8xf32>, memref<4x8xf32>) -> memref<4x8xf32>
  rt.kernel "nn.neg" (%dy) -> (%dy) : (memref<4x8xf32>) -> memref<4x8xf32>
  %w2 = rt.alloc : memref<8xf32>
  rt.kernel "nn.reduce_sum" (%p2) -> (%w2) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : (memref<4x8xf32>) -> memref<8xf32>
  %x3 = rt.input "x3" : memref<2x4x8xf32>
  %dy3 = rt.input "dy3" : memref<2x4x8xf32>
  %n3 = rt.alloc : memref<2x4x8xf32>
  rt.kernel "nn.rms_norm" (%x3) -> (%n3) attrs {epsilon = 1.0e-05 : f64, has_weight = 0 : i64} : (memref<2x4x8xf32>) -> memref<2x4x8xf32>
  %p3 = rt.alloc : memref<2x4x8xf32>
  rt.kernel "nn.mul" (%dy3, %n3) -> (%p3) : (memref<2x4x8xf32>, memref<2x4x8xf32>) -> memref<2x4x8xf32>
  %w3 = rt.alloc : memref<4x8xf32>
  rt.kernel "nn.reduce_sum" (%p3) -> (%w3) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : (memref<2x4x8xf32>) -> memref<4x8xf32>
  rt.output "w" %w : memref<8xf32>
  rt.output "w2" %w2 : memref<8xf32>
  rt.output "w3" %w3 : memref<4x8xf32>
}
