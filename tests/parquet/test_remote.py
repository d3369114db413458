"""Parquet tables on the S3, GCS and Azure emulators: exact samples and random access; at the
S3 proxy, only the projected columns' chunk ranges are requested and a warm start reads no
footer; a dataset mixing an MDS stream and a Parquet stream."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from astream import MDSWriter, Stream, StreamingDataset
from astream.storage.sync import upload

from .conftest import same


def _upload(root: str, bucket: str) -> str:
    url = f"{bucket}/pq-{uuid.uuid4().hex[:8]}"
    upload(root, url)
    return url


@pytest.mark.parametrize("backend", ["s3", "gcs", "azure"])
def test_backends_exact_samples_and_random_access(
    backend: str, pq_table: Any, fresh: Any, request: pytest.FixtureRequest
) -> None:
    root, rows = pq_table
    bucket = request.getfixturevalue(
        {"s3": "s3_bucket", "gcs": "gcs_bucket", "azure": "azure_container"}[backend]
    )
    url = _upload(root, bucket)
    cols = ["label", "img", "nest"]
    ds = StreamingDataset(
        streams=[Stream(remote=url, local=fresh(), format="parquet", columns=cols)],
        batch_size=8,
        shuffle=True,
    )
    want = [{c: r[c] for c in cols} for r in rows]
    got = sorted(ds, key=lambda s: s["label"])
    assert len(got) == 170 and all(same(g, w) for g, w in zip(got, want))
    fresh_ds = StreamingDataset(
        remote=url, local=fresh("ra"), batch_size=1, stream_config={"format": "parquet"}
    )
    for i in (0, 57, 169):
        assert same(fresh_ds[i], rows[i])


def _spans(ranges: list[tuple[str, str]], key: str) -> list[tuple[int, int]]:
    out = []
    for path, header in ranges:
        if path.endswith("/" + key) and header.startswith("bytes="):
            a, b = header[6:].split("-")
            out.append((int(a), int(b) + 1))
    return out


def test_proxy_sees_only_projected_chunks_and_no_footer_on_warm_start(
    pq_table: Any, s3_bucket: str, s3_server: Any, make_proxy: Any, fresh: Any
) -> None:
    root, _ = pq_table
    url = _upload(root, s3_bucket)
    proxy = make_proxy(s3_server.url)
    opts = {"endpoint_url": proxy.url}
    local = fresh()

    def build() -> StreamingDataset:
        return StreamingDataset(
            streams=[Stream(remote=url, local=local, format="parquet", columns=["tok"])],
            batch_size=8,
            storage_options=opts,
        )

    ds = build()
    footers = sum(len(_spans(proxy.stats.ranges, f"part-{k}.parquet")) for k in range(4))
    assert footers == 4  # one suffix-sized GET per file (footers are < 64 KiB)
    proxy.reset_stats()
    assert len(list(ds)) == 170
    allowed: dict[str, list[tuple[int, int]]] = {}
    other: dict[str, list[tuple[int, int]]] = {}
    for e in ds.catalog.entries:
        f = e.source  # type: ignore[attr-defined]
        allowed.setdefault(f.key, []).extend(e.ranges())  # type: ignore[attr-defined]
        g = f.row_groups[e.row_group]  # type: ignore[attr-defined]
        for c, name in enumerate(f.columns):
            if name != "tok":
                other.setdefault(f.key, []).extend(g.chunks[c])
    fetched = 0
    for key, spans in allowed.items():
        got = _spans(proxy.stats.ranges, key)
        assert sorted(got) == sorted(spans)  # exactly the projected chunks, each once
        for s, e in got:
            fetched += e - s
            assert not any(s < oe and os_ < e for os_, oe in other[key])  # no other column
    sizes = sum(f.size for f in {id(e.source): e.source for e in ds.catalog.entries}.values())  # type: ignore[attr-defined]
    assert 0 < fetched < sizes // 2
    # a restart over the same cache reads no footer (only the listing)
    proxy.reset_stats()
    ds2 = build()
    assert len(ds2) == 170
    assert [r for r in proxy.stats.ranges if r[0].endswith(".parquet")] == []


def test_mixed_mds_and_parquet_streams(pq_table: Any, tmp_path: Any, fresh: Any) -> None:
    root, rows = pq_table
    mds = str(tmp_path / "mds")
    with MDSWriter(out=mds, columns={"label": "int", "text": "str"}, size_limit=400) as w:
        for i in range(60):
            w.write({"label": 1000 + i, "text": f"m{i}"})
    ds = StreamingDataset(
        streams=[
            Stream(local=mds, proportion=0.5),
            Stream(
                remote=root,
                local=fresh(),
                format="parquet",
                columns=["label", "txt"],
                proportion=0.5,
            ),
        ],
        batch_size=4,
        shuffle=True,
        epoch_size=120,
    )
    got = list(ds)
    assert len(got) == 120
    pq_labels = [s["label"] for s in got if "txt" in s]
    mds_labels = [s["label"] for s in got if "text" in s]
    assert len(pq_labels) == 60 and len(mds_labels) == 60
    assert len(set(pq_labels)) == 60 and set(pq_labels) <= set(range(170))
    assert sorted(mds_labels) == list(range(1000, 1060))
    for s in got:
        if "txt" in s:
            assert s["txt"] == rows[s["label"]]["txt"]
