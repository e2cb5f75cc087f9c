// RUN: loom-opt %s --split-input-file --loom-pipeline-partition="pp=2 layout=even" 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
// RUN: loom-opt %s --split-input-file --loom-pipeline-partition="pp=2 layout=even" 2>/dev/null | FileCheck %s

// Layers come from the parameters' module paths, not their names: the names
// here would put the blocks in reverse order, number ten layers and make
// the head a layer. No remark about names: every parameter has a path.
// REMARK-NOT: have no module path
// REMARK: remark: stage 0 (rank 0): embedding, layers 0-1 (2 layers)
// REMARK: remark: stage 1 (rank 1): layers 2-2 + 1 empty, norm + head + loss (1 layers)
// CHECK: pipe.layers_per_stage = array<i64: 2, 1>
// Matmuls count 2*M*N*K (8*8*8*2 = 1024 each), other ops one per element:
// stage 0 = embedding 64 + 2 x (matmul 1024 + add 64).
// CHECK-SAME: pipe.stage_flops = array<i64: 2240, 2112>
// CHECK-LABEL: func.func @main
// CHECK: nn.parameter "blocks.9.fc.weight" {{.*}}{pipe.stage = 0 : i64} : tensor<8x8xf32> module "model.decoder.0.fc"
// CHECK: nn.parameter "h.5.fc.weight" {{.*}}{pipe.stage = 0 : i64} : tensor<8x8xf32> module "model.decoder.1.fc"
// CHECK: nn.parameter "blocks.0.fc.weight" {{.*}}{pipe.stage = 1 : i64} : tensor<8x8xf32> module "model.decoder.2.fc"
// CHECK: nn.parameter "layers.9.head.weight" {{.*}}{pipe.stage = 1 : i64} : tensor<8x8xf32> module "lm_head"
func.func @main(%ids: tensor<2x4xi64>) -> tensor<2x4x8xf32> {
  %emb = nn.parameter "embed.weight" init(normal, 0.02) : tensor<16x8xf32> module "model.embed"
  %h0 = nn.embedding %emb, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %w0 = nn.parameter "blocks.9.fc.weight" init(normal, 0.02) : tensor<8x8xf32> module "model.decoder.0.fc"
  %m0 = nn.matmul %h0, %w0 {transpose_rhs} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %h1 = nn.add %h0, %m0 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %w1 = nn.parameter "h.5.fc.weight" init(normal, 0.02) : tensor<8x8xf32> module "model.decoder.1.fc"
  %m1 = nn.matmul %h1, %w1 {transpose_rhs} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %h2 = nn.add %h1, %m1 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %w2 = nn.parameter "blocks.0.fc.weight" init(normal, 0.02) : tensor<8x8xf32> module "model.decoder.2.fc"
  %m2 = nn.matmul %h2, %w2 {transpose_rhs} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %h3 = nn.add %h2, %m2 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %hw = nn.parameter "layers.9.head.weight" init(normal, 0.02) : tensor<8x8xf32> module "lm_head"
  %out = nn.matmul %h3, %hw {transpose_rhs} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  return %out : tensor<2x4x8xf32>
}

// -----

// Two lists of blocks (an encoder's and a decoder's) count one after the
// other, in the order their parameters appear: four layers, two a stage.
// REMARK: remark: stage 0 (rank 0): layers 0-1 (2 layers)
// REMARK: remark: stage 1 (rank 1): layers 2-3 (2 layers)
// CHECK-LABEL: func.func @main
// CHECK: nn.parameter "enc1" {pipe.stage = 0 : i64}
// CHECK: nn.parameter "dec0" {pipe.stage = 1 : i64}
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %w0 = nn.parameter "enc0" : tensor<8x8xf32> module "encoder.layers.0"
  %m0 = nn.matmul %x, %w0 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %w1 = nn.parameter "enc1" : tensor<8x8xf32> module "encoder.layers.1"
  %m1 = nn.matmul %m0, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %w2 = nn.parameter "dec0" : tensor<8x8xf32> module "decoder.layers.0.mlp"
  %m2 = nn.matmul %m1, %w2 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %w3 = nn.parameter "dec1" : tensor<8x8xf32> module "decoder.layers.1.mlp"
  %m3 = nn.matmul %m2, %w3 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %m3 : tensor<4x8xf32>
}

// -----

// Without module paths (IR written by hand), layers come from the names, and
// a remark says so.
// REMARK: remark: 2 parameter(s) have no module path: their layers come from their names
// REMARK: remark: stage 0 (rank 0): layers 0-0 (1 layers)
// REMARK: remark: stage 1 (rank 1): layers 1-1 (1 layers)
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %w0 = nn.parameter "layers.0.w" : tensor<8x8xf32>
  %m0 = nn.matmul %x, %w0 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %w1 = nn.parameter "layers.1.w" : tensor<8x8xf32>
  %m1 = nn.matmul %m0, %w1 : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %m1 : tensor<4x8xf32>
}
