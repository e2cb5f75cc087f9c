#!/usr/bin/env python3
"""dp_step.py RANKS OUT.mlir: writes a tiny hand-written rt training step,
data-parallel over RANKS ranks (mesh ["dp"] = [RANKS]), that follows
loom-run's training contract (inputs tokens, lr, step; outputs loss,
grad_norm):

  loss      = mean(tokens of the global batch) * 0.001 + sum(w)
  grad_norm = sum(w)
  w        -= lr * loss                 (w [4], split along dp)

The batch [4, 5] is split along dp; w is split along dp, so the sums need an
all_reduce over dp. With RANKS = 1 the collectives are over a group of one.
"""
import sys

ranks = int(sys.argv[1])
b, w = 4 // ranks, 4 // ranks
text = f'''module attributes {{rt.mesh_axes = ["dp"], rt.mesh_shape = array<i64: {ranks}>}} {{
  rt.program @step rank = 0 streams = ["compute"] {{
    %tokens = rt.input "tokens" {{global_shape = array<i64: 4, 5>, sharding = [["dp"], []]}} : memref<{b}x5xi64>
    %lr = rt.input "lr" : memref<f32>
    %step = rt.input "step" : memref<f32>
    %w = rt.param "w" {{init = "normal", init_scale = 1.0 : f64, global_shape = array<i64: 4>, sharding = [["dp"]]}} : memref<{w}xf32>
    %scale = rt.param "scale" frozen {{value = dense<0.001> : tensor<f32>}} : memref<f32>
    %tf = rt.alloc : memref<{b}x5xf32>
    rt.kernel "nn.cast" (%tokens) -> (%tf) : (memref<{b}x5xi64>) -> memref<{b}x5xf32>
    %local_mean = rt.alloc : memref<f32>
    rt.kernel "nn.reduce_mean" (%tf) -> (%local_mean) attrs {{dims = array<i64: 0, 1>}} : (memref<{b}x5xf32>) -> memref<f32>
    %mean = rt.alloc : memref<f32>
    rt.collective all_reduce (%local_mean) -> (%mean) {{axes = ["dp"], reduce = #rt.reduce<avg>}} : (memref<f32>) -> memref<f32>
    %local_sum = rt.alloc : memref<f32>
    rt.kernel "nn.reduce_sum" (%w) -> (%local_sum) attrs {{dims = array<i64: 0>}} : (memref<{w}xf32>) -> memref<f32>
    %wsum = rt.alloc : memref<f32>
    rt.collective all_reduce (%local_sum) -> (%wsum) {{axes = ["dp"], reduce = #rt.reduce<sum>}} : (memref<f32>) -> memref<f32>
    %scaled = rt.alloc : memref<f32>
    rt.kernel "nn.mul" (%mean, %scale) -> (%scaled) : (memref<f32>, memref<f32>) -> memref<f32>
    %loss = rt.alloc : memref<f32>
    rt.kernel "nn.add" (%scaled, %wsum) -> (%loss) : (memref<f32>, memref<f32>) -> memref<f32>
    %delta = rt.alloc : memref<f32>
    rt.kernel "nn.mul" (%lr, %loss) -> (%delta) : (memref<f32>, memref<f32>) -> memref<f32>
    %updated = rt.alloc : memref<{w}xf32>
    rt.kernel "nn.sub" (%w, %delta) -> (%updated) : (memref<{w}xf32>, memref<f32>) -> memref<{w}xf32>
    rt.copy %updated -> %w : memref<{w}xf32> -> memref<{w}xf32>
    rt.output "loss" %loss : memref<f32>
    rt.output "grad_norm" %wsum : memref<f32>
  }}
}}
'''
open(sys.argv[2], "w").write(text)
