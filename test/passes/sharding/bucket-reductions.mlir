// RUN: loom-opt %s --loom-bucket-reductions=bucket-bytes=4096 -split-input-file | FileCheck %s
// RUN: loom-opt %s --loom-bucket-reductions=bucket-bytes=0 -split-input-file | FileCheck %s --check-prefix=OFF

// Buckets close by size: the first two gradients (2 KiB each) fill a 4 KiB
// bucket, issued right after the second one's producer (before the third
// producer runs); the third is left alone, and readers take the bucket's
// results in order.
// CHECK-LABEL: func.func @by_size
// CHECK: %[[A:.*]] = nn.relu %arg0
// CHECK-NEXT: %[[B:.*]] = nn.relu %arg1
// CHECK-NEXT: %[[G:.*]]:2 = dist.all_reduce %[[A]], %[[B]] {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<16x32xf32>, tensor<16x32xf32>
// CHECK-NEXT: %[[C:.*]] = nn.relu %arg2
// CHECK-NEXT: %[[H:.*]] = dist.all_reduce %[[C]] {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<16x32xf32>
// CHECK-NEXT: return %[[G]]#0, %[[G]]#1, %[[H]]
// OFF-LABEL: func.func @by_size
// OFF-COUNT-3: dist.all_reduce %{{[^,]*}} {axes
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @by_size(%x: tensor<16x32xf32>, %y: tensor<16x32xf32>, %z: tensor<16x32xf32>) -> (tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>) {
    %a = nn.relu %x : tensor<16x32xf32>
    %ga = dist.all_reduce %a {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<16x32xf32>
    %b = nn.relu %y : tensor<16x32xf32>
    %gb = dist.all_reduce %b {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<16x32xf32>
    %c = nn.relu %z : tensor<16x32xf32>
    %gc = dist.all_reduce %c {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<16x32xf32>
    return %ga, %gb, %gc : tensor<16x32xf32>, tensor<16x32xf32>, tensor<16x32xf32>
  }
}

// -----

// Element types are not mixed: the f32 and bf16 gradients, interleaved, go
// into one bucket each, each placed after its own last producer.
// CHECK-LABEL: func.func @by_dtype
// CHECK: %[[A:.*]] = nn.relu %arg0 : tensor<8xf32>
// CHECK-NEXT: %[[B:.*]] = nn.relu %arg1 : tensor<8xbf16>
// CHECK-NEXT: %[[C:.*]] = nn.relu %arg2 : tensor<8xf32>
// CHECK-NEXT: %[[F:.*]]:2 = dist.all_reduce %[[A]], %[[C]] {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[D:.*]] = nn.relu %arg3 : tensor<8xbf16>
// CHECK-NEXT: %[[H:.*]]:2 = dist.all_reduce %[[B]], %[[D]] {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xbf16>, tensor<8xbf16>
// CHECK-NEXT: return %[[F]]#0, %[[H]]#0, %[[F]]#1, %[[H]]#1
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @by_dtype(%x: tensor<8xf32>, %y: tensor<8xbf16>, %z: tensor<8xf32>, %w: tensor<8xbf16>) -> (tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xbf16>) {
    %a = nn.relu %x : tensor<8xf32>
    %ga = dist.all_reduce %a {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xf32>
    %b = nn.relu %y : tensor<8xbf16>
    %gb = dist.all_reduce %b {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xbf16>
    %c = nn.relu %z : tensor<8xf32>
    %gc = dist.all_reduce %c {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xf32>
    %d = nn.relu %w : tensor<8xbf16>
    %gd = dist.all_reduce %d {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xbf16>
    return %ga, %gb, %gc, %gd : tensor<8xf32>, tensor<8xbf16>, tensor<8xf32>, tensor<8xbf16>
  }
}

// -----

// Only data-parallel sums and means are gradients: the tensor-parallel
// reduction, the reduction with another reduce op and the `max` slice stay
// as they are; the two dp sums form a bucket, the dp means another.
// CHECK-LABEL: func.func @by_kind
// CHECK: dist.all_reduce %{{.*}} {axes = ["tp"], reduce = #dist.reduce<sum>} : tensor<8xf32>
// CHECK: dist.reduce_scatter %{{.*}} {axes = ["dp"], dim = 0 : i64, reduce = #dist.reduce<max>} : tensor<8xf32> -> tensor<4xf32>
// CHECK: dist.all_reduce %{{.*}}, %{{.*}} {axes = ["dp"], reduce = #dist.reduce<mean>} : tensor<8xf32>, tensor<8xf32>
// CHECK: dist.all_reduce %{{.*}}, %{{.*}} {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xf32>, tensor<8xf32>
module attributes {dist.mesh = #dist.mesh<["dp"=2, "tp"=2]>} {
  func.func @by_kind(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
    %t = dist.all_reduce %x {axes = ["tp"], reduce = #dist.reduce<sum>} : tensor<8xf32>
    %m = dist.reduce_scatter %x {axes = ["dp"], dim = 0 : i64, reduce = #dist.reduce<max>} : tensor<8xf32> -> tensor<4xf32>
    %s0 = dist.all_reduce %x {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xf32>
    %a0 = dist.all_reduce %x {axes = ["dp"], reduce = #dist.reduce<mean>} : tensor<8xf32>
    %a1 = dist.all_reduce %x {axes = ["dp"], reduce = #dist.reduce<mean>} : tensor<8xf32>
    %s1 = dist.all_reduce %x {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xf32>
    return %t, %m, %s0, %a0, %a1, %s1 : tensor<8xf32>, tensor<4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  }
}

// -----

// A gradient's reduction read before the next gradient's (here by the
// second producer) cannot wait for a later bucket: its bucket closes there.
// CHECK-LABEL: func.func @read_early
// CHECK: %[[A:.*]] = nn.relu %arg0
// CHECK-NEXT: %[[GA:.*]] = dist.all_reduce %[[A]] {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xf32>
// CHECK-NEXT: %[[B:.*]] = nn.relu %[[GA]]
// CHECK-NEXT: %[[C:.*]] = nn.relu %arg0
// CHECK-NEXT: dist.all_reduce %[[B]], %[[C]] {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xf32>, tensor<8xf32>
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @read_early(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
    %a = nn.relu %x : tensor<8xf32>
    %ga = dist.all_reduce %a {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xf32>
    %b = nn.relu %ga : tensor<8xf32>
    %gb = dist.all_reduce %b {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xf32>
    %c = nn.relu %x : tensor<8xf32>
    %gc = dist.all_reduce %c {axes = ["dp"], reduce = #dist.reduce<sum>} : tensor<8xf32>
    return %gb, %gc : tensor<8xf32>, tensor<8xf32>
  }
}

// -----

// ZeRO-1's gradient reduce_scatters bucket like all_reduces, but only with
// those scattering the same dim; results keep their shardings.
// CHECK-LABEL: func.func @zero1
// CHECK: %[[R:.*]]:2 = dist.reduce_scatter %{{.*}}, %{{.*}} {axes = ["dp"], dim = 0 : i64, dist.sharding = [#dist.sharding<{{\[\[}}"dp"]]>, #dist.sharding<{{\[\[}}"dp"], []]>], reduce = #dist.reduce<sum>} : tensor<8xf32>, tensor<4x8xf32> -> tensor<4xf32>, tensor<2x8xf32>
// CHECK: dist.reduce_scatter %{{.*}} {axes = ["dp"], dim = 1 : i64, reduce = #dist.reduce<sum>} : tensor<4x8xf32> -> tensor<4x4xf32>
module attributes {dist.mesh = #dist.mesh<["dp"=2]>} {
  func.func @zero1(%x: tensor<8xf32>, %y: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<2x8xf32>, tensor<4x4xf32>) {
    %a = dist.reduce_scatter %x {axes = ["dp"], dim = 0 : i64, reduce = #dist.reduce<sum>, dist.sharding = [#dist.sharding<[["dp"]]>]} : tensor<8xf32> -> tensor<4xf32>
    %b = dist.reduce_scatter %y {axes = ["dp"], dim = 0 : i64, reduce = #dist.reduce<sum>, dist.sharding = [#dist.sharding<[["dp"], []]>]} : tensor<4x8xf32> -> tensor<2x8xf32>
    %c = dist.reduce_scatter %y {axes = ["dp"], dim = 1 : i64, reduce = #dist.reduce<sum>} : tensor<4x8xf32> -> tensor<4x4xf32>
    return %a, %b, %c : tensor<4xf32>, tensor<2x8xf32>, tensor<4x4xf32>
  }
}
