// RUN: loom-opt %s -split-input-file -verify-diagnostics

// Every verifier rule and type-inference failure of the backward ops, one
// per case.

// pad needs one low, high and interior entry per dim.
func.func @pad_entries(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{low, high and interior need one entry per input dim (2), got 1, 2, 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.pad %x low = [1] high = [0, 0] interior = [0, 0] : tensor<2x3xf32> -> tensor<3x3xf32>
  return
}

// -----

// pad's padding is non-negative (a negative one would crop).
func.func @pad_negative(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{dim 1: padding must be non-negative, got low -1, high 0, interior 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.pad %x low = [0, -1] high = [0, 0] interior = [0, 0] : tensor<2x3xf32> -> tensor<2x2xf32>
  return
}

// -----

// pad's result type is the padded shape.
func.func @pad_result(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{'nn.pad' op inferred type(s) 'tensor<3x7xf32>' are incompatible with return type(s) of operation 'tensor<3x6xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.pad %x low = [1, 0] high = [0, 2] interior = [0, 1] : tensor<2x3xf32> -> tensor<3x6xf32>
  return
}

// -----

// An integer tensor is padded with a whole number.
func.func @pad_fraction(%x: tensor<2xi32>) {
  // expected-error @+1 {{padding value 0.5 is not a value of the element type 'i32'}}
  %0 = nn.pad %x low = [1] high = [0] interior = [0] value = 0.5 : tensor<2xi32> -> tensor<3xi32>
  return
}

// -----

// An i1 tensor is padded with 0 or 1.
func.func @pad_bool(%x: tensor<2xi1>) {
  // expected-error @+1 {{padding value 2 is not a value of the element type 'i1'}}
  %0 = nn.pad %x low = [1] high = [0] interior = [0] value = 2.0 : tensor<2xi1> -> tensor<3xi1>
  return
}

// -----

// gelu_grad's input, gradient and result share one type.
func.func @gelu_grad_types(%x: tensor<4xf32>, %dy: tensor<4xbf16>) {
  // expected-error @+1 {{failed to verify that all of {input, grad, result} have same type}}
  %0 = "nn.gelu_grad"(%x, %dy) : (tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
  return
}

// -----

// silu_grad is for floats.
func.func @silu_grad_integer(%x: tensor<4xi64>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point values}}
  %0 = nn.silu_grad %x, %x : tensor<4xi64>
  return
}

// -----

// layer_norm_grad's weight is [D].
func.func @layer_norm_grad_weight(%x: tensor<2x8xf32>, %w: tensor<4xf32>) {
  // expected-error @+1 {{weight must have shape [8] (the input's last dim), got [4]}}
  %0 = nn.layer_norm_grad %x, %x, weight %w : (tensor<2x8xf32>, tensor<2x8xf32>, tensor<4xf32>) -> tensor<2x8xf32>
  return
}

// -----

// layer_norm_grad's gradient has the input's type.
func.func @layer_norm_grad_grad(%x: tensor<2x8xf32>, %dy: tensor<2x4xf32>) {
  // expected-error @+1 {{failed to verify that all of {input, grad, result} have same type}}
  %0 = nn.layer_norm_grad %x, %dy : (tensor<2x8xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  return
}

// -----

// rms_norm_grad's epsilon is finite and non-negative.
func.func @rms_norm_grad_epsilon(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{epsilon must be finite and non-negative, got -0.5}}
  %0 = nn.rms_norm_grad %x, %x epsilon = -0.5 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

// rms_norm_grad normalizes over a last dim, so the input has one.
func.func @rms_norm_grad_scalar(%x: tensor<f32>) {
  // expected-error @+1 {{input must have rank >= 1}}
  %0 = nn.rms_norm_grad %x, %x : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return
}

// -----

// rms_norm_grad's weight has the input's element type.
func.func @rms_norm_grad_weight_type(%x: tensor<2x8xf32>, %w: tensor<8xbf16>) {
  // expected-error @+1 {{weight element type 'bf16' differs from the input's 'f32'}}
  %0 = nn.rms_norm_grad %x, %x, weight %w : (tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xbf16>) -> tensor<2x8xf32>
  return
}

// -----

// attention_grad accepts the operands nn.attention accepts.
func.func @attention_grad_heads(%q: tensor<1x8x16x32xf32>, %k: tensor<1x3x16x32xf32>, %do: tensor<1x8x16x32xf32>) {
  // expected-error @+2 {{query heads (8) must be a multiple of key/value heads (3)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = nn.attention_grad %q, %k, %k, %do : (tensor<1x8x16x32xf32>, tensor<1x3x16x32xf32>, tensor<1x3x16x32xf32>, tensor<1x8x16x32xf32>) -> (tensor<1x8x16x32xf32>, tensor<1x3x16x32xf32>, tensor<1x3x16x32xf32>)
  return
}

// -----

// attention_grad's gradient has the attention result's type.
func.func @attention_grad_grad(%q: tensor<1x2x4x8xf32>, %kv: tensor<1x2x6x8xf32>, %do: tensor<1x2x6x8xf32>) {
  // expected-error @+2 {{grad has type 'tensor<1x2x6x8xf32>'; the attention's result, whose gradient it is, has type 'tensor<1x2x4x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = nn.attention_grad %q, %kv, %kv, %do : (tensor<1x2x4x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>)
  return
}

// -----

// Causal attention_grad needs as many keys as queries, like the forward.
func.func @attention_grad_causal(%q: tensor<1x2x8x4xf32>, %kv: tensor<1x2x4x4xf32>) {
  // expected-error @+2 {{causal attention needs at least as many keys as queries, got 8 queries and 4 keys}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = nn.attention_grad %q, %kv, %kv, %q causal : (tensor<1x2x8x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>)
  return
}

// -----

// attention_grad_with_stats' statistics are f32, whatever the operands' type.
func.func @attention_stats_dtype(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x6x8xf32>, %o: tensor<1x4x6x8xf32>, %lse: tensor<1x4x6xf16>, %do: tensor<1x4x6x8xf32>) {
  // expected-error @+1 {{'nn.attention_grad_with_stats' op operand #4 must be statically shaped tensor of 32-bit float values, but got 'tensor<1x4x6xf16>'}}
  %0:3 = nn.attention_grad_with_stats %q, %k, %k, %o, %lse, %do : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x4x6x8xf32>, tensor<1x4x6xf16>, tensor<1x4x6x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>)
  return
}

// -----

// attention_grad_with_stats' statistics have one value per query row.
func.func @attention_stats_shape(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x6x8xf32>, %o: tensor<1x4x6x8xf32>, %lse: tensor<1x4x6x1xf32>, %do: tensor<1x4x6x8xf32>) {
  // expected-error @+2 {{lse has type 'tensor<1x4x6x1xf32>'; the attention's statistics (f32, [batch, heads, seq]) have type 'tensor<1x4x6xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = nn.attention_grad_with_stats %q, %k, %k, %o, %lse, %do : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x4x6x8xf32>, tensor<1x4x6x1xf32>, tensor<1x4x6x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>)
  return
}

// -----

// attention_grad_with_stats' saved output is the attention's result.
func.func @attention_stats_out(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x6x8xf32>, %o: tensor<1x4x6x4xf32>, %lse: tensor<1x4x6xf32>, %do: tensor<1x4x6x8xf32>) {
  // expected-error @+2 {{out has type 'tensor<1x4x6x4xf32>'; the attention's result has type 'tensor<1x4x6x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = nn.attention_grad_with_stats %q, %k, %k, %o, %lse, %do : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x4x6x4xf32>, tensor<1x4x6xf32>, tensor<1x4x6x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x2x6x8xf32>, tensor<1x2x6x8xf32>)
  return
}

// -----

// attention_grad_with_stats takes the operands nn.attention takes (grouped
// heads divide the query heads).
func.func @attention_stats_heads(%q: tensor<1x4x6x8xf32>, %k: tensor<1x3x6x8xf32>, %o: tensor<1x4x6x8xf32>, %lse: tensor<1x4x6xf32>, %do: tensor<1x4x6x8xf32>) {
  // expected-error @+2 {{query heads (4) must be a multiple of key/value heads (3)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = nn.attention_grad_with_stats %q, %k, %k, %o, %lse, %do : (tensor<1x4x6x8xf32>, tensor<1x3x6x8xf32>, tensor<1x3x6x8xf32>, tensor<1x4x6x8xf32>, tensor<1x4x6xf32>, tensor<1x4x6x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x3x6x8xf32>, tensor<1x3x6x8xf32>)
  return
}

// -----

// attention_grad_with_stats' q, k and v share an element type.
func.func @attention_stats_types(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x6x8xbf16>, %o: tensor<1x4x6x8xf32>, %lse: tensor<1x4x6xf32>, %do: tensor<1x4x6x8xf32>) {
  // expected-error @+2 {{query, key and value must share an element type, got 'f32', 'bf16' and 'bf16'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = nn.attention_grad_with_stats %q, %k, %k, %o, %lse, %do : (tensor<1x4x6x8xf32>, tensor<1x2x6x8xbf16>, tensor<1x2x6x8xbf16>, tensor<1x4x6x8xf32>, tensor<1x4x6xf32>, tensor<1x4x6x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x2x6x8xbf16>, tensor<1x2x6x8xbf16>)
  return
}

// -----

// embedding_grad's table has rows.
func.func @embedding_grad_rows(%ids: tensor<4xi64>, %dy: tensor<4x8xf32>) {
  // expected-error @+2 {{num_embeddings must be positive, got 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.embedding_grad %ids, %dy num_embeddings = 0 : (tensor<4xi64>, tensor<4x8xf32>) -> tensor<0x8xf32>
  return
}

// -----

// embedding_grad's gradient is the ids' shape plus the row width.
func.func @embedding_grad_shape(%ids: tensor<2x4xi64>, %dy: tensor<4x8xf32>) {
  // expected-error @+2 {{grad [4x8] must be the ids' shape [2x4] followed by the embedding dim}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.embedding_grad %ids, %dy num_embeddings = 10 : (tensor<2x4xi64>, tensor<4x8xf32>) -> tensor<10x8xf32>
  return
}

// -----

// embedding_grad's ids are integers.
func.func @embedding_grad_ids(%ids: tensor<4xf32>, %dy: tensor<4x8xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32/64-bit integer values}}
  %0 = nn.embedding_grad %ids, %dy num_embeddings = 10 : (tensor<4xf32>, tensor<4x8xf32>) -> tensor<10x8xf32>
  return
}

// -----

// gather_grad's gradient holds the indices' shape at the axis.
func.func @gather_grad_shape(%idx: tensor<3xi64>, %dy: tensor<4x2x5xf32>) {
  // expected-error @+2 {{grad [4x2x5] must hold the indices' shape [3] at dim 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.gather_grad %idx, %dy axis = 1 axis_size = 10 : (tensor<3xi64>, tensor<4x2x5xf32>) -> tensor<4x10x5xf32>
  return
}

// -----

// gather_grad's axis has a size.
func.func @gather_grad_size(%idx: tensor<3xi64>, %dy: tensor<3x5xf32>) {
  // expected-error @+2 {{axis_size must be positive, got 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.gather_grad %idx, %dy axis = 0 axis_size = 0 : (tensor<3xi64>, tensor<3x5xf32>) -> tensor<0x5xf32>
  return
}

// -----

// cross_entropy_grad's gradient is the loss's type: a scalar for mean.
func.func @cross_entropy_grad_mean(%logits: tensor<4x10xf32>, %labels: tensor<4xi64>, %dl: tensor<4xf32>) {
  // expected-error @+2 {{grad has type 'tensor<4xf32>'; the loss has type 'tensor<f32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.cross_entropy_grad %logits, %labels, %dl : (tensor<4x10xf32>, tensor<4xi64>, tensor<4xf32>) -> tensor<4x10xf32>
  return
}

// -----

// cross_entropy_grad's gradient is per row for `none`.
func.func @cross_entropy_grad_none(%logits: tensor<4x10xf32>, %labels: tensor<4xi64>, %dl: tensor<f32>) {
  // expected-error @+2 {{grad has type 'tensor<f32>'; the loss has type 'tensor<4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.cross_entropy_grad %logits, %labels, %dl reduction = none : (tensor<4x10xf32>, tensor<4xi64>, tensor<f32>) -> tensor<4x10xf32>
  return
}

// -----

// cross_entropy_grad checks logits and labels as the forward does.
func.func @cross_entropy_grad_rows(%logits: tensor<4x10xf32>, %labels: tensor<3xi64>, %dl: tensor<f32>) {
  // expected-error @+2 {{logits have 4 rows but labels have 3}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.cross_entropy_grad %logits, %labels, %dl : (tensor<4x10xf32>, tensor<3xi64>, tensor<f32>) -> tensor<4x10xf32>
  return
}

// -----

// cross_entropy_grad's result has the logits' type.
func.func @cross_entropy_grad_result(%logits: tensor<4x10xbf16>, %labels: tensor<4xi64>, %dl: tensor<f32>) {
  // expected-error @+2 {{'nn.cross_entropy_grad' op inferred type(s) 'tensor<4x10xbf16>' are incompatible with return type(s) of operation 'tensor<4x10xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.cross_entropy_grad %logits, %labels, %dl : (tensor<4x10xbf16>, tensor<4xi64>, tensor<f32>) -> tensor<4x10xf32>
  return
}

// -----

// The vocabulary-parallel loss's statistics are [N, 3 * blocks].
func.func @cross_entropy_combine_stats(%stats: tensor<4x4xf32>, %labels: tensor<4xi64>) {
  // expected-error @+2 {{stats must be [N, 3 * blocks] and labels [N], got [4x4] and [4]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.cross_entropy_combine %stats, %labels : (tensor<4x4xf32>, tensor<4xi64>) -> tensor<f32>
  return
}

// -----

// A block's gradient reads statistics of as many rows as its logits.
func.func @cross_entropy_block_grad_rows(%logits: tensor<4x10xf32>, %labels: tensor<4xi64>, %dl: tensor<f32>, %stats: tensor<2x6xf32>) {
  // expected-error @+2 {{stats have 2 rows but labels have 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.cross_entropy_block_grad %logits, %labels, %dl, %stats : (tensor<4x10xf32>, tensor<4xi64>, tensor<f32>, tensor<2x6xf32>) -> tensor<4x10xf32>
  return
}

// -----

// cross_entropy_stats reads [N, C] logits and [N] labels.
func.func @cross_entropy_stats_labels(%logits: tensor<4x10xf32>, %labels: tensor<3xi64>) {
  // expected-error @+2 {{logits have 4 rows but labels have 3}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = nn.cross_entropy_stats %logits, %labels : (tensor<4x10xf32>, tensor<3xi64>) -> tensor<4x3xf32>
  return
}
