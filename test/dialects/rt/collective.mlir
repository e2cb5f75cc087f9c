// RUN: loom-opt %s -split-input-file | FileCheck %s
// RUN: loom-opt %s -split-input-file | loom-opt -split-input-file | FileCheck %s
// RUN: loom-opt %s -split-input-file --mlir-print-op-generic | loom-opt -split-input-file | FileCheck %s

// Multi-rank rt: the module's mesh, sharded params and inputs, and every
// kind of rt.collective, through the printer, a re-parse and the generic form.

// CHECK: module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 2>}
// CHECK-LABEL: rt.program @spmd rank = 0 streams = ["compute", "tp_comm"]
module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 2>} {
  rt.program @spmd rank = 0 streams = ["compute", "tp_comm"] {
    // CHECK: %[[T:.*]] = rt.input "tokens" {global_shape = array<i64: 8, 17>, sharding = {{\[}}["dp"], []]} : memref<4x17xi64>
    %t = rt.input "tokens" {global_shape = array<i64: 8, 17>, sharding = [["dp"], []]} : memref<4x17xi64>
    // CHECK: %[[W:.*]] = rt.param "w" {global_shape = array<i64: 8, 16>, init = "normal", init_scale = 2.000000e-02 : f64, sharding = {{\[}}[], ["tp"]]} : memref<8x8xf32>
    %w = rt.param "w" {init = "normal", init_scale = 0.02 : f64, global_shape = array<i64: 8, 16>, sharding = [[], ["tp"]]} : memref<8x8xf32>
    %a = rt.alloc : memref<8x8xf32>
    // CHECK: rt.collective all_reduce(%[[W]]) -> (%{{.*}}) on "tp_comm" {axes = ["tp"], reduce = #rt.reduce<sum>} : (memref<8x8xf32>) -> memref<8x8xf32>
    rt.collective all_reduce (%w) -> (%a) on "tp_comm" {axes = ["tp"], reduce = #rt.reduce<sum>} : (memref<8x8xf32>) -> memref<8x8xf32>
    %g = rt.alloc : memref<8x16xf32>
    // CHECK: rt.collective all_gather(%[[W]]) -> (%{{.*}}) {axes = ["tp"], dim = 1 : i64} : (memref<8x8xf32>) -> memref<8x16xf32>
    rt.collective all_gather (%w) -> (%g) {axes = ["tp"], dim = 1} : (memref<8x8xf32>) -> memref<8x16xf32>
    %s = rt.alloc : memref<2x8xf32>
    // CHECK: rt.collective reduce_scatter(%{{.*}}) -> (%{{.*}}) {axes = ["dp", "tp"], dim = 0 : i64, reduce = #rt.reduce<avg>} : (memref<8x8xf32>) -> memref<2x8xf32>
    rt.collective reduce_scatter (%a) -> (%s) {axes = ["dp", "tp"], dim = 0, reduce = #rt.reduce<avg>} : (memref<8x8xf32>) -> memref<2x8xf32>
    %x = rt.alloc : memref<4x16xf32>
    // CHECK: rt.collective all_to_all(%{{.*}}) -> (%{{.*}}) {axes = ["dp"], concat_dim = 1 : i64, split_dim = 0 : i64} : (memref<8x8xf32>) -> memref<4x16xf32>
    rt.collective all_to_all (%a) -> (%x) {axes = ["dp"], split_dim = 0, concat_dim = 1} : (memref<8x8xf32>) -> memref<4x16xf32>
    // CHECK: rt.collective broadcast(%{{.*}}) -> (%{{.*}}) {axes = ["dp"], root = 1 : i64} : (memref<8x8xf32>) -> memref<8x8xf32>
    rt.collective broadcast (%a) -> (%a) {axes = ["dp"], root = 1} : (memref<8x8xf32>) -> memref<8x8xf32>
    rt.output "s" %s : memref<2x8xf32>
  }
}

// -----

// A pipeline: one program per rank, send and recv between them.
// CHECK-LABEL: rt.program @stage0 rank = 0
// CHECK: rt.collective send(%{{.*}}) -> () {peer = 1 : i64} : (memref<4xbf16>) -> ()
// CHECK-LABEL: rt.program @stage1 rank = 1
// CHECK: rt.collective recv() -> (%{{.*}}) on "pp_comm" {peer = 0 : i64} : () -> memref<4xbf16>
module attributes {rt.mesh_axes = ["pp"], rt.mesh_shape = array<i64: 2>} {
  rt.program @stage0 rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<4xbf16>
    rt.collective send (%x) -> () {peer = 1} : (memref<4xbf16>) -> ()
  }
  rt.program @stage1 rank = 1 streams = ["compute", "pp_comm"] {
    %y = rt.alloc : memref<4xbf16>
    rt.collective recv () -> (%y) on "pp_comm" {peer = 0} : () -> memref<4xbf16>
    rt.output "y" %y : memref<4xbf16>
  }
}

// -----

// An exchange: a send peer per input, a receive peer per output, indices in
// the group over `axes` (here pp, of 2 in a 2x2 mesh).
// CHECK-LABEL: rt.program @exchange
// CHECK: rt.collective exchange(%{{.*}}, %{{.*}}) -> (%{{.*}}) on "pp_comm" {axes = ["pp"], recv_peers = array<i64: 1>, send_peers = array<i64: 1, 0>} : (memref<2x12x32xbf16>, memref<4xi64>) -> memref<2x12x32xbf16>
// CHECK: rt.collective exchange() -> (%{{.*}}, %{{.*}}) {axes = ["pp"], recv_peers = array<i64: 0, 1>, send_peers = array<i64>} : () -> (memref<3xf32>, memref<3xf32>)
module attributes {rt.mesh_axes = ["pp", "tp"], rt.mesh_shape = array<i64: 2, 2>} {
  rt.program @exchange rank = 0 streams = ["compute", "pp_comm"] {
    %act = rt.input "act" : memref<2x12x32xbf16>
    %ids = rt.input "ids" : memref<4xi64>
    %grad = rt.alloc : memref<2x12x32xbf16>
    rt.collective exchange (%act, %ids) -> (%grad) on "pp_comm" {axes = ["pp"], send_peers = array<i64: 1, 0>, recv_peers = array<i64: 1>} : (memref<2x12x32xbf16>, memref<4xi64>) -> memref<2x12x32xbf16>
    %a = rt.alloc : memref<3xf32>
    %b = rt.alloc : memref<3xf32>
    rt.collective exchange () -> (%a, %b) {axes = ["pp"], send_peers = array<i64>, recv_peers = array<i64: 0, 1>} : () -> (memref<3xf32>, memref<3xf32>)
    rt.output "grad" %grad : memref<2x12x32xbf16>
  }
}

// -----

// Without a mesh the verifier checks what does not depend on the group size.
// CHECK-LABEL: rt.program @no_mesh
// CHECK: rt.collective all_gather
rt.program @no_mesh rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<4x8xi32>
  %y = rt.alloc : memref<4x24xi32>
  rt.collective all_gather (%x) -> (%y) {axes = ["tp"], dim = 1} : (memref<4x8xi32>) -> memref<4x24xi32>
  rt.output "y" %y : memref<4x24xi32>
}
