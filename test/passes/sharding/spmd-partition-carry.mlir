// RUN: loom-opt %s --loom-sharding-propagation --loom-spmd-partition -split-input-file | FileCheck %s

// A mixture-of-experts combine under expert parallelism: the experts'
// partial rows %p are weighted, unsorted by a gather and summed over the
// k = 2 choices of each token. The gather runs whole over the partial axis
// (its indices all-gathered) rather than settle %p, and the tokens' sums,
// half the rows, are reduce-scattered onto each rank's tokens. %p is also
// read by a product with a value computed later (the backward's output
// gradient), which carries it too since that value is whole: it is settled
// as the [8] sum over the hidden dim, not as the [8, 4] rows.
// CHECK-LABEL: func.func @combine
// CHECK: %[[P:.*]] = nn.matmul {{.*}}partial = ["ep"]
// CHECK-NOT: dist.all_reduce
// CHECK: nn.mul %[[P]], {{.*}}partial = ["ep"]
// CHECK: dist.all_gather {{.*}} : tensor<4xi64> -> tensor<8xi64>
// CHECK: nn.gather {{.*}}partial = ["ep"]{{.*}} -> tensor<8x4xf32>
// CHECK: nn.reduce_sum {{.*}}partial = ["ep"]{{.*}} -> tensor<4x4xf32>
// CHECK-NEXT: dist.reduce_scatter {{.*}}axes = ["ep"], dim = 0{{.*}} : tensor<4x4xf32> -> tensor<2x4xf32>
// CHECK: nn.mul {{.*}}, %[[P]] {{.*}}partial = ["ep"]
// CHECK-NEXT: nn.reduce_sum {{.*}}partial = ["ep"]{{.*}} -> tensor<8xf32>
// CHECK-NEXT: dist.all_reduce {{.*}} : tensor<8xf32>
// CHECK-NOT: dist.all_reduce
// CHECK: return
module attributes {dist.mesh = #dist.mesh<["ep"=2]>} {
  func.func @combine(%a: tensor<8x16xf32> {dist.sharding = #dist.sharding<[[], ["ep"]]>},
                     %wt: tensor<8x1xf32>,
                     %idx: tensor<8xi64> {dist.sharding = #dist.sharding<[["ep"]]>},
                     %res: tensor<4x4xf32> {dist.sharding = #dist.sharding<[["ep"], []]>},
                     %d: tensor<8x4xf32>) -> (tensor<4x4xf32>, tensor<8xf32>) {
    %w = nn.parameter "w" {dist.sharding = [#dist.sharding<[[], ["ep"]]>]} : tensor<4x16xf32>
    %p = nn.matmul %a, %w {transpose_rhs} : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x4xf32>
    %u = nn.mul %p, %wt : (tensor<8x4xf32>, tensor<8x1xf32>) -> tensor<8x4xf32>
    %g = nn.gather %u, %idx axis = 0 : (tensor<8x4xf32>, tensor<8xi64>) -> tensor<8x4xf32>
    %r = nn.reshape %g : tensor<8x4xf32> -> tensor<4x2x4xf32>
    %s = nn.reduce_sum %r dims = [1] : tensor<4x2x4xf32> -> tensor<4x4xf32>
    %o = nn.add %s, %res : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %t = nn.tanh %d : tensor<8x4xf32>
    %e = nn.mul %t, %p : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %f = nn.reduce_sum %e dims = [1] : tensor<8x4xf32> -> tensor<8xf32>
    %x = nn.exp %f : tensor<8xf32>
    return %o, %x : tensor<4x4xf32>, tensor<8xf32>
  }
}

// -----

// Two products of one partial value, each with a whole value, would each
// settle a result as large as the value: it is settled once, in place.
// CHECK-LABEL: func.func @two_products
// CHECK: %[[P:.*]] = nn.matmul {{.*}}partial = ["tp"]
// CHECK-NEXT: %[[S:.*]] = dist.all_reduce %[[P]] {{.*}} : tensor<8x4xf32>
// CHECK-NOT: dist.all_reduce
// CHECK: nn.mul %[[S]], %arg1
// CHECK: nn.mul %[[S]], %arg2
// CHECK-NOT: dist.all_reduce
// CHECK: return
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  func.func @two_products(%a: tensor<8x16xf32> {dist.sharding = #dist.sharding<[[], ["tp"]]>},
                          %b1: tensor<8x4xf32>, %b2: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
    %w = nn.parameter "w" {dist.sharding = [#dist.sharding<[[], ["tp"]]>]} : tensor<4x16xf32>
    %p = nn.matmul %a, %w {transpose_rhs} : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x4xf32>
    %u = nn.mul %p, %b1 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %v = nn.mul %p, %b2 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %y = nn.tanh %u : tensor<8x4xf32>
    %z = nn.tanh %v : tensor<8x4xf32>
    return %y, %z : tensor<8x4xf32>, tensor<8x4xf32>
  }
}
