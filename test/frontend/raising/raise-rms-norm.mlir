// RUN: loom-opt %s --loom-raise-rms-norm -split-input-file | FileCheck %s

// pow(x, 2), mean over the last dim, + eps, rsqrt, times x, then a [D]
// weight on the left: one nn.rms_norm carrying the weight and epsilon.
// CHECK-LABEL: func.func @pow_rsqrt_weight
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x32xf32>, %[[W:.*]]: tensor<32xf32>)
// CHECK: %[[N:.*]] = nn.rms_norm %[[X]], weight %[[W]] epsilon = 1.000000e-05 : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
// CHECK-NOT: nn.mul
// CHECK-NOT: nn.rsqrt
// CHECK: return %[[N]]
func.func @pow_rsqrt_weight(%x: tensor<2x8x32xf32>, %w: tensor<32xf32>) -> tensor<2x8x32xf32> {
  %two = nn.constant dense<2.0> : tensor<f32>
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %sq = nn.pow %x, %two : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xf32>
  %m = nn.reduce_mean %sq dims = [2] keepdim : tensor<2x8x32xf32> -> tensor<2x8x1xf32>
  %a = nn.add %m, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %r = nn.rsqrt %a : tensor<2x8x1xf32>
  %n = nn.mul %x, %r : (tensor<2x8x32xf32>, tensor<2x8x1xf32>) -> tensor<2x8x32xf32>
  %y = nn.mul %w, %n : (tensor<32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}

// -----

// x * x for the square, reciprocal(sqrt(.)) for the inverse root, and every
// commutative op with its operands swapped (eps + mean, r * x, n * w).
// CHECK-LABEL: func.func @mul_reciprocal_sqrt_swapped
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32>, %[[W:.*]]: tensor<16xf32>)
// CHECK: %[[N:.*]] = nn.rms_norm %[[X]], weight %[[W]] epsilon = 1.000000e-05 :
// CHECK-NOT: nn.reciprocal
// CHECK: return %[[N]]
func.func @mul_reciprocal_sqrt_swapped(%x: tensor<4x16xf32>, %w: tensor<16xf32>) -> tensor<4x16xf32> {
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %sq = nn.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = nn.reduce_mean %sq dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %a = nn.add %eps, %m : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %s = nn.sqrt %a : tensor<4x1xf32>
  %r = nn.reciprocal %s : tensor<4x1xf32>
  %n = nn.mul %r, %x : (tensor<4x1xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %y = nn.mul %n, %w : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// 1 / sqrt(.) written as a division; no weight follows, so none is absorbed.
// epsilon 1e-6 is the op's default and is not printed.
// CHECK-LABEL: func.func @one_over_sqrt_no_weight
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32>)
// CHECK: %[[N:.*]] = nn.rms_norm %[[X]] : (tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NOT: nn.div
// CHECK: return %[[N]]
func.func @one_over_sqrt_no_weight(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %one = nn.constant dense<1.0> : tensor<f32>
  %eps = nn.constant dense<1.0e-06> : tensor<f32>
  %sq = nn.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = nn.reduce_mean %sq dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %a = nn.add %m, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = nn.sqrt %a : tensor<4x1xf32>
  %r = nn.div %one, %s : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = nn.mul %x, %r : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  return %n : tensor<4x16xf32>
}

// -----

// A [1, 1, D] weight is absorbed reshaped to [D]; epsilon 1e-6 written as a
// splat [1] constant.
// CHECK-LABEL: func.func @weight_with_leading_ones
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x32xf32>, %[[W:.*]]: tensor<1x1x32xf32>)
// CHECK: %[[W1:.*]] = nn.reshape %[[W]] : tensor<1x1x32xf32> -> tensor<32xf32>
// CHECK: %[[N:.*]] = nn.rms_norm %[[X]], weight %[[W1]] epsilon = 1.000000e-03 :
// CHECK-NOT: nn.mul
// CHECK: return %[[N]]
func.func @weight_with_leading_ones(%x: tensor<2x8x32xf32>, %w: tensor<1x1x32xf32>) -> tensor<2x8x32xf32> {
  %two = nn.constant dense<2.0> : tensor<f32>
  %eps = nn.constant dense<1.0e-03> : tensor<1xf32>
  %sq = nn.pow %x, %two : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xf32>
  %m = nn.reduce_mean %sq dims = [2] keepdim : tensor<2x8x32xf32> -> tensor<2x8x1xf32>
  %a = nn.add %m, %eps : (tensor<2x8x1xf32>, tensor<1xf32>) -> tensor<2x8x1xf32>
  %r = nn.rsqrt %a : tensor<2x8x1xf32>
  %n = nn.mul %x, %r : (tensor<2x8x32xf32>, tensor<2x8x1xf32>) -> tensor<2x8x32xf32>
  %y = nn.mul %n, %w : (tensor<2x8x32xf32>, tensor<1x1x32xf32>) -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}

// -----

// A weight shaped [S, D] is not a per-feature weight: the norm is raised,
// the multiplication stays.
// CHECK-LABEL: func.func @weight_wrong_shape
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x32xf32>, %[[W:.*]]: tensor<8x32xf32>)
// CHECK: %[[N:.*]] = nn.rms_norm %[[X]] epsilon = 1.000000e-05 : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
// CHECK: %[[Y:.*]] = nn.mul %[[N]], %[[W]]
// CHECK: return %[[Y]]
func.func @weight_wrong_shape(%x: tensor<2x8x32xf32>, %w: tensor<8x32xf32>) -> tensor<2x8x32xf32> {
  %two = nn.constant dense<2.0> : tensor<f32>
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %sq = nn.pow %x, %two : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xf32>
  %m = nn.reduce_mean %sq dims = [2] keepdim : tensor<2x8x32xf32> -> tensor<2x8x1xf32>
  %a = nn.add %m, %eps : (tensor<2x8x1xf32>, tensor<f32>) -> tensor<2x8x1xf32>
  %r = nn.rsqrt %a : tensor<2x8x1xf32>
  %n = nn.mul %x, %r : (tensor<2x8x32xf32>, tensor<2x8x1xf32>) -> tensor<2x8x32xf32>
  %y = nn.mul %n, %w : (tensor<2x8x32xf32>, tensor<8x32xf32>) -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}

// -----

// The normalized value is used twice: the weight is not folded in (the
// other user needs the unweighted norm).
// CHECK-LABEL: func.func @norm_with_two_uses
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32>, %[[W:.*]]: tensor<16xf32>)
// CHECK: %[[N:.*]] = nn.rms_norm %[[X]] epsilon = 1.000000e-05 : (tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK: %[[Y:.*]] = nn.mul %[[N]], %[[W]]
// CHECK: return %[[Y]], %[[N]]
func.func @norm_with_two_uses(%x: tensor<4x16xf32>, %w: tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %sq = nn.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = nn.reduce_mean %sq dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %a = nn.add %m, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %r = nn.rsqrt %a : tensor<4x1xf32>
  %n = nn.mul %x, %r : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %y = nn.mul %n, %w : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return %y, %n : tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// The mean is over a non-last dim: not RMSNorm, nothing is raised.
// CHECK-LABEL: func.func @mean_not_last_dim
// CHECK-NOT: nn.rms_norm
// CHECK: nn.rsqrt
func.func @mean_not_last_dim(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %sq = nn.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = nn.reduce_mean %sq dims = [0] keepdim : tensor<4x16xf32> -> tensor<1x16xf32>
  %a = nn.add %m, %eps : (tensor<1x16xf32>, tensor<f32>) -> tensor<1x16xf32>
  %r = nn.rsqrt %a : tensor<1x16xf32>
  %n = nn.mul %x, %r : (tensor<4x16xf32>, tensor<1x16xf32>) -> tensor<4x16xf32>
  return %n : tensor<4x16xf32>
}

// -----

// pow(x, 3) is not a square: nothing is raised.
// CHECK-LABEL: func.func @cube_not_square
// CHECK-NOT: nn.rms_norm
// CHECK: nn.pow
func.func @cube_not_square(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %three = nn.constant dense<3.0> : tensor<f32>
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %sq = nn.pow %x, %three : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %m = nn.reduce_mean %sq dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %a = nn.add %m, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %r = nn.rsqrt %a : tensor<4x1xf32>
  %n = nn.mul %x, %r : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  return %n : tensor<4x16xf32>
}

// -----

// The statistics are of y, the scaled tensor is x: nothing is raised.
// CHECK-LABEL: func.func @mismatched_operands
// CHECK-NOT: nn.rms_norm
// CHECK: nn.rsqrt
func.func @mismatched_operands(%x: tensor<4x16xf32>, %y: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %sq = nn.mul %y, %y : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = nn.reduce_mean %sq dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %a = nn.add %m, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %r = nn.rsqrt %a : tensor<4x1xf32>
  %n = nn.mul %x, %r : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  return %n : tensor<4x16xf32>
}

// -----

// The added term is not a constant (eps must be a splat constant): nothing
// is raised.
// CHECK-LABEL: func.func @eps_not_constant
// CHECK-NOT: nn.rms_norm
// CHECK: nn.rsqrt
func.func @eps_not_constant(%x: tensor<4x16xf32>, %e: tensor<f32>) -> tensor<4x16xf32> {
  %sq = nn.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = nn.reduce_mean %sq dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %a = nn.add %m, %e : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %r = nn.rsqrt %a : tensor<4x1xf32>
  %n = nn.mul %x, %r : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  return %n : tensor<4x16xf32>
}
