#!/usr/bin/env bash
# run_all.sh DIR INPUT: runs loom-run and loom-inspect on every executable in
# DIR; each must either succeed or fail cleanly (exit 1, an "error:" line),
# never crash (a signal gives an exit code above 128).
set -u
crashes=0
for f in "$1"/*.loomx; do
  for cmd in "loom-run $f --input $2 --output $f.out.npy" "loom-inspect $f"; do
    $cmd >/dev/null 2>"$f.err"
    rc=$?
    if [ $rc -gt 1 ]; then
      echo "CRASH (exit $rc): $cmd"; cat "$f.err"; crashes=$((crashes + 1))
    elif [ $rc -eq 1 ] && ! grep -q "error:" "$f.err"; then
      echo "FAILED WITHOUT A MESSAGE: $cmd"; crashes=$((crashes + 1))
    fi
  done
done
echo "$crashes crashes"
[ $crashes -eq 0 ]
