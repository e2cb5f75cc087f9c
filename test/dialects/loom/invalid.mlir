// RUN: loom-opt %s -split-input-file -verify-diagnostics

// Every rule of the loom dialect's attribute verifier
// (LoomDialect::verifyOperationAttribute and its argument/result hooks).

// loom.backward is an enum, not a string.
func.func @backward_string(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'loom.backward' must be #loom.backward<weight> or #loom.backward<input>, got "weight"}}
  %0 = nn.neg %x {loom.backward = "weight"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A backward kind other than weight or input does not parse.
func.func @backward_unknown(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{expected ::loom::BackwardKind to be one of: weight, input}}
  // expected-error @+1 {{failed to parse Loom_BackwardKindAttr}}
  %0 = nn.neg %x {loom.backward = #loom.backward<bias>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A microbatch is a non-negative i64.
func.func @microbatch_negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'loom.microbatch' must be a non-negative i64, got -1 : i64}}
  %0 = nn.neg %x {loom.microbatch = -1 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @microbatch_string(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'loom.microbatch' must be a non-negative i64, got "0"}}
  %0 = nn.neg %x {loom.microbatch = "0"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @stream_empty(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'loom.stream' must be a non-empty string, got ""}}
  %0 = nn.neg %x {loom.stream = ""} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// loom.name names step inputs and outputs, not ops.
func.func @name_on_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'loom.name' belongs on a function's arguments or results, not on an op}}
  %0 = nn.neg %x {loom.name = "y"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// An attribute with the loom prefix that the dialect does not define.
func.func @unknown(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{has an unknown loom attribute 'loom.microbatches'}}
  %0 = nn.neg %x {loom.microbatches = 2 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{'loom.name' must be a non-empty string, got 3 : i64}}
func.func @arg_name_type(%x: tensor<4xf32> {loom.name = 3 : i64}) {
  return
}

// -----

// expected-error @+1 {{argument 0 has 'loom.updates', which is not a loom argument attribute (only loom.name and loom.row_groups are)}}
func.func @updates_on_arg(%x: tensor<4xf32> {loom.updates = "x"}) {
  return
}

// -----

// expected-error @+1 {{'loom.updates' must be a non-empty string, got ""}}
func.func @updates_empty() -> (tensor<4xf32> {loom.updates = ""}) {
  %0 = nn.constant dense<0.0> : tensor<4xf32>
  return %0 : tensor<4xf32>
}
