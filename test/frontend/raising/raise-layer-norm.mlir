// RUN: loom-opt %s --loom-raise-layer-norm -split-input-file | FileCheck %s

// GPT-2's decomposition: (x - mean) / sqrt(mean(d * d) + eps), then * w and
// + b: one nn.layer_norm with weight and bias (epsilon 1e-5 is the op's
// default and is not printed).
// CHECK-LABEL: func.func @div_sqrt_weight_bias
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32>, %[[W:.*]]: tensor<16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK: %[[N:.*]] = nn.layer_norm %[[X]], weight %[[W]], bias %[[B]] : (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NOT: nn.reduce_mean
// CHECK-NOT: nn.add
// CHECK: return %[[N]]
func.func @div_sqrt_weight_bias(%x: tensor<4x16xf32>, %w: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %mu = nn.reduce_mean %x dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %d = nn.sub %x, %mu : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %sq = nn.mul %d, %d : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %var = nn.reduce_mean %sq dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %a = nn.add %var, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = nn.sqrt %a : tensor<4x1xf32>
  %n = nn.div %d, %s : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %nw = nn.mul %n, %w : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %nb = nn.add %nw, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return %nb : tensor<4x16xf32>
}

// -----

// pow(d, 2) for the square, rsqrt times d (operands swapped), eps + var,
// w * n and b + n swapped too; a 3-D input.
// CHECK-LABEL: func.func @pow_rsqrt_swapped
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x32xf32>, %[[W:.*]]: tensor<32xf32>, %[[B:.*]]: tensor<32xf32>)
// CHECK: %[[N:.*]] = nn.layer_norm %[[X]], weight %[[W]], bias %[[B]] epsilon = 9.9999999999999995E-7 :
// CHECK-NOT: nn.rsqrt
// CHECK: return %[[N]]
func.func @pow_rsqrt_swapped(%x: tensor<2x8x32xf32>, %w: tensor<32xf32>, %b: tensor<32xf32>) -> tensor<2x8x32xf32> {
  %two = nn.constant dense<2.0> : tensor<f32>
  %eps = nn.constant dense<1.0e-06> : tensor<f32>
  %mu = nn.reduce_mean %x dims = [2] keepdim : tensor<2x8x32xf32> -> tensor<2x8x1xf32>
  %d = nn.sub %x, %mu : (tensor<2x8x32xf32>, tensor<2x8x1xf32>) -> tensor<2x8x32xf32>
  %sq = nn.pow %d, %two : (tensor<2x8x32xf32>, tensor<f32>) -> tensor<2x8x32xf32>
  %var = nn.reduce_mean %sq dims = [2] keepdim : tensor<2x8x32xf32> -> tensor<2x8x1xf32>
  %a = nn.add %eps, %var : (tensor<f32>, tensor<2x8x1xf32>) -> tensor<2x8x1xf32>
  %r = nn.rsqrt %a : tensor<2x8x1xf32>
  %n = nn.mul %r, %d : (tensor<2x8x1xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  %nw = nn.mul %w, %n : (tensor<32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  %nb = nn.add %b, %nw : (tensor<32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  return %nb : tensor<2x8x32xf32>
}

// -----

// No affine: the op has neither weight nor bias (epsilon 1e-5, the
// default, is not printed).
// CHECK-LABEL: func.func @no_affine
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32>)
// CHECK: %[[N:.*]] = nn.layer_norm %[[X]] : (tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK: return %[[N]]
func.func @no_affine(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %mu = nn.reduce_mean %x dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %d = nn.sub %x, %mu : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %sq = nn.mul %d, %d : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %var = nn.reduce_mean %sq dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %a = nn.add %var, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = nn.sqrt %a : tensor<4x1xf32>
  %n = nn.div %d, %s : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  return %n : tensor<4x16xf32>
}

// -----

// Only a bias follows: the op gets a bias and no weight.
// CHECK-LABEL: func.func @bias_only
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK: %[[N:.*]] = nn.layer_norm %[[X]], bias %[[B]] epsilon = 1.000000e-03 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
// CHECK: return %[[N]]
func.func @bias_only(%x: tensor<4x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %eps = nn.constant dense<1.0e-03> : tensor<f32>
  %mu = nn.reduce_mean %x dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %d = nn.sub %x, %mu : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %sq = nn.mul %d, %d : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %var = nn.reduce_mean %sq dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %a = nn.add %var, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = nn.sqrt %a : tensor<4x1xf32>
  %n = nn.div %d, %s : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %nb = nn.add %n, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return %nb : tensor<4x16xf32>
}

// -----

// An existing nn.layer_norm without affine absorbs a [1, D] weight
// (reshaped to [D]) and a bias.
// CHECK-LABEL: func.func @existing_op_absorbs
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32>, %[[W:.*]]: tensor<1x16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK: %[[W1:.*]] = nn.reshape %[[W]] : tensor<1x16xf32> -> tensor<16xf32>
// CHECK: %[[N:.*]] = nn.layer_norm %[[X]], weight %[[W1]], bias %[[B]] epsilon = 1.000000e-03 :
// CHECK-NOT: nn.mul
// CHECK-NOT: nn.add
// CHECK: return %[[N]]
func.func @existing_op_absorbs(%x: tensor<4x16xf32>, %w: tensor<1x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %n = nn.layer_norm %x epsilon = 1.0e-03 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %nw = nn.mul %n, %w : (tensor<4x16xf32>, tensor<1x16xf32>) -> tensor<4x16xf32>
  %nb = nn.add %nw, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return %nb : tensor<4x16xf32>
}

// -----

// A multiplication after the bias is not a weight (it would scale the
// bias too): it stays.
// CHECK-LABEL: func.func @mul_after_bias
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32>, %[[W:.*]]: tensor<16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK: %[[N:.*]] = nn.layer_norm %[[X]], bias %[[B]] :
// CHECK: %[[Y:.*]] = nn.mul %[[N]], %[[W]]
// CHECK: return %[[Y]]
func.func @mul_after_bias(%x: tensor<4x16xf32>, %w: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %n = nn.layer_norm %x : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %nb = nn.add %n, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %y = nn.mul %nb, %w : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// A weight of the wrong shape ([B, D], not [D]) is not absorbed.
// CHECK-LABEL: func.func @weight_wrong_shape
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32>, %[[W:.*]]: tensor<4x16xf32>)
// CHECK: %[[N:.*]] = nn.layer_norm %[[X]] : (tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK: %[[Y:.*]] = nn.mul %[[N]], %[[W]]
// CHECK: return %[[Y]]
func.func @weight_wrong_shape(%x: tensor<4x16xf32>, %w: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %mu = nn.reduce_mean %x dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %d = nn.sub %x, %mu : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %sq = nn.mul %d, %d : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %var = nn.reduce_mean %sq dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %a = nn.add %var, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = nn.sqrt %a : tensor<4x1xf32>
  %n = nn.div %d, %s : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %y = nn.mul %n, %w : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// The mean is over a non-last dim (dims = [0]): not a layer norm.
// CHECK-LABEL: func.func @mean_not_last_dim
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
func.func @mean_not_last_dim(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %mu = nn.reduce_mean %x dims = [0] keepdim : tensor<4x16xf32> -> tensor<1x16xf32>
  %d = nn.sub %x, %mu : (tensor<4x16xf32>, tensor<1x16xf32>) -> tensor<4x16xf32>
  %sq = nn.mul %d, %d : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %var = nn.reduce_mean %sq dims = [0] keepdim : tensor<4x16xf32> -> tensor<1x16xf32>
  %a = nn.add %var, %eps : (tensor<1x16xf32>, tensor<f32>) -> tensor<1x16xf32>
  %s = nn.sqrt %a : tensor<1x16xf32>
  %n = nn.div %d, %s : (tensor<4x16xf32>, tensor<1x16xf32>) -> tensor<4x16xf32>
  return %n : tensor<4x16xf32>
}

// -----

// The variance is of x, not of x - mean: not a layer norm.
// CHECK-LABEL: func.func @variance_of_uncentered
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
func.func @variance_of_uncentered(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %mu = nn.reduce_mean %x dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %d = nn.sub %x, %mu : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %sq = nn.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %var = nn.reduce_mean %sq dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %a = nn.add %var, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = nn.sqrt %a : tensor<4x1xf32>
  %n = nn.div %d, %s : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  return %n : tensor<4x16xf32>
}

// -----

// The mean subtracted is of another tensor y: not a layer norm of x.
// CHECK-LABEL: func.func @mismatched_mean
// CHECK-NOT: nn.layer_norm
// CHECK: nn.sqrt
func.func @mismatched_mean(%x: tensor<4x16xf32>, %y: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %eps = nn.constant dense<1.0e-05> : tensor<f32>
  %mu = nn.reduce_mean %y dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %d = nn.sub %x, %mu : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %sq = nn.mul %d, %d : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %var = nn.reduce_mean %sq dims = [1] keepdim : tensor<4x16xf32> -> tensor<4x1xf32>
  %a = nn.add %var, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = nn.sqrt %a : tensor<4x1xf32>
  %n = nn.div %d, %s : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  return %n : tensor<4x16xf32>
}
