// RUN: loom-opt %s --loom-lower-to-rt -split-input-file | FileCheck %s

// AdamW, the parameters' last reader, writes them in place: its outputs are
// the parameter buffers and no copy follows.
// CHECK-LABEL: rt.program @main
// CHECK: %[[P:.*]] = rt.param "w" : memref<4xf32>
// CHECK: %[[M:.*]] = rt.param "w.exp_avg" frozen : memref<4xf32>
// CHECK: %[[V:.*]] = rt.param "w.exp_avg_sq" frozen : memref<4xf32>
// CHECK: rt.kernel "nn.adamw"(%[[P]], %{{.*}}, %[[M]], %[[V]], %{{.*}}, %{{.*}}) -> (%[[P]], %[[M]], %[[V]])
// CHECK-NOT: rt.copy
func.func @main(%g: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<f32>) {
  %p = nn.parameter "w" : tensor<4xf32>
  %m = nn.parameter "w.exp_avg" frozen : tensor<4xf32>
  %v = nn.parameter "w.exp_avg_sq" frozen : tensor<4xf32>
  %p2, %m2, %v2 = nn.adamw %p, %g, %m, %v, %lr, %t beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-08 weight_decay = 0.0 : tensor<4xf32>
  nn.assign %p, %p2 : tensor<4xf32>
  nn.assign %m, %m2 : tensor<4xf32>
  nn.assign %v, %v2 : tensor<4xf32>
  return
}

// -----

// Any other assignment is a copy at the end of the step, after every reader
// of the old value.
// CHECK-LABEL: rt.program @main
// CHECK: %[[P:.*]] = rt.param "counter" frozen : memref<1xf32>
// CHECK: %[[N:.*]] = rt.alloc {{.*}}: memref<1xf32>
// CHECK: rt.kernel "nn.add"(%[[P]], %{{.*}}) -> (%[[N]])
// CHECK: %[[O:.*]] = rt.alloc {{.*}}: memref<1xf32>
// CHECK: rt.kernel "nn.mul"(%[[P]], %{{.*}}) -> (%[[O]])
// CHECK: rt.copy %[[N]] -> %[[P]]
// CHECK: rt.output "output0" %[[O]]
func.func @main(%x: tensor<1xf32>) -> tensor<1xf32> {
  %c = nn.parameter "counter" frozen : tensor<1xf32>
  %n = nn.add %c, %x : (tensor<1xf32>, tensor<1xf32>) -> tensor<1xf32>
  nn.assign %c, %n : tensor<1xf32>
  %o = nn.mul %c, %x : (tensor<1xf32>, tensor<1xf32>) -> tensor<1xf32>
  return %o : tensor<1xf32>
}
