"""Helpers for the CLI tests: run ``astream`` in-process and capture its output."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from astream.cli import main


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """``cli("inspect", path, "--json")`` -> Result(exit code, stdout, stderr)."""

    def run(*argv: str) -> Result:
        capsys.readouterr()
        code = main([os.fspath(a) for a in argv])
        cap = capsys.readouterr()
        return Result(code, cap.out, cap.err)

    return run


def write_jsonl(path: str, rows: list[dict[str, Any]]) -> str:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path
