// RUN: loom-opt %s -split-input-file -verify-diagnostics

// nn.assign writes parameters only.
func.func @assign_to_argument(%a: tensor<4xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'nn.assign' op assigns to a value that is not an nn.parameter}}
  nn.assign %a, %b : tensor<4xf32>
  return
}

// -----

// nn.assign keeps the parameter's type.
func.func @assign_other_type(%b: tensor<5xf32>) {
  // expected-note @+1 {{prior use here}}
  %p = nn.parameter "w" : tensor<4xf32>
  // expected-error @+1 {{use of value '%p' expects different type than prior uses: 'tensor<5xf32>' vs 'tensor<4xf32>'}}
  nn.assign %p, %b : tensor<5xf32>
  return
}

// -----

// AdamW updates f32 master weights.
func.func @adamw_bf16(%p: tensor<4xbf16>, %lr: tensor<f32>, %t: tensor<f32>) {
  // expected-error @+1 {{'nn.adamw' op updates f32 master weights, got 'bf16'}}
  %a, %b, %c = nn.adamw %p, %p, %p, %p, %lr, %t beta1 = 0.9 beta2 = 0.95 epsilon = 1.0e-08 weight_decay = 0.0 : tensor<4xbf16>
  return
}

// -----

// Betas lie in [0, 1).
func.func @adamw_beta(%p: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<f32>) {
  // expected-error @+1 {{'nn.adamw' op betas must be in [0, 1), got 1.000000e+00 and 9.500000e-01}}
  %a, %b, %c = nn.adamw %p, %p, %p, %p, %lr, %t beta1 = 1.0 beta2 = 0.95 epsilon = 1.0e-08 weight_decay = 0.0 : tensor<4xf32>
  return
}

// -----

// Epsilon positive, weight decay non-negative.
func.func @adamw_epsilon(%p: tensor<4xf32>, %lr: tensor<f32>, %t: tensor<f32>) {
  // expected-error @+1 {{'nn.adamw' op epsilon must be positive and weight decay non-negative}}
  %a, %b, %c = nn.adamw %p, %p, %p, %p, %lr, %t beta1 = 0.9 beta2 = 0.95 epsilon = 0.0 weight_decay = 0.0 : tensor<4xf32>
  return
}

// -----

// The learning rate is an f32 scalar.
func.func @adamw_lr_vector(%p: tensor<4xf32>, %lr: tensor<4xf32>, %t: tensor<f32>) {
  // expected-error @+1 {{operand #4 must be 0D tensor of 32-bit float values}}
  %a, %b, %c = "nn.adamw"(%p, %p, %p, %p, %lr, %t) {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-08 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}
