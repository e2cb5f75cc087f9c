// RUN: loom-opt %s --loom-raise-silu -split-input-file | FileCheck %s

// x * sigmoid(x) becomes nn.silu.
// CHECK-LABEL: func.func @silu
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK: %[[Y:.*]] = nn.silu %[[X]] : tensor<4x8xf32>
// CHECK-NOT: nn.sigmoid
// CHECK-NOT: nn.mul
// CHECK: return %[[Y]]
func.func @silu(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = nn.sigmoid %x : tensor<4x8xf32>
  %y = nn.mul %x, %s : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// sigmoid(x) * x, the operands swapped, is matched too.
// CHECK-LABEL: func.func @silu_swapped
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK: %[[Y:.*]] = nn.silu %[[X]] : tensor<4x8xf32>
// CHECK-NOT: nn.mul
// CHECK: return %[[Y]]
func.func @silu_swapped(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = nn.sigmoid %x : tensor<4x8xf32>
  %y = nn.mul %s, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// SwiGLU: silu(gate) * up; the outer multiplication stays as it is.
// CHECK-LABEL: func.func @swiglu
// CHECK-SAME: (%[[G:.*]]: tensor<2x8x64xbf16>, %[[U:.*]]: tensor<2x8x64xbf16>)
// CHECK: %[[S:.*]] = nn.silu %[[G]] : tensor<2x8x64xbf16>
// CHECK: %[[Y:.*]] = nn.mul %[[S]], %[[U]]
// CHECK: return %[[Y]]
func.func @swiglu(%g: tensor<2x8x64xbf16>, %u: tensor<2x8x64xbf16>) -> tensor<2x8x64xbf16> {
  %s = nn.sigmoid %g : tensor<2x8x64xbf16>
  %a = nn.mul %g, %s : (tensor<2x8x64xbf16>, tensor<2x8x64xbf16>) -> tensor<2x8x64xbf16>
  %y = nn.mul %a, %u : (tensor<2x8x64xbf16>, tensor<2x8x64xbf16>) -> tensor<2x8x64xbf16>
  return %y : tensor<2x8x64xbf16>
}

// -----

// The sigmoid's input stays in use elsewhere; only the product is replaced.
// CHECK-LABEL: func.func @sigmoid_with_other_use
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-DAG: %[[S:.*]] = nn.sigmoid %[[X]]
// CHECK-DAG: %[[Y:.*]] = nn.silu %[[X]]
// CHECK: return %[[Y]], %[[S]]
func.func @sigmoid_with_other_use(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %s = nn.sigmoid %x : tensor<4x8xf32>
  %y = nn.mul %x, %s : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y, %s : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// x * sigmoid(y) with y != x is not SiLU: nothing is raised.
// CHECK-LABEL: func.func @mismatched_operands
// CHECK-NOT: nn.silu
// CHECK: nn.sigmoid
// CHECK: nn.mul
func.func @mismatched_operands(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = nn.sigmoid %y : tensor<4x8xf32>
  %z = nn.mul %x, %s : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %z : tensor<4x8xf32>
}

// -----

// x * tanh(x) (mish-like) is not SiLU.
// CHECK-LABEL: func.func @not_sigmoid
// CHECK-NOT: nn.silu
// CHECK: nn.tanh
func.func @not_sigmoid(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = nn.tanh %x : tensor<4x8xf32>
  %z = nn.mul %x, %s : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %z : tensor<4x8xf32>
}
