// RUN: loom-opt %s --loom-assign-streams -split-input-file -verify-diagnostics | FileCheck %s
// RUN: loom-opt %s --loom-assign-streams -split-input-file -verify-diagnostics | loom-opt --loom-assign-streams -split-input-file | FileCheck %s

// The second RUN line checks that a second run changes nothing: the events
// of the first count as synchronization.

// Kernels and untagged copies without a stream run on "compute"; a stream
// already set is kept. One stream needs no events; num_events is set to 0.
// CHECK-LABEL: rt.program @default_compute rank = 0 streams = ["compute", "aux"] attributes {num_events = 0 : i64}
// CHECK:       rt.kernel "nn.relu"({{.*}}) on "compute"
// CHECK:       rt.copy {{.*}} on "compute" :
// CHECK:       rt.kernel "nn.neg"({{.*}}) on "aux"
// CHECK-NOT:   event
rt.program @default_compute rank = 0 streams = ["compute", "aux"] {
  %a = rt.input "a" offset = 0 : memref<16xf32>
  %b = rt.alloc offset = 256 : memref<16xf32>
  rt.kernel "nn.relu" (%a) -> (%b) : (memref<16xf32>) -> memref<16xf32>
  %c = rt.alloc offset = 512 : memref<16xf32>
  rt.copy %b -> %c : memref<16xf32> -> memref<16xf32>
  %d = rt.alloc offset = 768 : memref<16xf32>
  rt.kernel "nn.neg" (%a) -> (%d) on "aux" : (memref<16xf32>) -> memref<16xf32>
  rt.output "c" %c : memref<16xf32>
  rt.output "d" %d : memref<16xf32>
}

// -----

// A copy tagged loom.host_copy goes on "host_copy", which is added to the
// program's streams; it reads what a compute kernel wrote (RAW): an event
// is recorded right after the kernel and waited for right before the copy.
// A compute kernel that then reads the copy's target waits for it too.
// CHECK-LABEL: rt.program @host_copy rank = 0 streams = ["compute", "host_copy"] attributes {num_events = 2 : i64}
// CHECK:       %[[A:.*]] = rt.input "a"
// CHECK:       %[[B:.*]] = rt.alloc offset = 256
// CHECK-NEXT:  rt.kernel "nn.relu"(%[[A]]) -> (%[[B]]) on "compute"
// CHECK-NEXT:  rt.record_event 0 on "compute"
// CHECK-NEXT:  %[[C:.*]] = rt.alloc offset = 512
// CHECK-NEXT:  rt.wait_event 0 on "host_copy"
// CHECK-NEXT:  rt.copy %[[B]] -> %[[C]] on "host_copy" {loom.host_copy}
// CHECK-NEXT:  rt.record_event 1 on "host_copy"
// CHECK-NEXT:  %[[D:.*]] = rt.alloc offset = 768
// CHECK-NEXT:  rt.wait_event 1 on "compute"
// CHECK-NEXT:  rt.kernel "nn.neg"(%[[C]]) -> (%[[D]]) on "compute"
rt.program @host_copy rank = 0 streams = ["compute"] {
  %a = rt.input "a" offset = 0 : memref<16xf32>
  %b = rt.alloc offset = 256 : memref<16xf32>
  rt.kernel "nn.relu" (%a) -> (%b) : (memref<16xf32>) -> memref<16xf32>
  %c = rt.alloc offset = 512 : memref<16xf32>
  rt.copy %b -> %c {loom.host_copy} : memref<16xf32> -> memref<16xf32>
  %d = rt.alloc offset = 768 : memref<16xf32>
  rt.kernel "nn.neg" (%c) -> (%d) : (memref<16xf32>) -> memref<16xf32>
  rt.output "d" %d : memref<16xf32>
}

// -----

// Ops on other streams that touch disjoint bytes need no event, even when
// they are adjacent in byte ranges ([0, 64) and [64, 128)).
// CHECK-LABEL: rt.program @disjoint
// CHECK-SAME:  num_events = 0
// CHECK-NOT:   event
rt.program @disjoint rank = 0 streams = ["compute", "host_copy"] {
  %a = rt.input "a" offset = 0 : memref<16xf32>
  %b = rt.alloc offset = 64 : memref<16xf32>
  rt.kernel "nn.relu" (%a) -> (%a) : (memref<16xf32>) -> memref<16xf32>
  %c = rt.alloc offset = 128 : memref<16xf32>
  %d = rt.alloc offset = 192 : memref<16xf32>
  rt.copy %c -> %b {loom.host_copy} : memref<16xf32> -> memref<16xf32>
  rt.kernel "nn.neg" (%a) -> (%d) : (memref<16xf32>) -> memref<16xf32>
}

// -----

// Two ops that only read the same bytes on different streams need no event.
// CHECK-LABEL: rt.program @read_read
// CHECK-SAME:  num_events = 0
// CHECK-NOT:   event
rt.program @read_read rank = 0 streams = ["compute", "host_copy"] {
  %a = rt.input "a" offset = 0 : memref<16xf32>
  %b = rt.alloc offset = 256 : memref<16xf32>
  %c = rt.alloc offset = 512 : memref<16xf32>
  rt.kernel "nn.relu" (%a) -> (%b) : (memref<16xf32>) -> memref<16xf32>
  rt.copy %a -> %c {loom.host_copy} : memref<16xf32> -> memref<16xf32>
}

// -----

// A persistent and a scratch buffer at the same offset are different
// bytes: no event.
// CHECK-LABEL: rt.program @arenas_apart
// CHECK-SAME:  num_events = 0
// CHECK-NOT:   event
rt.program @arenas_apart rank = 0 streams = ["compute", "host_copy"] {
  %w = rt.param "w" offset = 0 : memref<16xf32>
  %a = rt.input "a" offset = 0 : memref<16xf32>
  %b = rt.alloc offset = 256 : memref<16xf32>
  rt.kernel "nn.relu" (%b) -> (%w) : (memref<16xf32>) -> memref<16xf32>
  rt.copy %b -> %a {loom.host_copy} : memref<16xf32> -> memref<16xf32>
}

// -----

// WAR: the host copy reads b; a later compute kernel writes bytes that
// overlap b (memory reuse: c at b's offset). The kernel must wait until the
// copy has read them.
// CHECK-LABEL: rt.program @war
// CHECK-SAME:  num_events = 1
// CHECK:       rt.copy {{.*}} on "host_copy" {loom.host_copy}
// CHECK-NEXT:  rt.record_event 0 on "host_copy"
// CHECK-NEXT:  %[[C:.*]] = rt.alloc offset = 256
// CHECK-NEXT:  rt.wait_event 0 on "compute"
// CHECK-NEXT:  rt.kernel "nn.iota"() -> (%[[C]]) {{.*}} on "compute"
rt.program @war rank = 0 streams = ["compute", "host_copy"] {
  %b = rt.input "b" offset = 256 : memref<16xf32>
  %h = rt.alloc offset = 0 : memref<16xf32>
  rt.copy %b -> %h {loom.host_copy} : memref<16xf32> -> memref<16xf32>
  %c = rt.alloc offset = 256 : memref<16xf32>
  rt.kernel "nn.iota" () -> (%c) attrs {dim = 0 : i64} : () -> memref<16xf32>
}

// -----

// WAW: two writes of overlapping bytes on different streams are ordered.
// Overlap is by bytes through aliases: the copy writes an alias of b.
// CHECK-LABEL: rt.program @waw_alias
// CHECK-SAME:  num_events = 1
// CHECK:       rt.kernel "nn.iota"{{.*}} on "compute"
// CHECK-NEXT:  rt.record_event 0 on "compute"
// CHECK:       rt.wait_event 0 on "host_copy"
// CHECK-NEXT:  rt.copy {{.*}} on "host_copy"
rt.program @waw_alias rank = 0 streams = ["compute", "host_copy"] {
  %a = rt.input "a" offset = 0 : memref<16xf32>
  %b = rt.alloc offset = 256 : memref<4x4xf32>
  rt.kernel "nn.iota" () -> (%b) attrs {dim = 0 : i64} : () -> memref<4x4xf32>
  %ba = rt.alias %b : memref<4x4xf32> -> memref<16xf32>
  rt.copy %a -> %ba {loom.host_copy} : memref<16xf32> -> memref<16xf32>
}

// -----

// One event per producer, shared by every stream that waits for it; a
// stream that has waited for an op needs no wait for that op or for earlier
// ops of its stream (host_copy's second copy reads relu's output, computed
// before exp's).
// CHECK-LABEL: rt.program @shared_event
// CHECK-SAME:  num_events = 1
// CHECK:       rt.kernel "nn.relu"{{.*}} on "compute"
// CHECK-NEXT:  rt.kernel "nn.exp"{{.*}} on "compute"
// CHECK-NEXT:  rt.record_event 0 on "compute"
// CHECK-NEXT:  rt.wait_event 0 on "host_copy"
// CHECK-NEXT:  rt.copy {{.*}} on "host_copy"
// CHECK-NEXT:  rt.copy {{.*}} on "host_copy"
// CHECK-NEXT:  rt.wait_event 0 on "tp_comm"
// CHECK-NEXT:  rt.kernel "nn.neg"{{.*}} on "tp_comm"
// CHECK-NEXT:  rt.kernel "nn.abs"{{.*}} on "tp_comm"
// CHECK-NEXT:  }
rt.program @shared_event rank = 0 streams = ["compute", "host_copy", "tp_comm"] {
  %a = rt.input "a" offset = 0 : memref<16xf32>
  %b = rt.alloc offset = 256 : memref<16xf32>
  %c = rt.alloc offset = 512 : memref<16xf32>
  %d = rt.alloc offset = 768 : memref<16xf32>
  %e = rt.alloc offset = 1024 : memref<16xf32>
  %f = rt.alloc offset = 1280 : memref<16xf32>
  %g = rt.alloc offset = 1536 : memref<16xf32>
  rt.kernel "nn.relu" (%a) -> (%b) : (memref<16xf32>) -> memref<16xf32>
  rt.kernel "nn.exp" (%a) -> (%c) : (memref<16xf32>) -> memref<16xf32>
  rt.copy %c -> %d {loom.host_copy} : memref<16xf32> -> memref<16xf32>
  rt.copy %b -> %e {loom.host_copy} : memref<16xf32> -> memref<16xf32>
  rt.kernel "nn.neg" (%c) -> (%f) on "tp_comm" : (memref<16xf32>) -> memref<16xf32>
  rt.kernel "nn.abs" (%b) -> (%g) on "tp_comm" : (memref<16xf32>) -> memref<16xf32>
}

// -----

// Events are numbered in the order the pass creates them, which is the
// order their first waiters come in, not their producers'.
// CHECK-LABEL: rt.program @numbering
// CHECK-SAME:  num_events = 2
// CHECK:       rt.kernel "nn.relu"{{.*}} on "compute"
// CHECK-NEXT:  rt.record_event 1 on "compute"
// CHECK-NEXT:  rt.kernel "nn.exp"{{.*}} on "aux"
// CHECK-NEXT:  rt.record_event 0 on "aux"
// CHECK-NEXT:  rt.wait_event 0 on "host_copy"
// CHECK-NEXT:  rt.copy {{.*}} on "host_copy"
// CHECK-NEXT:  rt.wait_event 1 on "host_copy"
// CHECK-NEXT:  rt.copy {{.*}} on "host_copy"
rt.program @numbering rank = 0 streams = ["compute", "aux", "host_copy"] {
  %a = rt.input "a" offset = 0 : memref<16xf32>
  %b = rt.alloc offset = 256 : memref<16xf32>
  %c = rt.alloc offset = 512 : memref<16xf32>
  %d = rt.alloc offset = 768 : memref<16xf32>
  %e = rt.alloc offset = 1024 : memref<16xf32>
  rt.kernel "nn.relu" (%a) -> (%b) : (memref<16xf32>) -> memref<16xf32>
  rt.kernel "nn.exp" (%a) -> (%c) on "aux" : (memref<16xf32>) -> memref<16xf32>
  rt.copy %c -> %d {loom.host_copy} : memref<16xf32> -> memref<16xf32>
  rt.copy %b -> %e {loom.host_copy} : memref<16xf32> -> memref<16xf32>
}

// -----

// Numbering continues after the events a program already has.
// CHECK-LABEL: rt.program @continue_numbering
// CHECK-SAME:  num_events = 4
// CHECK:       rt.record_event 3 on "compute"
// CHECK:       rt.wait_event 3 on "host_copy"
rt.program @continue_numbering rank = 0 streams = ["compute", "host_copy"] attributes {num_events = 3} {
  %a = rt.input "a" offset = 0 : memref<16xf32>
  %b = rt.alloc offset = 256 : memref<16xf32>
  rt.kernel "nn.relu" (%a) -> (%b) : (memref<16xf32>) -> memref<16xf32>
  %c = rt.alloc offset = 512 : memref<16xf32>
  rt.copy %b -> %c {loom.host_copy} : memref<16xf32> -> memref<16xf32>
}

// -----

// A wait already in the program synchronizes: no second event is added.
// CHECK-LABEL: rt.program @existing_wait
// CHECK-SAME:  num_events = 1
// CHECK:       rt.record_event 0 on "compute"
// CHECK-NEXT:  rt.wait_event 0 on "host_copy"
// CHECK-NEXT:  rt.copy
// CHECK-NOT:   event
rt.program @existing_wait rank = 0 streams = ["compute", "host_copy"] attributes {num_events = 1} {
  %a = rt.input "a" offset = 0 : memref<16xf32>
  %b = rt.alloc offset = 256 : memref<16xf32>
  rt.kernel "nn.relu" (%a) -> (%b) on "compute" : (memref<16xf32>) -> memref<16xf32>
  %c = rt.alloc offset = 512 : memref<16xf32>
  rt.record_event 0 on "compute"
  rt.wait_event 0 on "host_copy"
  rt.copy %b -> %c on "host_copy" {loom.host_copy} : memref<16xf32> -> memref<16xf32>
}

// -----

// Byte ranges come from planned offsets: without them the pass cannot tell
// which ops meet.
rt.program @unplanned rank = 0 streams = ["compute"] {
  %a = rt.input "a" : memref<16xf32>
  %b = rt.alloc : memref<16xf32>
  // expected-error @+1 {{'rt.kernel' op uses a buffer without a planned offset; run --loom-plan-memory first}}
  rt.kernel "nn.relu" (%a) -> (%b) : (memref<16xf32>) -> memref<16xf32>
}
