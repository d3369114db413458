#!/bin/bash
# A/B of 5a6b915 (after) against its parent (before): the Parquet benchmark's MDS side and the demo
set -u
OUT=/work/main/benchmarks/results/2026-12-02-range-share
mkdir -p $OUT
for r in 1 2; do
  for arm in before after; do
    tree=/tmp/before; [ $arm = after ] && tree=/work/main
    (cd $tree && PYTHONPATH=$tree /work/main/.venv/bin/python -m benchmarks.bench_parquet --scale 0.05 --reps 2 --index-files 0 --sides astream-mds --work /work/main/.bench/parquet-work --out $OUT/pq-$arm-r$r > $OUT/pq-$arm-r$r.log 2>&1)
    (cd $tree && PYTHONPATH=$tree /work/main/.venv/bin/python -m astream demo --no-progress > $OUT/demo-$arm-r$r.txt 2>&1)
  done
done
