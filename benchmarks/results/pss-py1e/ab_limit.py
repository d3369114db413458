"""astream-batch, astream-batch-py1e and astream-batch-py1e with ``MAP_LIMIT`` set, through
``benchmarks.pss_side.run_side`` (the bench_batches runner, hot tokens at scale 0.25, the
tree's peak PSS split by mapping), interleaved per repetition (see README.md).

    PYTHONPATH=. python benchmarks/results/pss-py1e/ab_limit.py REPS LIMIT OUT.json 0,2
"""

import json
import statistics
import sys
from pathlib import Path

from benchmarks.pss_side import run_side
from benchmarks.run import Harness, parse_args

reps, limit, out, workers = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
WS = [int(x) for x in workers.split(",")]
SC = str(Path(__file__).resolve().parent / "sc")  # sitecustomize: MAP_LIMIT in every process
h = Harness(parse_args(["--scale=0.25", "--work=.bench/work", "--libs=astream"]))
data = str(Path(".bench/work/data/astream/tokens").resolve())
h.data[("astream", "tokens")] = Path(data)
base_env = dict(h.env)
SIDES = (
    ("py1e", "astream-batch-py1e", None),
    ("py1e-limit", "astream-batch-py1e", limit),
    ("batch", "astream-batch", None),
)
runs = []
for rep in range(reps):
    for w in WS:
        for name, side, lim in SIDES:
            h.env = dict(base_env, PYTHONPATH=SC + ":" + base_env["PYTHONPATH"])
            if lim:
                h.env["ASTREAM_X_MAP_LIMIT"] = lim
            r = run_side(h, side, "tokens", w, data, 0.02)
            r["name"] = name
            runs.append(r)
            print(rep, w, name, {k: round(v, 1) for k, v in r.items() if isinstance(v, float)})
Path(out).write_text(json.dumps(runs, indent=1))
KEYS = ("samples_per_s", "runner_peak_pss_mb", "peak_pss_mb", "peak_data_mb", "peak_lib_mb",
        "peak_anon_mb")  # fmt: skip
for w in WS:
    for name, _side, _lim in SIDES:
        m = [r for r in runs if r["workers"] == w and r["name"] == name]
        meds = {k: statistics.median(r[k] for r in m) for k in KEYS}
        print(f"w{w} {name}: " + ", ".join(f"{k} {v:,.1f}" for k, v in meds.items()))
