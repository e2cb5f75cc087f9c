#!/usr/bin/env python3
"""check-layers.py [SRC_ROOT]: fails if an include points up Loom's layers.

Loom is two towers over a shared base. The compiler: dialects, then the pass
groups (passes/<group>/), then the pass pipeline that assembles them
(passes/Pipelines.*, which may include any group but no group it), then
the planner (passes/planning/, loom-plan's search: it compiles probes of
the model through the pipeline and reads the memory planner's figures off
their executables, so it also includes runtime/executable), then
frontend (importers and raising, which link no pass; the tools hand the
raising to the pipeline). The runtime:
kernels, then the rest of runtime/. Below both, the base: runtime/abi (what
compiler and runtime share: element types, kernel attributes, the kernel
list, meshes and collective kinds), runtime/support (.npy, file I/O, float
conversions), runtime/schedule (pipeline schedules as data), runtime/schema
(the executable's flatbuffers schema). tools/ may include
anything. Includes within a folder are free; an include from folder A into
folder B is allowed when B's layer is A's, or below it in A's tower.

EXCEPTIONS lists the includes that still cross, each with why; adding to it
needs a reason. The checker also fails on an exception that no longer occurs,
so the list only shrinks.
"""
import os
import re
import sys

BASE = ("runtime/abi", "runtime/support", "runtime/schedule", "runtime/schema")
PIPELINES = ("passes/Pipelines.",)
PLANNING = ("passes/planning/",)
RUNTIME = ("runtime/comm", "runtime/executable", "runtime/backends", "runtime/data",
           "runtime/checkpoint", "runtime/training")

# What each layer may include, besides itself.
ALLOWED = {
    "base": BASE,
    "kernels": BASE + ("kernels",),
    "runtime": BASE + ("kernels",) + RUNTIME,
    "dialects": BASE + ("dialects",),
    "passes": BASE + ("dialects", "passes"),
    "pipelines": BASE + ("dialects", "passes"),
    "planning": BASE + ("dialects", "passes", "runtime/executable"),
    "frontend": BASE + ("dialects", "frontend", "kernels/cpu"),
    "tools": None,  # anything
}

# (including folder, included file prefix): why it still crosses.
EXCEPTIONS = {
    ("passes/lowering", "runtime/executable/"): "the emitter fills the runtime's in-memory executable and serializes it",
}


def layer_of(path):
    if path.startswith(BASE):
        return "base"
    if path.startswith("kernels/"):
        return "kernels"
    if path.startswith(RUNTIME):
        return "runtime"
    if path.startswith(PIPELINES):
        return "pipelines"
    if path.startswith(PLANNING):
        return "planning"
    for top in ("dialects", "passes", "frontend", "tools"):
        if path.startswith(top + "/"):
            return top
    return None


def folder_of(path):
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), os.pardir))
    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    bad, used = [], set()
    for top in ("runtime", "kernels", "dialects", "passes", "frontend"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith((".h", ".cpp", ".cu", ".cuh", ".def", ".inc")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                layer, folder = layer_of(path), folder_of(path)
                if layer is None:
                    continue
                with open(os.path.join(root, path), errors="replace") as f:
                    text = f.read()
                for target in include.findall(text):
                    if layer_of(target) is None or folder_of(target) == folder:
                        continue
                    allowed = ALLOWED[layer]
                    # The pipeline sits above the pass groups, though under
                    # passes/, and the planner above the pipeline.
                    above = ((layer_of(target) == "pipelines" and
                              layer not in ("pipelines", "planning", "tools")) or
                             (layer_of(target) == "planning" and layer not in ("planning", "tools")))
                    if allowed is None or (target.startswith(allowed) and not above):
                        continue
                    key = next((k for k in EXCEPTIONS
                                if k[0] == folder and target.startswith(k[1])), None)
                    if key:
                        used.add(key)
                        continue
                    bad.append("%s includes %s: %s may include only %s%s" % (
                        path, target, layer, ", ".join(allowed),
                        " (not the pipeline above them)" if above else ""))
    stale = [k for k in EXCEPTIONS if k not in used]
    for line in bad:
        print("check-layers: " + line)
    for k in stale:
        print("check-layers: exception %s -> %s no longer occurs: remove it" % k)
    if bad or stale:
        return 1
    print("check-layers: every include points down (%d known exceptions)" % len(EXCEPTIONS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
