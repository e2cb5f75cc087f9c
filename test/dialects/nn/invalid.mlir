// RUN: loom-opt %s -split-input-file -verify-diagnostics

// Every verifier rule, type-inference failure and type constraint of the nn
// dialect, one per case.

//===----------------------------------------------------------------------===//
// Type constraints shared by all ops
//===----------------------------------------------------------------------===//

// Dynamic shapes are rejected: every nn tensor is statically shaped.
func.func @dynamic_shape(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point values}}
  %0 = nn.exp %x : tensor<?x8xf32>
  return
}

// -----

// Unranked tensors are rejected.
func.func @unranked(%x: tensor<*xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point or 32/64-bit integer values, but got 'tensor<*xf32>'}}
  %0 = "nn.neg"(%x) : (tensor<*xf32>) -> tensor<*xf32>
  return
}

// -----

// A float-only op rejects integers.
func.func @float_only_on_integer(%x: tensor<4xi32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point values}}
  %0 = nn.exp %x : tensor<4xi32>
  return
}

// -----

// Arithmetic rejects i1.
func.func @i1_arithmetic(%a: tensor<4xi1>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point or 32/64-bit integer values}}
  %0 = nn.add %a, %a : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  return
}

// -----

// Element types outside Loom's set (here i8) are rejected.
func.func @unsupported_element() {
  // expected-error @+1 {{result #0 must be statically shaped tensor of Loom element values}}
  %0 = nn.constant dense<1> : tensor<4xi8>
  return
}

// -----

// A unary op's result has its operand's type.
func.func @unary_result_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "nn.tanh"(%x) : (tensor<4xf32>) -> tensor<4xf16>
  return
}

// -----

// A constant's result has its value's type.
func.func @constant_type() {
  // expected-error @+1 {{'nn.constant' op failed to verify that all of {value, result} have same type}}
  %0 = "nn.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
  return
}

//===----------------------------------------------------------------------===//
// nn.parameter, nn.iota
//===----------------------------------------------------------------------===//

// -----

// A parameter needs a name.
func.func @parameter_empty_name() {
  // expected-error @+1 {{'nn.parameter' op needs a non-empty name}}
  %0 = nn.parameter "" : tensor<4xf32>
  return
}

// -----

// The initializer scale cannot be negative.
func.func @parameter_negative_scale() {
  // expected-error @+1 {{'nn.parameter' op init scale must be finite and non-negative, got -1}}
  %0 = nn.parameter "w" init(normal, -1.0) : tensor<4xf32>
  return
}

// -----

// The initializer scale cannot be NaN.
func.func @parameter_nan_scale() {
  // expected-error @+1 {{'nn.parameter' op init scale must be finite and non-negative, got NaN}}
  %0 = "nn.parameter"() <{name = "w", init_scale = 0x7FF8000000000000 : f64}> : () -> tensor<4xf32>
  return
}

// -----

// An imported value must have the parameter's type.
func.func @parameter_value_type() {
  // expected-error @+1 {{'nn.parameter' op value of type 'tensor<2xf32>' does not match the parameter's type 'tensor<4xf32>'}}
  %0 = nn.parameter "w" value(dense<1.0> : tensor<2xf32>) : tensor<4xf32>
  return
}

// -----

// Unknown initializer kinds are named.
func.func @parameter_bad_init() {
  // expected-error @+1 {{unknown initializer 'xavier' (expected zeros, ones, normal or uniform)}}
  %0 = nn.parameter "w" init(xavier, 0.1) : tensor<4xf32>
  return
}

// -----

// iota's dim must index the result.
func.func @iota_dim() {
  // expected-error @+1 {{dim 2 is out of range for a tensor of rank 2}}
  %0 = nn.iota dim = 2 : tensor<4x8xi64>
  return
}

// -----

// iota's dim cannot be negative.
func.func @iota_negative_dim() {
  // expected-error @+1 {{dim -1 is out of range for a tensor of rank 1}}
  %0 = nn.iota dim = -1 : tensor<4xf32>
  return
}

// -----

// An integer iota needs whole-number start and step.
func.func @iota_fractional_integer() {
  // expected-error @+1 {{'nn.iota' op start and step of an integer iota must be whole numbers, got start 0 and step 0.5}}
  %0 = nn.iota dim = 0 {step = 0.5 : f64} : tensor<4xi64>
  return
}

// -----

// iota's start and step must be finite.
func.func @iota_infinite() {
  // expected-error @+1 {{'nn.iota' op start and step must be finite}}
  %0 = nn.iota dim = 0 {start = 0x7FF0000000000000 : f64} : tensor<4xf32>
  return
}

// -----

// iota produces numbers, not i1.
func.func @iota_i1() {
  // expected-error @+1 {{result #0 must be statically shaped tensor of floating-point or 32/64-bit integer values, but got 'tensor<4xi1>'}}
  %0 = nn.iota dim = 0 : tensor<4xi1>
  return
}

// -----

// A parameter's init attribute is an initializer kind.
func.func @parameter_init_attr_type() {
  // expected-error @+1 {{Invalid attribute `init` in property conversion: 3 : i32}}
  %0 = "nn.parameter"() <{name = "w", init = 3 : i32}> : () -> tensor<4xf32>
  return
}

// -----

// The initializer scale is a number.
func.func @parameter_init_scale_syntax() {
  // expected-error @+1 {{expected floating point literal}}
  %0 = nn.parameter "w" init(normal, large) : tensor<4xf32>
  return
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// -----

// Binary operands must broadcast.
func.func @binary_broadcast(%a: tensor<4x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{operand shapes [4x3] and [4] are not broadcast-compatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.add %a, %b : (tensor<4x3xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  return
}

// -----

// Binary operands share an element type.
func.func @binary_element_types(%a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+1 {{requires the same element type for all operands and results}}
  %0 = nn.mul %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return
}

// -----

// The declared result type must be the inferred one.
func.func @binary_result_mismatch(%a: tensor<4x1xf32>, %b: tensor<8xf32>) {
  // expected-error @+2 {{'nn.sub' op inferred type(s) 'tensor<4x8xf32>' are incompatible with return type(s) of operation 'tensor<4x1xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.sub %a, %b : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x1xf32>
  return
}

// -----

// gelu's approximation is none or tanh.
func.func @gelu_bad_enum(%x: tensor<4xf32>) {
  // expected-error @+2 {{expected ::loom::nn::GeluApproximation to be one of: none, tanh}}
  // expected-error @+1 {{failed to parse NN_GeluApproximationAttr parameter 'value'}}
  %0 = nn.gelu %x approximate = fast : tensor<4xf32>
  return
}

// -----

// compare's predicate is one of eq, ne, lt, le, gt, ge.
func.func @compare_bad_predicate(%a: tensor<4xf32>) {
  // expected-error @+2 {{expected ::loom::nn::ComparePredicate to be one of: eq, ne, lt, le, gt, ge}}
  // expected-error @+1 {{failed to parse NN_ComparePredicateAttr parameter 'value'}}
  %0 = nn.compare lte, %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return
}

// -----

// compare's operands must broadcast.
func.func @compare_broadcast(%a: tensor<3xi64>, %b: tensor<4xi64>) {
  // expected-error @+2 {{operand shapes [3] and [4] are not broadcast-compatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.compare eq, %a, %b : (tensor<3xi64>, tensor<4xi64>) -> tensor<4xi1>
  return
}

// -----

// compare's operands share an element type.
func.func @compare_element_types(%a: tensor<4xi64>, %b: tensor<4xi32>) {
  // expected-error @+1 {{requires the same element type for all operands}}
  %0 = nn.compare eq, %a, %b : (tensor<4xi64>, tensor<4xi32>) -> tensor<4xi1>
  return
}

// -----

// compare gives i1.
func.func @compare_result_element(%a: tensor<4xf32>) {
  // expected-error @+1 {{result #0 must be statically shaped tensor of 1-bit signless integer values}}
  %0 = nn.compare lt, %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// where's condition is i1.
func.func @where_condition_type(%c: tensor<4xf32>, %a: tensor<4xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 1-bit signless integer values}}
  %0 = nn.where %c, %a, %a : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// where's branches share an element type.
func.func @where_branch_types(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xi64>) {
  // expected-error @+2 {{branches have different element types 'f32' and 'i64'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.where %c, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xi64>) -> tensor<4xf32>
  return
}

// -----

// where's condition and branches must broadcast together.
func.func @where_broadcast(%c: tensor<3xi1>, %a: tensor<4xf32>) {
  // expected-error @+2 {{condition [3] and branches [4], [4] are not broadcast-compatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.where %c, %a, %a : (tensor<3xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

// A cast keeps the shape.
func.func @cast_shape(%x: tensor<4xf32>) {
  // expected-error @+1 {{'nn.cast' op changes the shape from [4] to [2x2]; a cast keeps the shape}}
  %0 = nn.cast %x : tensor<4xf32> -> tensor<2x2xbf16>
  return
}

//===----------------------------------------------------------------------===//
// Contractions and reductions
//===----------------------------------------------------------------------===//

// -----

// matmul needs matrices.
func.func @matmul_rank(%a: tensor<4xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+2 {{operands must have rank >= 2, got ranks 1 and 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.matmul %a, %b : (tensor<4xf32>, tensor<4x8xf32>) -> tensor<8xf32>
  return
}

// -----

// A matmul's result is its operands' type, or f32 from bf16/f16: never
// narrower, and never f64 from f32.
func.func @matmul_result_type(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<4x16xf32>' are incompatible with return type(s) of operation 'tensor<4x16xbf16>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xbf16>
  return
}

// -----

func.func @matmul_result_f64(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<4x16xf32>' are incompatible with return type(s) of operation 'tensor<4x16xf64>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf64>
  return
}

// -----

// matmul's contracting dims must agree.
func.func @matmul_k(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+2 {{contracting dimensions differ: lhs [4x8] has K=8, rhs [4x8] has K=4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.matmul %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// The transposes decide which dim is K.
func.func @matmul_k_transposed(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+2 {{contracting dimensions differ: lhs [4x8] has K=8, rhs [8x16] has K=16}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.matmul %a, %b {transpose_rhs} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  return
}

// -----

// matmul's batch dims must broadcast.
func.func @matmul_batch(%a: tensor<2x4x8xf32>, %b: tensor<3x8x16xf32>) {
  // expected-error @+2 {{batch dimensions [2] and [3] are not broadcast-compatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.matmul %a, %b : (tensor<2x4x8xf32>, tensor<3x8x16xf32>) -> tensor<2x4x16xf32>
  return
}

// -----

// matmul is float-only.
func.func @matmul_integer(%a: tensor<4x8xi32>, %b: tensor<8x16xi32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point values}}
  %0 = nn.matmul %a, %b : (tensor<4x8xi32>, tensor<8x16xi32>) -> tensor<4x16xi32>
  return
}

// -----

// matmul's operands share an element type.
func.func @matmul_mixed(%a: tensor<4x8xf32>, %b: tensor<8x16xbf16>) {
  // expected-error @+1 {{requires the same element type for all operands}}
  %0 = nn.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xbf16>) -> tensor<4x16xf32>
  return
}

// -----

// matmul's declared result must be [..., M, N].
func.func @matmul_result(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<4x16xf32>' are incompatible with return type(s) of operation 'tensor<16x4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<16x4xf32>
  return
}

// -----

// Reduction dims must index the input.
func.func @reduce_dim(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{reduction dim 2 is out of range for a tensor of rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.reduce_sum %x dims = [2] : tensor<2x3xf32> -> tensor<2x3xf32>
  return
}

// -----

// Reduction dims cannot be negative.
func.func @reduce_negative_dim(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{reduction dim -1 is out of range for a tensor of rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.reduce_max %x dims = [-1] : tensor<2x3xf32> -> tensor<2xf32>
  return
}

// -----

// Reduction dims cannot repeat.
func.func @reduce_repeated(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{reduction dim 1 is repeated}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.reduce_mean %x dims = [1, 1] : tensor<2x3xf32> -> tensor<2xf32>
  return
}

// -----

// keepdim keeps reduced dims as 1.
func.func @reduce_keepdim_result(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<2x1xf32>' are incompatible with return type(s) of operation 'tensor<2xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.reduce_sum %x dims = [1] keepdim : tensor<2x3xf32> -> tensor<2xf32>
  return
}

// -----

// reduce_mean is float-only.
func.func @reduce_mean_integer(%x: tensor<2x3xi64>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point values}}
  %0 = nn.reduce_mean %x dims = [1] : tensor<2x3xi64> -> tensor<2xi64>
  return
}

// -----

// softmax's dim must index the input.
func.func @softmax_dim(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{dim 2 is out of range for a tensor of rank 2}}
  %0 = nn.softmax %x dim = 2 : tensor<2x3xf32>
  return
}

// -----

// log_softmax's dim must index the input.
func.func @log_softmax_dim(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{dim -1 is out of range for a tensor of rank 2}}
  %0 = nn.log_softmax %x dim = -1 : tensor<2x3xf32>
  return
}

// -----

// softmax is float-only.
func.func @softmax_integer(%x: tensor<2x3xi32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point values}}
  %0 = nn.softmax %x dim = 1 : tensor<2x3xi32>
  return
}

//===----------------------------------------------------------------------===//
// Transformer layers
//===----------------------------------------------------------------------===//

// -----

// layer_norm's weight is [D].
func.func @layer_norm_weight_shape(%x: tensor<2x64xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{'nn.layer_norm' op weight must have shape [64] (the input's last dim), got [32]}}
  %0 = nn.layer_norm %x, weight %w : (tensor<2x64xf32>, tensor<32xf32>) -> tensor<2x64xf32>
  return
}

// -----

// layer_norm's bias is [D], not [1, D].
func.func @layer_norm_bias_rank(%x: tensor<2x64xf32>, %b: tensor<1x64xf32>) {
  // expected-error @+1 {{'nn.layer_norm' op bias must have shape [64] (the input's last dim), got [1x64]}}
  %0 = nn.layer_norm %x, bias %b : (tensor<2x64xf32>, tensor<1x64xf32>) -> tensor<2x64xf32>
  return
}

// -----

// layer_norm's bias has the input's element type.
func.func @layer_norm_bias_type(%x: tensor<2x64xbf16>, %b: tensor<64xf32>) {
  // expected-error @+1 {{'nn.layer_norm' op bias element type 'f32' differs from the input's 'bf16'}}
  %0 = nn.layer_norm %x, bias %b : (tensor<2x64xbf16>, tensor<64xf32>) -> tensor<2x64xbf16>
  return
}

// -----

// layer_norm's weight has the input's element type.
func.func @layer_norm_weight_type(%x: tensor<2x64xf32>, %w: tensor<64xf16>) {
  // expected-error @+1 {{'nn.layer_norm' op weight element type 'f16' differs from the input's 'f32'}}
  %0 = nn.layer_norm %x, weight %w : (tensor<2x64xf32>, tensor<64xf16>) -> tensor<2x64xf32>
  return
}

// -----

// layer_norm's result has the input's type.
func.func @layer_norm_result(%x: tensor<2x64xf32>) {
  // expected-error @+1 {{'nn.layer_norm' op result type 'tensor<2x64xbf16>' must equal the input type 'tensor<2x64xf32>'}}
  %0 = nn.layer_norm %x : (tensor<2x64xf32>) -> tensor<2x64xbf16>
  return
}

// -----

// layer_norm's epsilon is non-negative.
func.func @layer_norm_epsilon(%x: tensor<2x64xf32>) {
  // expected-error @+1 {{'nn.layer_norm' op epsilon must be finite and non-negative, got -1}}
  %0 = nn.layer_norm %x epsilon = -1.0 : (tensor<2x64xf32>) -> tensor<2x64xf32>
  return
}

// -----

// layer_norm normalizes over the last dim, so a scalar has none.
func.func @layer_norm_rank0(%x: tensor<f32>) {
  // expected-error @+1 {{'nn.layer_norm' op input must have rank >= 1 (it is normalized over its last dim), got a rank-0 tensor}}
  %0 = nn.layer_norm %x : (tensor<f32>) -> tensor<f32>
  return
}

// -----

// layer_norm takes weight before bias.
func.func @layer_norm_operand_order(%x: tensor<2x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{expected 'weight' or 'bias' (in that order, each at most once), got 'weight'}}
  %0 = nn.layer_norm %x, bias %w, weight %w : (tensor<2x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  return
}

// -----

// rms_norm's weight is [D].
func.func @rms_norm_weight_shape(%x: tensor<2x64xf32>, %w: tensor<65xf32>) {
  // expected-error @+1 {{'nn.rms_norm' op weight must have shape [64] (the input's last dim), got [65]}}
  %0 = nn.rms_norm %x, weight %w : (tensor<2x64xf32>, tensor<65xf32>) -> tensor<2x64xf32>
  return
}

// -----

// rms_norm's weight has the input's element type.
func.func @rms_norm_weight_type(%x: tensor<2x64xbf16>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'nn.rms_norm' op weight element type 'f32' differs from the input's 'bf16'}}
  %0 = nn.rms_norm %x, weight %w : (tensor<2x64xbf16>, tensor<64xf32>) -> tensor<2x64xbf16>
  return
}

// -----

// rms_norm's result has the input's type.
func.func @rms_norm_result(%x: tensor<2x64xf32>) {
  // expected-error @+1 {{'nn.rms_norm' op result type 'tensor<64x2xf32>' must equal the input type 'tensor<2x64xf32>'}}
  %0 = nn.rms_norm %x : (tensor<2x64xf32>) -> tensor<64x2xf32>
  return
}

// -----

// rms_norm's epsilon cannot be NaN.
func.func @rms_norm_epsilon(%x: tensor<2x64xf32>) {
  // expected-error @+1 {{'nn.rms_norm' op epsilon must be finite and non-negative, got NaN}}
  %0 = nn.rms_norm %x epsilon = 0x7FF8000000000000 : (tensor<2x64xf32>) -> tensor<2x64xf32>
  return
}

// -----

// rms_norm needs a dim to normalize over.
func.func @rms_norm_rank0(%x: tensor<f32>) {
  // expected-error @+1 {{'nn.rms_norm' op input must have rank >= 1}}
  %0 = nn.rms_norm %x : (tensor<f32>) -> tensor<f32>
  return
}

// -----

// With transpose = input the result swaps dims -3 and -2 of the input.
func.func @rope_transpose_shape(%x: tensor<1x8x4x16xf32>, %c: tensor<8x16xf32>) {
  // expected-error @+1 {{'nn.rope' op with transpose = input the result must be 'tensor<1x4x8x16xf32>', got 'tensor<1x8x4x16xf32>'}}
  %0 = nn.rope %x, %c, %c transpose = input : (tensor<1x8x4x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<1x8x4x16xf32>
  return
}

// -----

// The tables follow the positions: dim -3 of a transpose = input operand.
func.func @rope_transpose_tables(%x: tensor<1x8x4x16xf32>, %c: tensor<4x16xf32>) {
  // expected-error @+1 {{'nn.rope' op cos must have shape [8x16] to match the input, got [4x16]}}
  %0 = nn.rope %x, %c, %c transpose = input : (tensor<1x8x4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<1x4x8x16xf32>
  return
}

// -----

func.func @rope_transpose_rank(%x: tensor<8x16xf32>, %c: tensor<8x16xf32>) {
  // expected-error @+1 {{'nn.rope' op transpose = result needs an input of rank >= 3, got 2}}
  %0 = nn.rope %x, %c, %c transpose = result : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return
}

// -----

// rope's input is [..., S, D].
func.func @rope_rank(%x: tensor<16xf32>, %c: tensor<1x16xf32>) {
  // expected-error @+1 {{'nn.rope' op input must be [..., S, D], got rank 1}}
  %0 = nn.rope %x, %c, %c : (tensor<16xf32>, tensor<1x16xf32>, tensor<1x16xf32>) -> tensor<16xf32>
  return
}

// -----

// rope rotates pairs, so D is even.
func.func @rope_odd(%x: tensor<8x15xf32>, %c: tensor<8x15xf32>) {
  // expected-error @+1 {{'nn.rope' op head dim 15 must be even}}
  %0 = nn.rope %x, %c, %c : (tensor<8x15xf32>, tensor<8x15xf32>, tensor<8x15xf32>) -> tensor<8x15xf32>
  return
}

// -----

// rope's cos is [S, D].
func.func @rope_cos_shape(%x: tensor<2x8x16xf32>, %c: tensor<8x8xf32>, %s: tensor<8x16xf32>) {
  // expected-error @+1 {{'nn.rope' op cos must have shape [8x16] to match the input, got [8x8]}}
  %0 = nn.rope %x, %c, %s : (tensor<2x8x16xf32>, tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

// rope's sin is [S, D].
func.func @rope_sin_shape(%x: tensor<2x8x16xf32>, %c: tensor<8x16xf32>, %s: tensor<2x8x16xf32>) {
  // expected-error @+1 {{'nn.rope' op sin must have shape [8x16] to match the input, got [2x8x16]}}
  %0 = nn.rope %x, %c, %s : (tensor<2x8x16xf32>, tensor<8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

// rope's sin has the input's element type.
func.func @rope_sin_type(%x: tensor<8x16xbf16>, %c: tensor<8x16xbf16>, %s: tensor<8x16xf32>) {
  // expected-error @+1 {{'nn.rope' op sin element type 'f32' differs from the input's 'bf16'}}
  %0 = nn.rope %x, %c, %s : (tensor<8x16xbf16>, tensor<8x16xbf16>, tensor<8x16xf32>) -> tensor<8x16xbf16>
  return
}

// -----

// rope's result has the input's type.
func.func @rope_result(%x: tensor<8x16xf32>, %c: tensor<8x16xf32>) {
  // expected-error @+1 {{'nn.rope' op result type 'tensor<8x16xf16>' must equal the input type 'tensor<8x16xf32>'}}
  %0 = nn.rope %x, %c, %c : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf16>
  return
}

// -----

// attention's operands are rank 4.
func.func @attention_rank(%q: tensor<8x16x32xf32>, %k: tensor<1x8x16x32xf32>) {
  // expected-error @+2 {{query, key and value must be rank 4 [batch, heads, seq, head_dim], got ranks 3, 4 and 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %k, %k : (tensor<8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<8x16x32xf32>
  return
}

// -----

// attention's operands share a batch size.
func.func @attention_batch(%q: tensor<2x8x16x32xf32>, %k: tensor<1x8x16x32xf32>) {
  // expected-error @+2 {{batch sizes differ: query 2, key 1, value 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %k, %k : (tensor<2x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<2x8x16x32xf32>
  return
}

// -----

// attention's key and value agree in heads and length.
func.func @attention_kv(%q: tensor<1x8x16x32xf32>, %k: tensor<1x8x16x32xf32>, %v: tensor<1x8x12x32xf32>) {
  // expected-error @+2 {{key [1x8x16x32] and value [1x8x12x32] must agree in heads and sequence length}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %k, %v : (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x12x32xf32>) -> tensor<1x8x16x32xf32>
  return
}

// -----

// Query heads are a multiple of KV heads.
func.func @attention_gqa(%q: tensor<1x8x16x32xf32>, %k: tensor<1x3x16x32xf32>) {
  // expected-error @+2 {{query heads (8) must be a multiple of key/value heads (3)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %k, %k : (tensor<1x8x16x32xf32>, tensor<1x3x16x32xf32>, tensor<1x3x16x32xf32>) -> tensor<1x8x16x32xf32>
  return
}

// -----

// Zero KV heads are rejected, not divided by.
func.func @attention_zero_heads(%q: tensor<1x8x16x32xf32>, %k: tensor<1x0x16x32xf32>) {
  // expected-error @+2 {{query heads (8) must be a multiple of key/value heads (0)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %k, %k : (tensor<1x8x16x32xf32>, tensor<1x0x16x32xf32>, tensor<1x0x16x32xf32>) -> tensor<1x8x16x32xf32>
  return
}

// -----

// query and key share a head dim.
func.func @attention_head_dim(%q: tensor<1x8x16x32xf32>, %k: tensor<1x8x16x64xf32>) {
  // expected-error @+2 {{query head dim 32 differs from key head dim 64}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %k, %k : (tensor<1x8x16x32xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>) -> tensor<1x8x16x64xf32>
  return
}

// -----

// attention's scale is positive.
func.func @attention_scale(%q: tensor<1x8x16x32xf32>) {
  // expected-error @+2 {{scale must be finite and positive, got 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %q, %q scale = 0.0 : (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<1x8x16x32xf32>
  return
}

// -----

// A sliding window only narrows a causal mask.
func.func @attention_window_not_causal(%q: tensor<1x8x16x32xf32>) {
  // expected-error @+2 {{a sliding window (window = 4) needs causal attention}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %q, %q window = 4 : (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<1x8x16x32xf32>
  return
}

// -----

func.func @attention_window_negative(%q: tensor<1x8x16x32xf32>) {
  // expected-error @+2 {{window must be positive (or 0 for none), got -2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %q, %q causal window = -2 : (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<1x8x16x32xf32>
  return
}

// -----

// Causal attention with fewer keys than queries leaves the first queries
// with no key to attend to.
func.func @attention_causal_short_kv(%q: tensor<1x8x16x32xf32>, %k: tensor<1x8x4x32xf32>) {
  // expected-error @+2 {{causal attention needs at least as many keys as queries, got 16 queries and 4 keys}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %k, %k causal : (tensor<1x8x16x32xf32>, tensor<1x8x4x32xf32>, tensor<1x8x4x32xf32>) -> tensor<1x8x16x32xf32>
  return
}

// -----

// attention's operands share an element type.
func.func @attention_element_type(%q: tensor<1x8x16x32xbf16>, %k: tensor<1x8x16x32xf32>) {
  // expected-error @+1 {{requires the same element type for all operands and results}}
  %0 = nn.attention %q, %k, %k : (tensor<1x8x16x32xbf16>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<1x8x16x32xbf16>
  return
}

// -----

// attention's result is [B, Hq, S, Dv].
func.func @attention_result(%q: tensor<1x8x16x32xf32>, %k: tensor<1x2x16x32xf32>, %v: tensor<1x2x16x64xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<1x8x16x64xf32>' are incompatible with return type(s) of operation 'tensor<1x8x16x32xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %k, %v : (tensor<1x8x16x32xf32>, tensor<1x2x16x32xf32>, tensor<1x2x16x64xf32>) -> tensor<1x8x16x32xf32>
  return
}

// -----

// embedding's table is [vocab, dim].
func.func @embedding_table(%t: tensor<100xf32>, %ids: tensor<4xi64>) {
  // expected-error @+2 {{table must be [vocab, dim], got [100]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.embedding %t, %ids : (tensor<100xf32>, tensor<4xi64>) -> tensor<4xf32>
  return
}

// -----

// embedding's ids are i32 or i64.
func.func @embedding_float_ids(%t: tensor<100x8xf32>, %ids: tensor<4xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of 32/64-bit integer values}}
  %0 = nn.embedding %t, %ids : (tensor<100x8xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  return
}

// -----

// embedding's table is float.
func.func @embedding_integer_table(%t: tensor<100x8xi64>, %ids: tensor<4xi64>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point values}}
  %0 = nn.embedding %t, %ids : (tensor<100x8xi64>, tensor<4xi64>) -> tensor<4x8xi64>
  return
}

// -----

// embedding's result is ids.shape + [dim].
func.func @embedding_result(%t: tensor<100x8xf32>, %ids: tensor<2x4xi64>) {
  // expected-error @+2 {{inferred type(s) 'tensor<2x4x8xf32>' are incompatible with return type(s) of operation 'tensor<8x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.embedding %t, %ids : (tensor<100x8xf32>, tensor<2x4xi64>) -> tensor<8x8xf32>
  return
}

// -----

// cross_entropy takes [N, C] logits and [N] labels.
func.func @cross_entropy_rank(%l: tensor<2x16x100xf32>, %y: tensor<2x16xi64>) {
  // expected-error @+2 {{logits must be [N, C] and labels [N], got [2x16x100] and [2x16]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.cross_entropy %l, %y : (tensor<2x16x100xf32>, tensor<2x16xi64>) -> tensor<f32>
  return
}

// -----

// cross_entropy's logits and labels have the same N.
func.func @cross_entropy_rows(%l: tensor<16x100xf32>, %y: tensor<8xi64>) {
  // expected-error @+2 {{logits have 16 rows but labels have 8}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.cross_entropy %l, %y : (tensor<16x100xf32>, tensor<8xi64>) -> tensor<f32>
  return
}

// -----

// reduction = none gives one loss per row.
func.func @cross_entropy_none_result(%l: tensor<16x100xf32>, %y: tensor<16xi64>) {
  // expected-error @+2 {{inferred type(s) 'tensor<16xf32>' are incompatible with return type(s) of operation 'tensor<f32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.cross_entropy %l, %y reduction = none : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<f32>
  return
}

// -----

// The loss is f32 whatever the logits' type.
func.func @cross_entropy_result_type(%l: tensor<16x100xbf16>, %y: tensor<16xi64>) {
  // expected-error @+1 {{result #0 must be statically shaped tensor of 32-bit float values}}
  %0 = nn.cross_entropy %l, %y : (tensor<16x100xbf16>, tensor<16xi64>) -> tensor<bf16>
  return
}

// -----

// cross_entropy's reduction is mean, sum or none.
func.func @cross_entropy_bad_reduction(%l: tensor<16x100xf32>, %y: tensor<16xi64>) {
  // expected-error @+2 {{expected ::loom::nn::LossReduction to be one of: mean, sum, none}}
  // expected-error @+1 {{failed to parse NN_LossReductionAttr parameter 'value'}}
  %0 = nn.cross_entropy %l, %y reduction = avg : (tensor<16x100xf32>, tensor<16xi64>) -> tensor<f32>
  return
}

// -----

// dropout's p is in [0, 1): p = 1 would divide by zero.
func.func @dropout_p_one(%x: tensor<4xf32>) {
  // expected-error @+1 {{'nn.dropout' op probability p must be in [0, 1), got 1}}
  %0 = nn.dropout %x p = 1.0 seed = 0 : tensor<4xf32>
  return
}

// -----

// dropout's p is not negative.
func.func @dropout_p_negative(%x: tensor<4xf32>) {
  // expected-error @+1 {{'nn.dropout' op probability p must be in [0, 1), got -0.1}}
  %0 = nn.dropout %x p = -0.1 seed = 0 : tensor<4xf32>
  return
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

// -----

// reshape keeps the element count.
func.func @reshape_count(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'nn.reshape' op cannot reshape [2x3] (6 elements) to [7] (7 elements)}}
  %0 = nn.reshape %x : tensor<2x3xf32> -> tensor<7xf32>
  return
}

// -----

// reshape keeps the element type.
func.func @reshape_element_type(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{requires the same element type for all operands and results}}
  %0 = nn.reshape %x : tensor<2x3xf32> -> tensor<6xbf16>
  return
}

// -----

// A permutation names each dim once.
func.func @transpose_repeated(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{permutation [0, 0] is not a permutation of the 2 dims of the input}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.transpose %x permutation = [0, 0] : tensor<2x3xf32> -> tensor<2x2xf32>
  return
}

// -----

// A permutation has one entry per dim.
func.func @transpose_length(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{permutation [1, 0, 2] is not a permutation of the 2 dims of the input}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.transpose %x permutation = [1, 0, 2] : tensor<2x3xf32> -> tensor<3x2xf32>
  return
}

// -----

// transpose's result is the permuted input shape.
func.func @transpose_result(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<3x2xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.transpose %x permutation = [1, 0] : tensor<2x3xf32> -> tensor<2x3xf32>
  return
}

// -----

// broadcast only expands size-1 dims and adds leading ones.
func.func @broadcast_shape(%x: tensor<4x3xf32>) {
  // expected-error @+1 {{'nn.broadcast' op cannot broadcast [4x3] to [4x6]}}
  %0 = nn.broadcast %x : tensor<4x3xf32> -> tensor<4x6xf32>
  return
}

// -----

// broadcast cannot drop dims.
func.func @broadcast_rank(%x: tensor<1x3xf32>) {
  // expected-error @+1 {{'nn.broadcast' op cannot broadcast [1x3] to [3]}}
  %0 = nn.broadcast %x : tensor<1x3xf32> -> tensor<3xf32>
  return
}

// -----

// slice needs one start, limit and stride per dim.
func.func @slice_arity(%x: tensor<8x16xf32>) {
  // expected-error @+2 {{starts, limits and strides need one entry per input dim (2), got 1, 2, 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.slice %x starts = [0] limits = [8, 16] strides = [1, 1] : tensor<8x16xf32> -> tensor<8x16xf32>
  return
}

// -----

// slice strides are positive.
func.func @slice_stride(%x: tensor<8x16xf32>) {
  // expected-error @+2 {{stride of dim 1 must be positive, got 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.slice %x starts = [0, 0] limits = [8, 16] strides = [1, 0] : tensor<8x16xf32> -> tensor<8x16xf32>
  return
}

// -----

// A slice's limit stays within the dim.
func.func @slice_limit(%x: tensor<8x16xf32>) {
  // expected-error @+2 {{dim 0: range [0, 9) is not within [0, 8]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.slice %x starts = [0, 0] limits = [9, 16] strides = [1, 1] : tensor<8x16xf32> -> tensor<9x16xf32>
  return
}

// -----

// A slice's start does not pass its limit.
func.func @slice_start(%x: tensor<8x16xf32>) {
  // expected-error @+2 {{dim 1: range [5, 4) is not within [0, 16]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.slice %x starts = [0, 5] limits = [8, 4] strides = [1, 1] : tensor<8x16xf32> -> tensor<8x0xf32>
  return
}

// -----

// A slice's start is not negative.
func.func @slice_negative_start(%x: tensor<8x16xf32>) {
  // expected-error @+2 {{dim 0: range [-1, 8) is not within [0, 8]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.slice %x starts = [-1, 0] limits = [8, 16] strides = [1, 1] : tensor<8x16xf32> -> tensor<9x16xf32>
  return
}

// -----

// slice's result size is ceil((limit - start) / stride).
func.func @slice_result(%x: tensor<8x16xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<3x16xf32>' are incompatible with return type(s) of operation 'tensor<2x16xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.slice %x starts = [0, 0] limits = [7, 16] strides = [3, 1] : tensor<8x16xf32> -> tensor<2x16xf32>
  return
}

// -----

// concat needs an input.
func.func @concat_empty() {
  // expected-error @+1 {{expected 1 or more operands}}
  %0 = "nn.concat"() <{dim = 0 : i64}> : () -> tensor<2xf32>
  return
}

// -----

// concat's dim indexes the inputs.
func.func @concat_dim(%a: tensor<2x3xf32>) {
  // expected-error @+2 {{dim 2 is out of range for a tensor of rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.concat %a, %a dim = 2 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// concat's inputs share a rank.
func.func @concat_rank(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+2 {{input 1 has rank 1, input 0 has rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.concat %a, %b dim = 0 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<5x3xf32>
  return
}

// -----

// concat's inputs agree outside the concatenated dim.
func.func @concat_shape(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+2 {{input 1 [2x4] differs from input 0 [2x3] outside the concatenated dim 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.concat %a, %b dim = 0 : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return
}

// -----

// concat's inputs share an element type.
func.func @concat_element_type(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) {
  // expected-error @+1 {{requires the same element type for all operands and results}}
  %0 = nn.concat %a, %b dim = 0 : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<4x3xf32>
  return
}

// -----

// split's dim indexes the input.
func.func @split_dim(%x: tensor<4x12xf32>) {
  // expected-error @+1 {{dim 2 is out of range for a tensor of rank 2}}
  %0:2 = nn.split %x dim = 2 : tensor<4x12xf32> -> tensor<4x6xf32>, tensor<4x6xf32>
  return
}

// -----

// split needs a result.
func.func @split_no_results(%x: tensor<4x12xf32>) {
  // expected-error @+1 {{expected 1 or more results}}
  "nn.split"(%x) <{dim = 0 : i64}> : (tensor<4x12xf32>) -> ()
  return
}

// -----

// split's results have the input's rank.
func.func @split_rank(%x: tensor<4x12xf32>) {
  // expected-error @+1 {{'nn.split' op result 1 has rank 1, the input has 2}}
  %0:2 = nn.split %x dim = 1 : tensor<4x12xf32> -> tensor<4x6xf32>, tensor<24xf32>
  return
}

// -----

// split's results agree with the input outside the split dim.
func.func @split_shape(%x: tensor<4x12xf32>) {
  // expected-error @+1 {{'nn.split' op result 0 [2x6] differs from the input [4x12] outside the split dim 1}}
  %0:2 = nn.split %x dim = 1 : tensor<4x12xf32> -> tensor<2x6xf32>, tensor<4x6xf32>
  return
}

// -----

// split's result sizes add up to the input's.
func.func @split_total(%x: tensor<4x12xf32>) {
  // expected-error @+1 {{'nn.split' op result sizes along dim 1 add up to 10, the input has 12}}
  %0:2 = nn.split %x dim = 1 : tensor<4x12xf32> -> tensor<4x6xf32>, tensor<4x4xf32>
  return
}

// -----

// gather's axis indexes the data.
func.func @gather_axis(%d: tensor<5x6xf32>, %i: tensor<2xi64>) {
  // expected-error @+2 {{axis 2 is out of range for a tensor of rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.gather %d, %i axis = 2 : (tensor<5x6xf32>, tensor<2xi64>) -> tensor<5x6xf32>
  return
}

// -----

// gather's indices are integers.
func.func @gather_float_indices(%d: tensor<5x6xf32>, %i: tensor<2xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of 32/64-bit integer values}}
  %0 = nn.gather %d, %i axis = 0 : (tensor<5x6xf32>, tensor<2xf32>) -> tensor<2x6xf32>
  return
}

// -----

// gather's result is data[:axis] + indices + data[axis+1:].
func.func @gather_result(%d: tensor<5x6xf32>, %i: tensor<2x3xi64>) {
  // expected-error @+2 {{inferred type(s) 'tensor<5x2x3xf32>' are incompatible with return type(s) of operation 'tensor<2x3x6xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.gather %d, %i axis = 1 : (tensor<5x6xf32>, tensor<2x3xi64>) -> tensor<2x3x6xf32>
  return
}

// -----

// attention_with_stats' statistics are f32 [B, Hq, S].
func.func @attention_with_stats_lse(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x6x8xf32>) {
  // expected-error @+1 {{'nn.attention_with_stats' op result #1 must be statically shaped tensor of 32-bit float values, but got 'tensor<1x4x6xbf16>'}}
  %0:2 = nn.attention_with_stats %q, %k, %k : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x4x6xbf16>)
  return
}

// -----

// attention_with_stats' statistics have one value per query row.
func.func @attention_with_stats_lse_shape(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x6x8xf32>) {
  // expected-error @+2 {{'nn.attention_with_stats' op inferred type(s) 'tensor<1x4x6x8xf32>', 'tensor<1x4x6xf32>' are incompatible with return type(s) of operation 'tensor<1x4x6x8xf32>', 'tensor<1x4x6x1xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = nn.attention_with_stats %q, %k, %k : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x4x6x1xf32>)
  return
}

// -----

// attention_with_stats takes the operands nn.attention takes.
func.func @attention_with_stats_causal(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x4x8xf32>) {
  // expected-error @+2 {{causal attention needs at least as many keys as queries, got 6 queries and 4 keys}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = nn.attention_with_stats %q, %k, %k causal : (tensor<1x4x6x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x4x6xf32>)
  return
}

// -----

// seq_major marks tensors of the op only: attention has four.
func.func @attention_seq_major_range(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x6x8xf32>) {
  // expected-error @+2 {{seq_major 16 names a tensor past the op's 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %k, %k {seq_major = 16 : i64} : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) -> tensor<1x4x6x8xf32>
  return
}

// -----

// The statistics have one layout.
func.func @attention_seq_major_lse(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x6x8xf32>) {
  // expected-error @+2 {{seq_major marks the statistics (tensor 4), which have one layout only}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = nn.attention_with_stats %q, %k, %k {seq_major = 16 : i64} : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x4x6xf32>)
  return
}

// -----

// A sequence-major value is [B, S, H, D]: here it is head-major.
func.func @attention_seq_major_shape(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x6x8xf32>) {
  // expected-error @+2 {{key [1x2x6x8] and value [1x6x2x8] must agree in heads and sequence length}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.attention %q, %k, %k {seq_major = 4 : i64} : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) -> tensor<1x4x6x8xf32>
  return
}

// -----

// A scale's shape must tile the tensor: 3 tiles of a power-of-two size
// cannot cover 200 columns exactly (128-element tiles make 2).
func.func @quantize_tiling(%x: tensor<4x200xbf16>, %s: tensor<4x3xf32>) {
  // expected-error @+1 {{'nn.quantize' op scale [4x3] does not tile the tensor [4x200]: dim 1 has 200 elements, which 3 tiles of a power-of-two size do not cover exactly}}
  %q = nn.quantize %x, %s : (tensor<4x200xbf16>, tensor<4x3xf32>) -> tensor<4x200xf8E4M3FN>
  return
}

// -----

// A scale is a scalar or has the tensor's rank.
func.func @dequantize_scale_rank(%q: tensor<4x128xf8E4M3FN>, %s: tensor<4xf32>) {
  // expected-error @+1 {{'nn.dequantize' op scale [4] must be a scalar or have the tensor's rank 2 (tensor [4x128])}}
  %x = nn.dequantize %q, %s : (tensor<4x128xf8E4M3FN>, tensor<4xf32>) -> tensor<4x128xbf16>
  return
}

// -----

// Quantize writes an FP8 type.
func.func @quantize_to_bf16(%x: tensor<4x128xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{'nn.quantize' op result #0 must be ranked tensor of f8E4M3FN type or f8E5M2 type values, but got 'tensor<4x128xbf16>'}}
  %q = nn.quantize %x, %s : (tensor<4x128xf32>, tensor<f32>) -> tensor<4x128xbf16>
  return
}

// -----

// The amax's tiling tiles the tensor too.
func.func @amax_tiling(%x: tensor<6x128xbf16>) {
  // expected-error @+1 {{'nn.amax' op result [4x1] does not tile the tensor [6x128]: dim 0 has 6 elements, which 4 tiles of a power-of-two size do not cover exactly}}
  %a = nn.amax %x : (tensor<6x128xbf16>) -> tensor<4x1xf32>
  return
}

// -----

// Only the two FP8 formats have scales.
func.func @fp8_scale_format(%a: tensor<f32>) {
  // expected-error @+1 {{'nn.fp8_scale' op format must be "e4m3" or "e5m2", got "e3m4"}}
  %s = nn.fp8_scale %a format = "e3m4" : tensor<f32>
  return
}

// -----

// No FP8 GEMM multiplies two e5m2 operands.
func.func @scaled_matmul_two_e5m2(%a: tensor<8x32xf8E5M2>, %b: tensor<4x32xf8E5M2>, %s: tensor<f32>) {
  // expected-error @+1 {{'nn.scaled_matmul' op takes at most one f8E5M2 operand (FP8 GEMMs do not multiply two)}}
  %y = nn.scaled_matmul %a, %b, %s, %s : (tensor<8x32xf8E5M2>, tensor<4x32xf8E5M2>, tensor<f32>, tensor<f32>) -> tensor<8x4xbf16>
  return
}

// -----

// The contracted dims agree.
func.func @scaled_matmul_k(%a: tensor<8x32xf8E4M3FN>, %b: tensor<4x16xf8E4M3FN>, %s: tensor<f32>) {
  // expected-error @+1 {{'nn.scaled_matmul' op contracted dims differ: lhs [8x32], rhs [4x16]}}
  %y = nn.scaled_matmul %a, %b, %s, %s : (tensor<8x32xf8E4M3FN>, tensor<4x16xf8E4M3FN>, tensor<f32>, tensor<f32>) -> tensor<8x4xbf16>
  return
}

// -----

// Along K the two scales have one tile, or tiles of one size.
func.func @scaled_matmul_k_tiles(%a: tensor<8x512xf8E4M3FN>, %b: tensor<4x512xf8E4M3FN>, %sa: tensor<8x4xf32>, %sb: tensor<4x2xf32>) {
  // expected-error @+1 {{'nn.scaled_matmul' op lhs_scale has 4 tiles along the contracted dim (512), rhs_scale 2: they must match, or one be a single tile}}
  %y = nn.scaled_matmul %a, %b, %sa, %sb : (tensor<8x512xf8E4M3FN>, tensor<4x512xf8E4M3FN>, tensor<8x4xf32>, tensor<4x2xf32>) -> tensor<8x4xbf16>
  return
}

// -----

// A tiled quantization's transposed copy has its own scales.
func.func @quantize_transposed_tiles(%x: tensor<8x256xbf16>, %s: tensor<8x1xf32>) {
  // expected-error @+1 {{'nn.quantize' op a transposed copy of a tiled quantization needs a transposed_scale}}
  %q, %qt = nn.quantize %x, %s : (tensor<8x256xbf16>, tensor<8x1xf32>) -> (tensor<8x256xf8E4M3FN>, tensor<256x8xf8E4M3FN>)
  return
}

// -----

// The transposed scale tiles the copy, not the input.
func.func @quantize_transposed_scale_shape(%x: tensor<8x256xbf16>, %s: tensor<8x1xf32>, %t: tensor<3x1xf32>) {
  // expected-error @+1 {{'nn.quantize' op transposed_scale [3x1] does not tile the tensor [256x8]: dim 0 has 256 elements, which 3 tiles of a power-of-two size do not cover exactly}}
  %q, %qt = nn.quantize %x, %s, %t : (tensor<8x256xbf16>, tensor<8x1xf32>, tensor<3x1xf32>) -> (tensor<8x256xf8E4M3FN>, tensor<256x8xf8E4M3FN>)
  return
}

// -----

// A grouped GEMM's weight is [E, K, N], or [E, N, K] with transpose_weight:
// its contracted dim agrees with the input's.
func.func @grouped_matmul_transposed_k(%x: tensor<96x32xf32>, %w: tensor<4x32x48xf32>, %o: tensor<4xi32>) {
  // expected-error @+1 {{'nn.grouped_matmul' op contracted dims differ: input [96x32], weight [4x32x48] (transposed)}}
  %y = nn.grouped_matmul %x, %w, %o {transpose_weight} : (tensor<96x32xf32>, tensor<4x32x48xf32>, tensor<4xi32>) -> tensor<96x32xf32>
  return
}

// -----

// A grouped weight gradient's result is in its operands' type, or f32 from
// bf16 or f16 (a widened result); nothing else.
func.func @grouped_wgrad_result_type(%x: tensor<96x32xf32>, %g: tensor<96x48xf32>, %o: tensor<4xi32>) -> tensor<4x32x48xbf16> {
  // expected-error @+1 {{'nn.grouped_matmul_weight_grad' op input, grad and result must have one element type (or an f32 result from bf16 or f16)}}
  %w = nn.grouped_matmul_weight_grad %x, %g, %o : (tensor<96x32xf32>, tensor<96x48xf32>, tensor<4xi32>) -> tensor<4x32x48xbf16>
  return %w : tensor<4x32x48xbf16>
}
