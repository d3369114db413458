"""A job for test_top: 2 DataLoader workers under Metrics; writes READY after its first batch,
then holds its workers' figures until STOP appears."""

import os
import sys
import time

from astream import StreamingDataLoader, StreamingDataset
from astream.metrics import Metrics

path, marks = sys.argv[1], sys.argv[2]
ds = StreamingDataset(local=path, batch_size=10)
with Metrics(ds, interval=0.1) as m:
    loader = StreamingDataLoader(
        ds, batch_size=10, num_workers=2, collate_fn=list, worker_init_fn=m.worker_init_fn
    )
    n = sum(len(b) for b in loader)
    deadline = time.monotonic() + 30
    while len(m.workers()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(os.path.join(marks, "READY"), "w") as f:
        f.write(str(n))
    while not os.path.exists(os.path.join(marks, "STOP")) and time.monotonic() < deadline + 60:
        time.sleep(0.05)
