// RUN: loom-opt %s --canonicalize -split-input-file | FileCheck %s

// The nn folders, and what they must leave alone.

// Two transposes whose permutations compose to the identity disappear.
// CHECK-LABEL: func.func @transpose_transpose_identity
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NOT: nn.transpose
// CHECK: return %[[X]]
func.func @transpose_transpose_identity(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = nn.transpose %x permutation = [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  %1 = nn.transpose %0 permutation = [1, 2, 0] : tensor<4x2x3xf32> -> tensor<2x3x4xf32>
  return %1 : tensor<2x3x4xf32>
}

// -----

// Two transposes compose into one: result dim i is x's dim p1[p2[i]].
// CHECK-LABEL: func.func @transpose_transpose_compose
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK: %[[T:.*]] = nn.transpose %[[X]] permutation = [2, 1, 0] : tensor<2x3x4xf32> -> tensor<4x3x2xf32>
// CHECK-NOT: nn.transpose
// CHECK: return %[[T]]
func.func @transpose_transpose_compose(%x: tensor<2x3x4xf32>) -> tensor<4x3x2xf32> {
  %0 = nn.transpose %x permutation = [1, 0, 2] : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  %1 = nn.transpose %0 permutation = [2, 0, 1] : tensor<3x2x4xf32> -> tensor<4x3x2xf32>
  return %1 : tensor<4x3x2xf32>
}

// -----

// Three transposes compose into one.
// CHECK-LABEL: func.func @transpose_chain
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK: %[[T:.*]] = nn.transpose %[[X]] permutation = [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
// CHECK-NOT: nn.transpose
// CHECK: return %[[T]]
func.func @transpose_chain(%x: tensor<2x3x4xf32>) -> tensor<3x4x2xf32> {
  %0 = nn.transpose %x permutation = [1, 0, 2] : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  %1 = nn.transpose %0 permutation = [0, 2, 1] : tensor<3x2x4xf32> -> tensor<3x4x2xf32>
  %2 = nn.transpose %1 permutation = [0, 1, 2] : tensor<3x4x2xf32> -> tensor<3x4x2xf32>
  return %2 : tensor<3x4x2xf32>
}

// -----

// The identity transpose folds away.
// CHECK-LABEL: func.func @transpose_identity
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NOT: nn.transpose
// CHECK: return %[[X]]
func.func @transpose_identity(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = nn.transpose %x permutation = [0, 1] : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// A non-identity transpose stays, even when it keeps the type (equal dims).
// CHECK-LABEL: func.func @transpose_square_kept
// CHECK: nn.transpose %{{.*}} permutation = [1, 0] : tensor<3x3xf32> -> tensor<3x3xf32>
func.func @transpose_square_kept(%x: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0 = nn.transpose %x permutation = [1, 0] : tensor<3x3xf32> -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

// A reshape to the same type folds away.
// CHECK-LABEL: func.func @reshape_same
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NOT: nn.reshape
// CHECK: return %[[X]]
func.func @reshape_same(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = nn.reshape %x : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// Two reshapes are one.
// CHECK-LABEL: func.func @reshape_reshape
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK: %[[R:.*]] = nn.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<4x6xf32>
// CHECK-NOT: nn.reshape
// CHECK: return %[[R]]
func.func @reshape_reshape(%x: tensor<2x3x4xf32>) -> tensor<4x6xf32> {
  %0 = nn.reshape %x : tensor<2x3x4xf32> -> tensor<24xf32>
  %1 = nn.reshape %0 : tensor<24xf32> -> tensor<4x6xf32>
  return %1 : tensor<4x6xf32>
}

// -----

// Reshapes that return to the input's shape disappear.
// CHECK-LABEL: func.func @reshape_roundtrip
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NOT: nn.reshape
// CHECK: return %[[X]]
func.func @reshape_roundtrip(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = nn.reshape %x : tensor<2x3xf32> -> tensor<6xf32>
  %1 = nn.reshape %0 : tensor<6xf32> -> tensor<2x3xf32>
  return %1 : tensor<2x3xf32>
}

// -----

// A reshape of a constant is a constant.
// CHECK-LABEL: func.func @reshape_constant
// CHECK: %[[C:.*]] = nn.constant dense<{{\[}}[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
// CHECK-NOT: nn.reshape
// CHECK: return %[[C]]
func.func @reshape_constant() -> tensor<2x3xi64> {
  %0 = nn.constant dense<[1, 2, 3, 4, 5, 6]> : tensor<6xi64>
  %1 = nn.reshape %0 : tensor<6xi64> -> tensor<2x3xi64>
  return %1 : tensor<2x3xi64>
}

// -----

// A reshape that changes the shape stays.
// CHECK-LABEL: func.func @reshape_kept
// CHECK: nn.reshape %{{.*}} : tensor<2x3xf32> -> tensor<3x2xf32>
func.func @reshape_kept(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = nn.reshape %x : tensor<2x3xf32> -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

// A cast to the same type folds away.
// CHECK-LABEL: func.func @cast_same
// CHECK-SAME: (%[[X:.*]]: tensor<4xbf16>)
// CHECK-NOT: nn.cast
// CHECK: return %[[X]]
func.func @cast_same(%x: tensor<4xbf16>) -> tensor<4xbf16> {
  %0 = nn.cast %x : tensor<4xbf16> -> tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

// -----

// A real conversion stays, and so does a round trip through a narrower type
// (it rounds).
// CHECK-LABEL: func.func @cast_kept
// CHECK: %[[A:.*]] = nn.cast %{{.*}} : tensor<4xf32> -> tensor<4xbf16>
// CHECK: %[[B:.*]] = nn.cast %[[A]] : tensor<4xbf16> -> tensor<4xf32>
// CHECK: return %[[B]]
func.func @cast_kept(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = nn.cast %x : tensor<4xf32> -> tensor<4xbf16>
  %1 = nn.cast %0 : tensor<4xbf16> -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// A broadcast to the input's own shape folds away.
// CHECK-LABEL: func.func @broadcast_same
// CHECK-SAME: (%[[X:.*]]: tensor<4x1xf32>)
// CHECK-NOT: nn.broadcast
// CHECK: return %[[X]]
func.func @broadcast_same(%x: tensor<4x1xf32>) -> tensor<4x1xf32> {
  %0 = nn.broadcast %x : tensor<4x1xf32> -> tensor<4x1xf32>
  return %0 : tensor<4x1xf32>
}

// -----

// A broadcast of a splat constant is a bigger splat constant.
// CHECK-LABEL: func.func @broadcast_splat
// CHECK: %[[C:.*]] = nn.constant dense<2.500000e+00> : tensor<2x4x8xf32>
// CHECK-NOT: nn.broadcast
// CHECK: return %[[C]]
func.func @broadcast_splat() -> tensor<2x4x8xf32> {
  %0 = nn.constant dense<2.5> : tensor<4x1xf32>
  %1 = nn.broadcast %0 : tensor<4x1xf32> -> tensor<2x4x8xf32>
  return %1 : tensor<2x4x8xf32>
}

// -----

// A broadcast of a non-splat constant stays.
// CHECK-LABEL: func.func @broadcast_nonsplat_kept
// CHECK: %[[C:.*]] = nn.constant dense<[1, 2]> : tensor<2xi32>
// CHECK: nn.broadcast %[[C]] : tensor<2xi32> -> tensor<3x2xi32>
func.func @broadcast_nonsplat_kept() -> tensor<3x2xi32> {
  %0 = nn.constant dense<[1, 2]> : tensor<2xi32>
  %1 = nn.broadcast %0 : tensor<2xi32> -> tensor<3x2xi32>
  return %1 : tensor<3x2xi32>
}

// -----

// A slice of everything with unit strides folds away.
// CHECK-LABEL: func.func @slice_full
// CHECK-SAME: (%[[X:.*]]: tensor<8x16xf32>)
// CHECK-NOT: nn.slice
// CHECK: return %[[X]]
func.func @slice_full(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = nn.slice %x starts = [0, 0] limits = [8, 16] strides = [1, 1] : tensor<8x16xf32> -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// A strided slice does not fold even when it keeps the type (a stride of 2
// over a size-1 dim): only all-unit-stride full slices fold.
// CHECK-LABEL: func.func @slice_strided_kept
// CHECK: nn.slice %{{.*}} starts = [0, 0] limits = [1, 16] strides = [2, 1] : tensor<1x16xf32> -> tensor<1x16xf32>
func.func @slice_strided_kept(%x: tensor<1x16xf32>) -> tensor<1x16xf32> {
  %0 = nn.slice %x starts = [0, 0] limits = [1, 16] strides = [2, 1] : tensor<1x16xf32> -> tensor<1x16xf32>
  return %0 : tensor<1x16xf32>
}

// -----

// A partial slice stays.
// CHECK-LABEL: func.func @slice_partial_kept
// CHECK: nn.slice %{{.*}} starts = [0, 4] limits = [8, 12] strides = [1, 1]
func.func @slice_partial_kept(%x: tensor<8x16xf32>) -> tensor<8x8xf32> {
  %0 = nn.slice %x starts = [0, 4] limits = [8, 12] strides = [1, 1] : tensor<8x16xf32> -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// A concat of one input is that input.
// CHECK-LABEL: func.func @concat_single
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NOT: nn.concat
// CHECK: return %[[X]]
func.func @concat_single(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = nn.concat %x dim = 1 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// A concat of two inputs stays.
// CHECK-LABEL: func.func @concat_kept
// CHECK: nn.concat %{{.*}}, %{{.*}} dim = 0
func.func @concat_kept(%x: tensor<2x3xf32>) -> tensor<4x3xf32> {
  %0 = nn.concat %x, %x dim = 0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// Dropout with p = 0 is the identity.
// CHECK-LABEL: func.func @dropout_zero
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NOT: nn.dropout
// CHECK: return %[[X]]
func.func @dropout_zero(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = nn.dropout %x p = 0.0 seed = 7 : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Dropout with p > 0 stays.
// CHECK-LABEL: func.func @dropout_kept
// CHECK: nn.dropout %{{.*}} p = 1.000000e-01 seed = 7
func.func @dropout_kept(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = nn.dropout %x p = 0.1 seed = 7 : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Reductions over no dims are the identity, keepdim or not.
// CHECK-LABEL: func.func @reduce_empty_dims
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>, %[[I:.*]]: tensor<4xi64>)
// CHECK-NOT: nn.reduce
// CHECK: return %[[X]], %[[X]], %[[I]]
func.func @reduce_empty_dims(%x: tensor<2x3xf32>, %i: tensor<4xi64>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<4xi64>) {
  %0 = nn.reduce_sum %x dims = [] : tensor<2x3xf32> -> tensor<2x3xf32>
  %1 = nn.reduce_mean %x dims = [] keepdim : tensor<2x3xf32> -> tensor<2x3xf32>
  %2 = nn.reduce_max %i dims = [] : tensor<4xi64> -> tensor<4xi64>
  return %0, %1, %2 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<4xi64>
}

// -----

// A reduction over a dim stays, even a size-1 dim with keepdim.
// CHECK-LABEL: func.func @reduce_kept
// CHECK: nn.reduce_sum %{{.*}} dims = [1]
// CHECK: nn.reduce_max %{{.*}} dims = [0] keepdim
func.func @reduce_kept(%x: tensor<2x3xf32>, %y: tensor<1x3xf32>) -> (tensor<2xf32>, tensor<1x3xf32>) {
  %0 = nn.reduce_sum %x dims = [1] : tensor<2x3xf32> -> tensor<2xf32>
  %1 = nn.reduce_max %y dims = [0] keepdim : tensor<1x3xf32> -> tensor<1x3xf32>
  return %0, %1 : tensor<2xf32>, tensor<1x3xf32>
}

// -----

// Equal constants are deduplicated and hoisted; unused ones are erased.
// CHECK-LABEL: func.func @constant_cse
// CHECK: %[[C:.*]] = nn.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK-NOT: nn.constant
// CHECK: nn.add %[[C]], %[[C]]
func.func @constant_cse() -> tensor<4xf32> {
  %0 = nn.constant dense<1.0> : tensor<4xf32>
  %1 = nn.constant dense<1.0> : tensor<4xf32>
  %2 = nn.constant dense<2.0> : tensor<4xf32>
  %3 = nn.add %0, %1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %3 : tensor<4xf32>
}

// -----

// Folding through a chain: reshape, no-op transpose and cast of a constant
// leave a single constant of the final type.
// CHECK-LABEL: func.func @fold_chain
// CHECK: %[[C:.*]] = nn.constant dense<3> : tensor<2x2xi32>
// CHECK-NEXT: return %[[C]]
func.func @fold_chain() -> tensor<2x2xi32> {
  %0 = nn.constant dense<3> : tensor<4xi32>
  %1 = nn.reshape %0 : tensor<4xi32> -> tensor<2x2xi32>
  %2 = nn.transpose %1 permutation = [0, 1] : tensor<2x2xi32> -> tensor<2x2xi32>
  %3 = nn.cast %2 : tensor<2x2xi32> -> tensor<2x2xi32>
  return %3 : tensor<2x2xi32>
}

// -----

// Parameters are not constants: equal parameters are distinct values.
// CHECK-LABEL: func.func @parameters_not_merged
// CHECK: nn.parameter "a"
// CHECK: nn.parameter "b"
func.func @parameters_not_merged() -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = nn.parameter "a" : tensor<4xf32>
  %1 = nn.parameter "b" : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// The transposed weight gradient of a grouped GEMM is the weight gradient
// with its operands swapped, its attributes kept.
// CHECK-LABEL: func.func @transpose_grouped_weight_grad
// CHECK-SAME: (%[[X:.*]]: tensor<96x32xf32>, %[[G:.*]]: tensor<96x48xf32>, %[[O:.*]]: tensor<4xi32>)
// CHECK: %[[W:.*]] = nn.grouped_matmul_weight_grad %[[G]], %[[X]], %[[O]] {group_start = 2 : i64, loom.microbatch = 1 : i64} : (tensor<96x48xf32>, tensor<96x32xf32>, tensor<4xi32>) -> tensor<2x48x32xf32>
// CHECK-NOT: nn.transpose
// CHECK: return %[[W]]
func.func @transpose_grouped_weight_grad(%x: tensor<96x32xf32>, %g: tensor<96x48xf32>, %o: tensor<4xi32>) -> tensor<2x48x32xf32> {
  %0 = nn.grouped_matmul_weight_grad %x, %g, %o {group_start = 2 : i64, loom.microbatch = 1 : i64} : (tensor<96x32xf32>, tensor<96x48xf32>, tensor<4xi32>) -> tensor<2x32x48xf32>
  %1 = nn.transpose %0 permutation = [0, 2, 1] : tensor<2x32x48xf32> -> tensor<2x48x32xf32>
  return %1 : tensor<2x48x32xf32>
}

// -----

// Not where the weight gradient has another reader (it would be computed
// twice), nor for another permutation.
// CHECK-LABEL: func.func @transpose_grouped_weight_grad_kept
// CHECK: nn.grouped_matmul_weight_grad
// CHECK-NOT: nn.grouped_matmul_weight_grad
// CHECK: nn.transpose
// CHECK: nn.transpose
func.func @transpose_grouped_weight_grad_kept(%x: tensor<96x32xf32>, %g: tensor<96x48xf32>, %o: tensor<4xi32>) -> (tensor<4x48x32xf32>, tensor<4x32x48xf32>, tensor<32x4x48xf32>) {
  %0 = nn.grouped_matmul_weight_grad %x, %g, %o : (tensor<96x32xf32>, tensor<96x48xf32>, tensor<4xi32>) -> tensor<4x32x48xf32>
  %1 = nn.transpose %0 permutation = [0, 2, 1] : tensor<4x32x48xf32> -> tensor<4x48x32xf32>
  %2 = nn.transpose %0 permutation = [1, 0, 2] : tensor<4x32x48xf32> -> tensor<32x4x48xf32>
  return %1, %0, %2 : tensor<4x48x32xf32>, tensor<4x32x48xf32>, tensor<32x4x48xf32>
}

// -----

// A grouped GEMM reads a transposed weight in place: the transpose folds
// into transpose_weight (and out of it again).
// CHECK-LABEL: func.func @grouped_matmul_transposed_weight
// CHECK-SAME: (%[[X:.*]]: tensor<96x32xf32>, %[[W:.*]]: tensor<4x48x32xf32>, %[[V:.*]]: tensor<4x32x48xf32>, %[[O:.*]]: tensor<4xi32>)
// CHECK-NOT: nn.transpose
// CHECK: %[[A:.*]] = nn.grouped_matmul %[[X]], %[[W]], %[[O]] {transpose_weight} : (tensor<96x32xf32>, tensor<4x48x32xf32>, tensor<4xi32>) -> tensor<96x48xf32>
// CHECK: %[[B:.*]] = nn.grouped_matmul %[[X]], %[[V]], %[[O]] : (tensor<96x32xf32>, tensor<4x32x48xf32>, tensor<4xi32>) -> tensor<96x48xf32>
// CHECK: return %[[A]], %[[B]]
func.func @grouped_matmul_transposed_weight(%x: tensor<96x32xf32>, %w: tensor<4x48x32xf32>, %v: tensor<4x32x48xf32>, %o: tensor<4xi32>) -> (tensor<96x48xf32>, tensor<96x48xf32>) {
  %0 = nn.transpose %w permutation = [0, 2, 1] : tensor<4x48x32xf32> -> tensor<4x32x48xf32>
  %1 = nn.grouped_matmul %x, %0, %o : (tensor<96x32xf32>, tensor<4x32x48xf32>, tensor<4xi32>) -> tensor<96x48xf32>
  %2 = nn.transpose %v permutation = [0, 2, 1] : tensor<4x32x48xf32> -> tensor<4x48x32xf32>
  %3 = nn.grouped_matmul %x, %2, %o {transpose_weight} : (tensor<96x32xf32>, tensor<4x48x32xf32>, tensor<4xi32>) -> tensor<96x48xf32>
  return %1, %3 : tensor<96x48xf32>, tensor<96x48xf32>
}

// -----

// Integer ranges (IntegerRangeOpInterface): a top-k's indices over 8
// experts, sorted, are in [0, 7], so comparing them with 8 is settled and
// the masks it selects with (transformers masks ids past the experts) fold
// away: the rows pass through unmasked. The comparison itself stays where
// something else reads it (here a cast), as a value of its shape.
// CHECK-LABEL: func.func @mask_of_ids_past_the_experts
// CHECK-SAME: (%[[S:.*]]: tensor<6x8xf32>, %[[R:.*]]: tensor<12x4xf32>)
// CHECK-NOT: nn.where
// CHECK: nn.compare ge
// CHECK-NOT: nn.where
// CHECK: return %[[R]], %{{.*}} :
func.func @mask_of_ids_past_the_experts(%s: tensor<6x8xf32>, %rows: tensor<12x4xf32>) -> (tensor<12x4xf32>, tensor<12xi64>) {
  %e = nn.constant dense<8> : tensor<i64>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %v, %i = nn.topk %s k = 2 : (tensor<6x8xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
  %flat = nn.reshape %i : tensor<6x2xi64> -> tensor<12xi64>
  %ids, %perm = nn.sort %flat : (tensor<12xi64>) -> (tensor<12xi64>, tensor<12xi64>)
  %past = nn.compare ge, %ids, %e : (tensor<12xi64>, tensor<i64>) -> tensor<12xi1>
  %col = nn.reshape %past : tensor<12xi1> -> tensor<12x1xi1>
  %masked = nn.where %col, %zero, %rows : (tensor<12x1xi1>, tensor<f32>, tensor<12x4xf32>) -> tensor<12x4xf32>
  %n = nn.cast %past : tensor<12xi1> -> tensor<12xi64>
  return %masked, %n : tensor<12x4xf32>, tensor<12xi64>
}

// -----

// The other way round: an always-true condition selects the left operand.
// A sort's permutation of 12 is in [0, 11]; sums, products, truncating
// quotients and casts carry their operands' ranges.
// CHECK-LABEL: func.func @ranges_through_arithmetic
// CHECK-SAME: (%[[S:.*]]: tensor<12xi64>, %[[A:.*]]: tensor<3x4xf32>, %[[B:.*]]: tensor<3x4xf32>)
// CHECK-NOT: nn.where
// CHECK: return %[[A]]
func.func @ranges_through_arithmetic(%s: tensor<12xi64>, %a: tensor<3x4xf32>, %b: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %two = nn.constant dense<2> : tensor<i64>
  %one = nn.constant dense<1> : tensor<i64>
  %v, %p = nn.sort %s : (tensor<12xi64>) -> (tensor<12xi64>, tensor<12xi64>)
  %q = nn.div %p, %two : (tensor<12xi64>, tensor<i64>) -> tensor<12xi64>
  %r = nn.mul %q, %two : (tensor<12xi64>, tensor<i64>) -> tensor<12xi64>
  %t = nn.add %r, %one : (tensor<12xi64>, tensor<i64>) -> tensor<12xi64>
  %n = nn.cast %t : tensor<12xi64> -> tensor<12xi32>
  %c = nn.constant dense<12> : tensor<i32>
  %lt = nn.compare lt, %n, %c : (tensor<12xi32>, tensor<i32>) -> tensor<12xi1>
  %all = nn.reshape %lt : tensor<12xi1> -> tensor<3x4xi1>
  %w = nn.where %all, %a, %b : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %w : tensor<3x4xf32>
}

// -----

// Ranges that overlap leave the selection to run time, as do values with
// no known range (a function argument), and a settled selection of an
// operand smaller than the result (a broadcast would fix the result's
// shape, which may hold the batch).
// CHECK-LABEL: func.func @ranges_that_do_not_settle
// CHECK: nn.compare lt
// CHECK: nn.where
// CHECK: nn.compare ge
// CHECK: nn.where
// CHECK: nn.where
func.func @ranges_that_do_not_settle(%s: tensor<6x8xf32>, %x: tensor<12xi64>, %rows: tensor<12x4xf32>) -> (tensor<12x4xf32>, tensor<12x4xf32>, tensor<12x4xf32>) {
  %seven = nn.constant dense<7> : tensor<i64>
  %eight = nn.constant dense<8> : tensor<i64>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %v, %i = nn.topk %s k = 2 : (tensor<6x8xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
  %flat = nn.reshape %i : tensor<6x2xi64> -> tensor<12xi64>
  %lt = nn.compare lt, %flat, %seven : (tensor<12xi64>, tensor<i64>) -> tensor<12xi1>
  %c1 = nn.reshape %lt : tensor<12xi1> -> tensor<12x1xi1>
  %m1 = nn.where %c1, %zero, %rows : (tensor<12x1xi1>, tensor<f32>, tensor<12x4xf32>) -> tensor<12x4xf32>
  %ge = nn.compare ge, %x, %seven : (tensor<12xi64>, tensor<i64>) -> tensor<12xi1>
  %c2 = nn.reshape %ge : tensor<12xi1> -> tensor<12x1xi1>
  %m2 = nn.where %c2, %zero, %rows : (tensor<12x1xi1>, tensor<f32>, tensor<12x4xf32>) -> tensor<12x4xf32>
  %in = nn.compare lt, %flat, %eight : (tensor<12xi64>, tensor<i64>) -> tensor<12xi1>
  %c3 = nn.reshape %in : tensor<12xi1> -> tensor<12x1xi1>
  %m3 = nn.where %c3, %zero, %rows : (tensor<12x1xi1>, tensor<f32>, tensor<12x4xf32>) -> tensor<12x4xf32>
  return %m1, %m2, %m3 : tensor<12x4xf32>, tensor<12x4xf32>, tensor<12x4xf32>
}

// -----

// An exported floor division of a sort's positions by k (torch's
// floor_divide: a truncating quotient less one where the remainder is
// negative, then negative indices wrapped): the remainder of a
// non-negative value by 2 is in [0, 1], never negative, so the correction
// and the wrap fold away, and what is left is the quotient.
// CHECK-LABEL: func.func @floor_division_of_positions
// CHECK-SAME: (%[[S:.*]]: tensor<12xi64>)
// CHECK: %{{.*}}, %[[P:.*]] = nn.sort %[[S]]
// CHECK: %[[Q:.*]] = nn.div %[[P]]
// CHECK-NOT: nn.where
// CHECK-NOT: nn.sub
// CHECK: return %[[Q]]
func.func @floor_division_of_positions(%s: tensor<12xi64>) -> tensor<12xi64> {
  %two = nn.constant dense<2> : tensor<i64>
  %zero = nn.constant dense<0> : tensor<i64>
  %one = nn.constant dense<1> : tensor<i64>
  %six = nn.constant dense<6> : tensor<i64>
  %false = nn.constant dense<false> : tensor<i1>
  %v, %p = nn.sort %s : (tensor<12xi64>) -> (tensor<12xi64>, tensor<12xi64>)
  %q = nn.div %p, %two : (tensor<12xi64>, tensor<i64>) -> tensor<12xi64>
  %m = nn.mul %q, %two : (tensor<12xi64>, tensor<i64>) -> tensor<12xi64>
  %r = nn.sub %p, %m : (tensor<12xi64>, tensor<12xi64>) -> tensor<12xi64>
  %nz = nn.compare ne, %r, %zero : (tensor<12xi64>, tensor<i64>) -> tensor<12xi1>
  %neg = nn.compare lt, %r, %zero : (tensor<12xi64>, tensor<i64>) -> tensor<12xi1>
  %neg2 = nn.compare ne, %neg, %false : (tensor<12xi1>, tensor<i1>) -> tensor<12xi1>
  %fix = nn.where %nz, %neg2, %false : (tensor<12xi1>, tensor<12xi1>, tensor<i1>) -> tensor<12xi1>
  %d = nn.where %fix, %one, %zero : (tensor<12xi1>, tensor<i64>, tensor<i64>) -> tensor<12xi64>
  %f = nn.sub %q, %d : (tensor<12xi64>, tensor<12xi64>) -> tensor<12xi64>
  %w = nn.compare lt, %f, %zero : (tensor<12xi64>, tensor<i64>) -> tensor<12xi1>
  %wrapped = nn.add %f, %six : (tensor<12xi64>, tensor<i64>) -> tensor<12xi64>
  %idx = nn.where %w, %wrapped, %f : (tensor<12xi1>, tensor<12xi64>, tensor<12xi64>) -> tensor<12xi64>
  return %idx : tensor<12xi64>
}

// -----

// A remainder of a value that may be negative is in (-k, k): the
// correction stays.
// CHECK-LABEL: func.func @remainder_of_signed_values
// CHECK: nn.where
func.func @remainder_of_signed_values(%x: tensor<12xi64>) -> tensor<12xi64> {
  %two = nn.constant dense<2> : tensor<i64>
  %zero = nn.constant dense<0> : tensor<i64>
  %one = nn.constant dense<1> : tensor<i64>
  %lo = nn.constant dense<-5> : tensor<i64>
  %c = nn.maximum %x, %lo : (tensor<12xi64>, tensor<i64>) -> tensor<12xi64>
  %q = nn.div %c, %two : (tensor<12xi64>, tensor<i64>) -> tensor<12xi64>
  %m = nn.mul %two, %q : (tensor<i64>, tensor<12xi64>) -> tensor<12xi64>
  %r = nn.sub %c, %m : (tensor<12xi64>, tensor<12xi64>) -> tensor<12xi64>
  %neg = nn.compare lt, %r, %zero : (tensor<12xi64>, tensor<i64>) -> tensor<12xi1>
  %d = nn.where %neg, %one, %zero : (tensor<12xi1>, tensor<i64>, tensor<i64>) -> tensor<12xi64>
  return %d : tensor<12xi64>
}

// -----

// The gradient of a gather along a permutation is a gather along its
// inverse: along the positions that sort p, p itself (the routed rows'
// gradient, unsorted); along p, an nn.sort of p (the one there, before
// the gradient, or a new one after p); along p / k, the gather summed over
// each target's k slices (the tokens' gradient from their k routed rows).
// CHECK-LABEL: func.func @gather_grad_along_permutations
// CHECK-SAME: (%[[S:.*]]: tensor<12xi64>, %[[G:.*]]: tensor<12x4xf32>, %[[W:.*]]: tensor<12xf32>)
// CHECK: %{{.*}}, %[[P:.*]] = nn.sort %[[S]]
// CHECK: %{{.*}}, %[[INV:.*]] = nn.sort %[[P]]
// CHECK-NOT: nn.gather_grad
// CHECK: %[[A:.*]] = nn.gather %[[G]], %[[P]] axis = 0 {loom.microbatch = 1 : i64} : (tensor<12x4xf32>, tensor<12xi64>) -> tensor<12x4xf32>
// CHECK: %[[B:.*]] = nn.gather %[[W]], %[[INV]] axis = 0
// CHECK: %[[C:.*]] = nn.gather %[[G]], %[[INV]] axis = 0
// CHECK: %[[R:.*]] = nn.reshape %[[C]] : tensor<12x4xf32> -> tensor<6x2x4xf32>
// CHECK: %[[D:.*]] = nn.reduce_sum %[[R]] dims = [1] : tensor<6x2x4xf32> -> tensor<6x4xf32>
// CHECK: return %[[A]], %[[B]], %[[D]]
func.func @gather_grad_along_permutations(%s: tensor<12xi64>, %g: tensor<12x4xf32>, %w: tensor<12xf32>) -> (tensor<12x4xf32>, tensor<12xf32>, tensor<6x4xf32>) {
  %two = nn.constant dense<2> : tensor<i64>
  %v, %p = nn.sort %s : (tensor<12xi64>) -> (tensor<12xi64>, tensor<12xi64>)
  %v2, %unsort = nn.sort %p : (tensor<12xi64>) -> (tensor<12xi64>, tensor<12xi64>)
  %a = nn.gather_grad %unsort, %g axis = 0 axis_size = 12 {loom.microbatch = 1 : i64} : (tensor<12xi64>, tensor<12x4xf32>) -> tensor<12x4xf32>
  %b = nn.gather_grad %p, %w axis = 0 axis_size = 12 : (tensor<12xi64>, tensor<12xf32>) -> tensor<12xf32>
  %t = nn.div %p, %two : (tensor<12xi64>, tensor<i64>) -> tensor<12xi64>
  %c = nn.gather_grad %t, %g axis = 0 axis_size = 6 : (tensor<12xi64>, tensor<12x4xf32>) -> tensor<6x4xf32>
  return %a, %b, %c : tensor<12x4xf32>, tensor<12xf32>, tensor<6x4xf32>
}

// -----

// With no sort of p before the gradient, a new one after p's: p's
// inverse.
// CHECK-LABEL: func.func @gather_grad_inverse_sorted_anew
// CHECK: %{{.*}}, %[[P:.*]] = nn.sort %{{.*}} {loom.microbatch = 0 : i64}
// CHECK-NEXT: %{{.*}}, %[[INV:.*]] = nn.sort %[[P]] {loom.microbatch = 0 : i64}
// CHECK: nn.gather %{{.*}}, %[[INV]] axis = 0
func.func @gather_grad_inverse_sorted_anew(%s: tensor<12xi64>, %w: tensor<12xf32>) -> (tensor<12xf32>, tensor<12xf32>) {
  %v, %p = nn.sort %s {loom.microbatch = 0 : i64} : (tensor<12xi64>) -> (tensor<12xi64>, tensor<12xi64>)
  %e = nn.exp %w : tensor<12xf32>
  %b = nn.gather_grad %p, %e axis = 0 axis_size = 12 : (tensor<12xi64>, tensor<12xf32>) -> tensor<12xf32>
  return %b, %e : tensor<12xf32>, tensor<12xf32>
}

// -----

// Indices that are not a permutation stay a scatter-add: a top-k's
// (nothing says each target is named once), a row-wise sort of a matrix (a permutation of each row, not
// of the whole), and p / k whose targets do not cover p (axis_size * k !=
// n).
// CHECK-LABEL: func.func @gather_grad_not_along_permutations
// CHECK-COUNT-3: nn.gather_grad
func.func @gather_grad_not_along_permutations(%s: tensor<6x8xf32>, %m: tensor<3x4xi64>, %g: tensor<12x4xf32>) -> (tensor<8x4xf32>, tensor<12x4xf32>, tensor<7x4xf32>) {
  %two = nn.constant dense<2> : tensor<i64>
  %v, %i = nn.topk %s k = 2 : (tensor<6x8xf32>) -> (tensor<6x2xf32>, tensor<6x2xi64>)
  %flat = nn.reshape %i : tensor<6x2xi64> -> tensor<12xi64>
  %a = nn.gather_grad %flat, %g axis = 0 axis_size = 8 : (tensor<12xi64>, tensor<12x4xf32>) -> tensor<8x4xf32>
  %mv, %mp = nn.sort %m : (tensor<3x4xi64>) -> (tensor<3x4xi64>, tensor<3x4xi64>)
  %rows = nn.reshape %mp : tensor<3x4xi64> -> tensor<12xi64>
  %b = nn.gather_grad %rows, %g axis = 0 axis_size = 12 : (tensor<12xi64>, tensor<12x4xf32>) -> tensor<12x4xf32>
  %fv, %p = nn.sort %flat : (tensor<12xi64>) -> (tensor<12xi64>, tensor<12xi64>)
  %t = nn.div %p, %two : (tensor<12xi64>, tensor<i64>) -> tensor<12xi64>
  %c = nn.gather_grad %t, %g axis = 0 axis_size = 7 : (tensor<12xi64>, tensor<12x4xf32>) -> tensor<7x4xf32>
  return %a, %b, %c : tensor<8x4xf32>, tensor<12x4xf32>, tensor<7x4xf32>
}
