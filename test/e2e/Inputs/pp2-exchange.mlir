// A hand-written two-rank exchange: one rt.program per rank over the "pp"
// axis. Both ranks send each other 4 MiB in one exchange (separate blocking
// sends would wait for each other's receives); rank 0 also sends a small i64
// tensor, which rank 1 receives after the f32 block, as they were sent.
module attributes {rt.mesh_axes = ["pp"], rt.mesh_shape = array<i64: 2>} {
  rt.program @stage0 rank = 0 streams = ["compute"] {
    %x = rt.input "x" : memref<1024x1024xf32>
    %k = rt.input "k" : memref<5xi64>
    %a = rt.alloc : memref<1024x1024xf32>
    rt.kernel "nn.relu" (%x) -> (%a) : (memref<1024x1024xf32>) -> memref<1024x1024xf32>
    %r = rt.alloc : memref<1024x1024xf32>
    rt.collective exchange (%a, %k) -> (%r) {axes = ["pp"], send_peers = array<i64: 1, 1>, recv_peers = array<i64: 1>} : (memref<1024x1024xf32>, memref<5xi64>) -> memref<1024x1024xf32>
    rt.output "from1" %r : memref<1024x1024xf32>
  }
  rt.program @stage1 rank = 1 streams = ["compute"] {
    %x = rt.input "x" : memref<1024x1024xf32>
    %n = rt.alloc : memref<1024x1024xf32>
    rt.kernel "nn.neg" (%x) -> (%n) : (memref<1024x1024xf32>) -> memref<1024x1024xf32>
    %r = rt.alloc : memref<1024x1024xf32>
    %k = rt.alloc : memref<5xi64>
    rt.collective exchange (%n) -> (%r, %k) {axes = ["pp"], send_peers = array<i64: 0>, recv_peers = array<i64: 0, 0>} : (memref<1024x1024xf32>) -> (memref<1024x1024xf32>, memref<5xi64>)
    rt.output "from0" %r : memref<1024x1024xf32>
    rt.output "k1" %k : memref<5xi64>
  }
}
