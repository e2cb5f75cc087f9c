// RUN: loom-opt %s --loom-sharding-propagation --loom-spmd-partition -split-input-file | FileCheck %s

// A vocabulary-parallel embedding: each rank holds half of the table's rows
// and looks up its block (vocab_start 0 on rank 0, plus 50 per tp block on
// the others); its partial lookups are summed by one all-reduce.
// CHECK-LABEL: func.func @vocab_embedding
// CHECK: %[[T:.*]] = nn.parameter "table" {{.*}} : tensor<50x8xf32>
// CHECK: %[[E:.*]] = nn.embedding %[[T]], %{{.*}} {dist.rank_offsets = [{attr = "vocab_start", axes = ["tp"], element = -1 : i64, stride = 50 : i64}], {{.*}}partial = ["tp"]>], vocab_size = 100 : i64, vocab_start = 0 : i64} : (tensor<50x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
// CHECK: %[[S:.*]] = dist.all_reduce %[[E]] {axes = ["tp"], reduce = #dist.reduce<sum>} : tensor<2x4x8xf32>
// CHECK: nn.tanh %[[S]]
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  func.func @vocab_embedding(%ids: tensor<2x4xi64>) -> tensor<2x4x8xf32> {
    %t = nn.parameter "table" {dist.sharding = [#dist.sharding<[["tp"], []]>]} : tensor<100x8xf32>
    %e = nn.embedding %t, %ids : (tensor<100x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
    %y = nn.tanh %e : tensor<2x4x8xf32>
    return %y : tensor<2x4x8xf32>
  }
}

// -----

// The table's gradient of a block: its own rows (num_embeddings local,
// vocab_start by rank), never gathered.
// CHECK-LABEL: func.func @vocab_embedding_grad
// CHECK: nn.embedding_grad %{{.*}}, %{{.*}} num_embeddings = 50 {dist.rank_offsets = [{attr = "vocab_start", axes = ["tp"], element = -1 : i64, stride = 50 : i64}], {{.*}}vocab_size = 100 : i64, vocab_start = 0 : i64} : (tensor<2x4xi64>, tensor<2x4x8xf32>) -> tensor<50x8xf32>
// CHECK-NEXT: nn.neg %{{.*}} : tensor<50x8xf32>
module attributes {dist.mesh = #dist.mesh<["tp"=2]>} {
  func.func @vocab_embedding_grad(%ids: tensor<2x4xi64>, %dy: tensor<2x4x8xf32>) -> tensor<100x8xf32> {
    %g = nn.embedding_grad %ids, %dy num_embeddings = 100 {dist.sharding = [#dist.sharding<[["tp"], []]>]} : (tensor<2x4xi64>, tensor<2x4x8xf32>) -> tensor<100x8xf32>
    %n = nn.neg %g {dist.sharding = [#dist.sharding<[["tp"], []]>]} : tensor<100x8xf32>
    return %n : tensor<100x8xf32>
  }
}

// -----

// Taking a block of a replicated value is a local slice, not a collective:
// for a dim split by ["dp", "tp"], a block of 4 rows per dp coordinate, then
// of 2 rows per tp coordinate within it.
// CHECK-LABEL: func.func @local_slice
// CHECK: %[[B:.*]] = nn.slice %arg0 starts = [0, 0] limits = [4, 8] strides = [1, 1] {dist.rank_offsets = [{attr = "starts", axes = ["dp"], element = 0 : i64, stride = 4 : i64}, {attr = "limits", axes = ["dp"], element = 0 : i64, stride = 4 : i64}]} : tensor<8x8xf32> -> tensor<4x8xf32>
// CHECK: nn.slice %[[B]] starts = [0, 0] limits = [2, 8] {{.*}}{dist.rank_offsets = [{attr = "starts", axes = ["tp"], element = 0 : i64, stride = 2 : i64}, {attr = "limits", axes = ["tp"], element = 0 : i64, stride = 2 : i64}]} : tensor<4x8xf32> -> tensor<2x8xf32>
// CHECK-NOT: dist.reduce_scatter
// CHECK: nn.softmax
module attributes {dist.mesh = #dist.mesh<["dp"=2, "tp"=2]>} {
  func.func @local_slice(%x: tensor<8x8xf32> {dist.sharding = #dist.sharding<[[], []]>}) -> tensor<8x8xf32> {
    %s = nn.softmax %x dim = 1 {dist.sharding = [#dist.sharding<[["dp", "tp"], []]>]} : tensor<8x8xf32>
    return %s : tensor<8x8xf32>
  }
}
