// RUN: loom-opt %s --split-input-file --loom-cast-compute=type=bf16 | FileCheck %s

// Ops whose result precision is their meaning (KeepsResultPrecision) keep
// it: the loss statistics and their combination stay f32 while the logits
// narrow; the pass names none of them.
// CHECK-LABEL: func.func @main
// CHECK: nn.matmul {{.*}} -> tensor<4x8xbf16>
// CHECK: nn.cross_entropy_stats {{.*}} -> tensor<4x3xf32>
// CHECK: nn.cross_entropy_combine {{.*}} -> tensor<f32>
func.func @main(%x: tensor<4x8xf32>, %labels: tensor<4xi64>) -> tensor<f32> {
  %w = nn.parameter "w" : tensor<8x8xf32>
  %logits = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = nn.cross_entropy_stats %logits, %labels : (tensor<4x8xf32>, tensor<4xi64>) -> tensor<4x3xf32>
  %l = nn.cross_entropy_combine %s, %labels : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
