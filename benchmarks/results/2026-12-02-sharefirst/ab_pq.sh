#!/bin/bash
# A/B of the Parquet images first batch: base (before share_first) vs main, alternating.
out=${OUT:-/work/notes/prof/ab_pq}
mkdir -p $out
for round in ${ROUNDS:-1 2}; do
  for side in base main; do
    root=/work/wt/$side; [ $side = main ] && root=/work/main
    (cd $root && env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m compileall -q astream benchmarks >/dev/null
     timeout 900 env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m benchmarks.bench_parquet --scale 0.05 --reps 3 --index-files 0 --workloads images --sides astream-parquet --bandwidth-mbps ${BW:-0} --work /work/main/.bench/parquet-work --out $out/$side-$round > $out/$side-$round.log 2>&1)
    python3 -c "
import json;d=json.load(open('$out/$side-$round/results.json'))
rs=[r for r in (d if isinstance(d,list) else d.get('records',d.get('runs',[]))) if r.get('case')=='epoch']
print('$side-$round', [round(r['ttfb_s'],3) for r in rs], [round(r.get('dataset_s',0),3) for r in rs])"
  done
done
