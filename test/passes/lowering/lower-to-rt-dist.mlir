// RUN: loom-opt %s --loom-lower-to-rt | FileCheck %s

// A partitioned program (--loom-spmd-partition): the mesh becomes
// rt.mesh_axes/rt.mesh_shape, split inputs and parameters carry `sharding`
// (per global dim) and `global_shape` with the local shard as their buffer,
// and each dist collective becomes an rt.collective writing a new buffer
// (a mean is the runtime's "avg").
// CHECK: module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 2>}
// CHECK: %[[X:.*]] = rt.input "x" {global_shape = array<i64: 4, 8>, sharding = {{\[\[}}"dp"], ["tp"]]} : memref<2x4xf32>
// CHECK: %[[W:.*]] = rt.param "w" {{.*}}global_shape = array<i64: 8, 3>, {{.*}}sharding = {{\[\[}}"tp"], []]{{.*}} : memref<4x3xf32>
// CHECK: rt.kernel "nn.matmul"(%[[X]], %[[W]]) -> (%[[P:[0-9]+]])
// CHECK: rt.collective all_reduce(%[[P]]) -> (%[[S:[0-9]+]]) {axes = ["tp"], reduce = #rt.reduce<sum>} : (memref<2x3xf32>) -> memref<2x3xf32>
// CHECK: rt.collective all_gather(%[[S]]) -> (%[[G:[0-9]+]]) {axes = ["dp"], dim = 0 : i64} : (memref<2x3xf32>) -> memref<4x3xf32>
// CHECK: rt.collective reduce_scatter(%[[G]]) -> (%{{.*}}) {axes = ["tp"], dim = 0 : i64, reduce = #rt.reduce<avg>} : (memref<4x3xf32>) -> memref<2x3xf32>
// CHECK: rt.collective all_to_all(%{{.*}}) -> (%{{.*}}) {axes = ["dp"], concat_dim = 1 : i64, split_dim = 0 : i64} : (memref<2x3xf32>) -> memref<1x6xf32>
// CHECK: rt.collective broadcast(%{{.*}}) -> (%{{.*}}) {axes = ["dp"], root = 1 : i64}
// CHECK: rt.collective send(%{{.*}}) -> () {peer = 3 : i64} : (memref<1x6xf32>) -> ()
// CHECK: rt.collective recv() -> (%{{.*}}) {peer = 0 : i64} : () -> memref<4x3xf32>
module attributes {dist.mesh = #dist.mesh<["dp"=2, "tp"=2]>} {
  func.func @main(%x: tensor<2x4xf32> {dist.global_type = tensor<4x8xf32>, dist.sharding = #dist.sharding<[["dp"], ["tp"]]>, loom.name = "x"}) -> (tensor<4x3xf32> {loom.name = "y"}) {
    %w = nn.parameter "w" value(dense<1.0> : tensor<8x3xf32>) {dist.global_type = tensor<8x3xf32>, dist.sharding = [#dist.sharding<[["tp"], []]>]} : tensor<4x3xf32>
    %p = nn.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
    %s = dist.all_reduce %p {axes = ["tp"], reduce = #dist.reduce<sum>} : tensor<2x3xf32>
    %g = dist.all_gather %s {axes = ["dp"], dim = 0 : i64} : tensor<2x3xf32> -> tensor<4x3xf32>
    %r = dist.reduce_scatter %g {axes = ["tp"], dim = 0 : i64, reduce = #dist.reduce<mean>} : tensor<4x3xf32> -> tensor<2x3xf32>
    %a = dist.all_to_all %r {axes = ["dp"], split_dim = 0 : i64, concat_dim = 1 : i64} : tensor<2x3xf32> -> tensor<1x6xf32>
    %b = dist.broadcast %a {axes = ["dp"], root = 1 : i64} : tensor<1x6xf32>
    dist.send %b {peer = 3 : i64} : tensor<1x6xf32>
    %v = dist.recv {peer = 0 : i64} : tensor<4x3xf32>
    return %v : tensor<4x3xf32>
  }
}
