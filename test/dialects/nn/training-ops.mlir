// RUN: loom-opt %s -split-input-file | FileCheck %s
// RUN: loom-opt %s -split-input-file | loom-opt -split-input-file | FileCheck %s
// RUN: loom-opt %s -split-input-file --mlir-print-op-generic | loom-opt -split-input-file | FileCheck %s

// An AdamW update whose results are assigned back to the parameter and its moments.
// CHECK-LABEL: func.func @adamw_step
// CHECK: %[[P:.*]] = nn.parameter "w" : tensor<4x3xf32>
// CHECK: %[[NP:.*]], %[[NM:.*]], %[[NV:.*]] = nn.adamw %[[P]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} beta1 = 9.000000e-01 beta2 = 0.94999999999999996 epsilon = 1.000000e-08 weight_decay = 1.000000e-01 : tensor<4x3xf32>
// CHECK: nn.assign %[[P]], %[[NP]] : tensor<4x3xf32>
// CHECK: nn.assign %{{.*}}, %[[NM]] : tensor<4x3xf32>
func.func @adamw_step(%g: tensor<4x3xf32>, %lr: tensor<f32>, %t: tensor<f32>) {
  %p = nn.parameter "w" : tensor<4x3xf32>
  %m = nn.parameter "w.exp_avg" frozen : tensor<4x3xf32>
  %v = nn.parameter "w.exp_avg_sq" frozen : tensor<4x3xf32>
  %p2, %m2, %v2 = nn.adamw %p, %g, %m, %v, %lr, %t beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-08 weight_decay = 0.1 : tensor<4x3xf32>
  nn.assign %p, %p2 : tensor<4x3xf32>
  nn.assign %m, %m2 : tensor<4x3xf32>
  nn.assign %v, %v2 : tensor<4x3xf32>
  return
}
