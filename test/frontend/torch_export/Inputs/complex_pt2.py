"""Writes a hand-made torch.export program with complex tensors, as
DeepSeek-V2's rotary embedding makes them: view_as_complex of pairs,
polar of constants, the complex product (with another complex tensor, a
real tensor and a number), an unsqueeze and view_as_real; its input and
NumPy's result. With --bad, a program that takes the absolute value of a
complex tensor (not imported).

usage: complex_pt2.py OUTDIR [--bad]   (writes model.pt2, x.npy, expected.npy)
"""
import json
import os
import sys
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synthetic_pt2 import FLOAT32, Program, meta, tensor  # noqa: E402

COMPLEX64 = 10


def main():
    out = sys.argv[1]
    bad = "--bad" in sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    p = Program()
    p.values["x"] = meta(FLOAT32, [3, 4])
    x = tensor("x")
    p.node("view.default", "pairs", FLOAT32, [3, 2, 2], self=x, size={"as_ints": [3, 2, 2]})
    p.node("view_as_complex.default", "z", COMPLEX64, [3, 2], self=tensor("pairs"))
    p.node("full.default", "radius", FLOAT32, [2], size={"as_ints": [2]},
           fill_value={"as_float": 2.0})
    p.node("full.default", "angle", FLOAT32, [2], size={"as_ints": [2]},
           fill_value={"as_float": 0.5})
    p.node("polar.default", "w", COMPLEX64, [2], abs=tensor("radius"), angle=tensor("angle"))
    p.node("unsqueeze.default", "w1", COMPLEX64, [1, 2], self=tensor("w"), dim={"as_int": 0})
    p.node("mul.Tensor", "zw", COMPLEX64, [3, 2], self=tensor("z"), other=tensor("w1"))
    p.node("mul.Tensor", "zz", COMPLEX64, [3, 2], self=tensor("zw"), other=tensor("z"))
    p.node("full.default", "gain", FLOAT32, [2], size={"as_ints": [2]},
           fill_value={"as_float": 0.25})
    p.node("mul.Tensor", "zg", COMPLEX64, [3, 2], self=tensor("zz"), other=tensor("gain"))
    p.node("mul.Tensor", "zs", COMPLEX64, [3, 2], self=tensor("zg"), other={"as_float": 3.0})
    last = "zs"
    if bad:
        p.node("abs.default", "mag", FLOAT32, [3, 2], self=tensor("zs"))
        last = "mag"
    else:
        p.node("view_as_real.default", "r", FLOAT32, [3, 2, 2], self=tensor("zs"))
        p.node("view.default", "y", FLOAT32, [3, 4], self=tensor("r"), size={"as_ints": [3, 4]})
        last = "y"
    program = {
        "graph_module": {
            "graph": {"inputs": [x], "outputs": [tensor(last)], "nodes": p.nodes,
                      "tensor_values": p.values, "sym_int_values": {}, "sym_bool_values": {},
                      "is_single_tensor_return": True, "custom_obj_values": {},
                      "sym_float_values": {}},
            "signature": {"input_specs": [{"user_input": {"arg": x}}],
                          "output_specs": [{"user_output": {"arg": tensor(last)}}]},
            "module_call_graph": [], "metadata": {}},
        "opset_version": {"aten": 10}, "range_constants": {}, "range_constraints": {},
        "schema_version": {"major": 8, "minor": 17}, "verifiers": [], "torch_version": "2.11.0"}
    with zipfile.ZipFile(os.path.join(out, "model.pt2"), "w") as archive:
        archive.writestr("complex/models/model.json", json.dumps(program))
        archive.writestr("complex/byteorder", "little")

    xv = np.linspace(-1.5, 2.0, 12, dtype=np.float32).reshape(3, 4)
    np.save(os.path.join(out, "x.npy"), xv)
    z = xv[:, 0::2].astype(np.complex128) + 1j * xv[:, 1::2]
    w = 2.0 * np.exp(0.5j) * np.ones(2)
    zs = (z * w[None, :]) * z * 0.25 * 3.0
    y = np.stack([zs.real, zs.imag], axis=-1).reshape(3, 4)
    np.save(os.path.join(out, "expected.npy"), y.astype(np.float32))


if __name__ == "__main__":
    main()
