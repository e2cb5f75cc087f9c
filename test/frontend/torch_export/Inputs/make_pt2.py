"""Writes damaged or modified copies of a .pt2 archive for the importer's tests.

usage: make_pt2.py KIND SOURCE.pt2 OUT.pt2

KIND is one of: random, empty, truncated, no-program, aoti, bad-json, corrupt-entry,
schema, unsupported-op, bad-dtype, short-weight, non-causal-mask, symbolic.
"""
import json
import random
import sys
import zipfile


def program_entry(names):
    return next(n for n in names if n.endswith("models/model.json"))


def rewrite(source, out, edit_program=None, edit_entry=None):
    """Copies `source` to `out`, passing model.json through `edit_program`
    (a function of the parsed JSON) and other entries through `edit_entry`."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(out, "w") as dst:
        program = program_entry(src.namelist())
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == program and edit_program:
                data = edit_program(json.loads(data))
                if not isinstance(data, bytes):
                    data = json.dumps(data).encode()
            elif edit_entry:
                data = edit_entry(info.filename, data)
            dst.writestr(info.filename, data)


def nodes(program):
    return program["graph_module"]["graph"]["nodes"]


def first_node(program, target):
    return next(n for n in nodes(program) if n["target"] == target)


def main():
    kind, source, out = sys.argv[1:4]
    if kind == "random":
        rng = random.Random(1234)
        open(out, "wb").write(bytes(rng.randrange(256) for _ in range(4096)))
    elif kind == "empty":
        open(out, "wb").close()
    elif kind == "truncated":
        data = open(source, "rb").read()
        open(out, "wb").write(data[: len(data) // 2])
    elif kind == "no-program":
        with zipfile.ZipFile(out, "w") as dst:
            dst.writestr("model/data/readme.txt", "no program here")
    elif kind == "aoti":
        # What torch._inductor.aoti_compile_and_package writes: compiled
        # code and constants, no program.
        with zipfile.ZipFile(out, "w") as dst:
            dst.writestr("model/archive_format", "pt2")
            dst.writestr("model/data/aotinductor/model/model.wrapper.so", b"\x7fELF")
    elif kind == "bad-json":
        rewrite(source, out, lambda p: b'{"graph_module": {"graph": [1, 2,')
    elif kind == "corrupt-entry":
        # Damages model.json's stored bytes so that its CRC no longer matches.
        with zipfile.ZipFile(source) as src:
            info = src.getinfo(program_entry(src.namelist()))
        data = bytearray(open(source, "rb").read())
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
        middle = start + info.compress_size // 2
        for i in range(middle, middle + 16):
            data[i] ^= 0x5A
        open(out, "wb").write(bytes(data))
    elif kind == "schema":
        def edit(p):
            p["schema_version"] = {"major": 99, "minor": 1}
            return p
        rewrite(source, out, edit)
    elif kind == "unsupported-op":
        def edit(p):
            first_node(p, "torch.ops.aten.silu.default")["target"] = "torch.ops.aten.fft_fft.default"
            return p
        rewrite(source, out, edit)
    elif kind == "bad-dtype":
        def edit(p):
            p["graph_module"]["graph"]["tensor_values"]["embedding"]["dtype"] = 10  # complex64
            return p
        rewrite(source, out, edit)
    elif kind == "short-weight":
        def edit(name, data):
            return data[: len(data) // 2] if name.endswith("data/weights/weight_1") else data
        rewrite(source, out, edit_entry=edit)
    elif kind == "non-causal-mask":
        # Attends where the causal mask blocks: logical_not of the causal mask.
        def edit(p):
            graph = nodes(p)
            attention = first_node(p, "torch.ops.aten.scaled_dot_product_attention.default")
            mask_arg = next(a for a in attention["inputs"] if a["name"] == "attn_mask")
            mask = mask_arg["arg"]["as_tensor"]["name"]
            inverted = {
                "target": "torch.ops.aten.logical_not.default",
                "name": "inverted_mask",
                "inputs": [{"name": "self", "arg": {"as_tensor": {"name": mask}}, "kind": 1}],
                "outputs": [{"as_tensor": {"name": "inverted_mask"}}],
                "metadata": {},
            }
            graph.insert(graph.index(attention), inverted)
            values = p["graph_module"]["graph"]["tensor_values"]
            values["inverted_mask"] = dict(values[mask])
            mask_arg["arg"]["as_tensor"]["name"] = "inverted_mask"
            return p
        rewrite(source, out, edit)
    elif kind == "symbolic":
        # input_ids as [s0, s1], as torch.export writes dynamic batch and sequence.
        def edit(p):
            meta = p["graph_module"]["graph"]["tensor_values"]["input_ids"]
            meta["sizes"] = [{"as_expr": {"expr_str": "s0", "hint": None}},
                             {"as_expr": {"expr_str": "s1", "hint": None}}]
            meta["strides"] = [{"as_expr": {"expr_str": "s1", "hint": None}}, {"as_int": 1}]
            p["range_constraints"] = {"s0": {"min_val": 1, "max_val": 64},
                                      "s1": {"min_val": 2, "max_val": 1024}}
            return p
        rewrite(source, out, edit)
    else:
        sys.exit("unknown kind " + kind)


if __name__ == "__main__":
    main()
