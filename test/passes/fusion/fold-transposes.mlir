// RUN: loom-opt %s --loom-fold-transposes --split-input-file | FileCheck %s

// Attention's [B, H, S, D] query from the projection's [B, S, H, D]: rope
// reads the projection itself; the gradient's rope writes [B, S, H, D].
// CHECK-LABEL: func.func @rope_both_ways
// CHECK-NOT: nn.transpose
// CHECK: %[[Q:.*]] = nn.rope %arg0, %arg1, %arg2 transpose = input {loom.microbatch = 0 : i64} : (tensor<1x8x4x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
// CHECK: %[[G:.*]] = nn.rope %arg3, %arg1, %arg2 transpose = result : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x8x4x16xf32>
// CHECK-NOT: nn.transpose
// CHECK: return %[[Q]], %[[G]]
func.func @rope_both_ways(%x: tensor<1x8x4x16xf32>, %cos: tensor<8x16xf32>, %sin: tensor<8x16xf32>, %dq: tensor<1x4x8x16xf32>)
    -> (tensor<1x4x8x16xf32>, tensor<1x8x4x16xf32>) {
  %t = nn.transpose %x permutation = [0, 2, 1, 3] : tensor<1x8x4x16xf32> -> tensor<1x4x8x16xf32>
  %q = nn.rope %t, %cos, %sin {loom.microbatch = 0 : i64} : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %r = nn.rope %dq, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %g = nn.transpose %r permutation = [0, 2, 1, 3] : tensor<1x4x8x16xf32> -> tensor<1x8x4x16xf32>
  return %q, %g : tensor<1x4x8x16xf32>, tensor<1x8x4x16xf32>
}

// -----

// Left alone: a transpose read twice, a rope result read twice, a
// permutation rope cannot do, and a transpose of rope's table.
// CHECK-LABEL: func.func @not_folded
// CHECK-COUNT-4: nn.transpose
// CHECK-NOT: transpose = input
// CHECK-NOT: transpose = result
func.func @not_folded(%x: tensor<1x8x4x16xf32>, %cos: tensor<8x16xf32>, %sin: tensor<8x16xf32>, %y: tensor<4x1x8x16xf32>, %sint: tensor<16x8xf32>)
    -> (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x8x4x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) {
  %t = nn.transpose %x permutation = [0, 2, 1, 3] : tensor<1x8x4x16xf32> -> tensor<1x4x8x16xf32>
  %q = nn.rope %t, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %r = nn.rope %q, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %g = nn.transpose %r permutation = [0, 2, 1, 3] : tensor<1x4x8x16xf32> -> tensor<1x8x4x16xf32>
  %u = nn.transpose %y permutation = [1, 0, 2, 3] : tensor<4x1x8x16xf32> -> tensor<1x4x8x16xf32>
  %v = nn.rope %u, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %st = nn.transpose %sint permutation = [1, 0] : tensor<16x8xf32> -> tensor<8x16xf32>
  %w = nn.rope %q, %cos, %st : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  return %t, %r, %g, %v, %w, %q : tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x8x4x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>
}
