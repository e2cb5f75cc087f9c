// One case per generator: the schedule verifies (the op's verifier runs on
// the printed IR again) and the analysis remark shows the expected bubble.
// RUN: loom-opt %s --loom-pipeline-schedule="pp=4 microbatches=8" 2>&1 | FileCheck %s --check-prefix=ONEF
// RUN: loom-opt %s --loom-pipeline-schedule="pp=4 microbatches=8" 2>/dev/null | loom-opt | FileCheck %s --check-prefix=ROUND
// RUN: loom-opt %s --loom-pipeline-schedule="pp=4 vpp=2 schedule=interleaved microbatches=8" 2>&1 | FileCheck %s --check-prefix=INTER
// RUN: loom-opt %s --loom-pipeline-schedule="pp=4 schedule=zb-h1 microbatches=8" 2>&1 | FileCheck %s --check-prefix=ZB
// RUN: loom-opt %s --loom-pipeline-schedule="pp=4 schedule=dualpipe microbatches=8" 2>&1 | FileCheck %s --check-prefix=DUAL
// RUN: loom-opt %s --loom-pipeline-schedule="pp=4 schedule=dualpipev microbatches=8" 2>&1 | FileCheck %s --check-prefix=V
// RUN: not loom-opt %s --loom-pipeline-schedule="pp=3 schedule=dualpipe microbatches=12" 2>&1 | FileCheck %s --check-prefix=ODD
// RUN: not loom-opt %s --loom-pipeline-schedule="pp=4 schedule=dualpipev microbatches=6" 2>&1 | FileCheck %s --check-prefix=FEW

// 1F1B: bubble (PP-1)(F+B) = 9, rank 0 holds PP = 4 activations.
// ONEF: remark: 1f1b on 4 ranks, 4 stages, 8 microbatches
// ONEF: 0      24.00     9.00      27.3     4                 1.00x
// ONEF: pipe.schedule "1f1b" ranks = 4 stages = 4 microbatches = 8 chains = 1 stage_ranks = [0, 1, 2, 3]
// ONEF-NEXT: pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<SEND_F, stage = 0, mb = 0>, #pipe.action<F, stage = 0, mb = 1>

// ROUND: pipe.schedule "1f1b"
// ROUND-COUNT-4: pipe.rank

// INTER: 0      48.00     9.00
// INTER: stage_ranks = [0, 1, 2, 3, 0, 1, 2, 3]

// ZB-H1: bubble (PP-1)(F+B-2W) = 3.
// ZB: 0      24.00     3.00      11.1     4
// ZB: pipe.rank 0 [{{.*}}#pipe.action<I, stage = 0, mb = 0>{{.*}}#pipe.action<W, stage = 0, mb = 0>

// DualPipe: (PP/2-1)(F&B+B-3W) = 2, PP+1 = 5 activations, 2x parameters.
// DUAL: step time 26.00, model copies 2
// DUAL: 0      24.00     2.00      7.7      5                 2.00x
// DUAL: chains = 2 stage_ranks = [0, 1, 2, 3, 3, 2, 1, 0]
// DUAL: OVERLAP_F_B

// DualPipeV on 4 ranks is 8 stages: (8/2-1)(F&B+B-3W) = 6, 8+1 activations.
// V: 0      48.00     6.00      11.1     9                 1.00x
// V: stage_ranks = [0, 1, 2, 3, 3, 2, 1, 0]

// ODD: error: --schedule=dualpipe needs an even --pp >= 2, got 3
// FEW: error: --schedule=dualpipev needs --microbatches >= 2*pp = 8, got 6
module {}
