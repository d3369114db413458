"""Every code block in README.md and every page under docs/ runs here.

Convention (also in docs/index.md, "Code blocks are tested"):
- ```python blocks run in order, in one namespace per document, in a fresh temp directory
  that is the working directory; ``ASTREAM_CACHE_DIR`` points into it.
- ```bash / ```sh / ```console blocks: every line that is not blank or a comment must be an
  ``astream ...`` command (``$ `` prefix and ``\\`` continuations allowed); each runs through the
  CLI in-process and must exit 0.
- Other languages (text, json, toml, yaml) are output or data, not run.
- ``<!-- no-test: reason -->`` on the line right before a fence skips that block, with the
  reason; use it only for what cannot run here (real cloud accounts, the whole test suite).
- Buckets: ``s3://my-bucket`` exists on the session's moto server; a document that mentions
  ``gs://my-bucket`` or ``az://my-container`` also gets fake-gcs-server / Azurite with them.
Blocks in files other engineers own that cannot run are listed in ``EXTERNAL_SKIPS`` with the
reason (their owners should add the marker instead).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
RUN_LANGS = {"python", "py", "bash", "sh", "console", "shell"}
DATA_LANGS = {"text", "json", "toml", "yaml", "yml", "ini", "csv", "diff", "mermaid"}
NO_TEST = re.compile(r"^<!--\s*no-test:\s*(.+?)\s*-->$")
FENCE = re.compile(r"^(\s*)(```|~~~)\s*([\w+-]*)\s*$")

# (document, start of the block's first line) -> why it is skipped; for files this test's owner may
# not edit. Each entry is reported to the lead.
EXTERNAL_SKIPS: dict[tuple[str, str], str] = {}

_created: set[tuple[str, str]] = set()


@dataclass
class Block:
    doc: str
    line: int
    lang: str
    code: str
    skip: str | None


def blocks(path: Path) -> list[Block]:
    rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        prev = lines[i - 1].strip() if i else ""
        start = i + 1
        j = start
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        if j == len(lines):
            raise AssertionError(f"{rel}:{i + 1}: unclosed code fence")
        body = "\n".join(ln[len(indent) :] for ln in lines[start:j])
        marker = NO_TEST.match(prev)
        first = body.strip().splitlines()[0] if body.strip() else ""
        external = [
            why for (d, head), why in EXTERNAL_SKIPS.items() if d == rel and first.startswith(head)
        ]
        skip = marker.group(1) if marker else (external[0] if external else None)
        out.append(Block(rel, i + 1, lang, body, skip))
        i = j + 1
    return out


def _commands(code: str) -> list[list[str]]:
    joined = re.sub(r"\\\n", " ", code)
    cmds = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("$ ")
        argv = shlex.split(line, comments=True)
        if argv[:1] == ["astream"]:
            argv = argv[1:]
        elif argv[:3] in (["python", "-m", "astream"], [".venv/bin/python", "-m", "astream"]):
            argv = argv[3:]
        else:
            raise AssertionError(
                f"not an `astream` command: {line!r} (mark the block <!-- no-test: reason -->)"
            )
        cmds.append(argv)
    return cmds


def _make_bucket(server: Any, kind: str, name: str) -> None:
    if (kind, name) not in _created:
        server.create_bucket(name)
        _created.add((kind, name))


@pytest.fixture
def doc_env(request, tmp_path, monkeypatch, s3_server):
    _make_bucket(s3_server, "s3", "my-bucket")
    text = request.node.callspec.params["doc"].read_text(encoding="utf-8")
    if "gs://my-bucket" in text:
        _make_bucket(request.getfixturevalue("gcs_server"), "gcs", "my-bucket")
    if "az://my-container" in text:
        _make_bucket(request.getfixturevalue("azure_server"), "az", "my-container")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ASTREAM_CACHE_DIR", str(tmp_path / "astream-cache"))
    saved = dict(os.environ)
    yield tmp_path
    os.environ.clear()
    os.environ.update(saved)


def test_every_document_is_collected():
    names = {p.name for p in DOCS}
    assert {"README.md", "quickstart.md", "migrating.md", "concepts.md", "cloud.md"} <= names
    assert {"async.md", "cli.md", "index.md"} <= names


@pytest.mark.parametrize("doc", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_code_blocks_run(doc: Path, doc_env: Path) -> None:
    # a page may set the process's logging up as a user would (docs/migrating.md silences
    # astream's logged warnings): restored after the page, so later tests see the defaults
    import logging

    logger = logging.getLogger("astream")
    level, disabled = logger.level, logging.root.manager.disable
    try:
        _run_blocks(doc)
    finally:
        logger.setLevel(level)
        logging.disable(disabled)


def _run_blocks(doc: Path) -> None:
    from astream.cli import main

    ns: dict[str, Any] = {"__name__": "__docs__"}
    skipped = []
    for b in blocks(doc):
        where = f"{b.doc}:{b.line}"
        if b.lang in DATA_LANGS:
            continue
        if b.lang not in RUN_LANGS:
            raise AssertionError(f"{where}: code block without a known language ({b.lang!r})")
        if b.skip is not None:
            skipped.append(f"{where}: {b.skip}")
            continue
        if b.lang in ("python", "py"):
            try:
                exec(compile(b.code, where, "exec"), ns)
            except Exception as exc:
                raise AssertionError(f"{where}: python block failed: {exc!r}") from exc
            continue
        for argv in _commands(b.code):
            buf_out, buf_err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err):
                code = main(argv)
            assert code == 0, (
                f"{where}: `astream {shlex.join(argv)}` exited {code}:\n"
                f"{buf_out.getvalue()[-2000:]}\n{buf_err.getvalue()[-2000:]}"
            )
    for s in skipped:
        print(f"skipped block {s}")


def test_block_parsing_and_markers(tmp_path):
    md = tmp_path / "x.md"
    md.write_text(
        "text\n<!-- no-test: needs a real bucket -->\n```bash\nastream verify s3://real\n```\n"
        "```python\nx = 1\n```\n\n```bash\n$ astream inspect d \\\n  --json  # c\n"
        "pip install x\n```\n"
    )
    b = blocks(md)
    assert [(x.line, x.lang, x.skip) for x in b] == [
        (3, "bash", "needs a real bucket"),
        (6, "python", None),
        (10, "bash", None),
    ]
    with pytest.raises(AssertionError, match=r"not an `astream` command: 'pip install x'"):
        _commands(b[2].code)
    assert _commands(b[2].code.replace("pip install x", "")) == [["inspect", "d", "--json"]]
