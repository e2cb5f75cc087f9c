"""Writes hand-made torch.export programs with in-place operators, the way
torch.export's default (training) IR records them, with NumPy's results.

usage: inplace_pt2.py CASE OUTDIR   (writes OUTDIR/model.pt2, inputs and expected*.npy)

Cases:
  read-after-write  y = x * 2; y.add_(1); z = y * 3 reads the new y
  view              b = x.clone(); b[:, 1:3].mul_(10); b and the view read back
  view-chain        b = x.clone(); b.t()[2].fill_(7): an in-place op at the
                    end of a chain of views; b and another view of it read back
  inplace-chain     b = x.clone(); b.add_(1).mul_(2) (the second on the
                    first's result), then detach_ and copy_ through a view
  state             a mutated buffer and a mutated user input, reported in
                    the signature (buffer_mutation, user_input_mutation)
  expanded          an in-place op on an expanded view (an error)
  no-functional     an in-place op without a functional form (an error)
"""
import json
import os
import sys
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synthetic_pt2 import FLOAT32, Program, meta, tensor  # noqa: E402


def archive(out, p, inputs, input_specs, outputs, output_specs):
    program = {
        "graph_module": {
            "graph": {"inputs": [tensor(i) for i in inputs],
                      "outputs": [tensor(o) for o in outputs], "nodes": p.nodes,
                      "tensor_values": p.values, "sym_int_values": {}, "sym_bool_values": {},
                      "is_single_tensor_return": False, "custom_obj_values": {},
                      "sym_float_values": {}},
            "signature": {"input_specs": input_specs, "output_specs": output_specs},
            "module_call_graph": [], "metadata": {}},
        "opset_version": {"aten": 10}, "range_constraints": {},
        "schema_version": {"major": 8, "minor": 17}, "verifiers": [], "torch_version": "2.11.0"}
    with zipfile.ZipFile(os.path.join(out, "model.pt2"), "w") as zf:
        zf.writestr("inplace/models/model.json", json.dumps(program))
        zf.writestr("inplace/byteorder", "little")


def user_outputs(names):
    return [{"user_output": {"arg": tensor(o)}} for o in names]


def save(out, **arrays):
    for name, value in arrays.items():
        np.save(os.path.join(out, name + ".npy"), np.asarray(value, dtype=np.float32))


X = np.array([[0.3, -1.2, 0.9, 2.0], [-0.4, 0.7, 0.1, -2.5]], dtype=np.float32)
F = FLOAT32


def main():
    case, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    p = Program()
    p.values["x"] = meta(F, [2, 4])
    x = tensor("x")
    user_x = [{"user_input": {"arg": x}}]
    save(out, x=X)
    if case == "read-after-write":
        p.node("mul.Tensor", "y", F, [2, 4], self=x, other={"as_float": 2.0})
        p.node("add_.Tensor", "add_", F, [2, 4], self=tensor("y"), other={"as_float": 1.0})
        p.node("mul.Tensor", "z", F, [2, 4], self=tensor("y"), other={"as_float": 3.0})
        archive(out, p, ["x"], user_x, ["z"], user_outputs(["z"]))
        save(out, expected0=(X * 2 + 1) * 3)
    elif case == "view":
        p.node("clone.default", "b", F, [2, 4], self=x)
        p.node("slice.Tensor", "v", F, [2, 2], self=tensor("b"), dim={"as_int": 1},
               start={"as_int": 1}, end={"as_int": 3})
        p.node("mul_.Tensor", "mul_", F, [2, 2], self=tensor("v"), other={"as_float": 10.0})
        p.node("add.Tensor", "after", F, [2, 4], self=tensor("b"), other={"as_float": 0.5})
        archive(out, p, ["x"], user_x, ["after", "v"], user_outputs(["after", "v"]))
        b = X.copy()
        b[:, 1:3] *= 10
        save(out, expected0=b + 0.5, expected1=b[:, 1:3])
    elif case == "block":
        # A block cut along both dims, b[1:, 0:3] *= 10 (DeepSeek-V4's pooling
        # window fills such blocks of a zeros tensor of the batch).
        p.node("clone.default", "b", F, [2, 4], self=x)
        p.node("slice.Tensor", "rows", F, [1, 4], self=tensor("b"), dim={"as_int": 0},
               start={"as_int": 1}, end={"as_int": 9223372036854775807})
        p.node("slice.Tensor", "v", F, [1, 3], self=tensor("rows"), dim={"as_int": 1},
               start={"as_int": 0}, end={"as_int": 3})
        p.node("mul_.Tensor", "mul_", F, [1, 3], self=tensor("v"), other={"as_float": 10.0})
        p.node("add.Tensor", "after", F, [2, 4], self=tensor("b"), other={"as_float": 0.5})
        archive(out, p, ["x"], user_x, ["after"], user_outputs(["after"]))
        b = X.copy()
        b[1:, 0:3] *= 10
        save(out, expected0=b + 0.5)
    elif case == "row-block":
        # A row's leading elements, b[1, :3] *= 10: a select, then a slice
        # (the gated delta rule's row by row updates, attn[..., i, :i]).
        p.node("clone.default", "b", F, [2, 4], self=x)
        p.node("select.int", "row", F, [4], self=tensor("b"), dim={"as_int": 0},
               index={"as_int": 1})
        p.node("slice.Tensor", "v", F, [3], self=tensor("row"), dim={"as_int": 0},
               start={"as_int": 0}, end={"as_int": 3})
        p.node("mul_.Tensor", "mul_", F, [3], self=tensor("v"), other={"as_float": 10.0})
        p.node("add.Tensor", "after", F, [2, 4], self=tensor("b"), other={"as_float": 0.5})
        archive(out, p, ["x"], user_x, ["after"], user_outputs(["after"]))
        b = X.copy()
        b[1, :3] *= 10
        save(out, expected0=b + 0.5)
    elif case == "view-chain":
        p.node("clone.default", "b", F, [2, 4], self=x)
        p.node("t.default", "bt", F, [4, 2], self=tensor("b"))
        p.node("slice.Tensor", "tail", F, [2, 2], self=tensor("bt"), dim={"as_int": 0},
               start={"as_int": 2}, end={"as_int": 4})
        p.node("select.int", "row", F, [2], self=tensor("bt"), dim={"as_int": 0},
               index={"as_int": 2})
        p.node("fill_.Scalar", "fill_", F, [2], self=tensor("row"), value={"as_float": 7.0})
        p.node("neg.default", "readb", F, [2, 4], self=tensor("b"))
        p.node("neg.default", "readtail", F, [2, 2], self=tensor("tail"))
        archive(out, p, ["x"], user_x, ["readb", "readtail"], user_outputs(["readb", "readtail"]))
        b = X.copy()
        b.T[2] = 7
        save(out, expected0=-b, expected1=-(b.T[2:4]))
    elif case == "inplace-chain":
        p.node("clone.default", "b", F, [2, 4], self=x)
        p.node("add_.Tensor", "add_", F, [2, 4], self=tensor("b"), other={"as_float": 1.0})
        p.node("mul_.Tensor", "mul_", F, [2, 4], self=tensor("add_"), other={"as_float": 2.0})
        p.node("detach_.default", "detach_", F, [2, 4], self=tensor("b"))
        p.node("view.default", "flat", F, [8], self=tensor("detach_"), size={"as_ints": [8]})
        p.node("slice.Tensor", "evens", F, [4], self=tensor("flat"), dim={"as_int": 0},
               start={"as_int": 0}, end={"as_int": 8}, step={"as_int": 2})
        p.node("copy_.default", "copy_", F, [4], self=tensor("evens"), src=tensor("src"))
        p.values["src"] = meta(F, [4])
        p.nodes.insert(0, {"target": "torch.ops.aten.arange.default", "name": "srci",
                           "inputs": [{"name": "end", "arg": {"as_int": 4}, "kind": 1},
                                      {"name": "dtype", "arg": {"as_scalar_type": 7}, "kind": 2}],
                           "outputs": [tensor("srci")], "metadata": {}})
        p.values["srci"] = meta(F, [4])
        p.nodes.insert(1, {"target": "torch.ops.aten.neg.default", "name": "src",
                           "inputs": [{"name": "self", "arg": tensor("srci"), "kind": 1}],
                           "outputs": [tensor("src")], "metadata": {}})
        p.node("mul.Tensor", "readb", F, [2, 4], self=tensor("b"), other={"as_float": 1.0})
        archive(out, p, ["x"], user_x, ["readb", "mul_"], user_outputs(["readb", "mul_"]))
        b = (X + 1) * 2
        flat = b.reshape(8)
        flat[0::2] = -np.arange(4)
        save(out, expected0=b, expected1=b)
    elif case == "state":
        p.values["buf"] = meta(F, [4])
        p.values["u"] = meta(F, [4])
        p.node("select.int", "x0", F, [4], self=x, dim={"as_int": 0}, index={"as_int": 0})
        p.node("add_.Tensor", "add_", F, [4], self=tensor("buf"), other=tensor("x0"))
        p.node("mul_.Tensor", "mul_", F, [4], self=tensor("u"), other={"as_float": 2.0})
        p.node("add.Tensor", "y", F, [2, 4], self=x, other=tensor("buf"))
        p.node("add.Tensor", "z", F, [2, 4], self=tensor("y"), other=tensor("u"))
        specs = [{"buffer": {"arg": tensor("buf"), "buffer_name": "counts", "persistent": True}},
                 {"user_input": {"arg": x}}, {"user_input": {"arg": tensor("u")}}]
        outs = [{"buffer_mutation": {"arg": tensor("add_"), "buffer_name": "counts"}},
                {"user_input_mutation": {"arg": tensor("mul_"), "user_input_name": "u"}},
                {"user_output": {"arg": tensor("z")}}]
        archive(out, p, ["buf", "x", "u"], specs, ["add_", "mul_", "z"], outs)
        u = np.array([1.0, -2.0, 3.0, 0.5], dtype=np.float32)
        save(out, u=u)
        buf = np.zeros(4, np.float32) + X[0]  # the buffer starts at zero (--embed-weights=false)
        save(out, expected0=X + buf + 2 * u, expected1=buf, expected2=2 * u)
    elif case == "expanded":
        p.node("select.int", "x0", F, [4], self=x, dim={"as_int": 0}, index={"as_int": 0})
        p.node("clone.default", "c", F, [4], self=tensor("x0"))
        p.node("expand.default", "e", F, [2, 4], self=tensor("c"), size={"as_ints": [2, 4]})
        p.node("add_.Tensor", "bad_add", F, [2, 4], self=tensor("e"), other=x)
        p.node("neg.default", "n", F, [4], self=tensor("c"))
        archive(out, p, ["x"], user_x, ["n"], user_outputs(["n"]))
    elif case == "no-functional":
        p.node("clone.default", "c", F, [2, 4], self=x)
        p.node("exponential_.default", "exponential_", F, [2, 4], self=tensor("c"),
               lambd={"as_float": 1.0})
        archive(out, p, ["x"], user_x, ["c"], user_outputs(["c"]))
    else:
        sys.exit("unknown case " + case)


if __name__ == "__main__":
    main()
