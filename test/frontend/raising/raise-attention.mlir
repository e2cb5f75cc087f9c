// RUN: loom-opt %s --loom-raise-attention -split-input-file | FileCheck %s

// k^T by nn.transpose, scores * 0.125, the additive causal mask with -inf
// ([1, 1, S, S] constant): causal attention with scale 0.125.
// CHECK-LABEL: func.func @causal_additive_inf
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x2x4x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] causal scale = 1.250000e-01 : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NOT: nn.softmax
// CHECK: return %[[O]]
func.func @causal_additive_inf(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = nn.constant dense<0.125> : tensor<f32>
  %ss = nn.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = nn.add %ss, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// No mask; the scores divided by 2.0 (scale 0.5), the mask-less softmax
// feeding the second matmul: non-causal attention.
// CHECK-LABEL: func.func @no_mask_div_scores
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x2x4x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] scale = 5.000000e-01 : (
// CHECK: return %[[O]]
func.func @no_mask_div_scores(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = nn.constant dense<2.0> : tensor<f32>
  %ss = nn.div %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %ss dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Scales on q (* 0.5) and on k^T (* 0.25), k^T by a 3-D reshape,
// transpose and reshape back, and a causal mask with a large negative
// number (-1e9) instead of -inf, mask on the left of the add: scale 0.125.
// CHECK-LABEL: func.func @scaled_q_k_3d_transpose_large_negative
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x2x4x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] causal scale = 1.250000e-01 : (
// CHECK-NOT: nn.transpose
// CHECK: return %[[O]]
func.func @scaled_q_k_3d_transpose_large_negative(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %ch = nn.constant dense<0.5> : tensor<f32>
  %cq = nn.constant dense<0.25> : tensor<f32>
  %qs = nn.mul %q, %ch : (tensor<1x2x4x8xf32>, tensor<f32>) -> tensor<1x2x4x8xf32>
  %k3 = nn.reshape %k : tensor<1x2x4x8xf32> -> tensor<2x4x8xf32>
  %kt3 = nn.transpose %k3 permutation = [0, 2, 1] : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  %kt = nn.reshape %kt3 : tensor<2x8x4xf32> -> tensor<1x2x8x4xf32>
  %kts = nn.mul %cq, %kt : (tensor<f32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  %s = nn.matmul %qs, %kts : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[0.0, -1.0e+09, -1.0e+09, -1.0e+09], [0.0, 0.0, -1.0e+09, -1.0e+09], [0.0, 0.0, 0.0, -1.0e+09], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %a = nn.add %m, %s : (tensor<4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// k used directly by a transpose_rhs matmul, q divided by 4 (scale 0.25),
// and a boolean causal mask applied by nn.where with -inf.
// CHECK-LABEL: func.func @transpose_rhs_where_mask
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x2x4x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] causal scale = 2.500000e-01 : (
// CHECK-NOT: nn.where
// CHECK: return %[[O]]
func.func @transpose_rhs_where_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %c = nn.constant dense<4.0> : tensor<f32>
  %qs = nn.div %q, %c : (tensor<1x2x4x8xf32>, tensor<f32>) -> tensor<1x2x4x8xf32>
  %s = nn.matmul %qs, %k {transpose_rhs} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %w = nn.where %m, %s, %ninf : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %w dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Grouped-query attention: one KV head repeated to two by reshape,
// broadcast and reshape (read back as the single KV head), the causal
// mask, and the NaN guard where(p != p, 0, p) after the softmax.
// CHECK-LABEL: func.func @gqa_nan_guard
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x1x4x8xf32>, %[[V:.*]]: tensor<1x1x4x8xf32>)
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] causal scale = 1.250000e-01 : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NOT: nn.broadcast
// CHECK: return %[[O]]
func.func @gqa_nan_guard(%q: tensor<1x2x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %k5 = nn.reshape %k : tensor<1x1x4x8xf32> -> tensor<1x1x1x4x8xf32>
  %kb = nn.broadcast %k5 : tensor<1x1x1x4x8xf32> -> tensor<1x1x2x4x8xf32>
  %kr = nn.reshape %kb : tensor<1x1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  %v5 = nn.reshape %v : tensor<1x1x4x8xf32> -> tensor<1x1x1x4x8xf32>
  %vb = nn.broadcast %v5 : tensor<1x1x1x4x8xf32> -> tensor<1x1x2x4x8xf32>
  %vr = nn.reshape %vb : tensor<1x1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  %kt = nn.transpose %kr permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = nn.constant dense<0.125> : tensor<f32>
  %ss = nn.mul %c, %s : (tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = nn.add %ss, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %nan = nn.compare ne, %p, %p : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xi1>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %g = nn.where %nan, %zero, %p : (tensor<1x2x4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %g, %vr : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Grouped-query heads repeated and then k^T taken through the 3-D
// reshape/transpose/reshape, as the Llama exporter writes it.
// CHECK-LABEL: func.func @gqa_3d_transpose
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x1x4x8xf32>, %[[V:.*]]: tensor<1x1x4x8xf32>)
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] causal scale = 1.250000e-01 : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK: return %[[O]]
func.func @gqa_3d_transpose(%q: tensor<1x2x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %k5 = nn.reshape %k : tensor<1x1x4x8xf32> -> tensor<1x1x1x4x8xf32>
  %kb = nn.broadcast %k5 : tensor<1x1x1x4x8xf32> -> tensor<1x1x2x4x8xf32>
  %kr = nn.reshape %kb : tensor<1x1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  %v5 = nn.reshape %v : tensor<1x1x4x8xf32> -> tensor<1x1x1x4x8xf32>
  %vb = nn.broadcast %v5 : tensor<1x1x1x4x8xf32> -> tensor<1x1x2x4x8xf32>
  %vr = nn.reshape %vb : tensor<1x1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  %k3 = nn.reshape %kr : tensor<1x2x4x8xf32> -> tensor<2x4x8xf32>
  %kt3 = nn.transpose %k3 permutation = [0, 2, 1] : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
  %kt = nn.reshape %kt3 : tensor<2x8x4xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = nn.constant dense<0.125> : tensor<f32>
  %ss = nn.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = nn.add %ss, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %vr : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// An all-zero additive mask hides nothing: non-causal attention, the
// mask dropped; no scale factor gives scale 1.
// CHECK-LABEL: func.func @zero_mask
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x2x4x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] scale = 1.000000e+00 : (
// CHECK: return %[[O]]
func.func @zero_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<0.0> : tensor<1x1x4x4xf32>
  %a = nn.add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A constant mask that is neither causal nor empty (the upper triangle
// visible instead of the lower): not raised.
// CHECK-LABEL: func.func @non_causal_mask
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
func.func @non_causal_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[[[0.0, 0.0, 0.0, 0.0], [0xFF800000, 0.0, 0.0, 0.0], [0xFF800000, 0xFF800000, 0.0, 0.0], [0xFF800000, 0xFF800000, 0xFF800000, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = nn.add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// The mask is a function input, not a constant: not raised.
// CHECK-LABEL: func.func @mask_is_input
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
func.func @mask_is_input(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %m: tensor<1x1x4x4xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %a = nn.add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Masked entries of -1.0 do not vanish under softmax: not a causal mask,
// not raised.
// CHECK-LABEL: func.func @mask_small_negative
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
func.func @mask_small_negative(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[[[0.0, -1.0, -1.0, -1.0], [0.0, 0.0, -1.0, -1.0], [0.0, 0.0, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = nn.add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A [S, 1] mask whose entries follow the causal pattern for Skv = 1 hides
// whole rows once broadcast to [S, S]: not causal, not raised.
// CHECK-LABEL: func.func @mask_broadcast_rows
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
func.func @mask_broadcast_rows(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[0xFF800000], [0xFF800000], [0xFF800000], [0.0]]> : tensor<4x1xf32>
  %a = nn.add %s, %m : (tensor<1x2x4x4xf32>, tensor<4x1xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A boolean mask whose fill is 0, not a large negative number: not raised.
// CHECK-LABEL: func.func @where_fill_zero
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
func.func @where_fill_zero(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = nn.matmul %q, %k {transpose_rhs} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %w = nn.where %m, %s, %zero : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %w dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// The softmax is over the query dim (2), not the key dim: not raised.
// CHECK-LABEL: func.func @softmax_wrong_dim
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
func.func @softmax_wrong_dim(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %s dim = 2 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// The scores' rhs is a [B, H, D, S] input, not a transpose of some k:
// there is no k to give nn.attention, not raised.
// CHECK-LABEL: func.func @rhs_not_transposed_key
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
func.func @rhs_not_transposed_key(%q: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %s dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A negative scale (scores * -0.125) is not raised.
// CHECK-LABEL: func.func @negative_scale
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
func.func @negative_scale(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = nn.constant dense<-0.125> : tensor<f32>
  %ss = nn.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %ss dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// SDPA's safe softmax as a decomposed export spells it: where(the row is
// -inf throughout, 0, softmax). Under a causal mask every row keeps a
// finite score, so the guard always takes the softmax: causal attention.
// CHECK-LABEL: func.func @safe_softmax_causal
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x2x4x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] causal scale = 1.250000e-01 : (
// CHECK: return %[[O]]
func.func @safe_softmax_causal(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = nn.constant dense<0.125> : tensor<f32>
  %ss = nn.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = nn.add %ss, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %false = nn.constant dense<false> : tensor<i1>
  %zero = nn.constant dense<0> : tensor<i32>
  %zeros = nn.constant dense<0.0> : tensor<1x2x4x4xf32>
  %isinf = nn.compare eq, %a, %ninf : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xi1>
  %finite = nn.compare eq, %isinf, %false : (tensor<1x2x4x4xi1>, tensor<i1>) -> tensor<1x2x4x4xi1>
  %fi = nn.cast %finite : tensor<1x2x4x4xi1> -> tensor<1x2x4x4xi32>
  %nz = nn.compare ne, %fi, %zero : (tensor<1x2x4x4xi32>, tensor<i32>) -> tensor<1x2x4x4xi1>
  %nzi = nn.cast %nz : tensor<1x2x4x4xi1> -> tensor<1x2x4x4xi32>
  %any = nn.reduce_max %nzi dims = [3] keepdim : tensor<1x2x4x4xi32> -> tensor<1x2x4x1xi32>
  %anyb = nn.compare ne, %any, %zero : (tensor<1x2x4x1xi32>, tensor<i32>) -> tensor<1x2x4x1xi1>
  %none = nn.compare eq, %anyb, %false : (tensor<1x2x4x1xi1>, tensor<i1>) -> tensor<1x2x4x1xi1>
  %safe = nn.where %none, %zeros, %p : (tensor<1x2x4x1xi1>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %safe, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A guard that zeroes rows holding any -inf (not a safe softmax: under a
// causal mask it zeroes all but the last row) stays.
// CHECK-LABEL: func.func @guard_changes_rows
// CHECK-NOT: nn.attention
// CHECK: nn.where
func.func @guard_changes_rows(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = nn.add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %zero = nn.constant dense<0> : tensor<i32>
  %zeros = nn.constant dense<0.0> : tensor<1x2x4x4xf32>
  %isinf = nn.compare eq, %a, %ninf : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xi1>
  %ii = nn.cast %isinf : tensor<1x2x4x4xi1> -> tensor<1x2x4x4xi32>
  %any = nn.reduce_max %ii dims = [3] keepdim : tensor<1x2x4x4xi32> -> tensor<1x2x4x1xi32>
  %anyb = nn.compare ne, %any, %zero : (tensor<1x2x4x1xi32>, tensor<i32>) -> tensor<1x2x4x1xi1>
  %g = nn.where %anyb, %zeros, %p : (tensor<1x2x4x1xi1>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %g, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A guard whose condition depends on the scores' finite values (here
// score > 0) cannot be decided and stays.
// CHECK-LABEL: func.func @guard_on_values
// CHECK-NOT: nn.attention
// CHECK: nn.where
func.func @guard_on_values(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %s dim = 3 : tensor<1x2x4x4xf32>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %zeros = nn.constant dense<0.0> : tensor<1x2x4x4xf32>
  %pos = nn.compare gt, %s, %zero : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xi1>
  %g = nn.where %pos, %zeros, %p : (tensor<1x2x4x4xi1>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %g, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// GPT-2's keys: [B, S, H, D] transposed by [0, 2, 3, 1] (the head split
// and k^T in one transpose). k is the [0, 2, 1, 3] transpose.
// CHECK-LABEL: func.func @key_transpose_composed
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x4x2x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK: %[[KH:.*]] = nn.transpose %[[K]] permutation = [0, 2, 1, 3] : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[KH]], %[[V]] causal scale = 5.000000e-01 : (
// CHECK: return %[[O]]
func.func @key_transpose_composed(%q: tensor<1x2x4x8xf32>, %k: tensor<1x4x2x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 2, 3, 1] : tensor<1x4x2x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = nn.constant dense<0.5> : tensor<f32>
  %ss = nn.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[[[0.0, -3.4e38, -3.4e38, -3.4e38], [0.0, 0.0, -3.4e38, -3.4e38], [0.0, 0.0, 0.0, -3.4e38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = nn.add %ss, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A bf16 model's eager attention takes the softmax in f32 and casts the
// probabilities back (softmax(s, dtype=float32).to(bf16)): attention in
// bf16, whose softmax statistics are f32 anyway.
// CHECK-LABEL: func.func @bf16_softmax_in_f32
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xbf16>, %[[K:.*]]: tensor<1x2x4x8xbf16>, %[[V:.*]]: tensor<1x2x4x8xbf16>)
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] causal scale = 1.250000e-01 : (
// CHECK-NOT: nn.softmax
// CHECK: return %[[O]]
func.func @bf16_softmax_in_f32(%q: tensor<1x2x4x8xbf16>, %k: tensor<1x2x4x8xbf16>, %v: tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xbf16> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xbf16> -> tensor<1x2x8x4xbf16>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xbf16>, tensor<1x2x8x4xbf16>) -> tensor<1x2x4x4xbf16>
  %c = nn.constant dense<0.125> : tensor<bf16>
  %ss = nn.mul %s, %c : (tensor<1x2x4x4xbf16>, tensor<bf16>) -> tensor<1x2x4x4xbf16>
  %m = nn.constant dense<[[[[0.0, 0xFF80, 0xFF80, 0xFF80], [0.0, 0.0, 0xFF80, 0xFF80], [0.0, 0.0, 0.0, 0xFF80], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xbf16>
  %a = nn.add %ss, %m : (tensor<1x2x4x4xbf16>, tensor<1x1x4x4xbf16>) -> tensor<1x2x4x4xbf16>
  %w = nn.cast %a : tensor<1x2x4x4xbf16> -> tensor<1x2x4x4xf32>
  %p = nn.softmax %w dim = 3 : tensor<1x2x4x4xf32>
  %pb = nn.cast %p : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xbf16>
  %o = nn.matmul %pb, %v : (tensor<1x2x4x4xbf16>, tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xbf16>
  return %o : tensor<1x2x4x8xbf16>
}

// -----

// Probabilities narrowed to another type than the scores' stay.
// CHECK-LABEL: func.func @softmax_cast_to_other_type
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
func.func @softmax_cast_to_other_type(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xbf16> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %s dim = 3 : tensor<1x2x4x4xf32>
  %pb = nn.cast %p : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xbf16>
  %o = nn.matmul %pb, %v : (tensor<1x2x4x4xbf16>, tensor<1x2x4x8xbf16>) -> tensor<1x2x4x8xbf16>
  return %o : tensor<1x2x4x8xbf16>
}

// -----

// A causal mask that also hides the keys 2 or more before each query's own
// (a sliding window of 2, as Mistral's): causal attention with window 2.
// CHECK-LABEL: func.func @sliding_window
// CHECK: nn.attention %{{.*}}, %{{.*}}, %{{.*}} causal window = 2 scale = 1.250000e-01 : (
// CHECK-NOT: nn.softmax
func.func @sliding_window(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = nn.constant dense<0.125> : tensor<f32>
  %ss = nn.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0xFF800000, 0.0, 0.0, 0xFF800000], [0xFF800000, 0xFF800000, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = nn.add %ss, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A band whose width changes from row to row is not a sliding window: it
// stays.
// CHECK-LABEL: func.func @uneven_band
// CHECK-NOT: nn.attention
// CHECK: nn.softmax
func.func @uneven_band(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %m = nn.constant dense<[[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0xFF800000, 0xFF800000, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = nn.add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %a dim = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}
