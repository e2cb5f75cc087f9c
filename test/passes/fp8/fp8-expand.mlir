// RUN: loom-opt %s --loom-fp8-expand -split-input-file -verify-diagnostics | FileCheck %s

// A linear layer's forward: the rows of x [2, 8, 32] and the weight are
// each quantized once (amax, scale, quantize), the FP8 GEMM reads [M, K]
// and [N, K], and its [M, N] result is reshaped back. The new ops take the
// GEMM's stage.
// CHECK-LABEL: func.func @forward
// CHECK: %[[X2:.*]] = nn.reshape %arg0 {pipe.stage = 1 : i64} : tensor<2x8x32xbf16> -> tensor<16x32xbf16>
// CHECK: %[[AX:.*]] = nn.amax %[[X2]] {pipe.stage = 1 : i64} : (tensor<16x32xbf16>) -> tensor<f32>
// CHECK: %[[SX:.*]] = nn.fp8_scale %[[AX]] format = "e4m3" margin = 1 {pipe.stage = 1 : i64} : tensor<f32>
// CHECK: %[[QX:[a-z0-9_]+]] = nn.quantize %[[X2]], %[[SX]] {pipe.stage = 1 : i64} : (tensor<16x32xbf16>, tensor<f32>) -> tensor<16x32xf8E4M3FN>
// CHECK: %[[AW:.*]] = nn.amax %arg1 {pipe.stage = 1 : i64} : (tensor<64x32xbf16>) -> tensor<f32>
// CHECK: %[[SW:.*]] = nn.fp8_scale %[[AW]] format = "e4m3" margin = 1 {pipe.stage = 1 : i64} : tensor<f32>
// CHECK: %[[QW:[a-z0-9_]+]] = nn.quantize %arg1, %[[SW]] {pipe.stage = 1 : i64} : (tensor<64x32xbf16>, tensor<f32>) -> tensor<64x32xf8E4M3FN>
// CHECK: %[[Y:.*]] = nn.scaled_matmul %[[QX]], %[[QW]], %[[SX]], %[[SW]] {pipe.stage = 1 : i64} : (tensor<16x32xf8E4M3FN>, tensor<64x32xf8E4M3FN>, tensor<f32>, tensor<f32>) -> tensor<16x64xbf16>
// CHECK: %[[R:.*]] = nn.reshape %[[Y]] {pipe.stage = 1 : i64} : tensor<16x64xbf16> -> tensor<2x8x64xbf16>
// CHECK: return %[[R]]
func.func @forward(%x: tensor<2x8x32xbf16>, %w: tensor<64x32xbf16>) -> tensor<2x8x64xbf16> {
  %y = nn.matmul %x, %w {transpose_rhs, pipe.stage = 1 : i64, nn.fp8 = #nn.fp8<recipe = tensorwise, format = e4m3, margin = 1>} : (tensor<2x8x32xbf16>, tensor<64x32xbf16>) -> tensor<2x8x64xbf16>
  return %y : tensor<2x8x64xbf16>
}

// -----

// The forward, the data gradient and the weight gradient of one layer:
// x, the weight and the output gradient are each quantized once, with the
// transposed copy the other GEMMs read written by the same nn.quantize;
// under `hybrid` the output gradient is e5m2.
// CHECK-LABEL: func.func @step
// CHECK-DAG: %[[QX:[a-z0-9_]+]], %[[QXT:[a-z0-9_]+]] = nn.quantize {{.*}} -> (tensor<16x32xf8E4M3FN>, tensor<32x16xf8E4M3FN>)
// CHECK-DAG: %[[QW:[a-z0-9_]+]], %[[QWT:[a-z0-9_]+]] = nn.quantize {{.*}} -> (tensor<64x32xf8E4M3FN>, tensor<32x64xf8E4M3FN>)
// CHECK-DAG: %[[QG:[a-z0-9_]+]], %[[QGT:[a-z0-9_]+]] = nn.quantize {{.*}} -> (tensor<16x64xf8E5M2>, tensor<64x16xf8E5M2>)
// CHECK-DAG: nn.scaled_matmul %[[QX]], %[[QW]], {{.*}} -> tensor<16x64xbf16>
// CHECK-DAG: nn.scaled_matmul %[[QG]], %[[QWT]], {{.*}} -> tensor<16x32xbf16>
// CHECK-DAG: nn.scaled_matmul %[[QGT]], %[[QXT]], {{.*}} -> tensor<64x32xbf16>
// CHECK-NOT: nn.matmul
func.func @step(%x: tensor<2x8x32xbf16>, %w: tensor<64x32xbf16>, %dy: tensor<2x8x64xbf16>) -> (tensor<2x8x64xbf16>, tensor<2x8x32xbf16>, tensor<64x32xbf16>) {
  %y = nn.matmul %x, %w {transpose_rhs, nn.fp8 = #nn.fp8<recipe = tensorwise, format = hybrid>} : (tensor<2x8x32xbf16>, tensor<64x32xbf16>) -> tensor<2x8x64xbf16>
  %dx = nn.matmul %dy, %w {nn.fp8 = #nn.fp8<recipe = tensorwise, format = hybrid, gradient = 0>} : (tensor<2x8x64xbf16>, tensor<64x32xbf16>) -> tensor<2x8x32xbf16>
  %x2 = nn.reshape %x : tensor<2x8x32xbf16> -> tensor<16x32xbf16>
  %g2 = nn.reshape %dy : tensor<2x8x64xbf16> -> tensor<16x64xbf16>
  %dw = nn.matmul %g2, %x2 {transpose_lhs, nn.fp8 = #nn.fp8<recipe = tensorwise, format = hybrid, gradient = 0>} : (tensor<16x64xbf16>, tensor<16x32xbf16>) -> tensor<64x32xbf16>
  return %y, %dx, %dw : tensor<2x8x64xbf16>, tensor<2x8x32xbf16>, tensor<64x32xbf16>
}

// -----

// A recipe the expansion does not take yet is an error naming it.
func.func @rowwise(%x: tensor<16x32xbf16>, %w: tensor<64x32xbf16>) -> tensor<16x64xbf16> {
  // expected-error @+1 {{FP8 recipe rowwise is not expanded yet (tensorwise is)}}
  %y = nn.matmul %x, %w {transpose_rhs, nn.fp8 = #nn.fp8<recipe = rowwise, format = e4m3>} : (tensor<16x32xbf16>, tensor<64x32xbf16>) -> tensor<16x64xbf16>
  return %y : tensor<16x64xbf16>
}
