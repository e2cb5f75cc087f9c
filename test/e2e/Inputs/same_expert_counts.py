"""Checks that two metrics files report the same tokens per expert at every
step (moe_tokens_per_expert): a parallel layout routes as one rank does."""
import json
import sys


def counts(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return [r.get("moe_tokens_per_expert") for r in rows]


a, b = counts(sys.argv[1]), counts(sys.argv[2])
if not a or any(c is None for c in a) or a != b:
    sys.exit(f"tokens per expert differ:\n  {sys.argv[1]}: {a}\n  {sys.argv[2]}: {b}")
print(f"tokens per expert: the same at {len(a)} steps")
