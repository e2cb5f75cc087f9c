#ifndef LOOM_PASSES_PIPELINE_PASSES_TD
#define LOOM_PASSES_PIPELINE_PASSES_TD

include "mlir/Pass/PassBase.td"

def PipelinePartition : Pass<"loom-pipeline-partition", "mlir::ModuleOp"> {
  let summary = "assign every op of the forward to a pipeline stage, by layer";
  let description = [{
    Cuts the forward `@main` (nn ops, before --loom-build-training-step,
    whose autodiff and microbatch copies keep the attribute) into the pieces
    a schedule runs as stages: pp pieces for 1f1b/zb-h1/dualpipe, pp*vpp for
    interleaved, 2*pp for dualpipev. A parameter's layer is the numbered
    block of the module that holds it (`module "model.layers.3.mlp.up_proj"`,
    recorded by the importers: block 3 of `model.layers`); a parameter with
    no module path falls back to the layer index in its name (`layers.N.`,
    `h.N.`, `blocks.N.`), with a remark. An op's layer is the largest layer
    among the parameters it depends on; parameters without a layer first
    used before the first layer (the embedding) go with the first piece, the
    others (final norm, head, loss) with the last. Layers are split into
    consecutive pieces minimizing the most expensive piece (FLOPs as each op
    counts them, FlopCountOpInterface), or as `layout` says: `4,4,4,4` (layers per piece;
    0 allowed) or `even` (equal counts, padded with empty layers at the ends
    when the layers do not divide: 61 layers in 16 pieces are 13x4 + 3x(3+1
    empty)). Each op gets `pipe.stage = piece`, the module gets
    `pipe.layers_per_stage` and `pipe.stage_flops` (forward FLOPs), and a remark per piece shows the placement;
    another per stage boundary names what crosses it (the payload of
    SEND_F/RECV_F; SEND_B/RECV_B carry its gradient). A parameter read on
    several stages (tied embeddings, a rotary table every layer reads) gets
    `pipe.shared_stages` and a remark: each of those stages holds a copy.

    Run again on the training step built from a partitioned forward, it
    completes the stages: autodiff gives each gradient op its forward op's
    stage; the others (loss, gradient accumulation, optimizer) take their
    operands' stage (a gradient sum fed by several stages: the earliest), or
    -1 where other ops combine several stages (global
    gradient norm, clipping), and ops without staged operands take their
    first user's. For DualPipe a piece is two stages (piece p is stage p of
    the down chain and stage pp+p of the up chain).

    Before:
    ```mlir
    %e = nn.embedding %wte, %ids ...
    %h = nn.matmul %e, %w0 ...   // %w0 = nn.parameter "layers.0.fc.weight"
    %y = nn.matmul %h, %w1 ...   // %w1 = nn.parameter "layers.1.fc.weight"
    ```
    After (`pp=2 schedule=1f1b`):
    ```mlir
    %e = nn.embedding %wte, %ids {pipe.stage = 0 : i64} ...
    %h = nn.matmul %e, %w0 {pipe.stage = 0 : i64} ...
    %y = nn.matmul %h, %w1 {pipe.stage = 1 : i64} ...
    ```
  }];
  let options = [
    Option<"pp", "pp", "int64_t", /*default=*/"1", "pipeline ranks">,
    Option<"vpp", "vpp", "int64_t", /*default=*/"1", "stages per rank (interleaved)">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"",
           "1f1b, interleaved, zb-h1, dualpipe or dualpipev">,
    Option<"scheduleFile", "schedule-file", "std::string", /*default=*/"\"\"",
           "a schedule CSV whose stages and placement to use instead of `schedule`">,
    Option<"layout", "layout", "std::string", /*default=*/"\"\"",
           "layers per piece (`4,4,4,4`), `even`, or empty: balanced by FLOPs">,
  ];
  let dependentDialects = ["loom::pipe::PipeDialect"];
}

def PipelineSchedule : Pass<"loom-pipeline-schedule", "mlir::ModuleOp"> {
  let summary = "generate, verify and analyse the pipeline schedule";
  let description = [{
    Appends a `pipe.schedule` for `schedule` on `pp` ranks with
    `microbatches` microbatches (or the one in `schedule-file`, a CSV) (per-rank actions with the transfers,
    verified: see the op), and a remark with its analysis under unit costs
    (F = I = W = 1, B = 2, F&B = 3): per rank the bubble, the peak live
    activations and the parameters held; after --loom-pipeline-partition
    (module attribute `pipe.stage_flops`), a second one with each stage's
    times scaled by its FLOPs. Bad combinations are errors that
    say what the schedule needs.

    After (`pp=2 microbatches=2`):
    ```mlir
    pipe.schedule "1f1b" ranks = 2 stages = 2 microbatches = 2 chains = 1 stage_ranks = [0, 1] {
      pipe.rank 0 [#pipe.action<F, stage = 0, mb = 0>, #pipe.action<SEND_F, stage = 0, mb = 0>, ...]
      pipe.rank 1 [#pipe.action<RECV_F, stage = 1, mb = 0>, #pipe.action<F, stage = 1, mb = 0>, ...]
    }
    ```
  }];
  let options = [
    Option<"pp", "pp", "int64_t", /*default=*/"1", "pipeline ranks">,
    Option<"vpp", "vpp", "int64_t", /*default=*/"1", "stages per rank (interleaved)">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"",
           "1f1b, interleaved, zb-h1, dualpipe or dualpipev">,
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1", "microbatches per step">,
    Option<"scheduleFile", "schedule-file", "std::string", /*default=*/"\"\"",
           "read the schedule from this CSV (verified) instead of generating one">,
  ];
  let dependentDialects = ["loom::pipe::PipeDialect"];
}

def PipelineSplit : Pass<"loom-pipeline-split", "mlir::ModuleOp"> {
  let summary = "one function per pipeline rank: its schedule actions unrolled, with the transfers";
  let description = [{
    After --loom-pipeline-schedule: `@main` (the staged training step) and
    its `pipe.schedule` become `@main_pp0` ... `@main_pp{N-1}` (attribute
    `pipe.rank`), each the ops its rank runs in the order its action list
    runs them, and the module gets the mesh `["pp"=N]`.

    - `F s m` / `I s m` / `W s m` are the ops with that stage and
      microbatch and no / `input` / `weight` `loom.backward` (an op without
      `loom.microbatch` that reads one microbatch belongs to it); `B` is
      both; `OVERLAP_F_B` the F then the B.
    - A run of consecutive SEND/RECV actions is one `dist.exchange` on the
      `pp` axis: SEND_F of stage s carries the values of that microbatch
      computed on stages <= s and read on a later stage of another rank;
      SEND_B the ones computed on stages >= s read on an earlier stage.
    - Ops of no microbatch that read only constants and the step's inputs
      are cloned wherever they are read; parameters, gradient sums over
      microbatches (as soon as their terms exist), the optimizer and the
      global gradient norm run on the ranks holding their stage
      (`pipe.stage = -1`: all), after the action list.
    - A sum whose terms live on several ranks is one partial sum per rank,
      then `dist.all_reduce` over `pp` if every rank needs it (the gradient
      norm), else an exchange of partials summed in rank order by every rank
      that needs it (DualPipe's two copies of a weight gradient stay equal).
    - A parameter read on stages of several ranks (tied embeddings: the
      embedding on the first stage, the head on the last) is held by each
      of them, and so is its update: one microbatch's gradient terms from
      two stages are a sum over ranks like the above, every holder gets the
      total and runs AdamW, so the copies stay bitwise equal; the gradient
      norm counts the total once (on the first holder).
    - Every function returns every result; one computed on some ranks only
      (the loss) is broadcast from the first.
    The schedule's CSV, with its `# loom-schedule kind=...` header, is kept
    as the module attribute `pipe.schedule_csv`; `--loom-lower-to-rt` makes
    it `rt.schedule_csv` and the executable stores it (`loom-inspect` reads
    it back).

    ```mlir
    // rank 0 of 1f1b, pp = 2, microbatches = 2
    func.func @main_pp0(...) attributes {pipe.rank = 0 : i64} {
      %h0 = ...                                     // F 0 0
      dist.exchange(%h0 : ...) {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64>}
      %h1 = ...                                     // F 0 1
      %g0 = dist.exchange(%h1 : ...) {axes = ["pp"], send_peers = array<i64: 1>, recv_peers = array<i64: 1>} -> ...
      ...                                           // B 0 0, then the rest
    }
    ```
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"", "the training step">,
  ];
  let dependentDialects = ["loom::pipe::PipeDialect", "loom::dist::DistDialect",
                           "loom::nn::NNDialect", "mlir::func::FuncDialect"];
}

#endif
