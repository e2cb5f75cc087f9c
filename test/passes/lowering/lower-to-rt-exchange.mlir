// RUN: loom-opt %s --loom-lower-to-rt | FileCheck %s

// dist.exchange becomes rt.collective exchange: its inputs, one new
// buffer per result (what later ops read), `axes` and the peer lists as
// they were; an exchange that only sends has no outputs.
// CHECK: module attributes {rt.mesh_axes = ["pp", "tp"], rt.mesh_shape = array<i64: 2, 2>}
// CHECK: %[[ACT:.*]] = rt.input "act" : memref<2x12x32xf32>
// CHECK: %[[IDS:.*]] = rt.input "ids" : memref<4xi64>
// CHECK: %[[GRAD:.*]] = rt.alloc {{.*}}: memref<2x12x32xf32>
// CHECK: %[[MASK:.*]] = rt.alloc {{.*}}: memref<3xbf16>
// CHECK: rt.collective exchange(%[[ACT]], %[[IDS]]) -> (%[[GRAD]], %[[MASK]]) {axes = ["pp"], recv_peers = array<i64: 1, 0>, send_peers = array<i64: 1, 1>} : (memref<2x12x32xf32>, memref<4xi64>) -> (memref<2x12x32xf32>, memref<3xbf16>)
// CHECK: rt.kernel "nn.neg"(%[[GRAD]]) -> (%[[NEG:[0-9]+]])
// CHECK: rt.collective exchange(%[[NEG]]) -> () {axes = ["pp"], recv_peers = array<i64>, send_peers = array<i64: 0>} : (memref<2x12x32xf32>) -> ()
// CHECK: rt.output "mask" %[[MASK]]
module attributes {dist.mesh = #dist.mesh<["pp"=2, "tp"=2]>} {
  func.func @main(%act: tensor<2x12x32xf32> {loom.name = "act"}, %ids: tensor<4xi64> {loom.name = "ids"}) -> (tensor<3xbf16> {loom.name = "mask"}) {
    %grad, %mask = dist.exchange(%act, %ids : tensor<2x12x32xf32>, tensor<4xi64>) {axes = ["pp"], send_peers = array<i64: 1, 1>, recv_peers = array<i64: 1, 0>} -> tensor<2x12x32xf32>, tensor<3xbf16>
    %neg = nn.neg %grad : tensor<2x12x32xf32>
    dist.exchange(%neg : tensor<2x12x32xf32>) {axes = ["pp"], send_peers = array<i64: 0>, recv_peers = array<i64>}
    return %mask : tensor<3xbf16>
  }
}
