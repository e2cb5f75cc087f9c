// RUN: loom-opt %s --loom-build-training-step=batch=2 | FileCheck %s
// RUN: loom-opt %s --loom-strip-stop-gradients | FileCheck %s --check-prefix=STRIP

// nn.stop_gradient (torch's no_grad and detach; the importer puts one on
// each float result of a wrap_with_set_grad_enabled(False) subgraph) passes
// no gradient back: the gate's weight, read only through it, gets no
// gradient and no AdamW step, while the embedding and the head, read
// around it, train. Once the backward is built the op is gone.
// CHECK-DAG: %[[E:.*]] = nn.parameter "embed.weight"
// CHECK-DAG: %[[G:.*]] = nn.parameter "gate.weight"
// CHECK-DAG: %[[W:.*]] = nn.parameter "head.weight"
// CHECK-NOT: nn.stop_gradient
// CHECK-NOT: nn.adamw %[[G]],
// CHECK-DAG: nn.adamw %[[E]],
// CHECK-DAG: nn.adamw %[[W]],
// CHECK-NOT: nn.adamw %[[G]],
// CHECK: return

// An inference compile drops it after raising.
// STRIP-LABEL: func.func @main
// STRIP-NOT: nn.stop_gradient
// STRIP: nn.mul %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<8xf32>)
// STRIP-NOT: nn.stop_gradient
func.func @main(%ids: tensor<2x4xi64>) -> tensor<2x4x16xf32> {
  %e = nn.parameter "embed.weight" init(normal, 0.02) : tensor<16x8xf32>
  %s = nn.parameter "gate.weight" init(normal, 0.02) : tensor<8xf32>
  %w = nn.parameter "head.weight" init(normal, 0.02) : tensor<16x8xf32>
  %h = nn.embedding %e, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %g = nn.mul %h, %s : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %gs = nn.stop_gradient %g : tensor<2x4x8xf32>
  %a = nn.add %h, %gs : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = nn.matmul %a, %w {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %l : tensor<2x4x16xf32>
}
