// RUN: loom-opt %s --loom-fold-constants -split-input-file | FileCheck %s

// A causal mask built from iota, compare and where folds to one constant.
// CHECK-LABEL: func.func @causal_mask_chain
// CHECK-NEXT: %[[M:.*]] = nn.constant dense<{{\[}}[0.000000e+00, 0xFF800000, 0xFF800000], [0.000000e+00, 0.000000e+00, 0xFF800000], [0.000000e+00, 0.000000e+00, 0.000000e+00]]> : tensor<3x3xf32>
// CHECK-NOT: nn.iota
// CHECK-NOT: nn.compare
// CHECK-NOT: nn.where
// CHECK: return %[[M]]
func.func @causal_mask_chain() -> tensor<3x3xf32> {
  %rows = nn.iota dim = 0 : tensor<3x1xi64>
  %cols = nn.iota dim = 1 : tensor<1x3xi64>
  %allowed = nn.compare le, %cols, %rows : (tensor<1x3xi64>, tensor<3x1xi64>) -> tensor<3x3xi1>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %m = nn.where %allowed, %zero, %ninf : (tensor<3x3xi1>, tensor<f32>, tensor<f32>) -> tensor<3x3xf32>
  return %m : tensor<3x3xf32>
}

// -----

// Arithmetic on constants folds (iota with start and step, cast, add).
// CHECK-LABEL: func.func @arithmetic_chain
// CHECK-NEXT: %[[C:.*]] = nn.constant dense<[1.000000e+00, 3.000000e+00, 5.000000e+00, 7.000000e+00]> : tensor<4xf32>
// CHECK-NEXT: return %[[C]]
func.func @arithmetic_chain() -> tensor<4xf32> {
  %i = nn.iota dim = 0 {step = 2.0} : tensor<4xi64>
  %f = nn.cast %i : tensor<4xi64> -> tensor<4xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %y = nn.add %f, %one : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// An op on a function argument does not fold; its constant operand chain
// does.
// CHECK-LABEL: func.func @depends_on_argument
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-NEXT: %[[C:.*]] = nn.constant dense<[0.000000e+00, 1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<4xf32>
// CHECK-NEXT: %[[Y:.*]] = nn.add %[[X]], %[[C]]
// CHECK-NEXT: return %[[Y]]
func.func @depends_on_argument(%x: tensor<4xf32>) -> tensor<4xf32> {
  %i = nn.iota dim = 0 : tensor<4xf32>
  %y = nn.add %x, %i : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// An op on a parameter does not fold, even a frozen one with a stored
// value: parameters may change (training, supplied weights).
// CHECK-LABEL: func.func @depends_on_parameter
// CHECK: %[[P:.*]] = nn.parameter "rope.inv_freq" frozen value
// CHECK: %[[Y:.*]] = nn.mul %[[P]], %{{.*}}
// CHECK: return %[[Y]]
func.func @depends_on_parameter() -> tensor<2xf32> {
  %p = nn.parameter "rope.inv_freq" frozen value(dense<[1.0, 0.5]> : tensor<2xf32>) : tensor<2xf32>
  %two = nn.constant dense<2.0> : tensor<f32>
  %y = nn.mul %p, %two : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

// A result over kMaxFoldedElements (2^27) is left to run at run time, and so
// is everything computed from it.
// CHECK-LABEL: func.func @over_size_limit
// CHECK: %[[I:.*]] = nn.iota dim = 0 : tensor<4097x32768xi32>
// CHECK: nn.reduce_sum %[[I]]
// CHECK-NOT: nn.constant dense<
func.func @over_size_limit() -> tensor<i32> {
  %i = nn.iota dim = 0 : tensor<4097x32768xi32>
  %s = nn.reduce_sum %i dims = [0, 1] : tensor<4097x32768xi32> -> tensor<i32>
  return %s : tensor<i32>
}

// -----

// A small constant next to the oversized one still folds.
// CHECK-LABEL: func.func @small_beside_large
// CHECK-DAG: nn.iota dim = 1 : tensor<32768x4097xi32>
// CHECK-DAG: nn.constant dense<[0, 1]> : tensor<2xi32>
func.func @small_beside_large() -> (tensor<32768x4097xi32>, tensor<2xi32>) {
  %big = nn.iota dim = 1 : tensor<32768x4097xi32>
  %small = nn.iota dim = 0 : tensor<2xi32>
  return %big, %small : tensor<32768x4097xi32>, tensor<2xi32>
}
