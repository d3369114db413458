"""Run a golden-fixture generator under the reference's venv (mosaicml-streaming 0.13.0).

Each ``scripts/gen_*golden*.py`` runs twice: started with any python, it re-executes itself
(``--inner``) under the peer venv's python, with a stub ``torchvision`` package first on
PYTHONPATH (``import streaming`` imports torchvision, whose registry build does not load beside
the CPU torch here; nothing the generators call uses it) plus the folders the script names.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence

STUBS = {
    "torchvision/__init__.py": "",
    "torchvision/datasets/__init__.py": "class VisionDataset: ...\n\n\nclass CIFAR10: ...\n",
    "torchvision/transforms/__init__.py": "",
    "torchvision/transforms/functional.py": "def to_tensor(x):\n    return x\n",
}
DEFAULT_PEER = os.environ.get("ASTREAM_PEER_PYTHON", "/work/peervenv/bin/python")


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with the two options every generator has."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--peer-python", default=DEFAULT_PEER, help="python of a venv with mosaicml-streaming"
    )
    return ap


def reexec(
    peer_python: str,
    script: str,
    *,
    pythonpath: Sequence[str] = (),
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> int:
    """Run ``script --inner args`` under ``peer_python`` with the stubs; its exit status."""
    with tempfile.TemporaryDirectory() as stub:
        for rel, text in STUBS.items():
            path = os.path.join(stub, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        full = dict(os.environ, **(env or {}))
        full["PYTHONPATH"] = os.pathsep.join([stub, *pythonpath])
        argv = [peer_python, os.path.abspath(script), "--inner", *args]
        return subprocess.call(argv, env=full)


def main(
    script: str,
    doc: str | None,
    inner: Callable[[], None],
    *,
    pythonpath: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> int:
    """The whole ``main`` of a generator without options of its own."""
    a = parser(doc).parse_args()
    if a.inner:
        inner()
        return 0
    return reexec(a.peer_python, script, pythonpath=pythonpath, env=env)


def write_golden(path: str, data: object, **dump: object) -> None:
    """Write a generator's golden file: ``data`` as JSON (``dump``: ``json.dump``'s options),
    a final newline, its directory made if needed."""
    import json

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, **dump)  # type: ignore[arg-type]
        f.write("\n")
