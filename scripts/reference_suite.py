"""Run the reference's own test suite (mosaicml-streaming 0.13.0, unchanged) against astream.

The suite is fetched, never vendored: its test files come from the reference's sdist (``pip
download``), ``tests/common/``, ``tests/conftest.py`` and ``tests/__init__.py`` (which the sdist
leaves out) from a git checkout or bare git directory at tag ``v0.13.0``. They are copied into
a throwaway run directory beside a SHIM: a pytest plugin whose ``sys.meta_path`` finder makes
``streaming.*`` modules out of astream's. A reference module with an astream counterpart is that
astream module itself (tests that patch it patch astream); a reference package is a thin module
that forwards attribute reads to its counterpart; a name astream lacks raises ImportError or
AttributeError, as a missing name does -- nothing is faked.

pytest runs in a subprocess with astream's interpreter, one test at a time (``-p no:randomly``,
a per-test timeout), writing JUnit XML. Every failure and error is put in one class (``classify``)
and the counts go to ``<out>.md`` (per class, per file) and the raw records to ``<out>.json``.

    python scripts/reference_suite.py --tests /tmp/sd/mosaicml_streaming-0.13.0/tests \\
        --common /work/.mirror/mosaicml+streaming/repo
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TAG = "v0.13.0"
VERSION = "0.13.0"

# Reference module -> the astream module that provides it (None: a namespace only). A module
# missing here has no astream counterpart: importing it is a ModuleNotFoundError.
MODULES: dict[str, str | None] = {
    "streaming": "astream",
    "streaming.base": "astream",
    "streaming.base.dataset": "astream.torch.dataset",
    "streaming.base.dataloader": "astream.torch.dataloader",
    "streaming.base.local": "astream.local",
    "streaming.base.stream": "astream.stream",
    "streaming.base.util": "astream.base.util",
    "streaming.base.array": "astream.base.array",
    "streaming.base.storage": "astream.base.storage",
    "streaming.base.storage.download": "astream.base.storage",
    "streaming.base.format": "astream.writer",
    "streaming.base.format.mds": "astream.writer.mds",
    "streaming.base.format.mds.writer": "astream.writer.mds",
    "streaming.base.format.mds.encodings": "astream.base.format.mds.encodings",
    "streaming.base.format.json": "astream.writer.xsv",
    "streaming.base.format.json.writer": "astream.writer.xsv",
    "streaming.base.format.xsv": "astream.writer.xsv",
    "streaming.base.format.xsv.writer": "astream.writer.xsv",
    "streaming.base.hashing": "astream.base.hashing",
    "streaming.base.compression": "astream.base.compression",
    "streaming.base.distributed": "astream.base.distributed",
    "streaming.base.registry_utils": "astream.base.registry_utils",
    "streaming.base.converters": "astream.spark",
    "streaming.base.converters.dataframe_to_mds": "astream.spark",
}

# Reference modules that are its machinery, not what user code imports. ``World`` is one: the
# reference's carries this process's rank and worker and feeds its partitioner, spanner and
# shared memory; astream's ``astream.core.world.World`` is another class (a job's shape only), so
# mapping one onto the other would report signature errors that say nothing about astream.
INTERNAL_MODULES = (
    "streaming.base.world",
    "streaming.base.shared",
    "streaming.base.spanner",
    "streaming.base.batching",
    "streaming.base.constant",
    "streaming.base.partition",
    "streaming.base.shuffle",
    "streaming.base.sampling",
    "streaming.base.format.base",
    "streaming.base.format.index",
    "streaming.base.format.mds.reader",
    "streaming.base.format.json.reader",
    "streaming.base.format.xsv.reader",
)

CLASSES = (
    "astream lacks the name",
    "behaves differently",
    "another exception type/message",
    "test reaches into reference internals",
    "needs a service/network",
    "needs a package not installed",
    "needs an older pytest",
    "timed out",
)

SHIM = '''"""pytest plugin written by scripts/reference_suite.py: ``streaming.*`` from astream."""
import importlib
import importlib.abc
import importlib.util
import sys
import types

MODULES = {modules!r}
LENIENT = {lenient!r}
PACKAGES = {{p for name in MODULES for p in [name.rpartition(".")[0]] if p}}


def _lacks(name):
    parent, _, leaf = name.rpartition(".")
    return ImportError(
        f"cannot import name {{leaf!r}} from {{parent!r}} (astream lacks it; lenient shim)",
        name=parent,
    )


class Forward(types.ModuleType):
    """A reference package (or, lenient, any mapped module): attribute reads go to its astream
    counterpart; submodules are imported through the finder."""

    def __getattr__(self, attr):
        target = MODULES.get(self.__name__)
        if attr.startswith("__"):
            raise AttributeError(attr)
        if target is not None:
            try:
                return getattr(importlib.import_module(target), attr)
            except AttributeError:
                if not LENIENT:
                    raise AttributeError(f"module {{self.__name__!r}} has no attribute "
                                         f"{{attr!r}} (astream: {{target}})") from None
        if LENIENT:
            return importlib.import_module(f"{{self.__name__}}.{{attr}}")
        raise AttributeError(f"module {{self.__name__!r}} has no attribute {{attr!r}}")


class Absent(Forward):
    """Lenient only: a name astream lacks. Importing it succeeds; any use raises ImportError."""

    def __call__(self, *args, **kwargs):
        raise _lacks(self.__name__)

    def __getitem__(self, key):
        raise _lacks(self.__name__)

    def __iter__(self):
        raise _lacks(self.__name__)

    def __mro_entries__(self, bases):
        raise _lacks(self.__name__)


class Loader(importlib.abc.Loader):
    def create_module(self, spec):
        if spec.name not in MODULES:
            return Absent(spec.name)
        if spec.name in PACKAGES or LENIENT:
            return Forward(spec.name)
        return None

    def exec_module(self, module):
        name = module.__name__
        if name in PACKAGES or LENIENT or name not in MODULES:
            module.__path__ = []
            return
        sys.modules[name] = importlib.import_module(MODULES[name])


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "streaming" and not name.startswith("streaming."):
            return None
        if name not in MODULES and not LENIENT:
            raise ModuleNotFoundError(f"No module named {{name!r}} (astream has none)", name=name)
        package = name in PACKAGES or LENIENT or name not in MODULES
        return importlib.util.spec_from_loader(name, Loader(), is_package=package)


sys.meta_path.insert(0, Finder())
'''

PYTEST_INI = """[pytest]
markers =
    world_size(val): distributed test
    daily: daily regression
    remote: reads a real remote
"""


def _git(common: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={common}", *args], check=True, capture_output=True
    ).stdout


def _sdist_tests(work: Path) -> Path:
    """The sdist's tests directory, downloaded with pip into ``work``."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            f"mosaicml-streaming=={VERSION}",
            "--no-binary",
            ":all:",
            "--no-deps",
            "-q",
            "-d",
            str(work),
        ],
        check=True,
    )
    tarball = next(work.glob("mosaicml_streaming-*.tar.gz"))
    with tarfile.open(tarball) as tar:
        tar.extractall(work, filter="data")
    return next(work.glob("mosaicml_streaming-*/tests"))


def _copy_common(common: Path, dest: Path) -> None:
    """``tests/common/``, ``conftest.py`` and ``__init__.py`` at ``TAG`` from a checkout or a
    bare git directory."""
    wanted = ("tests/common", "tests/conftest.py", "tests/__init__.py")
    if (common / "tests" / "common").is_dir() and not (common / "HEAD").is_file():
        for rel in wanted:
            src = common / rel
            to = dest / Path(rel).relative_to("tests")
            shutil.copytree(src, to) if src.is_dir() else shutil.copy2(src, to)
        return
    names = _git(common, "ls-tree", "-r", "--name-only", TAG, *wanted).decode().split()
    for rel in names:
        to = dest / Path(rel).relative_to("tests")
        to.parent.mkdir(parents=True, exist_ok=True)
        to.write_bytes(_git(common, "show", f"{TAG}:{rel}"))


def assemble(tests: Path | None, common: Path | None, run: Path) -> Path:
    """The reference's tests tree under ``run/tests``: ``tests`` as it is when it holds
    ``conftest.py`` and ``common/``; else its test files (or the sdist's, downloaded, when
    ``tests`` is None) plus ``common``'s."""
    dest = run / "tests"
    if tests is not None and (tests / "conftest.py").is_file() and (tests / "common").is_dir():
        shutil.copytree(tests, dest)
        return dest
    if common is None:
        raise SystemExit("--common is needed: the sdist has no tests/common nor conftest.py")
    src = tests if tests is not None else _sdist_tests(run / "sdist")
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    _copy_common(common, dest)
    return dest


def write_shim(run: Path, lenient: bool) -> None:
    (run / "shim").mkdir()
    text = SHIM.format(modules=MODULES, lenient=lenient)
    (run / "shim" / "astream_ref_shim.py").write_text(text)
    (run / "pytest.ini").write_text(PYTEST_INI)


def run_pytest(run: Path, args: argparse.Namespace) -> tuple[int, float]:
    """pytest in a subprocess with astream's interpreter; returns (exit code, seconds)."""
    cmd = [
        args.python,
        "-m",
        "pytest",
        *args.paths,
        "-p",
        "astream_ref_shim",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "--timeout",
        str(args.timeout),
        "--tb=native",
        "-q",
        "-rN",
        "-m",
        "not daily and not remote",
        "-o",
        "junit_family=xunit1",
        "--continue-on-collection-errors",
        "--junitxml",
        str(run / "junit.xml"),
    ]
    for node in args.deselect:
        cmd += ["--deselect", node]
    if args.k:
        cmd += ["-k", args.k]
    env = dict(os.environ)
    (run / "home").mkdir()
    (run / "tmp").mkdir()
    env.update(
        PYTHONPATH=f"{run / 'shim'}{os.pathsep}{run}",
        HOME=str(run / "home"),
        TMPDIR=str(run / "tmp"),
        PYTHONDONTWRITEBYTECODE="1",
        PATH=f"{ROOT / '.tools' / 'node_modules' / '.bin'}{os.pathsep}{env.get('PATH', '')}",
    )
    started = time.monotonic()
    with open(run / "pytest.log", "w") as log:
        proc = subprocess.run(cmd, cwd=run, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc.returncode, time.monotonic() - started


_NETWORK = re.compile(
    r"EndpointConnectionError|Could not connect to the endpoint|NoCredentialsError|"
    r"DefaultCredentialsError|ConnectionRefusedError|Max retries exceeded|"
    r"Name or service not known|Temporary failure in name resolution|getaddrinfo|"
    r"ConnectTimeout|ClientConnectorError|Unable to locate credentials"
)
_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")
_CANNOT_IMPORT = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")
_MODULE_ATTR = re.compile(r"module '([\w.]+)' has no attribute '(\w+)'")
_NO_ATTR = re.compile(r"(?<!module )'([\w.]+)'(?: object)? has no attribute '(\w+)'")
_SHM = re.compile(r"SharedMemory|/dev/shm|shm_prefix|_shm_|SharedArray|SharedBarrier")


def _reference_name(module: str) -> str:
    """The reference module a (shim or astream) module name stands for."""
    if module.startswith("streaming"):
        return module
    for ref, target in MODULES.items():
        if target == module and ref != "streaming.base":
            return ref
    return module


def _internal(module: str, name: str = "") -> bool:
    return name.startswith("_") or any(
        module == m or module.startswith(m + ".") for m in INTERNAL_MODULES
    )


def _missing_name(text: str) -> tuple[str, str, bool] | None:
    """``(module, name, is_import)`` of the last missing module/name the traceback reports;
    ``is_import`` when an import (not an attribute read) failed."""
    last: tuple[int, str, str, bool] | None = None
    for pattern, mod, name, is_import in ((_MISSING_MODULE, 1, 0, True),
                                          (_CANNOT_IMPORT, 2, 1, True),
                                          (_MODULE_ATTR, 1, 2, True),
                                          (_NO_ATTR, 1, 2, False)):  # fmt: skip
        for m in pattern.finditer(text):
            found = (m.start(), m.group(mod), m.group(name) if name else "", is_import)
            last = found if last is None or found > last else last
    return None if last is None else last[1:]


def _label(module: str, name: str) -> str:
    """``module.name``, cut after its first class (a lenient chain names what was used of an
    absent class, ``...upload.CloudUploader.get``: the class is what astream lacks)."""
    parts = f"{module}.{name}".strip(".").split(".")
    if parts[0] != "streaming":
        return ".".join(parts)
    for i, part in enumerate(parts):
        if part[:1].isupper():
            return ".".join(parts[: i + 1])
    return ".".join(parts)


def classify(message: str, text: str) -> tuple[str, str]:
    """(class, the reason in a few words) of one failure or error, from its JUnit message and
    native traceback. The rules run in order; the first that matches decides."""
    both = f"{message}\n{text}"
    if "Timeout >" in both or "Failed: Timeout" in both:
        return "timed out", "over the per-test timeout"
    if _NETWORK.search(both):
        return "needs a service/network", _NETWORK.search(both).group(0)  # type: ignore[union-attr]
    if "Marks cannot be applied to fixtures" in both:
        return "needs an older pytest", "a mark on a fixture (an error since pytest 8)"
    if "unittest/mock.py" in text and re.search(r"patch\(\s*['\"]streaming\.", text):
        return "test reaches into reference internals", "patches a reference module"
    missing = _missing_name(both)
    if missing is not None and re.search(r"ImportError|AttributeError|ModuleNotFound", both):
        module, name, is_import = missing
        if is_import and module.split(".")[0] not in ("streaming", "astream", "tests"):
            return "needs a package not installed", module
        ref = _reference_name(module)
        label = _label(ref, name)
        if _internal(ref, name):
            return "test reaches into reference internals", label
        return "astream lacks the name", label
    if _SHM.search(both):
        return "test reaches into reference internals", "shared-memory names"
    if re.search(
        r"DID NOT (RAISE|WARN)|Regex pattern did not match|"
        r"did not match any of the warnings",
        both,
    ):
        return "another exception type/message", message.splitlines()[0][:120] if message else ""
    if re.match(r"(AssertionError|assert )", message or "") or "\nAssertionError" in text:
        return "behaves differently", (message or "").splitlines()[0][:120]
    return "another exception type/message", (message or "").splitlines()[0][:120]


def _file_of(classname: str, name: str) -> str:
    dotted = classname or name
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_"):
            return "/".join(parts[: i + 1]) + ".py"
    return dotted


def parse_junit(path: Path) -> list[dict[str, Any]]:
    """One record per test case: file, test, outcome, and for failures the class."""
    records = []
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        rec: dict[str, Any] = {
            "file": case.get("file") or _file_of(classname, name),
            "test": f"{classname}::{name}" if classname else name,
            "outcome": "passed",
            "seconds": float(case.get("time") or 0),
        }
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is None:
                continue
            rec["outcome"] = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
            message = node.get("message") or ""
            rec["message"] = message[:500]
            if tag != "skipped":
                rec["class"], rec["reason"] = classify(message, node.text or "")
                if not classname:
                    rec["outcome"] = "collection error"
            break
        records.append(rec)
    return records


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    outcomes = Counter(r["outcome"] for r in records)
    classes = Counter(r["class"] for r in records if "class" in r)
    per_file: dict[str, Counter[str]] = defaultdict(Counter)
    for r in records:
        per_file[r["file"]][r["outcome"]] += 1
        if "class" in r:
            per_file[r["file"]][r["class"]] += 1
    return {
        "outcomes": dict(outcomes),
        "classes": {c: classes.get(c, 0) for c in CLASSES},
        "per_file": {f: dict(c) for f, c in sorted(per_file.items())},
    }


def _table(rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return out


def _reason_lines(records: list[dict[str, Any]], cls: str) -> list[str]:
    reasons = Counter(r["reason"] for r in records if r.get("class") == cls)
    return [f"- `{reason}`: {n}" for reason, n in reasons.most_common()]


def write_report(
    out: Path, summary: dict[str, Any], records: list[dict[str, Any]], meta: dict[str, Any]
) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(
        json.dumps({"meta": meta, **summary, "tests": records}, indent=1) + "\n"
    )
    o = summary["outcomes"]
    lines = [
        "# The reference's own test suite against astream",
        "",
        f"mosaicml-streaming {VERSION}'s tests, unchanged, run through the `streaming` shim "
        "of `scripts/reference_suite.py` (see its docstring). Raw records: "
        "[reference-suite.json](reference-suite.json).",
        "",
        f"Command: `{meta['command']}` ({meta['seconds']:.0f} s, pytest exit {meta['exit']}), "
        f"{meta['shim']} shim.",
        "",
        "| outcome | tests |",
        "|---|---|",
        *[
            f"| {k} | {o.get(k, 0)} |"
            for k in ("passed", "failed", "error", "collection error", "skipped")
        ],
        "",
        "A collection error is a whole test file that failed to import; its tests did not run.",
        "",
        "## Failures and errors by class",
        "",
        *_table([["class", "count"]] + [[c, str(n)] for c, n in summary["classes"].items()]),
        "",
    ]
    if meta["deselected"]:
        lines += [
            "## Deselected (hang past the timeout)",
            "",
            *[f"- `{d}`" for d in meta["deselected"]],
            "",
        ]
    short = [c for c in CLASSES if summary["classes"][c]]
    header = ["file", "passed", "failed", "error", "coll. error", "skipped", *short]
    rows = [header]
    for f, c in summary["per_file"].items():
        rows.append(
            [
                f,
                *(
                    str(c.get(k, 0))
                    for k in ("passed", "failed", "error", "collection error", "skipped")
                ),
                *(str(c.get(k, 0)) for k in short),
            ]
        )
    lines += ["## Per file", "", *_table(rows), ""]
    for cls in short:
        lines += [f"## {cls}: what", "", *_reason_lines(records, cls), ""]
    out.with_suffix(".md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--tests",
        type=Path,
        help="the reference's tests tree (ready, or the "
        "sdist's tests/ to complete with --common); left out: pip download it",
    )
    ap.add_argument("--common", type=Path, help="git checkout or bare git dir of the reference")
    ap.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--timeout", type=int, default=120, help="seconds per test")
    ap.add_argument("--deselect", action="append", default=[], help="node id (repeatable)")
    ap.add_argument("-k", default="", help="pytest -k expression")
    ap.add_argument("paths", nargs="*", default=["tests"], help="test paths in the run dir")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "reference-suite")
    ap.add_argument(
        "--lenient",
        action="store_true",
        help="a name astream lacks imports as a "
        "placeholder that raises ImportError when used, so that the rest of its "
        "file runs; mapped modules become forwarding proxies (patches do not reach "
        "astream)",
    )
    ap.add_argument("--keep", type=Path, help="run in this (new) directory and keep it")
    args = ap.parse_args(argv)
    run = args.keep or Path(tempfile.mkdtemp(prefix="astream-refsuite-"))
    run.mkdir(parents=True, exist_ok=True)
    try:
        assemble(args.tests, args.common, run)
        write_shim(run, args.lenient)
        code, seconds = run_pytest(run, args)
        if not (run / "junit.xml").is_file():
            print((run / "pytest.log").read_text()[-3000:], file=sys.stderr)
            return 2
        records = parse_junit(run / "junit.xml")
        summary = summarise(records)
        shown = [
            "pytest",
            *args.paths,
            "-p",
            "no:randomly",
            f"--timeout {args.timeout}",
            "-m 'not daily and not remote'",
            *[f"--deselect {d}" for d in args.deselect],
        ]
        meta = {
            "command": " ".join(shown),
            "seconds": seconds,
            "exit": code,
            "deselected": args.deselect,
            "k": args.k,
            "reference": VERSION,
            "shim": "lenient" if args.lenient else "strict",
        }
        write_report(args.out, summary, records, meta)
        print(json.dumps({"outcomes": summary["outcomes"], "classes": summary["classes"]}))
        return 0
    finally:
        if args.keep is None:
            shutil.rmtree(run, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
