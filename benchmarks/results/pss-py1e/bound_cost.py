"""CPU per sample and mapped shard pages of one hot epoch of column batches (see README.md).

    PYTHONPATH=. python bound_cost.py DATA time|mem [py1e] [--pread] [--map-limit=BYTES]

``time``: CPU seconds of the epoch per sample, nothing else measured. ``mem``: the same epoch,
``/proc/self/smaps`` read every 8 batches: the most and the mean PSS of mapped ``.mds`` files.
``--pread``: values read with ``preadv`` instead of through the map (the columnar decoder's
large-value path forced for every value). ``--map-limit``: sets
``astream.runtime.batch.MAP_LIMIT`` (shards opened past that many mapped bytes are read by
copy). The per-batch page drops of the README's other rows need ``experiment.patch`` applied
(``ASTREAM_X_DROP=N``).
"""

import json
import sys
import time

import astream.core.batchdecode as bd
import astream.runtime.batch as rb
from astream.torch.dataloader import StreamingDataLoader
from astream.torch.dataset import StreamingDataset


def shard_pss_mb() -> float:
    total, ours = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 5)
            if not head[0].endswith(":"):
                ours = len(head) > 5 and ".mds" in head[5]
            elif ours and head[0] == "Pss:":
                total += int(head[1])
    return total / 1024


data, mode = sys.argv[1], sys.argv[2]
if "--pread" in sys.argv:
    bd.PREAD = rb.PREAD = 1
for arg in sys.argv:
    if arg.startswith("--map-limit="):
        rb.MAP_LIMIT = int(arg.split("=", 1)[1])
extra = {"shuffle_algo": "py1e"} if "py1e" in sys.argv else {}
ds = StreamingDataset(local=data, shuffle=True, shuffle_seed=1234, batch_size=32, **extra)
ld = StreamingDataLoader(ds, batch_size=32, num_workers=0, batch_format="torch", ragged="offsets")
n, seen = 0, []
c0 = time.process_time()
for i, b in enumerate(ld):
    n += len(b["id"])
    if mode == "mem" and i % 8 == 0:
        seen.append(shard_pss_mb())
out = {"cpu_us_per_sample": round((time.process_time() - c0) / n * 1e6, 3)}
if seen:
    out.update(max_shard_mb=round(max(seen), 1), mean_shard_mb=round(sum(seen) / len(seen), 1))
print(json.dumps(out))
