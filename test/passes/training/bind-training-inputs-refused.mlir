// RUN: loom-opt %s --loom-bind-training-inputs --loom-build-training-step -verify-diagnostics

// An input of another name stays, and the training step refuses it by name.
// expected-error @+1 {{training feeds the forward token ids alone; its input 'pixel_values' is not one a training step can fill (attention_mask, position_ids, token_type_ids)}}
func.func @main(%ids: tensor<2x4xi64> {loom.name = "input_ids"},
                %pixels: tensor<2x4xf32> {loom.name = "pixel_values"}) -> tensor<2x4x8xf32> {
  %table = nn.parameter "wte" : tensor<16x8xf32>
  %h = nn.embedding %table, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  return %h : tensor<2x4x8xf32>
}
