// RUN: loom-opt %s --loom-lower-to-rt | FileCheck %s

// A pipelined step's schedule (--loom-pipeline-split's pipe.schedule_csv)
// becomes rt.schedule_csv, as it is, beside the mesh: the executable stores
// it for loom-inspect.
// CHECK: module attributes {rt.mesh_axes = ["pp"], rt.mesh_shape = array<i64: 2>, rt.schedule_csv = "# loom-schedule kind=1f1b ranks=2 stages=2 microbatches=1 chains=1\0A0F0,0SEND_F0\0A1RECV_F0,1F0\0A"}
// CHECK-NOT: pipe.schedule_csv
// CHECK: rt.program @main_pp0 rank = 0
// CHECK: rt.program @main_pp1 rank = 1
module attributes {dist.mesh = #dist.mesh<["pp"=2]>, pipe.schedule_csv = "# loom-schedule kind=1f1b ranks=2 stages=2 microbatches=1 chains=1\0A0F0,0SEND_F0\0A1RECV_F0,1F0\0A"} {
  func.func @main_pp0(%x: tensor<4xf32> {loom.name = "x"}) attributes {pipe.rank = 0 : i64} {
    dist.exchange(%x : tensor<4xf32>) {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64>}
    return
  }
  func.func @main_pp1() -> (tensor<4xf32> {loom.name = "y"}) attributes {pipe.rank = 1 : i64} {
    %y = dist.exchange {axes = ["pp"], send_peers = array<i64>, recv_peers = array<i64: 0>} -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
