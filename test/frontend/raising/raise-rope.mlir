// RUN: loom-opt %s --loom-raise-rope -split-input-file | FileCheck %s

// Llama's rotate_half form with [S, D] tables: nn.rope on the tables as
// they are (not interleaved).
// CHECK-LABEL: func.func @tables_2d
// CHECK-SAME: (%[[X:.*]]: tensor<1x2x4x8xf32>, %[[COS:.*]]: tensor<4x8xf32>, %[[SIN:.*]]: tensor<4x8xf32>)
// CHECK: %[[Y:.*]] = nn.rope %[[X]], %[[COS]], %[[SIN]] : (tensor<1x2x4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NOT: interleaved
// CHECK-NOT: nn.concat
// CHECK: return %[[Y]]
func.func @tables_2d(%x: tensor<1x2x4x8xf32>, %cos: tensor<4x8xf32>, %sin: tensor<4x8xf32>) -> tensor<1x2x4x8xf32> {
  %a = nn.mul %x, %cos : (tensor<1x2x4x8xf32>, tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %lo = nn.slice %x starts = [0, 0, 0, 0] limits = [1, 2, 4, 4] strides = [1, 1, 1, 1] : tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %hi = nn.slice %x starts = [0, 0, 0, 4] limits = [1, 2, 4, 8] strides = [1, 1, 1, 1] : tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %n = nn.neg %hi : tensor<1x2x4x4xf32>
  %r = nn.concat %n, %lo dim = 3 : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x8xf32>
  %b = nn.mul %r, %sin : (tensor<1x2x4x8xf32>, tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %y = nn.add %a, %b : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %y : tensor<1x2x4x8xf32>
}

// -----

// [1, 1, S, D] tables (parameters, as exporters write them) are reshaped to
// [S, D]; every commutative op has its operands swapped.
// CHECK-LABEL: func.func @tables_4d_swapped
// CHECK-SAME: (%[[X:.*]]: tensor<2x2x4x8xf32>)
// CHECK-DAG: %[[COS:.*]] = nn.parameter "rope.cos"
// CHECK-DAG: %[[SIN:.*]] = nn.parameter "rope.sin"
// CHECK-DAG: %[[C2:.*]] = nn.reshape %[[COS]] : tensor<1x1x4x8xf32> -> tensor<4x8xf32>
// CHECK-DAG: %[[S2:.*]] = nn.reshape %[[SIN]] : tensor<1x1x4x8xf32> -> tensor<4x8xf32>
// CHECK: %[[Y:.*]] = nn.rope %[[X]], %[[C2]], %[[S2]] : (tensor<2x2x4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<2x2x4x8xf32>
// CHECK-NOT: nn.mul
// CHECK: return %[[Y]]
func.func @tables_4d_swapped(%x: tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32> {
  %cos = nn.parameter "rope.cos" frozen : tensor<1x1x4x8xf32>
  %sin = nn.parameter "rope.sin" frozen : tensor<1x1x4x8xf32>
  %a = nn.mul %cos, %x : (tensor<1x1x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  %lo = nn.slice %x starts = [0, 0, 0, 0] limits = [2, 2, 4, 4] strides = [1, 1, 1, 1] : tensor<2x2x4x8xf32> -> tensor<2x2x4x4xf32>
  %hi = nn.slice %x starts = [0, 0, 0, 4] limits = [2, 2, 4, 8] strides = [1, 1, 1, 1] : tensor<2x2x4x8xf32> -> tensor<2x2x4x4xf32>
  %n = nn.neg %hi : tensor<2x2x4x4xf32>
  %r = nn.concat %n, %lo dim = 3 : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x8xf32>
  %b = nn.mul %sin, %r : (tensor<1x1x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  %y = nn.add %b, %a : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %y : tensor<2x2x4x8xf32>
}

// -----

// Constant [B, 1, S, D] tables whose batch rows are identical become one
// [S, D] constant each.
// CHECK-LABEL: func.func @constant_tables_identical_rows
// CHECK-SAME: (%[[X:.*]]: tensor<2x1x2x4xf32>)
// CHECK-DAG: %[[C2:.*]] = nn.constant dense<{{\[}}[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00], [5.000000e+00, 6.000000e+00, 7.000000e+00, 8.000000e+00]]> : tensor<2x4xf32>
// CHECK-DAG: %[[S2:.*]] = nn.constant dense<{{\[}}[-1.000000e+00, -2.000000e+00, -3.000000e+00, -4.000000e+00], [-5.000000e+00, -6.000000e+00, -7.000000e+00, -8.000000e+00]]> : tensor<2x4xf32>
// CHECK: %[[Y:.*]] = nn.rope %[[X]], %[[C2]], %[[S2]] : (tensor<2x1x2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x1x2x4xf32>
// CHECK: return %[[Y]]
func.func @constant_tables_identical_rows(%x: tensor<2x1x2x4xf32>) -> tensor<2x1x2x4xf32> {
  %cos = nn.constant dense<[[[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]], [[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]]]> : tensor<2x1x2x4xf32>
  %sin = nn.constant dense<[[[[-1.0, -2.0, -3.0, -4.0], [-5.0, -6.0, -7.0, -8.0]]], [[[-1.0, -2.0, -3.0, -4.0], [-5.0, -6.0, -7.0, -8.0]]]]> : tensor<2x1x2x4xf32>
  %a = nn.mul %x, %cos : (tensor<2x1x2x4xf32>, tensor<2x1x2x4xf32>) -> tensor<2x1x2x4xf32>
  %lo = nn.slice %x starts = [0, 0, 0, 0] limits = [2, 1, 2, 2] strides = [1, 1, 1, 1] : tensor<2x1x2x4xf32> -> tensor<2x1x2x2xf32>
  %hi = nn.slice %x starts = [0, 0, 0, 2] limits = [2, 1, 2, 4] strides = [1, 1, 1, 1] : tensor<2x1x2x4xf32> -> tensor<2x1x2x2xf32>
  %n = nn.neg %hi : tensor<2x1x2x2xf32>
  %r = nn.concat %n, %lo dim = 3 : (tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>) -> tensor<2x1x2x4xf32>
  %b = nn.mul %r, %sin : (tensor<2x1x2x4xf32>, tensor<2x1x2x4xf32>) -> tensor<2x1x2x4xf32>
  %y = nn.add %a, %b : (tensor<2x1x2x4xf32>, tensor<2x1x2x4xf32>) -> tensor<2x1x2x4xf32>
  return %y : tensor<2x1x2x4xf32>
}

// -----

// Constant [B, 1, S, D] tables whose batch rows differ (per-sequence
// positions) are not one [S, D] table: nothing is raised.
// CHECK-LABEL: func.func @constant_tables_different_rows
// CHECK-NOT: nn.rope
// CHECK: nn.concat
func.func @constant_tables_different_rows(%x: tensor<2x1x2x4xf32>) -> tensor<2x1x2x4xf32> {
  %cos = nn.constant dense<[[[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]], [[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 9.0]]]]> : tensor<2x1x2x4xf32>
  %sin = nn.constant dense<[[[[-1.0, -2.0, -3.0, -4.0], [-5.0, -6.0, -7.0, -8.0]]], [[[-1.0, -2.0, -3.0, -4.0], [-5.0, -6.0, -7.0, -8.0]]]]> : tensor<2x1x2x4xf32>
  %a = nn.mul %x, %cos : (tensor<2x1x2x4xf32>, tensor<2x1x2x4xf32>) -> tensor<2x1x2x4xf32>
  %lo = nn.slice %x starts = [0, 0, 0, 0] limits = [2, 1, 2, 2] strides = [1, 1, 1, 1] : tensor<2x1x2x4xf32> -> tensor<2x1x2x2xf32>
  %hi = nn.slice %x starts = [0, 0, 0, 2] limits = [2, 1, 2, 4] strides = [1, 1, 1, 1] : tensor<2x1x2x4xf32> -> tensor<2x1x2x2xf32>
  %n = nn.neg %hi : tensor<2x1x2x2xf32>
  %r = nn.concat %n, %lo dim = 3 : (tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>) -> tensor<2x1x2x4xf32>
  %b = nn.mul %r, %sin : (tensor<2x1x2x4xf32>, tensor<2x1x2x4xf32>) -> tensor<2x1x2x4xf32>
  %y = nn.add %a, %b : (tensor<2x1x2x4xf32>, tensor<2x1x2x4xf32>) -> tensor<2x1x2x4xf32>
  return %y : tensor<2x1x2x4xf32>
}

// -----

// The cos table is a valid [1, 1, S, D] table but the sin table is a
// per-batch function input: nothing is raised, and nothing is left behind
// (no dangling reshape of the cos table).
// CHECK-LABEL: func.func @sin_not_a_table
// CHECK-NOT: nn.rope
// CHECK-NOT: nn.reshape
// CHECK: nn.concat
func.func @sin_not_a_table(%x: tensor<2x2x4x8xf32>, %sin: tensor<2x1x4x8xf32>) -> tensor<2x2x4x8xf32> {
  %cos = nn.parameter "rope.cos" frozen : tensor<1x1x4x8xf32>
  %a = nn.mul %x, %cos : (tensor<2x2x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<2x2x4x8xf32>
  %lo = nn.slice %x starts = [0, 0, 0, 0] limits = [2, 2, 4, 4] strides = [1, 1, 1, 1] : tensor<2x2x4x8xf32> -> tensor<2x2x4x4xf32>
  %hi = nn.slice %x starts = [0, 0, 0, 4] limits = [2, 2, 4, 8] strides = [1, 1, 1, 1] : tensor<2x2x4x8xf32> -> tensor<2x2x4x4xf32>
  %n = nn.neg %hi : tensor<2x2x4x4xf32>
  %r = nn.concat %n, %lo dim = 3 : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x8xf32>
  %b = nn.mul %r, %sin : (tensor<2x2x4x8xf32>, tensor<2x1x4x8xf32>) -> tensor<2x2x4x8xf32>
  %y = nn.add %a, %b : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %y : tensor<2x2x4x8xf32>
}

// -----

// rotate_half with the halves swapped, concat(-x[..., :D/2], x[..., D/2:]),
// rotates the other way: nothing is raised.
// CHECK-LABEL: func.func @halves_swapped
// CHECK-NOT: nn.rope
// CHECK: nn.concat
func.func @halves_swapped(%x: tensor<1x2x4x8xf32>, %cos: tensor<4x8xf32>, %sin: tensor<4x8xf32>) -> tensor<1x2x4x8xf32> {
  %a = nn.mul %x, %cos : (tensor<1x2x4x8xf32>, tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %lo = nn.slice %x starts = [0, 0, 0, 0] limits = [1, 2, 4, 4] strides = [1, 1, 1, 1] : tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %hi = nn.slice %x starts = [0, 0, 0, 4] limits = [1, 2, 4, 8] strides = [1, 1, 1, 1] : tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %n = nn.neg %lo : tensor<1x2x4x4xf32>
  %r = nn.concat %n, %hi dim = 3 : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x8xf32>
  %b = nn.mul %r, %sin : (tensor<1x2x4x8xf32>, tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %y = nn.add %a, %b : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %y : tensor<1x2x4x8xf32>
}

// -----

// The negation on the second half, concat(x[..., :D/2], -x[..., D/2:]):
// not rotate_half, nothing is raised.
// CHECK-LABEL: func.func @negation_on_wrong_side
// CHECK-NOT: nn.rope
// CHECK: nn.concat
func.func @negation_on_wrong_side(%x: tensor<1x2x4x8xf32>, %cos: tensor<4x8xf32>, %sin: tensor<4x8xf32>) -> tensor<1x2x4x8xf32> {
  %a = nn.mul %x, %cos : (tensor<1x2x4x8xf32>, tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %lo = nn.slice %x starts = [0, 0, 0, 0] limits = [1, 2, 4, 4] strides = [1, 1, 1, 1] : tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %hi = nn.slice %x starts = [0, 0, 0, 4] limits = [1, 2, 4, 8] strides = [1, 1, 1, 1] : tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %n = nn.neg %hi : tensor<1x2x4x4xf32>
  %r = nn.concat %lo, %n dim = 3 : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x8xf32>
  %b = nn.mul %r, %sin : (tensor<1x2x4x8xf32>, tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %y = nn.add %a, %b : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %y : tensor<1x2x4x8xf32>
}

// -----

// x * cos + rotate_half(y) * sin with y != x: nothing is raised.
// CHECK-LABEL: func.func @rotate_of_other
// CHECK-NOT: nn.rope
// CHECK: nn.concat
func.func @rotate_of_other(%x: tensor<1x2x4x8xf32>, %y: tensor<1x2x4x8xf32>, %cos: tensor<4x8xf32>, %sin: tensor<4x8xf32>) -> tensor<1x2x4x8xf32> {
  %a = nn.mul %x, %cos : (tensor<1x2x4x8xf32>, tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %lo = nn.slice %y starts = [0, 0, 0, 0] limits = [1, 2, 4, 4] strides = [1, 1, 1, 1] : tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %hi = nn.slice %y starts = [0, 0, 0, 4] limits = [1, 2, 4, 8] strides = [1, 1, 1, 1] : tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %n = nn.neg %hi : tensor<1x2x4x4xf32>
  %r = nn.concat %n, %lo dim = 3 : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x8xf32>
  %b = nn.mul %r, %sin : (tensor<1x2x4x8xf32>, tensor<4x8xf32>) -> tensor<1x2x4x8xf32>
  %z = nn.add %a, %b : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %z : tensor<1x2x4x8xf32>
}
