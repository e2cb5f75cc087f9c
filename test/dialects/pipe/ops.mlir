// RUN: loom-opt %s -split-input-file | loom-opt | FileCheck %s

// A 1F1B schedule on two ranks round-trips: kinds, stages, microbatches,
// transfers, in order.
// CHECK-LABEL: pipe.schedule "1f1b" ranks = 2 stages = 2 microbatches = 2 chains = 1 stage_ranks = [0, 1]
// CHECK-NEXT: pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<SEND_F, stage = 0, mb = 0>, #pipe.action<F, stage = 0, mb = 1>, #pipe.action<SEND_F, stage = 0, mb = 1>, #pipe.action<RECV_B, stage = 0, mb = 0>, #pipe.action<B, stage = 0, mb = 0>, #pipe.action<RECV_B, stage = 0, mb = 1>, #pipe.action<B, stage = 0, mb = 1>]
// CHECK-NEXT: pipe.rank 1 [#pipe.action<RECV_F, stage = 1, mb = 0>, #pipe.action<F, stage = 1, mb = 0>, #pipe.action<RECV_F, stage = 1, mb = 1>, #pipe.action<B, stage = 1, mb = 0>, #pipe.action<SEND_B, stage = 1, mb = 0>, #pipe.action<F, stage = 1, mb = 1>, #pipe.action<B, stage = 1, mb = 1>, #pipe.action<SEND_B, stage = 1, mb = 1>]
pipe.schedule "1f1b" ranks = 2 stages = 2 microbatches = 2 chains = 1 stage_ranks = [0, 1] {
  pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<SEND_F, stage = 0, mb = 0>, #pipe.action<F, stage = 0, mb = 1>, #pipe.action<SEND_F, stage = 0, mb = 1>, #pipe.action<RECV_B, stage = 0, mb = 0>, #pipe.action<B, stage = 0, mb = 0>, #pipe.action<RECV_B, stage = 0, mb = 1>, #pipe.action<B, stage = 0, mb = 1>]
  pipe.rank 1 [#pipe.action<RECV_F, stage = 1, mb = 0>, #pipe.action<F, stage = 1, mb = 0>, #pipe.action<RECV_F, stage = 1, mb = 1>, #pipe.action<B, stage = 1, mb = 0>, #pipe.action<SEND_B, stage = 1, mb = 0>, #pipe.action<F, stage = 1, mb = 1>, #pipe.action<B, stage = 1, mb = 1>, #pipe.action<SEND_B, stage = 1, mb = 1>]
}

// -----

// Split backward (I then W) and an overlapped F&B pair on a V-placed rank:
// stages 0 and 1 both on rank 0, so they exchange nothing.
// CHECK-LABEL: pipe.schedule "custom" ranks = 1 stages = 2 microbatches = 2 chains = 1 stage_ranks = [0, 0]
// CHECK-NEXT: pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<F, stage = 1, mb = 0>, #pipe.action<I, stage = 1, mb = 0>, #pipe.action<OVERLAP_F_B, stage = 0, mb = 1, b_stage = 0, b_mb = 0>, #pipe.action<W, stage = 1, mb = 0>, #pipe.action<F, stage = 1, mb = 1>, #pipe.action<B, stage = 1, mb = 1>, #pipe.action<B, stage = 0, mb = 1>]
pipe.schedule "custom" ranks = 1 stages = 2 microbatches = 2 chains = 1 stage_ranks = [0, 0] {
  pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<F, stage = 1, mb = 0>, #pipe.action<I, stage = 1, mb = 0>, #pipe.action<OVERLAP_F_B, stage = 0, mb = 1, b_stage = 0, b_mb = 0>, #pipe.action<W, stage = 1, mb = 0>, #pipe.action<F, stage = 1, mb = 1>, #pipe.action<B, stage = 1, mb = 1>, #pipe.action<B, stage = 0, mb = 1>]
}
