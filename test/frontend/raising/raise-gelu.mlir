// RUN: loom-opt %s --loom-raise-gelu -split-input-file | FileCheck %s

// The tanh form as GPT-2 exports it: pow(x, 3) * 0.044715, + x,
// * sqrt(2/pi), tanh, + 1, times x * 0.5.
// CHECK-LABEL: func.func @tanh_form
// CHECK-SAME: (%[[X:.*]]: tensor<4x32xf32>)
// CHECK: %[[Y:.*]] = nn.gelu %[[X]] approximate = tanh : tensor<4x32xf32>
// CHECK-NOT: nn.tanh
// CHECK: return %[[Y]]
func.func @tanh_form(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %three = nn.constant dense<3.0> : tensor<f32>
  %k0 = nn.constant dense<4.471500e-02> : tensor<f32>
  %k1 = nn.constant dense<0.797884583> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %c = nn.pow %x, %three : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %d = nn.mul %c, %k0 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %e = nn.add %x, %d : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %f = nn.mul %e, %k1 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %t = nn.tanh %f : tensor<4x32xf32>
  %u = nn.add %t, %one : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %h = nn.mul %x, %half : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %y = nn.mul %h, %u : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// -----

// The tanh form with the factors reordered: x * x * x for the cube,
// 0.044715 on the left, 1 + tanh, 0.5 * (x * u) nested the other way.
// CHECK-LABEL: func.func @tanh_form_reordered
// CHECK-SAME: (%[[X:.*]]: tensor<4x32xf32>)
// CHECK: %[[Y:.*]] = nn.gelu %[[X]] approximate = tanh : tensor<4x32xf32>
// CHECK-NOT: nn.tanh
// CHECK: return %[[Y]]
func.func @tanh_form_reordered(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %k0 = nn.constant dense<4.471500e-02> : tensor<f32>
  %k1 = nn.constant dense<0.797884583> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %x2 = nn.mul %x, %x : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %c = nn.mul %x2, %x : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %d = nn.mul %k0, %c : (tensor<f32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %e = nn.add %d, %x : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %f = nn.mul %k1, %e : (tensor<f32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %t = nn.tanh %f : tensor<4x32xf32>
  %u = nn.add %one, %t : (tensor<f32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %h = nn.mul %x, %u : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %y = nn.mul %half, %h : (tensor<f32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// -----

// The erf form: x / sqrt(2), erf, 1 + ., times x * 0.5: nn.gelu with no
// approximation (the default, not printed).
// CHECK-LABEL: func.func @erf_form_div
// CHECK-SAME: (%[[X:.*]]: tensor<4x32xf32>)
// CHECK: %[[Y:.*]] = nn.gelu %[[X]] : tensor<4x32xf32>
// CHECK-NOT: nn.erf
// CHECK: return %[[Y]]
func.func @erf_form_div(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %r2 = nn.constant dense<1.41421354> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %a = nn.div %x, %r2 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %e = nn.erf %a : tensor<4x32xf32>
  %u = nn.add %one, %e : (tensor<f32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %h = nn.mul %x, %half : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %y = nn.mul %h, %u : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// -----

// The erf form with x * (1/sqrt(2)) and 0.5 applied last: (x * u) * 0.5.
// CHECK-LABEL: func.func @erf_form_mul
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>)
// CHECK: %[[Y:.*]] = nn.gelu %[[X]] : tensor<2x4x8xf32>
// CHECK-NOT: nn.erf
// CHECK: return %[[Y]]
func.func @erf_form_mul(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %r = nn.constant dense<0.707106769> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %a = nn.mul %x, %r : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %e = nn.erf %a : tensor<2x4x8xf32>
  %u = nn.add %e, %one : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %h = nn.mul %u, %x : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %y = nn.mul %h, %half : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// The halving written as a division by 2: x / 2 * (1 + erf(x / sqrt(2))).
// CHECK-LABEL: func.func @erf_form_div_two
// CHECK-SAME: (%[[X:.*]]: tensor<4x32xf32>)
// CHECK: %[[Y:.*]] = nn.gelu %[[X]] : tensor<4x32xf32>
// CHECK: return %[[Y]]
func.func @erf_form_div_two(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %r2 = nn.constant dense<1.41421354> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %two = nn.constant dense<2.0> : tensor<f32>
  %a = nn.div %x, %r2 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %e = nn.erf %a : tensor<4x32xf32>
  %u = nn.add %e, %one : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %h = nn.div %x, %two : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %y = nn.mul %h, %u : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// -----

// 0.6 instead of 0.5 in front: not GELU.
// CHECK-LABEL: func.func @wrong_half
// CHECK-NOT: nn.gelu
// CHECK: nn.erf
func.func @wrong_half(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %r2 = nn.constant dense<1.41421354> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.6> : tensor<f32>
  %a = nn.div %x, %r2 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %e = nn.erf %a : tensor<4x32xf32>
  %u = nn.add %one, %e : (tensor<f32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %h = nn.mul %x, %half : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %y = nn.mul %h, %u : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// -----

// 0.044716 instead of 0.044715 for the cubic coefficient: not GELU, even
// though the two differ by only 1e-6.
// CHECK-LABEL: func.func @wrong_cubic_coefficient
// CHECK-NOT: nn.gelu
// CHECK: nn.tanh
func.func @wrong_cubic_coefficient(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %three = nn.constant dense<3.0> : tensor<f32>
  %k0 = nn.constant dense<4.471600e-02> : tensor<f32>
  %k1 = nn.constant dense<0.797884583> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %c = nn.pow %x, %three : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %d = nn.mul %c, %k0 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %e = nn.add %x, %d : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %f = nn.mul %e, %k1 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %t = nn.tanh %f : tensor<4x32xf32>
  %u = nn.add %t, %one : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %h = nn.mul %x, %half : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %y = nn.mul %h, %u : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// -----

// sqrt(2/pi) replaced by 0.8: not GELU.
// CHECK-LABEL: func.func @wrong_tanh_scale
// CHECK-NOT: nn.gelu
// CHECK: nn.tanh
func.func @wrong_tanh_scale(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %three = nn.constant dense<3.0> : tensor<f32>
  %k0 = nn.constant dense<4.471500e-02> : tensor<f32>
  %k1 = nn.constant dense<0.8> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %c = nn.pow %x, %three : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %d = nn.mul %c, %k0 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %e = nn.add %x, %d : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %f = nn.mul %e, %k1 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %t = nn.tanh %f : tensor<4x32xf32>
  %u = nn.add %t, %one : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %h = nn.mul %x, %half : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %y = nn.mul %h, %u : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// -----

// The erf argument is x / 2, not x / sqrt(2): not GELU.
// CHECK-LABEL: func.func @wrong_erf_scale
// CHECK-NOT: nn.gelu
// CHECK: nn.erf
func.func @wrong_erf_scale(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %two = nn.constant dense<2.0> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %a = nn.div %x, %two : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %e = nn.erf %a : tensor<4x32xf32>
  %u = nn.add %one, %e : (tensor<f32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %h = nn.mul %x, %half : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %y = nn.mul %h, %u : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// -----

// 0.5 * y * (1 + erf(x / sqrt(2))) with y != x: not GELU.
// CHECK-LABEL: func.func @mismatched_operands
// CHECK-NOT: nn.gelu
// CHECK: nn.erf
func.func @mismatched_operands(%x: tensor<4x32xf32>, %y: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %r2 = nn.constant dense<1.41421354> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %a = nn.div %x, %r2 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %e = nn.erf %a : tensor<4x32xf32>
  %u = nn.add %one, %e : (tensor<f32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %h = nn.mul %y, %half : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %z = nn.mul %h, %u : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %z : tensor<4x32xf32>
}

// -----

// The cube is of y, not x: not GELU.
// CHECK-LABEL: func.func @cube_of_other
// CHECK-NOT: nn.gelu
// CHECK: nn.tanh
func.func @cube_of_other(%x: tensor<4x32xf32>, %y: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %three = nn.constant dense<3.0> : tensor<f32>
  %k0 = nn.constant dense<4.471500e-02> : tensor<f32>
  %k1 = nn.constant dense<0.797884583> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %c = nn.pow %y, %three : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %d = nn.mul %c, %k0 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %e = nn.add %x, %d : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %f = nn.mul %e, %k1 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %t = nn.tanh %f : tensor<4x32xf32>
  %u = nn.add %t, %one : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %h = nn.mul %x, %half : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %z = nn.mul %h, %u : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %z : tensor<4x32xf32>
}

// -----

// 1 - tanh instead of 1 + tanh (a sub): not GELU.
// CHECK-LABEL: func.func @one_minus_tanh
// CHECK-NOT: nn.gelu
// CHECK: nn.tanh
func.func @one_minus_tanh(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %three = nn.constant dense<3.0> : tensor<f32>
  %k0 = nn.constant dense<4.471500e-02> : tensor<f32>
  %k1 = nn.constant dense<0.797884583> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %c = nn.pow %x, %three : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %d = nn.mul %c, %k0 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %e = nn.add %x, %d : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %f = nn.mul %e, %k1 : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %t = nn.tanh %f : tensor<4x32xf32>
  %u = nn.sub %one, %t : (tensor<f32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  %h = nn.mul %x, %half : (tensor<4x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %z = nn.mul %h, %u : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %z : tensor<4x32xf32>
}
