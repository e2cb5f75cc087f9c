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

// -----

// Attention reads the value and writes its output in the projections'
// [B, S, H, D] layout; the backward, which reads the same value and output,
// reads them so too, and takes the output's gradient and writes the value's
// gradient in that layout.
// CHECK-LABEL: func.func @attention_layouts
// CHECK-NOT: nn.transpose
// CHECK: %[[O:.*]], %[[L:.*]] = nn.attention_with_stats %arg0, %arg1, %arg2 causal {seq_major = 12 : i64} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x8x2x16xf32>) -> (tensor<1x8x4x16xf32>, tensor<1x4x8xf32>)
// CHECK: nn.attention_grad_with_stats %arg0, %arg1, %arg2, %[[O]], %[[L]], %arg3 causal {seq_major = 300 : i64} : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x8x2x16xf32>, tensor<1x8x4x16xf32>, tensor<1x4x8xf32>, tensor<1x8x4x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x8x2x16xf32>)
// CHECK-NOT: nn.transpose
func.func @attention_layouts(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>, %vp: tensor<1x8x2x16xf32>, %dyp: tensor<1x8x4x16xf32>)
    -> (tensor<1x8x4x16xf32>, tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x8x2x16xf32>) {
  %v = nn.transpose %vp permutation = [0, 2, 1, 3] : tensor<1x8x2x16xf32> -> tensor<1x2x8x16xf32>
  %o, %lse = nn.attention_with_stats %q, %k, %v causal : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  %y = nn.transpose %o permutation = [0, 2, 1, 3] : tensor<1x4x8x16xf32> -> tensor<1x8x4x16xf32>
  %dy = nn.transpose %dyp permutation = [0, 2, 1, 3] : tensor<1x8x4x16xf32> -> tensor<1x4x8x16xf32>
  %dq, %dk, %dv = nn.attention_grad_with_stats %q, %k, %v, %o, %lse, %dy causal : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>)
  %dvp = nn.transpose %dv permutation = [0, 2, 1, 3] : tensor<1x2x8x16xf32> -> tensor<1x8x2x16xf32>
  return %y, %dq, %dk, %dvp : tensor<1x8x4x16xf32>, tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x8x2x16xf32>
}

// -----

// Left alone: an output also returned as it is (the return cannot take the
// other layout), and the statistics.
// CHECK-LABEL: func.func @attention_kept
// CHECK: nn.attention_with_stats %arg0, %arg1, %arg1 causal :
// CHECK-COUNT-2: nn.transpose
func.func @attention_kept(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>)
    -> (tensor<1x4x8x16xf32>, tensor<1x8x4x16xf32>, tensor<1x8x4xf32>) {
  %o, %lse = nn.attention_with_stats %q, %k, %k causal : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  %y = nn.transpose %o permutation = [0, 2, 1, 3] : tensor<1x4x8x16xf32> -> tensor<1x8x4x16xf32>
  %l = nn.transpose %lse permutation = [0, 2, 1] : tensor<1x4x8xf32> -> tensor<1x8x4xf32>
  return %o, %y, %l : tensor<1x4x8x16xf32>, tensor<1x8x4x16xf32>, tensor<1x8x4xf32>
}
