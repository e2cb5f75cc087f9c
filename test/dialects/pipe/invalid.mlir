// RUN: loom-opt %s -split-input-file -verify-diagnostics

// A send whose receive is missing.
// expected-error @+1 {{'pipe.schedule' op schedule: rank 0 action 1 (0SEND_F0): no matching 1RECV_F0 on rank 1}}
pipe.schedule "1f1b" ranks = 2 stages = 2 microbatches = 1 chains = 1 stage_ranks = [0, 1] {
  pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<SEND_F, stage = 0, mb = 0>, #pipe.action<RECV_B, stage = 0, mb = 0>, #pipe.action<B, stage = 0, mb = 0>]
  pipe.rank 1 [#pipe.action<F, stage = 1, mb = 0>, #pipe.action<B, stage = 1, mb = 0>, #pipe.action<SEND_B, stage = 1, mb = 0>]
}

// -----

// Rank 0 waits for the gradient before it sends the activation that makes it.
// expected-error @+1 {{schedule: deadlock: rank 0 at 0RECV_B0 waits for 1SEND_B0 of rank 1; rank 1 at 1RECV_F0 waits for 0SEND_F0 of rank 0}}
pipe.schedule "1f1b" ranks = 2 stages = 2 microbatches = 1 chains = 1 stage_ranks = [0, 1] {
  pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<RECV_B, stage = 0, mb = 0>, #pipe.action<B, stage = 0, mb = 0>, #pipe.action<SEND_F, stage = 0, mb = 0>]
  pipe.rank 1 [#pipe.action<RECV_F, stage = 1, mb = 0>, #pipe.action<F, stage = 1, mb = 0>, #pipe.action<B, stage = 1, mb = 0>, #pipe.action<SEND_B, stage = 1, mb = 0>]
}

// -----

// W before its I.
// expected-error @+1 {{schedule: rank 0 action 1 (0W0): weight gradient before 0I0}}
pipe.schedule "custom" ranks = 1 stages = 1 microbatches = 1 chains = 1 stage_ranks = [0] {
  pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<W, stage = 0, mb = 0>, #pipe.action<I, stage = 0, mb = 0>]
}

// -----

// A backward before its forward.
// expected-error @+1 {{schedule: rank 0 action 0 (0B0): backward of stage 0 microbatch 0 before its F}}
pipe.schedule "custom" ranks = 1 stages = 1 microbatches = 1 chains = 1 stage_ranks = [0] {
  pipe.rank 0 [#pipe.action<B, stage = 0, mb = 0>, #pipe.action<F, stage = 0, mb = 0>]
}

// -----

// Microbatch 1 is never run.
// expected-error @+1 {{schedule: stage 0 microbatch 1 has 0 forwards (F), expected 1}}
pipe.schedule "custom" ranks = 1 stages = 1 microbatches = 2 chains = 1 stage_ranks = [0] {
  pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<B, stage = 0, mb = 0>]
}

// -----

// An action on a rank that does not hold its stage.
// expected-error @+1 {{schedule: rank 0 action 0 (1F0): stage 1 lives on rank 1}}
pipe.schedule "custom" ranks = 2 stages = 2 microbatches = 1 chains = 1 stage_ranks = [0, 1] {
  pipe.rank 0 [#pipe.action<F, stage = 1, mb = 0>]
  pipe.rank 1 []
}

// -----

// expected-error @+1 {{unknown schedule 'gpipe' (expected 1f1b, interleaved, zb-h1, dualpipe or dualpipev)}}
pipe.schedule "gpipe" ranks = 1 stages = 1 microbatches = 1 chains = 1 stage_ranks = [0] {
  pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<B, stage = 0, mb = 0>]
}

// -----

// expected-error @+1 {{has 1 pipe.rank ops for 2 ranks}}
pipe.schedule "custom" ranks = 2 stages = 1 microbatches = 1 chains = 1 stage_ranks = [0] {
  pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<B, stage = 0, mb = 0>]
}

// -----

pipe.schedule "custom" ranks = 1 stages = 1 microbatches = 1 chains = 1 stage_ranks = [0] {
  // expected-error @+1 {{unknown pipeline action 'X'}}
  pipe.rank 0 [#pipe.action<X, stage = 0, mb = 0>]
}

// -----

// The pipe dialect's discardable attributes (PipeDialect::verifyOperationAttribute).

func.func @stage_below_shared(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'pipe.stage' must be an i64 of at least -1, got -2 : i64}}
  %0 = nn.neg %x {pipe.stage = -2 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @holders_not_array(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'pipe.holders' must be an array<i64: ...> of non-negative values, got [0, 1]}}
  %0 = nn.neg %x {pipe.holders = [0, 1]} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{'pipe.rank' must be an i64 of at least 0, got "1"}}
func.func @rank_string() attributes {pipe.rank = "1"} {
  return
}

// -----

// expected-error @+1 {{'pipe.schedule_csv' belongs on the module}}
func.func @csv_on_function() attributes {pipe.schedule_csv = "0F0"} {
  return
}

// -----

// expected-error @+1 {{'pipe.stage_fiw_flops' holds F, I and W flops per stage: its size 2 is not a multiple of 3}}
module attributes {pipe.stage_fiw_flops = array<i64: 1, 2>} {
}

// -----

// expected-error @+1 {{has an unknown pipe attribute 'pipe.stages'}}
module attributes {pipe.stages = 2 : i64} {
}
