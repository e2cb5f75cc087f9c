// A layer's forward and a backward that reads its activation (what
// --loom-offload-activations moves to host memory between the two), and a
// cast of the weight that the backward reads too (a value of the parameters
// alone, which stays on the device).
func.func @main(%x: tensor<2x4xf32> {loom.name = "x"}, %d: tensor<2x4xf32> {loom.name = "d"}) -> (tensor<2x4xf32> {loom.name = "y"}, tensor<4x4xf32> {loom.name = "gw"}, tensor<2x4xbf16> {loom.name = "gx"}) {
  %w = nn.parameter "layers.0.w" init(normal, 2.000000e-02) : tensor<4x4xf32> module "layers.0.mlp"
  %wc = nn.cast %w {loom.microbatch = 0 : i64} : tensor<4x4xf32> -> tensor<4x4xbf16>
  %xc = nn.cast %x {loom.microbatch = 0 : i64} : tensor<2x4xf32> -> tensor<2x4xbf16>
  %y0 = nn.matmul %xc, %wc {loom.microbatch = 0 : i64} : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>
  %0 = nn.matmul %x, %w {loom.microbatch = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = nn.silu %0 {loom.microbatch = 0 : i64} : tensor<2x4xf32>
  %2 = nn.matmul %1, %w {loom.microbatch = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %3 = nn.matmul %1, %d {loom.backward = #loom.backward<weight>, loom.microbatch = 0 : i64, transpose_lhs} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  %gx = nn.matmul %y0, %wc {loom.backward = #loom.backward<input>, loom.microbatch = 0 : i64} : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>
  func.return %2, %3, %gx : tensor<2x4xf32>, tensor<4x4xf32>, tensor<2x4xbf16>
}
