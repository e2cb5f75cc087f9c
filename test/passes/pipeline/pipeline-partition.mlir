// RUN: %python %S/Inputs/layers.py 8 > %t.l8.mlir
// RUN: loom-opt %t.l8.mlir --loom-pipeline-partition=pp=4 2>&1 | FileCheck %s --check-prefix=BAL
// RUN: loom-opt %t.l8.mlir --loom-pipeline-partition="pp=4 schedule=dualpipev" 2>&1 | FileCheck %s --check-prefix=V
// RUN: loom-opt %t.l8.mlir --loom-pipeline-partition="pp=4 schedule=dualpipe layout=2,2,2,2" 2>&1 | FileCheck %s --check-prefix=DUAL
// RUN: loom-opt %t.l8.mlir --loom-pipeline-partition=pp=2 --loom-build-training-step=batch=4 --loom-pipeline-partition=pp=2 2>&1 | FileCheck %s --check-prefix=TRAIN
// RUN: %python %S/Inputs/layers.py 4 --shared > %t.s4.mlir
// RUN: loom-opt %t.s4.mlir --loom-pipeline-partition=pp=2 2>&1 | FileCheck %s --check-prefix=SHARED
// RUN: %python %S/Inputs/layers.py 61 > %t.l61.mlir
// RUN: loom-opt %t.l61.mlir --loom-pipeline-partition="pp=8 vpp=2 schedule=interleaved layout=even" 2>&1 | FileCheck %s --check-prefix=PAD
// RUN: not loom-opt %t.l8.mlir --loom-pipeline-partition="pp=4 layout=4,4" 2>&1 | FileCheck %s --check-prefix=BADLAYOUT
// RUN: not loom-opt %s --loom-pipeline-partition=pp=2 2>&1 | FileCheck %s --check-prefix=NOLAYERS

// Balanced by FLOPs: the head (a 16-wide vocabulary GEMM) weighs like two
// layers, so the last stage gets one layer; ops carry their stage.
// BAL: remark: stage 0 (rank 0): embedding, layers 0-1 (2 layers)
// BAL: remark: stage 1 (rank 1): layers 2-3 (2 layers)
// BAL: remark: stage 2 (rank 2): layers 4-6 (3 layers)
// BAL: remark: stage 3 (rank 3): layers 7-7, norm + head + loss (1 layers)
// BAL: remark: boundary stage 0 -> 1: 1 tensor(s), 256 bytes per microbatch
// BAL: remark: boundary stage 2 -> 3: 1 tensor(s), 256 bytes per microbatch
// BAL: module attributes {pipe.layers_per_stage = array<i64: 2, 2, 3, 1>, pipe.stage_flops = array<i64: 2368, 2304, 3456, 3264>}
// BAL: nn.embedding {{.*}}pipe.stage = 0
// BAL: nn.parameter "layers.2.fc.weight" {{.*}}pipe.stage = 1
// BAL: nn.matmul {{.*}}pipe.stage = 1
// BAL: nn.parameter "head.weight" {{.*}}pipe.stage = 3
// BAL: nn.matmul {{.*}}pipe.stage = 3

// Partitioned again after autodiff, the training step is staged throughout:
// gradients on their forward op's stage, loss on the last, the embedding's
// weight gradient on the first, the global gradient norm shared (-1), and
// each AdamW update with its parameter.
// TRAIN: remark: training step: {{[0-9]+}} ops kept their stage, {{[0-9]+}} took their operands' or users' stage, {{[0-9]+}} combine stages (pipe.stage = -1)
// TRAIN: nn.cross_entropy {{.*}}loom.microbatch = 0 : i64, pipe.stage = 1 : i64
// TRAIN: nn.embedding_grad {{.*}}loom.backward = #loom.backward<weight>, loom.microbatch = 1 : i64, pipe.stage = 0 : i64
// TRAIN: nn.sqrt {{.*}}pipe.stage = -1
// TRAIN: nn.adamw {{.*}}pipe.stage = 0
// TRAIN: nn.adamw {{.*}}pipe.stage = 1
// TRAIN-NOT: pipe.stage = -1
// TRAIN: return

// A table every layer reads belongs to no layer: the layers still split by
// cost, and both stages hold the table.
// SHARED: remark: stage 0 (rank 0): embedding, layers 0-2 (3 layers)
// SHARED: remark: stage 1 (rank 1): layers 3-3, norm + head + loss (1 layers)
// SHARED: remark: parameter 'rotary.table' is read on stages 0, 1: each holds a copy
// SHARED-NOT: and their gradients
// SHARED: nn.parameter "rotary.table" frozen init(ones) {pipe.shared_stages = array<i64: 0, 1>, pipe.stage = 0 : i64}

// DualPipeV: 8 stages in a V, the last (norm + head) back on rank 0.
// V: remark: stage 0 (rank 0): embedding, layers 0-0
// V: remark: stage 3 (rank 3): layers 3-3
// V: remark: stage 4 (rank 3): layers 4-4
// V: remark: stage 7 (rank 0): no layers, norm + head + loss (0 layers)

// DualPipe: 4 pieces, each on two ranks (one per direction).
// DUAL: remark: stage 0 (rank 0 and 3): embedding, layers 0-1 (2 layers)
// DUAL: remark: stage 3 (rank 3 and 0): layers 6-7, norm + head + loss (2 layers)

// 61 layers on PP=8 x VPP=2 with equal counts: 3 empty layers pad the ends.
// PAD: remark: stage 0 (rank 0): embedding, layers 0-2 + 1 empty (3 layers)
// PAD: remark: stage 1 (rank 1): layers 3-6 (4 layers)
// PAD: remark: stage 8 (rank 0): layers 31-34 (4 layers)
// PAD: remark: stage 14 (rank 6): layers 55-57 + 1 empty (3 layers)
// PAD: remark: stage 15 (rank 7): layers 58-60 + 1 empty, norm + head + loss (3 layers)
// PAD: pipe.layers_per_stage = array<i64: 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 3>

// BADLAYOUT: error: --pp-layout '4,4' gives 2 stages with 8 layers; the model has 8 layers and --schedule=1f1b with --pp 4 needs 4 stages

// NOLAYERS: error: no transformer layers to partition
func.func @main(%ids: tensor<2x4xi64>) -> tensor<2x4x16xf32> {
  %e = nn.parameter "embed.weight" init(normal, 0.02) : tensor<16x8xf32>
  %w = nn.parameter "head.weight" init(normal, 0.02) : tensor<16x8xf32>
  %h = nn.embedding %e, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %l = nn.matmul %h, %w {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %l : tensor<2x4x16xf32>
}
