// RUN: loom-opt %s --loom-elide-group-reductions | FileCheck %s

// Expert parallelism over ep=2: each rank's grouped GEMM computes the rows
// of its block of experts (group_start, moved by the rank offsets) and
// leaves zeros elsewhere, so its result is summed over ep. Between two
// GEMMs of the same block, through row-wise ops, the sum is not needed.

// CHECK-LABEL: func.func @between_experts
// CHECK: %[[GU:.*]] = nn.grouped_matmul
// CHECK-NOT: dist.all_reduce
// CHECK: %[[A:.*]] = nn.silu %[[GU]]
// CHECK: %[[D:.*]] = nn.grouped_matmul %[[A]]
// CHECK: %[[R:.*]] = dist.all_reduce %[[D]]
// CHECK: return %[[R]]
module attributes {dist.mesh = #dist.mesh<["ep"=2]>} {
func.func @between_experts(%x: tensor<8x4xf32>, %w1: tensor<1x4x6xf32>, %w2: tensor<1x6x4xf32>,
                           %offs: tensor<2xi32>) -> tensor<8x4xf32> {
  %gu = nn.grouped_matmul %x, %w1, %offs {dist.rank_offsets = [{attr = "group_start", axes = ["ep"], element = -1 : i64, stride = 1 : i64}], dist.sharding = [#dist.sharding<[[], []], partial = ["ep"]>], group_start = 0 : i64} : (tensor<8x4xf32>, tensor<1x4x6xf32>, tensor<2xi32>) -> tensor<8x6xf32>
  %r = dist.all_reduce %gu {axes = ["ep"], reduce = #dist.reduce<sum>} : tensor<8x6xf32>
  %a = nn.silu %r {dist.sharding = [#dist.sharding<[[], []]>]} : tensor<8x6xf32>
  %d = nn.grouped_matmul %a, %w2, %offs {dist.rank_offsets = [{attr = "group_start", axes = ["ep"], element = -1 : i64, stride = 1 : i64}], dist.sharding = [#dist.sharding<[[], []], partial = ["ep"]>], group_start = 0 : i64} : (tensor<8x6xf32>, tensor<1x6x4xf32>, tensor<2xi32>) -> tensor<8x4xf32>
  %r2 = dist.all_reduce %d {axes = ["ep"], reduce = #dist.reduce<sum>} : tensor<8x4xf32>
  return %r2 : tensor<8x4xf32>
}

// A reader that needs every row (a sum over the rows) keeps the sum.
// CHECK-LABEL: func.func @rows_summed
// CHECK: dist.all_reduce
// CHECK: nn.reduce_sum
func.func @rows_summed(%x: tensor<8x4xf32>, %w1: tensor<1x4x6xf32>, %offs: tensor<2xi32>) -> tensor<6xf32> {
  %gu = nn.grouped_matmul %x, %w1, %offs {dist.rank_offsets = [{attr = "group_start", axes = ["ep"], element = -1 : i64, stride = 1 : i64}], dist.sharding = [#dist.sharding<[[], []], partial = ["ep"]>], group_start = 0 : i64} : (tensor<8x4xf32>, tensor<1x4x6xf32>, tensor<2xi32>) -> tensor<8x6xf32>
  %r = dist.all_reduce %gu {axes = ["ep"], reduce = #dist.reduce<sum>} : tensor<8x6xf32>
  %a = nn.silu %r {dist.sharding = [#dist.sharding<[[], []]>]} : tensor<8x6xf32>
  %s = nn.reduce_sum %a dims = [0] {dist.sharding = [#dist.sharding<[[]]>]} : tensor<8x6xf32> -> tensor<6xf32>
  return %s : tensor<6xf32>
}

// A grouped GEMM of another block of groups (its offsets differ) keeps it.
// CHECK-LABEL: func.func @other_groups
// CHECK: dist.all_reduce
// CHECK: nn.silu
func.func @other_groups(%x: tensor<8x4xf32>, %w1: tensor<1x4x6xf32>, %w2: tensor<1x6x4xf32>,
                        %offs: tensor<2xi32>, %offs2: tensor<2xi32>) -> tensor<8x4xf32> {
  %gu = nn.grouped_matmul %x, %w1, %offs {dist.rank_offsets = [{attr = "group_start", axes = ["ep"], element = -1 : i64, stride = 1 : i64}], dist.sharding = [#dist.sharding<[[], []], partial = ["ep"]>], group_start = 0 : i64} : (tensor<8x4xf32>, tensor<1x4x6xf32>, tensor<2xi32>) -> tensor<8x6xf32>
  %r = dist.all_reduce %gu {axes = ["ep"], reduce = #dist.reduce<sum>} : tensor<8x6xf32>
  %a = nn.silu %r {dist.sharding = [#dist.sharding<[[], []]>]} : tensor<8x6xf32>
  %d = nn.grouped_matmul %a, %w2, %offs2 {dist.rank_offsets = [{attr = "group_start", axes = ["ep"], element = -1 : i64, stride = 1 : i64}], dist.sharding = [#dist.sharding<[[], []], partial = ["ep"]>], group_start = 0 : i64} : (tensor<8x6xf32>, tensor<1x6x4xf32>, tensor<2xi32>) -> tensor<8x4xf32>
  %r2 = dist.all_reduce %d {axes = ["ep"], reduce = #dist.reduce<sum>} : tensor<8x4xf32>
  return %r2 : tensor<8x4xf32>
}
}
