// RUN: loom-opt %s --loom-cast-compute -split-input-file -verify-diagnostics | FileCheck %s

// Activations narrow to bf16; parameters and arguments stay f32 and are cast
// where read; the result keeps its declared f32 type; integers are untouched.
// CHECK-LABEL: func.func @main
// CHECK: %[[XB:.*]] = nn.cast %arg0 : tensor<2x4xf32> -> tensor<2x4xbf16>
// CHECK: %[[W:.*]] = nn.parameter "w" : tensor<8x4xf32>
// CHECK: %[[WB:.*]] = nn.cast %[[W]] : tensor<8x4xf32> -> tensor<8x4xbf16>
// CHECK: %[[Y:.*]] = nn.matmul %[[XB]], %[[WB]] {transpose_rhs} : (tensor<2x4xbf16>, tensor<8x4xbf16>) -> tensor<2x8xbf16>
// CHECK: %[[S:.*]] = nn.silu %[[Y]] : tensor<2x8xbf16>
// CHECK: %[[I:.*]] = nn.iota dim = 1 : tensor<2x8xi64>
// CHECK: %[[R:.*]] = nn.cast %[[S]] : tensor<2x8xbf16> -> tensor<2x8xf32>
// CHECK: return %[[R]], %[[I]]
func.func @main(%x: tensor<2x4xf32>) -> (tensor<2x8xf32>, tensor<2x8xi64>) {
  %w = nn.parameter "w" : tensor<8x4xf32>
  %y = nn.matmul %x, %w {transpose_rhs} : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  %s = nn.silu %y : tensor<2x8xf32>
  %i = nn.iota dim = 1 : tensor<2x8xi64>
  return %s, %i : tensor<2x8xf32>, tensor<2x8xi64>
}
