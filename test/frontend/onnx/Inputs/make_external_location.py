#!/usr/bin/env python3
"""make_external_location.py OUT.onnx LOCATION: writes a model y = x @ w whose
3x3 float initializer 'w' is external data at LOCATION (36 bytes, offset 0)."""
import sys

import onnx
from onnx import TensorProto, helper

out, location = sys.argv[1], sys.argv[2]
w = TensorProto()
w.name = "w"
w.data_type = TensorProto.FLOAT
w.dims.extend([3, 3])
w.data_location = TensorProto.EXTERNAL
for key, value in [("location", location), ("offset", "0"), ("length", "36")]:
    entry = w.external_data.add()
    entry.key, entry.value = key, value
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
with open(out, "wb") as f:
    f.write(model.SerializeToString())
