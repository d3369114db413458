"""``astream convert --engine spark|ray`` and the engine writers at their edges: errors are one
line and exit 2, the output keeps the input's row order, ``dataframe_to_mds`` works from a
plain Python process (no venv on PATH, no PYSPARK_PYTHON), and an empty dataset is an error on
every engine.

One SparkSession for the Spark class and one Ray runtime for the Ray class (class-scoped, so
the JVM is gone before Ray starts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from astream.errors import EmptyDatasetError
from astream.local import LocalDataset
from tests.writer import spark_frame as sf

Cli = Callable[..., tuple[int, str]]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """``cli(*argv)`` -> (exit code, stderr) of ``astream`` run in this process."""
    from astream.cli import main

    def run(*argv: Any) -> tuple[int, str]:
        capsys.readouterr()
        code = main([os.fspath(a) for a in argv])
        return code, capsys.readouterr().err

    return run


def _one_line_error(code: int, err: str, *parts: str) -> None:
    assert code == 2, (code, err[-2000:])
    assert err.startswith("astream: error: ") and err.count("\n") == 1, err[-2000:]
    for p in parts:
        assert p in err, (p, err)


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _two_files(tmp: Path) -> Path:
    """A folder of two JSONL files; the second (by name) is the larger, which Spark's file
    scan would read first."""
    d = tmp / "in"
    d.mkdir()
    _jsonl(d / "a.jsonl", [{"id": i, "t": f"t{i}"} for i in range(300)])
    _jsonl(d / "b.jsonl", [{"id": i, "t": f"t{i}" * 3} for i in range(300, 3000)])
    return d


def _ids(out: Path) -> list[int]:
    return [int(s["id"]) for s in LocalDataset(str(out))]


def test_dataframe_to_mds_from_plain_python(tmp_path: Path) -> None:
    """No venv on PATH and PYSPARK_PYTHON unset: Spark's default worker python (``python3``
    on PATH) cannot import astream; dataframe_to_mds must still work, leave the session's
    worker python as it was, and keep a worker python the user set."""
    venv_bin = os.path.dirname(sys.executable)
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin
    )
    env = {"PATH": path or "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    for k in ("JAVA_HOME", "TMPDIR", "LANG"):
        if k in os.environ:
            env[k] = os.environ[k]
    script = textwrap.dedent(
        """
        import json, sys
        from pyspark.sql import SparkSession
        from astream.spark import dataframe_to_mds
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        df = spark.range(0, 50, 1, 2).selectExpr("id", "concat('r', id) as s")
        res = dataframe_to_mds(df, mds_kwargs={"out": sys.argv[1]})
        print(json.dumps({"counts": res.partition_counts,
                          "exec": spark.sparkContext.pythonExec}))
        spark.stop()
        """
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(out)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"counts": [25, 25], "exec": "python3"}
    assert _ids(out) == list(range(50))


class TestSpark:
    @pytest.fixture(scope="class")
    def spark(self) -> Iterator[Any]:
        # _no_samples lives in this module
        yield from sf.local_spark("astream-engine-edges", "local[2]", __name__)

    def test_cli_errors_are_one_line(self, spark: Any, cli: Cli, tmp_path: Path) -> None:
        missing = tmp_path / "nope.jsonl"
        code, err = cli("convert", missing, tmp_path / "o1", "--engine", "spark")
        _one_line_error(code, err, f"input: {str(missing)!r} does not exist")
        # a key missing from a row: Spark reads null, which MDS cannot store
        src = _jsonl(tmp_path / "null.jsonl", [{"id": 1, "v": 1}, {"id": 2}])
        code, err = cli("convert", src, tmp_path / "o2", "--engine", "spark")
        _one_line_error(code, err, "column 'v'")
        empty = tmp_path / "empty.jsonl"
        empty.write_text("")
        code, err = cli("convert", empty, tmp_path / "o3", "--engine", "spark")
        _one_line_error(code, err, "is empty: no rows to write")

    def test_cli_keeps_input_order(self, spark: Any, cli: Cli, tmp_path: Path) -> None:
        src = _two_files(tmp_path)
        out = tmp_path / "out"
        code, err = cli("convert", src, out, "--engine", "spark", "--format", "jsonl",
                        "--workers", "2", "--size-limit", "8kb")  # fmt: skip
        assert code == 0, err[-3000:]
        assert _ids(out) == list(range(3000))

    def test_empty_dataframe(self, spark: Any, tmp_path: Path) -> None:
        from astream.spark import dataframe_to_mds

        df = spark.range(0, 10, 1, 2)
        with pytest.raises(EmptyDatasetError, match="dataframe is empty: no rows to write"):
            dataframe_to_mds(df.limit(0), mds_kwargs={"out": str(tmp_path / "a")})
        # rows, but a udf_iterable that makes no sample of them
        with pytest.raises(EmptyDatasetError, match="no rows to write"):
            dataframe_to_mds(
                df,
                mds_kwargs={"out": str(tmp_path / "b"), "columns": {"id": "int"}},
                udf_iterable=_no_samples,
            )
        assert not (tmp_path / "b" / "index.json").exists()


def _no_samples(pdf: Any) -> Iterator[dict[str, Any]]:
    return iter(())


class TestRay:
    @pytest.fixture(scope="class")
    def ray(self) -> Iterator[Any]:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        yield ray
        ray.shutdown()

    def test_cli_errors_are_one_line(self, ray: Any, cli: Cli, tmp_path: Path) -> None:
        missing = tmp_path / "nope.jsonl"
        code, err = cli("convert", missing, tmp_path / "o1", "--engine", "ray")
        _one_line_error(code, err, f"input: {str(missing)!r} does not exist")
        src = _jsonl(tmp_path / "mixed.jsonl", [{"id": 1, "v": 1}, {"id": 2, "v": "x"}])
        code, err = cli("convert", src, tmp_path / "o2", "--engine", "ray")
        _one_line_error(code, err, str(src), "--engine local")
        empty = tmp_path / "empty.jsonl"
        empty.write_text("")
        code, err = cli("convert", empty, tmp_path / "o3", "--engine", "ray")
        _one_line_error(code, err, "is empty: no rows to write")

    def test_cli_keeps_input_order(
        self, ray: Any, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from astream.cli import engines

        # Ray Data keeps block order only when told: the write must run with preserve_order
        # (without it a loaded machine wrote b.jsonl's rows first), and the caller's setting
        # comes back after
        seen = []
        write = engines._ray_write

        def recording(*a: Any) -> list[int]:
            seen.append(ray.data.DataContext.get_current().execution_options.preserve_order)
            return write(*a)

        monkeypatch.setattr(engines, "_ray_write", recording)
        src = _two_files(tmp_path)
        out = tmp_path / "out"
        code, err = cli("convert", src, out, "--engine", "ray", "--format", "jsonl",
                        "--workers", "2", "--size-limit", "8kb")  # fmt: skip
        assert code == 0, err[-3000:]
        assert _ids(out) == list(range(3000))
        assert seen == [True]
        assert ray.data.DataContext.get_current().execution_options.preserve_order is False

    def test_empty_dataset(self, ray: Any, tmp_path: Path) -> None:
        from astream.ray import MDSDatasink

        for k, ds in enumerate([ray.data.range(0), ray.data.range(20).filter(lambda r: False)]):
            out = tmp_path / f"o{k}"
            with pytest.raises(EmptyDatasetError, match="dataset is empty: no rows to write"):
                ds.write_datasink(MDSDatasink(str(out), {"id": "int64"}))
            assert not out.exists() or not os.listdir(out)
