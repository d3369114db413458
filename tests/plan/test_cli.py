"""``astream plan``: the command's table, JSON, HTML report and errors, on real datasets."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from astream import MDSWriter
from astream.cli import main
from astream.plan import PlanStream, simulate, simulate_index

SVG = "{http://www.w3.org/2000/svg}"


def _json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)


def _write(path: str, n: int, base: int = 0) -> str:
    with MDSWriter(out=path, columns={"x": "int"}, size_limit=2_000) as w:
        for i in range(n):
            w.write({"x": base + i})
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory: Any) -> str:
    return _write(str(tmp_path_factory.mktemp("plan") / "a"), 3000)


ARGS = ["--batch-size", "8", "--ranks", "2", "--workers", "2", "--epochs", "2",
        "--cache-limit", "12000", "--shuffle-block-size", "200", "--bandwidth-mbps", "100",
        "--latency-ms", "20", "--step-ms", "5"]  # fmt: skip


def test_plan_table_json_and_report(data: str, tmp_path: Any, capsys: Any) -> None:
    j, h = str(tmp_path / "p.json"), str(tmp_path / "p.html")
    assert main(["plan", data, *ARGS, "--json", j, "--report", h,
                 "--shuffle-algo", "none", "--shuffle-algo", "astream"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    want = simulate(data, batch_size=8, ranks_per_node=2, workers=2, epochs=2, cache_limit=12000,
                    cache_policy=("next_use", "lru"), shuffle_block_size=200,
                    bandwidth_mbps=100, latency_ms=20, step_ms=5,
                    shuffles=("none", "astream"))  # fmt: skip
    got = _json(j)["results"]
    assert [(r["shuffle"], r["policy"]) for r in got] == [(r.shuffle, r.policy) for r in want]
    assert [(r["shuffle"], r["policy"]) for r in got][:2] == [("none", "next_use"), ("none", "lru")]
    for g, w in zip(got, want):
        assert [e["bytes"] for e in g["epochs"]] == [f.bytes for f in w.epochs]
        assert [e["redownloads"] for e in g["epochs"]] == [f.redownloads for f in w.epochs]
        assert [e["high_water"] for e in g["epochs"]] == [f.high_water for f in w.epochs]
        assert [e["stall_share"] for e in g["epochs"]] == [f.stall_share for f in w.epochs]
        assert g["quality"] == w.quality
    # the table: a header and one row per shuffle x policy x node x epoch
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["SHUFFLE", "POLICY", "NODE", "EPOCH"]
    rows = [ln.split() for ln in lines[1:9]]
    assert [r[:4] for r in rows[:2]] == [
        ["none", "next_use", "0", "0"],
        ["none", "next_use", "0", "1"],
    ]
    lru1 = next(w for w in want if (w.shuffle, w.policy) == ("astream", "lru")).epochs[1]
    assert any(
        r[:4] == ["astream", "lru", "0", "1"] and r[4] == f"{lru1.downloads:,}" for r in rows
    )
    # the report: two charts with one line per shuffle x policy, and the table
    with open(h) as f:
        page = f.read()
    svgs = [ET.fromstring(s) for s in re.findall(r"<svg.*?</svg>", page, re.S)]
    assert len(svgs) == 2
    assert all(len(s.findall(f".//{SVG}polyline")) == 4 for s in svgs)
    texts = [t.text for t in svgs[1].iter(f"{SVG}text")]
    assert "cache_limit 11.7 KiB" in texts and "epoch 1" in texts  # the limit, the epoch mark
    assert page.count("<tr>") == 1 + 8
    # the charts' data: bytes so far end at the node's bytes over both epochs; the occupancy
    # peaks at its high-water mark; the epoch boundary is marked
    from astream.cli.plan import _node_series

    cum, occ, marks = _node_series(want, 0)
    for w, (label, x, y), (_, _, o) in zip(want, cum, occ):
        assert label == f"{w.shuffle} / {w.policy}"
        assert int(y[-1]) == w.total("bytes") and int(x[-1]) == 2 * w.epochs[0].steps - 1
        assert int(o.max()) == max(f.high_water for f in w.epochs)
    assert marks == [(float(want[0].epochs[0].steps), "epoch 1")]


def test_plan_every_algorithm_with_canonical_nodes(data: str, capsys: Any) -> None:
    assert main(["plan", data, "--batch-size", "8", "--ranks", "2", "--nodes", "2",
                 "--num-canonical-nodes", "2"]) == 0  # fmt: skip
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines()[1:]]
    assert [r[0] for r in rows[::2]] == [
        "none",
        "astream",
        "py1e",
        "py1br",
        "py1s",
        "py2s",
        "naive",
    ]
    assert {r[1] for r in rows} == {"next_use"}  # no limit: one policy


def test_plan_streams_config(tmp_path: Any, capsys: Any) -> None:
    a = _write(str(tmp_path / "a"), 2000)
    b = _write(str(tmp_path / "b"), 1000, base=10_000)
    cfg = tmp_path / "streams.json"
    cfg.write_text(json.dumps({"streams": [{"local": a, "proportion": 3},
                                           {"remote": b, "proportion": 1}],
                               "epoch_size": 800}))  # fmt: skip
    j = str(tmp_path / "p.json")
    assert main(["plan", str(cfg), "--batch-size", "8", "--shuffle-algo", "astream",
                 "--json", j]) == 0  # fmt: skip
    from astream.cli.common import read_index

    want = simulate_index([PlanStream(read_index(a), proportion=3),
                           PlanStream(read_index(b), proportion=1)],
                          batch_size=8, shuffles=["astream"], epoch_size=800)  # fmt: skip
    got = _json(j)["results"][0]["epochs"][0]
    f = want[0].epochs[0]
    assert (got["downloads"], got["bytes"], got["steps"]) == (f.downloads, f.bytes, f.steps)
    assert f.steps == 100  # 800 samples / 8
    assert f.distinct_shards > len(read_index(a).shards)  # both datasets are read


@pytest.mark.parametrize(("algo", "per_node"), [("py1e", 1), ("py1s", 64)])
def test_reference_default_canonical_nodes(data: str, capsys: Any, algo: str,
                                           per_node: int) -> None:  # fmt: skip
    """Without --num-canonical-nodes a reference order takes the reference's default for the
    planned World (the node count; 64 x nodes for py1s/py2s), as the dataset does."""
    args = ["plan", data, "--batch-size", "8", "--ranks", "2", "--nodes", "2",
            "--shuffle-algo", algo]  # fmt: skip
    assert main(args) == 0
    default = capsys.readouterr().out
    assert main([*args, "--num-canonical-nodes", str(2 * per_node)]) == 0
    assert capsys.readouterr().out == default
    assert main([*args, "--num-canonical-nodes", str(4 * per_node)]) == 0
    assert capsys.readouterr().out != default


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cache-limit", "12qq"], "--cache-limit: cannot parse size '12qq'"),
        (
            ["--num-canonical-nodes", "100000000"],
            "--num-canonical-nodes=100000000 is above the supported maximum",
        ),
        (
            ["--nodes", "2", "--report-node", "2", "--report", "x.html"],
            "--report-node: must be < --nodes",
        ),
        (["--epoch-size", "lots"], "--epoch-size"),
    ],
)
def test_plan_errors_name_the_argument(data: str, capsys: Any, extra: list[str],
                                       message: str) -> None:  # fmt: skip
    assert main(["plan", data, "--batch-size", "8", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("astream: error: ") and message in err, err


def test_plan_usage_errors(data: str, tmp_path: Any, capsys: Any) -> None:
    with pytest.raises(SystemExit) as ex:
        main(["plan", data, "--batch-size", "8", "--nodes", "0"])
    assert ex.value.code == 2 and "argument --nodes: must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plan", data, "--batch-size", "8", "--shuffle-algo", "py1b"])
    assert "argument --shuffle-algo: invalid choice: 'py1b'" in capsys.readouterr().err
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps([{"local": data, "weight": 2}]))
    assert main(["plan", str(bad), "--batch-size", "8"]) == 2
    assert "streams[0]: unknown key(s) weight" in capsys.readouterr().err
    assert main(["plan", str(tmp_path / "nothing"), "--batch-size", "8"]) == 2
    assert "no index.json" in capsys.readouterr().err
    assert main(["plan", "synthetic:10", "--batch-size", "8"]) == 2
    assert "synthetic:SAMPLES:SHARDS" in capsys.readouterr().err


def test_plan_png_report(data: str, tmp_path: Any, capsys: Any) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "p.png"
    assert main(["plan", data, *ARGS, "--report", str(png)]) == 0
    assert f"wrote {png}" in capsys.readouterr().out
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert (width, height) == (900, 700)


def test_plan_leaves_out_reference_orders_above_their_cost_bound(capsys: Any) -> None:
    """By default the reference's O(epoch) orders are left out above 2**27 samples, with a note;
    asked for by name they are planned."""
    assert main(["plan", "synthetic:200000000:1000", "--batch-size", "8"]) == 0
    out = capsys.readouterr().out
    assert [ln.split()[0] for ln in out.splitlines()[1:3]] == ["none", "astream"]
    assert "note: left out py1e, py1br, py1s, py2s, naive: 200,000,000 samples" in out
