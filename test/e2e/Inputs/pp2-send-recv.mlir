// A hand-written two-stage pipeline: one rt.program per rank. Stage 0 takes
// x, applies relu and sends it to rank 1; stage 1 receives it and negates it.
module attributes {rt.mesh_axes = ["pp"], rt.mesh_shape = array<i64: 2>} {
  rt.program @stage0 rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<2x3xf32>
    %a = rt.alloc : memref<2x3xf32>
    rt.kernel "nn.relu" (%x) -> (%a) : (memref<2x3xf32>) -> memref<2x3xf32>
    rt.collective send (%a) -> () {peer = 1} : (memref<2x3xf32>) -> ()
    rt.output "relu" %a : memref<2x3xf32>
  }
  rt.program @stage1 rank = 1 streams = ["compute"] {
    %r = rt.alloc : memref<2x3xf32>
    rt.collective recv () -> (%r) {peer = 0} : () -> memref<2x3xf32>
    %y = rt.alloc : memref<2x3xf32>
    rt.kernel "nn.neg" (%r) -> (%y) : (memref<2x3xf32>) -> memref<2x3xf32>
    rt.output "y" %y : memref<2x3xf32>
  }
}
