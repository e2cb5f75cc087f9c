"""run(cmd): runs one of Loom's tools for a test script, exiting with
"<script>: FAIL: ..." and the tool's output when it fails (shared by the
e2e helper scripts beside it)."""
import os
import subprocess
import sys


def run(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit("%s: FAIL: %s exited %d:\n%s" % (os.path.basename(sys.argv[0]), " ".join(cmd),
                                                  proc.returncode, proc.stdout.strip()))
    return proc.stdout
