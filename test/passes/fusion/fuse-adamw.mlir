// RUN: loom-opt %s --loom-fuse-adamw --split-input-file | FileCheck %s

// Two in-place updates with their clipping multiplies become one call; the
// scaled gradients' buffers go away and each parameter keeps its decay.
// CHECK-LABEL: rt.program @clipped
// CHECK-NOT: "nn.mul"
// CHECK-NOT: rt.alloc : memref<4x3xf32>
// CHECK-NOT: "nn.adamw"(
// CHECK: rt.kernel "nn.adamw_multi"(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[P0:[0-9]+]], %{{[0-9]+}}, %[[M0:[0-9]+]], %[[V0:[0-9]+]], %[[P1:[0-9]+]], %{{[0-9]+}}, %[[M1:[0-9]+]], %[[V1:[0-9]+]]) -> (%[[P0]], %[[M0]], %[[V0]], %[[P1]], %[[M1]], %[[V1]])
// CHECK-SAME: has_scale = 1 : i64
// CHECK-SAME: weight_decays = array<f64: 1.000000e-01, 0.000000e+00>
// CHECK-SAME: on "compute"
// CHECK: rt.kernel "nn.relu"
// CHECK: rt.output
rt.program @clipped rank = 0 streams = ["compute"] {
  %lr = rt.input "lr" : memref<f32>
  %step = rt.input "step" : memref<f32>
  %scale = rt.input "scale" : memref<f32>
  %g0 = rt.input "g0" : memref<4x3xf32>
  %g1 = rt.input "g1" : memref<3xf32>
  %p0 = rt.param "p0" : memref<4x3xf32>
  %m0 = rt.param "p0.exp_avg" : memref<4x3xf32>
  %v0 = rt.param "p0.exp_avg_sq" : memref<4x3xf32>
  %s0 = rt.alloc : memref<4x3xf32>
  rt.kernel "nn.mul" (%g0, %scale) -> (%s0) on "compute" : (memref<4x3xf32>, memref<f32>) -> memref<4x3xf32>
  rt.kernel "nn.adamw" (%p0, %s0, %m0, %v0, %lr, %step) -> (%p0, %m0, %v0) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.1 : f64} on "compute" : (memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>, memref<f32>, memref<f32>) -> (memref<4x3xf32>, memref<4x3xf32>, memref<4x3xf32>)
  %p1 = rt.param "p1" : memref<3xf32>
  %m1 = rt.param "p1.exp_avg" : memref<3xf32>
  %v1 = rt.param "p1.exp_avg_sq" : memref<3xf32>
  %s1 = rt.alloc : memref<3xf32>
  rt.kernel "nn.mul" (%g1, %scale) -> (%s1) on "compute" : (memref<3xf32>, memref<f32>) -> memref<3xf32>
  rt.kernel "nn.adamw" (%p1, %s1, %m1, %v1, %lr, %step) -> (%p1, %m1, %v1) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} on "compute" : (memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<f32>, memref<f32>) -> (memref<3xf32>, memref<3xf32>, memref<3xf32>)
  %out = rt.alloc : memref<3xf32>
  rt.kernel "nn.relu" (%p1) -> (%out) : (memref<3xf32>) -> memref<3xf32>
  rt.output "out" %out : memref<3xf32>
}

// -----

// Without clipping: no scale input.
// CHECK-LABEL: rt.program @unclipped
// CHECK: rt.kernel "nn.adamw_multi"(%{{.*}}, %{{.*}}, %[[P0:[^,]*]], %{{.*}}, %{{.*}}, %{{.*}}, %[[P1:[^,]*]], %{{.*}}, %{{.*}}, %{{.*}}) -> (%[[P0]], {{.*}}, %[[P1]],
// CHECK-SAME: has_scale = 0 : i64
rt.program @unclipped rank = 0 streams = ["compute"] {
  %lr = rt.input "lr" : memref<f32>
  %step = rt.input "step" : memref<f32>
  %g0 = rt.input "g0" : memref<3xf32>
  %g1 = rt.input "g1" : memref<3xf32>
  %p0 = rt.param "p0" : memref<3xf32>
  %m0 = rt.param "m0" : memref<3xf32>
  %v0 = rt.param "v0" : memref<3xf32>
  %p1 = rt.param "p1" : memref<3xf32>
  %m1 = rt.param "m1" : memref<3xf32>
  %v1 = rt.param "v1" : memref<3xf32>
  rt.kernel "nn.adamw" (%p0, %g0, %m0, %v0, %lr, %step) -> (%p0, %m0, %v0) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<f32>, memref<f32>) -> (memref<3xf32>, memref<3xf32>, memref<3xf32>)
  rt.kernel "nn.adamw" (%p1, %g1, %m1, %v1, %lr, %step) -> (%p1, %m1, %v1) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<f32>, memref<f32>) -> (memref<3xf32>, memref<3xf32>, memref<3xf32>)
}

// -----

// Work between two updates (here reading the first one's parameter) keeps
// them apart; an update that writes new buffers (not in place) stays alone.
// CHECK-LABEL: rt.program @separated
// CHECK-NOT: nn.adamw_multi
// CHECK: rt.kernel "nn.adamw"
// CHECK: rt.kernel "nn.relu"
// CHECK: rt.kernel "nn.adamw"
// CHECK: rt.kernel "nn.adamw"
rt.program @separated rank = 0 streams = ["compute"] {
  %lr = rt.input "lr" : memref<f32>
  %step = rt.input "step" : memref<f32>
  %g0 = rt.input "g0" : memref<3xf32>
  %p0 = rt.param "p0" : memref<3xf32>
  %m0 = rt.param "m0" : memref<3xf32>
  %v0 = rt.param "v0" : memref<3xf32>
  %p1 = rt.param "p1" : memref<3xf32>
  %m1 = rt.param "m1" : memref<3xf32>
  %v1 = rt.param "v1" : memref<3xf32>
  rt.kernel "nn.adamw" (%p0, %g0, %m0, %v0, %lr, %step) -> (%p0, %m0, %v0) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<f32>, memref<f32>) -> (memref<3xf32>, memref<3xf32>, memref<3xf32>)
  %r = rt.alloc : memref<3xf32>
  rt.kernel "nn.relu" (%p0) -> (%r) : (memref<3xf32>) -> memref<3xf32>
  rt.kernel "nn.adamw" (%p1, %r, %m1, %v1, %lr, %step) -> (%p1, %m1, %v1) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<f32>, memref<f32>) -> (memref<3xf32>, memref<3xf32>, memref<3xf32>)
  %np = rt.alloc : memref<3xf32>
  %nm = rt.alloc : memref<3xf32>
  %nv = rt.alloc : memref<3xf32>
  rt.kernel "nn.adamw" (%p1, %g0, %m1, %v1, %lr, %step) -> (%np, %nm, %nv) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<f32>, memref<f32>) -> (memref<3xf32>, memref<3xf32>, memref<3xf32>)
}

// -----

// Updates with different learning rates go into separate calls.
// CHECK-LABEL: rt.program @two_rates
// CHECK-COUNT-2: rt.kernel "nn.adamw_multi"
rt.program @two_rates rank = 0 streams = ["compute"] {
  %lr = rt.input "lr" : memref<f32>
  %lr2 = rt.input "lr2" : memref<f32>
  %step = rt.input "step" : memref<f32>
  %g = rt.input "g" : memref<3xf32>
  %p0 = rt.param "p0" : memref<3xf32>
  %m0 = rt.param "m0" : memref<3xf32>
  %v0 = rt.param "v0" : memref<3xf32>
  %p1 = rt.param "p1" : memref<3xf32>
  %m1 = rt.param "m1" : memref<3xf32>
  %v1 = rt.param "v1" : memref<3xf32>
  %p2 = rt.param "p2" : memref<3xf32>
  %m2 = rt.param "m2" : memref<3xf32>
  %v2 = rt.param "v2" : memref<3xf32>
  %p3 = rt.param "p3" : memref<3xf32>
  %m3 = rt.param "m3" : memref<3xf32>
  %v3 = rt.param "v3" : memref<3xf32>
  rt.kernel "nn.adamw" (%p0, %g, %m0, %v0, %lr, %step) -> (%p0, %m0, %v0) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<f32>, memref<f32>) -> (memref<3xf32>, memref<3xf32>, memref<3xf32>)
  rt.kernel "nn.adamw" (%p1, %g, %m1, %v1, %lr, %step) -> (%p1, %m1, %v1) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<f32>, memref<f32>) -> (memref<3xf32>, memref<3xf32>, memref<3xf32>)
  rt.kernel "nn.adamw" (%p2, %g, %m2, %v2, %lr2, %step) -> (%p2, %m2, %v2) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<f32>, memref<f32>) -> (memref<3xf32>, memref<3xf32>, memref<3xf32>)
  rt.kernel "nn.adamw" (%p3, %g, %m3, %v3, %lr2, %step) -> (%p3, %m3, %v3) attrs {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<3xf32>, memref<f32>, memref<f32>) -> (memref<3xf32>, memref<3xf32>, memref<3xf32>)
}
