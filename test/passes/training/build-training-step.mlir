// RUN: loom-opt %s --loom-build-training-step=batch=4 -split-input-file -verify-diagnostics | FileCheck %s

// A forward of batch 2 trained on a global batch of 4: two microbatches share
// the parameters; each backward op says whether it feeds an input or a weight
// gradient; the step ends with AdamW writing parameters and moments back.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[TOK:.*]]: tensor<4x5xi64> {loom.name = "tokens"}, %[[LR:.*]]: tensor<f32> {loom.name = "lr"}, %[[T:.*]]: tensor<f32> {loom.name = "step"})
// CHECK-SAME: -> (tensor<f32> {loom.name = "loss"}, tensor<f32> {loom.name = "grad_norm"})
// CHECK-DAG: %[[E:.*]] = nn.parameter "embed.weight"
// CHECK-DAG: %[[W:.*]] = nn.parameter "head.weight"
// CHECK-DAG: nn.slice %[[TOK]] starts = [0, 0] limits = [2, 4]
// CHECK-DAG: nn.slice %[[TOK]] starts = [0, 1] limits = [2, 5]
// CHECK-DAG: nn.slice %[[TOK]] starts = [2, 0] limits = [4, 4]
// CHECK-DAG: nn.embedding {{.*}}loom.microbatch = 1
// CHECK-DAG: nn.cross_entropy {{.*}}loom.microbatch = 0
// CHECK-DAG: nn.cross_entropy_grad {{.*}}loom.backward = #loom.backward<input>
// CHECK-DAG: nn.matmul {{.*}}loom.backward = #loom.backward<weight>
// CHECK-DAG: nn.embedding_grad {{.*}}loom.backward = #loom.backward<weight>
// CHECK-DAG: nn.parameter "embed.weight.exp_avg" frozen : tensor<16x8xf32>
// CHECK-DAG: nn.parameter "embed.weight.exp_avg_sq" frozen : tensor<16x8xf32>
// CHECK: nn.adamw %[[E]], {{.*}}, %[[LR]], %[[T]] beta1 = 9.000000e-01
// CHECK: nn.assign %[[E]]
// CHECK: return
func.func @main(%ids: tensor<2x4xi64>) -> tensor<2x4x16xf32> {
  %e = nn.parameter "embed.weight" init(normal, 0.02) : tensor<16x8xf32>
  %w = nn.parameter "head.weight" init(normal, 0.02) : tensor<16x8xf32>
  %h = nn.embedding %e, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %n = nn.rms_norm %h epsilon = 1.0e-05 : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = nn.matmul %n, %w {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %l : tensor<2x4x16xf32>
}

// -----

// The global batch must split into whole microbatches.
// expected-error @+1 {{the global batch (4) must be a multiple of the forward's batch (3)}}
func.func @main(%ids: tensor<3x4xi64>) -> tensor<3x4x16xf32> {
  %w = nn.parameter "head.weight" : tensor<16x4xf32>
  %x = nn.cast %ids : tensor<3x4xi64> -> tensor<3x4xf32>
  %l = nn.matmul %x, %w {transpose_rhs} : (tensor<3x4xf32>, tensor<16x4xf32>) -> tensor<3x16xf32>
  %r = nn.reshape %l : tensor<3x16xf32> -> tensor<3x4x4xf32>
  %b = nn.broadcast %r : tensor<3x4x4xf32> -> tensor<3x4x4xf32>
  %o = nn.concat %b, %b, %b, %b dim = 2 : (tensor<3x4x4xf32>, tensor<3x4x4xf32>, tensor<3x4x4xf32>, tensor<3x4x4xf32>) -> tensor<3x4x16xf32>
  return %o : tensor<3x4x16xf32>
}

// -----

// The forward takes token ids and returns logits.
// expected-error @+1 {{the forward's input must be token ids [batch, seq], got 'tensor<2x4xf32>'}}
func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4x16xf32> {
  %w = nn.parameter "w" : tensor<2x4x16xf32>
  return %w : tensor<2x4x16xf32>
}
