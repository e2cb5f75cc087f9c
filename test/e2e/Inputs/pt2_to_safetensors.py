#!/usr/bin/env python3
"""pt2_to_safetensors.py MODEL.pt2 OUT.safetensors: the f32 weights a .pt2
archive holds, as a safetensors file keyed by their fully-qualified names
(what a training script would save with safetensors.torch.save_file)."""
import io
import json
import sys
import zipfile

import numpy as np

sys.path.insert(0, __import__("os").path.dirname(__file__))
from nn_cases import write_safetensors  # noqa: E402

archive = zipfile.ZipFile(sys.argv[1])
root = archive.namelist()[0].split("/")[0]
config = json.loads(archive.read(root + "/data/weights/model_weights_config.json"))["config"]
tensors = {}
for name, entry in config.items():
    meta = entry["tensor_meta"]
    if meta["dtype"] != 7:  # float32
        sys.exit("%s: only f32 weights are converted" % name)
    shape = [d["as_int"] for d in meta["sizes"]]
    data = archive.read(root + "/data/weights/" + entry["path_name"])
    tensors[name] = np.frombuffer(data, np.float32)[: int(np.prod(shape))].reshape(shape)
write_safetensors(sys.argv[2], tensors)
