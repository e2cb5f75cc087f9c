// RUN: loom-opt %s --loom-expand-kv-heads="ranks=2" -split-input-file | FileCheck %s

// Multi-query attention (one key/value head) over two tensor-parallel
// ranks: the keys and values are gathered to one head per query head, so
// the attention splits by its query heads.
// CHECK-LABEL: func.func @mqa
// CHECK: %[[I:.*]] = nn.constant dense<0> : tensor<4xi64>
// CHECK: %[[K:.*]] = nn.gather %arg1, %[[I]] axis = 1 : (tensor<2x1x8x8xf32>, tensor<4xi64>) -> tensor<2x4x8x8xf32>
// CHECK: %[[V:.*]] = nn.gather %arg2, %[[I]] axis = 1 : (tensor<2x1x8x8xf32>, tensor<4xi64>) -> tensor<2x4x8x8xf32>
// CHECK: nn.attention %arg0, %[[K]], %[[V]] causal
func.func @mqa(%q: tensor<2x4x8x8xf32>, %k: tensor<2x1x8x8xf32>, %v: tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %o = nn.attention %q, %k, %v causal scale = 0.35 : (tensor<2x4x8x8xf32>, tensor<2x1x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %o : tensor<2x4x8x8xf32>
}

// -----

// Three key/value heads of six query heads: head h reads h / 2.
// CHECK-LABEL: func.func @gqa
// CHECK: nn.constant dense<[0, 0, 1, 1, 2, 2]> : tensor<6xi64>
// CHECK-COUNT-2: nn.gather
func.func @gqa(%q: tensor<1x6x4x8xf32>, %k: tensor<1x3x4x8xf32>, %v: tensor<1x3x4x8xf32>) -> tensor<1x6x4x8xf32> {
  %o = nn.attention %q, %k, %v : (tensor<1x6x4x8xf32>, tensor<1x3x4x8xf32>, tensor<1x3x4x8xf32>) -> tensor<1x6x4x8xf32>
  return %o : tensor<1x6x4x8xf32>
}

// -----

// Key/value heads the ranks divide stay as they are.
// CHECK-LABEL: func.func @divides
// CHECK-NOT: nn.gather
func.func @divides(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x4x4x8xf32> {
  %o = nn.attention %q, %k, %v : (tensor<1x4x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x4x4x8xf32>
  return %o : tensor<1x4x4x8xf32>
}
