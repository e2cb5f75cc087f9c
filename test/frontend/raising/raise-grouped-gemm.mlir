// RUN: loom-opt %s --loom-raise-grouped-gemm -split-input-file | FileCheck %s

// Each row's expert weights picked from the stack and multiplied row by row
// (transformers' batched_mm experts) become one grouped GEMM over the rows
// sorted by expert; the picked [R, N, K] weights are never built.
// CHECK-LABEL: func.func @batched
// CHECK-NOT: tensor<6x5x3xf32>
// CHECK: %[[V:.*]], %[[P:.*]] = nn.sort %[[IDS:.*]] : (tensor<6xi64>) -> (tensor<6xi64>, tensor<6xi64>)
// CHECK: %[[X:.*]] = nn.gather %{{.*}}, %[[P]] axis = 0 : (tensor<6x3xf32>, tensor<6xi64>) -> tensor<6x3xf32>
// CHECK: nn.compare le
// CHECK: %[[O:.*]] = nn.cast %{{.*}} : tensor<4xi64> -> tensor<4xi32>
// The stack is [E, N, K]: the GEMM reads it transposed, in place.
// CHECK-NOT: nn.transpose
// CHECK: %[[G:.*]] = nn.grouped_matmul %[[X]], %arg0, %[[O]] {transpose_weight}
// CHECK: %{{.*}}, %[[INV:.*]] = nn.sort %[[P]]
// CHECK: nn.gather %[[G]], %[[INV]] axis = 0 : (tensor<6x5xf32>, tensor<6xi64>) -> tensor<6x5xf32>
func.func @batched(%w: tensor<4x5x3xf32>, %ids: tensor<6xi64>, %x: tensor<6x3x1xf32>) -> tensor<6x5x1xf32> {
  %p = nn.gather %w, %ids axis = 0 : (tensor<4x5x3xf32>, tensor<6xi64>) -> tensor<6x5x3xf32>
  %y = nn.matmul %p, %x : (tensor<6x5x3xf32>, tensor<6x3x1xf32>) -> tensor<6x5x1xf32>
  return %y : tensor<6x5x1xf32>
}

// -----

// Rows times the picked weights transposed: the same GEMM.
// CHECK-LABEL: func.func @rows_first
// CHECK: nn.grouped_matmul
// CHECK-NOT: nn.matmul
func.func @rows_first(%w: tensor<4x5x3xf32>, %ids: tensor<6xi64>, %x: tensor<6x1x3xf32>) -> tensor<6x1x5xf32> {
  %p = nn.gather %w, %ids axis = 0 : (tensor<4x5x3xf32>, tensor<6xi64>) -> tensor<6x5x3xf32>
  %y = nn.matmul %x, %p {transpose_rhs} : (tensor<6x1x3xf32>, tensor<6x5x3xf32>) -> tensor<6x1x5xf32>
  return %y : tensor<6x1x5xf32>
}

// -----

// A batched GEMM of gathered matrices that are not per-row vectors stays.
// CHECK-LABEL: func.func @not_rows
// CHECK-NOT: nn.grouped_matmul
// CHECK: nn.matmul
func.func @not_rows(%w: tensor<4x5x3xf32>, %ids: tensor<6xi64>, %x: tensor<6x3x2xf32>) -> tensor<6x5x2xf32> {
  %p = nn.gather %w, %ids axis = 0 : (tensor<4x5x3xf32>, tensor<6xi64>) -> tensor<6x5x3xf32>
  %y = nn.matmul %p, %x : (tensor<6x5x3xf32>, tensor<6x3x2xf32>) -> tensor<6x5x2xf32>
  return %y : tensor<6x5x2xf32>
}

// -----

// Rows times weights picked from a stack stored [E, K, N] (gpt-oss's
// experts, as the TorchScript ONNX exporter writes them): the stack is the
// grouped GEMM's weight as it is.
// CHECK-LABEL: func.func @stack_k_major
// CHECK-NOT: tensor<6x3x5xf32>
// CHECK: %[[G:.*]] = nn.grouped_matmul %{{.*}}, %arg0, %{{.*}} : (tensor<6x3xf32>, tensor<4x3x5xf32>, tensor<4xi32>) -> tensor<6x5xf32>
// CHECK-NOT: nn.matmul
func.func @stack_k_major(%w: tensor<4x3x5xf32>, %ids: tensor<6xi64>, %x: tensor<6x1x3xf32>) -> tensor<6x1x5xf32> {
  %p = nn.gather %w, %ids axis = 0 : (tensor<4x3x5xf32>, tensor<6xi64>) -> tensor<6x3x5xf32>
  %y = nn.matmul %x, %p : (tensor<6x1x3xf32>, tensor<6x3x5xf32>) -> tensor<6x1x5xf32>
  return %y : tensor<6x1x5xf32>
}
