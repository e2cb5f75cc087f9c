// RUN: loom-opt %s --loom-assign-streams -split-input-file -verify-diagnostics | FileCheck %s
// RUN: loom-opt %s --loom-assign-streams -split-input-file | loom-opt --loom-assign-streams -split-input-file | FileCheck %s

// Collectives go on communication streams by the role of their axes, and
// events join them to the compute stream exactly as for kernels. The second
// RUN line checks that a second run changes nothing.

// A TP all-reduce of a kernel's result goes on "tp_comm": it waits for the
// kernel (RAW), and the kernel reading its output waits for it in turn.
// CHECK-LABEL: rt.program @tp_all_reduce rank = 0 streams = ["compute", "tp_comm"] attributes {num_events = 2 : i64}
// CHECK:       rt.kernel "nn.relu"({{.*}}) -> (%[[B:.*]]) on "compute"
// CHECK-NEXT:  rt.record_event 0 on "compute"
// CHECK-NEXT:  %[[C:.*]] = rt.alloc offset = 512
// CHECK-NEXT:  rt.wait_event 0 on "tp_comm"
// CHECK-NEXT:  rt.collective all_reduce(%[[B]]) -> (%[[C]]) on "tp_comm" {axes = ["tp"], reduce = #rt.reduce<sum>}
// CHECK-NEXT:  rt.record_event 1 on "tp_comm"
// CHECK-NEXT:  %[[D:.*]] = rt.alloc offset = 768
// CHECK-NEXT:  rt.wait_event 1 on "compute"
// CHECK-NEXT:  rt.kernel "nn.neg"(%[[C]]) -> (%[[D]]) on "compute"
module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 2>} {
  rt.program @tp_all_reduce rank = 0 streams = ["compute"] {
    %a = rt.input "a" offset = 0 : memref<16xf32>
    %b = rt.alloc offset = 256 : memref<16xf32>
    rt.kernel "nn.relu" (%a) -> (%b) : (memref<16xf32>) -> memref<16xf32>
    %c = rt.alloc offset = 512 : memref<16xf32>
    rt.collective all_reduce (%b) -> (%c) {axes = ["tp"], reduce = #rt.reduce<sum>} : (memref<16xf32>) -> memref<16xf32>
    %d = rt.alloc offset = 768 : memref<16xf32>
    rt.kernel "nn.neg" (%c) -> (%d) : (memref<16xf32>) -> memref<16xf32>
    rt.output "d" %d : memref<16xf32>
  }
}

// -----

// A DP gradient all-reduce (persistent bytes) on "dp_comm" overlaps with
// compute that touches other bytes: the unrelated kernel does not wait, the
// kernel that reads the reduced gradient does. A collective over
// ["dp", "tp"] counts as tensor-parallel; one over ["sp"] gets "sp_comm".
// CHECK-LABEL: rt.program @dp_overlap rank = 0 streams = ["compute", "dp_comm", "tp_comm", "sp_comm"] attributes {num_events = 3 : i64}
// CHECK:       rt.collective all_reduce(%[[G:.*]]) -> (%[[G]]) on "dp_comm"
// CHECK-NEXT:  rt.record_event 0 on "dp_comm"
// CHECK-NEXT:  rt.kernel "nn.relu"({{.*}}) on "compute"
// CHECK-NEXT:  rt.record_event 1 on "compute"
// CHECK-NEXT:  rt.alloc
// CHECK-NEXT:  rt.wait_event 0 on "compute"
// CHECK-NEXT:  rt.kernel "nn.neg"(%[[G]]) {{.*}} on "compute"
// CHECK-NEXT:  rt.record_event 2 on "compute"
// CHECK-NEXT:  rt.alloc
// CHECK-NEXT:  rt.wait_event 1 on "tp_comm"
// CHECK-NEXT:  rt.collective all_gather({{.*}}) on "tp_comm" {axes = ["dp", "tp"]
// CHECK-NEXT:  rt.alloc
// CHECK-NEXT:  rt.wait_event 2 on "sp_comm"
// CHECK-NEXT:  rt.collective all_reduce({{.*}}) on "sp_comm" {axes = ["sp"]
module attributes {rt.mesh_axes = ["dp", "tp", "sp"], rt.mesh_shape = array<i64: 2, 2, 1>} {
  rt.program @dp_overlap rank = 0 streams = ["compute"] {
    %g = rt.param "grad" offset = 0 : memref<16xf32>
    %x = rt.input "x" offset = 0 : memref<16xf32>
    %y = rt.alloc offset = 256 : memref<16xf32>
    rt.collective all_reduce (%g) -> (%g) {axes = ["dp"], reduce = #rt.reduce<avg>} : (memref<16xf32>) -> memref<16xf32>
    rt.kernel "nn.relu" (%x) -> (%y) : (memref<16xf32>) -> memref<16xf32>
    %z = rt.alloc offset = 512 : memref<16xf32>
    rt.kernel "nn.neg" (%g) -> (%z) : (memref<16xf32>) -> memref<16xf32>
    %w = rt.alloc offset = 768 : memref<64xf32>
    rt.collective all_gather (%y) -> (%w) {axes = ["dp", "tp"], dim = 0} : (memref<16xf32>) -> memref<64xf32>
    %v = rt.alloc offset = 1024 : memref<16xf32>
    rt.collective all_reduce (%z) -> (%v) {axes = ["sp"], reduce = #rt.reduce<sum>} : (memref<16xf32>) -> memref<16xf32>
    rt.output "w" %w : memref<64xf32>
    rt.output "v" %v : memref<16xf32>
  }
}

// -----

// Send and recv go on "pp_comm"; a stream already set is kept.
// CHECK-LABEL: rt.program @stage0 rank = 0 streams = ["compute", "pp_comm"]
// CHECK:       rt.collective send({{.*}}) -> () on "pp_comm"
// CHECK-LABEL: rt.program @stage1 rank = 1 streams = ["compute", "my_stream"]
// CHECK:       rt.collective recv() -> ({{.*}}) on "my_stream"
module attributes {rt.mesh_axes = ["pp"], rt.mesh_shape = array<i64: 2>} {
  rt.program @stage0 rank = 0 streams = ["compute"] {
    %x = rt.input "x" offset = 0 : memref<4xf32>
    rt.collective send (%x) -> () {peer = 1} : (memref<4xf32>) -> ()
  }
  rt.program @stage1 rank = 1 streams = ["compute", "my_stream"] {
    %y = rt.alloc offset = 0 : memref<4xf32>
    rt.collective recv () -> (%y) on "my_stream" {peer = 0} : () -> memref<4xf32>
    rt.output "y" %y : memref<4xf32>
  }
}
