"""check_stages.py IR: every nn.fused op of IR (loom-compile --compile-to=fused
with --pp) carries a pipe.stage, and every op in its body the same one.
Prints the number of groups per stage."""
import re
import sys
from collections import Counter

stage_re = re.compile(r"pipe\.stage = (-?\d+)")
groups, bad, current = Counter(), [], None
for n, line in enumerate(open(sys.argv[1]), 1):
    if "nn.fused(" in line:
        m = stage_re.search(line)
        current = m.group(1) if m else None
        if current is None:
            bad.append(f"line {n}: nn.fused without pipe.stage")
        groups[current] += 1
    elif current is not None and "nn.yield" in line:
        current = None
    elif current is not None and "= nn." in line:
        m = stage_re.search(line)
        if not m or m.group(1) != current:
            bad.append(f"line {n}: op on stage {m.group(1) if m else None} in a stage {current} group")
for b in bad:
    print("BAD", b)
for stage, count in sorted(groups.items(), key=str):
    print(f"stage {stage}: {count} groups")
print("ok" if not bad and groups else "FAILED")
