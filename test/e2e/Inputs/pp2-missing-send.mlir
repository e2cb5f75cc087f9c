// A broken pipeline: stage 1 waits for a message stage 0 never sends.
module attributes {rt.mesh_axes = ["pp"], rt.mesh_shape = array<i64: 2>} {
  rt.program @stage0 rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<2x3xf32>
    %a = rt.alloc : memref<2x3xf32>
    rt.kernel "nn.relu" (%x) -> (%a) : (memref<2x3xf32>) -> memref<2x3xf32>
    rt.output "relu" %a : memref<2x3xf32>
  }
  rt.program @stage1 rank = 1 streams = ["compute"] {
    %r = rt.alloc : memref<2x3xf32>
    rt.collective recv () -> (%r) {peer = 0} : () -> memref<2x3xf32>
    rt.output "y" %r : memref<2x3xf32>
  }
}
