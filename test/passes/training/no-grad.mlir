// RUN: loom-opt %s --loom-build-training-step=batch=2 | FileCheck %s

// An op computed under torch's no_grad (the importer marks the ops of a
// wrap_with_set_grad_enabled(False) subgraph) passes no gradient back: the
// gate's weight, read only through it, gets no gradient and no AdamW step,
// while the embedding and the head, read around it, train.
// CHECK-DAG: %[[E:.*]] = nn.parameter "embed.weight"
// CHECK-DAG: %[[G:.*]] = nn.parameter "gate.weight"
// CHECK-DAG: %[[W:.*]] = nn.parameter "head.weight"
// CHECK: nn.mul %{{.*}}, %[[G]] {{{.*}}loom.no_grad}
// CHECK-NOT: nn.adamw %[[G]],
// CHECK-DAG: nn.adamw %[[E]],
// CHECK-DAG: nn.adamw %[[W]],
// CHECK-NOT: nn.adamw %[[G]],
// CHECK: return
func.func @main(%ids: tensor<2x4xi64>) -> tensor<2x4x16xf32> {
  %e = nn.parameter "embed.weight" init(normal, 0.02) : tensor<16x8xf32>
  %s = nn.parameter "gate.weight" init(normal, 0.02) : tensor<8xf32>
  %w = nn.parameter "head.weight" init(normal, 0.02) : tensor<16x8xf32>
  %h = nn.embedding %e, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %g = nn.mul %h, %s {loom.no_grad} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %a = nn.add %h, %g : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = nn.matmul %a, %w {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %l : tensor<2x4x16xf32>
}
