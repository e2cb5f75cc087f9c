"""Writes a small hand-made torch.export program that exercises operators the
fixtures do not use, with its input and NumPy's results.

usage: synthetic_pt2.py OUTDIR   (writes model.pt2, x.npy, expected{0..8}.npy)
"""
import json
import os
import sys
import zipfile

import numpy as np

FLOAT32, INT64, BOOL = 7, 5, 12


def meta(dtype, shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.insert(0, {"as_int": step})
        step *= size
    return {"dtype": dtype, "sizes": [{"as_int": s} for s in shape], "requires_grad": False,
            "device": {"type": "cpu", "index": None}, "strides": strides,
            "storage_offset": {"as_int": 0}, "layout": 7}


def tensor(name):
    return {"as_tensor": {"name": name}}


class Program:
    def __init__(self):
        self.nodes, self.values = [], {}

    def node(program, target, out, dtype, shape, **inputs):
        program.nodes.append({
            "target": "torch.ops.aten." + target, "name": out,
            "inputs": [{"name": k, "arg": v, "kind": 1} for k, v in inputs.items()],
            "outputs": [tensor(out)], "metadata": {}})
        program.values[out] = meta(dtype, shape)

    def node2(program, target, outs, **inputs):
        """A node of two outputs, each (name, dtype, shape)."""
        program.nodes.append({
            "target": "torch.ops.aten." + target, "name": outs[0][0],
            "inputs": [{"name": k, "arg": v, "kind": 1} for k, v in inputs.items()],
            "outputs": [tensor(name) for name, _, _ in outs], "metadata": {}})
        for name, dtype, shape in outs:
            program.values[name] = meta(dtype, shape)


def write_archive(path, root, p, inputs, outputs):
    """A .pt2 holding `p`'s nodes as a torch.export program under `root/`,
    with the graph inputs `inputs` (tensor args) and the named outputs."""
    program = {
        "graph_module": {
            "graph": {"inputs": inputs, "outputs": [tensor(o) for o in outputs], "nodes": p.nodes,
                      "tensor_values": p.values, "sym_int_values": {}, "sym_bool_values": {},
                      "is_single_tensor_return": False, "custom_obj_values": {},
                      "sym_float_values": {}},
            "signature": {"input_specs": [{"user_input": {"arg": i}} for i in inputs],
                          "output_specs": [{"user_output": {"arg": tensor(o)}} for o in outputs]},
            "module_call_graph": [], "metadata": {}},
        "opset_version": {"aten": 10}, "range_constraints": {},
        "schema_version": {"major": 8, "minor": 17}, "verifiers": [], "torch_version": "2.11.0"}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(root + "/models/model.json", json.dumps(program))
        archive.writestr(root + "/byteorder", "little")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    p = Program()
    p.values["x"] = meta(FLOAT32, [2, 4])
    x = tensor("x")
    p.node("softmax.int", "sm", FLOAT32, [2, 4], self=x, dim={"as_int": -1})
    p.node("gelu.default", "g", FLOAT32, [2, 4], self=tensor("sm"), approximate={"as_string": "tanh"})
    p.node("permute.default", "xt", FLOAT32, [4, 2], self=x, dims={"as_ints": [1, 0]})
    p.node("matmul.default", "mm", FLOAT32, [2, 2], self=x, other=tensor("xt"))
    p.node("sum.dim_IntList", "s", FLOAT32, [2], self=tensor("mm"), dim={"as_ints": [1]},
           keepdim={"as_bool": False})
    p.node("gt.Scalar", "big", BOOL, [2, 4], self=x, other={"as_float": 0.5})
    p.node("masked_fill.Scalar", "mf", FLOAT32, [2, 4], self=x, mask=tensor("big"),
           value={"as_float": -1.0})
    p.node("full.default", "ones", FLOAT32, [4, 4], size={"as_ints": [4, 4]},
           fill_value={"as_float": 1.0})
    p.node("triu.default", "upper", FLOAT32, [4, 4], self=tensor("ones"), diagonal={"as_int": 1})
    p.node("arange.default", "positions", INT64, [4], end={"as_int": 4})
    p.node("cumsum.default", "running", INT64, [4], self=tensor("positions"), dim={"as_int": 0})
    p.node("slice.Tensor", "picks", INT64, [2], self=tensor("running"), dim={"as_int": 0},
           start={"as_int": 1}, end={"as_int": 3})
    p.node("index_select.default", "chosen", FLOAT32, [2, 2], self=x, dim={"as_int": 1},
           index=tensor("picks"))
    p.node("mm.default", "xu", FLOAT32, [2, 4], self=x, mat2=tensor("upper"))
    p.node("lt.Scalar", "negative", BOOL, [2, 4], self=x, other={"as_int": 0})
    p.node("where.self", "w", FLOAT32, [2, 4], condition=tensor("negative"), self=tensor("xu"),
           other=tensor("g"))
    # stack along a new last dim; max over a dim with its indices (the first
    # of tied maxima, as torch documents), over a dim that is not the last.
    p.node("stack.default", "st", FLOAT32, [2, 4, 2],
           tensors={"as_tensors": [{"name": "x"}, {"name": "mf"}]}, dim={"as_int": -1})
    p.node2("max.dim", [("mx", FLOAT32, [4]), ("mi", INT64, [4])], self=x, dim={"as_int": 0},
            keepdim={"as_bool": False})
    p.node2("max.dim", [("ux", FLOAT32, [4, 1]), ("ui", INT64, [4, 1])], self=tensor("upper"),
            dim={"as_int": 1}, keepdim={"as_bool": True})
    outputs = ["s", "mf", "chosen", "w", "sm", "st", "mx", "mi", "ui"]
    write_archive(os.path.join(out, "model.pt2"), "synthetic", p, [x], outputs)

    xv = np.array([[0.3, -1.2, 0.9, 2.0], [-0.4, 0.7, 0.1, -2.5]], dtype=np.float32)
    np.save(os.path.join(out, "x.npy"), xv)
    e = np.exp(xv - xv.max(axis=-1, keepdims=True))
    sm = e / e.sum(axis=-1, keepdims=True)
    g = 0.5 * sm * (1 + np.tanh(np.sqrt(2 / np.pi) * (sm + 0.044715 * sm ** 3)))
    s = (xv @ xv.T).sum(axis=1)
    mf = np.where(xv > 0.5, -1.0, xv)
    chosen = xv[:, [1, 3]]  # cumsum of 0..3 is [0, 1, 3, 6]; [1:3] picks 1 and 3
    w = np.where(xv < 0, xv @ np.triu(np.ones((4, 4)), 1), g)
    st = np.stack([xv, mf], axis=-1)
    upper = np.triu(np.ones((4, 4)), 1)
    for i, value in enumerate([s, mf, chosen, w, sm, st, xv.max(axis=0)]):
        np.save(os.path.join(out, "expected%d.npy" % i), value.astype(np.float32))
    np.save(os.path.join(out, "expected7.npy"), xv.argmax(axis=0).astype(np.int64))
    np.save(os.path.join(out, "expected8.npy"), upper.argmax(axis=1)[:, None].astype(np.int64))


if __name__ == "__main__":
    main()
