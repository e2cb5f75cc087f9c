#ifndef LOOM_PIPE_OPS_TD
#define LOOM_PIPE_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Pipe_Dialect : Dialect {
  let name = "pipe";
  let cppNamespace = "::loom::pipe";
  let summary = "pipeline stages, microbatches and per-rank schedules";
  let description = [{
    A pipeline-parallel training step is a set of stages (consecutive pieces
    of the model, each on one rank; a rank may hold several: virtual stages)
    and a schedule: per rank, the ordered list of actions it runs for the
    step's microbatches. The action vocabulary is PyTorch pipelining's, so
    schedules can be exchanged as CSV (`0F1`, `1I0`, `2W3`, `0SEND_F1`,
    `(0F3;3B1)OVERLAP_F_B`):

    | action | meaning |
    | --- | --- |
    | `F` | forward of one microbatch through one stage |
    | `B` | full backward (input and weight gradients) |
    | `I` | backward for the input gradient only; its `W` comes later |
    | `W` | backward for the weight gradient only |
    | `SEND_F` / `RECV_F` | forward activation to / from the next / previous stage's rank |
    | `SEND_B` / `RECV_B` | gradient to / from the previous / next stage's rank |
    | `OVERLAP_F_B` | an F and a B of different microbatches run overlapped (DualPipe) |

    The dialect owns these discardable attributes (verified by
    `verifyOperationAttribute`; PipeDialect.h has their accessors):

    | attribute | on | value |
    | --- | --- | --- |
    | `pipe.stage` | op | i64 stage, -1 for an op every stage shares (`--loom-pipeline-partition`) |
    | `pipe.shared_stages` | op | `array<i64>`: the stages that read a shared parameter |
    | `pipe.holders` | op | `array<i64>`: the ranks holding copies of a tied parameter |
    | `pipe.rank` | function | i64: the rank a split function runs as (`--loom-pipeline-split`) |
    | `pipe.layers_per_stage` | module | `array<i64>` |
    | `pipe.stage_flops` | module | `array<i64>` |
    | `pipe.stage_fiw_flops` | module | `array<i64>`: F, I, W flops per stage |
    | `pipe.schedule_csv` | module | string: the schedule as CSV |
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
}

def Pipe_ActionAttr : AttrDef<Pipe_Dialect, "Action"> {
  let mnemonic = "action";
  let summary = "one action of a rank's schedule";
  let description = [{
    `#pipe.action<F, stage = 0, mb = 1>` (PyTorch's `0F1`);
    `#pipe.action<SEND_B, stage = 2, mb = 0>` sends stage 2's input gradient
    for microbatch 0 to stage 1's rank (`2SEND_B0`);
    `#pipe.action<OVERLAP_F_B, stage = 0, mb = 3, b_stage = 3, b_mb = 1>` runs
    `0F3` and `3B1` overlapped.
  }];
  let parameters = (ins "::loom::pipeline::ActionKind":$kind, "int64_t":$stage,
                        "int64_t":$mb, "int64_t":$bStage, "int64_t":$bMb);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    ::loom::pipeline::Action getAction() const;
    static ActionAttr get(::mlir::MLIRContext *context, const ::loom::pipeline::Action &action);
  }];
}

class Pipe_Op<string mnemonic, list<Trait> traits = []>
    : Op<Pipe_Dialect, mnemonic, traits>;

def Pipe_ScheduleOp : Pipe_Op<"schedule", [SingleBlock, NoTerminator, IsolatedFromAbove]> {
  let summary = "a pipeline schedule: per-rank ordered actions";
  let description = [{
    ```mlir
    pipe.schedule "1f1b" ranks = 2 stages = 2 microbatches = 2 chains = 1
        stage_ranks = [0, 1] {
      pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<SEND_F, stage = 0, mb = 0>, ...]
      pipe.rank 1 [#pipe.action<RECV_F, stage = 1, mb = 0>, #pipe.action<F, stage = 1, mb = 0>, ...]
    }
    ```
    `stage_ranks[s]` is the rank that holds stage `s`. Stages form `chains`
    chains of `stages / chains` stages each (DualPipe: two, its two
    directions, each a copy of the model; otherwise one) and every chain
    carries `microbatches / chains` microbatches, numbered from 0.
    The verifier runs Loom's ScheduleVerifier: every (stage, microbatch) has
    one F and one B (or one I then one W), sends and receives match and come
    in the same order on both ranks, data is received before it is used, and
    simulating the ranks with blocking transfers (a run of consecutive
    transfers is one group) ends without deadlock.
  }];
  let arguments = (ins StrAttr:$kind, I64Attr:$ranks, I64Attr:$stages, I64Attr:$microbatches,
                   I64Attr:$chains, DenseI64ArrayAttr:$stage_ranks);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind `ranks` `=` $ranks `stages` `=` $stages `microbatches` `=` $microbatches
    `chains` `=` $chains `stage_ranks` `=` $stage_ranks attr-dict-with-keyword $body
  }];
  let hasRegionVerifier = 1;
}

def Pipe_RankOp : Pipe_Op<"rank", [HasParent<"ScheduleOp">]> {
  let summary = "the actions one rank runs, in order";
  let arguments = (ins I64Attr:$rank, TypedArrayAttrBase<Pipe_ActionAttr, "actions">:$actions);
  let assemblyFormat = "$rank $actions attr-dict";
}

#endif
