# GoogleTest binaries (named *Tests) under build/test/unit, run by lit so that
# `check-loom` is one suite with one summary.
import os

import lit.formats

config.name = "Loom-Unit"
config.suffixes = []
config.test_source_root = os.path.join(config.loom_obj_root, "test", "unit")
config.test_exec_root = config.test_source_root
config.test_format = lit.formats.GoogleTest(".", "Tests")
config.environment["LOOM_SRC_ROOT"] = config.loom_src_root
# Compiled fusion kernels go to the build tree, not the user's cache.
config.environment["LOOM_CACHE_DIR"] = os.path.join(config.loom_obj_root, "test", "kernel-cache")
