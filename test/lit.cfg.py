# Loom's lit configuration: IR tests (loom-opt | FileCheck) and end-to-end
# tests of the command-line tools.
import os
import shutil

import lit.formats
from lit.llvm import llvm_config

config.name = "Loom"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["unit", "Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.loom_obj_root, "test")

llvm_config.use_default_substitutions()
# Compiled fusion kernels go to the build tree, not the user's cache.
config.environment["LOOM_CACHE_DIR"] = os.path.join(config.loom_obj_root, "test", "kernel-cache")
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.loom_tools_dir, append_path=True)
# Test helpers use Debian's python3 (with python3-numpy), whatever python runs lit.
config.substitutions = [s for s in config.substitutions if s[0] != "%python"]
config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(("%loom_src", config.loom_src_root))
config.substitutions.append(("%loom_tools", config.loom_tools_dir))

tools = ["loom-opt", "loom-compile", "loom-plan", "loom-run", "loom-inspect", "loom-tokenize"]
llvm_config.add_tool_substitutions(
    [t for t in tools if os.path.exists(os.path.join(config.loom_tools_dir, t))],
    [config.loom_tools_dir])
for t in tools:
    if os.path.exists(os.path.join(config.loom_tools_dir, t)):
        config.available_features.add(t)
if config.loom_enable_cuda:
    config.available_features.add("cuda-toolkit")

# Multi-process tests run loom-run under mpirun (root in containers needs
# --allow-run-as-root; --oversubscribe lets 4 ranks share 2 cores).
mpirun = shutil.which("mpirun")
if config.loom_have_mpi and mpirun:
    config.available_features.add("mpirun")
    config.substitutions.append(
        ("%mpirun", mpirun + " --allow-run-as-root --oversubscribe"))
else:
    lit_config.note("the mpirun tests are UNSUPPORTED: " +
                    ("this build of Loom has no MPI (install libopenmpi-dev and rebuild)"
                     if not config.loom_have_mpi else
                     "mpirun is not installed (openmpi-bin)"))

# Multi-GPU tests need a CUDA build and two GPUs (NCCL between them).
def gpu_count():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    import subprocess
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except Exception:
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))

gpus = gpu_count() if config.loom_enable_cuda else 0
if gpus >= 1:
    config.available_features.add("gpu")
else:
    lit_config.note("the GPU tests are UNSUPPORTED: " +
                    ("this build has no CUDA backend" if not config.loom_enable_cuda else
                     "no GPU is visible"))
if gpus >= 2:
    config.available_features.add("two-gpus")
else:
    lit_config.note("the multi-GPU tests are UNSUPPORTED: " +
                    ("this build has no CUDA backend" if not config.loom_enable_cuda else
                     "%d GPU(s) visible, they need 2" % gpus))
