// RUN: loom-opt %s | FileCheck %s
// RUN: loom-opt %s | loom-opt | FileCheck %s

// The dist dialect round-trips: meshes, shardings and every collective.

// CHECK: module attributes {dist.mesh = #dist.mesh<["dp"=2, "tp"=2]>}
module attributes {dist.mesh = #dist.mesh<["dp"=2, "tp"=2]>} {
  // CHECK-LABEL: func.func @collectives
  func.func @collectives(%x: tensor<4x8xf32> {dist.sharding = #dist.sharding<[["dp"], ["tp"]]>}, %x16: tensor<8xbf16>) -> tensor<4x8xf32> {
    // CHECK: dist.all_reduce %{{.*}} {axes = ["tp"], reduce = #dist.reduce<sum>} : tensor<4x8xf32>
    %a = dist.all_reduce %x {axes = ["tp"], reduce = #dist.reduce<sum>} : tensor<4x8xf32>
    // CHECK: dist.all_reduce %{{.*}} {axes = ["dp", "tp"], reduce = #dist.reduce<max>} : tensor<4x8xf32>
    %b = dist.all_reduce %a {axes = ["dp", "tp"], reduce = #dist.reduce<max>} : tensor<4x8xf32>
    // A bucket: several tensors in one collective, each reduced on its own.
    // CHECK: dist.all_reduce %{{.*}}, %{{.*}} {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<4x8xf32>, tensor<8xbf16>
    %bucket:2 = dist.all_reduce %x, %x16 {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<4x8xf32>, tensor<8xbf16>
    // CHECK: dist.reduce_scatter %{{.*}}, %{{.*}} {axes = ["dp"], dim = 0 : i64, reduce = #dist.reduce<sum>} : tensor<4x8xf32>, tensor<8xbf16> -> tensor<2x8xf32>, tensor<4xbf16>
    %scattered:2 = dist.reduce_scatter %x, %x16 {axes = ["dp"], dim = 0 : i64, reduce = #dist.reduce<sum>} : tensor<4x8xf32>, tensor<8xbf16> -> tensor<2x8xf32>, tensor<4xbf16>
    // CHECK: dist.all_gather %{{.*}} {axes = ["tp"], dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x16xf32>
    %c = dist.all_gather %b {axes = ["tp"], dim = 1 : i64} : tensor<4x8xf32> -> tensor<4x16xf32>
    // CHECK: dist.reduce_scatter %{{.*}} {axes = ["tp"], dim = 1 : i64, reduce = #dist.reduce<sum>} : tensor<4x16xf32> -> tensor<4x8xf32>
    %d = dist.reduce_scatter %c {axes = ["tp"], dim = 1 : i64, reduce = #dist.reduce<sum>} : tensor<4x16xf32> -> tensor<4x8xf32>
    // CHECK: dist.all_to_all %{{.*}} {axes = ["tp"], concat_dim = 0 : i64, split_dim = 1 : i64} : tensor<4x8xf32> -> tensor<8x4xf32>
    %e = dist.all_to_all %d {axes = ["tp"], split_dim = 1 : i64, concat_dim = 0 : i64} : tensor<4x8xf32> -> tensor<8x4xf32>
    // CHECK: dist.gather_rows %{{.*}}, %{{.*}}, %{{.*}} {axes = ["dp"]} : (tensor<8x4xf32>, tensor<6xi64>, tensor<2x2xi32>) -> tensor<6x4xf32>
    %rows = nn.constant dense<[0, 15, 3, 8, 2, 9]> : tensor<6xi64>
    %ranges = nn.constant dense<[[0, 2], [2, 6]]> : tensor<2x2xi32>
    %gathered = dist.gather_rows %e, %rows, %ranges {axes = ["dp"]} : (tensor<8x4xf32>, tensor<6xi64>, tensor<2x2xi32>) -> tensor<6x4xf32>
    // CHECK: dist.scatter_rows %{{.*}}, %{{.*}}, %{{.*}} {axes = ["dp"]} : (tensor<6x4xf32>, tensor<6xi64>, tensor<2x2xi32>) -> tensor<8x4xf32>
    %scattered_rows = dist.scatter_rows %gathered, %rows, %ranges {axes = ["dp"]} : (tensor<6x4xf32>, tensor<6xi64>, tensor<2x2xi32>) -> tensor<8x4xf32>
    // CHECK: dist.broadcast %{{.*}} {axes = ["dp"], root = 1 : i64} : tensor<8x4xf32>
    %f = dist.broadcast %e {axes = ["dp"], root = 1 : i64} : tensor<8x4xf32>
    // CHECK: dist.send %{{.*}} {peer = 3 : i64} : tensor<8x4xf32>
    dist.send %f {peer = 3 : i64} : tensor<8x4xf32>
    // CHECK: dist.recv {peer = 0 : i64} : tensor<4x8xf32>
    %g = dist.recv {peer = 0 : i64} : tensor<4x8xf32>
    return %g : tensor<4x8xf32>
  }

  // An exchange sends its inputs and receives its results, any number of
  // each; peers are indices in the group over `axes`.
  // CHECK-LABEL: func.func @exchanges
  func.func @exchanges(%act: tensor<2x12x32xf32>, %ids: tensor<4xi64>) -> (tensor<2x12x32xf32>, tensor<3xbf16>, tensor<5xf32>) {
    // CHECK: %[[BOTH:.*]]:2 = dist.exchange(%{{.*}}, %{{.*}} : tensor<2x12x32xf32>, tensor<4xi64>) {axes = ["dp"], recv_peers = array<i64: 1, 0>, send_peers = array<i64: 1, 1>} -> tensor<2x12x32xf32>, tensor<3xbf16>
    %g, %h = dist.exchange(%act, %ids : tensor<2x12x32xf32>, tensor<4xi64>) {axes = ["dp"], send_peers = array<i64: 1, 1>, recv_peers = array<i64: 1, 0>} -> tensor<2x12x32xf32>, tensor<3xbf16>
    // CHECK: dist.exchange(%{{.*}} : tensor<2x12x32xf32>) {axes = ["dp", "tp"], recv_peers = array<i64>, send_peers = array<i64: 3>}{{$}}
    dist.exchange(%act : tensor<2x12x32xf32>) {axes = ["dp", "tp"], send_peers = array<i64: 3>, recv_peers = array<i64>}
    // CHECK: dist.exchange {axes = ["tp"], recv_peers = array<i64: 0>, send_peers = array<i64>} -> tensor<5xf32>
    %r = dist.exchange {axes = ["tp"], send_peers = array<i64>, recv_peers = array<i64: 0>} -> tensor<5xf32>
    // CHECK: return %[[BOTH]]#0, %[[BOTH]]#1
    return %g, %h, %r : tensor<2x12x32xf32>, tensor<3xbf16>, tensor<5xf32>
  }

  // CHECK-LABEL: func.func @shardings
  // CHECK-SAME: #dist.sharding<{{\[\[}}], []], partial = ["tp"]>
  // CHECK-SAME: #dist.sharding<{{\[\[}}"tp", "dp"], []]>
  // CHECK-SAME: #dist.sharding<[]>
  func.func @shardings(%p: tensor<4x8xf32> {dist.sharding = #dist.sharding<[[], []], partial = ["tp"]>},
                       %q: tensor<8x8xf32> {dist.sharding = #dist.sharding<[["tp", "dp"], []]>},
                       %s: tensor<f32> {dist.sharding = #dist.sharding<[]>}) {
    return
  }
}
