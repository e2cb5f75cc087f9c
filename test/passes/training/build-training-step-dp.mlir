// RUN: loom-opt %s --loom-build-training-step="batch=8 data-parallel=2" -split-input-file -verify-diagnostics | FileCheck %s

// With two data-parallel ranks, a global batch of 8 and a forward of batch 2
// (four microbatches): the tokens are seen as [dp, microbatch, 1, seq+1], so
// microbatch m is row m of each rank's half of the batch and a split of the
// batch over dp splits every microbatch.
// CHECK-LABEL: func.func @main
// CHECK: %[[B:.*]] = nn.reshape %{{.*}} : tensor<8x5xi64> -> tensor<2x4x1x5xi64>
// CHECK: %[[S:.*]] = nn.slice %[[B]] starts = [0, 0, 0, 0] limits = [2, 1, 1, 4] strides = [1, 1, 1, 1] : tensor<2x4x1x5xi64> -> tensor<2x1x1x4xi64>
// CHECK: nn.reshape %[[S]] : tensor<2x1x1x4xi64> -> tensor<2x4xi64>
// CHECK: nn.slice %[[B]] starts = [0, 3, 0, 1] limits = [2, 4, 1, 5]
func.func @main(%ids: tensor<2x4xi64>) -> tensor<2x4x16xf32> {
  %e = nn.parameter "embed.weight" init(normal, 0.02) : tensor<16x8xf32>
  %w = nn.parameter "head.weight" init(normal, 0.02) : tensor<16x8xf32>
  %h = nn.embedding %e, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %l = nn.matmul %h, %w {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %l : tensor<2x4x16xf32>
}

// -----

// The model's batch must divide over the ranks.
// expected-error @+1 {{the model's batch (1) must be a multiple of the data-parallel ranks (2) to split every microbatch}}
func.func @main(%ids: tensor<1x4xi64>) -> tensor<1x4x16xf32> {
  %e = nn.parameter "embed.weight" init(normal, 0.02) : tensor<16x8xf32>
  %h = nn.embedding %e, %ids : (tensor<16x8xf32>, tensor<1x4xi64>) -> tensor<1x4x8xf32>
  %w = nn.parameter "head.weight" init(normal, 0.02) : tensor<16x8xf32>
  %l = nn.matmul %h, %w {transpose_rhs} : (tensor<1x4x8xf32>, tensor<16x8xf32>) -> tensor<1x4x16xf32>
  return %l : tensor<1x4x16xf32>
}
