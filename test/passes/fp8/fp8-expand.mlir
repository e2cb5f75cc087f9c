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

// rowwise: one scale per row of each operand as its GEMM reads it. The
// transposed copy (read by the weight gradient) gets its own, one per row
// of the copy: the amax over x's columns, laid out as a column.
// CHECK-LABEL: func.func @rowwise
// CHECK-DAG: %[[SX:[0-9]+]] = nn.fp8_scale {{.*}} : tensor<16x1xf32>
// CHECK-DAG: %[[AXT:[0-9]+]] = nn.amax %{{.*}} : (tensor<16x32xbf16>) -> tensor<1x32xf32>
// CHECK-DAG: %[[SXT1:[0-9]+]] = nn.fp8_scale %[[AXT]] format = "e4m3" : tensor<1x32xf32>
// CHECK-DAG: %[[SXT:[0-9]+]] = nn.reshape %[[SXT1]] : tensor<1x32xf32> -> tensor<32x1xf32>
// CHECK-DAG: %[[QX:[a-z0-9_]+]], %[[QXT:[a-z0-9_]+]] = nn.quantize %{{.*}}, %[[SX]], %[[SXT]] : (tensor<16x32xbf16>, tensor<16x1xf32>, tensor<32x1xf32>) -> (tensor<16x32xf8E4M3FN>, tensor<32x16xf8E4M3FN>)
// CHECK-DAG: %[[SW:[0-9]+]] = nn.fp8_scale {{.*}} : tensor<64x1xf32>
// CHECK-DAG: %[[QW:[a-z0-9_]+]], %[[QWT:[a-z0-9_]+]] = nn.quantize {{.*}} : (tensor<64x32xbf16>, tensor<64x1xf32>, tensor<32x1xf32>) -> (tensor<64x32xf8E4M3FN>, tensor<32x64xf8E4M3FN>)
// CHECK-DAG: nn.scaled_matmul %[[QX]], %[[QW]], %[[SX]], %[[SW]] : (tensor<16x32xf8E4M3FN>, tensor<64x32xf8E4M3FN>, tensor<16x1xf32>, tensor<64x1xf32>) -> tensor<16x64xbf16>
// CHECK-DAG: nn.scaled_matmul %[[QGT:[a-z0-9_]+]], %[[QXT]], %{{.*}}, %[[SXT]] : (tensor<64x16xf8E4M3FN>, tensor<32x16xf8E4M3FN>, tensor<64x1xf32>, tensor<32x1xf32>) -> tensor<64x32xbf16>
func.func @rowwise(%x: tensor<16x32xbf16>, %w: tensor<64x32xbf16>, %dy: tensor<16x64xbf16>) -> (tensor<16x64xbf16>, tensor<16x32xbf16>, tensor<64x32xbf16>) {
  %y = nn.matmul %x, %w {transpose_rhs, nn.fp8 = #nn.fp8<recipe = rowwise, format = e4m3>} : (tensor<16x32xbf16>, tensor<64x32xbf16>) -> tensor<16x64xbf16>
  %dx = nn.matmul %dy, %w {nn.fp8 = #nn.fp8<recipe = rowwise, format = e4m3, gradient = 0>} : (tensor<16x64xbf16>, tensor<64x32xbf16>) -> tensor<16x32xbf16>
  %dw = nn.matmul %dy, %x {transpose_lhs, nn.fp8 = #nn.fp8<recipe = rowwise, format = e4m3, gradient = 0>} : (tensor<16x64xbf16>, tensor<16x32xbf16>) -> tensor<64x32xbf16>
  return %y, %dx, %dw : tensor<16x64xbf16>, tensor<16x32xbf16>, tensor<64x32xbf16>
}

// -----

// blockwise (DeepSeek-V3): the weight in 128 x 128 blocks, its transposed
// copy the same blocks transposed; activations and gradients in 1 x 128
// tiles along each GEMM's K, the last tile ragged (K 320 = 128 + 128 + 64;
// 200 tokens in 2 tiles of 128 for the weight gradient's K).
// CHECK-LABEL: func.func @blockwise
// CHECK-DAG: %[[AW:[0-9]+]] = nn.amax %arg1 : (tensor<256x320xbf16>) -> tensor<2x3xf32>
// CHECK-DAG: %[[SW:[0-9]+]] = nn.fp8_scale %[[AW]] format = "e4m3" : tensor<2x3xf32>
// CHECK-DAG: %[[SWT:[0-9]+]] = nn.transpose %[[SW]] permutation = [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
// CHECK-DAG: %[[QW:[a-z0-9_]+]], %[[QWT:[a-z0-9_]+]] = nn.quantize %arg1, %[[SW]], %[[SWT]] : (tensor<256x320xbf16>, tensor<2x3xf32>, tensor<3x2xf32>) -> (tensor<256x320xf8E4M3FN>, tensor<320x256xf8E4M3FN>)
// CHECK-DAG: %[[AX:[0-9]+]] = nn.amax %arg0 : (tensor<200x320xbf16>) -> tensor<200x3xf32>
// CHECK-DAG: %[[AXT:[0-9]+]] = nn.amax %arg0 : (tensor<200x320xbf16>) -> tensor<2x320xf32>
// CHECK-DAG: %[[QX:[a-z0-9_]+]], %[[QXT:[a-z0-9_]+]] = nn.quantize %arg0, %{{.*}}, %{{.*}} : (tensor<200x320xbf16>, tensor<200x3xf32>, tensor<320x2xf32>) -> (tensor<200x320xf8E4M3FN>, tensor<320x200xf8E4M3FN>)
// CHECK-DAG: nn.scaled_matmul %[[QX]], %[[QW]], %{{.*}}, %[[SW]] : (tensor<200x320xf8E4M3FN>, tensor<256x320xf8E4M3FN>, tensor<200x3xf32>, tensor<2x3xf32>) -> tensor<200x256xbf16>
// CHECK-DAG: nn.scaled_matmul %{{.*}}, %[[QWT]], %{{.*}}, %[[SWT]] : (tensor<200x256xf8E4M3FN>, tensor<320x256xf8E4M3FN>, tensor<200x2xf32>, tensor<3x2xf32>) -> tensor<200x320xbf16>
// CHECK-DAG: nn.scaled_matmul %{{.*}}, %[[QXT]], %{{.*}}, %{{.*}} : (tensor<256x200xf8E4M3FN>, tensor<320x200xf8E4M3FN>, tensor<256x2xf32>, tensor<320x2xf32>) -> tensor<256x320xbf16>
func.func @blockwise(%x: tensor<200x320xbf16>, %w: tensor<256x320xbf16>, %dy: tensor<200x256xbf16>) -> (tensor<200x256xbf16>, tensor<200x320xbf16>, tensor<256x320xbf16>) {
  %y = nn.matmul %x, %w {transpose_rhs, nn.fp8 = #nn.fp8<recipe = blockwise, format = e4m3>} : (tensor<200x320xbf16>, tensor<256x320xbf16>) -> tensor<200x256xbf16>
  %dx = nn.matmul %dy, %w {nn.fp8 = #nn.fp8<recipe = blockwise, format = e4m3, gradient = 0>} : (tensor<200x256xbf16>, tensor<256x320xbf16>) -> tensor<200x320xbf16>
  %dw = nn.matmul %dy, %x {transpose_lhs, nn.fp8 = #nn.fp8<recipe = blockwise, format = e4m3, gradient = 0>} : (tensor<200x256xbf16>, tensor<200x320xbf16>) -> tensor<256x320xbf16>
  return %y, %dx, %dw : tensor<200x256xbf16>, tensor<200x320xbf16>, tensor<256x320xbf16>
}

// -----

// tensorwise-delayed: the scale comes from the largest amax of the last 3
// steps, kept in a program-state parameter (frozen, zero-initialized,
// checkpointed); this step's amax serves while the history is all zero,
// then enters the history (newest first) through nn.assign.
// CHECK-LABEL: func.func @delayed
// CHECK: %[[H:[0-9]+]] = nn.parameter "fp8.amax_history.1" frozen : tensor<3xf32>
// CHECK: %[[H0:[0-9]+]] = nn.parameter "fp8.amax_history.0" frozen : tensor<3xf32>
// CHECK: %[[A:[0-9]+]] = nn.amax %arg0 : (tensor<16x32xbf16>) -> tensor<f32>
// CHECK: %[[PAST:[0-9]+]] = nn.reduce_max %[[H0]] dims = [0] : tensor<3xf32> -> tensor<f32>
// CHECK: %[[NONE:[0-9]+]] = nn.compare eq, %[[PAST]], %{{[0-9]+}}
// CHECK: %[[USED:[0-9]+]] = nn.where %[[NONE]], %[[A]], %[[PAST]]
// CHECK: %[[S:[0-9]+]] = nn.fp8_scale %[[USED]] format = "e4m3" margin = 2 : tensor<f32>
// CHECK: %[[NEW:[0-9]+]] = nn.reshape %[[A]] : tensor<f32> -> tensor<1xf32>
// CHECK: %[[KEPT:[0-9]+]] = nn.slice %[[H0]] starts = [0] limits = [2] strides = [1] : tensor<3xf32> -> tensor<2xf32>
// CHECK: %[[NEXT:[0-9]+]] = nn.concat %[[NEW]], %[[KEPT]] dim = 0
// CHECK: nn.assign %[[H0]], %[[NEXT]]
// CHECK: nn.quantize %arg0, %[[S]] : (tensor<16x32xbf16>, tensor<f32>) -> tensor<16x32xf8E4M3FN>
func.func @delayed(%x: tensor<16x32xbf16>, %w: tensor<64x32xbf16>) -> tensor<16x64xbf16> {
  %y = nn.matmul %x, %w {transpose_rhs, nn.fp8 = #nn.fp8<recipe = tensorwise_delayed, format = e4m3, margin = 2, history = 3>} : (tensor<16x32xbf16>, tensor<64x32xbf16>) -> tensor<16x64xbf16>
  return %y : tensor<16x64xbf16>
}

// -----

// tensorwise-delayed in a training step: a tensor read transposed (x by
// the weight gradient, the weight by the data gradient, dy by the weight
// gradient) is quantized once with its transposed copy under the one
// delayed scale, as the GEMMs then read both: no amax of the copy, no
// scale of its own (the CUDA kernel once quantized such a copy with x's
// scale while the GEMM took the copy's own, current-amax scale: the
// gradients off by the ratio of the two amaxes).
// CHECK-LABEL: func.func @delayed_step
// CHECK-DAG: %[[QX:[a-z0-9_]+]], %[[QXT:[a-z0-9_]+]] = nn.quantize %arg0, %[[SX:[0-9]+]] : (tensor<16x32xbf16>, tensor<f32>) -> (tensor<16x32xf8E4M3FN>, tensor<32x16xf8E4M3FN>)
// CHECK-DAG: %[[QW:[a-z0-9_]+]], %[[QWT:[a-z0-9_]+]] = nn.quantize %arg1, %[[SW:[0-9]+]] : (tensor<64x32xbf16>, tensor<f32>) -> (tensor<64x32xf8E4M3FN>, tensor<32x64xf8E4M3FN>)
// CHECK-DAG: %[[QG:[a-z0-9_]+]], %[[QGT:[a-z0-9_]+]] = nn.quantize %arg2, %[[SG:[0-9]+]] : (tensor<16x64xbf16>, tensor<f32>) -> (tensor<16x64xf8E5M2>, tensor<64x16xf8E5M2>)
// CHECK-DAG: nn.scaled_matmul %[[QX]], %[[QW]], %[[SX]], %[[SW]]
// CHECK-DAG: nn.scaled_matmul %[[QG]], %[[QWT]], %[[SG]], %[[SW]]
// CHECK-DAG: nn.scaled_matmul %[[QGT]], %[[QXT]], %[[SG]], %[[SX]]
func.func @delayed_step(%x: tensor<16x32xbf16>, %w: tensor<64x32xbf16>, %dy: tensor<16x64xbf16>) -> (tensor<16x64xbf16>, tensor<16x32xbf16>, tensor<64x32xbf16>) {
  %y = nn.matmul %x, %w {transpose_rhs, nn.fp8 = #nn.fp8<recipe = tensorwise_delayed, format = hybrid, history = 4>} : (tensor<16x32xbf16>, tensor<64x32xbf16>) -> tensor<16x64xbf16>
  %dx = nn.matmul %dy, %w {nn.fp8 = #nn.fp8<recipe = tensorwise_delayed, format = hybrid, history = 4, gradient = 0>} : (tensor<16x64xbf16>, tensor<64x32xbf16>) -> tensor<16x32xbf16>
  %dw = nn.matmul %dy, %x {transpose_lhs, nn.fp8 = #nn.fp8<recipe = tensorwise_delayed, format = hybrid, history = 4, gradient = 0>} : (tensor<16x64xbf16>, tensor<16x32xbf16>) -> tensor<64x32xbf16>
  return %y, %dx, %dw : tensor<16x64xbf16>, tensor<16x32xbf16>, tensor<64x32xbf16>
}
