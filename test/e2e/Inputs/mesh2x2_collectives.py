#!/usr/bin/env python3
"""mesh2x2_collectives.py DIR: writes DIR/mesh.mlir, a hand-written SPMD rt
program on a 2x2 mesh (dp, tp) that chains collectives over sub-groups and
over the whole mesh, DIR/x.npy, and DIR/expected.npy: the program's output
computed here by a separate NumPy model of the group semantics (ranks
row-major over the mesh; a group's members row-major over its axes in the
listed order)."""
import itertools
import sys

import numpy as np

out = sys.argv[1]
AXES, SHAPE = ["dp", "tp"], [2, 2]
RANKS = list(range(4))


def coords(r):
    return [r // 2, r % 2]


def group(r, axes):
    """Members of r's group over `axes`, in group order."""
    idx = [AXES.index(a) for a in axes]
    members = []
    for combo in itertools.product(*[range(SHAPE[i]) for i in idx]):
        c = coords(r)
        for i, v in zip(idx, combo):
            c[i] = v
        members.append(c[0] * 2 + c[1])
    return members


def all_reduce(v, axes, op):
    res = {}
    for r in RANKS:
        vals = [v[m] for m in group(r, axes)]
        acc = vals[0].copy()
        for x in vals[1:]:
            acc = np.maximum(acc, x) if op == "max" else (acc + x).astype(np.float32)
        res[r] = acc
    return res


def all_gather(v, axes, dim):
    return {r: np.concatenate([v[m] for m in group(r, axes)], axis=dim) for r in RANKS}


def all_to_all(v, axes, split, concat):
    res = {}
    for r in RANKS:
        g = group(r, axes)
        me = g.index(r)
        res[r] = np.concatenate([np.split(v[m], len(g), axis=split)[me] for m in g], axis=concat)
    return res


def broadcast(v, axes, root):
    return {r: v[group(r, axes)[root]].copy() for r in RANKS}


def reduce_scatter(v, axes, dim, op):
    red = all_reduce(v, axes, op)
    return {r: np.split(red[r], len(group(r, axes)), axis=dim)[group(r, axes).index(r)]
            for r in RANKS}


rng = np.random.default_rng(3)
x = rng.uniform(-1, 1, size=(8, 4)).astype(np.float32)
v = {r: x[2 * r:2 * r + 2] for r in RANKS}  # sharding [["dp", "tp"], []]
a = all_reduce(v, ["tp"], "sum")
b = all_gather(a, ["dp"], 1)
c = all_to_all(b, ["tp", "dp"], 1, 0)
d = broadcast(c, ["dp"], 1)
e = reduce_scatter(d, ["dp", "tp"], 0, "max")
f = all_gather(e, ["dp", "tp"], 0)
np.save(out + "/x.npy", x)
np.save(out + "/expected.npy", f[0])

open(out + "/mesh.mlir", "w").write('''module attributes {rt.mesh_axes = ["dp", "tp"], rt.mesh_shape = array<i64: 2, 2>} {
  rt.program @main rank = 0 streams = ["compute"] {
    %x = rt.input "x" {global_shape = array<i64: 8, 4>, sharding = [["dp", "tp"], []]} : memref<2x4xf32>
    %a = rt.alloc : memref<2x4xf32>
    rt.collective all_reduce (%x) -> (%a) {axes = ["tp"], reduce = #rt.reduce<sum>} : (memref<2x4xf32>) -> memref<2x4xf32>
    %b = rt.alloc : memref<2x8xf32>
    rt.collective all_gather (%a) -> (%b) {axes = ["dp"], dim = 1} : (memref<2x4xf32>) -> memref<2x8xf32>
    %c = rt.alloc : memref<8x2xf32>
    rt.collective all_to_all (%b) -> (%c) {axes = ["tp", "dp"], split_dim = 1, concat_dim = 0} : (memref<2x8xf32>) -> memref<8x2xf32>
    %d = rt.alloc : memref<8x2xf32>
    rt.collective broadcast (%c) -> (%d) {axes = ["dp"], root = 1} : (memref<8x2xf32>) -> memref<8x2xf32>
    %e = rt.alloc : memref<2x2xf32>
    rt.collective reduce_scatter (%d) -> (%e) {axes = ["dp", "tp"], dim = 0, reduce = #rt.reduce<max>} : (memref<8x2xf32>) -> memref<2x2xf32>
    %f = rt.alloc : memref<8x2xf32>
    rt.collective all_gather (%e) -> (%f) {axes = ["dp", "tp"], dim = 0} : (memref<2x2xf32>) -> memref<8x2xf32>
    rt.output "f" %f : memref<8x2xf32>
  }
}
''')
