// RUN: loom-opt %s --loom-plan-memory -split-input-file | FileCheck %s
// RUN: loom-opt %s --loom-plan-memory=alignment=64 -split-input-file | FileCheck %s --check-prefix=ALIGN64

// A chain a -> b -> c -> d -> e of 4 KiB buffers: each buffer is dead once
// the next kernel has read it, so two slots suffice and they alternate. A
// kernel's output never shares its own input's bytes.
// CHECK-LABEL: rt.program @chain
// CHECK-SAME:  arena_sizes = array<i64: 0, 8192>, scratch_unplanned_bytes = 20480
// CHECK:       rt.input "a" offset = 0 : memref<1024xf32>
// CHECK:       rt.alloc offset = 4096 : memref<1024xf32>
// CHECK:       rt.alloc offset = 0 : memref<1024xf32>
// CHECK:       rt.alloc offset = 4096 : memref<1024xf32>
// CHECK:       rt.alloc offset = 0 : memref<1024xf32>
// ALIGN64-LABEL: rt.program @chain
// ALIGN64-SAME:  arena_sizes = array<i64: 0, 8192>, scratch_unplanned_bytes = 20480
rt.program @chain rank = 0 streams = ["compute"] {
  %a = rt.input "a" : memref<1024xf32>
  %b = rt.alloc : memref<1024xf32>
  rt.kernel "nn.relu" (%a) -> (%b) : (memref<1024xf32>) -> memref<1024xf32>
  %c = rt.alloc : memref<1024xf32>
  rt.kernel "nn.exp" (%b) -> (%c) : (memref<1024xf32>) -> memref<1024xf32>
  %d = rt.alloc : memref<1024xf32>
  rt.kernel "nn.neg" (%c) -> (%d) : (memref<1024xf32>) -> memref<1024xf32>
  %e = rt.alloc : memref<1024xf32>
  rt.kernel "nn.neg" (%d) -> (%e) : (memref<1024xf32>) -> memref<1024xf32>
  rt.output "e" %e : memref<1024xf32>
}

// -----

// b and c are both read by the add that writes d, so b, c and d are live at
// once: three distinct slots (c may take a's bytes: a is dead by then).
// CHECK-LABEL: rt.program @overlap
// CHECK-SAME:  arena_sizes = array<i64: 0, 768>, scratch_unplanned_bytes = 1024
// CHECK:       rt.input "a" offset = 0
// CHECK:       rt.alloc offset = 256
// CHECK:       rt.alloc offset = 0
// CHECK:       rt.alloc offset = 512
rt.program @overlap rank = 0 streams = ["compute"] {
  %a = rt.input "a" : memref<16xf32>
  %b = rt.alloc : memref<16xf32>
  rt.kernel "nn.relu" (%a) -> (%b) : (memref<16xf32>) -> memref<16xf32>
  %c = rt.alloc : memref<16xf32>
  rt.kernel "nn.exp" (%b) -> (%c) : (memref<16xf32>) -> memref<16xf32>
  %d = rt.alloc : memref<16xf32>
  rt.kernel "nn.add" (%b, %c) -> (%d) : (memref<16xf32>, memref<16xf32>) -> memref<16xf32>
  rt.output "d" %d : memref<16xf32>
}

// -----

// An input is filled by the caller before the step: it is live from the
// start even if first read late, so the early temporary t (dead before x is
// read) cannot take its bytes.
// CHECK-LABEL: rt.program @input_from_start
// CHECK-SAME:  arena_sizes = array<i64: 0, 768>
// CHECK:       rt.alloc offset = 0 : memref<16xi64>
// CHECK:       rt.alloc offset = 256 : memref<16xi64>
// CHECK:       rt.input "x" offset = 512 : memref<16xi64>
rt.program @input_from_start rank = 0 streams = ["compute"] {
  %t = rt.alloc : memref<16xi64>
  rt.kernel "nn.iota" () -> (%t) attrs {dim = 0 : i64} : () -> memref<16xi64>
  %u = rt.alloc : memref<16xi64>
  rt.kernel "nn.neg" (%t) -> (%u) : (memref<16xi64>) -> memref<16xi64>
  %x = rt.input "x" : memref<16xi64>
  %y = rt.alloc : memref<16xi64>
  rt.kernel "nn.add" (%x, %u) -> (%y) : (memref<16xi64>, memref<16xi64>) -> memref<16xi64>
  rt.output "y" %y : memref<16xi64>
}

// -----

// An output is read by the caller after the step: it stays live to the end,
// so neither c nor d (both after b's last kernel use) may reuse b's bytes;
// c reuses the dead input a's, and d, live with c, goes above.
// CHECK-LABEL: rt.program @output_to_end
// CHECK-SAME:  arena_sizes = array<i64: 0, 768>, scratch_unplanned_bytes = 1024
// CHECK:       rt.input "a" offset = 0
// CHECK:       rt.alloc offset = 256
// CHECK:       rt.alloc offset = 0
// CHECK:       rt.alloc offset = 512
rt.program @output_to_end rank = 0 streams = ["compute"] {
  %a = rt.input "a" : memref<16xf32>
  %b = rt.alloc : memref<16xf32>
  rt.kernel "nn.relu" (%a) -> (%b) : (memref<16xf32>) -> memref<16xf32>
  rt.output "b" %b : memref<16xf32>
  %c = rt.alloc : memref<16xf32>
  rt.kernel "nn.exp" (%b) -> (%c) : (memref<16xf32>) -> memref<16xf32>
  %d = rt.alloc : memref<16xf32>
  rt.kernel "nn.neg" (%c) -> (%d) : (memref<16xf32>) -> memref<16xf32>
  rt.output "d" %d : memref<16xf32>
}

// -----

// An alias shares its root's bytes: a use of the alias keeps the root live.
// b's last direct use is its definition, but its alias is read by the last
// kernel, so neither c, d nor e may take b's bytes (256). Aliases get no
// offset.
// CHECK-LABEL: rt.program @alias_extends_root
// CHECK-SAME:  arena_sizes = array<i64: 0, 768>
// CHECK:       rt.input "a" offset = 0 : memref<4x4xf32>
// CHECK:       rt.alloc offset = 256 : memref<4x4xf32>
// CHECK:       rt.alias %{{.*}} : memref<4x4xf32> -> memref<16xf32>
// CHECK:       rt.alloc offset = 0 : memref<16xf32>
// CHECK:       rt.alloc offset = 512 : memref<16xf32>
// CHECK:       rt.alloc offset = 0 : memref<16xf32>
rt.program @alias_extends_root rank = 0 streams = ["compute"] {
  %a = rt.input "a" : memref<4x4xf32>
  %b = rt.alloc : memref<4x4xf32>
  rt.kernel "nn.relu" (%a) -> (%b) : (memref<4x4xf32>) -> memref<4x4xf32>
  %ba = rt.alias %b : memref<4x4xf32> -> memref<16xf32>
  %c = rt.alloc : memref<16xf32>
  rt.kernel "nn.iota" () -> (%c) attrs {dim = 0 : i64} : () -> memref<16xf32>
  %d = rt.alloc : memref<16xf32>
  rt.kernel "nn.exp" (%c) -> (%d) : (memref<16xf32>) -> memref<16xf32>
  %e = rt.alloc : memref<16xf32>
  rt.kernel "nn.add" (%ba, %d) -> (%e) : (memref<16xf32>, memref<16xf32>) -> memref<16xf32>
  rt.output "e" %e : memref<16xf32>
}

// -----

// An output through an alias keeps the root live to the end.
// CHECK-LABEL: rt.program @alias_output
// CHECK:       rt.input "a" offset = 0 : memref<4x4xf32>
// CHECK:       rt.alloc offset = 256 : memref<4x4xf32>
// CHECK:       rt.alloc offset = 0 : memref<16xf32>
rt.program @alias_output rank = 0 streams = ["compute"] {
  %a = rt.input "a" : memref<4x4xf32>
  %b = rt.alloc : memref<4x4xf32>
  rt.kernel "nn.relu" (%a) -> (%b) : (memref<4x4xf32>) -> memref<4x4xf32>
  %ba = rt.alias %b : memref<4x4xf32> -> memref<16xf32>
  rt.output "b" %ba : memref<16xf32>
  %c = rt.alloc : memref<16xf32>
  rt.kernel "nn.exp" (%ba) -> (%c) : (memref<16xf32>) -> memref<16xf32>
  rt.output "c" %c : memref<16xf32>
}

// -----

// Parameters and constants: one after another in the persistent arena, in
// program order, each at an aligned offset (16 B -> 256, 4000 B -> 4096, a
// 0-element buffer still takes one aligned slot); they never reuse, and they
// do not count as scratch.
// CHECK-LABEL: rt.program @params
// CHECK-SAME:  arena_sizes = array<i64: 4864, 256>, scratch_unplanned_bytes = 256
// CHECK:       rt.param "w" offset = 0 : memref<4xf32>
// CHECK:       rt.param "big" offset = 256 {{.*}}: memref<1000xf32>
// CHECK:       rt.param "constant.0" offset = 4352 frozen
// CHECK:       rt.param "empty" offset = 4608 : memref<0xf32>
// ALIGN64-LABEL: rt.program @params
// ALIGN64-SAME:  arena_sizes = array<i64: 4224, 64>, scratch_unplanned_bytes = 64
// ALIGN64:       rt.param "w" offset = 0 : memref<4xf32>
// ALIGN64:       rt.param "big" offset = 64 {{.*}}: memref<1000xf32>
// ALIGN64:       rt.param "constant.0" offset = 4096 frozen
// ALIGN64:       rt.param "empty" offset = 4160 : memref<0xf32>
rt.program @params rank = 0 streams = ["compute"] {
  %w = rt.param "w" : memref<4xf32>
  %big = rt.param "big" {init = "normal", init_scale = 0.02 : f64} : memref<1000xf32>
  %k = rt.param "constant.0" frozen {value = dense<1.0> : tensor<2xf32>} : memref<2xf32>
  %z = rt.param "empty" : memref<0xf32>
  %y = rt.alloc : memref<4xf32>
  rt.kernel "nn.add" (%w, %w) -> (%y) : (memref<4xf32>, memref<4xf32>) -> memref<4xf32>
  rt.output "y" %y : memref<4xf32>
}

// -----

// The alignment option: with 64-byte alignment 100-byte buffers take
// 128-byte slots (256 by default); element sizes count (i1 and i8 take a byte each,
// bf16 two).
// CHECK-LABEL: rt.program @sizes
// CHECK-SAME:  arena_sizes = array<i64: 0, 768>, scratch_unplanned_bytes = 1024
// CHECK:       rt.input "a" offset = 0 : memref<100xi8>
// CHECK:       rt.alloc offset = 256 : memref<100xi1>
// CHECK:       rt.alloc offset = 0 : memref<50xbf16>
// CHECK:       rt.alloc offset = 512 : memref<25xf32>
// ALIGN64-LABEL: rt.program @sizes
// ALIGN64-SAME:  arena_sizes = array<i64: 0, 384>, scratch_unplanned_bytes = 512
// ALIGN64:       rt.input "a" offset = 0 : memref<100xi8>
// ALIGN64:       rt.alloc offset = 128 : memref<100xi1>
// ALIGN64:       rt.alloc offset = 0 : memref<50xbf16>
// ALIGN64:       rt.alloc offset = 256 : memref<25xf32>
rt.program @sizes rank = 0 streams = ["compute"] {
  %a = rt.input "a" : memref<100xi8>
  %b = rt.alloc : memref<100xi1>
  rt.kernel "nn.cast" (%a) -> (%b) : (memref<100xi8>) -> memref<100xi1>
  %c = rt.alloc : memref<50xbf16>
  rt.kernel "nn.cast" (%b) -> (%c) : (memref<100xi1>) -> memref<50xbf16>
  %d = rt.alloc : memref<25xf32>
  rt.kernel "nn.add" (%b, %c) -> (%d) : (memref<100xi1>, memref<50xbf16>) -> memref<25xf32>
  rt.output "d" %d : memref<25xf32>
}

// -----

// Greedy, largest first: the 8 KiB buffer is placed at 0 and the small ones
// that live alongside it go above it; a small buffer not live with it reuses
// its bytes.
// CHECK-LABEL: rt.program @largest_first
// CHECK-SAME:  arena_sizes = array<i64: 0, 8448>, scratch_unplanned_bytes = 8960
// CHECK:       rt.input "a" offset = 8192 : memref<16xf32>
// CHECK:       rt.alloc offset = 0 : memref<2048xf32>
// CHECK:       rt.alloc offset = 8192 : memref<16xf32>
// CHECK:       rt.alloc offset = 0 : memref<16xf32>
rt.program @largest_first rank = 0 streams = ["compute"] {
  %a = rt.input "a" : memref<16xf32>
  %big = rt.alloc : memref<2048xf32>
  rt.kernel "nn.broadcast" (%a) -> (%big) : (memref<16xf32>) -> memref<2048xf32>
  %s = rt.alloc : memref<16xf32>
  rt.kernel "nn.reduce_sum" (%big) -> (%s) attrs {dims = array<i64: 0>, keepdim = 0 : i64} : (memref<2048xf32>) -> memref<16xf32>
  %t = rt.alloc : memref<16xf32>
  rt.kernel "nn.neg" (%s) -> (%t) : (memref<16xf32>) -> memref<16xf32>
  rt.output "t" %t : memref<16xf32>
}

// -----

// A kernel never writes over its own inputs, even the ones it reads for the
// last time: every output of a split differs from the input and from each
// other.
// CHECK-LABEL: rt.program @outputs_apart_from_inputs
// CHECK-SAME:  arena_sizes = array<i64: 0, 768>
// CHECK:       rt.input "x" offset = 0 : memref<8xf32>
// CHECK:       rt.alloc offset = 256 : memref<4xf32>
// CHECK:       rt.alloc offset = 512 : memref<4xf32>
rt.program @outputs_apart_from_inputs rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<8xf32>
  %a = rt.alloc : memref<4xf32>
  %b = rt.alloc : memref<4xf32>
  rt.kernel "nn.split" (%x) -> (%a, %b) attrs {dim = 0 : i64} : (memref<8xf32>) -> (memref<4xf32>, memref<4xf32>)
  rt.output "a" %a : memref<4xf32>
  rt.output "b" %b : memref<4xf32>
}

// -----

// An alloc nothing uses gets an offset inside the arena but does not push
// live buffers aside, however large it is.
// CHECK-LABEL: rt.program @unused_alloc
// CHECK-SAME:  arena_sizes = array<i64: 0, 65536>, scratch_unplanned_bytes = 66048
// CHECK:       rt.input "x" offset = 0 : memref<16xf32>
// CHECK:       rt.alloc offset = 0 : memref<16384xf32>
// CHECK:       rt.alloc offset = 256 : memref<16xf32>
rt.program @unused_alloc rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<16xf32>
  %unused = rt.alloc : memref<16384xf32>
  %y = rt.alloc : memref<16xf32>
  rt.kernel "nn.neg" (%x) -> (%y) : (memref<16xf32>) -> memref<16xf32>
  rt.output "y" %y : memref<16xf32>
}

// -----

// An input nothing reads is still written by the caller before the step: it
// must not share bytes with another input.
// CHECK-LABEL: rt.program @unused_input
// CHECK-SAME:  arena_sizes = array<i64: 0, 512>
// CHECK:       rt.input "unused" offset = 0 : memref<16xf32>
// CHECK:       rt.input "x" offset = 256 : memref<16xf32>
// CHECK:       rt.alloc offset = 0 : memref<16xf32>
// CHECK:       rt.alloc offset = 256 : memref<16xf32>
rt.program @unused_input rank = 0 streams = ["compute"] {
  %u = rt.input "unused" : memref<16xf32>
  %x = rt.input "x" : memref<16xf32>
  %t = rt.alloc : memref<16xf32>
  rt.kernel "nn.neg" (%x) -> (%t) : (memref<16xf32>) -> memref<16xf32>
  %y = rt.alloc : memref<16xf32>
  rt.kernel "nn.neg" (%t) -> (%y) : (memref<16xf32>) -> memref<16xf32>
  rt.output "y" %y : memref<16xf32>
}

// -----

// A buffer used only by rt.output (never written) is live from the output
// to the end: it may reuse bytes of what died before, not of what lives on.
// CHECK-LABEL: rt.program @output_only
// CHECK-SAME:  arena_sizes = array<i64: 0, 512>
// CHECK:       rt.input "x" offset = 0 : memref<16xf32>
// CHECK:       rt.alloc offset = 256 : memref<16xf32>
// CHECK:       rt.alloc offset = 0 : memref<16xf32>
rt.program @output_only rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<16xf32>
  %y = rt.alloc : memref<16xf32>
  rt.kernel "nn.neg" (%x) -> (%y) : (memref<16xf32>) -> memref<16xf32>
  %o = rt.alloc : memref<16xf32>
  rt.output "y" %y : memref<16xf32>
  rt.output "o" %o : memref<16xf32>
}

// -----

// Several outputs, and an input returned as an output: all live to the end
// together, so all differ.
// CHECK-LABEL: rt.program @multiple_outputs
// CHECK-SAME:  arena_sizes = array<i64: 0, 768>
// CHECK:       rt.input "x" offset = 0
// CHECK:       rt.alloc offset = 256
// CHECK:       rt.alloc offset = 512
rt.program @multiple_outputs rank = 0 streams = ["compute"] {
  %x = rt.input "x" : memref<16xf32>
  %a = rt.alloc : memref<16xf32>
  rt.kernel "nn.neg" (%x) -> (%a) : (memref<16xf32>) -> memref<16xf32>
  rt.output "a" %a : memref<16xf32>
  %b = rt.alloc : memref<16xf32>
  rt.kernel "nn.exp" (%x) -> (%b) : (memref<16xf32>) -> memref<16xf32>
  rt.output "b" %b : memref<16xf32>
  rt.output "x" %x : memref<16xf32>
}

// -----

// A copy reads its source and writes its target like a kernel does.
// CHECK-LABEL: rt.program @copies
// CHECK-SAME:  arena_sizes = array<i64: 256, 512>
// CHECK:       rt.param "w" offset = 0
// CHECK:       rt.alloc offset = 0 : memref<16xf32>
// CHECK:       rt.alloc offset = 256 : memref<16xf32>
rt.program @copies rank = 0 streams = ["compute"] {
  %w = rt.param "w" : memref<16xf32>
  %a = rt.alloc : memref<16xf32>
  rt.copy %w -> %a : memref<16xf32> -> memref<16xf32>
  %b = rt.alloc : memref<16xf32>
  rt.copy %a -> %b : memref<16xf32> -> memref<16xf32>
  rt.output "b" %b : memref<16xf32>
}

// -----

// Each program of a module is planned on its own; an empty one has empty
// arenas; offsets planned before are replaced.
// CHECK-LABEL: rt.program @rank0
// CHECK-SAME:  arena_sizes = array<i64: 0, 256>
// CHECK:       rt.input "x" offset = 0
// CHECK-LABEL: rt.program @rank1
// CHECK-SAME:  arena_sizes = array<i64: 0, 512>
// CHECK:       rt.input "x" offset = 0
// CHECK:       rt.alloc offset = 256
// CHECK-LABEL: rt.program @empty
// CHECK-SAME:  arena_sizes = array<i64: 0, 0>, scratch_unplanned_bytes = 0
rt.program @rank0 rank = 0 streams = ["compute"] {
  %x = rt.input "x" offset = 4096 : memref<16xf32>
  rt.output "x" %x : memref<16xf32>
}
rt.program @rank1 rank = 1 streams = ["compute"] {
  %x = rt.input "x" : memref<16xf32>
  %y = rt.alloc offset = 9999 : memref<16xf32>
  rt.kernel "nn.neg" (%x) -> (%y) : (memref<16xf32>) -> memref<16xf32>
  rt.output "y" %y : memref<16xf32>
}
rt.program @empty rank = 0 streams = ["compute"] {
}
