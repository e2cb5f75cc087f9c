// RUN: loom-opt %s -split-input-file | FileCheck %s
// RUN: loom-opt %s -split-input-file | loom-opt -split-input-file | FileCheck %s
// RUN: loom-opt %s -split-input-file --mlir-print-op-generic | loom-opt -split-input-file | FileCheck %s

// Round trip of the backward ops the gradient rules build
// (dialects/nn/NNGradients.cpp), through the custom printer, a re-parse of
// the printed form, and the generic form.

// pad: low/high/interior per dim, an optional padding value; any element type.
// CHECK-LABEL: func.func @pad
func.func @pad(%x: tensor<2x3xf32>, %i: tensor<2xi64>, %e: tensor<0x2xbf16>) {
  // CHECK: nn.pad %arg0 low = [1, 0] high = [0, 2] interior = [0, 1] : tensor<2x3xf32> -> tensor<3x7xf32>
  %0 = nn.pad %x low = [1, 0] high = [0, 2] interior = [0, 1] : tensor<2x3xf32> -> tensor<3x7xf32>
  // CHECK: nn.pad %arg1 low = [2] high = [1] interior = [3] value = 7.000000e+00 : tensor<2xi64> -> tensor<8xi64>
  %1 = nn.pad %i low = [2] high = [1] interior = [3] value = 7.0 : tensor<2xi64> -> tensor<8xi64>
  // An empty dim gets no interior padding.
  // CHECK: nn.pad %arg2 low = [1, 0] high = [1, 0] interior = [4, 0] : tensor<0x2xbf16> -> tensor<2x2xbf16>
  %2 = nn.pad %e low = [1, 0] high = [1, 0] interior = [4, 0] : tensor<0x2xbf16> -> tensor<2x2xbf16>
  return
}

// -----

// gelu_grad (both forms) and silu_grad.
// CHECK-LABEL: func.func @activation_grads
func.func @activation_grads(%x: tensor<4x8xf32>, %dy: tensor<4x8xf32>) {
  // CHECK: nn.gelu_grad %arg0, %arg1 : tensor<4x8xf32>
  %0 = nn.gelu_grad %x, %dy : tensor<4x8xf32>
  // CHECK: nn.gelu_grad %arg0, %arg1 approximate = tanh : tensor<4x8xf32>
  %1 = nn.gelu_grad %x, %dy approximate = tanh : tensor<4x8xf32>
  // CHECK: nn.silu_grad %arg0, %arg1 : tensor<4x8xf32>
  %2 = nn.silu_grad %x, %dy : tensor<4x8xf32>
  return
}

// -----

// layer_norm_grad and rms_norm_grad, with and without weight.
// CHECK-LABEL: func.func @norm_grads
func.func @norm_grads(%x: tensor<2x8x64xbf16>, %dy: tensor<2x8x64xbf16>, %w: tensor<64xbf16>) {
  // CHECK: nn.layer_norm_grad %arg0, %arg1, weight %arg2 epsilon = 1.000000e-03 : (tensor<2x8x64xbf16>, tensor<2x8x64xbf16>, tensor<64xbf16>) -> tensor<2x8x64xbf16>
  %0 = nn.layer_norm_grad %x, %dy, weight %w epsilon = 1.0e-03 : (tensor<2x8x64xbf16>, tensor<2x8x64xbf16>, tensor<64xbf16>) -> tensor<2x8x64xbf16>
  // CHECK: nn.layer_norm_grad %arg0, %arg1 : (tensor<2x8x64xbf16>, tensor<2x8x64xbf16>) -> tensor<2x8x64xbf16>
  %1 = nn.layer_norm_grad %x, %dy : (tensor<2x8x64xbf16>, tensor<2x8x64xbf16>) -> tensor<2x8x64xbf16>
  // CHECK: nn.rms_norm_grad %arg0, %arg1, weight %arg2 : (tensor<2x8x64xbf16>, tensor<2x8x64xbf16>, tensor<64xbf16>) -> tensor<2x8x64xbf16>
  %2 = nn.rms_norm_grad %x, %dy, weight %w : (tensor<2x8x64xbf16>, tensor<2x8x64xbf16>, tensor<64xbf16>) -> tensor<2x8x64xbf16>
  // CHECK: nn.rms_norm_grad %arg0, %arg1 epsilon = 1.000000e-05 : (tensor<2x8x64xbf16>, tensor<2x8x64xbf16>) -> tensor<2x8x64xbf16>
  %3 = nn.rms_norm_grad %x, %dy epsilon = 1.0e-05 : (tensor<2x8x64xbf16>, tensor<2x8x64xbf16>) -> tensor<2x8x64xbf16>
  return
}

// -----

// attention_grad: plain, and causal with grouped KV heads, a value head dim
// of its own and an explicit scale.
// CHECK-LABEL: func.func @attention_grad
func.func @attention_grad(%q: tensor<1x8x16x32xf32>, %k: tensor<1x8x16x32xf32>,
                          %kg: tensor<1x2x20x32xf32>, %vg: tensor<1x2x20x64xf32>,
                          %do: tensor<1x8x16x32xf32>, %dog: tensor<1x8x16x64xf32>) {
  // CHECK: nn.attention_grad %arg0, %arg1, %arg1, %arg4 : (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>)
  %0:3 = nn.attention_grad %q, %k, %k, %do : (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> (tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>)
  // CHECK: nn.attention_grad %arg0, %arg2, %arg3, %arg5 causal scale = 1.250000e-01 : (tensor<1x8x16x32xf32>, tensor<1x2x20x32xf32>, tensor<1x2x20x64xf32>, tensor<1x8x16x64xf32>) -> (tensor<1x8x16x32xf32>, tensor<1x2x20x32xf32>, tensor<1x2x20x64xf32>)
  %1:3 = nn.attention_grad %q, %kg, %vg, %dog causal scale = 0.125 : (tensor<1x8x16x32xf32>, tensor<1x2x20x32xf32>, tensor<1x2x20x64xf32>, tensor<1x8x16x64xf32>) -> (tensor<1x8x16x32xf32>, tensor<1x2x20x32xf32>, tensor<1x2x20x64xf32>)
  return
}

// -----

// attention_grad_with_stats: attention_grad's operands plus the forward's
// output and f32 statistics; grouped heads, a value head dim of its own.
// CHECK-LABEL: func.func @attention_grad_with_stats
func.func @attention_grad_with_stats(%q: tensor<1x8x16x32xbf16>, %kg: tensor<1x2x20x32xbf16>,
                                     %vg: tensor<1x2x20x64xbf16>, %o: tensor<1x8x16x64xbf16>,
                                     %lse: tensor<1x8x16xf32>, %do: tensor<1x8x16x64xbf16>) {
  // CHECK: nn.attention_grad_with_stats %arg0, %arg1, %arg2, %arg3, %arg4, %arg5 causal scale = 1.250000e-01 : (tensor<1x8x16x32xbf16>, tensor<1x2x20x32xbf16>, tensor<1x2x20x64xbf16>, tensor<1x8x16x64xbf16>, tensor<1x8x16xf32>, tensor<1x8x16x64xbf16>) -> (tensor<1x8x16x32xbf16>, tensor<1x2x20x32xbf16>, tensor<1x2x20x64xbf16>)
  %0:3 = nn.attention_grad_with_stats %q, %kg, %vg, %o, %lse, %do causal scale = 0.125 : (tensor<1x8x16x32xbf16>, tensor<1x2x20x32xbf16>, tensor<1x2x20x64xbf16>, tensor<1x8x16x64xbf16>, tensor<1x8x16xf32>, tensor<1x8x16x64xbf16>) -> (tensor<1x8x16x32xbf16>, tensor<1x2x20x32xbf16>, tensor<1x2x20x64xbf16>)
  return
}

// -----

// embedding_grad and gather_grad with i64 and i32 indices.
// CHECK-LABEL: func.func @scatter_grads
func.func @scatter_grads(%ids: tensor<2x8xi64>, %dy: tensor<2x8x32xf32>,
                         %idx: tensor<3xi32>, %dg: tensor<4x3x5xf16>,
                         %one: tensor<i64>, %ds: tensor<5xf32>) {
  // CHECK: nn.embedding_grad %arg0, %arg1 num_embeddings = 100 : (tensor<2x8xi64>, tensor<2x8x32xf32>) -> tensor<100x32xf32>
  %0 = nn.embedding_grad %ids, %dy num_embeddings = 100 : (tensor<2x8xi64>, tensor<2x8x32xf32>) -> tensor<100x32xf32>
  // CHECK: nn.gather_grad %arg2, %arg3 axis = 1 axis_size = 10 : (tensor<3xi32>, tensor<4x3x5xf16>) -> tensor<4x10x5xf16>
  %1 = nn.gather_grad %idx, %dg axis = 1 axis_size = 10 : (tensor<3xi32>, tensor<4x3x5xf16>) -> tensor<4x10x5xf16>
  // Scalar indices remove the gathered dim.
  // CHECK: nn.gather_grad %arg4, %arg5 axis = 0 axis_size = 6 : (tensor<i64>, tensor<5xf32>) -> tensor<6x5xf32>
  %2 = nn.gather_grad %one, %ds axis = 0 axis_size = 6 : (tensor<i64>, tensor<5xf32>) -> tensor<6x5xf32>
  return
}

// -----

// cross_entropy_grad for every reduction.
// CHECK-LABEL: func.func @cross_entropy_grad
func.func @cross_entropy_grad(%logits: tensor<16x100xbf16>, %labels: tensor<16xi64>,
                              %dl: tensor<f32>, %drows: tensor<16xf32>) {
  // CHECK: nn.cross_entropy_grad %arg0, %arg1, %arg2 : (tensor<16x100xbf16>, tensor<16xi64>, tensor<f32>) -> tensor<16x100xbf16>
  %0 = nn.cross_entropy_grad %logits, %labels, %dl : (tensor<16x100xbf16>, tensor<16xi64>, tensor<f32>) -> tensor<16x100xbf16>
  // CHECK: nn.cross_entropy_grad %arg0, %arg1, %arg2 reduction = sum {ignore_index = 0 : i64} : (tensor<16x100xbf16>, tensor<16xi64>, tensor<f32>) -> tensor<16x100xbf16>
  %1 = nn.cross_entropy_grad %logits, %labels, %dl reduction = sum {ignore_index = 0 : i64} : (tensor<16x100xbf16>, tensor<16xi64>, tensor<f32>) -> tensor<16x100xbf16>
  // CHECK: nn.cross_entropy_grad %arg0, %arg1, %arg3 reduction = none : (tensor<16x100xbf16>, tensor<16xi64>, tensor<16xf32>) -> tensor<16x100xbf16>
  %2 = nn.cross_entropy_grad %logits, %labels, %drows reduction = none : (tensor<16x100xbf16>, tensor<16xi64>, tensor<16xf32>) -> tensor<16x100xbf16>
  return
}

// -----

// The vocabulary-parallel loss: a block's statistics, the loss from every
// block's, and a block's gradient; embeddings of a vocabulary block.
// CHECK-LABEL: func.func @vocabulary_blocks
func.func @vocabulary_blocks(%logits: tensor<16x50xbf16>, %labels: tensor<16xi64>, %stats: tensor<16x6xf32>,
                             %dl: tensor<f32>, %table: tensor<50x8xf32>, %ids: tensor<2x8xi64>, %dy: tensor<2x8x8xf32>) {
  // CHECK: nn.cross_entropy_stats %arg0, %arg1 {vocab_start = 50 : i64} : (tensor<16x50xbf16>, tensor<16xi64>) -> tensor<16x3xf32>
  %0 = nn.cross_entropy_stats %logits, %labels {vocab_start = 50 : i64} : (tensor<16x50xbf16>, tensor<16xi64>) -> tensor<16x3xf32>
  // CHECK: nn.cross_entropy_combine %arg2, %arg1 reduction = sum {num_classes = 100 : i64} : (tensor<16x6xf32>, tensor<16xi64>) -> tensor<f32>
  %1 = nn.cross_entropy_combine %stats, %labels reduction = sum {num_classes = 100 : i64} : (tensor<16x6xf32>, tensor<16xi64>) -> tensor<f32>
  // CHECK: nn.cross_entropy_block_grad %arg0, %arg1, %arg3, %arg2 {vocab_start = 50 : i64} : (tensor<16x50xbf16>, tensor<16xi64>, tensor<f32>, tensor<16x6xf32>) -> tensor<16x50xbf16>
  %2 = nn.cross_entropy_block_grad %logits, %labels, %dl, %stats {vocab_start = 50 : i64} : (tensor<16x50xbf16>, tensor<16xi64>, tensor<f32>, tensor<16x6xf32>) -> tensor<16x50xbf16>
  // CHECK: nn.embedding %arg4, %arg5 {vocab_size = 100 : i64, vocab_start = 50 : i64} : (tensor<50x8xf32>, tensor<2x8xi64>) -> tensor<2x8x8xf32>
  %3 = nn.embedding %table, %ids {vocab_size = 100 : i64, vocab_start = 50 : i64} : (tensor<50x8xf32>, tensor<2x8xi64>) -> tensor<2x8x8xf32>
  // CHECK: nn.embedding_grad %arg5, %arg6 num_embeddings = 50 {vocab_size = 100 : i64, vocab_start = 50 : i64} : (tensor<2x8xi64>, tensor<2x8x8xf32>) -> tensor<50x8xf32>
  %4 = nn.embedding_grad %ids, %dy num_embeddings = 50 {vocab_size = 100 : i64, vocab_start = 50 : i64} : (tensor<2x8xi64>, tensor<2x8x8xf32>) -> tensor<50x8xf32>
  return
}
