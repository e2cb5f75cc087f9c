// RUN: loom-opt %s -split-input-file | FileCheck %s
// RUN: loom-opt %s -split-input-file | loom-opt -split-input-file | FileCheck %s
// RUN: loom-opt %s -split-input-file --mlir-print-op-generic | loom-opt -split-input-file | FileCheck %s

// Round trip of every nn op through the custom printer, a re-parse of the
// printed form, and the generic form.

// A float constant, a splat constant, and constants of every element type.
// CHECK-LABEL: func.func @constant
func.func @constant() {
  // CHECK: nn.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
  %0 = nn.constant dense<[1.0, 2.0]> : tensor<2xf32>
  // CHECK: nn.constant dense<0.000000e+00> : tensor<4x8xbf16>
  %1 = nn.constant dense<0.0> : tensor<4x8xbf16>
  // CHECK: nn.constant dense<[1, -2]> : tensor<2xi64>
  %2 = nn.constant dense<[1, -2]> : tensor<2xi64>
  // CHECK: nn.constant dense<7> : tensor<i32>
  %3 = nn.constant dense<7> : tensor<i32>
  // CHECK: nn.constant dense<[true, false]> : tensor<2xi1>
  %4 = nn.constant dense<[true, false]> : tensor<2xi1>
  // CHECK: nn.constant dense<1.500000e+00> : tensor<3xf8E4M3FN>
  %5 = nn.constant dense<1.5> : tensor<3xf8E4M3FN>
  // CHECK: nn.constant dense<2.000000e+00> : tensor<3xf8E5M2>
  %6 = nn.constant dense<2.0> : tensor<3xf8E5M2>
  // CHECK: nn.constant dense<5.000000e-01> : tensor<1xf16>
  %7 = nn.constant dense<0.5> : tensor<1xf16>
  // CHECK: nn.constant dense<2.500000e-01> : tensor<0x3xf64>
  %8 = nn.constant dense<0.25> : tensor<0x3xf64>
  return
}

// -----

// A parameter in each form: default init, every init kind, init with a scale
// (printed exactly, not rounded), frozen, and with an imported value.
// CHECK-LABEL: func.func @parameter
func.func @parameter() {
  // CHECK: nn.parameter "a" : tensor<4xf32>
  %0 = nn.parameter "a" : tensor<4xf32>
  // CHECK: nn.parameter "b" : tensor<4xf32>
  %1 = nn.parameter "b" init(zeros) : tensor<4xf32>
  // CHECK: nn.parameter "c" init(ones) : tensor<4xf32>
  %2 = nn.parameter "c" init(ones) : tensor<4xf32>
  // CHECK: nn.parameter "lm_head.weight" init(normal, 2.000000e-02) : tensor<64x32xf32>
  %3 = nn.parameter "lm_head.weight" init(normal, 0.02) : tensor<64x32xf32>
  // CHECK: nn.parameter "d" init(uniform, 0.0123456789) : tensor<8x8xbf16>
  %4 = nn.parameter "d" init(uniform, 0.0123456789) : tensor<8x8xbf16>
  // CHECK: nn.parameter "e" init(normal) : tensor<2xf32>
  %5 = nn.parameter "e" init(normal) : tensor<2xf32>
  // CHECK: nn.parameter "f" init(zeros, 5.000000e-01) : tensor<2xf32>
  %6 = nn.parameter "f" init(zeros, 0.5) : tensor<2xf32>
  // CHECK: nn.parameter "rope.inv_freq" frozen : tensor<8xf32>
  %7 = nn.parameter "rope.inv_freq" frozen : tensor<8xf32>
  // CHECK: nn.parameter "g" frozen init(ones) : tensor<8xf32>
  %8 = nn.parameter "g" frozen init(ones) : tensor<8xf32>
  // CHECK: nn.parameter "h" value(dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>) : tensor<2xf32>
  %9 = nn.parameter "h" value(dense<[1.0, 2.0]> : tensor<2xf32>) : tensor<2xf32>
  // CHECK: nn.parameter "i" frozen init(normal, 1.000000e+00) value(dense<3> : tensor<2x2xi64>) : tensor<2x2xi64>
  %10 = nn.parameter "i" frozen init(normal, 1.0) value(dense<3> : tensor<2x2xi64>) : tensor<2x2xi64>
  return
}

// -----

// iota along each dim, with the default and explicit start/step.
// CHECK-LABEL: func.func @iota
func.func @iota() {
  // CHECK: nn.iota dim = 0 : tensor<16xi64>
  %0 = nn.iota dim = 0 : tensor<16xi64>
  // CHECK: nn.iota dim = 1 {start = 2.000000e+00 : f64, step = 5.000000e-01 : f64} : tensor<4x8xf32>
  %1 = nn.iota dim = 1 {start = 2.0 : f64, step = 0.5 : f64} : tensor<4x8xf32>
  // CHECK: nn.iota dim = 0 : tensor<3x2xi32>
  %2 = nn.iota dim = 0 : tensor<3x2xi32>
  return
}

// -----

// neg and abs accept floats and integers.
// CHECK-LABEL: func.func @unary_numeric
func.func @unary_numeric(%x: tensor<4x8xf32>, %i: tensor<4xi64>, %j: tensor<i32>) {
  // CHECK: nn.neg %arg0 : tensor<4x8xf32>
  %0 = nn.neg %x : tensor<4x8xf32>
  // CHECK: nn.neg %arg1 : tensor<4xi64>
  %1 = nn.neg %i : tensor<4xi64>
  // CHECK: nn.abs %arg0 : tensor<4x8xf32>
  %2 = nn.abs %x : tensor<4x8xf32>
  // CHECK: nn.abs %arg2 : tensor<i32>
  %3 = nn.abs %j : tensor<i32>
  return
}

// -----

// Every float-only unary op.
// CHECK-LABEL: func.func @unary_float
func.func @unary_float(%x: tensor<4x8xf32>, %h: tensor<2xbf16>) {
  // CHECK: nn.exp %arg0 : tensor<4x8xf32>
  %0 = nn.exp %x : tensor<4x8xf32>
  // CHECK: nn.log %arg0 : tensor<4x8xf32>
  %1 = nn.log %x : tensor<4x8xf32>
  // CHECK: nn.sqrt %arg0 : tensor<4x8xf32>
  %2 = nn.sqrt %x : tensor<4x8xf32>
  // CHECK: nn.rsqrt %arg0 : tensor<4x8xf32>
  %3 = nn.rsqrt %x : tensor<4x8xf32>
  // CHECK: nn.reciprocal %arg0 : tensor<4x8xf32>
  %4 = nn.reciprocal %x : tensor<4x8xf32>
  // CHECK: nn.tanh %arg0 : tensor<4x8xf32>
  %5 = nn.tanh %x : tensor<4x8xf32>
  // CHECK: nn.erf %arg0 : tensor<4x8xf32>
  %6 = nn.erf %x : tensor<4x8xf32>
  // CHECK: nn.sigmoid %arg0 : tensor<4x8xf32>
  %7 = nn.sigmoid %x : tensor<4x8xf32>
  // CHECK: nn.silu %arg0 : tensor<4x8xf32>
  %8 = nn.silu %x : tensor<4x8xf32>
  // CHECK: nn.relu %arg0 : tensor<4x8xf32>
  %9 = nn.relu %x : tensor<4x8xf32>
  // CHECK: nn.exp %arg1 : tensor<2xbf16>
  %10 = nn.exp %h : tensor<2xbf16>
  return
}

// -----

// gelu, exact (the default, printed without `approximate`) and tanh.
// CHECK-LABEL: func.func @gelu
func.func @gelu(%x: tensor<4x8xf32>) {
  // CHECK: nn.gelu %arg0 : tensor<4x8xf32>
  %0 = nn.gelu %x : tensor<4x8xf32>
  // CHECK: nn.gelu %arg0 : tensor<4x8xf32>
  %1 = nn.gelu %x approximate = none : tensor<4x8xf32>
  // CHECK: nn.gelu %arg0 approximate = tanh : tensor<4x8xf32>
  %2 = nn.gelu %x approximate = tanh : tensor<4x8xf32>
  return
}

// -----

// Every binary op on same-shaped operands.
// CHECK-LABEL: func.func @binary
func.func @binary(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
  // CHECK: nn.add %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %0 = nn.add %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: nn.sub %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = nn.sub %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: nn.mul %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = nn.mul %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: nn.div %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = nn.div %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: nn.pow %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = nn.pow %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: nn.maximum %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = nn.maximum %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: nn.minimum %arg0, %arg1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %6 = nn.minimum %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// Binary ops broadcast NumPy-style: trailing alignment, size-1 dims, scalars,
// and integer operands.
// CHECK-LABEL: func.func @binary_broadcast
func.func @binary_broadcast(%a: tensor<4x1xf32>, %b: tensor<8xf32>, %s: tensor<f32>,
                            %i: tensor<2x1x3xi64>, %j: tensor<5x1xi64>) {
  // CHECK: nn.add %arg0, %arg1 : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %0 = nn.add %a, %b : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: nn.mul %arg2, %arg0 : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %1 = nn.mul %s, %a : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  // CHECK: nn.sub %arg3, %arg4 : (tensor<2x1x3xi64>, tensor<5x1xi64>) -> tensor<2x5x3xi64>
  %2 = nn.sub %i, %j : (tensor<2x1x3xi64>, tensor<5x1xi64>) -> tensor<2x5x3xi64>
  // CHECK: nn.div %arg1, %arg2 : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %3 = nn.div %b, %s : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  return
}

// -----

// compare with every predicate, broadcasting, on integers, floats and i1.
// CHECK-LABEL: func.func @compare
func.func @compare(%a: tensor<4x1xi64>, %b: tensor<4xi64>, %x: tensor<3xf32>,
                   %p: tensor<2xi1>) {
  // CHECK: nn.compare eq, %arg0, %arg1 : (tensor<4x1xi64>, tensor<4xi64>) -> tensor<4x4xi1>
  %0 = nn.compare eq, %a, %b : (tensor<4x1xi64>, tensor<4xi64>) -> tensor<4x4xi1>
  // CHECK: nn.compare ne, %arg0, %arg1 : (tensor<4x1xi64>, tensor<4xi64>) -> tensor<4x4xi1>
  %1 = nn.compare ne, %a, %b : (tensor<4x1xi64>, tensor<4xi64>) -> tensor<4x4xi1>
  // CHECK: nn.compare lt, %arg0, %arg1 : (tensor<4x1xi64>, tensor<4xi64>) -> tensor<4x4xi1>
  %2 = nn.compare lt, %a, %b : (tensor<4x1xi64>, tensor<4xi64>) -> tensor<4x4xi1>
  // CHECK: nn.compare le, %arg2, %arg2 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  %3 = nn.compare le, %x, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  // CHECK: nn.compare gt, %arg2, %arg2 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  %4 = nn.compare gt, %x, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  // CHECK: nn.compare ge, %arg2, %arg2 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  %5 = nn.compare ge, %x, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  // CHECK: nn.compare eq, %arg3, %arg3 : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
  %6 = nn.compare eq, %p, %p : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
  return
}

// -----

// where, with and without broadcasting between condition and branches.
// CHECK-LABEL: func.func @where
func.func @where(%c: tensor<4x8xi1>, %a: tensor<4x8xf32>, %b: tensor<4x8xf32>,
                 %c1: tensor<4x1xi1>, %s: tensor<f32>, %i: tensor<8xi64>) {
  // CHECK: nn.where %arg0, %arg1, %arg2 : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %0 = nn.where %c, %a, %b : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: nn.where %arg3, %arg1, %arg4 : (tensor<4x1xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = nn.where %c1, %a, %s : (tensor<4x1xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  // CHECK: nn.where %arg3, %arg5, %arg5 : (tensor<4x1xi1>, tensor<8xi64>, tensor<8xi64>) -> tensor<4x8xi64>
  %2 = nn.where %c1, %i, %i : (tensor<4x1xi1>, tensor<8xi64>, tensor<8xi64>) -> tensor<4x8xi64>
  return
}

// -----

// cast between every pair of element kinds Loom uses.
// CHECK-LABEL: func.func @cast
func.func @cast(%x: tensor<4xf32>, %i: tensor<4xi64>, %p: tensor<4xi1>) {
  // CHECK: nn.cast %arg0 : tensor<4xf32> -> tensor<4xbf16>
  %0 = nn.cast %x : tensor<4xf32> -> tensor<4xbf16>
  // CHECK: nn.cast %0 : tensor<4xbf16> -> tensor<4xf16>
  %1 = nn.cast %0 : tensor<4xbf16> -> tensor<4xf16>
  // CHECK: nn.cast %1 : tensor<4xf16> -> tensor<4xf8E4M3FN>
  %2 = nn.cast %1 : tensor<4xf16> -> tensor<4xf8E4M3FN>
  // CHECK: nn.cast %2 : tensor<4xf8E4M3FN> -> tensor<4xf8E5M2>
  %3 = nn.cast %2 : tensor<4xf8E4M3FN> -> tensor<4xf8E5M2>
  // CHECK: nn.cast %3 : tensor<4xf8E5M2> -> tensor<4xf32>
  %4 = nn.cast %3 : tensor<4xf8E5M2> -> tensor<4xf32>
  // CHECK: nn.cast %arg0 : tensor<4xf32> -> tensor<4xi32>
  %5 = nn.cast %x : tensor<4xf32> -> tensor<4xi32>
  // CHECK: nn.cast %5 : tensor<4xi32> -> tensor<4xi64>
  %6 = nn.cast %5 : tensor<4xi32> -> tensor<4xi64>
  // CHECK: nn.cast %arg1 : tensor<4xi64> -> tensor<4xi1>
  %7 = nn.cast %i : tensor<4xi64> -> tensor<4xi1>
  // CHECK: nn.cast %arg2 : tensor<4xi1> -> tensor<4xf32>
  %8 = nn.cast %p : tensor<4xi1> -> tensor<4xf32>
  // CHECK: nn.cast %arg1 : tensor<4xi64> -> tensor<4xbf16>
  %9 = nn.cast %i : tensor<4xi64> -> tensor<4xbf16>
  // CHECK: nn.cast %arg0 : tensor<4xf32> -> tensor<4xf32>
  %10 = nn.cast %x : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

// matmul: plain, each transpose, both, batched, broadcast batch dims, and
// an f32 result of bf16 operands.
// CHECK-LABEL: func.func @matmul
func.func @matmul(%a: tensor<16x64xf32>, %b: tensor<64x32xf32>, %bt: tensor<32x64xf32>,
                  %at: tensor<64x16xf32>, %x: tensor<2x16x64xf32>,
                  %y: tensor<3x1x64x8xbf16>, %z: tensor<5x8x4xbf16>) {
  // CHECK: nn.matmul %arg0, %arg1 : (tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
  %0 = nn.matmul %a, %b : (tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
  // CHECK: nn.matmul %arg0, %arg2 {transpose_rhs} : (tensor<16x64xf32>, tensor<32x64xf32>) -> tensor<16x32xf32>
  %1 = nn.matmul %a, %bt {transpose_rhs} : (tensor<16x64xf32>, tensor<32x64xf32>) -> tensor<16x32xf32>
  // CHECK: nn.matmul %arg3, %arg1 {transpose_lhs} : (tensor<64x16xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
  %2 = nn.matmul %at, %b {transpose_lhs} : (tensor<64x16xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
  // CHECK: nn.matmul %arg3, %arg2 {transpose_lhs, transpose_rhs} : (tensor<64x16xf32>, tensor<32x64xf32>) -> tensor<16x32xf32>
  %3 = nn.matmul %at, %bt {transpose_lhs, transpose_rhs} : (tensor<64x16xf32>, tensor<32x64xf32>) -> tensor<16x32xf32>
  // CHECK: nn.matmul %arg4, %arg2 {transpose_rhs} : (tensor<2x16x64xf32>, tensor<32x64xf32>) -> tensor<2x16x32xf32>
  %4 = nn.matmul %x, %bt {transpose_rhs} : (tensor<2x16x64xf32>, tensor<32x64xf32>) -> tensor<2x16x32xf32>
  // CHECK: nn.matmul %arg5, %arg6 : (tensor<3x1x64x8xbf16>, tensor<5x8x4xbf16>) -> tensor<3x5x64x4xbf16>
  %5 = nn.matmul %y, %z : (tensor<3x1x64x8xbf16>, tensor<5x8x4xbf16>) -> tensor<3x5x64x4xbf16>
  // bf16 operands, the f32 accumulation as the result.
  // CHECK: nn.matmul %arg5, %arg6 : (tensor<3x1x64x8xbf16>, tensor<5x8x4xbf16>) -> tensor<3x5x64x4xf32>
  %6 = nn.matmul %y, %z : (tensor<3x1x64x8xbf16>, tensor<5x8x4xbf16>) -> tensor<3x5x64x4xf32>
  return
}

// -----

// reduce_sum, reduce_mean and reduce_max, with and without keepdim, over one,
// several and all dims.
// CHECK-LABEL: func.func @reduce
func.func @reduce(%x: tensor<2x3x4xf32>, %i: tensor<5x6xi64>) {
  // CHECK: nn.reduce_sum %arg0 dims = [1] : tensor<2x3x4xf32> -> tensor<2x4xf32>
  %0 = nn.reduce_sum %x dims = [1] : tensor<2x3x4xf32> -> tensor<2x4xf32>
  // CHECK: nn.reduce_sum %arg0 dims = [2, 0] keepdim : tensor<2x3x4xf32> -> tensor<1x3x1xf32>
  %1 = nn.reduce_sum %x dims = [2, 0] keepdim : tensor<2x3x4xf32> -> tensor<1x3x1xf32>
  // CHECK: nn.reduce_sum %arg1 dims = [0, 1] : tensor<5x6xi64> -> tensor<i64>
  %2 = nn.reduce_sum %i dims = [0, 1] : tensor<5x6xi64> -> tensor<i64>
  // CHECK: nn.reduce_mean %arg0 dims = [2] : tensor<2x3x4xf32> -> tensor<2x3xf32>
  %3 = nn.reduce_mean %x dims = [2] : tensor<2x3x4xf32> -> tensor<2x3xf32>
  // CHECK: nn.reduce_mean %arg0 dims = [2] keepdim : tensor<2x3x4xf32> -> tensor<2x3x1xf32>
  %4 = nn.reduce_mean %x dims = [2] keepdim : tensor<2x3x4xf32> -> tensor<2x3x1xf32>
  // CHECK: nn.reduce_max %arg0 dims = [0] : tensor<2x3x4xf32> -> tensor<3x4xf32>
  %5 = nn.reduce_max %x dims = [0] : tensor<2x3x4xf32> -> tensor<3x4xf32>
  // CHECK: nn.reduce_max %arg1 dims = [1] keepdim : tensor<5x6xi64> -> tensor<5x1xi64>
  %6 = nn.reduce_max %i dims = [1] keepdim : tensor<5x6xi64> -> tensor<5x1xi64>
  // CHECK: nn.reduce_sum %arg0 dims = [] : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  %7 = nn.reduce_sum %x dims = [] : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  return
}

// -----

// softmax and log_softmax along a chosen dim.
// CHECK-LABEL: func.func @softmax
func.func @softmax(%x: tensor<2x8x16xf32>) {
  // CHECK: nn.softmax %arg0 dim = 2 : tensor<2x8x16xf32>
  %0 = nn.softmax %x dim = 2 : tensor<2x8x16xf32>
  // CHECK: nn.softmax %arg0 dim = 0 : tensor<2x8x16xf32>
  %1 = nn.softmax %x dim = 0 : tensor<2x8x16xf32>
  // CHECK: nn.log_softmax %arg0 dim = 2 : tensor<2x8x16xf32>
  %2 = nn.log_softmax %x dim = 2 : tensor<2x8x16xf32>
  return
}

// -----

// layer_norm with weight and bias, each alone, neither, and an explicit
// epsilon (the default 1e-5 is not printed).
// CHECK-LABEL: func.func @layer_norm
func.func @layer_norm(%x: tensor<2x8x64xf32>, %w: tensor<64xf32>, %b: tensor<64xf32>) {
  // CHECK: nn.layer_norm %arg0, weight %arg1, bias %arg2 : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %0 = nn.layer_norm %x, weight %w, bias %b epsilon = 1.0e-05 : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  // CHECK: nn.layer_norm %arg0, weight %arg1 : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %1 = nn.layer_norm %x, weight %w : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  // CHECK: nn.layer_norm %arg0, bias %arg2 : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %2 = nn.layer_norm %x, bias %b : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  // CHECK: nn.layer_norm %arg0 epsilon = 1.000000e-03 : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %3 = nn.layer_norm %x epsilon = 1.0e-03 : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  // CHECK: nn.layer_norm %arg0 : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %4 = nn.layer_norm %x : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return
}

// -----

// rms_norm with and without weight.
// CHECK-LABEL: func.func @rms_norm
func.func @rms_norm(%x: tensor<2x8x64xbf16>, %w: tensor<64xbf16>) {
  // CHECK: nn.rms_norm %arg0, weight %arg1 epsilon = 1.000000e-05 : (tensor<2x8x64xbf16>, tensor<64xbf16>) -> tensor<2x8x64xbf16>
  %0 = nn.rms_norm %x, weight %w epsilon = 1.0e-05 : (tensor<2x8x64xbf16>, tensor<64xbf16>) -> tensor<2x8x64xbf16>
  // CHECK: nn.rms_norm %arg0 : (tensor<2x8x64xbf16>) -> tensor<2x8x64xbf16>
  %1 = nn.rms_norm %x : (tensor<2x8x64xbf16>) -> tensor<2x8x64xbf16>
  return
}

// -----

// rope, rotating halves (the default) and interleaved pairs.
// CHECK-LABEL: func.func @rope
func.func @rope(%q: tensor<1x4x8x16xf32>, %cos: tensor<8x16xf32>, %sin: tensor<8x16xf32>) {
  // CHECK: nn.rope %arg0, %arg1, %arg2 : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %0 = nn.rope %q, %cos, %sin : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  // CHECK: nn.rope %arg0, %arg1, %arg2 {interleaved} : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  %1 = nn.rope %q, %cos, %sin {interleaved} : (tensor<1x4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x4x8x16xf32>
  return
}

// -----

// attention: plain, causal, grouped KV heads, an explicit scale, a value head
// dim differing from the query's, and a KV cache longer than the query.
// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<1x8x16x32xf32>, %k: tensor<1x8x16x32xf32>,
                     %v: tensor<1x8x16x32xf32>, %kg: tensor<1x2x16x32xf32>,
                     %vg: tensor<1x2x16x64xf32>, %q1: tensor<1x8x1x32xf32>) {
  // CHECK: nn.attention %arg0, %arg1, %arg2 : (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<1x8x16x32xf32>
  %0 = nn.attention %q, %k, %v : (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<1x8x16x32xf32>
  // CHECK: nn.attention %arg0, %arg1, %arg2 causal : (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<1x8x16x32xf32>
  %1 = nn.attention %q, %k, %v causal : (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<1x8x16x32xf32>
  // CHECK: nn.attention %arg0, %arg3, %arg4 causal : (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x64xf32>) -> tensor<1x8x16x64xf32>
  %2 = nn.attention %q, %kg, %vg causal : (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x64xf32>) -> tensor<1x8x16x64xf32>
  // CHECK: nn.attention %arg0, %arg1, %arg2 scale = 1.250000e-01 : (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<1x8x16x32xf32>
  %3 = nn.attention %q, %k, %v scale = 0.125 : (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<1x8x16x32xf32>
  // CHECK: nn.attention %arg5, %arg3, %arg3 causal scale = 5.000000e-01 : (tensor<1x8x1x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>) -> tensor<1x8x1x32xf32>
  %4 = nn.attention %q1, %kg, %kg causal scale = 0.5 : (tensor<1x8x1x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x32xf32>) -> tensor<1x8x1x32xf32>
  // A sliding window of 4 keys, and its gradient.
  // CHECK: nn.attention %arg0, %arg3, %arg4 causal window = 4 : (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x64xf32>) -> tensor<1x8x16x64xf32>
  %5 = nn.attention %q, %kg, %vg causal window = 4 : (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x64xf32>) -> tensor<1x8x16x64xf32>
  // CHECK: nn.attention_grad %arg0, %arg3, %arg4, %{{.*}} causal window = 4 : (
  %6:3 = nn.attention_grad %q, %kg, %vg, %5 causal window = 4 : (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x64xf32>, tensor<1x8x16x64xf32>) -> (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x64xf32>)
  return
}

// -----

// attention_with_stats: nn.attention's result and the f32 row statistics
// [B, Hq, S], whatever the operands' type; grouped heads, causal, a scale.
// CHECK-LABEL: func.func @attention_with_stats
func.func @attention_with_stats(%q: tensor<1x8x16x32xbf16>, %kg: tensor<1x2x20x32xbf16>,
                                %vg: tensor<1x2x20x64xbf16>) {
  // CHECK: nn.attention_with_stats %arg0, %arg1, %arg2 causal scale = 1.250000e-01 : (tensor<1x8x16x32xbf16>, tensor<1x2x20x32xbf16>, tensor<1x2x20x64xbf16>) -> (tensor<1x8x16x64xbf16>, tensor<1x8x16xf32>)
  %0:2 = nn.attention_with_stats %q, %kg, %vg causal scale = 0.125 : (tensor<1x8x16x32xbf16>, tensor<1x2x20x32xbf16>, tensor<1x2x20x64xbf16>) -> (tensor<1x8x16x64xbf16>, tensor<1x8x16xf32>)
  // CHECK: nn.attention_with_stats %arg0, %arg1, %arg1 : (tensor<1x8x16x32xbf16>, tensor<1x2x20x32xbf16>, tensor<1x2x20x32xbf16>) -> (tensor<1x8x16x32xbf16>, tensor<1x8x16xf32>)
  %1:2 = nn.attention_with_stats %q, %kg, %kg : (tensor<1x8x16x32xbf16>, tensor<1x2x20x32xbf16>, tensor<1x2x20x32xbf16>) -> (tensor<1x8x16x32xbf16>, tensor<1x8x16xf32>)
  return
}

// -----

// embedding with i64 and i32 ids of any rank.
// CHECK-LABEL: func.func @embedding
func.func @embedding(%t: tensor<100x32xf32>, %ids: tensor<2x8xi64>, %one: tensor<i32>) {
  // CHECK: nn.embedding %arg0, %arg1 : (tensor<100x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
  %0 = nn.embedding %t, %ids : (tensor<100x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
  // CHECK: nn.embedding %arg0, %arg2 : (tensor<100x32xf32>, tensor<i32>) -> tensor<32xf32>
  %1 = nn.embedding %t, %one : (tensor<100x32xf32>, tensor<i32>) -> tensor<32xf32>
  return
}

// -----

// cross_entropy with each reduction (mean is the default) and ignore_index.
// CHECK-LABEL: func.func @cross_entropy
func.func @cross_entropy(%l: tensor<16x100xf32>, %y: tensor<16xi64>, %h: tensor<16x100xbf16>,
                         %y32: tensor<16xi32>) {
  // CHECK: nn.cross_entropy %arg0, %arg1 : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<f32>
  %0 = nn.cross_entropy %l, %y : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<f32>
  // CHECK: nn.cross_entropy %arg0, %arg1 : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<f32>
  %1 = nn.cross_entropy %l, %y reduction = mean : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<f32>
  // CHECK: nn.cross_entropy %arg0, %arg1 reduction = sum : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<f32>
  %2 = nn.cross_entropy %l, %y reduction = sum : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<f32>
  // CHECK: nn.cross_entropy %arg2, %arg3 reduction = none : (tensor<16x100xbf16>, tensor<16xi32>) -> tensor<16xf32>
  %3 = nn.cross_entropy %h, %y32 reduction = none : (tensor<16x100xbf16>, tensor<16xi32>) -> tensor<16xf32>
  // CHECK: nn.cross_entropy %arg0, %arg1 {ignore_index = 0 : i64} : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<f32>
  %4 = nn.cross_entropy %l, %y {ignore_index = 0 : i64} : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<f32>
  return
}

// -----

// dropout with a probability and a seed.
// CHECK-LABEL: func.func @dropout
func.func @dropout(%x: tensor<4x8xf32>) {
  // CHECK: nn.dropout %arg0 p = 1.000000e-01 seed = 42 : tensor<4x8xf32>
  %0 = nn.dropout %x p = 1.0e-01 seed = 42 : tensor<4x8xf32>
  // CHECK: nn.dropout %arg0 p = 0.000000e+00 seed = 0 : tensor<4x8xf32>
  %1 = nn.dropout %x p = 0.0 seed = 0 : tensor<4x8xf32>
  return
}

// -----

// reshape, including to and from rank 0.
// CHECK-LABEL: func.func @reshape
func.func @reshape(%x: tensor<2x3x4xf32>, %s: tensor<1x1xi64>) {
  // CHECK: nn.reshape %arg0 : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %0 = nn.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  // CHECK: nn.reshape %arg0 : tensor<2x3x4xf32> -> tensor<24xf32>
  %1 = nn.reshape %x : tensor<2x3x4xf32> -> tensor<24xf32>
  // CHECK: nn.reshape %arg1 : tensor<1x1xi64> -> tensor<i64>
  %2 = nn.reshape %s : tensor<1x1xi64> -> tensor<i64>
  return
}

// -----

// transpose by a permutation, including the identity.
// CHECK-LABEL: func.func @transpose
func.func @transpose(%x: tensor<2x3x4xf32>) {
  // CHECK: nn.transpose %arg0 permutation = [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  %0 = nn.transpose %x permutation = [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  // CHECK: nn.transpose %arg0 permutation = [0, 2, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
  %1 = nn.transpose %x permutation = [0, 2, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
  // CHECK: nn.transpose %arg0 permutation = [0, 1, 2] : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  %2 = nn.transpose %x permutation = [0, 1, 2] : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  return
}

// -----

// broadcast adding leading dims and expanding size-1 dims.
// CHECK-LABEL: func.func @broadcast
func.func @broadcast(%x: tensor<4x1xf32>, %s: tensor<i1>) {
  // CHECK: nn.broadcast %arg0 : tensor<4x1xf32> -> tensor<2x4x8xf32>
  %0 = nn.broadcast %x : tensor<4x1xf32> -> tensor<2x4x8xf32>
  // CHECK: nn.broadcast %arg1 : tensor<i1> -> tensor<3x3xi1>
  %1 = nn.broadcast %s : tensor<i1> -> tensor<3x3xi1>
  return
}

// -----

// slice with unit and non-unit strides, and an empty range.
// CHECK-LABEL: func.func @slice
func.func @slice(%x: tensor<8x16xf32>) {
  // CHECK: nn.slice %arg0 starts = [0, 4] limits = [8, 12] strides = [1, 1] : tensor<8x16xf32> -> tensor<8x8xf32>
  %0 = nn.slice %x starts = [0, 4] limits = [8, 12] strides = [1, 1] : tensor<8x16xf32> -> tensor<8x8xf32>
  // CHECK: nn.slice %arg0 starts = [1, 0] limits = [8, 16] strides = [2, 3] : tensor<8x16xf32> -> tensor<4x6xf32>
  %1 = nn.slice %x starts = [1, 0] limits = [8, 16] strides = [2, 3] : tensor<8x16xf32> -> tensor<4x6xf32>
  // CHECK: nn.slice %arg0 starts = [3, 0] limits = [3, 16] strides = [1, 1] : tensor<8x16xf32> -> tensor<0x16xf32>
  %2 = nn.slice %x starts = [3, 0] limits = [3, 16] strides = [1, 1] : tensor<8x16xf32> -> tensor<0x16xf32>
  return
}

// -----

// concat of one, two and three inputs.
// CHECK-LABEL: func.func @concat
func.func @concat(%a: tensor<2x3xf32>, %b: tensor<2x5xf32>, %c: tensor<4x3xf32>) {
  // CHECK: nn.concat %arg0, %arg1 dim = 1 : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
  %0 = nn.concat %a, %b dim = 1 : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
  // CHECK: nn.concat %arg0, %arg2, %arg0 dim = 0 : (tensor<2x3xf32>, tensor<4x3xf32>, tensor<2x3xf32>) -> tensor<8x3xf32>
  %1 = nn.concat %a, %c, %a dim = 0 : (tensor<2x3xf32>, tensor<4x3xf32>, tensor<2x3xf32>) -> tensor<8x3xf32>
  // CHECK: nn.concat %arg0 dim = 0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = nn.concat %a dim = 0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// split into equal and unequal pieces, and into one piece.
// CHECK-LABEL: func.func @split
func.func @split(%x: tensor<4x12xf32>) {
  // CHECK: nn.split %arg0 dim = 1 : tensor<4x12xf32> -> tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
  %0:3 = nn.split %x dim = 1 : tensor<4x12xf32> -> tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
  // CHECK: nn.split %arg0 dim = 0 : tensor<4x12xf32> -> tensor<1x12xf32>, tensor<3x12xf32>
  %1:2 = nn.split %x dim = 0 : tensor<4x12xf32> -> tensor<1x12xf32>, tensor<3x12xf32>
  // CHECK: nn.split %arg0 dim = 0 : tensor<4x12xf32> -> tensor<4x12xf32>
  %2 = nn.split %x dim = 0 : tensor<4x12xf32> -> tensor<4x12xf32>
  return
}

// -----

// gather along the first, a middle and the last axis, with scalar and
// multi-dim indices.
// CHECK-LABEL: func.func @gather
func.func @gather(%d: tensor<5x6x7xf32>, %i: tensor<2x3xi64>, %s: tensor<i32>, %b: tensor<4xi1>,
                  %j: tensor<2xi32>) {
  // CHECK: nn.gather %arg0, %arg1 axis = 0 : (tensor<5x6x7xf32>, tensor<2x3xi64>) -> tensor<2x3x6x7xf32>
  %0 = nn.gather %d, %i axis = 0 : (tensor<5x6x7xf32>, tensor<2x3xi64>) -> tensor<2x3x6x7xf32>
  // CHECK: nn.gather %arg0, %arg1 axis = 1 : (tensor<5x6x7xf32>, tensor<2x3xi64>) -> tensor<5x2x3x7xf32>
  %1 = nn.gather %d, %i axis = 1 : (tensor<5x6x7xf32>, tensor<2x3xi64>) -> tensor<5x2x3x7xf32>
  // CHECK: nn.gather %arg0, %arg2 axis = 2 : (tensor<5x6x7xf32>, tensor<i32>) -> tensor<5x6xf32>
  %2 = nn.gather %d, %s axis = 2 : (tensor<5x6x7xf32>, tensor<i32>) -> tensor<5x6xf32>
  // CHECK: nn.gather %arg3, %arg4 axis = 0 : (tensor<4xi1>, tensor<2xi32>) -> tensor<2xi1>
  %3 = nn.gather %b, %j axis = 0 : (tensor<4xi1>, tensor<2xi32>) -> tensor<2xi1>
  return
}
