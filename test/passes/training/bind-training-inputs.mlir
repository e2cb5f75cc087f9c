// RUN: loom-opt %s --loom-bind-training-inputs -split-input-file -verify-diagnostics | FileCheck %s

// The inputs beside the token ids get their values for unpadded sequences
// and leave the signature: the mask ones, the positions 0..seq-1, the token
// types zeros.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[IDS:.*]]: tensor<2x4xi64> {loom.name = "input_ids"}) -> tensor<2x4x8xf32>
// CHECK-DAG: %[[MASK:.*]] = nn.constant dense<1> : tensor<2x4xi64>
// CHECK-DAG: %[[POS:.*]] = nn.iota dim = 1 : tensor<1x4xi64>
// CHECK-DAG: %[[TYPES:.*]] = nn.constant dense<0> : tensor<2x4xi64>
// CHECK-DAG: nn.cast %[[MASK]] : tensor<2x4xi64> -> tensor<2x4xf32>
// CHECK-DAG: nn.embedding %{{.*}}, %[[POS]]
// CHECK-DAG: nn.embedding %{{.*}}, %[[TYPES]]
func.func @main(%ids: tensor<2x4xi64> {loom.name = "input_ids"},
                %mask: tensor<2x4xi64> {loom.name = "attention_mask"},
                %pos: tensor<1x4xi64> {loom.name = "position_ids"},
                %types: tensor<2x4xi64> {loom.name = "token_type_ids"}) -> tensor<2x4x8xf32> {
  %table = nn.parameter "wte" : tensor<16x8xf32>
  %ptable = nn.parameter "wpe" : tensor<4x8xf32>
  %ttable = nn.parameter "wtt" : tensor<2x8xf32>
  %h = nn.embedding %table, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %p = nn.embedding %ptable, %pos : (tensor<4x8xf32>, tensor<1x4xi64>) -> tensor<1x4x8xf32>
  %t = nn.embedding %ttable, %types : (tensor<2x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %m = nn.cast %mask : tensor<2x4xi64> -> tensor<2x4xf32>
  %m3 = nn.reshape %m : tensor<2x4xf32> -> tensor<2x4x1xf32>
  %a = nn.add %h, %p : (tensor<2x4x8xf32>, tensor<1x4x8xf32>) -> tensor<2x4x8xf32>
  %b = nn.add %a, %t : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %c = nn.mul %b, %m3 : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  return %c : tensor<2x4x8xf32>
}

// -----

// A mask of another shape than the ids' (an additive [B, 1, S, S] mask) is
// an error naming it.
// expected-error @+1 {{training binds input 'attention_mask' to its value for unpadded sequences, which needs [batch, 4] like the token ids; it is 'tensor<2x1x4x4xf32>'}}
func.func @main(%ids: tensor<2x4xi64> {loom.name = "input_ids"},
                %mask: tensor<2x1x4x4xf32> {loom.name = "attention_mask"}) -> tensor<2x4x8xf32> {
  %table = nn.parameter "wte" : tensor<16x8xf32>
  %h = nn.embedding %table, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  return %h : tensor<2x4x8xf32>
}

// -----

// A mask of rank 0 (no rows to fill) is an error too, not a crash.
// expected-error @+1 {{training binds input 'attention_mask' to its value for unpadded sequences, which needs [batch, 4] like the token ids; it is 'tensor<i64>'}}
func.func @main(%ids: tensor<2x4xi64> {loom.name = "input_ids"},
                %mask: tensor<i64> {loom.name = "attention_mask"}) -> tensor<2x4x8xf32> {
  %table = nn.parameter "wte" : tensor<16x8xf32>
  %h = nn.embedding %table, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  return %h : tensor<2x4x8xf32>
}
