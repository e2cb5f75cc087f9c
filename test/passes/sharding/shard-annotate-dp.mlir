// RUN: loom-opt %s --loom-shard-annotate="dp=2 tp=2" -split-input-file -verify-diagnostics | FileCheck %s

// Data parallelism splits the batch argument along dim 0; the mesh lists dp
// before tp (ranks are row-major: tp varies fastest).
// CHECK: module attributes {dist.mesh = #dist.mesh<["dp"=2, "tp"=2]>}
// CHECK-LABEL: func.func @batch
// CHECK-SAME: dist.sharding = #dist.sharding<{{\[}}["dp"], []]>
func.func @batch(%ids: tensor<4x9xi64>, %x: tensor<4x8x32xf32>) -> tensor<4x8x32xf32> {
  %w1 = nn.parameter "w1" : tensor<64x32xf32>
  %w2 = nn.parameter "w2" : tensor<32x64xf32>
  %h = nn.matmul %x, %w1 {transpose_rhs} : (tensor<4x8x32xf32>, tensor<64x32xf32>) -> tensor<4x8x64xf32>
  %y = nn.matmul %h, %w2 {transpose_rhs} : (tensor<4x8x64xf32>, tensor<32x64xf32>) -> tensor<4x8x32xf32>
  return %y : tensor<4x8x32xf32>
}

// -----

// A batch that does not divide by dp.
// expected-error @+1 {{cannot split the batch of 3 sequences (argument 'tensor<3x9xi64>') over dp=2}}
func.func @odd_batch(%ids: tensor<3x9xi64>) -> tensor<3x9xi64> {
  return %ids : tensor<3x9xi64>
}
